"""Shared test set-up: no test writes to the real config directory (keys, corpus ledgers);
under pytest-xdist (``make test`` runs two workers) each worker's math libraries get their
share of the cores, set before torch is imported."""

from __future__ import annotations

import os
from pathlib import Path

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


@pytest.fixture(autouse=True)
def _private_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "dpsynrag-config"))
