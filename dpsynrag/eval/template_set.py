"""The note and query templates of one variant of a generated evaluation data set."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TemplateSet"]


@dataclass(frozen=True)
class TemplateSet:
    """Note and query templates of one dataset variant."""

    notes: tuple[str, ...]
    queries: tuple[str, ...]
