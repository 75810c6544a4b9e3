"""One record as a format reader yields it, and the checks that make it a document.

A reader yields a :class:`RawRecord` (the raw text / id / unit values and where they are) or
a :class:`BadRow` (where, and the problem, never the content). :func:`accept_record` turns a
raw record into ``(id, unit, text, skip)``, or raises :class:`InputError`. The in-process
reader stops at the first problem; the Beam ingest counts bad rows and goes on.

Several text columns (``--text-column subject --text-column body``): a reader yields their
values as :class:`TextParts`; :func:`accept_record` checks each one and joins the non-empty
ones, in the columns' order, with :data:`TEXT_SEPARATOR` (a blank line, which
:func:`~dpsynrag.io.text.normalise_text` keeps) before normalising. One text column is read
exactly as before: its raw value, so its documents and content-derived ids do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from dpsynrag.io.decoding import Decoding
from dpsynrag.io.errors import InputError
from dpsynrag.io.ids import content_id
from dpsynrag.io.text import normalise_text

__all__ = [
    "DEFAULT_ID_COLUMN",
    "NO_ID",
    "TEXT_SEPARATOR",
    "BadRow",
    "BadUtf8",
    "Columns",
    "IdPresence",
    "RawRecord",
    "TextParts",
    "TextReader",
    "accept_record",
    "describe_names",
    "json_type",
    "split_column_list",
    "text_columns",
]

DEFAULT_ID_COLUMN = "id"
"""The id column name that may be absent (ids are then content-derived,
:func:`~dpsynrag.io.ids.content_id`); any other must exist."""
NO_ID: Any = object()
"""The id of a raw record read without an id column."""
_MAX_NAMES_SHOWN = 20
TEXT_SEPARATOR = "\n\n"
"""Joins the non-empty values of several text columns: a blank line, a paragraph break that
:func:`~dpsynrag.io.text.normalise_text` keeps (it collapses several blank lines to one)."""


@dataclass(frozen=True)
class RawRecord:
    """One record as read: where it is, and its raw text / id / unit values.

    ``fallback`` says that its text was decoded with the fallback encoding.
    """

    file: str
    where: str
    text: Any
    id: Any  # NO_ID when no id column is in use
    unit: Any
    fallback: bool = False


@dataclass(frozen=True)
class TextParts:
    """The raw values of a record's text columns when there are several, in their order."""

    columns: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class BadRow:
    """A record, or the rest of a file, that cannot be read: where and why, no content.

    ``where`` is None for a problem of the whole file. ``stops`` is None when only this
    record is bad, ``"file"`` when nothing of the file is read, ``"rest"`` when the rest of
    the file is not read.
    """

    where: str | None
    problem: str
    stops: str | None = None

    @classmethod
    def of(cls, error: InputError, stops: str | None = None) -> BadRow:
        """The bad row an :class:`InputError` of one record describes."""
        return cls(error.where, error.problem, stops)


