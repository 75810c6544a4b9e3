"""``build-corpus`` (also ``dpsynrag build``): the DP-SynRAG build.

Exit codes: 0 built; 1 failed (a bug or a model/runtime error); 2 bad input or options;
3 refused by the privacy plan or budget; 4 interrupted (resumable: run the same command again);
5 built, but the corpus is useless: no synthetic text was kept (``--allow-empty`` accepts it
with exit 0).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dpsynrag import __version__
from dpsynrag.cli.build_args import EPILOG, add_build_arguments, config_flags
from dpsynrag.cli.build_report import (
    STATE_SUMMARY_FILE,
    check_private_text_location,
    counts_note,
    plan_warning,
    print_summary,
    progress_factory,
    with_guarantee,
    write_private_text,
)
from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import Parser
from dpsynrag.cli.runner import run_command

__all__ = ["build_parser", "main", "run_build_command"]

DESCRIPTION = """\
Build a differentially private synthetic RAG corpus from private documents: corpus.parquet,
index.faiss, manifest.json and a signed certificate.json in OUT.

The default mode, --generate facts, uses no language model: statistical keywords -> a noisy
keyword histogram; terms of each document released by DP partition selection -> clusters
anchored on the released terms -> one noisy fact histogram per cluster -> a template note per
cluster (--writer tokens: the LLM rewrites each note instead).

The alternative, --generate tokens, is the paper's DP-SynRAG: LLM keywords -> noisy histogram
-> soft clusters -> noisy retrieval -> private prediction, token by token -> self-filter.

Resumable: after a crash, run the same command again."""


def build_parser(prog: str = "build-corpus") -> argparse.ArgumentParser:
    """The ``build-corpus`` parser, named ``prog`` in its messages."""
    parser = Parser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dpsynrag {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_build_arguments(parser)
    return parser


def run_build_command(args: argparse.Namespace) -> int:
    """Build (or, with ``--dry-run``, check and plan) from the parsed options."""
    # lazy: the build loads numpy, scipy, torch and Ray; --help and a bad option need none
    from dpsynrag.pipeline.build import run_build
    from dpsynrag.pipeline.config import make_config

    overrides = {name: getattr(args, name) for name in config_flags()}
    config = make_config(args.config, overrides)
    warning = plan_warning(config)
    if args.dry_run:
        from dpsynrag.pipeline.dry_run import dry_run  # lazy: as above

        if warning:
            print(f"WARNING: {warning}")
        return dry_run(args.input, args.out, config, state_dir=args.state_dir,
                       signing_key=args.signing_key, corpus_ledger=args.corpus_ledger,
                       force=args.force, say=dry_run_say(args.verbose))
    if args.summary_json is not None:  # before anything is spent, not after the build
        problem = check_private_text_location(args.summary_json, "--summary-json")
        if problem:
            raise CliError(f"{problem} (nothing was spent)")
    if warning:  # public: the plan and the options only; said before anything is spent
        print(f"build-corpus: WARNING: {warning}", file=sys.stderr)
    summary = run_build(args.input, args.out, config, state_dir=args.state_dir,
                        signing_key=args.signing_key, force=args.force,
                        purge_state=args.purge_state,
                        progress=progress_factory(args.quiet, args.verbose),
                        log=lambda message: None, corpus_ledger=args.corpus_ledger)
    report = with_guarantee(summary.as_dict(), args.out)
    text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    # the exact counts stay operator-side: in the private state directory (0700; the file
    # 0600), and on stderr only with --verbose (stderr is often a shared log)
    counts_at = _write_state_summary(Path(summary.state_dir), text)
    if counts_at is None and args.summary_json is not None:
        counts_at = args.summary_json
    print_summary(report, verbose=args.verbose, counts_at=counts_at)
    if warning:
        print(f"build-corpus: WARNING: {warning}", file=sys.stderr)
    if args.verbose:
        for line in summary.warnings:
            print(f"build-corpus: WARNING: {line}", file=sys.stderr)
    else:  # the input's warnings name its exact counts: never on stderr by default
        print(f"build-corpus: exact input counts (records read, documents used, each skip "
              f"reason) and any warning about them are {counts_note(counts_at)}; --verbose "
              "prints them here", file=sys.stderr)
    if args.summary_json is not None:
        write_private_text(args.summary_json, text)
    if summary.kept_texts == 0 and not args.allow_empty:
        print(f"build-corpus: USELESS CORPUS: {summary.synthetic_texts} synthetic texts, 0 "
              f"kept; {args.out} is signed and its budget is spent, but it answers nothing. "
              "Look at the plan ('dpsynrag budget': consensus rows against --k; facts: "
              "documents needed per phrase). Exit 5; --allow-empty accepts an empty corpus",
              file=sys.stderr)
        return ExitCode.EMPTY
    return ExitCode.OK


#: What the dry run says by default instead of its lines that hold the input's exact counts
DRY_RUN_WITHHELD = {
    "  ok    input": "  ok    input: read and valid; its exact counts (documents, records "
                     "skipped or merged) are withheld; --verbose prints them",
    "  WARNING": "  (a warning about the input's exact counts is withheld; --verbose prints it)",
    "estimate": "estimate: withheld, it is computed from the input's exact size; --verbose "
                "prints it",
}


def dry_run_say(verbose: bool, say: Callable[[str], None] = print) -> Callable[[str], None]:
    """The dry run's output: every line with ``verbose``; otherwise its lines that hold the
    input's exact counts (the input check's detail, the warnings that name them, the
    wall-time estimate computed from them) are replaced by a line that says so, as the
    build's summary keeps its counts off stderr without --verbose (stdout is often a log
    too). A failed check's line (``FAIL``) is for the operator and passes unchanged."""
    if verbose:
        return say

    def count_free(line: str) -> None:
        for prefix, instead in DRY_RUN_WITHHELD.items():
            if line.startswith(prefix):
                say(instead)
                return
        say(line)

    return count_free


def _write_state_summary(state_dir: Path, text: str) -> Path | None:
    """Write the build's summary (its exact counts) to ``STATE/summary.json`` (0600), or None
    when the state directory is gone (``--purge-state``)."""
    if not state_dir.is_dir():
        return None
    path = state_dir / STATE_SUMMARY_FILE
    write_private_text(path, text)
    return path


def main(argv: Sequence[str] | None = None, prog: str = "build-corpus") -> int:
    """The ``build-corpus`` console script (``dpsynrag build`` passes ``prog``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)

    def on_sigterm(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    def handler() -> int:
        args = parser.parse_args(argv)
        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            return run_build_command(args)
        except KeyboardInterrupt:
            raise CliError("interrupted; run the same command again to resume (nothing is "
                           "spent twice)", ExitCode.INTERRUPTED) from None
        finally:
            signal.signal(signal.SIGTERM, previous)

    return run_command(handler, prog, "--debug" in argv)
