"""Ingest, record by record: parse one input file, validate, bound each privacy unit.

These are the pure functions the Beam ingest (:mod:`dpsynrag.pipeline.beam_ingest`) applies.
They read every format with the readers of :mod:`dpsynrag.io` that ``build-corpus``'s
in-process reader (:mod:`dpsynrag.io.reader`) uses too, with the same checks and
normalisation, so a record ingested by Beam becomes exactly the document the in-process reader
makes of it. Here a bad record is a bad row, counted, instead of an error.

Ingest is not a DP mechanism and releases nothing: it only bounds every privacy unit to one
document (sensitivity 1 for every later stage) by a rule that looks at that unit's own
records and nothing else. Its counts (records read, skipped, bad, dropped) are private.

Ids and duplicates follow :mod:`dpsynrag.io.ids` exactly: without an id column a record's id
is content-derived (:func:`~dpsynrag.io.ids.content_id`), never its position; records sharing
an id are resolved by :func:`~dpsynrag.io.ids.resolve_id_group` (identical ones collapse,
counted as the skip ``"duplicate"``; the others get distinct ``~dup-`` ids). A shared id is
never a bad row, so adding a record can never remove another unit's record.

Unit bounding rules (``unit_bound``), both in the order of
``sha256(unit ‖ 0x00 ‖ sha256(text))`` (:func:`~dpsynrag.io.units.unit_rank`): a function of
each record itself, never of its place or id:

* ``pick`` (default): keep the first record in that order; the rule of
  :func:`dpsynrag.io.units.bound_units`.
* ``concat``: join the unit's texts, in that order, with a blank line between them,
  appending each record only if the result stays within ``max_chars``; the document takes the
  id of the unit's first record in that order.

Encodings (:mod:`dpsynrag.io.decoding`): a file starting with a UTF-8 or UTF-16 byte-order
mark is decoded as such; any other file is UTF-8, line by line (JSON Lines, CSV) or whole
(``.txt``). A line that is not valid UTF-8 is a bad row, or is decoded with
``fallback_encoding`` (e.g. ``cp1252``) when one is given (counted as
``decoded_with_fallback``).
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import BinaryIO

from dpsynrag.io import csv_rows, jsonl, parquet, txt
from dpsynrag.io.decoding import Decoding
from dpsynrag.io.errors import InputError
from dpsynrag.io.ids import id_group, resolve_id_group
from dpsynrag.io.records import BadRow, Columns, RawRecord, accept_record, text_columns
from dpsynrag.io.units import UNIT_BOUND_RULES, bound_one_unit

__all__ = [
    "FORMATS",
    "UNIT_BOUND_RULES",
    "Document",
    "IngestSettings",
    "Parsed",
    "bound_unit",
    "format_of",
    "id_group",
    "parse_file",
    "problem_kind",
    "resolve_ids",
    "shard_of",
]

FORMATS = {**dict.fromkeys(jsonl.SUFFIXES, "jsonl"), **dict.fromkeys(csv_rows.SUFFIXES, "csv"),
           **dict.fromkeys(parquet.SUFFIXES, "parquet"), txt.SUFFIX: "txt"}
_SHARD_DOMAIN = b"dpsynrag/ingest-shard/v1\x00"
_STOPS = {"file": " (the file is not read)", "rest": " (the rest of the file is not read)"}


@dataclass(frozen=True)
class IngestSettings:
    """What ingest reads and how it bounds units (public options, no data)."""

    text_column: str | tuple[str, ...] = "text"  # one column or several, joined in order
    id_column: str | None = "id"
    unit_column: str | None = None
    min_chars: int = 1
    max_chars: int | None = 20_000
    unit_bound: str = "pick"
    fallback_encoding: str | None = None

    def validate(self) -> None:
        text_columns(self.text_column)  # ValueError: no text column, or one given twice
        if self.unit_bound not in UNIT_BOUND_RULES:
            raise ValueError(f"unit_bound must be one of {', '.join(UNIT_BOUND_RULES)}, got "
                             f"{self.unit_bound!r}")
        if self.min_chars < 1 or (self.max_chars is not None and self.max_chars < 1):
            raise ValueError("min_chars and max_chars must be positive")
        if self.fallback_encoding is not None:
            codecs.lookup(self.fallback_encoding)  # LookupError names an unknown encoding

    @property
    def columns(self) -> Columns:
        return Columns(self.text_column, self.id_column, self.unit_column)

    @property
    def decoding(self) -> Decoding:
        return Decoding(self.fallback_encoding, utf16=True)


@dataclass(frozen=True)
class Parsed:
    """One record as read from file number ``file_index`` (``position``: 1-based in it).

    ``problem`` is set for a bad row (one line, no content). ``doc_id`` is the id column's
    value or, without one, the content-derived id (made unique later by
    :func:`resolve_ids`); ``unit`` is None when there is no unit column (the record is its own
    unit, named by its final id). ``skip`` is a reason of
    :data:`dpsynrag.io.documents.SKIP_REASONS` or None. ``position`` only orders the
    output rows; no rule that decides what is kept looks at it.
    """

    file_index: int
    position: int
    file: str
    where: str
    doc_id: str | None = None
    unit: str | None = None
    text: str = ""
    skip: str | None = None
    problem: str | None = None
    fallback: bool = False

    @property
    def order(self) -> tuple[int, int]:
        return self.file_index, self.position


@dataclass(frozen=True)
class Document:
    """A document after ingest: one per privacy unit; ``order`` is its place in the input."""

    doc_id: str
    unit: str
    text: str
    order: tuple[int, int]


def format_of(name: str) -> str | None:
    """The input format of a file name by its suffix (None: not an input file)."""
    lower = name.lower()
    for suffix, kind in FORMATS.items():
        if lower.endswith(suffix):
            return kind
    return None


# ------------------------------------------------------------------ parsing
class _FileParser:
    """Turns what the readers yield for one file into :class:`Parsed` records."""

    def __init__(self, file_index: int, file: str, settings: IngestSettings) -> None:
        self.file_index = file_index
        self.file = file
        self.settings = settings
        self.position = 0

    def parsed(self, item: RawRecord | BadRow, default_where: str) -> Parsed:
        self.position += 1
        if isinstance(item, BadRow):
            return Parsed(self.file_index, self.position, self.file,
                          item.where or default_where,
                          problem=item.problem + _STOPS.get(item.stops or "", ""))
        try:
            doc_id, unit, text, skip = accept_record(
                item, self.settings.unit_column is not None, self.settings.min_chars,
                self.settings.max_chars)
        except InputError as error:
            return Parsed(self.file_index, self.position, self.file, error.where or item.where,
                          problem=error.problem)
        return Parsed(self.file_index, self.position, self.file, item.where, doc_id=doc_id,
                      unit=unit, text=text, skip=skip, fallback=item.fallback)


def parse_file(file_index: int, file: str, kind: str, open_binary: Callable[[], BinaryIO],
               settings: IngestSettings, relative_name: str = "") -> Iterator[Parsed]:
    """Every record of one input file, in file order, as :class:`Parsed` (never raises
    :class:`InputError`: a problem becomes a bad row; a problem that makes the rest of the
    file unreadable ends the file with one bad row saying so)."""
    parser = _FileParser(file_index, file, settings)
    cols, decoding = settings.columns, settings.decoding
    with open_binary() as handle:
        items: Iterable[RawRecord | BadRow]
        if kind == "jsonl":
            items = jsonl.read_jsonl(handle, file, cols, decoding)
        elif kind == "csv":
            items = csv_rows.read_csv(handle, file, cols, decoding)
        elif kind == "parquet":
            items = parquet.read_parquet(handle, file, cols)
        elif kind == "txt":
            items = [txt.read_txt(handle.read(), file, relative_name, decoding)]
        else:
            raise ValueError(f"unknown input format {kind!r}")
        default_where = "file" if kind == "parquet" else "line 1"
        for item in items:
            yield parser.parsed(item, default_where)


# ------------------------------------------------------------------ ids, units, shards
def resolve_ids(group: str, records: Iterable[Parsed]) -> list[tuple[Parsed, int, bool]]:
    """Unique ids for the records of one id group
    (:func:`~dpsynrag.io.ids.resolve_id_group`, as the in-process reader does).

    Returns, per distinct content, ``(record, collapsed, renamed)``: the record with its final
    id, its unit set (the final id without a unit column) and ``order`` the smallest of the
    identical records it stands for; ``collapsed`` counts the identical records merged into
    it; ``renamed`` says whether its id changed. Depends on the group's records as a set,
    never on their order; drops no record that differs from another.
    """
    ordered = sorted(records, key=lambda r: r.order)
    resolved = resolve_id_group(group, [(r.doc_id or "", r.unit, r.text) for r in ordered])
    out = []
    for same, doc_id in resolved:
        first = ordered[min(same)]
        renamed = any(ordered[i].doc_id != doc_id for i in same)
        out.append((replace(first, doc_id=doc_id, unit=first.unit if first.unit is not None
                            else doc_id), len(same) - 1, renamed))
    return out


def bound_unit(unit: str, records: Iterable[Parsed], rule: str, max_chars: int | None
               ) -> tuple[Document, int]:
    """One document for the unit (:func:`~dpsynrag.io.units.bound_one_unit`) and how
    many of its records were dropped or merged away. Looks at this unit's records only."""
    ordered = sorted(records, key=lambda r: r.order)
    doc_id, text, used = bound_one_unit(unit, [(r.doc_id or "", r.text) for r in ordered],
                                        rule, max_chars)
    order = min(ordered[i].order for i in used)
    return Document(doc_id, unit, text, order), len(ordered) - 1


def shard_of(doc_id: str, shards: int) -> int:
    """The output shard of a document: a domain-separated sha256 of its id (its place in the
    operator-side shards only; no rule that decides what is kept looks at it)."""
    digest = hashlib.sha256(_SHARD_DOMAIN + doc_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


_PROBLEM_KINDS = (
    ("not valid utf", "bad encoding"), ("malformed json", "malformed JSON"),
    ("expected a json object", "not a JSON object"), ("malformed csv", "malformed CSV"),
    ("fields, the header", "wrong number of CSV fields"),
    ("missing", "missing column"), ("parquet", "unreadable Parquet"),
    ("id column", "inconsistent id column"), ("id is", "bad id"), ("unit is", "bad unit"),
    ("text is", "bad text"), ("empty file", "empty file"),
)


def problem_kind(problem: str) -> str:
    """A short category of a bad row's problem, for the counts of the ingest report."""
    lower = problem.lower()
    for fragment, kind in _PROBLEM_KINDS:
        if fragment in lower:
            return kind
    return "other"

