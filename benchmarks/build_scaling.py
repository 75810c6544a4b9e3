"""Benchmark of the DP-SynRAG build: wall time and peak memory against the number of notes.

Run ``python benchmarks/build_scaling.py [--quick] [--runner local|ray] [--scale-clusters]``;
see benchmarks/README.md. ``--generate facts`` measures the default build instead (n-gram
facts, no language model) with ``--runner local`` or ``--runner beam`` (issue 59), one size or
several per call, the runs merged into one JSON by (size, runner, workers).

Each size is built in a fresh subprocess (``--child`` mode) from a
fictitious clinic generated with a fixed seed (setup, not measured), with the packaged models
on CPU and the same DP hyperparameters for every size. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil

DEFAULT_SIZES = (500, 1000, 2000, 4000)
QUICK_SIZES = (100, 200)
RESULTS = Path(__file__).resolve().parent / "results"
STAGES = ("a_keywords_histogram", "b_clusters", "c_retrieval", "d_prediction", "e_self_filter",
          "emit")
SAMPLE_SECONDS = 0.05  # psutil sampling period of the process tree
MIB = 1024 * 1024
STEPS_KEPT = 16  # a progress bar of at most this many steps is marked at every step
MIN_FIT_SECONDS = 0.05  # a stage faster than this at some size gets no slope (timer noise)


# ---------------------------------------------------------------------------- child
class CountingRunner:
    """Delegates to a runner; counts stage (d)'s rows (group members) and row-steps."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.groups = 0
        self.rows = 0
        self.row_steps = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def predict(self, groups: Any, sampler: Any, **kwargs: Any) -> list[str]:
        sizes = [len(g) for g in groups]
        self.groups, self.rows = len(sizes), sum(sizes)

        def counting(votes: Any, active: list[int]) -> Any:
            self.row_steps += sum(sizes[g] for g in active)
            return sampler(votes, active)

        return self.runner.predict(groups, counting, **kwargs)


def child_main(spec_path: Path) -> int:
    """Build one size as the spec says; write figures next to the spec. Runs in a subprocess."""
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    import torch

    from dpsynrag.pipeline.build import make_runner, run_build
    from dpsynrag.pipeline.config import make_config
    from dpsynrag.transforms.vocabulary import public_vocabulary

    config = make_config(None, spec["options"])
    imports = time.perf_counter() - started
    t0 = time.perf_counter()
    runner = make_runner(config)  # lazy models: load them here, outside the build's stages
    workers = getattr(runner, "workers", None)
    if workers is not None:  # Ray: every actor loads its own copy
        import ray

        ray.get([w.llm_identity.remote() for w in workers]
                + [w.embedder_identity.remote() for w in workers])
    else:
        if config.uses_llm:  # a facts build (the default) loads the embedder only
            runner.llm_identity()
        runner.embedder_identity()
    if config.generate == "tokens" or config.facts_items != "ngrams":
        public_vocabulary()
    model_load = time.perf_counter() - t0
    rss_after_models = psutil.Process().memory_info().rss
    counter = CountingRunner(runner)
    marks = PhaseMarks()
    try:
        marks.mark("build start")
        summary = run_build(Path(spec["notes"]), Path(spec["out"]), config,
                            state_dir=Path(spec["state"]), signing_key=Path(spec["key"]),
                            runner=counter, corpus_ledger=Path(spec["ledger"]),
                            progress=marks.progress)
        marks.mark("build end")
    finally:
        runner.close()
    figures = {
        "stage_seconds": {k: float(v) for k, v in summary.stage_seconds.items()},
        "documents_in": summary.documents_in,
        "clusters": summary.clusters,
        "kept_texts": summary.kept_texts,
        "prediction_rows": counter.rows,
        "prediction_row_steps": counter.row_steps,
        "epsilon": summary.epsilon,
        "rho_spent": summary.rho_spent,
        "import_seconds": imports,
        "model_load_seconds": model_load,
        "rss_after_models_bytes": rss_after_models,
        "self_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch_threads": torch.get_num_threads(),
        "ray_workers": len(workers) if workers is not None else None,
        "resolved_runner": config.resolved_runner,
        "phase_marks": marks.marks,
    }
    spec_path.with_suffix(".result.json").write_text(json.dumps(figures), encoding="utf-8")
    return 0


