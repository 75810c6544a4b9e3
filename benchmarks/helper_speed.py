"""Speed targets of the helpers around a build: data generator, span metric, workload builder,
packaged-model cache.

Run ``python benchmarks/helper_speed.py [--out FILE] [--check]``; see benchmarks/README.md.
Each case is timed in this process (best of ``--repeats``, after one warm-up where the case
has a one-off load) and compared with its target; the JSON records the seconds, the target
and whether it was met. ``--check`` exits 1 when a target is missed. These used to be
wall-clock assertions inside unit tests; the tests keep the behaviour (counts, shapes), the
seconds live here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = RESULTS / "helper_speed_cpu.json"

#: case -> (target seconds, what the target guards)
TARGETS: dict[str, tuple[float, str]] = {
    "clinic_generator_2000": (1.0, "make_clinic_dataset, 2,000 notes, 40 diseases"),
    "verbatim_spans_500x2000": (3.0, "verbatim_spans, 500 synthetic x 2,000 private notes"),
    "workload_builder_64x80": (20.0, "private_prediction.make_workload, 64 x 80 docs, L = 5"),
    "packaged_llm_cached_load": (10.0, "load_llm from the converted cache (second load)"),
}


def _best_of(repeats: int, run: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def clinic_generator(repeats: int) -> dict[str, Any]:
    """Seconds to generate the 2,000-note clinic (the word list loaded once before)."""
    from dpsynrag.eval.datasets import make_clinic_dataset

    make_clinic_dataset(n_notes=10, n_diseases=5)
    seconds, data = _best_of(repeats, lambda: make_clinic_dataset(n_notes=2000, n_diseases=40,
                                                                  seed=11))
    return {"seconds": seconds, "notes": len(data.notes)}


def verbatim_spans_case(repeats: int) -> dict[str, Any]:
    """Seconds to count 8-word spans of 500 synthetic texts against 2,000 private notes."""
    from dpsynrag.eval.metrics import verbatim_spans

    rs = np.random.default_rng(0)
    words = [f"w{i}" for i in range(3000)]
    private = [" ".join(rs.choice(words, 120)) for _ in range(2000)]
    synthetic = [" ".join(rs.choice(words, 150)) for _ in range(495)] + private[:5]
    seconds, count = _best_of(repeats, lambda: verbatim_spans(synthetic, private))
    return {"seconds": seconds, "spans": count}


def workload_builder(repeats: int, tokenizer: Any) -> dict[str, Any]:
    """Seconds to build the paper-scale workload of the private-prediction benchmark."""
    import private_prediction as bench

    bench.public_words()  # the list's one-off load is not the builder's per-draw cost
    seconds, (groups, distinct) = _best_of(
        repeats, lambda: bench.make_workload(tokenizer, 64, 80, 5, 120))
    return {"seconds": seconds, "groups": len(groups), "distinct_documents": distinct}


def packaged_llm_load(cache_dir: str | None) -> tuple[dict[str, Any], Any]:
    """Seconds of a first and a second ``load_llm`` (the second reads the converted cache)."""
    from dpsynrag.models.llm import load_llm

    before = os.environ.get("DPSYNRAG_CACHE_DIR")
    if cache_dir is not None:
        os.environ["DPSYNRAG_CACHE_DIR"] = cache_dir
    try:
        start = time.perf_counter()
        load_llm(device="cpu")
        first = time.perf_counter() - start
        start = time.perf_counter()
        llm = load_llm(device="cpu")
        cached = time.perf_counter() - start
    finally:  # the temporary cache is removed after this case; later code must not see it
        if before is None:
            os.environ.pop("DPSYNRAG_CACHE_DIR", None)
        else:
            os.environ["DPSYNRAG_CACHE_DIR"] = before
    return {"seconds": cached, "first_load_seconds": first,
            "fresh_cache": cache_dir is not None}, llm


def run(repeats: int, fresh_cache: bool) -> dict[str, Any]:
    """Every case, its target and whether it was met."""
    cases: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as cache:
        cases["packaged_llm_cached_load"], llm = packaged_llm_load(cache if fresh_cache
                                                                   else None)
    cases["clinic_generator_2000"] = clinic_generator(repeats)
    cases["verbatim_spans_500x2000"] = verbatim_spans_case(repeats)
    cases["workload_builder_64x80"] = workload_builder(repeats, llm.tokenizer)
    for name, case in cases.items():
        target, what = TARGETS[name]
        case.update(target_seconds=target, what=what, met=case["seconds"] <= target)
    return {
        "benchmark": "helper_speed",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version()},
        "load_average_before": os.getloadavg()[0],
        "repeats": repeats,
        "cases": cases,
        "all_met": all(c["met"] for c in cases.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="JSON output (default benchmarks/results/helper_speed_cpu.json)")
    parser.add_argument("--repeats", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--fresh-cache", action="store_true",
                        help="load the packaged model into an empty cache first, so the "
                             "first load includes the one-off conversion")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    result = run(args.repeats, args.fresh_cache)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, case in result["cases"].items():
        flag = "ok" if case["met"] else "MISSED"
        print(f"{name}: {case['seconds']:.3f} s (target {case['target_seconds']} s) {flag}")
    print(f"wrote {args.out}")
    return 1 if args.check and not result["all_met"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
