"""The Beam ingest job: input files -> one document per privacy unit -> Parquet shards.

Read (JSONL, CSV, Parquet, a directory of ``.txt``; a local path, a directory, or a file
pattern on any filesystem Beam has, e.g. ``gs://bucket/notes/*.jsonl`` when Beam's GCP extra
is installed), validate and normalise every record exactly as ``build-corpus`` does in
process (the readers of :mod:`dpsynrag.io`), give records without ids their content-derived
ids, make shared ids unique (identical records collapse; no record is dropped because another
has its id: :func:`dpsynrag.transforms.ingest.resolve_ids`), group by privacy unit and bound
each unit to one document (:func:`dpsynrag.transforms.ingest.bound_unit`), then write
``part-NNNNN-of-MMMMM.parquet`` shards (columns ``id``, ``text``, ``unit``; a document's shard
is a hash of its id; rows of a shard in input order) and ``_ingest/report.json``.

Deterministic: the same input and options give byte-identical shards whatever the runner's
parallelism or bundle order. The shards hold private text (the directory is created 0700 when
local); the report's counts are private too. A local output is written under a temporary
name and renamed when complete; a remote one is complete when ``_ingest/report.json`` exists.

Runners: ``direct`` (default) is Beam's embedded batch engine (the FnApiRunner that the
DirectRunner itself uses for batch jobs), run in this process; the DirectRunner's first
choice, PrismRunner, downloads a binary and is never used. Any other name (``FlinkRunner``,
``SparkRunner``, ``DataflowRunner``...) is passed to Beam with ``beam_options``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dpsynrag.io.documents import SKIP_REASONS
from dpsynrag.io.errors import InputError
from dpsynrag.transforms.ingest import (
    Document,
    IngestSettings,
    Parsed,
    bound_unit,
    format_of,
    id_group,
    parse_file,
    problem_kind,
    resolve_ids,
    shard_of,
)

__all__ = ["BAD_ROW_POLICIES", "IngestReport", "InputFile", "list_input_files", "run_ingest"]

BAD_ROW_POLICIES = ("fail", "skip")
REPORT_DIR = "_ingest"
_EXAMPLES = 20  # bad rows listed in the report (places and problems only)


@dataclass(frozen=True)
class InputFile:
    """One file of the input: its number in input order, path, name and format."""

    index: int
    path: str
    relative: str
    kind: str


@dataclass
class IngestReport:
    """What ingest did (counts are private: they stay with the operator and the state).

    ``ids_made_unique`` counts documents whose id was shared by a record of different content
    and got a ``~dup-`` suffix (identical records are in ``skipped["duplicate"]``).
    """

    input: str
    output: str
    runner: str
    files: int
    shards: int
    records_read: int
    documents: int
    skipped: dict[str, int]
    bad_rows: int
    bad_rows_by_kind: dict[str, int]
    decoded_with_fallback: int
    ids_made_unique: int = 0
    first_bad_rows: list[dict[str, str]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ listing the input
def quiet_beam() -> Any:
    """Import Beam without its import-time warnings about optional cloud clients."""
    import logging

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        import apache_beam
        from apache_beam.io import filesystems  # noqa: F401 - its import logs the warnings
    finally:
        root.setLevel(level)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    return apache_beam


def _is_local(path: str) -> bool:
    quiet_beam()
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.get_scheme(path) in (None, "file")


def list_input_files(source: str) -> list[InputFile]:
    """The input's files in input order (sorted by relative path), one format for all.

    A local file is itself; a local directory gives its input files recursively (names
    starting with ``.`` or ``_`` ignored, as for ``build-corpus``); anything else (a glob, a
    ``gs://`` or other Beam path; a trailing ``/`` means the whole directory) is matched with
    Beam's filesystems.
    """
    path = Path(source)
    local = _is_local(source)
    if local and path.is_dir():
        files = sorted((p for p in path.rglob("*") if p.is_file()
                        and not any(part.startswith((".", "_"))
                                    for part in p.relative_to(path).parts)
                        and format_of(p.name) is not None),
                       key=lambda p: p.relative_to(path).as_posix())
        listed = [(str(p), p.relative_to(path).as_posix()) for p in files]
    elif local and path.is_file():
        listed = [(str(path), path.name)]
    elif local and not any(ch in source for ch in "*?["):
        raise InputError(source, None, "does not exist")
    else:
        from apache_beam.io.filesystems import FileSystems

        pattern = source.rstrip("/") + "/**" if source.endswith("/") else source
        try:
            matched = FileSystems.match([pattern])[0].metadata_list
        except Exception as error:  # Beam raises BeamIOError and friends
            raise InputError(source, None, f"cannot list the input ({type(error).__name__})"
                             ) from None
        prefix = pattern.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        prefix = prefix.rsplit("/", 1)[0] + "/"
        listed = sorted((m.path, m.path[len(prefix):] if m.path.startswith(prefix) else m.path)
                        for m in matched if not m.path.endswith("/"))
    if not listed:
        raise InputError(source, None, "no input files")
    formats = {format_of(relative) for _, relative in listed}
    if None in formats:
        odd = next(rel for _, rel in listed if format_of(rel) is None)
        raise InputError(source, None, f"unsupported input file {odd!r}; expected .jsonl, "
                                       ".json, .ndjson, .csv, .parquet or .txt")
    kinds = {kind for kind in formats if kind is not None}
    if len(kinds) > 1:
        raise InputError(source, None, f"mixed input formats ({', '.join(sorted(kinds))}); "
                                       "give one kind")
    kind = kinds.pop()
    return [InputFile(i, path, relative, kind or "") for i, (path, relative) in
            enumerate(listed)]


# ------------------------------------------------------------------ pipeline steps
def _parse(spec: InputFile, settings: IngestSettings) -> Iterator[Parsed]:
    from apache_beam.io.filesystems import FileSystems

    yield from parse_file(spec.index, spec.path, spec.kind, lambda: FileSystems.open(
        spec.path, mime_type="application/octet-stream",
        compression_type="uncompressed"), settings, spec.relative)


def _resolve(item: tuple[str, Iterable[Parsed]]) -> list[tuple[Parsed, int, bool]]:
    return resolve_ids(item[0], item[1])


def _bound(item: tuple[str, Iterable[Parsed]], settings: IngestSettings
           ) -> tuple[Document, int]:
    return bound_unit(item[0], item[1], settings.unit_bound, settings.max_chars)


def _shard_name(shard: int, shards: int) -> str:
    return f"part-{shard:05d}-of-{shards:05d}.parquet"


def _write_shard(item: tuple[int, Iterable[Document]], out: str, shards: int) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    shard, documents = item
    rows = sorted(documents, key=lambda d: d.order)
    table = pa.table({"id": [d.doc_id for d in rows], "text": [d.text for d in rows],
                      "unit": [d.unit for d in rows]},
                     schema=pa.schema([("id", pa.string()), ("text", pa.string()),
                                       ("unit", pa.string())]))
    path = FileSystems.join(out, _shard_name(shard, shards))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    with FileSystems.create(path, mime_type="application/octet-stream",
                            compression_type="uncompressed") as handle:
        handle.write(sink.getvalue().to_pybytes())
    return path


def _count(element: Any, what: Callable[[Any], Iterable[str]]) -> Counter[str]:
    return Counter(what(element))


def _parsed_counts(record: Parsed) -> Iterator[str]:
    yield "records_read"
    if record.fallback:
        yield "decoded_with_fallback"
    if record.problem is not None:
        yield f"bad:{problem_kind(record.problem)}"


def _merge(counters: Iterable[Counter[str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for counter in counters:
        total.update(counter)
    return total


def _write_json(value: Any, path: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.create(path, mime_type="application/json",
                            compression_type="uncompressed") as handle:
        handle.write(json.dumps(value, sort_keys=True, default=list).encode("utf-8"))


def _bad_example(record: Parsed) -> tuple[tuple[int, int], str, str, str]:
    return record.order, record.file, record.where, record.problem or ""


def _build_pipeline(pipeline: Any, files: list[InputFile], settings: IngestSettings,
                    out: str, shards: int) -> None:
    import apache_beam as beam

    work = _join(out, REPORT_DIR)
    parsed = (pipeline | "files" >> beam.Create(files) | "spread" >> beam.Reshuffle()
              | "parse" >> beam.FlatMap(_parse, settings))
    records = parsed | "good rows" >> beam.Filter(lambda r: r.problem is None)
    bad = parsed | "bad rows" >> beam.Filter(lambda r: r.problem is not None)
    accepted = records | "not skipped" >> beam.Filter(lambda r: r.skip is None)
    resolved = (accepted | "by id group" >> beam.Map(lambda r: (id_group(r.doc_id or ""), r))
                | "group ids" >> beam.GroupByKey()
                | "unique ids" >> beam.FlatMap(_resolve))
    unique = resolved | "records" >> beam.Map(lambda triple: triple[0])
    bounded = (unique | "by unit" >> beam.Map(lambda r: (r.unit, r))
               | "group units" >> beam.GroupByKey()
               | "bound units" >> beam.Map(_bound, settings))
    documents = bounded | "documents" >> beam.Map(lambda pair: pair[0])
    _ = (documents | "by shard" >> beam.Map(lambda d: (shard_of(d.doc_id, shards), d))
         | "group shards" >> beam.GroupByKey()
         | "write shards" >> beam.Map(_write_shard, out, shards))

    counts = [
        parsed | "count parsed" >> beam.Map(_count, _parsed_counts),
        records | "count skips" >> beam.Map(
            _count, lambda r: [f"skipped:{r.skip}"] if r.skip else []),
        resolved | "count duplicates" >> beam.Map(
            lambda triple: Counter({"skipped:duplicate": triple[1],
                                    "ids_made_unique": int(triple[2])})),
        bounded | "count bounded" >> beam.Map(
            lambda pair: Counter({"documents": 1, "skipped:unit_bound": pair[1]})),
    ]
    _ = (counts | "all counts" >> beam.Flatten()
         | "sum counts" >> beam.CombineGlobally(_merge)
         | "write counts" >> beam.Map(_write_json, _join(work, "counts.json")))
    _ = (bad | "bad places" >> beam.Map(_bad_example)
         | "first bad" >> beam.combiners.Top.Smallest(_EXAMPLES)
         | "write bad" >> beam.Map(_write_json, _join(work, "bad_rows.json")))


def _join(base: str, name: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.join(base, name)


def _pipeline_options(runner: str, beam_options: Sequence[str]) -> tuple[Any, Any]:
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(flags=list(beam_options))
    if runner == "direct":
        from apache_beam.options.pipeline_options import DirectOptions
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        direct = options.view_as(DirectOptions)
        if (direct.direct_num_workers or 1) != 1 and direct.direct_running_mode in (
                "multi_threading", "in_memory"):
            # Several workers in threads of one process share the runner's decoding state:
            # under load bundles came back corrupt ("Invalid PaneInfoEncoding: 9", twice on
            # a 2-core machine). One process per worker has nothing to share; the output is
            # the same (the shards are a function of the records, tested).
            direct.direct_running_mode = "multi_processing"
        return FnApiRunner(), options
    if runner in ("DirectRunner", "PrismRunner"):
        raise InputError("--beam-runner", None, f"{runner} may start PrismRunner, which "
                                                "downloads a binary; use 'direct' (the same "
                                                "batch engine, in process)")
    return runner, options


def parse_beam_options(text: str | None) -> list[str]:
    """``--beam-options "--flag=value --other value"`` as a list of Beam flags."""
    return shlex.split(text) if text else []


# ------------------------------------------------------------------ the job
def run_ingest(source: str | os.PathLike[str], out: str | os.PathLike[str],
               settings: IngestSettings | None = None, *, shards: int = 4,
               runner: str = "direct", beam_options: Sequence[str] = (),
               on_bad_row: str = "fail", force: bool = False,
               log: Callable[[str], None] = lambda _m: None) -> IngestReport:
    """Run the ingest job (module docstring); raises :class:`InputError` on bad input.

    ``on_bad_row="fail"`` (default) refuses an input with any bad row, naming the first in
    input order and the total; ``"skip"`` writes the good documents and counts the bad rows
    by kind in the report. Either way nothing at ``out`` looks complete after a failure.
    """
    settings = settings or IngestSettings()
    settings.validate()
    if on_bad_row not in BAD_ROW_POLICIES:
        raise ValueError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}")
    if shards < 1:
        raise ValueError("shards must be at least 1")
    started = time.monotonic()
    source, out = os.fspath(source), os.fspath(out)
    files = list_input_files(source)
    local = _is_local(out)
    work = _prepare_output(out, local, force)
    beam_runner, options = _pipeline_options(runner, beam_options)
    log(f"ingest: {len(files)} file(s), runner {runner}")
    beam = quiet_beam()

    try:
        with beam.Pipeline(runner=beam_runner, options=options) as pipeline:
            _build_pipeline(pipeline, files, settings, work, shards)
        counts, bad_examples = _read_results(work)
        report = _report(source, out, runner, files, shards, counts, bad_examples, settings)
        if report.bad_rows and on_bad_row == "fail":
            first = report.first_bad_rows[0]
            more = f"; {report.bad_rows} bad rows in all" if report.bad_rows > 1 else ""
            raise InputError(first["file"], first["where"], f"{first['problem']}{more} "
                                                            "(--on-bad-row skip drops them)")
        if report.documents == 0:
            raise InputError(source, None, "no usable documents: every record was skipped "
                                           "or bad")
        report.seconds = time.monotonic() - started
        _write_json(report.as_dict(), _join(_join(work, REPORT_DIR),
                                                       "report.json"))
    except BaseException:
        if local:
            shutil.rmtree(work, ignore_errors=True)
        raise
    if local:
        _publish(work, out)
    return report


def _prepare_output(out: str, local: bool, force: bool) -> str:
    if not local:
        return out
    target = Path(out)
    if target.exists() and not force:
        raise InputError(out, None, "output directory exists; remove it or pass --force")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.parent / f".{target.name}.ingest-{uuid.uuid4().hex[:12]}"
    work.mkdir(mode=0o700)
    (work / REPORT_DIR).mkdir(mode=0o700)
    return str(work)


def _publish(work: str, out: str) -> None:
    target = Path(out)
    if target.exists():
        old = target.parent / f".{target.name}.replaced-{uuid.uuid4().hex[:12]}"
        target.rename(old)
        os.replace(work, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(work, target)


def _read_results(work: str) -> tuple[Counter[str], list[Any]]:
    from apache_beam.io.filesystems import FileSystems

    def load(name: str, default: Any) -> Any:
        path = _join(_join(work, REPORT_DIR), name)
        if not FileSystems.exists(path):
            return default
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            return json.loads(handle.read().decode("utf-8"))

    counts = Counter(load("counts.json", {}))
    examples = load("bad_rows.json", [])
    for name in ("counts.json", "bad_rows.json"):
        path = _join(_join(work, REPORT_DIR), name)
        if FileSystems.exists(path):
            FileSystems.delete([path])
    return counts, examples


def _report(source: str, out: str, runner: str, files: list[InputFile], shards: int,
            counts: Counter[str], examples: list[Any], settings: IngestSettings
            ) -> IngestReport:
    bad_by_kind = {key[len("bad:"):]: value for key, value in sorted(counts.items())
                   if key.startswith("bad:")}
    skipped = {reason: int(counts.get(f"skipped:{reason}", 0)) for reason in SKIP_REASONS}
    return IngestReport(
        input=source, output=out, runner=runner, files=len(files), shards=shards,
        records_read=int(counts.get("records_read", 0)), documents=int(counts.get("documents", 0)),
        skipped=skipped, bad_rows=sum(bad_by_kind.values()), bad_rows_by_kind=bad_by_kind,
        decoded_with_fallback=int(counts.get("decoded_with_fallback", 0)),
        ids_made_unique=int(counts.get("ids_made_unique", 0)),
        first_bad_rows=[{"file": file, "where": where, "problem": problem}
                        for _order, file, where, problem in examples],
        settings=asdict(settings))
