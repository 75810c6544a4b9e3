"""The private corpus as query-time mechanisms see it: documents, their embeddings, and the
data-independent structure (tie keys, voter partition) the mechanisms rely on.

Everything here is private (texts, similarities, which documents are retrieved). Nothing is
logged; errors name files and rows, never text.

Two choices matter for privacy and are fixed here, not by callers:

* **Exact retrieval.** Similarities are computed against every document (no approximate
  index whose structure depends on the data). Ties are broken by a public function of the
  document id (SHA-256), never by input position, so adding a document cannot reorder others.
* **Voter partition** (Koga et al.): a document's voter is SHA-256("dpsynrag-voter:" + id)
  mod m, a fixed function of its own id. Adding or removing a document changes one voter's
  partition only, whatever else is in the corpus.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class QueryInputError(ValueError):
    """The private corpus cannot be used by a query-time mechanism (one line, no text)."""


def _id_key(doc_id: str, salt: str) -> int:
    digest = hashlib.sha256(f"{salt}:{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass
class PrivateCorpus:
    """Documents (one per privacy unit) with unit-norm embeddings, row i <-> ids[i]."""

    ids: list[str]
    texts: list[str]
    vectors: np.ndarray
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts) or len(self.ids) != len(self.vectors):
            raise ValueError("ids, texts and vectors must have the same length")
        self.vectors = np.asarray(self.vectors, dtype=np.float32)
        self._tie = np.array([_id_key(i, "dpsynrag-tie") for i in self.ids], dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.ids)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_texts(cls, ids: Sequence[str], texts: Sequence[str], embedder: Any, *,
                   source: str = "") -> PrivateCorpus:
        """Embed ``texts`` with ``embedder`` (unit rows)."""
        vectors = embedder.encode(list(texts)) if texts else np.zeros((0, 1), np.float32)
        return cls(list(ids), list(texts), vectors, source)

    @classmethod
    def from_path(cls, path: str | Path, embedder: Any, *, text_column: str = "text",
                  id_column: str | None = "id", unit_column: str | None = None,
                  max_chars: int | None = 20000) -> PrivateCorpus:
        """Read documents like ``build-corpus`` does and embed them.

        Query-time mechanisms count one document as one privacy unit: a unit column whose
        units own several documents is refused (bound the units first, e.g. with the Beam
        ingest), because every sensitivity below assumes it.
        """
        from dpsynrag.pipeline.inputs import read_documents

        docs = read_documents(path, text_column=text_column, id_column=id_column,
                              unit_column=unit_column, max_chars=max_chars)
        if len(set(docs.units)) != len(docs.units):
            raise QueryInputError(
                f"{path}: some privacy units own several documents; query-time mechanisms need "
                "one document per unit (bound the units first, see runbooks/build-corpus.md)")
        if not docs.texts:
            raise QueryInputError(f"{path}: no usable documents")
        return cls.from_texts(docs.ids, docs.texts, embedder, source=str(path))

    # ------------------------------------------------------------------ retrieval
    def similarities(self, question_vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of every document to one unit-norm question vector (private)."""
        vector = np.asarray(question_vector, dtype=np.float32).reshape(-1)
        return self.vectors.astype(np.float64) @ vector.astype(np.float64)

    def exact_top(self, scores: np.ndarray, n: int, among: np.ndarray | None = None) -> list[int]:
        """Indices of the ``n`` highest ``scores`` (optionally among a subset), best first.

        Ties are broken by the public hash of each document's id, so the result is a
        deterministic function of each document's own score and id.
        """
        candidates = np.arange(len(self)) if among is None else np.asarray(among, dtype=np.int64)
        if n <= 0 or candidates.size == 0:
            return []
        order = np.lexsort((self._tie[candidates], -scores[candidates]))
        return [int(candidates[i]) for i in order[:n]]

    def voter_of(self, m: int) -> np.ndarray:
        """Each document's voter in a data-independent partition into ``m`` parts."""
        if m < 1:
            raise ValueError("the number of voters must be positive")
        return np.array([_id_key(i, "dpsynrag-voter") % m for i in self.ids], dtype=np.int64)
