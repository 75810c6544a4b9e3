"""Scale-out (issue 17): the Ray runner with more than one model actor.

The layout of the actors and the order in which ordered mode answers them are tested without
Ray. Then the same seeded build runs in process (the local runner, one torch thread) and on a
local Ray cluster (2 CPUs, its own temporary directory) with two CPU model actors, in host and
in device token sampling; tiny models are saved to disk so that every actor loads its own copy
by path, as on a cluster. All must release exactly the same: every ledger release (name,
parameters, value), the rho spent and the synthetic texts.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from benchmark_modules import load_benchmark
from test_private_prediction import SPECIALS, WORDS
from tiny_models import save_tiny_embedder, save_tiny_llm

from dpsynrag.accounting.certificate import verify_output
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.pipeline import build as build_module
from dpsynrag.pipeline import runners
from dpsynrag.pipeline.build import BuildSummary, make_runner, run_build
from dpsynrag.pipeline.config import make_config
from dpsynrag.transforms.prediction_release import PartitionTokenSampler

TINY = {"keywords": "statistical", "R": 6, "k": 8, "L": 2, "T": 5, "no_filter": True,
        "seed": 3, "runner": "ray", "device": "cpu"}


# ---------------------------------------------------------------------- without Ray
class _FakeRay:
    """``available_resources`` and ``nodes`` of a cluster, for ``_actor_layout``."""

    def __init__(self, free: dict[str, float], node_cpus: list[float]) -> None:
        self.free, self.node_cpus = free, node_cpus

    def available_resources(self) -> dict[str, float]:
        return dict(self.free)

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": {"CPU": cpus}} for cpus in self.node_cpus]


def test_actor_layout_one_actor_per_free_gpu_else_cpu_actors_that_fit_one_node() -> None:
    layout = runners._actor_layout
    gpus = _FakeRay({"CPU": 32.0, "GPU": 4.0}, [16.0, 16.0])
    assert layout(gpus, None, None) == (4, {"num_gpus": 1, "num_cpus": 1})
    assert layout(gpus, 2, "cuda") == (2, {"num_gpus": 1, "num_cpus": 1})
    assert layout(gpus, None, "cpu") == (1, {"num_cpus": 16})  # one node's CPUs, not 32
    two_cpus = _FakeRay({"CPU": 2.0}, [2.0])
    assert layout(two_cpus, None, None) == (1, {"num_cpus": 2})
    assert layout(two_cpus, 2, None) == (2, {"num_cpus": 1})
    # more actors than free CPUs (a Ray job's driver holds one): equal fractions that fit
    assert layout(_FakeRay({"CPU": 1.0}, [2.0]), 2, None) == (2, {"num_cpus": 0.5})
    count, options = layout(two_cpus, 3, "cpu")
    assert count == 3 and 0 < options["num_cpus"] < 1 and 3 * options["num_cpus"] <= 2.0
    assert options["num_cpus"] == round(options["num_cpus"], 4)  # Ray's granularity


def test_ordered_mode_answers_the_workers_in_turn() -> None:
    """Each worker has one request pending; in turn means step-major: 0, 1, 2, 0, 1, 2, ..."""
    turn = runners._next_in_turn
    order, last = [], None
    for pending in ({0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {0, 2}, {0, 2}, {2}):
        last = turn(pending, last)
        order.append(last)
    assert order == [0, 1, 2, 0, 2, 0, 2]


def test_balanced_shards_give_every_worker_contiguous_groups_of_about_equal_rows() -> None:
    """Shards cover the groups in order, none is empty while there are enough groups, and
    the row counts come out as even as contiguous cuts allow."""
    shards = runners._balanced_shards

    def rows(sizes: list[int]) -> list[list[str]]:
        return [["row"] * size for size in sizes]

    assert shards(rows([2, 2, 2, 2]), 2) == [[0, 1], [2, 3]]
    # one large group last (or first) gets a shard of its own; the others share one
    assert shards(rows([1, 1, 1, 1, 1, 75]), 2) == [[0, 1, 2, 3, 4], [5]]
    assert shards(rows([75, 1, 1, 1, 1, 1]), 2) == [[0], [1, 2, 3, 4, 5]]
    assert shards(rows([75, 1, 1]), 3) == [[0], [1], [2]]
    assert shards(rows([3, 3, 3, 1, 1, 1]), 2) == [[0, 1], [2, 3, 4, 5]]
    assert shards(rows([5, 5]), 4) == [[0], [1]]  # fewer groups than workers
    assert shards(rows([0, 4]), 2) == [[0], [1]]  # an empty group still counts one row
    assert shards(rows([7]), 2) == shards(rows([7]), 1) == [[0]]
    assert shards([], 2) == [[]]
    sizes = [int(x) for x in np.random.default_rng(4).integers(0, 40, 37)]
    for n in (2, 3, 5):
        result = shards(rows(sizes), n)
        assert len(result) == n and all(result)
        assert [g for shard in result for g in shard] == list(range(len(sizes)))
        loads = [sum(max(1, sizes[g]) for g in shard) for shard in result]
        assert max(loads) - min(loads) <= 2 * max(max(1, s) for s in sizes)


# ---------------------------------------------------------------------- a local Ray cluster
@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local 2-CPU Ray cluster for this module, in a private temporary directory; each
    actor computes with one thread, so that float results do not depend on thread counts."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")
    temp_dir, _ = runners.private_ray_temp_dir(None)
    env = {**runners._worker_env(), "OMP_NUM_THREADS": "1"}
    with runners._keep_signal_handlers():
        ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=str(temp_dir),
                 logging_level="warning", runtime_env={"env_vars": env})
    runners.make_private_again(temp_dir)
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir.parent, ignore_errors=True)  # r in its own mkdtemp directory


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ray-inputs")
    notes = write_clinic_dataset(root / "data", n_notes=80, n_diseases=5, seed=11)["notes"]
    generate_keypair(root / "key.pem", root / "key.pem.pub")
    return {"notes": notes, "key": root / "key.pem",
            "llm": save_tiny_llm(root / "tiny-llm", WORDS, specials=SPECIALS),
            "embedder": save_tiny_embedder(root / "tiny-embedder", WORDS)}


def _build(inputs: dict[str, Path], tmp: Path, workers: int,
           monkeypatch: pytest.MonkeyPatch, token_sampling: str = "host",
           name: str | None = None, runner: runners.Runner | None = None
           ) -> tuple[BuildSummary, list[list[int]]]:
    """A seeded build: ``workers`` 0 runs it in process (the local runner, the reference);
    otherwise on Ray: on ``runner`` when given (a runner of ``workers`` actors on the module's
    cluster, which the build leaves open), else on the one ``run_build`` makes. Returns the
    summary and the groups of every call to the token sampler (its votes in host mode, its
    uniforms in device mode). ``name`` (default: the worker count) names the output and state
    dirs."""
    calls: list[list[int]] = []
    sample, uniforms = PartitionTokenSampler.__call__, PartitionTokenSampler.draw_uniforms
    name = name or str(workers)

    def recording_sample(self: PartitionTokenSampler, votes: np.ndarray,
                         active: list[int]) -> np.ndarray:
        calls.append(list(active))
        return sample(self, votes, active)

    def recording_uniforms(self: PartitionTokenSampler,
                           active: list[int]) -> list[tuple[bool, float | int]]:
        calls.append(list(active))
        return uniforms(self, active)

    config = _config(inputs, workers, token_sampling)
    with monkeypatch.context() as patch:
        patch.setattr(PartitionTokenSampler, "__call__", recording_sample)
        patch.setattr(PartitionTokenSampler, "draw_uniforms", recording_uniforms)
        summary = run_build(inputs["notes"], tmp / f"out-{name}", config,
                            state_dir=tmp / f"state-{name}", signing_key=inputs["key"],
                            corpus_ledger=False, runner=runner)
    return summary, calls


def _config(inputs: dict[str, Path], workers: int, token_sampling: str = "host") -> Any:
    """The tiny seeded build's config: the local runner for 0 workers, else Ray."""
    options = {**TINY, "model": str(inputs["llm"]), "embedder": str(inputs["embedder"]),
               "token_sampling": token_sampling}
    options.update({"runner": "local"} if workers == 0 else {"workers": workers})
    return make_config(None, options)


