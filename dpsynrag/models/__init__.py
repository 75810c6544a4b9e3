"""models: offline loading of the LLM and the embedder (see docs/design.md, section 5).

The loaders are imported on first use, so that the light modules of this package (greedy
decoding, vector normalisation) can be imported without torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpsynrag.models.embedder import LoadedEmbedder, load_embedder
    from dpsynrag.models.errors import ModelLoadError
    from dpsynrag.models.llm import LoadedLLM, load_llm
    from dpsynrag.models.protocols import (
        LLM,
        Embedder,
        IdentifiedEmbedder,
        NamedEmbedder,
    )

_HOMES = {"LoadedEmbedder": "embedder", "load_embedder": "embedder",
          "ModelLoadError": "errors", "LoadedLLM": "llm", "load_llm": "llm",
          "LLM": "protocols", "Embedder": "protocols", "NamedEmbedder": "protocols",
          "IdentifiedEmbedder": "protocols"}

__all__ = ["LLM", "Embedder", "IdentifiedEmbedder", "LoadedEmbedder", "LoadedLLM",
           "ModelLoadError", "NamedEmbedder", "load_embedder", "load_llm"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)
