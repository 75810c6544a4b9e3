"""``dpsynrag ingest``: run the Beam ingest job on its own (e.g. on Flink or Dataflow).

Exit codes: 0 written; 2 bad input or options (one line names the file, row and problem);
1 failed. The shards it writes are a valid ``build-corpus`` INPUT (a Parquet directory with
columns ``id``, ``text``, ``unit``; build with ``--unit-column unit``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import ColumnList, positive_int

__all__ = ["add_parser", "run_ingest_command"]

_EPILOG = """\
The output directory holds private text: keep it on access-controlled storage (it is created
0700 when local) and delete it after the build. Its _ingest/report.json counts records read,
documents written, skips and bad rows by kind (private counts: do not publish them).

Examples:
  dpsynrag ingest notes.jsonl -o shards/ --unit-column patient_id
  dpsynrag ingest 'gs://bucket/notes/*.jsonl' -o gs://bucket/shards/ \\
      --beam-runner DataflowRunner --beam-options "--project=p --region=europe-west4 \\
      --temp_location=gs://bucket/tmp"
  build-corpus shards/ -o synth/ --unit-column unit
"""


def add_parser(subparsers: Any) -> None:
    """Add ``ingest`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "ingest", help="validate, normalise and bound the private input with Apache Beam",
        description="Read the private input (JSONL, CSV, Parquet, a directory of .txt; local "
                    "or any filesystem Beam reads), validate and normalise every record, bound "
                    "each privacy unit to one document, and write Parquet shards that "
                    "build-corpus reads. Deterministic; no DP mechanism runs here.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", metavar="INPUT", help="a file, a directory, or a file pattern")
    parser.add_argument("-o", "--out", required=True, metavar="OUT",
                        help="output directory for the shards")
    parser.add_argument("--text-column", action=ColumnList, metavar="NAME[,NAME...]",
                        help="default: text; repeat it or give a comma-separated list for "
                             "several columns, joined in that order by a blank line")
    parser.add_argument("--id-column", default="id",
                        help="default: id (when absent, ids are derived from each record's "
                             "unit and text, never its position; a shared id is made unique "
                             "with a ~dup- suffix, identical records are one)")
    parser.add_argument("--unit-column", help="column grouping the records of one privacy unit "
                        "(default: each record is its own unit)")
    parser.add_argument("--max-chars", type=positive_int, default=20_000,
                        help="skip (and count) longer texts (default 20000)")
    parser.add_argument("--min-chars", type=positive_int, default=1,
                        help="skip (and count) shorter texts (default 1)")
    parser.add_argument("--unit-bound", choices=["pick", "concat"], default="pick",
                        help="pick one record per unit by sha256(unit, sha256(text)) "
                             "(default), or concatenate the unit's records in that order up "
                             "to --max-chars")
    parser.add_argument("--fallback-encoding", help="decode lines that are not valid UTF-8 with "
                        "this codec (e.g. cp1252) instead of treating them as bad rows")
    parser.add_argument("--on-bad-row", choices=["fail", "skip"], default="fail",
                        help="refuse an input with any bad row (default), or drop and count them")
    parser.add_argument("--shards", type=positive_int, default=4,
                        help="number of output shards (default 4)")
    parser.add_argument("--beam-runner", default="direct",
                        help="direct (default: in process), FlinkRunner, SparkRunner, "
                             "DataflowRunner, ...")
    parser.add_argument("--beam-options", help="Beam pipeline flags as one string")
    parser.add_argument("--force", action="store_true", help="replace an existing OUT")
    parser.add_argument("--report-json", type=Path, help="also write the report here (0600)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the exact counts (records read, documents written, each "
                             "skip reason, bad rows) and any warning about them on stderr; by "
                             "default stderr says where they are (OUT/_ingest/report.json)")
    parser.set_defaults(handler=run_ingest_command)


def run_ingest_command(args: argparse.Namespace) -> int:
    """Run the ingest job and print its report (on stderr).

    The exact counts (files, records read, documents written, skips, bad rows, the pick
    warning that names them) are not differentially private: only ``--verbose`` prints them;
    by default one line says where they are (``OUT/_ingest/report.json``, ``--report-json``),
    as ``build-corpus`` does (stderr is often a shared log). A bad input row
    (``InputError``) exits 2 through the table of ``cli.errors``."""
    # lazy: the ingest job loads Apache Beam and pyarrow, seconds of imports
    from dpsynrag.cli.build_report import write_private_text
    from dpsynrag.io.documents import pick_warning, skip_label
    from dpsynrag.pipeline.beam_ingest import parse_beam_options, run_ingest
    from dpsynrag.transforms.ingest import IngestSettings

    texts = args.text_column or ["text"]  # one column: a string, as before (the report)
    settings = IngestSettings(text_column=texts[0] if len(texts) == 1 else tuple(texts),
                              id_column=args.id_column,
                              unit_column=args.unit_column, min_chars=args.min_chars,
                              max_chars=args.max_chars, unit_bound=args.unit_bound,
                              fallback_encoding=args.fallback_encoding)
    try:
        settings.validate()
    except LookupError:
        raise CliError(f"--fallback-encoding: unknown encoding {args.fallback_encoding!r}"
                       ) from None
    try:
        options = parse_beam_options(args.beam_options)
    except ValueError as error:
        raise CliError(f"--beam-options: {error}") from None
    report = run_ingest(args.input, args.out, settings, shards=args.shards,
                        runner=args.beam_runner, beam_options=options,
                        on_bad_row=args.on_bad_row, force=args.force,
                        log=_log(args.verbose))
    summary = report.as_dict()
    lines = [f"documents written: {report.documents} in {report.shards} shard(s) at "
             f"{report.output}", f"records read: {report.records_read}"]
    rule = args.unit_bound if args.unit_column else None
    lines += [f"{skip_label(reason, rule)}: {count}" for reason, count in report.skipped.items()]
    warning = pick_warning(rule, report.documents, report.skipped, report.records_read)
    if warning:
        lines.append(f"WARNING: {warning}")
        summary["warnings"] = [warning]
    if report.bad_rows:
        lines.append(f"bad rows dropped: {report.bad_rows} ("
                     + ", ".join(f"{k} {v}" for k, v in report.bad_rows_by_kind.items()) + ")")
    if report.ids_made_unique:
        lines.append(f"ids shared by different records, made unique: {report.ids_made_unique}")
    if report.decoded_with_fallback:
        lines.append(f"lines decoded with {args.fallback_encoding}: "
                     f"{report.decoded_with_fallback}")
    lines.append(f"wall time: {report.seconds:.1f} s")
    if not args.verbose:
        lines = [withheld_note(report.output, report.shards, args.report_json),
                 f"wall time: {report.seconds:.1f} s"]
    print("\n".join(lines), file=sys.stderr)
    if args.report_json is not None:
        write_private_text(args.report_json,
                           json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return ExitCode.OK


def _log(verbose: bool) -> Callable[[str], None]:
    """The job's progress lines (they name the number of input files, which is a record
    count for a directory of .txt files): on stderr with ``verbose`` only."""
    if verbose:
        return lambda message: print(message, file=sys.stderr)
    return lambda _message: None


def withheld_note(output: str, shards: int, report_json: Path | None) -> str:
    """The default report line: where the shards and the exact counts are, no count (the
    number of shards is the public ``--shards``)."""
    where = f"{output.rstrip('/')}/_ingest/report.json"
    if report_json is not None:
        where += f" and {report_json}"
    return (f"ingest: wrote {shards} shard(s) at {output}; the exact counts (records read, "
            "documents written, each skip reason, bad rows) and any warning about them are "
            f"in {where} (private); --verbose prints them here")
