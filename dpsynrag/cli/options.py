"""The argument parser every command uses and the argument types they share."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import CliError

__all__ = ["ColumnList", "Parser", "open_unit_float", "option_flags", "positive_float",
           "positive_int", "prompt_text"]


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and no abbreviated options: ``dpsynrag budget --R 48``
    would otherwise be read as ``--R-f 48`` (budget has no ``--R``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        # one line, exit 2, as argparse does, but no usage
        raise CliError(f"{message} (see '{self.prog} --help')")


class ColumnList(argparse.Action):
    """A column option that may be repeated and takes a comma-separated list:
    ``--text-column subject --text-column body`` is ``--text-column subject,body``. Its value
    is the list of names in order (names in a list are stripped of spaces; a value without a
    comma is one name, kept as it is), None when not given; a name given twice is an error."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from dpsynrag.io.records import split_column_list  # light: no numpy, no pyarrow

        names = list(getattr(namespace, self.dest, None) or [])
        try:
            given = split_column_list(str(values))
        except ValueError as error:
            raise argparse.ArgumentError(self, str(error)) from None
        for name in given:
            if name in names:
                raise argparse.ArgumentError(self, f"column {name!r} is given twice")
            names.append(name)
        setattr(namespace, self.dest, names)


def positive_float(text: str) -> float:
    """A finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text!r}")
    return value


def open_unit_float(text: str) -> float:
    """A number strictly between 0 and 1 (a delta, a share)."""
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text!r}")
    return value


def unit_float(text: str) -> float:
    """A number in [0, 1) (a share that may be switched off with 0)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text!r}") from None
    if not (0 <= value < 1):
        raise argparse.ArgumentTypeError(f"must lie in [0, 1), got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def prompt_text(value: str) -> str:
    """A prompt given inline, or ``@FILE`` to read it from a file."""
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            return path.read_text(encoding="utf-8")
        except OSError as error:
            raise argparse.ArgumentTypeError(f"{path}: cannot read prompt file: "
                                             f"{error.strerror}") from None
    return value


def option_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """``{dest: --flag}`` of the parser's long options, in the order they were added."""
    flags: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps no public list of its options
        long_flags = [flag for flag in action.option_strings if flag.startswith("--")]
        if long_flags and action.dest not in flags:
            flags[action.dest] = long_flags[0]
    return flags
