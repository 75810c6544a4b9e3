"""``dpsynrag``: the operator's and auditor's commands, and ``dpsynrag build`` (=
``build-corpus``).

Errors print one line (``dpsynrag: error: ...``) and exit non-zero (``cli.errors.ExitCode``);
``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dpsynrag import __version__
from dpsynrag.cli import (
    budget,
    build,
    dataset,
    evaluate,
    ingest,
    keygen,
    ledger,
    query,
    search,
    show,
    verify,
)
from dpsynrag.cli.errors import ExitCode
from dpsynrag.cli.options import Parser
from dpsynrag.cli.runner import run_command

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``dpsynrag`` parser with every command but ``build`` (``main`` hands that one to
    ``build-corpus``; it is listed for the help)."""
    parser = Parser(
        prog="dpsynrag",
        description="dpsynrag: differentially private synthetic RAG corpora (DP-SynRAG).",
    )
    parser.add_argument("--version", action="version", version=f"dpsynrag {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show full tracebacks on errors (they may contain local paths)")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND",
                                       parser_class=Parser)
    subparsers.add_parser(
        "build", add_help=False,
        help="build a synthetic corpus: the same command as build-corpus (see 'dpsynrag "
             "build --help')")
    for command in (budget, keygen, verify, show, search, ledger, dataset, ingest, evaluate,
                    query):
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``dpsynrag`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((i for i, arg in enumerate(argv) if arg != "--debug"), None)
    if command is not None and argv[command] == "build":  # dpsynrag build == build-corpus
        return build.main(argv[:command] + argv[command + 1:], prog="dpsynrag build")
    parser = build_parser()

    def handler() -> int:
        args = parser.parse_args(argv)
        if not hasattr(args, "handler"):
            parser.print_help()
            return ExitCode.BAD_INPUT
        return args.handler(args)

    return run_command(handler, "dpsynrag", "--debug" in argv)
