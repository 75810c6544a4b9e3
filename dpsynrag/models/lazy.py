"""The LLM and the embedder of one run, each loaded on first use and then kept.

A model worker (in-process or a Ray actor) and the evaluation hold one :class:`LazyModels`,
so each model is loaded at most once, and a run that never needs the LLM (the facts build,
retrieval-only evaluations) never loads it.
"""

from __future__ import annotations

from dpsynrag.models.protocols import LLM, IdentifiedEmbedder

__all__ = ["LazyModels"]


class LazyModels:
    """``llm`` and ``embedder`` are each a path, ``None`` (the packaged model) or an already
    loaded object (in-process runs and tests); paths are loaded on ``device`` (and the LLM in
    ``dtype``) on first access."""

    def __init__(self, llm: LLM | str | None = None,
                 embedder: IdentifiedEmbedder | str | None = None,
                 device: str | None = None, dtype: str | None = None) -> None:
        self._llm_source = llm if llm is None or isinstance(llm, str) else None
        self._embedder_source = embedder if embedder is None or isinstance(embedder, str) \
            else None
        self._device, self._dtype = device, dtype
        self._llm: LLM | None = None if llm is None or isinstance(llm, str) else llm
        self._embedder: IdentifiedEmbedder | None = (
            None if embedder is None or isinstance(embedder, str) else embedder)

    @property
    def llm(self) -> LLM:
        """The language model, loaded now if it was given as a path or ``None``."""
        if self._llm is None:
            # torch and transformers: loaded only when a model is (``dpsynrag.models``)
            from dpsynrag.models.llm import load_llm

            self._llm = load_llm(self._llm_source, device=self._device, dtype=self._dtype)
        return self._llm

    @property
    def embedder(self) -> IdentifiedEmbedder:
        """The embedder, loaded now if it was given as a path or ``None``."""
        if self._embedder is None:
            # torch and sentence-transformers: loaded only when a model is
            from dpsynrag.models.embedder import load_embedder

            self._embedder = load_embedder(self._embedder_source, device=self._device)
        return self._embedder
