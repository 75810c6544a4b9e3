"""Reading the private input of ``build-corpus INPUT``.

Formats (chosen by the path):

* ``*.jsonl`` / ``*.ndjson`` / ``*.json``: JSON Lines, one object per line, read line by line.
  Blank lines are ignored. A JSON array file is refused with a hint.
* ``*.csv``: RFC 4180 CSV with a header row (quoted fields may span lines), read streaming by
  Python's ``csv`` module. Every cell is a string, so ids such as ``007`` keep their zeros.
  (pyarrow.csv is not used: its parse errors quote the offending row, i.e. private text.)
* ``*.parquet`` or a directory of ``*.parquet`` files (recursively, sorted by relative path,
  names starting with ``.`` or ``_`` ignored): read batch by batch with pyarrow.
* a directory of ``*.txt`` files (recursively, sorted, names starting with ``.`` ignored):
  one document per file (strict UTF-8, a BOM is dropped), id = the path
  relative to the directory, POSIX separators, without the ``.txt`` suffix. ``text_column``
  and ``id_column`` do not apply; ``unit_column`` is refused.

Normalisation of every text (:func:`normalise_text`): Unicode NFC; CRLF, CR, NEL and the
Unicode line/paragraph separators → LF; other control characters become spaces; runs of
horizontal whitespace (space, tab, NBSP, the Unicode spaces, BOM) collapse to one space;
trailing spaces of each line are removed (leading ones, i.e. indentation, are kept as one
space); several blank lines collapse to one (paragraphs are kept: they carry structure the
LLM can use); the whole text is stripped.

Skips (documented, counted in :attr:`InputDocuments.skipped`, never errors):

* ``"empty"``: the text is empty after normalisation, or null (JSON ``null``, Parquet null);
* ``"too_short"``: non-empty but shorter than ``min_chars`` characters;
* ``"too_long"``: longer than ``max_chars`` characters after normalisation. Such a record is
  skipped whole rather than truncated: truncation would silently put a different document
  into the corpus, and the operator can raise ``max_chars`` or split documents upstream;
* ``"duplicate"``: a record identical in id group, unit and text to another one (see Ids
  below); ``"unit_bound"`` is added by :func:`bound_units`.

An input with no records, or whose every record is skipped, is an error.

Everything else is an :class:`InputError`: one line naming the file, the place (1-based line
for JSONL and CSV, 0-based row index for Parquet, the file for a ``.txt`` directory) and the
problem. Error messages never quote a document's text, id or unit value (ids and units may be
private too); column names, type names, line numbers and byte offsets are printed.

Ids (every key a privacy rule uses is a function of the record itself, never of its place):

* with an id column, the id is the column's value (a string, or an integer as its decimal
  string), kept as it is unless shared (below);
* without one, the id is content-derived: ``doc-`` and the first 32 hex digits of
  :func:`content_key` ``(unit, text)`` (``unit`` = the unit column's value, or ``""`` without
  a unit column; ``text`` = the normalised text). Removing or adding a record never changes
  another record's id (a positional ``row-<n>`` would shift every later one);
* records that share an id (see :func:`resolve_id_group`): records identical in unit and
  text are one record (counted as ``"duplicate"``; with content-derived ids this is the only
  way to share an id, and the kept document is the same whichever copy is kept); records
  with different content each get ``<id>~dup-<32 hex digits of content_key>``. No record is
  ever dropped because another one has its id, so adding a record can never remove another
  unit's record: at most it renames the records that shared its id (text and unit
  unchanged). An id already ending in ``~dup-`` and 32 hex digits belongs to the group of
  the id before that suffix, which keeps every final id unique.

The :attr:`InputDocuments.skipped` counts are derived from private data: log or release them
only through a DP mechanism.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_ID_COLUMN",
    "SKIP_REASONS",
    "UNIT_BOUND_RULES",
    "InputDocuments",
    "InputError",
    "bound_one_unit",
    "bound_units",
    "content_id",
    "content_key",
    "id_group",
    "input_fingerprint",
    "normalise_text",
    "read_documents",
    "resolve_id_group",
    "unit_rank",
]

SKIP_REASONS = ("empty", "too_short", "too_long", "duplicate", "unit_bound")
"""Keys of :attr:`InputDocuments.skipped` (always all present)."""

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet",)
_MAX_NAMES_SHOWN = 20
_FINGERPRINT_DOMAIN = b"dpsynrag/input-fingerprint/v1\x00"
CONTENT_ID_PREFIX = "doc-"
"""Prefix of a content-derived id (the input has no id column)."""
DUPLICATE_MARK = "~dup-"
"""Joins an id shared by records of different content to each record's content key."""
_KEY_HEX = 32  # hex digits of a content key in an id: 128 bits, collision-free in practice
_DERIVED_SUFFIX = re.compile(f"{re.escape(DUPLICATE_MARK)}[0-9a-f]{{{_KEY_HEX}}}\\Z")


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


