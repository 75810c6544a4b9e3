"""Nearest synthetic texts for query vectors or query texts (inner product, unit vectors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from dpsynrag.handoff.embeddings import load_query_embedder
from dpsynrag.handoff.files import CorpusSource, LoadedCorpus, ensure_loaded
from dpsynrag.models.protocols import Embedder
from dpsynrag.models.vectors import unit_rows


class Hit(NamedTuple):
    """One retrieved row: its position in the corpus (= FAISS id), columns and cosine score."""

    row: int
    id: str
    text: str
    score: float
    cluster_keyword: str
    kept: bool


def _unit_queries(query_vectors: Any, dimension: int) -> np.ndarray:
    array = np.asarray(query_vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array[np.newaxis, :]
    return unit_rows(array, dimension=dimension, what="query vectors")


def search(corpus: CorpusSource, query_vectors: Any, k: int, *,
           kept_only: bool = True) -> list[list[Hit]]:
    """The ``k`` best rows for each query vector, best first.

    ``corpus`` is a directory (loaded and checked) or a :class:`LoadedCorpus`. Query vectors
    are normalised here, so scores are cosine similarities, exactly as the index was built.
    With ``kept_only`` (default) rows the self-filter rejected are never returned.
    """
    import faiss

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    loaded: LoadedCorpus = ensure_loaded(corpus)
    queries = _unit_queries(query_vectors, loaded.dimension)
    kept = loaded.kept_mask()
    allowed = np.flatnonzero(kept) if kept_only else np.arange(len(kept))
    if queries.shape[0] == 0:
        return []
    if allowed.size == 0:
        return [[] for _ in range(queries.shape[0])]
    params = None
    if allowed.size < len(kept):
        params = faiss.SearchParameters(  # type: ignore[call-arg]  # SWIG stubs list no kwargs
            sel=faiss.IDSelectorBatch(allowed.astype(np.int64)))
    scores, ids = loaded.index.search(queries, min(k, int(allowed.size)), params=params)
    columns = loaded.table.select(["id", "text", "cluster_keyword"]).to_pydict()
    return [[Hit(row=int(i), id=str(columns["id"][i]), text=str(columns["text"][i]),
                 score=float(s), cluster_keyword=str(columns["cluster_keyword"][i]),
                 kept=bool(kept[i]))
             for s, i in zip(score_row, id_row, strict=True) if i >= 0]
            for score_row, id_row in zip(scores, ids, strict=True)]


def search_texts(corpus: CorpusSource, queries: Sequence[str], k: int, *,
                 embedder: Embedder | None = None,
                 kept_only: bool = True) -> list[list[Hit]]:
    """:func:`search` for text queries, embedded as the build embedded the corpus.

    ``embedder`` needs ``encode(list[str]) -> (n, dimension)``; by default the embedder named
    in the manifest is loaded offline (:func:`dpsynrag.handoff.load_query_embedder`).
    """
    if isinstance(queries, str):
        raise TypeError("queries must be a list of strings, not a string")
    loaded = ensure_loaded(corpus)
    if embedder is None:
        embedder = load_query_embedder(loaded)
    texts = [str(q) for q in queries]
    if not texts:
        return []
    return search(loaded, embedder.encode(texts), k, kept_only=kept_only)