class PhaseMarks:
    """Wall-clock marks of the build's phases, from its progress bars: each bar's start,
    each of its first ``total`` steps where that is at most ``STEPS_KEPT`` (the n-gram
    levels), the latest step beyond them, and its end (the parent reads its memory samples
    between them)."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, str]] = []

    def mark(self, name: str) -> None:
        self.marks.append((time.time(), name))

    @contextlib.contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        steps = [0]
        kept = total if total <= STEPS_KEPT else 0
        self.mark(f"{description}: start")

        def advance(n: int) -> None:
            steps[0] += n
            if steps[0] - n > kept and self.marks[-1][1] == f"{description}: step " \
                    f"{steps[0] - n}":
                self.marks.pop()  # beyond the bar's total: only the latest step is kept
            self.mark(f"{description}: step {steps[0]}")

        yield advance
        self.mark(f"{description}: done")


# ---------------------------------------------------------------------------- parent
class TreeRSS:
    """Peak of the summed RSS of a process and all its descendants (psutil, sampled), and
    the samples themselves (time, tree bytes, the root process's bytes, processes, the
    largest other process's bytes)."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.peak = 0
        self.peak_processes = 0
        self.samples: list[tuple[float, int, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _sample(self) -> None:
        total, count = 0, 0
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        root, largest = 0, 0
        for proc in procs:
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                continue
            total += rss
            count += 1
            if proc is self.root:
                root = rss
            else:
                largest = max(largest, rss)
        self.samples.append((time.time(), total, root, count, largest))
        if total > self.peak:
            self.peak, self.peak_processes = total, count

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(SAMPLE_SECONDS)

    def __enter__(self) -> TreeRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def clusters_for(n_notes: int, args: argparse.Namespace) -> int:
    """R: fixed, or N / ``--notes-per-cluster`` (at least 1) with ``--scale-clusters``."""
    if args.scale_clusters:
        return max(1, round(n_notes / args.notes_per_cluster))
    return args.R


def build_options(n_notes: int, args: argparse.Namespace) -> dict[str, Any]:
    """The BuildConfig options of one size (``make_config`` overrides)."""
    return {"keywords": "statistical", "R": clusters_for(n_notes, args), "k": args.k,
            "L": args.L, "T": args.T, "K": args.K, "epsilon": args.epsilon,
            "delta": args.delta, "no_filter": True, "seed": args.build_seed,
            "runner": args.runner, "workers": args.workers, "device": "cpu"}


def setup_size(n_notes: int, args: argparse.Namespace, work: Path) -> Path:
    """Generate the clinic and a signing key for one size (not measured); returns the spec."""
    from dpsynrag.accounting.signing import generate_keypair
    from dpsynrag.eval.datasets import write_clinic_dataset

    folder = work / f"n{n_notes}"
    if folder.exists():
        shutil.rmtree(folder)
    notes = write_clinic_dataset(folder / "data", n_notes=n_notes, n_diseases=args.diseases,
                                 seed=args.data_seed)["notes"]
    generate_keypair(folder / "key.pem", folder / "key.pem.pub")
    spec = {"notes": str(notes), "out": str(folder / "out"), "state": str(folder / "state"),
            "key": str(folder / "key.pem"), "ledger": str(folder / "corpus-ledger.sqlite"),
            "options": build_options(n_notes, args)}
    path = folder / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def run_size(n_notes: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One size in a fresh subprocess: wall time, stage times and peak memory."""
    spec_path = setup_size(n_notes, args, work)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "DPSYNRAG_CONFIG_DIR": str(work / "config"), "TOKENIZERS_PARALLELISM": "false"}
    log = spec_path.with_suffix(".log")
    with open(log, "wb") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child",
                                 str(spec_path)], stdout=stderr, stderr=stderr, env=env)
        with TreeRSS(proc.pid) as tree:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"build of {n_notes} notes failed (exit {proc.returncode}):\n{tail}")
    child = json.loads(spec_path.with_suffix(".result.json").read_text(encoding="utf-8"))
    stages = {k: round(v, 3) for k, v in child["stage_seconds"].items()}
    build_seconds = stages.get("total", sum(stages.get(s, 0.0) for s in STAGES))
    timed = {s: stages[s] for s in STAGES if s in stages}
    maxrss = usage.ru_maxrss * 1024  # Linux: KiB
    local = args.runner == "local"
    return {
        "n_notes": n_notes,
        "R": build_options(n_notes, args)["R"],
        "clusters": child["clusters"],
        "prediction_rows": child["prediction_rows"],
        "prediction_row_steps": child["prediction_row_steps"],
        "build_seconds": round(build_seconds, 3),
        "stage_seconds": stages,
        "dominant_stage": max(timed, key=timed.__getitem__) if timed else None,
        "seconds_per_note": round(build_seconds / n_notes, 5),
        "child_wall_seconds": round(wall, 3),
        "model_load_seconds": round(child["model_load_seconds"], 3),
        "import_seconds": round(child["import_seconds"], 3),
        "peak_rss_mib": round((maxrss if local else tree.peak) / MIB, 1),
        "peak_rss_source": "wait4 ru_maxrss" if local else "psutil tree sum",
        "child_maxrss_mib": round(maxrss / MIB, 1),
        "tree_peak_rss_mib": round(tree.peak / MIB, 1),
        "tree_processes_at_peak": tree.peak_processes,
        "rss_after_models_mib": round(child["rss_after_models_bytes"] / MIB, 1),
        "epsilon": child["epsilon"],
        "kept_texts": child["kept_texts"],
        "torch_threads": child["torch_threads"],
        "ray_workers": child["ray_workers"],
    }


def loglog_slope(sizes: list[int], seconds: list[float]) -> float | None:
    """Least-squares slope of log(seconds) against log(N); None with under two usable sizes."""
    pairs = [(n, s) for n, s in zip(sizes, seconds, strict=True) if n > 0 and s > 0]
    if len(pairs) < 2 or len({n for n, _ in pairs}) < 2:
        return None
    x = np.log([n for n, _ in pairs])
    y = np.log([s for _, s in pairs])
    return round(float(np.polyfit(x, y, 1)[0]), 3)


def fits(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Scaling exponents (total and per stage) and time per note."""
    sizes = [r["n_notes"] for r in runs]
    return {
        "loglog_slope_build_seconds": loglog_slope(sizes, [r["build_seconds"] for r in runs]),
        "loglog_slope_per_stage": {
            s: loglog_slope(sizes, [r["stage_seconds"].get(s, 0.0) for r in runs])
            if all(r["stage_seconds"].get(s, 0.0) >= MIN_FIT_SECONDS for r in runs) else None
            for s in STAGES},
        "loglog_slope_prediction_rows": loglog_slope(sizes, [r["prediction_rows"]
                                                             for r in runs]),
        "loglog_slope_peak_rss": loglog_slope(sizes, [r["peak_rss_mib"] for r in runs]),
        "seconds_per_note": {str(r["n_notes"]): r["seconds_per_note"] for r in runs},
        "ms_per_note_largest": round(1000 * runs[-1]["seconds_per_note"], 2) if runs else None,
    }


def table(runs: list[dict[str, Any]]) -> str:
    """A small fixed-width table of the per-size figures."""
    head = (f"{'N':>6} {'R':>4} {'rows':>5} {'build s':>9} {'a kw':>7} {'c retr':>7} {'d pred':>7} "
            f"{'emit':>6} {'ms/note':>8} {'peak MiB':>9}  dominant")
    lines = [head, "-" * len(head)]
    for r in runs:
        s = r["stage_seconds"]
        lines.append(
            f"{r['n_notes']:>6} {r['R']:>4} {r['prediction_rows']:>5} "
            f"{r['build_seconds']:>9.1f} "
            f"{s.get('a_keywords_histogram', 0):>7.1f} {s.get('c_retrieval', 0):>7.1f} "
            f"{s.get('d_prediction', 0):>7.1f} {s.get('emit', 0):>6.1f} "
            f"{1000 * r['seconds_per_note']:>8.2f} {r['peak_rss_mib']:>9.1f}  "
            f"{r['dominant_stage']}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    import torch

    return {"cpu_count": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "memory_gib": round(psutil.virtual_memory().total / 1024**3, 1),
            "load_average_start": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", "--notes", dest="sizes", default=None,
                        help="comma-separated note counts (default 500,1000,2000,4000; "
                             "--generate facts: 10000,100000,1000000)")
    parser.add_argument("--note", default=None,
                        help="--generate facts: a remark stored with each run (e.g. what "
                             "else ran on the machine)")
    parser.add_argument("--quick", action="store_true", help="sizes 100,200 (a smoke test)")
    parser.add_argument("--generate", choices=["tokens", "facts"], default="tokens",
                        help="tokens (default: this benchmark's token-mode build) or facts "
                             "(the default build: n-gram facts, --runner local or beam)")
    parser.add_argument("--runner", choices=["local", "ray", "beam"], default="local",
                        help="beam: --generate facts only")
    parser.add_argument("--workers", type=int, default=None,
                        help="Ray workers (ray), Beam worker processes (beam; default one "
                             "per core)")
    parser.add_argument("--scale-clusters", action="store_true",
                        help="R = N / --notes-per-cluster instead of a fixed --R")
    parser.add_argument("--notes-per-cluster", type=float, default=50.0)
    parser.add_argument("--R", type=int, default=16, help="clusters (fixed mode)")
    parser.add_argument("--k", type=int, default=20, help="documents retrieved per cluster")
    parser.add_argument("--L", type=int, default=2, help="clusters per document")
    parser.add_argument("--T", type=int, default=16, help="tokens per synthetic text")
    parser.add_argument("--K", type=int, default=10, help="keywords per document")
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=1e-3)
    parser.add_argument("--build-seed", type=int, default=0, help="the build's noise seed")
    parser.add_argument("--data-seed", type=int, default=0, help="clinic generator seed")
    parser.add_argument("--diseases", type=int, default=40)
    parser.add_argument("--output", default=None, help="JSON path (default "
                        "benchmarks/results/build_scaling.json; _quick with --quick)")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--keep-workdir", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(Path(args.child))
    if args.generate == "facts":
        return facts_main(args, parser)
    if args.runner == "beam":
        parser.error("--runner beam needs --generate facts")

    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    else:
        sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    sizes = sorted(sizes)
    if sizes[0] < args.k:
        parser.error(f"every size must be at least --k {args.k}")
    default_name = "build_scaling_quick.json" if args.quick and not args.sizes \
        else "build_scaling.json"
    output = Path(args.output) if args.output else RESULTS / default_name
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="build-scaling-"))
    work.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    info = machine()
    runs: list[dict[str, Any]] = []
    try:
        for n in sizes:
            runs.append(run_size(n, args, work))
            r = runs[-1]
            print(f"N={n}: build {r['build_seconds']:.1f} s, peak {r['peak_rss_mib']:.0f} MiB, "
                  f"dominant {r['dominant_stage']}", file=sys.stderr, flush=True)
    except BaseException:
        print(f"scratch folder kept for inspection: {work}", file=sys.stderr)
        raise
    if not args.keep_workdir and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    fixed = build_options(sizes[0], args)
    result: dict[str, Any] = {
        "benchmark": "build_scaling",
        "sizes": sizes,
        "runner": args.runner,
        "cluster_mode": (f"scaled: R = round(N / {args.notes_per_cluster:g})"
                         if args.scale_clusters else f"fixed: R = {args.R}"),
        "hyperparameters": {k: v for k, v in fixed.items()
                            if k not in ("runner", "workers", "device")}
        | {"R": ({str(n): clusters_for(n, args) for n in sizes} if args.scale_clusters
                 else args.R), "clip": 0.5,
           "conversion": "bun-steinke (default)", "self_filter": False},
        "data": {"generator": "dpsynrag.eval.datasets.write_clinic_dataset",
                 "diseases": args.diseases, "seed": args.data_seed},
        "measures": {
            "build_seconds": "run_build stage_seconds['total']; models loaded and warmed "
                             "before it, so model load is not in it",
            "child_wall_seconds": "the subprocess end to end: interpreter, imports, model "
                                  "load, build",
            "peak_rss_mib": "local: os.wait4 ru_maxrss of the build subprocess (exact kernel "
                            "high-water mark of that one process); ray: tree_peak_rss_mib",
            "tree_peak_rss_mib": f"psutil: max over samples every {SAMPLE_SECONDS} s of the "
                                 "summed RSS of the subprocess and all its descendants (Ray "
                                 "GCS, raylet, workers); shared pages are counted once per "
                                 "process and peaks shorter than the period can be missed",
        },
        "runs": runs,
        "fits": fits(runs),
        "machine": info | {"load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table(runs))
    slope = result["fits"]["loglog_slope_build_seconds"]
    print(f"log-log slope of build seconds vs N: {slope} ({result['cluster_mode']}); "
          f"JSON: {output}")
    return 0


# ---------------------------------------------------------------------- facts (issue 59)
FACTS_SIZES = (10_000, 100_000, 1_000_000)
FACTS_STAGES = ("n_ngram_stages", "emit")
FACTS_RESULTS = RESULTS / "build_scaling_facts.json"


def facts_options(args: argparse.Namespace) -> dict[str, Any]:
    """The default build (facts, n-gram items) at a fixed seed; only the runner varies."""
    return {"generate": "facts", "unit_column": "unit", "epsilon": args.epsilon,
            "delta": args.delta, "seed": args.build_seed, "runner": args.runner,
            "workers": args.workers, "device": "cpu"}


def facts_data(n_notes: int, args: argparse.Namespace, work: Path) -> Path:
    """The clinic of ``n_notes`` notes, generated once per work folder (setup)."""
    from dpsynrag.eval.datasets import write_clinic_dataset

    folder = work / f"data-n{n_notes}-d{args.diseases}-s{args.data_seed}"
    notes = folder / "notes.jsonl"
    if not notes.exists():
        shutil.rmtree(folder, ignore_errors=True)
        write_clinic_dataset(folder, n_notes=n_notes, n_diseases=args.diseases,
                             seed=args.data_seed)
    return notes


def run_facts_size(n_notes: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One facts build in a fresh subprocess: wall time, stage times, the process tree's
    peak memory (the build's process and every Beam worker process)."""
    from dpsynrag.accounting.signing import generate_keypair

    notes = facts_data(n_notes, args, work)
    folder = work / f"n{n_notes}-{args.runner}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    generate_keypair(folder / "key.pem", folder / "key.pem.pub")
    spec = {"notes": str(notes), "out": str(folder / "out"), "state": str(folder / "state"),
            "key": str(folder / "key.pem"), "ledger": str(folder / "corpus-ledger.sqlite"),
            "options": facts_options(args)}
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "DPSYNRAG_CONFIG_DIR": str(work / "config"), "TOKENIZERS_PARALLELISM": "false"}
    log = spec_path.with_suffix(".log")
    with open(log, "wb") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child",
                                 str(spec_path)], stdout=stderr, stderr=stderr, env=env)
        with TreeRSS(proc.pid) as tree:
            _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"facts build of {n_notes} notes failed (exit {code}):\n{tail}")
    child = json.loads(spec_path.with_suffix(".result.json").read_text(encoding="utf-8"))
    stages = {k: round(v, 3) for k, v in child["stage_seconds"].items()}
    build_seconds = stages.get("total", sum(stages.get(s, 0.0) for s in FACTS_STAGES))
    from dpsynrag.pipeline import beam_ngrams

    shutil.rmtree(folder, ignore_errors=True)  # the corpus and the private state
    phases = phase_peaks(child.get("phase_marks", []), tree.samples)
    return {
        "n_notes": n_notes,
        "runner": args.runner,
        "workers": args.workers,
        "beam_batch_documents": beam_ngrams.BATCH_DOCUMENTS if args.runner == "beam" else None,
        "input_mib": round(notes.stat().st_size / MIB, 1),
        "clusters": child["clusters"],
        "build_seconds": round(build_seconds, 3),
        "stage_seconds": stages,
        "seconds_per_note": round(build_seconds / n_notes, 6),
        "child_wall_seconds": round(wall, 3),
        "model_load_seconds": round(child["model_load_seconds"], 3),
        "import_seconds": round(child["import_seconds"], 3),
        "peak_rss_mib": round(tree.peak / MIB, 1),
        "peak_rss_source": "psutil tree sum",
        "tree_peak_rss_mib": round(tree.peak / MIB, 1),
        "tree_processes_at_peak": tree.peak_processes,
        "child_maxrss_mib": round(usage.ru_maxrss * 1024 / MIB, 1),
        "rss_after_models_mib": round(child["rss_after_models_bytes"] / MIB, 1),
        "epsilon": child["epsilon"],
        "rho_spent": child["rho_spent"],
        "kept_texts": child["kept_texts"],
        "phases": phases,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "commit": _commit(),
        **({"note": args.note} if args.note else {}),
    }


def phase_peaks(marks: list[tuple[float, str]],
                samples: list[tuple[float, int, int, int, int]]) -> list[dict[str, Any]]:
    """Between consecutive marks of the build: its seconds, the peak of the process tree's
    summed RSS, of the build's own process and of the largest other process (a Beam worker)
    in MiB, and the processes at the tree's peak."""
    phases = []
    for (start, first), (end, last) in itertools.pairwise(marks):
        inside = [s for s in samples if start <= s[0] < end]
        top = max(inside, key=lambda s: s[1], default=None)
        phases.append({
            "from": first, "to": last, "seconds": round(end - start, 3),
            "tree_peak_mib": round(top[1] / MIB, 1) if top else None,
            "driver_peak_mib": round(max(s[2] for s in inside) / MIB, 1) if inside else None,
            "largest_worker_peak_mib": round(max(s[4] for s in inside) / MIB, 1)
            if inside else None,
            "processes_at_peak": top[3] if top else None})
    return phases


def _commit() -> str | None:
    """The code measured: the checkout's commit (``+dirty`` with uncommitted changes)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no", "--", "dpsynrag"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def _run_key(run: dict[str, Any]) -> tuple[int, str, Any]:
    return run["n_notes"], run["runner"], run.get("workers")


def facts_comparison(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per size with both paths: Beam's build time over the local one's, both peaks (the
    issue's targets: <= 1.5x at 10^5 with <= 2 GB; 10^6 in <= 15 min and <= 4 GB)."""
    out: dict[str, Any] = {}
    for n in sorted({r["n_notes"] for r in runs}):
        local = [r for r in runs if r["n_notes"] == n and r["runner"] == "local"]
        beam = [r for r in runs if r["n_notes"] == n and r["runner"] == "beam"]
        entry: dict[str, Any] = {
            "local_build_seconds": local[-1]["build_seconds"] if local else None,
            "beam_build_seconds": beam[-1]["build_seconds"] if beam else None,
            "local_peak_rss_mib": local[-1]["peak_rss_mib"] if local else None,
            "beam_peak_rss_mib": beam[-1]["peak_rss_mib"] if beam else None,
        }
        if local and beam:
            entry["beam_over_local_build_seconds"] = round(
                beam[-1]["build_seconds"] / local[-1]["build_seconds"], 3)
            entry["same_epsilon"] = beam[-1]["epsilon"] == local[-1]["epsilon"]
        out[str(n)] = entry
    return out


def facts_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--generate facts``: each size once with ``--runner``, merged into ``--output``."""
    if args.runner == "ray":
        parser.error("--generate facts measures --runner local or --runner beam")
    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip()) if args.sizes \
        else list(FACTS_SIZES)
    output = Path(args.output) if args.output else FACTS_RESULTS
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="build-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    previous: dict[str, Any] = {}
    if output.exists():
        previous = json.loads(output.read_text(encoding="utf-8"))
    runs: list[dict[str, Any]] = list(previous.get("runs", []))
    info = machine()
    try:
        for n in sizes:
            run = run_facts_size(n, args, work)
            run["machine"] = info | {"load_average_end": [round(x, 2)
                                                          for x in os.getloadavg()]}
            runs = [r for r in runs if _run_key(r) != _run_key(run)] + [run]
            print(f"N={n} {args.runner}: build {run['build_seconds']:.1f} s, tree peak "
                  f"{run['peak_rss_mib']:.0f} MiB", file=sys.stderr, flush=True)
            _write_facts(output, runs, args)  # after every size: a long run keeps its figures
    except BaseException:
        print(f"scratch folder kept for inspection: {work}", file=sys.stderr)
        raise
    if not args.keep_workdir and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    result = json.loads(output.read_text(encoding="utf-8"))
    print(json.dumps(result["comparison"], indent=2))
    print(f"JSON: {output}")
    return 0


def _write_facts(output: Path, runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    runs = sorted(runs, key=lambda r: (r["n_notes"], r["runner"], str(r.get("workers"))))
    result = {
        "benchmark": "build_scaling_facts",
        "build": "the default build: --generate facts --facts-items ngrams, weighted n-gram "
                 "release, template notes, the packaged embedder on CPU for index.faiss",
        "options": {k: v for k, v in facts_options(args).items()
                    if k not in ("runner", "workers", "device")},
        "data": {"generator": "dpsynrag.eval.datasets.write_clinic_dataset",
                 "diseases": args.diseases, "seed": args.data_seed},
        "measures": {
            "build_seconds": "run_build stage_seconds['total'] (the embedder loaded before)",
            "peak_rss_mib": f"psutil: max over samples every {SAMPLE_SECONDS} s of the summed "
                            "RSS of the build's process and all its descendants (Beam's "
                            "worker processes); shared pages count once per process",
            "child_maxrss_mib": "os.wait4 ru_maxrss of the build's process alone",
            "phases": "between consecutive marks of the build's progress bars (each bar's "
                      "first and last step and its end): seconds, the tree's and the build "
                      "process's peak RSS among the samples inside, the processes at the "
                      "tree's peak",
        },
        "runs": runs,
        "comparison": facts_comparison(runs),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
