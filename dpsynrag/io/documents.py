"""The documents read from the private input, and why the others were skipped."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PICK_WARNING_FRACTION", "SKIP_REASONS", "InputDocuments", "pick_warning",
           "skip_label"]

SKIP_REASONS = ("empty", "too_short", "too_long", "duplicate", "unit_bound")
"""Keys of :attr:`InputDocuments.skipped` (always all present)."""

PICK_WARNING_FRACTION = 0.2
"""``--unit-bound pick`` leaving out more than this share of the records read is warned about
(a public threshold)."""


def skip_label(reason: str, unit_bound: str | None = None) -> str:
    """How a count of :attr:`InputDocuments.skipped` is shown: ``skipped (REASON)``, but the
    ``unit_bound`` records of ``--unit-bound concat`` went into their unit's document:
    ``merged (unit_bound concat)`` (those past ``--max-chars`` are counted with them)."""
    if reason == "unit_bound" and unit_bound == "concat":
        return "merged (unit_bound concat)"
    return f"skipped ({reason})"


def pick_warning(unit_bound: str | None, documents: int, skipped: dict[str, int],
                 records: int | None = None) -> str | None:
    """A warning when ``--unit-bound pick`` left out more than ``PICK_WARNING_FRACTION`` of the
    ``records`` read (default: ``documents`` plus every skip), else None.

    It names only what the build's summary already shows (records read, documents kept, the
    ``unit_bound`` count), never anything about one unit."""
    left_out = skipped.get("unit_bound", 0)
    if records is None:
        records = documents + sum(skipped.values())
    if unit_bound != "pick" or records == 0 or left_out <= PICK_WARNING_FRACTION * records:
        return None
    return (f"--unit-bound pick kept one record per privacy unit and left out {left_out} of "
            f"the {records} records read ({left_out / records:.0%}; {documents} documents "
            "kept): --unit-bound concat joins each unit's records into its document instead "
            "(up to --max-chars)")


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

    def hand_over_texts(self) -> list[str]:
        """The texts, handed to their one consumer: this object keeps none of them (nor the
        ids and units, read already), so a consumer that streams the texts away (the Beam
        stages write them to private shards, then clear the list) frees them. ``skipped``
        and ``source`` stay; ``len`` is 0 afterwards."""
        texts = self.texts
        self.texts, self.ids, self.units = [], [], []
        return texts
