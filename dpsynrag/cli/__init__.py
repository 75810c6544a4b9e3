"""The command lines: ``dpsynrag`` (``app``) and ``build-corpus`` (``build``).

One module per command, each with ``add_parser(subparsers)`` and its handler; ``options``
holds the parser class and the argument types they share, ``errors`` the one error type
(``CliError``), the exit codes (``ExitCode``) and the table from the package's exceptions to
those codes, and ``runner`` turns any error into one line and a code.

Every ``dpsynrag`` call builds every command's parser, so the command modules import only
argparse and this package at module level; a command imports the rest of dpsynrag (numpy,
scipy, torch, transformers, Ray, Beam behind it) inside its handler, when it runs. That
keeps ``dpsynrag --help`` and a bad option fast.

Nothing below the CLI imports it (an import-linter contract in pyproject.toml).
"""

from dpsynrag.cli.app import main
from dpsynrag.cli.build import main as build_corpus_main

__all__ = ["build_corpus_main", "main"]
