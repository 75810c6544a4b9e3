"""LangChain: the corpus as a ``langchain_community.vectorstores.FAISS`` store, not re-embedded.

The store's docstore holds one ``Document`` per synthetic text (``id`` = the corpus id,
metadata ``id``, ``row``, ``cluster_keyword``, ``kept``, ``tokens``); its FAISS index is the
corpus's own ``index.faiss`` (``kept_only=False``) or the self-filtered rows' stored vectors
copied into a new ``IndexFlatIP`` (``kept_only=True``, the default). The distance strategy is
``MAX_INNER_PRODUCT`` without re-normalisation, as built (unit vectors, inner product =
cosine); relevance scores map cosine s to (1 + s) / 2.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from dpsynrag.handoff._extras import import_extra
from dpsynrag.handoff._rows import PROBE_QUERY, row_metadata, selected_rows, subset_index
from dpsynrag.handoff.embeddings import check_query_vector, load_query_embedder
from dpsynrag.handoff.files import CorpusSource, ensure_loaded
from dpsynrag.models.protocols import Embedder

_FEATURE = "the LangChain hand-off"


def cosine_relevance(score: float) -> float:
    """Map a cosine similarity in [-1, 1] to a relevance in [0, 1] (higher is closer)."""
    return min(1.0, max(0.0, (1.0 + float(score)) / 2.0))


@functools.cache
def _embeddings_class() -> type:
    embeddings_module = import_extra("langchain_core.embeddings", _FEATURE)

    base: Any = embeddings_module.Embeddings  # an optional extra's class, untyped here

    class BuildEmbedderEmbeddings(base):
        """LangChain ``Embeddings`` over a dpsynrag embedder (unit-norm float32 rows)."""

        def __init__(self, embedder: Embedder) -> None:
            self.embedder = embedder

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            """Embed texts as the build embedded the corpus."""
            return np.asarray(self.embedder.encode([str(t) for t in texts])).tolist()

        def embed_query(self, text: str) -> list[float]:
            """Embed one query as the build embedded the corpus."""
            return np.asarray(self.embedder.encode([str(text)]))[0].tolist()

    return BuildEmbedderEmbeddings


def langchain_embeddings(embedder: Embedder) -> Any:
    """Wrap a dpsynrag embedder (``encode(list[str])``) as a LangChain ``Embeddings``."""
    return _embeddings_class()(embedder)


def to_langchain_faiss(corpus: CorpusSource, embeddings: Any = None, *, kept_only: bool = True,
                       embedder_path: str | os.PathLike[str] | None = None) -> Any:
    """A LangChain ``FAISS`` vector store over the corpus's stored vectors (no re-embedding).

    ``embeddings`` embeds queries; ``None`` wraps the build's embedder (loaded offline from
    the packaged model, or ``embedder_path``). Given embeddings are probed once: they must
    return unit vectors of the manifest's dimension. Filter further with
    ``similarity_search(q, filter={"cluster_keyword": ...})``.
    """
    vectorstores = import_extra("langchain_community.vectorstores", _FEATURE)
    utils = import_extra("langchain_community.vectorstores.utils", _FEATURE)
    docstores = import_extra("langchain_community.docstore.in_memory", _FEATURE)
    documents = import_extra("langchain_core.documents", _FEATURE)

    loaded = ensure_loaded(corpus)
    if embeddings is None:
        embeddings = langchain_embeddings(load_query_embedder(loaded, embedder_path))
    else:
        check_query_vector(embeddings.embed_query(PROBE_QUERY), loaded.dimension,
                           f"embeddings {type(embeddings).__name__}")
    rows = selected_rows(loaded, kept_only)
    texts = loaded.table.column("text").to_pylist()
    metadata = row_metadata(loaded)
    docs = {metadata[r]["id"]: documents.Document(id=metadata[r]["id"], page_content=str(texts[r]),
                                                  metadata=metadata[r])
            for r in rows}
    return vectorstores.FAISS(
        embedding_function=embeddings,
        index=subset_index(loaded, rows),
        docstore=docstores.InMemoryDocstore(docs),
        index_to_docstore_id={j: metadata[r]["id"] for j, r in enumerate(rows)},
        relevance_score_fn=cosine_relevance,
        normalize_L2=False,
        distance_strategy=utils.DistanceStrategy.MAX_INNER_PRODUCT,
    )
