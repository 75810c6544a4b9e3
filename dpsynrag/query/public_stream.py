"""A public no-context decoding stream that follows the released tokens of one query.

Grislain's optional prior and Koga et al.'s non-RAG token both need the model's next-token
distribution for the question alone, conditioned on the tokens released so far. It depends
only on public inputs (question, model, released tokens), so computing it costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dpsynrag.models.protocols import LLM
from dpsynrag.transforms.kv_cache import feed_token, prefill_rows


class PublicStream:
    """Next-token log-probabilities of ``prompt_ids`` followed by the tokens fed so far."""

    def __init__(self, llm: LLM, prompt_ids: Sequence[int]) -> None:
        if not prompt_ids:
            raise ValueError("the public prompt is empty")
        self._llm = llm
        self._prompt = [int(t) for t in prompt_ids]
        self._state: dict[str, Any] | None = None
        self._logits: torch.Tensor | None = None
        self.fed: list[int] = []

    @torch.inference_mode()
    def log_probs(self) -> torch.Tensor:
        """float64 (vocab,) log-softmax of the next token after the prompt and fed tokens."""
        if self._logits is None:
            logits, self._state = prefill_rows(self._llm.model, [self._prompt],
                                               torch.device(self._llm.device))
            self._logits = logits[0]
        return torch.log_softmax(self._logits.to(torch.float64), dim=-1).cpu()

    def greedy(self) -> int:
        """The greedy next token (ties to the lowest id)."""
        return int(torch.argmax(self.log_probs()).item())

    @torch.inference_mode()
    def feed(self, token: int) -> None:
        """Advance the stream by one released token."""
        if self._state is None:
            self.log_probs()
        assert self._state is not None
        logits, self._state = feed_token(self._llm.model, self._state, int(token))
        self._logits = logits[0]
        self.fed.append(int(token))
