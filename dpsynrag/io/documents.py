"""The documents read from the private input, and why the others were skipped."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SKIP_REASONS", "InputDocuments"]

SKIP_REASONS = ("empty", "too_short", "too_long", "duplicate", "unit_bound")
"""Keys of :attr:`InputDocuments.skipped` (always all present)."""


@dataclass
class InputDocuments:
    """Documents read from the input, in input order (skipped records removed).

    ``ids`` are unique. ``units[i]`` is the privacy unit of record ``i``: the ``unit_column``
    value, or the id when no unit column is given (one record = one privacy unit).
    ``source`` is the format: ``"jsonl"``, ``"csv"``, ``"parquet"`` or ``"txt"``.
    ``skipped`` maps each reason of :data:`SKIP_REASONS` to a count (private: do not log).
    """

    ids: list[str]
    texts: list[str]
    units: list[str]
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    source: str = ""

    def __len__(self) -> int:
        return len(self.ids)
