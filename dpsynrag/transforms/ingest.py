"""Ingest, record by record: parse one input file, validate, bound each privacy unit.

These are the pure functions the Beam ingest (:mod:`dpsynrag.pipeline.beam_ingest`) applies;
they reuse the validation and normalisation of :mod:`dpsynrag.pipeline.inputs`, so a record
ingested by Beam becomes exactly the document the in-process reader makes of it.

Ingest is not a DP mechanism and releases nothing: it only bounds every privacy unit to one
document (sensitivity 1 for every later stage) by a rule that looks at that unit's own
records and nothing else. Its counts (records read, skipped, bad, dropped) are private.

Ids and duplicates follow :mod:`dpsynrag.pipeline.inputs` exactly: without an id column a
record's id is content-derived (:func:`~dpsynrag.pipeline.inputs.content_id`), never its
position; records sharing an id are resolved by
:func:`~dpsynrag.pipeline.inputs.resolve_id_group` (identical ones collapse, counted as the
skip ``"duplicate"``; the others get distinct ``~dup-`` ids). A shared id is never a bad row,
so adding a record can never remove another unit's record.

Unit bounding rules (``unit_bound``), both in the order of
``sha256(unit ‖ 0x00 ‖ sha256(text))`` (:func:`~dpsynrag.pipeline.inputs.unit_rank`): a
function of each record itself, never of its place or id:

* ``pick`` (default): keep the first record in that order; the rule of
  :func:`dpsynrag.pipeline.inputs.bound_units`.
* ``concat``: join the unit's texts, in that order, with a blank line between them,
  appending each record only if the result stays within ``max_chars``; the document takes the
  id of the unit's first record in that order.

Encodings: a file starting with a UTF-8 or UTF-16 byte-order mark is decoded as such; any
other file is UTF-8, line by line (JSON Lines, CSV) or whole (``.txt``). A line that is not
valid UTF-8 is a bad row, or is decoded with ``fallback_encoding`` (e.g. ``cp1252``) when one
is given (counted as ``decoded_with_fallback``).
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import BinaryIO

from dpsynrag.pipeline.inputs import (
    UNIT_BOUND_RULES,
    Columns,
    CsvLayout,
    IdPresence,
    InputError,
    RawRecord,
    accept_record,
    bound_one_unit,
    id_group,
    jsonl_record,
    open_parquet,
    parquet_columns,
    parquet_records,
    resolve_id_group,
    unlimited_csv_fields,
)

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

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
           ".parquet": "parquet", ".txt": "txt"}
_SHARD_DOMAIN = b"dpsynrag/ingest-shard/v1\x00"
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


@dataclass(frozen=True)
class IngestSettings:
    """What ingest reads and how it bounds units (public options, no data)."""

    text_column: str = "text"
    id_column: str | None = "id"
    unit_column: str | None = None
    min_chars: int = 1
    max_chars: int | None = 20_000
    unit_bound: str = "pick"
    fallback_encoding: str | None = None

    def validate(self) -> None:
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


@dataclass(frozen=True)
class Parsed:
    """One record as read from file number ``file_index`` (``position``: 1-based in it).

    ``problem`` is set for a bad row (one line, no content). ``doc_id`` is the id column's
    value or, without one, the content-derived id (made unique later by
    :func:`resolve_ids`); ``unit`` is None when there is no unit column (the record is its own
    unit, named by its final id). ``skip`` is a reason of
    :data:`dpsynrag.pipeline.inputs.SKIP_REASONS` or None. ``position`` only orders the
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


# ------------------------------------------------------------------ decoding
def _bom_encoding(head: bytes) -> tuple[str | None, int]:
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding, (len(bom) if encoding == "utf-8" else 0)
    return None, 0


@dataclass(frozen=True)
class _Line:
    number: int
    text: str
    problem: str | None = None
    fallback: bool = False


