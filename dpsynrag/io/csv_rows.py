"""CSV: RFC 4180 with a header row (quoted fields may span lines), read streaming.

Python's ``csv`` module parses it; every cell is a string, so ids such as ``007`` keep their
zeros. (pyarrow.csv is not used: its parse errors quote the offending row, i.e. private
text.) A line that cannot be decoded makes its row bad, named by that line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import BinaryIO

from dpsynrag.io.decoding import Decoding, decoded_lines
from dpsynrag.io.errors import InputError
from dpsynrag.io.records import NO_ID, BadRow, Columns, RawRecord, describe_names

__all__ = ["SUFFIXES", "CsvLayout", "read_csv", "unlimited_csv_fields"]

SUFFIXES = (".csv",)


class _Undecodable(Exception):
    """The rest of the file cannot be decoded (raised through the CSV parser)."""


class CsvLayout:
    """Where the text (one or several), id and unit columns are in a CSV file, from its
    header row."""

    def __init__(self, header: list[str], file: str, cols: Columns) -> None:
        index = {name: i for i, name in enumerate(header)}
        wanted = [*((name, "text") for name in cols.texts), (cols.unit, "unit"),
                  (cols.id if cols.id_explicit else None, "id")]
        for name, kind in wanted:
            if name is not None and name not in index:
                raise InputError(file, "line 1", f"missing {kind} column {name!r} "
                                                 f"(columns found: {describe_names(header)})")
        self.cols = cols
        self.width = len(header)
        self.texts = [index[name] for name in cols.texts]
        self.id = index.get(cols.id) if cols.id is not None else None
        self.unit = index[cols.unit] if cols.unit is not None else None

    def record(self, row: list[str], file: str, where: str) -> RawRecord:
        if len(row) != self.width:
            raise InputError(file, where, f"row has {len(row)} fields, the header has "
                                          f"{self.width}")
        return RawRecord(file, where, self.cols.text_value([row[i] for i in self.texts]),
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


def read_csv(handle: BinaryIO, file: str, cols: Columns,
             decoding: Decoding) -> Iterator[RawRecord | BadRow]:
    """Every record of one CSV file, in file order; a bad row is a :class:`BadRow`."""
    bad: dict[int, str] = {}  # line number -> why it cannot be decoded
    fallback: set[int] = set()

    def texts() -> Iterator[str]:
        for line in decoded_lines(handle, decoding, keep_bad=True):
            if line.number < 0:
                raise _Undecodable(line.problem)
            if line.problem is not None:
                bad[line.number] = line.problem
            if line.fallback:
                fallback.add(line.number)
            yield line.text

    def bad_line(lines: range) -> BadRow | None:
        number = next((n for n in lines if n in bad), None)
        return None if number is None else BadRow(f"line {number}", bad[number])

    with unlimited_csv_fields():
        reader = csv.reader(texts(), strict=True)
        start = 1
        try:
            header = next(reader, None)
            if header is None:
                yield BadRow(None, "empty file (no header row)")
                return
            undecodable = bad_line(range(1, reader.line_num + 1))
            if undecodable is not None:
                yield replace(undecodable, stops="file")
                return
            try:
                layout = CsvLayout(header, file, cols)
            except InputError as error:
                yield BadRow.of(error, "file")
                return
            start = reader.line_num + 1
            for row in reader:
                first, start = start, reader.line_num + 1
                if not row:  # a blank line
                    continue
                lines = range(first, start)
                undecodable = bad_line(lines)
                if undecodable is not None:
                    yield undecodable
                    continue
                try:
                    record = layout.record(row, file, f"line {first}")
                except InputError as error:
                    yield BadRow.of(error)
                    continue
                yield replace(record, fallback=True) if fallback.intersection(lines) else record
        except csv.Error as error:
            undecodable = bad_line(range(start, max(bad, default=0) + 1))
            yield replace(undecodable, stops="rest") if undecodable is not None else \
                BadRow(f"line {start}", f"malformed CSV: {error}", "rest")
        except _Undecodable as error:
            yield BadRow("end of file", str(error))
