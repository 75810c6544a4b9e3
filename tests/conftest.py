"""Shared test set-up: no test writes to the real config directory (keys, corpus ledgers);
under pytest-xdist (``make test`` runs three workers) each worker's math libraries get their
share of the cores, set before torch is imported, and ``--dist loadfile`` keeps each test file
on one worker except the runbooks, which spread over the workers and start first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def _share_the_cores() -> None:
    """Each xdist worker gets cpu_count // workers math threads (at least one), and OpenMP
    threads sleep instead of spinning while they wait: two workers each spinning one thread
    per core on a 2-core machine thrash (a build ran twice as slow that way). Subprocesses
    (runbooks, CLI runs, Ray workers) inherit the environment. Outside xdist nothing changes."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers < 2:
        return
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


_share_the_cores()


# Tests that xdist may place one by one, each on whichever worker is free, rather than with the
# rest of their file (nodeid prefixes): the runbooks, a minute or more each.
SPREAD_TESTS = ("tests/test_runbooks.py::test_runbook_runs_as_written[",)
# Files handed out right after the runbooks, in this order: those that took 40 s or more each
# (-n 0, one math thread, 2 cores), several of them with few tests, which xdist's own order
# (the most tests first) would leave for the end of the run.
SLOW_FILES = ("tests/test_facts_build.py", "tests/test_build.py", "tests/test_ray_runner.py",
              "tests/test_ingest.py", "tests/test_eval_harness.py", "tests/test_step_resume.py",
              "tests/test_samplers_statistical.py", "tests/test_models.py",
              "tests/test_preflight.py", "tests/test_beam_ngrams.py",
              "tests/test_verify_mutations.py")


def unit_of(nodeid: str) -> str:
    """The unit of work of a test under ``--dist loadfile``: its file, or the test itself when
    it is a spread test."""
    return nodeid if nodeid.startswith(SPREAD_TESTS) else nodeid.split("::", 1)[0]


def schedule_order(nodeids: list[str]) -> list[str]:
    """``nodeids`` in the order in which their units are handed out: the spread tests (in their
    own order), then SLOW_FILES, then the other files, the most tests first; a unit's tests
    stay together and in their order."""
    sizes: dict[str, int] = {}
    for nodeid in nodeids:
        sizes[unit_of(nodeid)] = sizes.get(unit_of(nodeid), 0) + 1

    def key(nodeid: str) -> tuple[int, int]:
        unit = unit_of(nodeid)
        if unit != nodeid.split("::", 1)[0]:
            return (0, 0)
        if unit in SLOW_FILES:
            return (1 + SLOW_FILES.index(unit), 0)
        return (1 + len(SLOW_FILES), -sizes[unit])

    return sorted(nodeids, key=key)  # stable: collection order within equal keys


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the collection order is the order in which ``--dist loadfile``
    hands out its units (:func:`schedule_order`, :func:`pytest_xdist_make_scheduler`).
    Outside xdist nothing changes."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    position = {nodeid: i for i, nodeid in enumerate(schedule_order([i.nodeid for i in items]))}
    items.sort(key=lambda item: position[item.nodeid])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (``make test``) with the spread tests as units of their own: a file's
    other tests stay on one worker, so its module fixtures (corpora, models) are built once,
    while the runbooks go to both workers, one at a time each, the slowest first. (xdist's
    ``--dist loadgroup`` cannot do this here: with pytest 9 its group names no longer reach
    the scheduler, and it would scatter every other file's tests.)"""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class LoadFileSpreadingScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    # Hand the units out in collection order (pytest_collection_modifyitems above), not
    # sorted by their number of tests, which would put every one-test unit last.
    config.option.loadscopereorder = False
    return LoadFileSpreadingScheduling(config, log)


@pytest.fixture(autouse=True)
def _private_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "dpsynrag-config"))


@pytest.fixture
def one_torch_thread() -> Any:
    """Torch on one thread for the test: tiny models run fastest so, and stay quick on a busy
    machine (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