DEFAULT_ID_COLUMN = "id"
"""The id column name that may be absent (ids are then content-derived, see the module
docstring); any other must exist."""


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


# ------------------------------------------------------------------ normalisation
_HS = "\t\x0b\x0c \xa0\u1680\u2000-\u200a\u202f\u205f\u3000\ufeff"  # horizontal spaces
_HSPACE = re.compile(f"[{_HS}]{{2,}}|[{_HS.replace(' ', '')}]")  # runs of 2+, or not " "
_SPACES = re.compile(r"  +")
_TRAILING = re.compile(r" +\n")
_MANY_NEWLINES = re.compile(r"\n(?: ?\n){2,}")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")
_LINE_BREAKS = re.compile(r"\r\n?|[\x85\u2028\u2029]")


def normalise_text(text: str) -> str:
    """NFC, LF newlines, collapsed horizontal whitespace, at most one blank line, stripped."""
    text = unicodedata.normalize("NFC", text)
    if not text.replace("\n", "").isprintable():  # fast path: only " " and LF are spaces
        text = _LINE_BREAKS.sub("\n", text)
        text = _CONTROL.sub(" ", text)
        text = _HSPACE.sub(" ", text)
    elif "  " in text:
        text = _SPACES.sub(" ", text)
    if " \n" in text:
        text = _TRAILING.sub("\n", text)
    if "\n\n" in text:
        text = _MANY_NEWLINES.sub("\n\n", text)
    return text.strip()


# ------------------------------------------------------------------ raw records
@dataclass(frozen=True)
class RawRecord:
    """One record as read: where it is, and its raw text / id / unit values."""

    file: str
    where: str
    text: Any
    id: Any  # NO_ID when no id column is in use
    unit: Any


NO_ID: Any = object()


def _describe_names(names: Iterable[str]) -> str:
    names = [str(n) for n in names]
    shown = [repr(n[:40]) for n in names[:_MAX_NAMES_SHOWN]]
    more = f" and {len(names) - _MAX_NAMES_SHOWN} more" if len(names) > _MAX_NAMES_SHOWN else ""
    return (", ".join(shown) + more) if shown else "none"


def _decode_line(raw: bytes, file: str, line_no: int, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            file, f"line {line_no}",
            f"not valid UTF-8 (byte offset {offset + error.start} in the file)") from None


