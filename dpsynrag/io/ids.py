"""Record ids: content-derived when the input has none, unique when records share one.

Every key a privacy rule uses is a function of the record itself, never of its place:

* with an id column, the id is the column's value (a string, or an integer as its decimal
  string), kept as it is unless shared (below);
* without one, the id is content-derived: ``doc-`` and the first 32 hex digits of
  :func:`content_key` ``(unit, text)``. Removing or adding a record never changes another
  record's id (a positional ``row-<n>`` would shift every later one);
* records that share an id (:func:`resolve_id_group`): records identical in unit and text are
  one record; records with different content each get ``<id>~dup-<32 hex digits of
  content_key>``. No record is ever dropped because another one has its id. An id already
  ending in ``~dup-`` and 32 hex digits belongs to the group of the id before that suffix,
  which keeps every final id unique.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

__all__ = [
    "CONTENT_ID_PREFIX",
    "DUPLICATE_MARK",
    "content_id",
    "content_key",
    "id_group",
    "resolve_id_group",
]

CONTENT_ID_PREFIX = "doc-"
"""Prefix of a content-derived id (the input has no id column)."""
DUPLICATE_MARK = "~dup-"
"""Joins an id shared by records of different content to each record's content key."""
_KEY_HEX = 32  # hex digits of a content key in an id: 128 bits, collision-free in practice
_DERIVED_SUFFIX = re.compile(f"{re.escape(DUPLICATE_MARK)}[0-9a-f]{{{_KEY_HEX}}}\\Z")


def content_key(unit: str, text: str) -> bytes:
    """``sha256(unit ‖ 0x00 ‖ sha256(text))``: the key of one record's content.

    A function of the record alone (its unit and normalised text), never of its place in the
    input or of other records. It names records without an id (:func:`content_id`), tells
    apart records sharing an id (:func:`resolve_id_group`) and ranks a unit's records
    (:func:`dpsynrag.io.units.unit_rank`). Unkeyed: it is an operator-side key, never
    released.
    """
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return hashlib.sha256(unit.encode("utf-8") + b"\x00" + digest).digest()


def content_id(unit: str | None, text: str) -> str:
    """The id of a record without an id column: ``doc-`` + 32 hex digits of its content key.

    ``unit`` is the unit column's value (None without one). Two records get the same id only
    if they have the same unit and text (128 bits: a collision is not a practical concern,
    and even one would only make :func:`resolve_id_group` rename both records).
    """
    return CONTENT_ID_PREFIX + content_key(unit or "", text).hex()[:_KEY_HEX]


def id_group(doc_id: str) -> str:
    """The id without a trailing ``~dup-<32 hex digits>``: records are resolved by this key.

    So an id that :func:`resolve_id_group` may produce can never collide with an input id
    (for instance when shards written by ``dpsynrag ingest`` are read again).
    """
    match = _DERIVED_SUFFIX.search(doc_id)
    return doc_id[:match.start()] if match else doc_id


def resolve_id_group(group: str, records: Sequence[tuple[str, str | None, str]]
                     ) -> list[tuple[list[int], str]]:
    """Unique ids for the ``(id, unit or None, text)`` records of one :func:`id_group` key.

    Returns ``(positions, id)`` per distinct ``(unit, text)``: ``positions`` (in ``records``)
    are records identical in unit and text, which become one document; ``id`` is its final
    id. When all records of the group are identical the id is the smallest of their ids (a
    single record keeps its id unchanged); otherwise every distinct content gets ``group +
    "~dup-"`` + 32 hex digits of :func:`content_key` (the unit column's value, or ``""``).

    Why this keeps the neighbouring relation: the result depends on the group's records as a
    set, never on their order; a record is never dropped because another has its id. Adding a
    record can only (a) collapse into an identical record, changing no document, or (b)
    rename the records that shared its id, whose text and unit stay the same. Merging
    identical records is harmless: they are the same document of the same unit (without a
    unit column, identical texts with one id: either copy is the same document).
    """
    by_content: dict[tuple[str | None, str], list[int]] = {}
    for i, (_doc_id, unit, text) in enumerate(records):
        by_content.setdefault((unit, text), []).append(i)
    if len(by_content) == 1:
        positions = next(iter(by_content.values()))
        return [(positions, min(records[i][0] for i in positions))]
    return [(positions, group + DUPLICATE_MARK + content_key(unit or "", text).hex()[:_KEY_HEX])
            for (unit, text), positions in by_content.items()]
