"""``build-corpus --dry-run``: the plan, every preflight check and a wall-time estimate, spending
nothing (issue 16).

Nothing here charges a ledger or draws noise for a release: the input is read and validated as
the build would read it, the signing key, output and state locations, free disk and models are
checked (``pipeline.preflight``), the corpus ledger is read (never charged) to say whether the
build fits its cap, and the models are timed on PUBLIC filler text only, never on a private
document, so that the estimate cannot leak anything. The printed document counts are the
operator's, as in the build summary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpsynrag.accounting.corpus_ledger import CorpusLedger, default_corpus_ledger_path
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.signing import default_key_path, load_private_key
from dpsynrag.display import format_epsilon
from dpsynrag.pipeline.config import BuildConfig
from dpsynrag.pipeline.preflight import (
    check_writable_directory,
    required_free_bytes,
)
from dpsynrag.pipeline.runners import LocalRunner, Runner
from dpsynrag.pipeline.state import default_state_dir
from dpsynrag.reporting import print_plan

# Public filler text for timing the models (no private document is ever timed).
FILLER = ("The patient reported mild symptoms over several weeks and was seen at the clinic "
          "for an examination and a follow-up visit. ")


class _Checks:
    """Runs each check, records ok / failed with a one-line reason."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.failed = 0

    def run(self, name: str, check: Callable[[], str | None]) -> Any:
        try:
            detail = check()
        except Exception as error:  # one line per failed check, never a traceback
            self.failed += 1
            self.say(f"  FAIL  {name}: {error}")
            return None
        self.say(f"  ok    {name}" + (f": {detail}" if detail else ""))
        return detail


def _timed(work: Callable[[], Any]) -> float:
    started = time.monotonic()
    work()
    return time.monotonic() - started


def _corpus_ledger_fit(input_path: str | Path, config: BuildConfig, plan: Any,
                       corpus_ledger: Path | None) -> str:
    path = corpus_ledger or default_corpus_ledger_path(input_path)
    if not Path(path).exists():
        return f"{path} does not exist yet (created at the build's first charge, no cap)"
    with CorpusLedger(path) as ledger:
        cap = ledger.cap
        left = ledger.remaining_rho()
    if cap is None or left is None:
        return f"{path}: no cap set"
    if plan.rho_total > left + 1e-12:
        raise RuntimeError(f"{path}: the build needs rho={plan.rho_total:.4f} but the cap "
                           f"(epsilon={format_epsilon(cap.epsilon)}) leaves rho={left:.4f}; "
                           "the build would be refused (exit 3)")
    return f"{path}: fits (needs rho={plan.rho_total:.4f}, {left:.4f} left under the cap)"


def dry_run(input_path: str | Path, out_dir: Path, config: BuildConfig, *,
            state_dir: Path | None, signing_key: Path | None, corpus_ledger: Path | None,
            force: bool = False, say: Callable[[str], None] = print) -> int:
    """Print the plan, run every check and estimate the wall time; 0 if every check passed,
    else 2. Spends nothing (module docstring)."""
    from rich.console import Console

    # loads torch: imported when this runs, not with this module
    from dpsynrag.pipeline.build import (
        check_output_location,
        check_state_location,
        input_warnings,
        make_plan,
        read_input,
        unit_bound_rule,
    )

    plan = make_plan(config)  # PlanError: exit 3, as for a build
    print_plan(plan, Console())
    checks = _Checks(say)
    say(f"dry run of build-corpus {input_path} -> {out_dir} ({config.generate} mode); "
        "nothing is charged or released")
    timings: dict[str, float] = {}
    docs_box: list[Any] = []

    def read() -> str:
        started = time.monotonic()
        docs = read_input(input_path, config, lambda _m: None)
        timings["read"] = time.monotonic() - started
        docs_box.append(docs)
        skipped = sum(docs.skipped.values())
        merged = ""
        if unit_bound_rule(config) == "concat":  # merged into their unit's documents
            skipped -= docs.skipped.get("unit_bound", 0)
            merged = f", {docs.skipped.get('unit_bound', 0)} merged (unit_bound concat)"
        return (f"{len(docs.texts)} documents (one per privacy unit), {skipped} records "
                f"skipped{merged}, read in {timings['read']:.1f} s")

    checks.run("input", read)
    for warning in input_warnings(config, docs_box[0]) if docs_box else []:
        say(f"  WARNING: {warning}")

    def key() -> str:
        if signing_key is not None:
            load_private_key(signing_key)
            return f"{signing_key} (Ed25519, owner-only)"
        path = default_key_path()
        if path.exists():
            load_private_key(path)
            return f"{path} (default key)"
        return f"{path} will be created at the build (default key)"

    checks.run("signing key", key)
    needed = required_free_bytes(input_path)
    out_parent = out_dir.expanduser().absolute().parent
    def output() -> str:
        check_output_location(out_dir)
        if out_dir.exists() and not force:
            raise RuntimeError(f"{out_dir} exists; remove it or pass --force")
        check_writable_directory(out_parent, needed, "output directory")
        return f"{out_parent} writable, free space ok"

    checks.run("output directory", output)
    state_path = (state_dir or default_state_dir(out_dir)).expanduser().absolute()
    def state_directory() -> str:
        if state_path.exists():
            check_state_location(state_path, needed)
        else:  # a dry run creates nothing: the nearest existing parent must take it
            parent = next(p for p in state_path.parents if p.exists())
            if not parent.is_dir():
                raise RuntimeError(f"{parent}: is not a directory; choose another --state-dir")
            check_writable_directory(parent, needed, "state directory")
        return f"{state_path} (0700), free space ok"

    checks.run("state directory", state_directory)
    checks.run("corpus ledger", lambda: _corpus_ledger_fit(input_path, config, plan,
                                                           corpus_ledger))
    runner = LocalRunner(config.model, config.embedder, config.device, config.dtype)

    def embedder() -> str:
        identity = runner.embedder_identity()
        seconds = _timed(lambda: runner.embed([FILLER] * 64, lambda _n: None))
        timings["embed_per_text"] = seconds / 64
        return (f"{identity.get('name')} loads; {64 / max(seconds, 1e-9):.0f} texts/s on "
                "public filler text")

    checks.run("embedder", embedder)
    if config.uses_llm:
        def llm() -> str:
            identity = runner.llm_identity()
            timings.update(_time_prediction(runner, config, docs_box))
            return (f"{identity.get('name')} on {identity.get('device')} loads; one batch "
                    f"of {timings['rows']} rows: {timings['prefill']:.2f} s prefill, "
                    f"{timings['step']:.3f} s per token (public filler text)")

        checks.run("language model", llm)
    _say_estimate(config, plan, docs_box, timings, say)
    say("dry run: " + ("every check passed" if not checks.failed
                       else f"{checks.failed} check(s) failed") + "; nothing was spent")
    return 0 if not checks.failed else 2


