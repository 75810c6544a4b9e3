"""Parquet: read batch by batch with pyarrow; text, id and unit column types checked.

A string value that is not valid UTF-8 arrives as a :class:`~dpsynrag.io.records.BadUtf8`
(its record is bad, no other); an unreadable file or batch ends the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dpsynrag.io.errors import InputError
from dpsynrag.io.records import NO_ID, BadRow, BadUtf8, Columns, RawRecord, describe_names

__all__ = ["SUFFIXES", "IdColumnAcrossFiles", "read_parquet"]

SUFFIXES = (".parquet",)
_BATCH_ROWS = 4096


class IdColumnAcrossFiles:
    """Several Parquet files read as one input: all have the id column or none does."""

    def __init__(self, cols: Columns) -> None:
        self.cols = cols
        self.first: tuple[str, bool] | None = None

    def check(self, file: str, has_id: bool) -> None:
        if self.first is None:
            self.first = (file, has_id)
        elif self.first[1] != has_id:
            raise InputError(file, None, f"id column {self.cols.id!r} is present in some "
                                         f"Parquet files and absent in others (first file: "
                                         f"{self.first[0]})")


def read_parquet(source: Any, file: str, cols: Columns, *,
                 across: IdColumnAcrossFiles | None = None) -> Iterator[RawRecord | BadRow]:
    """Every record of one Parquet file (a path or a binary file object), in file order.

    A file that cannot be opened, lacks a column or has one of the wrong type is one
    :class:`BadRow` (nothing read); an unreadable batch ends the file with one.
    """
    read_any = False
    try:
        parquet = _open(source, file)
        wanted = _columns(parquet.schema_arrow, file, cols)
        if across is not None:
            across.check(file, "id" in wanted)
        for raw in _records(parquet, file, cols, wanted):
            read_any = True
            yield raw
    except InputError as error:
        yield BadRow.of(error, "rest" if read_any else "file")


def _open(source: Any, file: str) -> Any:
    """``pyarrow.parquet.ParquetFile`` of a path or binary file object, or InputError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(file, None, f"not a readable Parquet file ({type(error).__name__})"
                         ) from None


def _columns(schema: Any, file: str, cols: Columns) -> dict[str, str]:
    """Role (``id``/``unit``, those read) -> column name of one Parquet file; the types of
    those and of the text columns (:attr:`Columns.texts`) checked."""
    import pyarrow as pa

    names = schema.names
    for text in cols.texts:
        if text not in names:
            raise InputError(file, None, f"missing text column {text!r} "
                                         f"(columns found: {describe_names(names)})")
    wanted: dict[str, str] = {}
    if cols.unit is not None:
        if cols.unit not in names:
            raise InputError(file, None, f"missing unit column {cols.unit!r} "
                                         f"(columns found: {describe_names(names)})")
        wanted["unit"] = cols.unit
    if cols.id is not None and cols.id in names:
        wanted["id"] = cols.id
    elif cols.id_explicit:
        raise InputError(file, None, f"missing id column {cols.id!r} "
                                     f"(columns found: {describe_names(names)})")
    for role, name in [*(("text", text) for text in cols.texts), *wanted.items()]:
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


def _records(parquet: Any, file: str, cols: Columns, wanted: dict[str, str]
             ) -> Iterator[RawRecord]:
    """The raw records of one open ``ParquetFile``; an unreadable batch raises InputError."""
    import pyarrow as pa

    columns = list(dict.fromkeys([*cols.texts, *wanted.values()]))
    row = 0
    try:
        for batch in parquet.iter_batches(columns=columns, batch_size=_BATCH_ROWS):
            values = {name: _values(batch.column(batch.schema.get_field_index(name)))
                      for name in columns}
            texts = [values[name] for name in cols.texts]
            ids = values[wanted["id"]] if "id" in wanted else None
            units = values[wanted["unit"]] if "unit" in wanted else None
            for i in range(batch.num_rows):
                yield RawRecord(file, f"row index {row + i}",
                                cols.text_value([text[i] for text in texts]),
                                ids[i] if ids is not None else NO_ID,
                                units[i] if units is not None else None)
            row += batch.num_rows
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(file, f"row index {row}",
                         f"cannot read Parquet data ({type(error).__name__})") from None


def _is_arrow_string(kind: Any) -> bool:
    import pyarrow as pa

    is_view = getattr(pa.types, "is_string_view", lambda _: False)
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_view(kind))


def _values(column: Any) -> list[Any]:
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
