"""The note and query templates of one variant of a generated evaluation data set."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TemplateSet"]


@dataclass(frozen=True)
class TemplateSet:
    """Note and query templates of one dataset variant, and what the variant is for (the
    ``description`` of its file: :mod:`dpsynrag.eval.template_files`)."""

    notes: tuple[str, ...]
    queries: tuple[str, ...]
    description: str = ""
