"""Hand-off adapters: load a dpsynrag output directory into plain faiss + pyarrow, LangChain or
LlamaIndex, over the corpus's stored vectors (no re-embedding), with its files checked first.

LangChain and LlamaIndex are optional (``pip install 'dpsynrag[handoff]'``) and imported only
when their adapter is called. Runbook: ``runbooks/handoff.md``.
"""

from dpsynrag.handoff._extras import HANDOFF_INSTALL_HINT
from dpsynrag.handoff.embeddings import load_query_embedder
from dpsynrag.handoff.files import (
    CorpusIntegrityError,
    EmptyCorpusWarning,
    LoadedCorpus,
    ensure_loaded,
    load_corpus,
)
from dpsynrag.handoff.langchain_store import langchain_embeddings, to_langchain_faiss
from dpsynrag.handoff.llamaindex_store import llamaindex_embedding, to_llamaindex
from dpsynrag.handoff.search import Hit, search, search_texts

__all__ = [
    "HANDOFF_INSTALL_HINT",
    "CorpusIntegrityError",
    "EmptyCorpusWarning",
    "Hit",
    "LoadedCorpus",
    "ensure_loaded",
    "langchain_embeddings",
    "llamaindex_embedding",
    "load_corpus",
    "load_query_embedder",
    "search",
    "search_texts",
    "to_langchain_faiss",
    "to_llamaindex",
]
