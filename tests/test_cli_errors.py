"""The command lines' one error type, exit codes and table from the package's exceptions."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from dpsynrag.cli.errors import DOMAIN_EXIT_CODES, CliError, ExitCode, exit_code_for
from dpsynrag.cli.runner import run_command


def test_exit_codes_are_the_documented_numbers() -> None:
    # build-corpus --help, the query and verify docstrings and the runbooks rely on these
    assert [int(code) for code in ExitCode] == [0, 1, 2, 3, 4, 5, 130]
    assert (ExitCode.BAD_INPUT, ExitCode.REFUSED, ExitCode.INTERRUPTED) == (2, 3, 4)


@pytest.mark.parametrize("module_name,class_name,code", DOMAIN_EXIT_CODES)
def test_every_table_entry_names_an_exception_class(module_name: str, class_name: str,
                                                    code: ExitCode) -> None:
    cls = getattr(importlib.import_module(module_name), class_name)
    assert isinstance(cls, type) and issubclass(cls, Exception)
    assert isinstance(code, ExitCode)


def test_the_table_maps_subclasses_as_their_base() -> None:
    from dpsynrag.accounting.corpus_ledger import (
        BudgetRefusedError,
        NoCapError,
        PrivacyUnitMismatchError,
    )
    from dpsynrag.accounting.planner import PlanError
    from dpsynrag.eval.datasets import DatasetError
    from dpsynrag.pipeline.config import ConfigError

    assert exit_code_for(PlanError("x")) is ExitCode.REFUSED
    assert exit_code_for(BudgetRefusedError("x")) is ExitCode.REFUSED
    assert exit_code_for(PrivacyUnitMismatchError("x")) is ExitCode.BAD_INPUT
    assert exit_code_for(ConfigError("x")) is ExitCode.BAD_INPUT
    assert exit_code_for(DatasetError("notes.jsonl", "line 3", "malformed")) is ExitCode.BAD_INPUT
    assert exit_code_for(NoCapError("x")) is None  # a command says what a missing cap means
    assert exit_code_for(ValueError("x")) is None


def test_the_table_imports_nothing() -> None:
    code = ("import sys\nfrom dpsynrag.cli.errors import exit_code_for\n"
            "assert exit_code_for(ValueError('x')) is None\n"
            "print(sorted(m for m in ('numpy', 'scipy', 'torch', 'dpsynrag.pipeline.build', "
            "'dpsynrag.eval.harness') if m in sys.modules))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, check=True)
    assert shown.stdout.strip() == "[]"


def _raise(error: BaseException) -> int:
    raise error


def test_run_command_says_one_line_and_returns_the_code(
        capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.accounting.planner import PlanError
    from dpsynrag.io.errors import InputError

    assert run_command(lambda: 0, "prog", debug=False) == 0
    cases = [(CliError("bad option"), 2, "prog: error: bad option"),
             (CliError("refused", ExitCode.REFUSED), 3, "prog: error: refused"),
             (InputError("notes.jsonl", "line 2", "malformed JSON"), 2,
              "prog: error: notes.jsonl: line 2: malformed JSON"),
             (PlanError("nothing is left"), 3, "prog: error: nothing is left"),
             (RuntimeError("boom"), 1, "prog: error: RuntimeError: boom (rerun with --debug for "
                                       "the traceback)"),
             # a path the user chose and cannot use: bad input, named, one line
             (PermissionError(13, "Permission denied", "/srv/state/lock"), 2,
              "prog: error: /srv/state/lock: permission denied"),
             (OSError(30, "Read-only file system", "/mnt/ro/out"), 2,
              "prog: error: /mnt/ro/out: read-only file system"),
             (OSError(18, "Invalid cross-device link", "/a/.out.partial", None, "/mnt/out"), 2,
              "prog: error: /a/.out.partial (-> /mnt/out): on another file system (a mount "
              "point cannot be renamed onto)"),
             (OSError(5, "Input/output error"), 1, "prog: error: OSError: [Errno 5] Input/output "
                                                   "error (rerun with --debug for the "
                                                   "traceback)"),
             (KeyboardInterrupt(), 130, "prog: interrupted")]
    for error, code, line in cases:
        assert run_command(lambda error=error: _raise(error), "prog", debug=False) == code
        assert capsys.readouterr().err.splitlines() == [line]


def test_debug_shows_the_traceback() -> None:
    from dpsynrag.io.errors import InputError

    for error in (CliError("bad option"), InputError("notes.jsonl", None, "bad row"),
                  RuntimeError("boom")):
        with pytest.raises(type(error)):
            run_command(lambda error=error: _raise(error), "prog", debug=True)


def test_python_dash_m_runs_the_dpsynrag_command() -> None:
    shown = subprocess.run([sys.executable, "-m", "dpsynrag.cli", "--version"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and shown.stdout.startswith("dpsynrag "), shown.stderr


def _run_with_closed_stdout(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` with a standard output whose reader is already gone."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-c", code], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("output", ["print('x')", "[print('x' * 80) for _ in range(5000)]"])
def test_a_reader_that_goes_away_ends_the_command_quietly(output: str) -> None:
    # 'dpsynrag verify --explain | head': small output fails at the last flush, large output
    # in the middle of the command; neither is a traceback
    code = ("import sys\nfrom dpsynrag.cli.runner import run_command\n"
            f"def handler():\n    {output}\n    return 0\n"
            "sys.exit(run_command(handler, 'prog', debug=False))")
    shown = _run_with_closed_stdout(code)
    assert shown.stderr == ""
    assert shown.returncode == ExitCode.FAILURE


@pytest.mark.parametrize("args", [["budget", "--json"], ["budget"]])  # print, then rich
def test_a_command_whose_reader_goes_away_says_nothing(args: list[str]) -> None:
    shown = _run_with_closed_stdout("import sys\nfrom dpsynrag.cli import main\n"
                                    f"sys.exit(main({args!r}))")
    assert shown.stderr == "" and shown.returncode == ExitCode.FAILURE


def test_a_broken_pipe_that_is_not_the_output_is_an_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(lambda: _raise(BrokenPipeError(32, "Broken pipe")), "prog",
                       debug=False) == ExitCode.FAILURE
    assert "BrokenPipeError" in capsys.readouterr().err
