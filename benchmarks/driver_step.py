"""Benchmark of the driver's share of a private-prediction step (issue 17, "the Ray path keeps up").

Each decode step of stage (d) ends on the driver, and the engine waits for it. In host mode
(``--token-sampling host``) the worker turns the step's summed votes (active groups x
vocabulary) into a float64 array, Ray carries it to the driver, the driver's
``LedgerTokenSampler`` draws one token per group through the ledger (one SQLite transaction,
``synchronous=FULL``) and the tokens go back. In device mode the worker asks for the step's
uniforms, the ledger charges and draws them (one transaction), the worker computes the tokens
on its device and reports them, and the ledger stores them (another transaction). This script
measures each part at GPU-scale shapes without a model or a GPU (the driver's work runs on
the host whatever the worker's device) and projects the share of the engine's rate the Ray
path keeps at the issue's target rates: step / (step + driver), where a step of G groups of k
rows is G * k row-token steps.

Run ``python benchmarks/driver_step.py --json [--out FILE] [--no-ray]``; see benchmarks/README.md.
The votes are random numbers of the scale of k clipped rows (no private data).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.token_sampling import inverse_cdf_tokens, sample_tokens
from dpsynrag.transforms.prediction_release import GROUP, LedgerTokenSampler

CLIP = 1.0
TEMPERATURE = 10.0  # c / tau = 0.1, the paper's regime
DEFAULT_GROUPS = (1, 4, 13, 32, 64)
DEFAULT_VOCABS = (49_152, 128_256, 152_064)
# row-token steps/s the issue asks of the engine on an H100: SmolLM2-135M's target, and
# Llama-3.1-8B at 50 % of the bf16 bound (989 TFLOP/s / ~15.3 GFLOP per row-token at a
# ~600-token context)
TARGET_RATES = {"smollm2-135m": 60_000.0, "llama-3.1-8b": 32_300.0}


def _votes(groups: int, vocab: int, rows: int, seed: int) -> torch.Tensor:
    """Summed clipped votes of ``rows`` documents: values in [-rows * c, rows * c]."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(groups, vocab, generator=generator) * 2 - 1) * CLIP * rows ** 0.5