def _iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line with its terminator), streaming, strict UTF-8."""
    file = str(path)
    offset = 0
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
                offset = 3
            yield line_no, _decode_line(raw, file, line_no, offset)
            offset += len(raw)


class Columns:
    """Which columns to read, and whether their absence is an error."""

    def __init__(self, text_column: str, id_column: str | None, unit_column: str | None):
        self.text = text_column
        self.id = id_column
        self.id_explicit = id_column is not None and id_column != DEFAULT_ID_COLUMN
        self.unit = unit_column


class IdPresence:
    """Every record of a file must have the id column or none may: the first one decides."""

    def __init__(self) -> None:
        self.use_id: bool | None = None
        self.first_where = ""

    def check(self, has_id: bool, file: str, where: str, cols: Columns,
              found: Iterable[str]) -> bool:
        if self.use_id is None:
            if cols.id_explicit and not has_id:
                raise InputError(file, where, f"missing id column {cols.id!r} "
                                              f"(columns found: {_describe_names(found)})")
            self.use_id, self.first_where = has_id, where
        elif has_id != self.use_id:
            state = "has" if has_id else "lacks"
            raise InputError(file, where, f"record {state} id column {cols.id!r} unlike the "
                                          f"first record ({self.first_where}); give every "
                                          "record an id or none")
        return self.use_id


def jsonl_record(line: str, file: str, where: str, cols: Columns,
                 ids: IdPresence) -> RawRecord:
    """Parse one non-blank JSON Lines line into a raw record (InputError when it is bad)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as error:
        hint = ""
        if line.strip() in ("[", "[]") or line.lstrip().startswith("[{"):
            hint = " (this looks like a JSON array; expected one JSON object per line)"
        raise InputError(file, where, f"malformed JSON: {error.msg} at column "
                                      f"{error.colno}{hint}") from None
    if not isinstance(obj, dict):
        hint = " (expected one JSON object per line)" if isinstance(obj, list) else ""
        raise InputError(file, where, f"expected a JSON object, found {_json_type(obj)}{hint}")
    if cols.text not in obj:
        raise InputError(file, where, f"missing text column {cols.text!r} "
                                      f"(columns found: {_describe_names(obj)})")
    if cols.unit is not None and cols.unit not in obj:
        raise InputError(file, where, f"missing unit column {cols.unit!r} "
                                      f"(columns found: {_describe_names(obj)})")
    use_id = ids.check(cols.id is not None and cols.id in obj, file, where, cols, obj)
    return RawRecord(file, where, obj[cols.text], obj[cols.id] if use_id else NO_ID,
                     obj[cols.unit] if cols.unit is not None else None)


def _iter_jsonl(path: Path, cols: Columns) -> Iterator[RawRecord]:
    file = str(path)
    ids = IdPresence()
    for line_no, line in _iter_lines(path):
        if line.strip():
            yield jsonl_record(line, file, f"line {line_no}", cols, ids)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


class CsvLayout:
    """Where the text, id and unit columns are in a CSV file, from its header row."""

    def __init__(self, header: list[str], file: str, cols: Columns) -> None:
        index = {name: i for i, name in enumerate(header)}
        if cols.text not in index:
            raise InputError(file, "line 1", f"missing text column {cols.text!r} "
                                             f"(columns found: {_describe_names(header)})")
        for name, kind in ((cols.unit, "unit"), (cols.id if cols.id_explicit else None, "id")):
            if name is not None and name not in index:
                raise InputError(file, "line 1", f"missing {kind} column {name!r} "
                                                 f"(columns found: {_describe_names(header)})")
        self.width = len(header)
        self.text = index[cols.text]
        self.id = index.get(cols.id) if cols.id is not None else None
        self.unit = index[cols.unit] if cols.unit is not None else None

    def record(self, row: list[str], file: str, where: str) -> RawRecord:
        if len(row) != self.width:
            raise InputError(file, where, f"row has {len(row)} fields, the header has "
                                          f"{self.width}")
        return RawRecord(file, where, row[self.text],
                         row[self.id] if self.id is not None else NO_ID,
                         row[self.unit] if self.unit is not None else None)


@contextmanager
def unlimited_csv_fields() -> Iterator[None]:
    """Over-long CSV fields are skipped as "too_long" later, not refused by the parser."""
    old_limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        yield
    finally:
        csv.field_size_limit(old_limit)


