"""The order in which ``make test``'s xdist workers get their units of work (tests/conftest.py):
each runbook alone and first, then the slow files, then the rest; a file stays together."""

from __future__ import annotations

from pathlib import Path

import conftest
from conftest import SLOW_FILES, schedule_order, unit_of

REPO = Path(__file__).resolve().parent.parent


def test_a_runbook_is_a_unit_of_its_own_and_other_tests_go_with_their_file() -> None:
    runbook = "tests/test_runbooks.py::test_runbook_runs_as_written[handoff]"
    assert unit_of(runbook) == runbook
    assert unit_of("tests/test_runbooks.py::test_parse_blocks_keeps_the_indentation") == \
        "tests/test_runbooks.py"
    assert unit_of("tests/test_build.py::test_x[a::b]") == "tests/test_build.py"


def test_runbooks_come_first_then_the_slow_files_then_files_by_number_of_tests() -> None:
    nodeids = ["tests/test_a.py::t1",
               "tests/test_b.py::t1", "tests/test_b.py::t2", "tests/test_b.py::t3",
               f"{SLOW_FILES[1]}::t1",
               "tests/test_runbooks.py::test_parse",
               "tests/test_runbooks.py::test_runbook_runs_as_written[scheduled-build]",
               "tests/test_runbooks.py::test_runbook_runs_as_written[facts-mode]",
               f"{SLOW_FILES[0]}::t1", f"{SLOW_FILES[0]}::t2"]
    assert schedule_order(nodeids) == [
        "tests/test_runbooks.py::test_runbook_runs_as_written[scheduled-build]",
        "tests/test_runbooks.py::test_runbook_runs_as_written[facts-mode]",
        f"{SLOW_FILES[0]}::t1", f"{SLOW_FILES[0]}::t2",
        f"{SLOW_FILES[1]}::t1",
        "tests/test_b.py::t1", "tests/test_b.py::t2", "tests/test_b.py::t3",
        "tests/test_a.py::t1", "tests/test_runbooks.py::test_parse"]


def test_every_listed_slow_file_exists() -> None:
    missing = [f for f in SLOW_FILES if not (REPO / f).is_file()]
    assert not missing, f"tests/conftest.py SLOW_FILES names missing files: {missing}"
    assert all(prefix.startswith("tests/") for prefix in conftest.SPREAD_TESTS)
