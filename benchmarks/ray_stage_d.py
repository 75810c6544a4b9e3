"""Stage (d) through the Ray runner against the engine's own rate on the same groups (issue 17).

The issue asks that a build's stage (d), with one model actor, reach at least 80 % of the
engine's own benchmark rate on the same groups. This runs the packaged model (or
``--model``) on ``private_prediction.py``'s workload twice: in this process with the
benchmark's counting sampler (the engine's own rate), then through ``RayRunner`` with one
actor, exactly as a build calls it (``runner.predict`` with a ``LedgerTokenSampler`` on an
on-disk ledger), once per ``--modes`` entry (host and device token sampling). The rate is
row-token steps per second: each sampled token of a group counts once per row of the group.

Run ``python benchmarks/ray_stage_d.py --json [--out FILE]``; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.pipeline.runners import RayRunner
from dpsynrag.transforms.prediction_release import GROUP, LedgerTokenSampler


def _engine_benchmark() -> ModuleType:
    path = Path(__file__).with_name("private_prediction.py")
    spec = importlib.util.spec_from_file_location("bench_private_prediction", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ray_stage_d(runner: RayRunner, groups: list[list[str]], tokens: int, mode: str,
                batch_rows: int | None, eos: list[int], prompt: str, clip: float,
                temperature: float, ledger_path: Path) -> dict[str, Any]:
    """One stage (d) through ``runner`` as ``token_stages._predict`` runs it."""
    ledger = Ledger(ledger_path, rng=RandomSource(seed=0))
    ledger.declare_parallel_group(GROUP, 1, "benchmark clusters")
    sampler = LedgerTokenSampler(ledger, list(range(len(groups))), clip=clip,
                                 temperature=temperature, max_new_tokens=tokens, eos_ids=eos)
    started = time.perf_counter()
    runner.predict(groups, sampler, prompt=prompt, max_new_tokens=tokens, clip=clip,
                   temperature=temperature, batch_rows=batch_rows, token_sampling=mode)
    wall = time.perf_counter() - started
    ledger.close()
    steps = sum(len(group) * n for group, n in zip(groups, sampler.steps, strict=True))
    return {"token_sampling": mode, "token_steps": steps, "group_tokens": sum(sampler.steps),
            "wall_seconds": round(wall, 3), "token_steps_per_s": round(steps / wall, 2)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--docs", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--doc-tokens", type=int, default=120)
    parser.add_argument("--batch-rows", type=int, default=None)
    parser.add_argument("--modes", default="host,device",
                        help="token sampling modes to run through Ray (default: %(default)s)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = _engine_benchmark()
    llm = bench.load_model(args.device, "auto")
    groups, distinct = bench.make_workload(llm.tokenizer, args.groups, args.docs, args.overlap,
                                           args.doc_tokens)
    warm_up = [groups[0][:2]]
    bench.run_engine(llm, warm_up, 2, args.batch_rows)  # first-call costs out of the timing
    engine = bench.run_engine(llm, groups, args.tokens, args.batch_rows)
    print(f"engine in-process: {engine['token_steps_per_s']} token-steps/s "
          f"({engine['token_sampling']} sampling)", file=sys.stderr)
    eos = sorted(int(t) for t in llm.eos_token_ids)
    runs = []
    runner = RayRunner(None, None, workers=1, device=args.device)
    try:
        with tempfile.TemporaryDirectory(prefix="dpsr-stage-d-") as scratch:
            # the actor loads its model at its first prediction: not part of the timing
            ray_stage_d(runner, warm_up, 2, "host", args.batch_rows, eos, bench.PROMPT,
                        bench.CLIP, bench.TEMPERATURE, Path(scratch) / "warm-up.sqlite")
            for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
                run = ray_stage_d(runner, groups, args.tokens, mode, args.batch_rows, eos,
                                  bench.PROMPT, bench.CLIP, bench.TEMPERATURE,
                                  Path(scratch) / f"ledger-{mode}.sqlite")
                run["share_of_engine_rate"] = round(
                    run["token_steps_per_s"] / engine["token_steps_per_s"], 3)
                print(f"Ray, {mode} sampling: {run['token_steps_per_s']} token-steps/s, "
                      f"{run['share_of_engine_rate']:.1%} of the engine's", file=sys.stderr)
                runs.append(run)
    finally:
        runner.close()
    report = {
        "benchmark": "ray_stage_d",
        "workload": {"groups": args.groups, "docs_per_group": args.docs,
                     "new_tokens": args.tokens, "overlap_L": args.overlap,
                     "doc_tokens": args.doc_tokens, "distinct_documents": distinct},
        "machine": {"cpus": os.cpu_count(), "device": args.device,
                    "device_name": bench.device_name(llm.device), "torch": torch.__version__,
                    "python": platform.python_version()},
        "engine": {k: engine[k] for k in ("engine", "token_sampling", "token_steps",
                                          "wall_seconds", "token_steps_per_s")},
        "ray": runs,
    }
    bench.write_report(report, args.out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