def _iter_csv(path: Path, cols: Columns) -> Iterator[RawRecord]:
    file = str(path)
    with unlimited_csv_fields():
        reader = csv.reader((line for _, line in _iter_lines(path)), strict=True)
        start = 1
        try:
            header = next(reader, None)
            if header is None:
                raise InputError(file, None, "empty file (no header row)")
            layout = CsvLayout(header, file, cols)
            start = reader.line_num + 1
            for row in reader:
                where = f"line {start}"
                start = reader.line_num + 1
                if row:  # not a blank line
                    yield layout.record(row, file, where)
        except csv.Error as error:
            raise InputError(file, f"line {start}", f"malformed CSV: {error}") from None


def _parquet_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted((p for p in path.rglob("*.parquet")
                   if p.is_file() and not _hidden(p.relative_to(path))),
                  key=lambda p: p.relative_to(path).as_posix())


def _hidden(relative: Path, prefixes: str | tuple[str, ...] = (".", "_")) -> bool:
    return any(part.startswith(prefixes) for part in relative.parts)


class BadUtf8:
    """A Parquet string value that is not valid UTF-8 (its byte offset kept for the error)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def error(self, file: str, where: str) -> InputError:
        return InputError(file, where, f"not valid UTF-8 (byte offset {self.offset} in the "
                                       "value)")


def parquet_columns(schema: Any, file: str, cols: Columns) -> dict[str, str]:
    """Role (``text``/``id``/``unit``) -> column name of one Parquet file, types checked."""
    import pyarrow as pa

    names = schema.names
    wanted: dict[str, str] = {"text": cols.text}
    if cols.text not in names:
        raise InputError(file, None, f"missing text column {cols.text!r} "
                                     f"(columns found: {_describe_names(names)})")
    if cols.unit is not None:
        if cols.unit not in names:
            raise InputError(file, None, f"missing unit column {cols.unit!r} "
                                         f"(columns found: {_describe_names(names)})")
        wanted["unit"] = cols.unit
    if cols.id is not None and cols.id in names:
        wanted["id"] = cols.id
    elif cols.id_explicit:
        raise InputError(file, None, f"missing id column {cols.id!r} "
                                     f"(columns found: {_describe_names(names)})")
    for role, name in wanted.items():
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        ok = (_is_arrow_string(kind) or pa.types.is_null(kind)
              or (role != "text" and pa.types.is_integer(kind)))
        if not ok:
            expected = "string" if role == "text" else "string or integer"
            raise InputError(file, None, f"{role} column {name!r} has type {kind}, "
                                         f"expected {expected}")
    return wanted


def parquet_records(parquet: Any, file: str, wanted: dict[str, str]) -> Iterator[RawRecord]:
    """The raw records of one open ``pyarrow.parquet.ParquetFile``, batch by batch.

    A value that is not valid UTF-8 arrives as a :class:`BadUtf8` in the record's field;
    an unreadable batch raises :class:`InputError`.
    """
    import pyarrow as pa

    columns = list(dict.fromkeys(wanted.values()))
    row = 0
    try:
        for batch in parquet.iter_batches(columns=columns, batch_size=4096):
            values = {role: _parquet_values(batch.column(batch.schema.get_field_index(name)))
                      for role, name in wanted.items()}
            for i in range(batch.num_rows):
                yield RawRecord(file, f"row index {row + i}", values["text"][i],
                                values["id"][i] if "id" in values else NO_ID,
                                values["unit"][i] if "unit" in values else None)
            row += batch.num_rows
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(file, f"row index {row}",
                         f"cannot read Parquet data ({type(error).__name__})") from None


def open_parquet(source: Any, file: str) -> Any:
    """``pyarrow.parquet.ParquetFile`` of a path or binary file object, or InputError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(file, None, f"not a readable Parquet file ({type(error).__name__})"
                         ) from None


