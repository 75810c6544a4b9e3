"""models: offline loading of the LLM and the embedder (see docs/design.md, section 5)."""

from dpsynrag.models.embedder import LoadedEmbedder, load_embedder
from dpsynrag.models.errors import ModelLoadError
from dpsynrag.models.llm import LoadedLLM, load_llm

__all__ = ["LoadedEmbedder", "LoadedLLM", "ModelLoadError", "load_embedder", "load_llm"]
