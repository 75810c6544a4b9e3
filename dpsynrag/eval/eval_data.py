"""The data of one evaluation: private notes, queries with gold answers, leak names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsynrag.eval.metrics import answer_weights
from dpsynrag.prompts.rag import DEFAULT_INSTRUCTION

__all__ = ["EvalData"]


@dataclass
class EvalData:
    """Notes (private), queries with gold answers, and the names whose appearance is a leak."""

    note_ids: list[str]
    notes: list[str]
    questions: list[str]
    answers: list[str]
    names: list[str]
    attack_questions: list[str]
    description: dict[str, Any]
    notes_path: Path
    instruction: str = DEFAULT_INSTRUCTION  # what the reader is asked to answer with
    _weights: list[int] | None = None

    def answer_weights(self) -> list[int]:
        """Per query, the number of private notes holding its answer (cached)."""
        if self._weights is None:
            self._weights = answer_weights(self.answers, self.notes)
        return self._weights
