"""JSON Lines: one object per line, read line by line; blank lines are not records.

A JSON array file is refused with a hint. ``.jsonl``, ``.ndjson`` and ``.json`` files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import BinaryIO

from dpsynrag.io.decoding import Decoding, decoded_lines
from dpsynrag.io.errors import InputError
from dpsynrag.io.records import (
    NO_ID,
    BadRow,
    Columns,
    IdPresence,
    RawRecord,
    describe_names,
    json_type,
)

__all__ = ["SUFFIXES", "json_error_text", "jsonl_record", "read_jsonl"]

SUFFIXES = (".jsonl", ".ndjson", ".json")


def json_error_text(error: json.JSONDecodeError) -> str:
    """``error`` in words, with its column: ``Expecting value at column 2``. Some of json's
    messages end in "at" (``Unterminated string starting at``): the column follows them
    without a second one."""
    return f"{error.msg.removesuffix(' at')} at column {error.colno}"


def jsonl_record(line: str, file: str, where: str, cols: Columns,
                 ids: IdPresence) -> RawRecord:
    """Parse one non-blank JSON Lines line into a raw record (InputError when it is bad)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as error:
        hint = ""
        if line.strip() in ("[", "[]") or line.lstrip().startswith("[{"):
            hint = " (this looks like a JSON array; expected one JSON object per line)"
        raise InputError(file, where,
                         f"malformed JSON: {json_error_text(error)}{hint}") from None
    if not isinstance(obj, dict):
        hint = " (expected one JSON object per line)" if isinstance(obj, list) else ""
        raise InputError(file, where, f"expected a JSON object, found {json_type(obj)}{hint}")
    for name, kind in (*((name, "text") for name in cols.texts), (cols.unit, "unit")):
        if name is not None and name not in obj:
            raise InputError(file, where, f"missing {kind} column {name!r} "
                                          f"(columns found: {describe_names(obj)})")
    use_id = ids.check(cols.id is not None and cols.id in obj, file, where, cols, obj)
    return RawRecord(file, where, cols.text_value([obj[name] for name in cols.texts]),
                     obj[cols.id] if use_id else NO_ID,
                     obj[cols.unit] if cols.unit is not None else None)


def read_jsonl(handle: BinaryIO, file: str, cols: Columns,
               decoding: Decoding) -> Iterator[RawRecord | BadRow]:
    """Every record of one JSON Lines file, in file order; a bad line is a :class:`BadRow`."""
    ids = IdPresence()
    for line in decoded_lines(handle, decoding, keep_bad=False):
        if line.number < 0:
            yield BadRow("end of file", line.problem or "")
            return
        where = f"line {line.number}"
        if line.problem is not None:
            yield BadRow(where, line.problem)
        elif line.text.strip():
            try:
                record = jsonl_record(line.text, file, where, cols, ids)
            except InputError as error:
                yield BadRow.of(error)
            else:
                yield replace(record, fallback=True) if line.fallback else record