def _iter_parquet(path: Path, cols: Columns) -> Iterator[RawRecord]:
    files = _parquet_files(path)
    if not files:
        raise InputError(path, None, "no .parquet files in the directory")
    first_has_id: bool | None = None
    for file_path in files:
        file = str(file_path)
        parquet = open_parquet(file_path, file)
        wanted = parquet_columns(parquet.schema_arrow, file, cols)
        if first_has_id is None:
            first_has_id = "id" in wanted
        elif first_has_id != ("id" in wanted):
            raise InputError(file, None, f"id column {cols.id!r} is present in some Parquet "
                                         f"files and absent in others (first file: {files[0]})")
        for raw in parquet_records(parquet, file, wanted):
            for value in (raw.text, raw.id, raw.unit):
                if isinstance(value, BadUtf8):
                    raise value.error(file, raw.where)
            yield raw


def _is_arrow_string(kind: Any) -> bool:
    import pyarrow as pa

    is_view = getattr(pa.types, "is_string_view", lambda _: False)
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_view(kind))


def _parquet_values(column: Any) -> list[Any]:
    """Python values of one batch column; strings decoded strictly (BadUtf8 when not UTF-8)."""
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if _is_arrow_string(column.type):
        out: list[Any] = []
        for value in column.cast(pa.large_binary()).to_pylist():
            if value is None:
                out.append(None)
                continue
            try:
                out.append(value.decode("utf-8"))
            except UnicodeDecodeError as error:
                out.append(BadUtf8(error.start))
        return out
    return column.to_pylist()


def _iter_txt_dir(path: Path, files: list[Path]) -> Iterator[RawRecord]:
    for file_path in files:
        relative = file_path.relative_to(path).as_posix()
        data = file_path.read_bytes()
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputError(file_path, f"file {relative}",
                             f"not valid UTF-8 (byte offset {error.start})") from None
        yield RawRecord(str(file_path), f"file {relative}", text, relative[: -len(".txt")], None)


# ------------------------------------------------------------------ read_documents
def _check_id(value: Any, raw: RawRecord, what: str) -> str:
    if isinstance(value, BadUtf8):
        raise value.error(raw.file, raw.where)
    if isinstance(value, bool) or not isinstance(value, str | int):
        found = "null" if value is None else type(value).__name__
        raise InputError(raw.file, raw.where,
                         f"{what} is {found}, expected a string or an integer")
    text = str(value)
    if not text.strip():
        raise InputError(raw.file, raw.where, f"{what} is empty")
    return text


def accept_record(raw: RawRecord, has_unit_column: bool, min_chars: int,
                  max_chars: int | None) -> tuple[str, str | None, str, str | None]:
    """Validate and normalise one raw record: ``(id, unit, text, skip reason or None)``.

    ``id`` is the record's id column value or, without one, its content-derived id
    (:func:`content_id`): a function of this record alone. ``unit`` is the unit column's
    value, or None without a unit column (the record is then its own unit, named by its final
    id, see :func:`resolve_id_group`). Raises :class:`InputError` for a bad id, unit or text
    type; an empty, too short or too long text is a skip (its ``text`` is ``""``), not an
    error.
    """
    unit = _check_id(raw.unit, raw, "unit") if has_unit_column else None
    explicit = None if raw.id is NO_ID else _check_id(raw.id, raw, "id")
    skip = None
    if raw.text is None:
        text, skip = "", "empty"
    elif isinstance(raw.text, BadUtf8):
        raise raw.text.error(raw.file, raw.where)
    elif not isinstance(raw.text, str):
        raise InputError(raw.file, raw.where, f"text is {_json_type(raw.text)}, expected a string")
    else:
        text = normalise_text(raw.text)
        if not text:
            skip = "empty"
        elif len(text) < min_chars:
            skip = "too_short"
        elif max_chars is not None and len(text) > max_chars:
            skip = "too_long"
    if skip is not None:
        text = ""
    return (explicit if explicit is not None else content_id(unit, text)), unit, text, skip