class _SharedRunner:
    """The test's Ray runner handed to ``run_build`` as the one it made: a ``close`` is
    counted and the actors stay up for the next build."""

    def __init__(self, runner: runners.Runner) -> None:
        self.runner, self.closed = runner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def close(self) -> None:
        self.closed += 1


def _same_values(a: Any, b: Any) -> bool:
    """Equal, floats to a relative 1e-9 (nested lists and dicts alike)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) \
            and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_values(a[k], b[k]) for k in a)
    return bool(a == b)


def _ledger(state: Path) -> tuple[dict[str, dict[str, Any]], float]:
    """Every release of a build's ledger by name (its recorded row and its value), and the
    total rho."""
    with Ledger(state / "ledger.sqlite") as ledger:
        releases = {}
        for release in ledger.releases():
            value = ledger.released_value(release.key)
            releases[release.key] = {**dataclasses.asdict(release), "value": (
                value.tolist() if isinstance(value, np.ndarray) else value)}
        return releases, ledger.total_rho()


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_two_cpu_actors_release_exactly_what_the_local_runner_releases(
        ray_cluster: Any, inputs: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same seeded build in process (one torch thread, as each actor) and on two Ray
    actors, in host and in device sampling (one Ray runner for both: its actors start once)."""
    started = time.monotonic()
    one, one_calls = _build(inputs, tmp_path, 0, monkeypatch)
    runner = make_runner(_config(inputs, 2), state_dir=tmp_path / "ray-state")
    made: list[_SharedRunner] = []

    def make_shared(config: Any, state_dir: Path | None = None) -> _SharedRunner:
        assert config.workers == 2 and state_dir == tmp_path / "state-2"
        made.append(_SharedRunner(runner))
        return made[-1]

    try:
        assert isinstance(runner, runners.RayRunner) and len(runner.workers) == 2
        with monkeypatch.context() as patch:
            patch.setattr(build_module, "make_runner", make_shared)
            two, two_calls = _build(inputs, tmp_path, 2, monkeypatch)
        assert [shared.closed for shared in made] == [1]  # run_build made it and closed it
        device, device_calls = _build(inputs, tmp_path, 2, monkeypatch, runner=runner,
                                      token_sampling="device", name="2-device")
    finally:
        runner.close()
    print(f"three seeded builds (in process, 2 actors in host and device sampling): "
          f"{time.monotonic() - started:.1f} s")
    # device-side sampling (the worker computes each token from the ledger's uniform) asks
    # for the same draws in the same order and releases exactly the same
    assert device_calls == two_calls
    assert _ledger(tmp_path / "state-2-device") == _ledger(tmp_path / "state-2")
    assert device.synthetic_texts == two.synthetic_texts
    device_table = pq.read_table(tmp_path / "out-2-device" / "corpus.parquet").to_pydict()
    groups = one.synthetic_texts
    assert groups == two.synthetic_texts == TINY["R"]
    # in process every group's token is asked for at each step; two actors shared stage (d):
    # their first calls are two disjoint halves, every later call is within one of them, and
    # answered in turn they ask for the draws in the order the local runner does
    assert one_calls[0] == list(range(groups))
    first, second = set(two_calls[0]), set(two_calls[1])
    assert first and second and not first & second and first | second == set(range(groups))
    assert all(set(c) <= first or set(c) <= second for c in two_calls)
    assert len(two_calls) > len(one_calls)
    assert [g for c in two_calls for g in c] == [g for c in one_calls for g in c]
    # the same ledger: every release, its parameters and value; the same rho
    releases_one, rho_one = _ledger(tmp_path / "state-0")
    releases_two, rho_two = _ledger(tmp_path / "state-2")
    assert any(key.endswith("/token/000") for key in releases_one)
    assert releases_two.keys() == releases_one.keys()
    for key, release in releases_one.items():
        # every recorded field and every drawn integer exactly; a released float (a
        # similarity threshold) to 1e-9: the embedder's float32 results move in their last
        # bits with the batches a process embeds (seen: 0.99799120589 against 0.99799120588)
        other = releases_two[key]
        assert {f: v for f, v in other.items() if f != "value"} == \
            {f: v for f, v in release.items() if f != "value"}, key
        assert _same_values(other["value"], release["value"]), key
    assert rho_two == rho_one == two.rho_spent == one.rho_spent > 0
    # the same synthetic texts, cluster by cluster
    table_one = pq.read_table(tmp_path / "out-0" / "corpus.parquet").to_pydict()
    table_two = pq.read_table(tmp_path / "out-2" / "corpus.parquet").to_pydict()
    for column in ("id", "text", "tokens", "cluster_keyword"):
        assert table_two[column] == table_one[column] == device_table[column], column
    assert any(text.strip() for text in table_two["text"])
    assert verify_output(tmp_path / "out-2", inputs["key"].with_name("key.pem.pub"),
                         allow_seeded=True) == []


