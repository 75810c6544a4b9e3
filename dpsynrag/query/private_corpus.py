"""The private corpus as query-time mechanisms see it: documents, their embeddings, and the
data-independent structure (tie keys, voter partition) the mechanisms rely on.

Everything here is private (texts, similarities, which documents are retrieved). Nothing is
logged; errors name files and rows, never text.

Three choices matter for privacy and are fixed here, not by callers:

* **One document per privacy unit.** ``from_path`` reads the input like the build and, with
  a unit column, bounds each unit to one document by the build's own rule
  (``io.units.bound_units``, ``pick`` or ``concat``): every sensitivity of the
  query-time mechanisms counts one document per unit. ``privacy_unit`` names that unit
  (``privacy_unit_definition``); a charge and its receipt must name the same one.
* **Exact retrieval.** Similarities are computed against every document (no approximate
  index whose structure depends on the data). Ties are broken by a key computed from the
  document's own text, ``sha256("dpsynrag-tie" || 0 || sha256(text))``, never from its
  position or its id (an input id is chosen by whoever wrote the data), so adding or
  removing a document cannot reorder the others. Documents with equal
  text get equal keys; which of them is taken does not matter, their texts are the same.
* **Voter partition** (Koga et al.): a document's voter is
  ``sha256("dpsynrag-voter" || 0 || sha256(text)) mod m``, a fixed public function of the
  document itself. Adding or removing a document therefore changes only the part of the
  voter it falls in; every other document keeps its voter whatever else is in the corpus.
  (Documents with equal text share a voter.)
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpsynrag.accounting.corpus_ledger import RECORD_UNIT, privacy_unit_definition
from dpsynrag.io.paths import cache_root
from dpsynrag.io.private_files import write_private
from dpsynrag.io.reader import read_documents
from dpsynrag.io.units import bound_units
from dpsynrag.models.protocols import Embedder


class QueryInputError(ValueError):
    """The private corpus cannot be used by a query-time mechanism (one line, no text)."""


def record_key(text: str, salt: str) -> int:
    """A 64-bit key of one document computed from its own text only (never its position or
    id): ``sha256(salt || 0 || sha256(text))``, first 8 bytes. Private (derived from the
    text), used only inside the mechanisms, never released."""
    inner = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    digest = hashlib.sha256(salt.encode("utf-8") + b"\x00" + inner).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass
class PrivateCorpus:
    """Documents (one per privacy unit) with unit-norm embeddings, row i <-> ids[i].

    ``ids`` are labels only: no privacy rule reads them. ``privacy_unit`` is the unit one
    document stands for (``privacy_unit_definition``; ``"record"`` unless the corpus was
    bounded by a unit column).
    """

    ids: list[str]
    texts: list[str]
    vectors: np.ndarray
    source: str = ""
    privacy_unit: str = RECORD_UNIT
    ledger_path: str | None = None  # the corpus ledger its queries are charged to (bind)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts) or len(self.ids) != len(self.vectors):
            raise ValueError("ids, texts and vectors must have the same length")
        self.vectors = np.asarray(self.vectors, dtype=np.float32)
        self._keys = np.array([record_key(t, "dpsynrag-tie") for t in self.texts],
                              dtype=np.uint64)
        self._voter_keys = [record_key(t, "dpsynrag-voter") for t in self.texts]

    def __len__(self) -> int:
        return len(self.ids)

    def bind(self, corpus_ledger: str | Path) -> PrivateCorpus:
        """Bind this corpus to the corpus ledger its queries are charged to (resolved path):
        the answer functions then accept receipts of that ledger only. Returns ``self``."""
        self.ledger_path = str(Path(corpus_ledger).resolve())
        return self

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_texts(cls, ids: Sequence[str], texts: Sequence[str], embedder: Embedder, *,
                   source: str = "", privacy_unit: str = RECORD_UNIT) -> PrivateCorpus:
        """Embed ``texts`` with ``embedder`` (unit rows)."""
        vectors = embedder.encode(list(texts)) if texts else np.zeros((0, 1), np.float32)
        return cls(list(ids), list(texts), vectors, source, privacy_unit)

    @classmethod
    def from_path(cls, path: str | Path, embedder: Embedder, *,
                  text_column: str | Sequence[str] = "text", id_column: str | None = "id",
                  unit_column: str | None = None,
                  unit_bound: str = "pick", max_chars: int | None = 20000,
                  cache_dir: Path | None = None) -> PrivateCorpus:
        """Read documents like ``build-corpus`` does, bound each unit to one document, embed.

        With ``unit_column`` each unit's records become one document by the build's rule
        (``bound_units`` with ``unit_bound`` and ``max_chars``), so a query protects the same
        unit as a build with the same options, and ``privacy_unit`` says which. The bounding
        looks at each unit's own records only: adding or removing a unit changes one
        document. ``text_column`` may name several columns, joined as the build joins them
        (``read_documents``). Errors name the file and row, never text.
        """
        definition = privacy_unit_definition(unit_column, unit_bound)
        docs = read_documents(path, text_column=text_column, id_column=id_column,
                              unit_column=unit_column or None, max_chars=max_chars)
        if definition != RECORD_UNIT:
            docs = bound_units(docs, unit_bound, max_chars)
        if not docs.texts:
            raise QueryInputError(f"{path}: no usable documents")
        if cache_dir is None:
            return cls.from_texts(docs.ids, docs.texts, embedder, source=str(path),
                                  privacy_unit=definition)
        vectors = cached_vectors(cache_dir, docs.ids, docs.texts, embedder)
        return cls(list(docs.ids), list(docs.texts), vectors, str(path), definition)

    # ------------------------------------------------------------------ retrieval
    def similarities(self, question_vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of every document to one unit-norm question vector (private)."""
        vector = np.asarray(question_vector, dtype=np.float32).reshape(-1)
        return self.vectors.astype(np.float64) @ vector.astype(np.float64)

    def exact_top(self, scores: np.ndarray, n: int, among: np.ndarray | None = None) -> list[int]:
        """Indices of the ``n`` highest ``scores`` (optionally among a subset), best first.

        Ties are broken by each document's text key (``record_key``), so the order of any
        two documents is a function of their own scores and texts only.
        """
        candidates = np.arange(len(self)) if among is None else np.asarray(among, dtype=np.int64)
        if n <= 0 or candidates.size == 0:
            return []
        order = np.lexsort((self._keys[candidates], -scores[candidates]))
        return [int(candidates[i]) for i in order[:n]]

    def voter_of(self, m: int) -> np.ndarray:
        """Each document's voter in ``m`` parts, a function of that document's text only."""
        if m < 1:
            raise ValueError("the number of voters must be positive")
        return np.array([key % m for key in self._voter_keys], dtype=np.int64)


