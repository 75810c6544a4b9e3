"""Running one command: its result, or one line on stderr and an exit code, never a traceback
unless ``--debug``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from dpsynrag.cli.errors import CliError, ExitCode, exit_code_for, location_problem

__all__ = ["run_command"]


def run_command(handler: Callable[[], int], prog: str, debug: bool) -> int:
    """Call ``handler`` and return its exit code; on an error print ``PROG: error: ...`` (one
    line) and return the error's code. With ``debug`` the error propagates (traceback).

    A reader that stops reading the output (``dpsynrag verify --explain | head``) ends the
    command quietly: no traceback, no message, exit 1 (``ExitCode.FAILURE``: the output was
    not all read), as Python's documentation recommends and as rich's tables do."""
    try:
        code = handler()
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
        return code
    except BrokenPipeError as error:
        if _stdout_closed():
            _silence_stdout()
            return ExitCode.FAILURE
        if debug:
            raise
        return _report(error, prog)
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
        return _report(error, prog)


def _report(error: Exception, prog: str) -> int:
    """One line for an error of no ``CliError`` class, and its exit code."""
    code = exit_code_for(error)
    if code is not None:  # bad input or a refusal the user can act on: say it plainly
        print(f"{prog}: error: {error}", file=sys.stderr)
        return code
    problem = location_problem(error)
    if problem is not None:  # a path the command cannot use: the user's to fix
        print(f"{prog}: error: {problem}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print(f"{prog}: error: {type(error).__name__}: {error} (rerun with --debug for the "
          "traceback)", file=sys.stderr)
    return ExitCode.FAILURE


def _stdout_closed() -> bool:
    """Whether standard output is a pipe nobody reads any more (the broken pipe was the
    output's, not some other pipe or socket of the command's)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        return False
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() or no file descriptor
        return False


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what is
    still buffered cannot fail again ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
