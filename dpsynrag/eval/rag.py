"""RAG evaluation's retrieval: a corpus (private or synthetic) and its exact FAISS index.

:class:`CorpusIndex`: texts and a ``faiss.IndexFlatIP`` over their unit-normalised embeddings;
built from texts with an embedder, or loaded from a build's output directory
(``corpus.parquet`` + ``index.faiss``, see :mod:`dpsynrag.transforms.emit`). The prompts are
:mod:`dpsynrag.prompts.rag`'s, the greedy answers :mod:`dpsynrag.models.greedy`'s.

Queries and prompts are public by the privacy model; nothing here spends privacy budget.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpsynrag.io.output_files import CORPUS_FILE, INDEX_FILE, MANIFEST_FILE
from dpsynrag.models.protocols import Embedder
from dpsynrag.models.vectors import unit_rows

__all__ = ["CorpusIndex"]


class CorpusIndex:
    """Texts with an exact inner-product FAISS index over their normalised embeddings.

    ``embedder`` needs ``encode(list[str]) -> (n, dimension)`` (normalised here anyway). Pass
    ``vectors`` to reuse embeddings already computed (row i ↔ ``texts[i]``); otherwise the
    texts are encoded. ``ids`` (default ``"0"``, ``"1"``, ...) name the rows.
    """

    def __init__(self, texts: Sequence[str], embedder: Embedder, *, vectors: Any | None = None,
                 ids: Sequence[str] | None = None) -> None:
        import faiss

        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a string")
        self.texts: list[str] = [str(t) for t in texts]
        self.embedder = embedder
        self.ids: list[str] = ([str(i) for i in range(len(self.texts))] if ids is None
                               else [str(i) for i in ids])
        if len(self.ids) != len(self.texts):
            raise ValueError(f"{len(self.ids)} ids for {len(self.texts)} texts")
        if vectors is None:
            vectors = (embedder.encode(self.texts) if self.texts
                       else np.zeros((0, self._embedder_dimension(embedder)), np.float32))
        unit = unit_rows(vectors, rows=len(self.texts))
        self.dimension = int(unit.shape[1])
        self.index = faiss.IndexFlatIP(self.dimension)
        if len(self.texts):
            self.index.add(unit)

    @staticmethod
    def _embedder_dimension(embedder: Embedder) -> int:
        dimension = getattr(embedder, "dimension", None)
        if dimension is None:
            raise ValueError("an empty corpus needs an embedder with a dimension attribute")
        return int(dimension)

    def __len__(self) -> int:
        return len(self.texts)

    def search(self, queries: Sequence[str], k: int) -> list[list[int]]:
        """Positions (into ``self.texts``) of each query's ``k`` nearest texts, best first.

        Fewer than ``k`` when the corpus is smaller; ties are broken by FAISS (lower row
        first for the flat index).
        """
        if isinstance(queries, str):
            raise TypeError("queries must be a list of strings, not a string")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        queries = [str(q) for q in queries]
        if not queries:
            return []
        if not self.texts:
            return [[] for _ in queries]
        vectors = unit_rows(self.embedder.encode(queries), rows=len(queries))
        if vectors.shape[1] != self.dimension:
            raise ValueError(f"query embeddings have dimension {vectors.shape[1]}, the index "
                             f"{self.dimension}")
        _, found = self.index.search(vectors, min(k, len(self.texts)))
        return [[int(i) for i in row if i >= 0] for row in found]

    def search_texts(self, queries: Sequence[str], k: int) -> list[list[str]]:
        """The texts of :meth:`search`'s hits."""
        return [[self.texts[i] for i in row] for row in self.search(queries, k)]

    @classmethod
    def from_build_output(cls, out_dir: str | Path, embedder: Embedder, *,
                          kept_only: bool = True) -> CorpusIndex:
        """Load a build's ``corpus.parquet`` and ``index.faiss`` (no re-embedding).

        The stored vectors are reused (``reconstruct_n``); with ``kept_only`` the rows the
        self-filter rejected (``kept`` false) are dropped, so positions index the kept rows and
        ``ids`` holds their ``syn-…`` ids. ``embedder`` encodes the queries: it must have the
        index's dimension, and if both it and the manifest name a weights sha256 they must
        agree.
        """
        import faiss
        import pyarrow.parquet as pq

        directory = Path(out_dir)
        for name in (CORPUS_FILE, INDEX_FILE):
            if not (directory / name).is_file():
                raise FileNotFoundError(f"{directory}: no {name}; not a dpsynrag output")
        table = pq.read_table(directory / CORPUS_FILE, columns=["id", "text", "kept"])
        index = faiss.read_index(str(directory / INDEX_FILE))
        if index.ntotal != table.num_rows:
            raise ValueError(f"{directory}: index.faiss has {index.ntotal} rows, "
                             f"corpus.parquet {table.num_rows}")
        dimension = getattr(embedder, "dimension", None)
        if dimension is not None and int(dimension) != index.d:
            raise ValueError(f"{directory}: the index has dimension {index.d}, the embedder "
                             f"{int(dimension)}")
        manifest_path = directory / MANIFEST_FILE
        if manifest_path.is_file():
            stored = json.loads(manifest_path.read_text(encoding="utf-8")).get("embedder", {})
            ours = (getattr(embedder, "identity", None) or {}).get("sha256")
            if stored.get("sha256") and ours and stored["sha256"] != ours:
                raise ValueError(f"{directory}: built with embedder {stored.get('name')!r} "
                                 f"(different weights from the one given)")
        ids = [str(v) for v in table.column("id").to_pylist()]
        texts = [str(v) for v in table.column("text").to_pylist()]
        vectors = (index.reconstruct_n(0, index.ntotal) if index.ntotal
                   else np.zeros((0, index.d), dtype=np.float32))
        if kept_only:
            keep = np.asarray([bool(v) for v in table.column("kept").to_pylist()], dtype=bool)
            rows = np.flatnonzero(keep)
            ids = [ids[i] for i in rows]
            texts = [texts[i] for i in rows]
            vectors = vectors[rows] if len(rows) else np.zeros((0, index.d), dtype=np.float32)
        return cls(texts, embedder, vectors=vectors, ids=ids)