def _time_prediction(runner: Runner, config: BuildConfig, docs_box: list[Any]) -> dict[str, float]:
    """Seconds of one cluster's prefill and of one token step, on public filler documents of
    the input's mean length, with a throwaway in-memory ledger (never the build's)."""
    # loads torch: imported when this runs, not with this module
    from dpsynrag.pipeline.build import DEFAULT_REPHRASE_PROMPT, GROUP
    from dpsynrag.transforms.prediction_release import LedgerTokenSampler

    mean_chars = 600
    if docs_box:
        texts = docs_box[0].texts
        mean_chars = int(sum(len(t) for t in texts) / max(len(texts), 1))
    filler = (FILLER * (mean_chars // len(FILLER) + 1))[:max(mean_chars, 40)]
    # one packed batch, as the engine runs it: clusters of k rows up to the batch size (a
    # cluster larger than --batch-rows would run in shards, not as one batch)
    batch = config.batch_rows or 128
    per_cluster = max(1, min(config.k, 128, batch))
    n_groups = max(1, batch // per_cluster)
    rows = per_cluster * n_groups
    prompt = config.rephrase_prompt or DEFAULT_REPHRASE_PROMPT
    groups = [[filler] * per_cluster for _ in range(n_groups)]

    def run(tokens: int) -> float:
        ledger = Ledger()  # in memory, discarded: calibration on public text only
        ledger.declare_parallel_group(GROUP, 1, "dry-run calibration on public text")
        sampler = LedgerTokenSampler(ledger, list(range(n_groups)), clip=config.clip,
                                     temperature=1.0, max_new_tokens=tokens,
                                     eos_ids=frozenset())
        return _timed(lambda: runner.predict(groups, sampler, prompt=prompt,
                                             max_new_tokens=tokens, clip=config.clip,
                                             temperature=1.0, batch_rows=config.batch_rows,
                                             response_prefix=""))

    one, five = run(1), run(5)
    step = max((five - one) / 4, 0.0)
    return {"rows": rows, "prefill": max(one - step, 0.0), "step": step}


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _say_estimate(config: BuildConfig, plan: Any, docs_box: list[Any],
                  timings: dict[str, float], say: Callable[[str], None]) -> None:
    if not docs_box:
        say("estimate: no estimate without a readable input")
        return
    n = len(docs_box[0].texts)
    total = timings.get("read", 0.0)
    if config.generate == "facts":
        texts_at_most = max(1, n // max(plan.tau_A, 1))
        total += n * 0.002 + texts_at_most * timings.get("embed_per_text", 0.0)
        writer = ""
        if config.facts_writer_tokens:  # every document's row in <= L written clusters
            rows = timings.get("rows", 1) or 1
            predict = (n * config.L / rows) * (timings.get("prefill", 0.0)
                                               + config.T * timings.get("step", 0.0))
            total += predict
            writer = (f"; the token writer ~{_duration(predict)} ({n * config.L} rows x "
                      f"{config.T} tokens at most)")
        say(f"estimate (this machine): about {_duration(total)}: reading, keywords and "
            f"phrases of {n} documents, then at most about {texts_at_most} notes to embed "
            f"(a phrase needs about {plan.tau_A} documents){writer}")
        return
    rows = timings.get("rows", 1) or 1
    clusters = config.R
    embed = n * timings.get("embed_per_text", 0.0)
    predict = (clusters * config.k / rows) * (timings.get("prefill", 0.0)
                                              + config.T * timings.get("step", 0.0))
    total += embed + predict
    say(f"shape: at most {clusters} clusters x {config.k} rows x {config.T} tokens "
        f"({clusters * config.k * config.T:,} row-token steps); a token needs about "
        f"{plan.consensus_rows} agreeing rows")
    say(f"estimate (this machine, the local runner): at most about {_duration(total)}: "
        f"embedding {n} documents ~{_duration(embed)}, prediction ~{_duration(predict)} "
        "(every cluster full; fewer or smaller clusters take less)")
