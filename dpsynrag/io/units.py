"""Bounding every privacy unit to one document, by a rule of that unit's own records.

Ingest is not a DP mechanism and releases nothing: it only bounds every privacy unit to one
document (sensitivity 1 for every later stage). Both rules look at the unit's records in the
order of ``sha256(unit ‖ 0x00 ‖ sha256(text))`` (:func:`unit_rank`): a function of each
record itself, never of its place or id.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsynrag.io.documents import InputDocuments
from dpsynrag.io.ids import content_key

__all__ = ["UNIT_BOUND_RULES", "bound_one_unit", "bound_units", "unit_rank"]

UNIT_BOUND_RULES = ("pick", "concat")
"""How a privacy unit with several records becomes one document (see :func:`bound_one_unit`)."""


def unit_rank(unit: str, text: str) -> bytes:
    """The data-independent rank that decides which record of a unit is kept.

    :func:`~dpsynrag.io.ids.content_key` of the unit and the record's normalised text: a
    function of the record itself, so removing or adding another record (of this unit or any
    other) never changes the order of this unit's remaining records.
    """
    return content_key(unit, text)


def bound_one_unit(unit: str, records: Sequence[tuple[str, str]], rule: str = "pick",
                   max_chars: int | None = None) -> tuple[str, str, list[int]]:
    """One document for a unit from its ``(id, text)`` records: ``(id, text, used)``.

    ``used`` lists the positions in ``records`` that went into the document. Both rules look
    at this unit's own records only (never at other units or at record order), in the order
    of :func:`unit_rank` (equal texts by id, which changes only the kept id, never the text):

    * ``pick``: the first record in that order;
    * ``concat``: the texts in that order joined by a blank line, each appended only if the
      result stays within ``max_chars``; the id is that of the first record in the order.
    """
    if rule not in UNIT_BOUND_RULES:
        raise ValueError(f"unknown unit bound rule {rule!r}")
    ranked = sorted(range(len(records)),
                    key=lambda i: (unit_rank(unit, records[i][1]), records[i][0]))
    first = ranked[0]
    if rule == "pick":
        return records[first][0], records[first][1], [first]
    parts: list[str] = []
    used: list[int] = []
    length = 0
    for i in ranked:
        extra = len(records[i][1]) + (2 if parts else 0)
        if max_chars is None or length + extra <= max_chars:
            parts.append(records[i][1])
            used.append(i)
            length += extra
    return records[first][0], "\n\n".join(parts), used


def bound_units(docs: InputDocuments, rule: str = "pick",
                max_chars: int | None = None) -> InputDocuments:
    """Keep one document per privacy unit, by ``rule`` (:func:`bound_one_unit`).

    Documents stay in input order (a unit's document takes the place of its earliest record
    that went into it); the number of records dropped or merged away is added to
    ``skipped["unit_bound"]``. Returns a new object; ``docs`` is not changed.
    """
    by_unit: dict[str, list[int]] = {}
    for i, unit in enumerate(docs.units):
        by_unit.setdefault(unit, []).append(i)
    kept: list[tuple[int, str, str, str]] = []
    for unit, members in by_unit.items():
        doc_id, text, used = bound_one_unit(
            unit, [(docs.ids[i], docs.texts[i]) for i in members], rule, max_chars)
        kept.append((min(members[u] for u in used), doc_id, text, unit))
    kept.sort()
    skipped = dict(docs.skipped)
    skipped["unit_bound"] = skipped.get("unit_bound", 0) + len(docs.ids) - len(kept)
    return InputDocuments(
        ids=[doc_id for _, doc_id, _, _ in kept],
        texts=[text for _, _, text, _ in kept],
        units=[unit for _, _, _, unit in kept],
        skipped=skipped,
        source=docs.source,
    )
