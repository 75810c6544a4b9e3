"""Resume of stage (d) at step granularity: a cluster continues after its released tokens.

Every token is stored in the ledger as it is drawn; a resumed build reads them
(``PartitionTokenSampler.resume``: nothing drawn or charged) and the engine continues each
cluster after them (``private_predict(released=...)``: the rows are prefilled with them, no
step votes on a released token), instead of regenerating the cluster from its first step.

* engine level: a run given the first k released tokens of every group makes exactly the
  uninterrupted run's tokens and texts, asks the sampler for no released step, and its votes
  for the later steps equal the uninterrupted run's up to prefill-against-decode rounding;
* build level: a build killed mid stage (d) and resumed asks the sampler only for steps after
  the stored ones, keeps every release of the killed run unchanged (value and charge time),
  spends the uninterrupted build's rho, and writes the texts that the old full replay (every
  stored token voted on again) writes from the same ledger;
* the facts mode's token writer (f4, ``--writer tokens``) killed mid-step and resumed: the
  same, through the same code (``token_stages.ledger_token_texts``), with its own resume line
  and bar, the plan's rho and the replay's corpus.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
from fixed_draws import FixedDraws
from test_build import SMALL, CrashAfter, _build, _config_dir, _runner, notes  # noqa: F401
from test_private_prediction import CLIP, PROMPT, _groups, tiny_llm

from dpsynrag.accounting.certificate import verify_output
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.pipeline.build import make_plan
from dpsynrag.pipeline.build import run_build as real_run_build
from dpsynrag.pipeline.config import make_config
from dpsynrag.transforms import prediction_release
from dpsynrag.transforms.private_prediction import private_predict
from dpsynrag.transforms.public_prior import PublicPriorSettings

TAU = 0.3
T = 6
ATOL = 1e-4  # float32 rows: a prefill and a decode step round the same row differently
PUBLIC = PublicPriorSettings(documents="known facts : fever cough", top_k=6, temperature=2.0,
                             candidates=("chest pain",))


def Draws(released: list[list[int]] | None = None) -> FixedDraws:
    return FixedDraws(released, tau=TAU, float64_votes=False)


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm()


def _predict(llm: LoadedLLM, groups: list[list[str]], draws: Draws, engine: str,
             batch_rows: int | None, prior: bool,
             released: list[list[int]] | None = None) -> list[str]:
    return private_predict(llm, groups, prompt=PROMPT, max_new_tokens=T, clip=CLIP,
                           temperature=TAU, rng=secure_rng(0), batch_rows=batch_rows,
                           sampler=draws, engine=engine,  # type: ignore[arg-type]
                           public_prior=PUBLIC if prior else None, released=released)


@pytest.mark.parametrize("engine,batch_rows,prior", [
    ("packed", None, False),
    ("packed", 4, False),  # the 8-row group runs in shards of 4
    ("packed", None, True),  # the public-difference sampler: its public rows see them too
    ("reference", None, False),
])
@pytest.mark.parametrize("k", [1, 3, T])
def test_a_run_given_released_tokens_continues_as_the_uninterrupted_run(
        llm: LoadedLLM, engine: str, batch_rows: int | None, prior: bool, k: int) -> None:
    groups = _groups("mixed")
    straight = Draws()
    texts = _predict(llm, groups, straight, engine, batch_rows, prior)
    # what a run killed after its k-th step stored: each group's first k draws (EOS kept)
    released = [straight.tokens.get(g, [])[:k] for g in range(len(groups))]
    assert any(len(t) == k for t in released)
    resumed = Draws(released)
    assert _predict(llm, groups, resumed, engine, batch_rows, prior, released) == texts
    assert resumed.tokens == straight.tokens
    # no vote on a released step; every later step voted once, as in the uninterrupted run
    assert set(resumed.votes) == {(g, s) for g, s in straight.votes if s >= len(released[g])}
    for key, votes in resumed.votes.items():
        finite = torch.isfinite(votes)
        assert torch.equal(finite, torch.isfinite(straight.votes[key]))
        torch.testing.assert_close(votes[finite], straight.votes[key][finite], rtol=0,
                                   atol=ATOL)


def test_released_tokens_are_checked(llm: LoadedLLM) -> None:
    groups = _groups("mixed")
    eos = next(iter(llm.eos_token_ids))
    for bad in ([[eos, 9]] + [[]] * (len(groups) - 1), [[9] * (T + 1)] + [[]] * 6, [[9]]):
        for engine in ("packed", "reference"):
            with pytest.raises(ValueError, match="released tokens"):
                _predict(llm, groups, Draws(), engine, None, False, bad)


def _stored(state: Path) -> dict[str, dict[str, Any]]:
    ledger = Ledger(state / "ledger.sqlite")
    try:
        return {r["key"]: r for r in ledger.audit_releases()}
    finally:
        ledger.close()


class Asked:
    """Wraps a runner; records the (cluster, step) of every token its sampler is asked for."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.asked: list[tuple[int, int]] = []
        self.partitions: list[tuple[str, int]] = []  # (ledger partition, step) of each

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def predict(self, groups: Any, sampler: Any, **kwargs: Any) -> list[str]:
        def asking(votes: Any, active: list[int]) -> Any:
            self.asked.extend((g, sampler.steps[g]) for g in active)
            self.partitions.extend((sampler.partitions[g], sampler.steps[g]) for g in active)
            return sampler(votes, active)

        return self.runner.predict(groups, asking, **kwargs)