@pytest.mark.slow
def test_the_stage_d_benchmark_counts_row_token_steps_through_one_actor(
        ray_cluster: Any, inputs: dict[str, Path], tmp_path: Path) -> None:
    """benchmarks/ray_stage_d.py's measured call: a build's stage (d) through the Ray runner;
    its count is every released token once per row of its group, in both modes."""
    module = load_benchmark("ray_stage_d")
    groups = [["alpha beta gamma", "delta alpha"], ["gamma gamma", "beta", "alpha delta"]]
    runner = runners.RayRunner(str(inputs["llm"]), str(inputs["embedder"]), workers=1,
                               device="cpu", ordered=True)
    try:
        runs = [module.ray_stage_d(runner, groups, 3, mode, None, [], "Say: {document}", 1.0,
                                   2.0, tmp_path / f"{mode}.sqlite")
                for mode in ("host", "device")]
    finally:
        runner.close()
    for run in runs:
        assert run["group_tokens"] == 6  # no EOS ids given: T = 3 tokens per group
        assert run["token_steps"] == 3 * 2 + 3 * 3
        # the benchmark rounds the rate to 2 decimals: on a slow run (0.15 steps/s) that alone
        # moves it by more than 2 %
        assert run["token_steps_per_s"] == pytest.approx(
            run["token_steps"] / run["wall_seconds"], rel=0.02, abs=0.005)
    with Ledger(tmp_path / "host.sqlite") as host, Ledger(tmp_path / "device.sqlite") as device:
        assert [host.released_value(r.key) for r in host.releases()] == \
            [device.released_value(r.key) for r in device.releases()]
