"""Running one command: its result, or one line on stderr and an exit code, never a traceback
unless ``--debug``."""

from __future__ import annotations

import sys
from collections.abc import Callable

from dpsynrag.cli.errors import CliError, ExitCode, exit_code_for

__all__ = ["run_command"]


def run_command(handler: Callable[[], int], prog: str, debug: bool) -> int:
    """Call ``handler`` and return its exit code; on an error print ``PROG: error: ...`` (one
    line) and return the error's code. With ``debug`` the error propagates (traceback)."""
    try:
        return handler()
    except CliError as error:
        if debug:
            raise
        print(f"{prog}: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return ExitCode.SIGINT
    except Exception as error:  # one line, never a traceback, unless --debug
        if debug:
            raise
        code = exit_code_for(error)
        if code is not None:  # bad input or a refusal the user can act on: say it plainly
            print(f"{prog}: error: {error}", file=sys.stderr)
            return code
        print(f"{prog}: error: {type(error).__name__}: {error} (rerun with --debug for the "
              "traceback)", file=sys.stderr)
        return ExitCode.FAILURE