@dataclass(frozen=True)
class _Accepted:
    """A record that passed validation and was not skipped (in-process reader)."""

    doc_id: str
    unit: str | None
    text: str


def read_documents(
    path: Path | str,
    *,
    text_column: str = "text",
    id_column: str | None = DEFAULT_ID_COLUMN,
    unit_column: str | None = None,
    max_chars: int | None = 20000,
    min_chars: int = 1,
) -> InputDocuments:
    """Read, validate and normalise the private documents at ``path``.

    ``id_column=None``, or ``"id"`` (the default) when no such column exists, gives
    content-derived ids (:func:`content_id`), never positional ones. Any other id column name
    that is missing is an error, as is a missing ``unit_column``. Records sharing an id are
    resolved by :func:`resolve_id_group` (identical ones collapse, counted as
    ``"duplicate"``; the others get distinct ids): a shared id is never an error and never
    drops another record. See the module docstring for formats, normalisation and skips.
    Raises :class:`InputError`.
    """
    path = Path(path)
    if max_chars is not None and max_chars < 1:
        raise ValueError("max_chars must be positive or None")
    if min_chars < 1:
        raise ValueError("min_chars must be at least 1")
    cols = Columns(text_column, id_column, unit_column)
    source, records = _open(path, cols)

    docs = InputDocuments([], [], [], dict.fromkeys(SKIP_REASONS, 0), source)
    accepted: list[_Accepted] = []
    n = 0
    for raw in records:
        n += 1
        doc_id, unit, text, skip = accept_record(raw, unit_column is not None, min_chars,
                                                 max_chars)
        if skip is not None:
            docs.skipped[skip] += 1
        else:
            accepted.append(_Accepted(doc_id, unit, text))
    if n == 0:
        raise InputError(path, None, "no documents (the input holds no records)")
    if not accepted:
        # the reasons, never their counts (counts of private records stay out of errors)
        reasons = ", ".join(reason for reason, count in docs.skipped.items() if count)
        hint = (f"; raise --max-chars (now {max_chars}) or split long documents upstream"
                if docs.skipped.get("too_long") else "")
        raise InputError(path, None, f"no usable documents: every record was skipped "
                                     f"({reasons}){hint}")
    _unique_ids(accepted, docs)
    return docs


def _unique_ids(accepted: Sequence[_Accepted], docs: InputDocuments) -> None:
    """Append ``accepted`` to ``docs`` with unique ids, in input order (:func:`resolve_id_group`).

    A document takes the place of the first of the identical records it stands for; the
    others are counted in ``docs.skipped["duplicate"]``.
    """
    groups: dict[str, list[int]] = {}
    for i, record in enumerate(accepted):
        groups.setdefault(id_group(record.doc_id), []).append(i)
    kept: list[tuple[int, str]] = []
    for group, members in groups.items():
        resolved = resolve_id_group(group, [(accepted[i].doc_id, accepted[i].unit,
                                             accepted[i].text) for i in members])
        for same, doc_id in resolved:
            kept.append((min(members[j] for j in same), doc_id))
            docs.skipped["duplicate"] += len(same) - 1
    kept.sort()
    for i, doc_id in kept:
        docs.ids.append(doc_id)
        docs.texts.append(accepted[i].text)
        docs.units.append(accepted[i].unit if accepted[i].unit is not None else doc_id)


