"""Reading the private input of ``build-corpus INPUT`` in process.

Formats (chosen by the path; one reader per format, shared with the Beam ingest):

* ``*.jsonl`` / ``*.ndjson`` / ``*.json``: JSON Lines (:mod:`dpsynrag.io.jsonl`);
* ``*.csv``: CSV with a header row (:mod:`dpsynrag.io.csv_rows`);
* ``*.parquet`` or a directory of ``*.parquet`` files (recursively, sorted by relative path,
  names starting with ``.`` or ``_`` ignored) (:mod:`dpsynrag.io.parquet`);
* a directory of ``*.txt`` files (recursively, sorted, names starting with ``.`` ignored):
  one document per file (:mod:`dpsynrag.io.txt`); ``unit_column`` is refused.

Text files are strict UTF-8 here (a byte-order mark is dropped). Every text is normalised
(:func:`dpsynrag.io.text.normalise_text`). With several text columns a record's text is their
non-empty values joined by a blank line (:mod:`dpsynrag.io.records`), then normalised.

Skips (documented, counted in :attr:`InputDocuments.skipped`, never errors):

* ``"empty"``: the text is empty after normalisation, or null (JSON ``null``, Parquet null);
  with several text columns, every one of them is;
* ``"too_short"``: non-empty but shorter than ``min_chars`` characters;
* ``"too_long"``: longer than ``max_chars`` characters after normalisation. Such a record is
  skipped whole rather than truncated: truncation would silently put a different document
  into the corpus, and the operator can raise ``max_chars`` or split documents upstream;
* ``"duplicate"``: a record identical in id group, unit and text to another one
  (:mod:`dpsynrag.io.ids`); ``"unit_bound"`` is added by
  :func:`dpsynrag.io.units.bound_units`.

An input with no records, or whose every record is skipped, is an error.

Everything else is an :class:`InputError`: one line naming the file, the place (1-based line
for JSONL and CSV, 0-based row index for Parquet, the file for a ``.txt`` directory) and the
problem. Error messages never quote a document's text, id or unit value (ids and units may be
private too); column names, type names, line numbers and byte offsets are printed.

The :attr:`InputDocuments.skipped` counts are derived from private data: log or release them
only through a DP mechanism.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dpsynrag.io import csv_rows, jsonl, parquet, txt
from dpsynrag.io.decoding import STRICT_UTF8
from dpsynrag.io.documents import SKIP_REASONS, InputDocuments
from dpsynrag.io.errors import InputError
from dpsynrag.io.ids import id_group, resolve_id_group
from dpsynrag.io.records import (
    DEFAULT_ID_COLUMN,
    BadRow,
    Columns,
    RawRecord,
    TextReader,
    accept_record,
)

__all__ = ["read_documents"]


@dataclass(frozen=True)
class _Accepted:
    """A record that passed validation and was not skipped."""

    doc_id: str
    unit: str | None
    text: str


def read_documents(
    path: Path | str,
    *,
    text_column: str | Sequence[str] = "text",
    id_column: str | None = DEFAULT_ID_COLUMN,
    unit_column: str | None = None,
    max_chars: int | None = 20000,
    min_chars: int = 1,
) -> InputDocuments:
    """Read, validate and normalise the private documents at ``path``.

    ``text_column`` is one column name or several: a record's text is then the non-empty
    values of those columns, in that order, joined by a blank line
    (:data:`~dpsynrag.io.records.TEXT_SEPARATOR`); all of them empty or null is the skip
    ``"empty"``. A name given twice is a ``ValueError``.

    ``id_column=None``, or ``"id"`` (the default) when no such column exists, gives
    content-derived ids (:func:`~dpsynrag.io.ids.content_id`), never positional ones. Any
    other id column name that is missing is an error, as is a missing ``unit_column``.
    Records sharing an id are resolved by :func:`~dpsynrag.io.ids.resolve_id_group`
    (identical ones collapse, counted as ``"duplicate"``; the others get distinct ids): a
    shared id is never an error and never drops another record. See the module docstring for
    formats and skips. Raises :class:`InputError`.
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
    """Append ``accepted`` to ``docs`` with unique ids, in input order (``resolve_id_group``).

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
        unit = accepted[i].unit
        docs.units.append(unit if unit is not None else doc_id)


def _strict(file: str | Path, items: Iterable[RawRecord | BadRow]) -> Iterator[RawRecord]:
    """The records of one file; its first bad row is an :class:`InputError`."""
    for item in items:
        if isinstance(item, BadRow):
            raise InputError(file, item.where, item.problem)
        yield item


def _open(path: Path, cols: Columns) -> tuple[str, Iterator[RawRecord]]:
    if not path.exists():
        raise InputError(path, None, "does not exist")
    if path.is_dir():
        return _open_directory(path, cols)
    suffix = path.suffix.lower()
    if suffix in jsonl.SUFFIXES:
        return "jsonl", _text_file(path, cols, jsonl.read_jsonl)
    if suffix in csv_rows.SUFFIXES:
        return "csv", _text_file(path, cols, csv_rows.read_csv)
    if suffix in parquet.SUFFIXES:
        return "parquet", _parquet_files(path, [path], cols)
    raise InputError(path, None, f"unsupported input suffix {suffix or '(none)'!r}; expected "
                                 ".jsonl, .json, .ndjson, .csv, .parquet, or a directory of "
                                 ".txt or .parquet files")


def _open_directory(path: Path, cols: Columns) -> tuple[str, Iterator[RawRecord]]:
    texts = _files(path, f"*{txt.SUFFIX}", ".")
    parquets = _files(path, "*.parquet", (".", "_"))
    records = [p.relative_to(path).as_posix() for p in _files(path, "*", (".", "_"))
               if p.suffix.lower() in (*jsonl.SUFFIXES, *csv_rows.SUFFIXES)]
    if records:
        more = f" and {len(records) - 1} more" if len(records) > 1 else ""
        raise InputError(path, None, f"directory holds {records[0]}{more}, which a "
                                     "directory input would not read (it reads .txt or "
                                     ".parquet files); give that file as INPUT, or a "
                                     "directory of one kind")
    if texts and parquets:
        raise InputError(path, None, "directory holds both .txt and .parquet files; "
                                     "give one kind")
    if parquets:
        return "parquet", _parquet_files(path, parquets, cols)
    if not texts:
        raise InputError(path, None, "no documents (directory has no .txt or .parquet "
                                     "files)")
    if cols.unit is not None:
        raise InputError(path, None, "unit_column is not supported for a directory of "
                                     ".txt files (each file is its own unit)")
    return "txt", _txt_files(path, texts)


def _files(directory: Path, pattern: str, hidden: str | tuple[str, ...]) -> list[Path]:
    """Files below ``directory`` matching ``pattern``, no part of their relative path
    starting with ``hidden``, sorted by relative path."""
    def shown(p: Path) -> bool:
        return not any(part.startswith(hidden) for part in p.relative_to(directory).parts)

    return sorted((p for p in directory.rglob(pattern) if p.is_file() and shown(p)),
                  key=lambda p: p.relative_to(directory).as_posix())


def _text_file(path: Path, cols: Columns, read: TextReader) -> Iterator[RawRecord]:
    with path.open("rb") as handle:
        yield from _strict(path, read(handle, str(path), cols, STRICT_UTF8))


def _parquet_files(path: Path, files: list[Path], cols: Columns) -> Iterator[RawRecord]:
    across = parquet.IdColumnAcrossFiles(cols)
    for file_path in files:
        file = str(file_path)
        yield from _strict(file, parquet.read_parquet(file_path, file, cols, across=across))


def _txt_files(path: Path, files: list[Path]) -> Iterator[RawRecord]:
    for file_path in files:
        relative = file_path.relative_to(path).as_posix()
        record = txt.read_txt(file_path.read_bytes(), str(file_path), relative, STRICT_UTF8)
        yield from _strict(file_path, [record])