class BadUtf8:
    """A Parquet string value that is not valid UTF-8 (its byte offset kept for the error)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def error(self, file: str, where: str) -> InputError:
        return InputError(file, where, f"not valid UTF-8 (byte offset {self.offset} in the "
                                       "value)")


def describe_names(names: Iterable[str]) -> str:
    """Column names for an error message: the first 20, quoted and cut to 40 characters."""
    names = [str(n) for n in names]
    shown = [repr(n[:40]) for n in names[:_MAX_NAMES_SHOWN]]
    more = f" and {len(names) - _MAX_NAMES_SHOWN} more" if len(names) > _MAX_NAMES_SHOWN else ""
    return (", ".join(shown) + more) if shown else "none"


def json_type(value: Any) -> str:
    """The JSON type of a value in words ("a number", "null"), for error messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def text_columns(value: str | Iterable[str]) -> tuple[str, ...]:
    """The text column names ``value`` gives: one name (a string, taken as it is, commas
    included) or several, in order. ``ValueError`` for none, a name that is not a string, or
    a name given twice."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names:
        raise ValueError("no text column given")
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"a text column name must be a string, got {json_type(name)}")
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise ValueError(f"text column {twice!r} is given twice")
    return names


def split_column_list(text: str) -> tuple[str, ...]:
    """The column names of one ``--text-column`` value: ``"subject, body"`` is ``("subject",
    "body")`` (each name stripped of spaces); a value without a comma is one name, kept as
    it is. ``ValueError`` for an empty name in a list (``"subject,"``)."""
    if "," not in text:
        return (text,)
    names = tuple(part.strip() for part in text.split(","))
    if not all(names):
        raise ValueError(f"empty column name in {text!r}")
    return names


class Columns:
    """Which columns to read, and whether their absence is an error.

    ``text_column`` is one name or several (:func:`text_columns`); ``texts`` holds them."""

    def __init__(self, text_column: str | Sequence[str], id_column: str | None,
                 unit_column: str | None):
        self.texts = text_columns(text_column)
        self.id = id_column
        self.id_explicit = id_column is not None and id_column != DEFAULT_ID_COLUMN
        self.unit = unit_column

    def text_value(self, values: Sequence[Any]) -> Any:
        """A raw record's ``text`` from its text columns' values (in :attr:`texts`' order):
        the value itself for one column, :class:`TextParts` for several."""
        if len(self.texts) == 1:
            return values[0]
        return TextParts(self.texts, tuple(values))


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
                                              f"(columns found: {describe_names(found)})")
            self.use_id, self.first_where = has_id, where
        elif has_id != self.use_id:
            state = "has" if has_id else "lacks"
            raise InputError(file, where, f"record {state} id column {cols.id!r} unlike the "
                                          f"first record ({self.first_where}); give every "
                                          "record an id or none")
        return self.use_id


TextReader = Callable[[BinaryIO, str, Columns, Decoding], Iterator[RawRecord | BadRow]]
"""A reader of one text-format file: ``(handle, file name, columns, decoding)`` -> items."""


def _unicode(text: str, raw: RawRecord, what: str) -> str:
    """``text`` itself, or an :class:`InputError` when it holds a lone surrogate (a JSON
    ``"\\ud800"`` escape without its pair): not a Unicode character, it cannot be written as
    UTF-8, hashed or embedded. The message gives its place, never the text around it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(raw.file, raw.where,
                         f"{what} holds an unpaired surrogate U+{ord(text[error.start]):04X} "
                         f"at character {error.start + 1}, which is not valid Unicode; fix "
                         "the text upstream") from None
    return text


def _check_id(value: Any, raw: RawRecord, what: str) -> str:
    if isinstance(value, BadUtf8):
        raise value.error(raw.file, raw.where)
    if isinstance(value, bool) or not isinstance(value, str | int):
        found = "null" if value is None else type(value).__name__
        raise InputError(raw.file, raw.where,
                         f"{what} is {found}, expected a string or an integer")
    text = _unicode(str(value), raw, what)
    if not text.strip():
        raise InputError(raw.file, raw.where, f"{what} is empty")
    return text


def _joined(parts: TextParts, raw: RawRecord) -> str | None:
    """The non-empty values of several text columns joined by :data:`TEXT_SEPARATOR` (None
    when every one is null or blank); a value that is not a string is an error naming its
    column."""
    texts = []
    for column, value in zip(parts.columns, parts.values, strict=True):
        if value is None:
            continue
        if isinstance(value, BadUtf8):
            raise value.error(raw.file, raw.where)
        if not isinstance(value, str):
            raise InputError(raw.file, raw.where, f"text is {json_type(value)} in column "
                                                  f"{column!r}, expected a string")
        if value.strip():
            texts.append(_unicode(value, raw, f"text in column {column!r}"))
    return TEXT_SEPARATOR.join(texts) if texts else None


def accept_record(raw: RawRecord, has_unit_column: bool, min_chars: int,
                  max_chars: int | None) -> tuple[str, str | None, str, str | None]:
    """Validate and normalise one raw record: ``(id, unit, text, skip reason or None)``.

    ``id`` is the record's id column value or, without one, its content-derived id
    (:func:`~dpsynrag.io.ids.content_id`): a function of this record alone. ``unit`` is the
    unit column's value, or None without a unit column (the record is then its own unit,
    named by its final id, see :func:`~dpsynrag.io.ids.resolve_id_group`). Raises
    :class:`InputError` for a bad id, unit or text type; an empty, too short or too long text
    is a skip (its ``text`` is ``""``), not an error. Several text columns (:class:`TextParts`)
    are joined first (:func:`_joined`); all of them null or blank is the skip ``"empty"``.
    """
    unit = _check_id(raw.unit, raw, "unit") if has_unit_column else None
    explicit = None if raw.id is NO_ID else _check_id(raw.id, raw, "id")
    skip = None
    value = _joined(raw.text, raw) if isinstance(raw.text, TextParts) else raw.text
    if value is None:
        text, skip = "", "empty"
    elif isinstance(value, BadUtf8):
        raise value.error(raw.file, raw.where)
    elif not isinstance(value, str):
        raise InputError(raw.file, raw.where, f"text is {json_type(value)}, expected a string")
    else:
        text = normalise_text(_unicode(value, raw, "text"))
        if not text:
            skip = "empty"
        elif len(text) < min_chars:
            skip = "too_short"
        elif max_chars is not None and len(text) > max_chars:
            skip = "too_long"
    if skip is not None:
        text = ""
    return (explicit if explicit is not None else content_id(unit, text)), unit, text, skip