def _open(path: Path, cols: Columns) -> tuple[str, Iterator[RawRecord]]:
    if not path.exists():
        raise InputError(path, None, "does not exist")
    if path.is_dir():
        txt = sorted((p for p in path.rglob("*.txt")
                      if p.is_file() and not _hidden(p.relative_to(path), ".")),
                     key=lambda p: p.relative_to(path).as_posix())
        parquet = _parquet_files(path)
        records = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                         if p.suffix.lower() in (*JSONL_SUFFIXES, *CSV_SUFFIXES)
                         and p.is_file() and not _hidden(p.relative_to(path)))
        if records:
            more = f" and {len(records) - 1} more" if len(records) > 1 else ""
            raise InputError(path, None, f"directory holds {records[0]}{more}, which a "
                                         "directory input would not read (it reads .txt or "
                                         ".parquet files); give that file as INPUT, or a "
                                         "directory of one kind")
        if txt and parquet:
            raise InputError(path, None, "directory holds both .txt and .parquet files; "
                                         "give one kind")
        if parquet:
            return "parquet", _iter_parquet(path, cols)
        if not txt:
            raise InputError(path, None, "no documents (directory has no .txt or .parquet "
                                         "files)")
        if cols.unit is not None:
            raise InputError(path, None, "unit_column is not supported for a directory of "
                                         ".txt files (each file is its own unit)")
        return "txt", _iter_txt_dir(path, txt)
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl", _iter_jsonl(path, cols)
    if suffix in CSV_SUFFIXES:
        return "csv", _iter_csv(path, cols)
    if suffix in PARQUET_SUFFIXES:
        return "parquet", _iter_parquet(path, cols)
    raise InputError(path, None, f"unsupported input suffix {suffix or '(none)'!r}; expected "
                                 ".jsonl, .json, .ndjson, .csv, .parquet, or a directory of "
                                 ".txt or .parquet files")


# ------------------------------------------------------------------ ids, units, fingerprint
def content_key(unit: str, text: str) -> bytes:
    """``sha256(unit ‖ 0x00 ‖ sha256(text))``: the key of one record's content.

    A function of the record alone (its unit and normalised text), never of its place in the
    input or of other records. It names records without an id (:func:`content_id`), tells
    apart records sharing an id (:func:`resolve_id_group`) and ranks a unit's records
    (:func:`unit_rank`). Unkeyed: it is an operator-side key, never released.
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


def unit_rank(unit: str, text: str) -> bytes:
    """The data-independent rank that decides which record of a unit is kept.

    :func:`content_key` of the unit and the record's normalised text: a function of the
    record itself, so removing or adding another record (of this unit or any other) never
    changes the order of this unit's remaining records.
    """
    return content_key(unit, text)


UNIT_BOUND_RULES = ("pick", "concat")
"""How a privacy unit with several records becomes one document (see :func:`bound_one_unit`)."""


def bound_one_unit(unit: str, records: Sequence[tuple[str, str]], rule: str = "pick",
                   max_chars: int | None = None) -> tuple[str, str, list[int]]:
    """One document for a unit from its ``(id, text)`` records: ``(id, text, used)``.

    ``used`` lists the positions in ``records`` that went into the document. Both rules look
    at this unit's own records only (never at other units or at record order), in the order
    of ``sha256(unit ‖ 0x00 ‖ sha256(text))`` (:func:`unit_rank`; equal texts by id, which
    changes only the kept id, never the text):

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


def input_fingerprint(docs: InputDocuments, key: bytes) -> str:
    """HMAC-SHA256 (hex) over the sorted ``(id, sha256(text))`` pairs of ``docs``.

    A keyed hash: an operator holding ``key`` can check that two builds read the same input,
    while the value reveals nothing about the content to anyone without the key. Independent
    of record order; the encoding is length-prefixed, so it is unambiguous.
    """
    if not isinstance(key, bytes | bytearray) or len(key) == 0:
        raise ValueError("key must be non-empty bytes (32 random bytes recommended)")
    pairs = sorted((doc_id.encode("utf-8"), hashlib.sha256(text.encode("utf-8")).digest())
                   for doc_id, text in zip(docs.ids, docs.texts, strict=True))
    mac = hmac.new(bytes(key), _FINGERPRINT_DOMAIN, hashlib.sha256)
    mac.update(len(pairs).to_bytes(8, "big"))
    for doc_id, digest in pairs:
        mac.update(len(doc_id).to_bytes(8, "big"))
        mac.update(doc_id)
        mac.update(digest)
    return mac.hexdigest()