def _token_steps(releases: dict[str, dict[str, Any]]) -> dict[int, int]:
    """Stored token values per cluster (keys ``cluster/<r>/token/<n>`` with a value)."""
    counts: dict[int, int] = {}
    for key, release in releases.items():
        parts = key.split("/")
        if len(parts) == 4 and parts[2] == "token" and release["value_sha256"]:
            counts[int(parts[1])] = counts.get(int(parts[1]), 0) + 1
    return counts


def test_a_killed_build_resumes_after_its_last_stored_step(notes, tmp_path: Path,  # noqa: F811
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    config, uninterrupted = _build(notes, tmp_path, "straight")
    with pytest.raises(KeyboardInterrupt):  # dies at its 4th step: 3 steps of clusters stored
        _build(notes, tmp_path, "crashed", runner=CrashAfter(_runner(), steps=3))
    before = _stored(tmp_path / "state-crashed")
    done = _token_steps(before)
    assert done and max(done.values()) >= 3
    logged: list[str] = []
    asked = Asked(_runner())
    bars: dict[str, list[int]] = {}

    @contextmanager
    def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
        bars[description] = [total]
        yield bars[description].append

    def run_build(*args: Any, **kwargs: Any) -> Any:
        kwargs["log"], kwargs["progress"] = logged.append, progress
        return real_run_build(*args, **kwargs)

    monkeypatch.setattr("test_build.run_build", run_build)
    _, resumed = _build(notes, tmp_path, "crashed", runner=asked)
    assert resumed.resumed
    assert math.isclose(resumed.rho_spent, uninterrupted.rho_spent, rel_tol=1e-12)
    assert verify_output(tmp_path / "crashed", tmp_path / "key.pem.pub",
                         allow_seeded=True) == []
    # the sampler was asked only for steps after the stored ones, each step once
    assert asked.asked and len(set(asked.asked)) == len(asked.asked)
    assert all(step >= done.get(cluster, 0) for cluster, step in asked.asked)
    # every release of the killed run is kept as it was: same value, charged once
    after = _stored(tmp_path / "state-crashed")
    assert all(after[key] == release for key, release in before.items())
    replaying = [line for line in logged if line.startswith("(d) resuming")]
    assert len(replaying) == 1 and replaying[0].startswith(
        f"(d) resuming: replaying {sum(done.values())} released tokens of {len(done)} of "
        f"{config.R} clusters (")
    # stage (d)'s bar counts draws (clusters x T), starts at the stored ones, says it resumes
    (label, counts), = ((k, v) for k, v in bars.items() if k.startswith("(d)"))
    assert label == f"(d) private prediction (tokens; {replaying[0][4:]})"
    assert counts[0] == config.R * config.T == sum(counts[1:])
    assert counts[1] >= sum(done.values())
    # the texts are those of the old full replay (every stored token voted on again) from
    # the same ledger: a function of the released tokens only
    texts = json.loads((tmp_path / "state-crashed" / "synthetic.json").read_text())["texts"]
    state = tmp_path / "state-replay"
    shutil.copytree(tmp_path / "state-crashed", state)
    for name in ("synthetic.json", "kept.json"):
        (state / name).unlink()
    monkeypatch.setattr(prediction_release.PartitionTokenSampler, "resume",
                        lambda self: [[] for _ in self.partitions])
    full = Asked(_runner())
    config_replay, _ = _build_in(notes, tmp_path, "replay", state, full)
    assert json.loads((state / "synthetic.json").read_text())["texts"] == texts
    assert _stored(state) == after  # nothing drawn or charged by the replay
    assert len(full.asked) > len(asked.asked)
    assert config_replay == config


def _build_in(notes_path: Path, tmp: Path, name: str, state: Path, runner: Any) -> Any:
    config = make_config(None, dict(SMALL))
    summary = real_run_build(notes_path, tmp / name, config, state_dir=state,
                   signing_key=tmp / "key.pem", runner=runner)
    return config, summary


# ------------------------------------------------------------- the facts mode's writer (f4)
# seed: one under which the killed run leaves a cluster half done (asserted below; the
# seeded draws and the documents' terms decide which clusters end early)
FACTS_WRITER = {"generate": "facts", "facts_items": "terms", "L": 2, "runner": "local",
                "unit_column": "unit", "epsilon": 10.0, "writer": "tokens", "T": 4,
                # K_e 3: the clusters this scenario was written for (K_e 3 was the default)
                "public_top_k": 5, "seed": 6, "K_e": 3}


@pytest.fixture(scope="module")
def clinic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clinic-writer")
    return write_clinic_dataset(out, n_notes=200, n_diseases=5, seed=5)["notes"]


def _facts_build(notes_path: Path, tmp: Path, name: str, runner: Any, *,
                 state: Path | None = None, **hooks: Any) -> Any:
    """A seeded ``--generate facts --writer tokens`` build with the tiny model."""
    key = tmp / "key.pem"
    if not key.exists():
        generate_keypair(key, tmp / "key.pem.pub")
    return real_run_build(notes_path, tmp / name, make_config(None, dict(FACTS_WRITER)),
                          state_dir=state or tmp / f"state-{name}", signing_key=key,
                          runner=runner, corpus_ledger=tmp / f"corpus-{name}.sqlite", **hooks)


def _ledger_rho(state: Path) -> float:
    ledger = Ledger(state / "ledger.sqlite")
    try:
        return ledger.total_rho()
    finally:
        ledger.close()


def _cluster(partition: str) -> int:
    return int(partition.split("/")[1])


def test_a_facts_build_killed_in_its_token_writer_resumes_after_its_last_stored_step(
        clinic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(make_config(None, dict(FACTS_WRITER)))
    uninterrupted = _facts_build(clinic, tmp_path, "straight", _runner())
    assert math.isclose(uninterrupted.rho_spent, plan.rho_total, rel_tol=1e-12)
    with pytest.raises(KeyboardInterrupt):  # dies at f4's 2nd step: 1 step of clusters stored
        _facts_build(clinic, tmp_path, "crashed", CrashAfter(_runner(), steps=1))
    assert not (tmp_path / "crashed").exists()
    before = _stored(tmp_path / "state-crashed")
    done = _token_steps(before)
    writer = {key for key, r in before.items() if r["stage"] == "f-writer"}
    assert done and max(done.values()) == 1 and all(key.startswith("cluster/") for key in writer)
    # clusters the killed run finished (EOS as its first token: charged its reservation)
    ended = {_cluster(key) for key in writer if key.endswith("/token-reserve")}
    assert set(done) - ended  # some cluster is left half done
    logged: list[str] = []
    bars: dict[str, list[int]] = {}

    @contextmanager
    def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
        bars[description] = [total]
        yield bars[description].append

    asked = Asked(_runner())
    resumed = _facts_build(clinic, tmp_path, "crashed", asked, log=logged.append,
                           progress=progress)
    assert resumed.resumed
    # the ledger's rho: the plan's, as the uninterrupted build spent, nothing charged twice
    assert math.isclose(resumed.rho_spent, plan.rho_total, rel_tol=1e-12)
    assert math.isclose(_ledger_rho(tmp_path / "state-crashed"), plan.rho_total, rel_tol=1e-12)
    after = _stored(tmp_path / "state-crashed")
    assert all(after[key] == release for key, release in before.items())
    assert verify_output(tmp_path / "crashed", tmp_path / "key.pem.pub",
                         allow_seeded=True) == []
    # the sampler was asked only for the steps after the stored ones, each once, and never
    # for a cluster that had ended; every cluster's steps run on from its stored ones
    steps: dict[int, list[int]] = {}
    for partition, step in asked.partitions:
        steps.setdefault(_cluster(partition), []).append(step)
    assert steps and len(set(asked.partitions)) == len(asked.partitions)
    assert not set(steps) & ended
    assert all(s == list(range(done.get(c, 0), done.get(c, 0) + len(s)))
               for c, s in steps.items())
    assert _token_steps(after) == {c: done.get(c, 0) + len(steps.get(c, [])) for c in
                                   _token_steps(after)}
    # the resume line and the bar: draws (clusters x T), from the stored ones
    clusters = len({_cluster(r["partition"]) for r in after.values()
                    if r["stage"] == "f-writer"})
    replaying = [line for line in logged if line.startswith("(f4) resuming")]
    assert len(replaying) == 1 and replaying[0].startswith(
        f"(f4) resuming: replaying {sum(done.values())} released tokens of {len(done)} of "
        f"{clusters} clusters ({len(ended)} finished); no token is drawn or charged again")
    (label, counts), = ((k, v) for k, v in bars.items() if k.startswith("(f4)"))
    assert label == f"(f4) token writer (tokens; {replaying[0][5:]})"
    assert counts[0] == clusters * FACTS_WRITER["T"] == sum(counts[1:])
    assert counts[1] == sum(done.values()) + sum(FACTS_WRITER["T"] - done[c] for c in ended)
    # the output is that of the old full replay (every stored token voted on again) from the
    # same ledger: a function of the released tokens only
    state = tmp_path / "state-replay"
    shutil.copytree(tmp_path / "state-crashed", state)
    (state / "synthetic.json").unlink()
    monkeypatch.setattr(prediction_release.PartitionTokenSampler, "resume",
                        lambda self: [[] for _ in self.partitions])
    full = Asked(_runner())
    _facts_build(clinic, tmp_path, "replay", full, state=state)
    assert _stored(state) == after  # nothing drawn or charged by the replay
    assert len(full.asked) > len(asked.asked)
    texts = [pq.read_table(tmp_path / name / "corpus.parquet").column("text").to_pylist()
             for name in ("crashed", "replay")]
    assert texts[0] == texts[1] and len(texts[0]) == clusters
