"""What the package calls on a language model and on an embedder, as typing protocols.

``LoadedLLM`` and ``LoadedEmbedder`` (``load_llm``, ``load_embedder``) satisfy them, and so do
the test fakes (a ``LoadedLLM`` around a tiny model, bag-of-words embedders): the engines,
the build, the queries, the evaluation and the hand-off accept any object that has these
members. Each consumer asks for the least it uses:

* :class:`Embedder`: ``encode`` only (queries, retrieval indexes, the hand-off's adapters);
* :class:`NamedEmbedder`: also a ``name`` and a ``dimension`` (the corpus files record both);
* :class:`IdentifiedEmbedder`: also the ``identity`` certificates and checks compare;
* :class:`LLM`: a Hugging Face causal LM and its tokenizer with chat formatting.

The model and the tokenizer themselves are ``transformers`` objects. They are named
(:data:`CausalLM`, :data:`Tokenizer`) but stay ``Any`` to the type checker: transformers
types a module's submodules as ``Tensor | Module``, so typing them would need a cast at every
layer the decoding engines read; the protocols check everything the package adds around them.

Nothing here imports torch at run time (this module is imported by light modules).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["LLM", "CausalLM", "Embedder", "IdentifiedEmbedder", "NamedEmbedder", "Tokenizer"]

CausalLM: TypeAlias = Any
"""A ``transformers`` causal LM (``PreTrainedModel``) in eval mode: ``model(input_ids=...)``
returns ``.logits``; the packed engine also reads its decoder layers and ``config``."""

Tokenizer: TypeAlias = Any
"""A ``transformers`` tokenizer (``PreTrainedTokenizerBase``), with or without a chat
template."""


class Embedder(Protocol):
    """Anything that embeds texts: ``encode(texts)`` is an ``(n, dimension)`` float array
    (normalised or not: every index scales rows to unit length itself)."""

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` as one row each."""
        ...


class NamedEmbedder(Embedder, Protocol):
    """An embedder with a name and a fixed width, as recorded in a corpus's manifest."""

    @property
    def name(self) -> str:
        """The embedder's name (packaged name or local directory name)."""
        ...

    @property
    def dimension(self) -> int:
        """Width of the embeddings."""
        ...


class IdentifiedEmbedder(NamedEmbedder, Protocol):
    """A named embedder that also says which weights it runs (``name``, ``source``,
    ``sha256``): what a certificate records and a reader checks."""

    @property
    def identity(self) -> Mapping[str, str]:
        """``{"name", "source", "sha256"}``, safe to put in certificates."""
        ...


class LLM(Protocol):
    """A causal LM ready for inference: what keywords, self-filter, private prediction, the
    query mechanisms and the evaluation call (``LoadedLLM`` is the implementation).

    ``free_memory`` is the free bytes of its CUDA device measured right after loading (``None``
    when unknown: the packed engine measures it once and stores it here).
    """

    free_memory: int | None

    @property
    def model(self) -> CausalLM:
        """The Hugging Face causal LM, in eval mode on ``device``."""
        ...

    @property
    def tokenizer(self) -> Tokenizer:
        """Its tokenizer."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the model's weights live."""
        ...

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype."""
        ...

    @property
    def identity(self) -> Mapping[str, str]:
        """``{"name", "source", "sha256"}`` of the weights, safe to put in certificates."""
        ...

    @property
    def vocab_size(self) -> int:
        """Width of the model's logit rows."""
        ...

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Tokens that end a generation."""
        ...

    def chat_prompt_ids(self, user_message: str) -> list[int]:
        """Token ids of ``user_message`` as one user turn, ending where the reply begins."""
        ...