#: Query-vector cache entries unused this long are deleted, and at most this many are kept.
CACHE_MAX_AGE_S = 7 * 24 * 3600
CACHE_MAX_ENTRIES = 8


def query_cache_dir() -> Path:
    """``<cache root>/query-vectors``: the user's private cache (never beside a ledger that
    may sit on a shared volume)."""
    return cache_root() / "query-vectors"


def cached_vectors(cache_dir: Path | None, ids: Sequence[str], texts: Sequence[str],
                   embedder: Embedder, *, now: float | None = None) -> np.ndarray:
    """The documents' embeddings, computed once per (documents, embedder) and kept in
    ``cache_dir`` (default ``query_cache_dir()``; 0700, files 0600): repeated ``dpsynrag
    query`` calls on one corpus do not re-embed it.

    The vectors are private (they stand for private documents). The file name is an HMAC of
    the embedder's identity and every id and text under a random key kept 0600 in the cache
    (so a name says nothing about the corpus to whoever can list the directory, and no one can
    test a guessed corpus against it); a changed corpus or embedder gets a new entry. Entries
    unused for ``CACHE_MAX_AGE_S`` are deleted and at most ``CACHE_MAX_ENTRIES`` kept (least
    recently used first out) at every call; delete the directory to purge it at once."""
    cache_dir = query_cache_dir() if cache_dir is None else cache_dir
    cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(cache_dir, 0o700)
    key_path = cache_dir / ".key"
    if not key_path.exists():
        write_private(key_path, os.urandom(32))
    identity = getattr(embedder, "identity", None) or {"name": getattr(embedder, "name", "?")}
    digest = hmac.new(key_path.read_bytes(), json.dumps(dict(identity), sort_keys=True,
                                                        default=str).encode(), hashlib.sha256)
    for doc_id, text in zip(ids, texts, strict=True):
        digest.update(b"\0" + doc_id.encode() + b"\1" + text.encode())
    path = cache_dir / f"query-vectors-{digest.hexdigest()[:32]}.npy"
    now = time.time() if now is None else now
    _purge(cache_dir, keep=path, now=now)
    if path.exists():
        vectors = np.load(path, allow_pickle=False)
        if vectors.ndim == 2 and vectors.shape[0] == len(texts):
            os.utime(path, (now, now))  # recently used
            return vectors

    vectors = np.asarray(embedder.encode(list(texts)), dtype=np.float32)
    buffer = io.BytesIO()
    np.save(buffer, vectors, allow_pickle=False)
    write_private(path, buffer.getvalue())
    os.utime(path, (now, now))
    return vectors


def _purge(cache_dir: Path, *, keep: Path, now: float) -> None:
    """Delete entries unused for ``CACHE_MAX_AGE_S`` and all but the newest
    ``CACHE_MAX_ENTRIES - 1`` others (``keep`` is about to be used)."""
    entries = sorted((p for p in cache_dir.glob("query-vectors-*.npy") if p != keep),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for rank, entry in enumerate(entries):
        if rank >= CACHE_MAX_ENTRIES - 1 or now - entry.stat().st_mtime > CACHE_MAX_AGE_S:
            entry.unlink(missing_ok=True)
