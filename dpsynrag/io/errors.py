"""The one error of reading the private input: one line, never any private text."""

from __future__ import annotations

from pathlib import Path

__all__ = ["InputError"]


class InputError(Exception):
    """A problem with the input, described on one line without any private text.

    Attributes ``file``, ``where`` and ``problem`` hold the parts of the message.
    """

    def __init__(self, file: str | Path, where: str | None, problem: str) -> None:
        self.file = str(file)
        self.where = where
        self.problem = problem
        parts = [self.file] + ([where] if where else []) + [problem]
        super().__init__(" ".join(": ".join(parts).split()))  # one line, always