def _median_ms(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def engine_sampling_ms(votes: torch.Tensor, repeats: int) -> float:
    """What the engine's own benchmark pays per step: ``sample_tokens`` on the whole batch."""
    rng = RandomSource(seed=1)
    return _median_ms(lambda: sample_tokens(votes, TEMPERATURE, rng), repeats)


def worker_conversion_ms(votes: torch.Tensor, repeats: int) -> float:
    """The worker's hand-off (``ModelWorker.start_prediction``): votes to a float64 array."""
    return _median_ms(lambda: votes.detach().to("cpu").double().numpy(), repeats)


def ledger_sampling_ms(votes: np.ndarray, clusters: int, max_tokens: int, repeats: int,
                       path: Path | None) -> float:
    """The driver's ``LedgerTokenSampler`` for one step of ``len(votes)`` active groups, on a
    ledger that holds a budget (so every step checks it) and ``clusters`` partitions.

    Steps cycle through the clusters, so the ledger grows as in a build; EOS never occurs."""
    groups = votes.shape[0]
    ledger = Ledger(path, rng=RandomSource(seed=2), rho_budget=1e6)
    ledger.declare_parallel_group(GROUP, 1, "benchmark clusters")
    sampler = LedgerTokenSampler(ledger, list(range(clusters)), clip=CLIP,
                                 temperature=TEMPERATURE, max_new_tokens=max_tokens,
                                 eos_ids=[-1])
    cursor = [0]

    def step() -> None:
        start = cursor[0]
        active = [(start + i) % clusters for i in range(groups)]
        cursor[0] = (start + groups) % clusters
        sampler(votes, active)

    if groups > clusters or groups * (repeats + 1) > clusters * max_tokens:
        raise ValueError("more groups than clusters, or more draws than clusters x T: raise "
                         "--clusters")
    step()  # the first step creates the tables' pages
    return _median_ms(step, repeats)


def device_sampling_ms(votes: torch.Tensor, repeats: int) -> float:
    """The worker's exact inverse CDF (``inverse_cdf_tokens``) on this machine's CPU; on a
    GPU worker it runs on the GPU."""
    uniforms = np.asarray(RandomSource(seed=4).random(votes.shape[0]), dtype=np.float64)
    return _median_ms(lambda: inverse_cdf_tokens(votes, TEMPERATURE, uniforms), repeats)


def device_driver_ms(ray: Any, actor: Any, groups: int, vocab: int, repeats: int, rows: int,
                     path: Path) -> float:
    """Device mode through Ray: per step, the draw request, the ledger's charges and uniforms
    (one transaction on disk), the answer, and the tokens stored (another transaction)."""
    ledger = Ledger(path, rng=RandomSource(seed=5), rho_budget=1e6)
    ledger.declare_parallel_group(GROUP, 1, "benchmark clusters")
    sampler = LedgerTokenSampler(ledger, list(range(groups)), clip=CLIP,
                                 temperature=TEMPERATURE, max_new_tokens=repeats + 3,
                                 eos_ids=[-1])
    ray_relay_ms(ray, actor, groups, vocab, 2, rows, sampler, "device")  # warm-up
    return ray_relay_ms(ray, actor, groups, vocab, repeats, rows, sampler, "device")


class VotesSource:
    """A stand-in model worker with ``ModelWorker``'s prediction protocol: a thread puts each
    step's votes on a queue (``next_request``) and waits for the tokens (``give_tokens``)."""

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._answers: queue.Queue[Any] = queue.Queue()

    def ping(self) -> str:
        return "ok"

    def start(self, groups: int, vocab: int, steps: int, rows: int,
              mode: str = "host") -> None:
        """``host``: each step sends the votes and waits for tokens. ``device``: each step asks
        for the uniforms, waits for them and reports tokens (zeros: the device's inverse CDF
        is timed apart, ``device_sampling_ms``), as ``ModelWorker``'s device sampler does."""
        votes = _votes(groups, vocab, rows, seed=3)
        active = list(range(groups))

        def run() -> None:
            for _ in range(steps):
                if mode == "host":
                    array = votes.detach().to("cpu").double().numpy()
                    self._requests.put(("votes", array, active))
                else:
                    self._requests.put(("draw", active, TEMPERATURE))
                if self._answers.get() is None:
                    return
                if mode == "device":
                    self._requests.put(("drawn", active, [0] * groups))
            self._requests.put(("done", [""] * groups))

        threading.Thread(target=run, daemon=True).start()

    def next_request(self) -> tuple[Any, ...]:
        return self._requests.get()

    def give_tokens(self, tokens: Sequence[int] | None) -> None:
        self._answers.put(None if tokens is None else list(tokens))


def ray_relay_ms(ray: Any, actor: Any, groups: int, vocab: int, steps: int, rows: int,
                 sampler: Any = None, mode: str = "host") -> float:
    """Round trip per step through Ray. Host mode with no ``sampler``: a driver that answers
    at once (the worker's conversion, the votes into the object store, the driver's
    ``ray.get``, the tokens back). Device mode: ``sampler`` (a ``LedgerTokenSampler``) charges
    and draws each step's uniforms and stores the tokens: the whole driver side."""
    from dpsynrag.pipeline.runners import _relay_prediction

    zeros = np.zeros(groups, dtype=np.int64)
    ray.get(actor.start.remote(groups, vocab, steps, rows, mode))
    owner: dict[Any, int] = {}

    def request(index: int) -> Any:
        ref = actor.next_request.remote()
        owner[ref] = index
        return ref

    def get_next(pending: dict[int, Any]) -> tuple[int, tuple]:
        [ref] = list(pending.values())
        return owner.pop(ref), ray.get(ref)

    def send(index: int, tokens: Any) -> None:
        actor.give_tokens.remote(tokens)

    start = time.perf_counter()
    answer = sampler if sampler is not None else (lambda votes, active: zeros)
    _relay_prediction([(actor, list(range(groups)))], answer, groups, get_next, send, request)
    return 1000.0 * (time.perf_counter() - start) / steps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default=",".join(map(str, DEFAULT_GROUPS)),
                        help="active groups per step, comma-separated (default: %(default)s)")
    parser.add_argument("--vocab", default=",".join(map(str, DEFAULT_VOCABS)),
                        help="vocabulary sizes, comma-separated (default: %(default)s: "
                             "SmolLM2, Llama 3, Qwen2.5)")
    parser.add_argument("--rows", type=int, default=80,
                        help="rows (documents) per group, k (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=15,
                        help="timed steps per figure; the median is reported")
    parser.add_argument("--clusters", type=int, default=500,
                        help="partitions in the benchmark ledger (default: %(default)s, R)")
    parser.add_argument("--tokens", type=int, default=70,
                        help="T, draws per cluster (default: %(default)s)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray relay")
    parser.add_argument("--json", action="store_true", help="print the JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON to this file")
    return parser.parse_args(argv)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _start_ray() -> tuple[Any, Any]:
    import ray

    temp = tempfile.mkdtemp(prefix="dpsr-", dir="/tmp")
    ray.init(include_dashboard=False, logging_level="error", _temp_dir=temp,
             num_cpus=os.cpu_count() or 1)
    actor = ray.remote(VotesSource).options(num_cpus=1, max_concurrency=1).remote()
    ray.get(actor.ping.remote())
    return ray, actor


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    groups_list, vocabs = _ints(args.groups), _ints(args.vocab)
    ray = actor = None
    if not args.no_ray:
        ray, actor = _start_ray()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dpsr-ledger-") as scratch:
        for vocab in vocabs:
            for groups in groups_list:
                votes = _votes(groups, vocab, args.rows, seed=groups * 7919 + vocab)
                array = votes.double().numpy()
                row: dict[str, Any] = {
                    "groups": groups, "vocab": vocab, "row_token_steps": groups * args.rows,
                    "votes_bytes": int(array.nbytes),
                    "engine_sampling_ms": engine_sampling_ms(votes, args.repeats),
                    "worker_conversion_ms": worker_conversion_ms(votes, args.repeats),
                    "ledger_sampler_memory_ms": ledger_sampling_ms(
                        array, args.clusters, args.tokens, args.repeats, None),
                    "ledger_sampler_disk_ms": ledger_sampling_ms(
                        array, args.clusters, args.tokens, args.repeats,
                        Path(scratch) / f"ledger-{vocab}-{groups}.sqlite"),
                    "ray_relay_ms": None,
                    "device_sampling_cpu_ms": device_sampling_ms(votes, args.repeats),
                    "device_mode_driver_ms": None,
                }
                if ray is not None:
                    ray_relay_ms(ray, actor, groups, vocab, 2, args.rows)  # warm-up
                    row["ray_relay_ms"] = ray_relay_ms(ray, actor, groups, vocab,
                                                       args.repeats, args.rows)
                    row["device_mode_driver_ms"] = device_driver_ms(
                        ray, actor, groups, vocab, args.repeats, args.rows,
                        Path(scratch) / f"device-{vocab}-{groups}.sqlite")
                relay = row["ray_relay_ms"] or row["worker_conversion_ms"]
                driver = relay + row["ledger_sampler_disk_ms"]
                row["host_mode_driver_ms"] = driver
                for name, rate in TARGET_RATES.items():
                    # the GPU's step at the target rate, its token sampling on the device
                    # (microseconds there); through Ray the driver's part adds to it
                    step_ms = groups * args.rows / rate * 1000
                    row[f"target_step_ms_{name}"] = step_ms
                    row[f"host_mode_ray_share_at_{name}_target"] = step_ms / (step_ms + driver)
                    if row["device_mode_driver_ms"] is not None:
                        row[f"device_mode_ray_share_at_{name}_target"] = step_ms / (
                            step_ms + row["device_mode_driver_ms"])
                rows.append({k: float(f"{v:.4g}") if isinstance(v, float) else v
                             for k, v in row.items()})
                print(f"V={vocab:>7} G={groups:>3}: engine sampling "
                      f"{row['engine_sampling_ms']:.1f} ms, driver {driver:.1f} ms "
                      f"(relay {relay:.1f}, ledger {row['ledger_sampler_disk_ms']:.1f}); "
                      f"device mode driver {row['device_mode_driver_ms'] or float('nan'):.1f} "
                      f"ms, its inverse CDF on this CPU {row['device_sampling_cpu_ms']:.1f} ms",
                      file=sys.stderr)
    if ray is not None:
        ray.shutdown()
    report = {
        "benchmark": "driver_step",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                    "platform": platform.platform()},
        "settings": {"rows_per_group": args.rows, "clip": CLIP, "temperature": TEMPERATURE,
                     "repeats": args.repeats, "clusters": args.clusters, "tokens": args.tokens,
                     "target_rates": TARGET_RATES},
        "steps": rows,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
