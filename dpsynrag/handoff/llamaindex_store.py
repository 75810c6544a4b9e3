"""LlamaIndex: the corpus as a ``VectorStoreIndex`` on a ``FaissVectorStore``, not re-embedded.

Choice: each selected row becomes a ``TextNode`` (id = the corpus id, the same metadata as
the LangChain adapter) carrying its **stored** vector from ``index.faiss``; LlamaIndex only
embeds nodes without an embedding, so nothing is re-embedded and the vectors are bit-identical.
``FaissVectorStore.add`` appends vectors to the FAISS index it wraps, so it wraps a fresh
``IndexFlatIP`` (inner product, as built) rather than the corpus's own index (adding would
duplicate every row, and ``FaissVectorStore`` has no metadata filters, so the self-filter is
applied by selecting rows: ``kept_only=True``, the default). Metadata is kept out of the
embedding and LLM text, so a node's content is exactly the synthetic text.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from dpsynrag.handoff._extras import import_extra
from dpsynrag.handoff._rows import PROBE_QUERY, row_metadata, selected_rows
from dpsynrag.handoff.embeddings import check_query_vector, load_query_embedder
from dpsynrag.handoff.files import CorpusSource, ensure_loaded
from dpsynrag.models.protocols import Embedder

_FEATURE = "the LlamaIndex hand-off"


@functools.cache
def _embedding_class() -> type:
    base = import_extra("llama_index.core.embeddings", _FEATURE)
    bridge = import_extra("llama_index.core.bridge.pydantic", _FEATURE)

    base_class: Any = base.BaseEmbedding  # an optional extra's class, untyped here

    class BuildEmbedderEmbedding(base_class):
        """LlamaIndex ``BaseEmbedding`` over a dpsynrag embedder (unit-norm float32 rows)."""

        _embedder: Embedder = bridge.PrivateAttr()

        def __init__(self, embedder: Embedder, **kwargs: Any) -> None:
            super().__init__(model_name=str(getattr(embedder, "name", "dpsynrag-embedder")),
                             **kwargs)
            self._embedder = embedder

        @classmethod
        def class_name(cls) -> str:
            return "DpsynragBuildEmbedding"

        def _encode(self, texts: list[str]) -> list[list[float]]:
            return np.asarray(self._embedder.encode([str(t) for t in texts])).tolist()

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._encode([query])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._encode([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return self._encode(texts)

    return BuildEmbedderEmbedding


def llamaindex_embedding(embedder: Embedder) -> Any:
    """Wrap a dpsynrag embedder (``encode(list[str])``) as a LlamaIndex ``BaseEmbedding``."""
    return _embedding_class()(embedder)


def to_llamaindex(corpus: CorpusSource, embed_model: Any = None, *, kept_only: bool = True,
                  embedder_path: str | os.PathLike[str] | None = None) -> Any:
    """A LlamaIndex ``VectorStoreIndex`` over the corpus's stored vectors (no re-embedding).

    ``embed_model`` embeds queries; ``None`` wraps the build's embedder (loaded offline from
    the packaged model, or ``embedder_path``). A given model is probed once: it must return
    unit vectors of the manifest's dimension. Use ``index.as_retriever(similarity_top_k=k)``;
    a query engine also needs an LLM of the application's choosing (``llm=``).
    """
    import faiss

    core = import_extra("llama_index.core", _FEATURE)
    schema = import_extra("llama_index.core.schema", _FEATURE)
    faiss_store = import_extra("llama_index.vector_stores.faiss", _FEATURE)

    loaded = ensure_loaded(corpus)
    if embed_model is None:
        embed_model = llamaindex_embedding(load_query_embedder(loaded, embedder_path))
    else:
        check_query_vector(embed_model.get_query_embedding(PROBE_QUERY), loaded.dimension,
                           f"embed_model {type(embed_model).__name__}")
    rows = selected_rows(loaded, kept_only)
    texts = loaded.table.column("text").to_pylist()
    metadata = row_metadata(loaded)
    vectors = loaded.vectors()
    keys = list(metadata[0]) if metadata else []
    nodes = [schema.TextNode(id_=metadata[r]["id"], text=str(texts[r]), metadata=metadata[r],
                             embedding=vectors[r].tolist(), excluded_embed_metadata_keys=keys,
                             excluded_llm_metadata_keys=keys)
             for r in rows]
    store = faiss_store.FaissVectorStore(faiss_index=faiss.IndexFlatIP(loaded.dimension))
    storage = core.StorageContext.from_defaults(vector_store=store)
    return core.VectorStoreIndex(nodes=nodes, storage_context=storage, embed_model=embed_model,
                                 show_progress=False)
