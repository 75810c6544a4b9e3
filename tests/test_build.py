"""The build end to end (stages a-e, emit, certificate) with a tiny model in-process, resume
after a crash, refusals; and one slow run of the real thing through Ray with the packaged
models."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_private_prediction import tiny_llm

from dpsynrag.accounting.certificate import SEEDED_PROBLEM, verify_output
from dpsynrag.accounting.costs import token_rho
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.handoff import CorpusIntegrityError, load_corpus
from dpsynrag.pipeline.build import BuildError, make_plan, run_build
from dpsynrag.pipeline.config import ConfigError, make_config
from dpsynrag.pipeline.runners import LocalRunner
from dpsynrag.pipeline.state import StateError

SMALL = {"keywords": "statistical", "R": 6, "k": 8, "L": 2, "T": 5, "no_filter": True,
         "seed": 3, "runner": "local"}


class HashEmbedder:
    """A deterministic bag-of-words embedder (no model): enough for retrieval to work."""

    dimension = 64
    name = "hash-bow-64"

    def __init__(self) -> None:
        self.identity = {"name": self.name, "source": "test", "sha256": "0" * 64}

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                digest = hashlib.sha256(word.encode()).digest()
                out[row, digest[0] % self.dimension] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)


@pytest.fixture(autouse=True)
def _config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clinic")
    return write_clinic_dataset(out, n_notes=80, n_diseases=5, seed=11)["notes"]


def _runner() -> LocalRunner:
    return LocalRunner(tiny_llm(), HashEmbedder())


def _build(notes: Path, tmp: Path, name: str, runner=None, **options):
    config = make_config(None, {**SMALL, **options})
    key = tmp / "key.pem"
    if not key.exists():
        generate_keypair(key, tmp / "key.pem.pub")
    summary = run_build(notes, tmp / name, config, state_dir=tmp / f"state-{name}",
                        signing_key=key, runner=runner or _runner())
    return config, summary


def _expected_rho(config) -> float:
    plan = make_plan(config)
    per_cluster = (config.eps_theta**2 / 8 + plan.rho_mean
                   + config.T * token_rho(config.clip, config.clip / plan.c_over_tau))
    return plan.rho_hist + config.L * per_cluster


def test_build_writes_a_verifiable_corpus_that_spends_exactly_the_plan(notes, tmp_path) -> None:
    seed = 918_273_645  # distinctive: must appear in no released file
    config, summary = _build(notes, tmp_path, "out", seed=seed)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "certificate.json", "corpus.parquet", "index.faiss", "manifest.json"]
    # a seeded build fails verification and is refused by the loader unless a test allows it
    assert verify_output(out, tmp_path / "key.pem.pub") == [SEEDED_PROBLEM]
    assert verify_output(out, tmp_path / "key.pem.pub", allow_seeded=True) == []
    with pytest.raises(CorpusIntegrityError, match="seeded build"):
        load_corpus(out)
    assert load_corpus(out, allow_seeded=True).table.num_rows == config.R
    for path in out.iterdir():
        data = path.read_bytes()
        assert str(seed).encode() not in data and seed.to_bytes(8, "little") not in data
    # no operator-side fingerprint of the exact input in a released file; the summary has it
    assert len(summary.input_hmac_sha256) == 64
    for path in out.iterdir():
        assert summary.input_hmac_sha256.encode() not in path.read_bytes()
    table = pq.read_table(out / "corpus.parquet")
    assert table.num_rows == config.R == summary.synthetic_texts
    assert set(table.column_names) >= {"id", "text", "cluster_keyword", "kept", "tokens"}
    assert all(0 < t <= config.T for t in table.column("tokens").to_pylist())
    # the whole budget, to the last digit: histogram + L x (threshold + noisy sum + T tokens)
    assert math.isclose(summary.rho_spent, _expected_rho(config), rel_tol=1e-12)
    assert math.isclose(summary.epsilon, config.epsilon, rel_tol=1e-9)
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["seeded"] is True
    assert math.isclose(cert["guarantee"]["epsilon"], config.epsilon, rel_tol=1e-9)
    # no private text in the output directory besides the synthetic corpus itself
    text = (out / "certificate.json").read_text() + (out / "manifest.json").read_text()
    first_note = json.loads(notes.read_text().splitlines()[0])["text"]
    assert first_note[:40] not in text
    # the state directory is private: 0700
    assert (os.stat(tmp_path / "state-out").st_mode & 0o777) == 0o700


class CrashAfter:
    """Wraps a runner; its prediction dies after ``steps`` sampler calls (a kill mid-stage d)."""

    def __init__(self, runner: LocalRunner, steps: int) -> None:
        self.runner, self.steps = runner, steps

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def predict(self, groups, sampler, **kwargs):
        calls = {"n": 0}

        def dying(votes, active):
            calls["n"] += 1
            if calls["n"] > self.steps:
                raise KeyboardInterrupt
            return sampler(votes, active)

        return self.runner.predict(groups, dying, **kwargs)


def test_a_build_killed_mid_prediction_resumes_to_the_same_total(notes, tmp_path) -> None:
    _config, uninterrupted = _build(notes, tmp_path, "straight")
    with pytest.raises(KeyboardInterrupt):
        _build(notes, tmp_path, "crashed", runner=CrashAfter(_runner(), steps=2))
    assert not (tmp_path / "crashed").exists()  # no output that looks complete
    partial = Ledger(tmp_path / "state-crashed" / "ledger.sqlite")
    spent_at_crash = partial.total_rho()
    partial.close()
    assert 0 < spent_at_crash < uninterrupted.rho_spent
    _, resumed = _build(notes, tmp_path, "crashed")
    assert resumed.resumed
    assert math.isclose(resumed.rho_spent, uninterrupted.rho_spent, rel_tol=1e-12)
    assert verify_output(tmp_path / "crashed", tmp_path / "key.pem.pub",
                         allow_seeded=True) == []


def test_a_different_config_on_an_existing_state_dir_is_refused(notes, tmp_path) -> None:
    _build(notes, tmp_path, "out")
    config = make_config(None, {**SMALL, "T": 6})
    with pytest.raises(StateError, match="different configuration"):
        run_build(notes, tmp_path / "out2", config, state_dir=tmp_path / "state-out",
                  signing_key=tmp_path / "key.pem", runner=_runner())


def test_fewer_documents_than_k_still_builds(notes, tmp_path) -> None:
    """Refusing n < k would release one bit of the exact count, uncovered by epsilon."""
    n = len(notes.read_text(encoding="utf-8").splitlines())
    for k in (n, n + 1):
        config, summary = _build(notes, tmp_path, f"k{k}", k=k)
        assert summary.synthetic_texts == config.R
        assert verify_output(tmp_path / f"k{k}", allow_seeded=True) == []


def test_existing_output_is_refused(notes, tmp_path) -> None:
    (tmp_path / "exists").mkdir()
    with pytest.raises(BuildError, match="exists"):
        run_build(notes, tmp_path / "exists", make_config(None, SMALL), runner=_runner())


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("build-corpus")
    if not script.exists():
        pytest.skip("console scripts not installed next to this interpreter")
    env = {**os.environ, "DPSYNRAG_CONFIG_DIR": str(cwd / "config")}
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=420,
                          cwd=cwd, env=env)


def test_cli_bad_input_is_one_line_exit_2_and_no_output(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "body": "secret words"}\n')
    result = _cli(str(bad), "-o", str(tmp_path / "out"), "--runner", "local", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.jsonl" in lines[0] and "text" in lines[0]
    assert "secret" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("mode", "message"), [
    ("tokens", "nothing is left for private prediction"),
    # the facts default plan scales with epsilon: only a fixed --rho-hist can exhaust it
    ("facts", "nothing is left for the phrases and the cluster facts")])
def test_cli_impossible_plan_exits_3(tmp_path, notes, mode: str, message: str) -> None:
    fixed = ["--rho-hist", "0.1", "--facts-items", "terms"] if mode == "facts" else []
    result = _cli(str(notes), "-o", str(tmp_path / "out"), "--epsilon", "0.5", "--runner",
                  "local", "--generate", mode, *fixed, cwd=tmp_path)
    assert result.returncode == 3
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cli_epsilon_above_the_sanity_bound_exits_3_before_anything(tmp_path, notes) -> None:
    result = _cli(str(notes), "-o", str(tmp_path / "out"), "--epsilon", "1e9", "--runner",
                  "local", "--corpus-ledger", str(tmp_path / "corpus.sqlite"), cwd=tmp_path)
    assert result.returncode == 3 and "above 30" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "corpus.sqlite").exists()


@pytest.mark.slow
def test_ray_build_with_the_packaged_models_then_verify_and_ledger_show(tmp_path) -> None:
    """The real path end to end: INPUT -> Beam ingest -> Ray actors with the packaged SmolLM2
    and MiniLM -> OUT, through the CLI; then verify and ledger show."""
    data = write_clinic_dataset(tmp_path / "data", n_notes=60, n_diseases=4, seed=2)["notes"]
    with data.open("a", encoding="utf-8") as handle:  # a second record of one patient
        first = json.loads(data.read_text(encoding="utf-8").splitlines()[0])
        handle.write(json.dumps({**first, "id": "extra-visit", "text": "Follow-up visit."})
                     + "\n")
    dpsynrag = Path(sys.executable).with_name("dpsynrag")
    env = {**os.environ, "DPSYNRAG_CONFIG_DIR": str(tmp_path / "config")}
    subprocess.run([str(dpsynrag), "keygen", str(tmp_path / "k.pem")], check=True, env=env,
                   capture_output=True)
    result = _cli(str(data), "-o", str(tmp_path / "out"), "--keywords", "statistical", "--R", "4",
                  "--k", "10", "--L", "2", "--T", "8", "--state-dir", str(tmp_path / "state"),
                  "--signing-key", str(tmp_path / "k.pem"), "--quiet", "--summary-json",
                  str(tmp_path / "summary.json"), "--ingest", "beam", "--unit-column", "unit",
                  "--allow-empty",  # SmolLM2-135M's self-filter keeps nothing (exit 5 else)
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (os.stat(tmp_path / "summary.json").st_mode & 0o777) == 0o600
    assert summary["synthetic_texts"] == 4 and summary["seeded"] is False
    assert summary["documents_in"] == 60 and summary["skipped"]["unit_bound"] == 1
    verify = subprocess.run([str(dpsynrag), "verify", str(tmp_path / "out"), "--public-key",
                             str(tmp_path / "k.pem.pub")], capture_output=True, text=True,
                            env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    explained = subprocess.run([str(dpsynrag), "verify", str(tmp_path / "out"), "--public-key",
                                str(tmp_path / "k.pem.pub"), "--explain"], capture_output=True,
                               text=True, env=env)
    assert explained.returncode == 0 and "VERIFIED (trusted key)" in explained.stdout
    assert "column 'unit'" in explained.stdout
    show = subprocess.run([str(dpsynrag), "ledger", "show", "--state-dir",
                           str(tmp_path / "state"), "--json"], capture_output=True, text=True,
                          env=env, check=True)
    report = json.loads(show.stdout)
    assert math.isclose(report["rho_total"], summary["rho_spent"], rel_tol=1e-12)
    # epsilon by default, at the build's own delta and conversion: the summary's figure
    assert report["delta"] == summary["delta"] and report["delta_source"] == "the build's target"
    assert math.isclose(report["epsilon"][summary["conversion"]], summary["epsilon"],
                        rel_tol=1e-12)
    text = subprocess.run([str(dpsynrag), "ledger", "show", "--state-dir",
                           str(tmp_path / "state")], capture_output=True, text=True, env=env,
                          check=True).stdout
    assert "(the build's conversion)" in " ".join(text.split())  # rich wraps lines
    assert {r["stage"] for r in report["releases"]} == {
        "a-histogram", "c-noisy-sum", "c-threshold", "d-prediction"}
    assert all("value" not in r for r in report["releases"])


def test_clip_above_the_transforms_natural_range_is_refused() -> None:
    """Rows of the alpha=1 transform span at most [-0.5, 0.5]; c > 0.5 would only waste budget."""
    import torch

    from dpsynrag.accounting.clipping import clip_logits

    rows = clip_logits(torch.randn(64, 1000) * 30, 10.0)
    assert float(rows.max()) <= 0.5 and float(rows.min()) >= -0.5
    with pytest.raises(ConfigError, match="only wastes budget"):
        make_config(None, {"clip": 1.0})
    assert make_config(None, {}).clip == 0.5


def test_no_retrieval_ablation_gives_stage_c_budget_to_prediction(notes, tmp_path) -> None:
    config, summary = _build(notes, tmp_path, "noret", no_retrieval=True)
    plan = make_plan(config)
    assert plan.rho_retrieval == 0.0
    assert math.isclose(summary.rho_spent, plan.rho_total, rel_tol=1e-12)
    assert math.isclose(summary.epsilon, config.epsilon, rel_tol=1e-9)
    ledger = Ledger(tmp_path / "state-noret" / "ledger.sqlite")
    assert not [r for r in ledger.releases() if r.stage.startswith("c-")]
    ledger.close()
    assert verify_output(tmp_path / "noret", tmp_path / "key.pem.pub", allow_seeded=True) == []


def test_the_build_is_charged_to_the_corpus_ledger_once_and_checked_against_its_cap(
        notes, tmp_path) -> None:
    from dpsynrag.accounting.corpus_ledger import BudgetRefusedError, CorpusLedger

    ledger_path = tmp_path / "corpus.sqlite"
    config = make_config(None, SMALL)
    for _ in range(2):  # the second run resumes the same state: no second charge
        summary = run_build(notes, tmp_path / "out", config, state_dir=tmp_path / "state",
                            runner=_runner(), force=True, corpus_ledger=ledger_path)
    with CorpusLedger(ledger_path) as ledger:
        [entry] = ledger.entries()
        assert entry.kind == "build"
        assert math.isclose(entry.rho, summary.rho_spent, rel_tol=1e-12)
    capped = tmp_path / "capped.sqlite"
    with CorpusLedger(capped) as ledger:
        ledger.set_cap(epsilon=config.epsilon / 2, delta=config.delta)
    with pytest.raises(BudgetRefusedError):
        run_build(notes, tmp_path / "out2", config, state_dir=tmp_path / "state2",
                  runner=_runner(), corpus_ledger=capped)
    assert not (tmp_path / "out2").exists()
    assert not (tmp_path / "state2" / "ledger.sqlite").exists()  # nothing private was drawn


def test_public_prior_build_spends_exactly_the_plan_and_names_its_settings(notes,
                                                                           tmp_path) -> None:
    """Issue 15: the public-difference sampler changes no cost; its settings are certified."""
    config, summary = _build(notes, tmp_path, "prior", public_prior=True, public_top_k=5,
                             public_document="notes about {keyword}")
    assert math.isclose(summary.rho_spent, _expected_rho(config), rel_tol=1e-12)
    assert verify_output(tmp_path / "prior", tmp_path / "key.pem.pub", allow_seeded=True) == []
    cert = json.loads((tmp_path / "prior" / "certificate.json").read_text())
    assert cert["config"]["public_prior"] is True
    assert cert["config"]["public_top_k"] == 5
    assert cert["config"]["public_document"] == "notes about {keyword}"
    texts = pq.read_table(tmp_path / "prior" / "corpus.parquet").column("text").to_pylist()
    assert len(texts) == config.R and any(texts)
    # without the flag, the options (and the fingerprint of existing configs) are unchanged
    plain = make_config(None, SMALL)
    assert "public_top_k" not in plain.released_options()
    assert config.fingerprint() != plain.fingerprint()
    with pytest.raises(ConfigError, match="--public-top-k only apply with --public-prior"):
        make_config(None, {**SMALL, "public_top_k": 9})
