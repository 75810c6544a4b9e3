"""The command lines' one error type, their exit codes, and the one table from the package's
own exceptions to those codes.

Every command says a problem the user can fix in one line (``PROG: error: MESSAGE``) and exits
with an :class:`ExitCode`; ``--debug`` shows the traceback instead (``runner.run_command``).
A command raises :class:`CliError` for a problem of its own (a bad option, a missing file);
an exception of the package's lower floors (a refused plan, a bad input row) is translated
by :func:`exit_code_for`. A command that gives one of those exceptions another meaning
catches it and raises :class:`CliError` with its own code (``dpsynrag budget``: a plan that
cannot be made is the command's failure, exit 1, not a refusal).
"""

from __future__ import annotations

import errno
import sys
from enum import IntEnum

__all__ = ["DOMAIN_EXIT_CODES", "LOCATION_ERRNOS", "CliError", "ExitCode", "exit_code_for",
           "location_problem"]


class ExitCode(IntEnum):
    """Exit codes of ``dpsynrag`` and ``build-corpus`` (the same number means the same)."""

    OK = 0  # done (build-corpus: built)
    FAILURE = 1  # failed: a bug, a model or runtime error; verify: a check failed
    BAD_INPUT = 2  # bad input or options, usage errors included (argparse's own code)
    REFUSED = 3  # refused by the privacy plan, the budget or a ledger's cap
    INTERRUPTED = 4  # build-corpus interrupted: run the same command again to resume
    EMPTY = 5  # built, but no synthetic text was kept (build-corpus --allow-empty: OK)
    SIGINT = 130  # a tool stopped by Ctrl-C (128 + SIGINT, as a shell reports it)


class CliError(Exception):
    """A problem worth one line to the user, and the code to exit with."""

    def __init__(self, message: str, exit_code: ExitCode = ExitCode.BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# The package's exceptions that mean bad input or a refusal, by module and class name, the
# more specific first where one derives from another. They are looked up in sys.modules, not
# imported: an exception of a class whose module was never imported cannot have been raised,
# so the table costs no import (the modules behind it load torch, numpy or scipy) and an
# error in a light command stays fast. tests/test_cli_errors.py checks that every entry names
# an exception class.
DOMAIN_EXIT_CODES: tuple[tuple[str, str, ExitCode], ...] = (
    ("dpsynrag.accounting.planner", "PlanError", ExitCode.REFUSED),
    ("dpsynrag.accounting.ledger", "BudgetExceededError", ExitCode.REFUSED),
    ("dpsynrag.accounting.ledger", "ReleaseMismatchError", ExitCode.BAD_INPUT),
    ("dpsynrag.accounting.signing", "SigningKeyError", ExitCode.BAD_INPUT),
    ("dpsynrag.io.errors", "InputError", ExitCode.BAD_INPUT),
    ("dpsynrag.pipeline.config", "ConfigError", ExitCode.BAD_INPUT),
    ("dpsynrag.pipeline.build", "BuildError", ExitCode.BAD_INPUT),
    ("dpsynrag.pipeline.state", "StateError", ExitCode.BAD_INPUT),
    ("dpsynrag.pipeline.preflight", "PreflightError", ExitCode.BAD_INPUT),
    ("dpsynrag.query.private_corpus", "QueryInputError", ExitCode.BAD_INPUT),
    ("dpsynrag.eval.harness", "EvalError", ExitCode.BAD_INPUT),
)


def exit_code_for(error: BaseException) -> ExitCode | None:
    """The exit code of one of the package's known exceptions, else None (an unexpected
    error: a bug or a runtime failure)."""
    for module_name, class_name, code in DOMAIN_EXIT_CODES:
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None)
        if isinstance(cls, type) and isinstance(error, cls):
            return code
    return None


#: What an ``OSError`` on a path the user chose says about that path, by errno: the problem is
#: the location (its permissions, its file system, a missing or wrong parent), not the
#: command, so it is bad input (exit 2) with one line naming the path.
LOCATION_ERRNOS: dict[int, str] = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EISDIR: "is a directory",
    errno.EEXIST: "exists",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EXDEV: "on another file system (a mount point cannot be renamed onto)",
    errno.EBUSY: "busy (a mount point?)",
    errno.ENAMETOOLONG: "file name too long",
}


def location_problem(error: BaseException) -> str | None:
    """``PATH: problem`` for an ``OSError`` about a path that the user can fix (permissions,
    a read-only or full file system, a mount point, a missing parent), else None."""
    if not isinstance(error, OSError) or error.filename is None:
        return None
    problem = LOCATION_ERRNOS.get(error.errno or 0)
    if problem is None:
        return None
    other = f" (-> {error.filename2})" if error.filename2 is not None else ""
    return f"{error.filename}{other}: {problem}"