def _decoded_lines(handle: BinaryIO, file: str, fallback: str | None,
                   keep_bad: bool) -> Iterator[_Line]:
    """Lines of a text file (terminators kept), decoded per the module docstring.

    A line that is not valid UTF-8 (and no fallback) comes with ``problem`` set and, when
    ``keep_bad``, its text decoded with ``surrogateescape`` (for the CSV parser to go on).
    """
    stream = io.BufferedReader(handle) if not hasattr(handle, "peek") else handle
    encoding, skip = _bom_encoding(stream.peek(4)[:4])
    if encoding == "utf-16":
        text = io.TextIOWrapper(stream, encoding="utf-16", newline="")
        try:
            for number, line in enumerate(text, start=1):
                yield _Line(number, line)
        except UnicodeDecodeError:
            yield _Line(-1, "", "not valid UTF-16 after its byte-order mark")
        return
    stream.read(skip)
    offset = skip
    for number, raw in enumerate(stream, start=1):
        try:
            yield _Line(number, raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            if fallback is not None:
                yield _Line(number, raw.decode(fallback, errors="replace"), fallback=True)
            else:
                yield _Line(number, raw.decode("utf-8", "surrogateescape") if keep_bad else "",
                            f"not valid UTF-8 (byte offset {offset + error.start} in the file)")
        offset += len(raw)


def _has_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# ------------------------------------------------------------------ parsing
class _FileParser:
    """Turns the raw records of one file into :class:`Parsed` records, bad rows included."""

    def __init__(self, file_index: int, file: str, settings: IngestSettings) -> None:
        self.file_index = file_index
        self.file = file
        self.settings = settings
        self.position = 0

    def bad(self, where: str, problem: str, *, count: bool = True) -> Parsed:
        if count:
            self.position += 1
        return Parsed(self.file_index, max(self.position, 1), self.file, where, problem=problem)

    def record(self, make: Callable[[], RawRecord], where: str, fallback: bool = False
               ) -> Parsed:
        self.position += 1
        try:
            raw = make()
            doc_id, unit, text, skip = accept_record(
                raw, self.settings.unit_column is not None, self.settings.min_chars,
                self.settings.max_chars)
        except InputError as error:
            return Parsed(self.file_index, self.position, self.file, error.where or where,
                          problem=error.problem)
        return Parsed(self.file_index, self.position, self.file, where, doc_id=doc_id,
                      unit=unit, text=text, skip=skip, fallback=fallback)


def parse_file(file_index: int, file: str, kind: str, open_binary: Callable[[], BinaryIO],
               settings: IngestSettings, relative_name: str = "") -> Iterator[Parsed]:
    """Every record of one input file, in file order, as :class:`Parsed` (never raises
    :class:`InputError`: a problem becomes a bad row; a problem that makes the rest of the
    file unreadable ends the file with one bad row saying so)."""
    parser = _FileParser(file_index, file, settings)
    with open_binary() as handle:
        if kind == "jsonl":
            yield from _parse_jsonl(parser, handle)
        elif kind == "csv":
            yield from _parse_csv(parser, handle)
        elif kind == "parquet":
            yield from _parse_parquet(parser, handle)
        elif kind == "txt":
            yield _parse_txt(parser, handle, relative_name)
        else:
            raise ValueError(f"unknown input format {kind!r}")


def _parse_jsonl(parser: _FileParser, handle: BinaryIO) -> Iterator[Parsed]:
    cols, ids = parser.settings.columns, IdPresence()
    for line in _decoded_lines(handle, parser.file, parser.settings.fallback_encoding, False):
        where = f"line {line.number}"
        if line.number < 0:
            yield parser.bad("end of file", line.problem or "", count=False)
            return
        if line.problem is not None:
            yield parser.bad(where, line.problem)
        elif line.text.strip():
            yield parser.record(
                lambda t=line.text, w=where: jsonl_record(t, parser.file, w, cols, ids),
                where, line.fallback)


def _parse_csv(parser: _FileParser, handle: BinaryIO) -> Iterator[Parsed]:
    cols = parser.settings.columns
    lines = _decoded_lines(handle, parser.file, parser.settings.fallback_encoding, True)
    bad_lines: set[int] = set()
    fallback_lines: set[int] = set()

    def texts() -> Iterator[str]:
        for line in lines:
            if line.number < 0:
                raise csv.Error(line.problem)
            if line.problem is not None:
                bad_lines.add(line.number)
            if line.fallback:
                fallback_lines.add(line.number)
            yield line.text

    with unlimited_csv_fields():
        reader = csv.reader(texts(), strict=True)
        start = 1
        try:
            header = next(reader, None)
            if header is None:
                yield parser.bad("line 1", "empty file (no header row)")
                return
            try:
                layout = CsvLayout(header, parser.file, cols)
            except InputError as error:
                yield parser.bad("line 1", error.problem + " (the file is not read)")
                return
            start = reader.line_num + 1
            for row in reader:
                first, start = start, reader.line_num + 1
                if not row:
                    continue
                where = f"line {first}"
                span = set(range(first, start))
                if span & bad_lines or any(_has_surrogates(cell) for cell in row):
                    yield parser.bad(where, "not valid UTF-8")
                    continue
                yield parser.record(lambda r=row, w=where: layout.record(r, parser.file, w),
                                    where, bool(span & fallback_lines))
        except csv.Error as error:
            yield parser.bad(f"line {start}", f"malformed CSV: {error} (the rest of the file "
                                              "is not read)")


def _parse_parquet(parser: _FileParser, handle: BinaryIO) -> Iterator[Parsed]:
    try:
        parquet = open_parquet(handle, parser.file)
        wanted = parquet_columns(parquet.schema_arrow, parser.file, parser.settings.columns)
        for raw in parquet_records(parquet, parser.file, wanted):
            yield parser.record(lambda r=raw: r, raw.where)
    except InputError as error:
        suffix = " (the rest of the file is not read)" if parser.position else \
            " (the file is not read)"
        yield parser.bad(error.where or "file", error.problem + suffix)


def _parse_txt(parser: _FileParser, handle: BinaryIO, relative_name: str) -> Parsed:
    data = handle.read()
    encoding, skip = _bom_encoding(data[:4])
    where = f"file {relative_name}"
    fallback = False
    try:
        text = data[skip:].decode(encoding or "utf-8")
    except UnicodeDecodeError as error:
        if parser.settings.fallback_encoding is None or encoding == "utf-16":
            return parser.bad(where, f"not valid {(encoding or 'utf-8').upper()} "
                                     f"(byte offset {error.start + skip})")
        text, fallback = data.decode(parser.settings.fallback_encoding, errors="replace"), True
    doc_id = relative_name[: -len(".txt")] if relative_name.lower().endswith(".txt") \
        else relative_name
    return parser.record(lambda: RawRecord(parser.file, where, text, doc_id, None), where,
                         fallback)


# ------------------------------------------------------------------ ids, units, shards
def resolve_ids(group: str, records: Iterable[Parsed]) -> list[tuple[Parsed, int, bool]]:
    """Unique ids for the records of one id group
    (:func:`~dpsynrag.pipeline.inputs.resolve_id_group`, as the in-process reader does).

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
    """One document for the unit (:func:`~dpsynrag.pipeline.inputs.bound_one_unit`) and how
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

