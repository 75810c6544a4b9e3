"""benchmarks/driver_step.py: the driver's share of a decode step, host and device modes.

A tiny run without Ray checks the JSON's fields and the projection's arithmetic; the Ray
relay itself is exercised by tests/test_ray_runner.py (both modes through real actors)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("driver_step")


def test_a_tiny_run_without_ray_reports_each_part(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "driver.json"
    assert bench.main(["--groups", "1,3", "--vocab", "64", "--rows", "4", "--repeats", "2",
                       "--clusters", "6", "--tokens", "4", "--no-ray", "--out",
                       str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["benchmark"] == "driver_step"
    steps = report["steps"]
    assert [(s["groups"], s["vocab"]) for s in steps] == [(1, 64), (3, 64)]
    for step in steps:
        assert step["votes_bytes"] == step["groups"] * 64 * 8
        assert step["row_token_steps"] == step["groups"] * 4
        for key in ("engine_sampling_ms", "worker_conversion_ms", "ledger_sampler_memory_ms",
                    "ledger_sampler_disk_ms", "device_sampling_cpu_ms"):
            assert step[key] > 0, key
        assert step["ray_relay_ms"] is None and step["device_mode_driver_ms"] is None
        # without Ray the host driver is the worker's conversion plus the ledger's sampling;
        # the JSON keeps 4 significant digits of each, so the sum agrees to about 1e-3 of it
        assert step["host_mode_driver_ms"] == pytest.approx(
            step["worker_conversion_ms"] + step["ledger_sampler_disk_ms"], rel=1e-3, abs=2e-3)
        target = step["target_step_ms_llama-3.1-8b"]
        assert target == pytest.approx(step["row_token_steps"] / 32_300 * 1000, rel=1e-3)
        assert step["host_mode_ray_share_at_llama-3.1-8b_target"] == pytest.approx(
            target / (target + step["host_mode_driver_ms"]), rel=1e-2)


def test_the_ledger_refuses_more_draws_than_clusters_times_T(bench: ModuleType) -> None:
    import numpy as np

    with pytest.raises(ValueError, match="clusters"):
        bench.ledger_sampling_ms(np.zeros((4, 8)), clusters=2, max_tokens=2, repeats=3,
                                 path=None)
