"""The data of one evaluation: private notes, queries with gold answers, leak names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsynrag.eval.metrics import (
    SPAN_MIN_NOTES,
    SPAN_N,
    Answer,
    answer_weights,
    shared_token_ngrams,
)
from dpsynrag.prompts.rag import DEFAULT_INSTRUCTION

__all__ = ["EvalData"]


@dataclass
class EvalData:
    """Notes (private), queries with gold answers, and the names whose appearance is a leak.

    ``answers[i]`` is query i's gold answer: a string, or a tuple of its accepted answers
    when a set gives several (any one counts; ``eval.metrics.answer_options``).
    ``answer_prefix``: the start of the reader's reply (``reader.json``), or None.
    """

    note_ids: list[str]
    notes: list[str]
    questions: list[str]
    answers: list[Answer]
    names: list[str]
    attack_questions: list[str]
    description: dict[str, Any]
    notes_path: Path
    instruction: str = DEFAULT_INSTRUCTION  # what the reader is asked to answer with
    answer_prefix: str | None = None
    _weights: list[int] | None = None
    _shared: frozenset[tuple[str, ...]] | None = None

    def answer_weights(self) -> list[int]:
        """Per query, the number of private notes holding its answer (any of them; cached)."""
        if self._weights is None:
            self._weights = answer_weights(self.answers, self.notes)
        return self._weights

    def shared_ngrams(self) -> frozenset[tuple[str, ...]]:
        """The token 3-grams at least 2 private notes hold (``span_share``'s; cached)."""
        if self._shared is None:
            self._shared = shared_token_ngrams(self.notes, SPAN_N, SPAN_MIN_NOTES)
        return self._shared
