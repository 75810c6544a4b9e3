"""What a finished ``build-corpus`` tells the operator: where the signing key's public half is,
records merged by ``--unit-bound concat``, and a warning when ``--unit-bound pick`` leaves out
most of the input. Tiny facts builds through the command line, with a bag-of-words embedder
and no language model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_build import HashEmbedder

from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.cli import build_corpus_main
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.io.documents import PICK_WARNING_FRACTION, pick_warning, skip_label
from dpsynrag.pipeline import build
from dpsynrag.pipeline.runners import LocalRunner


class NoLLM:
    """A facts build never calls the language model."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"facts mode used the language model ({name})")


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 clinic notes of 10 patients (4 records each)."""
    out = tmp_path_factory.mktemp("patients")
    path = write_clinic_dataset(out, n_notes=40, n_diseases=4, seed=2)["notes"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({**row, "unit": f"patient-{i % 10}"}) + "\n"
                            for i, row in enumerate(rows)), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "make_runner",
                        lambda *_a, **_k: LocalRunner(NoLLM(), HashEmbedder()))
    monkeypatch.setenv("COLUMNS", "400")  # the summary table's paths on one line


def _build(notes: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    run = len(list(tmp_path.glob("state-*")))  # a state and a corpus ledger per build
    code = build_corpus_main([str(notes), "-o", str(tmp_path / "out"), "--runner", "local",
                              "--state-dir", str(tmp_path / f"state-{run}"), "--corpus-ledger",
                              str(tmp_path / f"corpus-{run}.sqlite"), "--quiet", "--unit-column",
                              "unit", "--allow-empty", "--force", "--summary-json",
                              str(tmp_path / "summary.json"), *extra])
    return code, json.loads((tmp_path / "summary.json").read_text())


def test_a_config_dir_from_before_keeps_its_public_key_name(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "dpsynrag-config"
    config.mkdir(mode=0o700)
    generate_keypair(config / "signing_key.pem", config / "signing_key.pub")  # the old name
    code, summary = _build(notes, tmp_path)
    assert code == 0 and summary["signing_public_key"] == str(config / "signing_key.pub")
    assert not (config / "signing_key.pem.pub").exists()
    key = tmp_path / "keys" / "k.pem"
    generate_keypair(key)  # as 'dpsynrag keygen keys/k.pem' does
    code, summary = _build(notes, tmp_path, "--signing-key", str(key))
    assert code == 0 and summary["signing_public_key"] == str(tmp_path / "keys" / "k.pem.pub")


def test_a_default_build_names_its_public_key_and_warns_that_pick_left_out_most_records(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, summary = _build(notes, tmp_path)  # the default key and the default --unit-bound
    assert code == 0
    config = tmp_path / "dpsynrag-config"  # conftest's DPSYNRAG_CONFIG_DIR
    public = config / "signing_key.pem.pub"  # keygen's convention: <key>.pub next to the key
    assert summary["signing_public_key"] == str(public) and public.is_file()
    assert not (config / "signing_key.pub").exists()
    assert summary["documents_in"] == 10 and summary["skipped"]["unit_bound"] == 30
    assert summary["unit_bound"] == "pick"
    err = capsys.readouterr().err
    shown = " ".join(err.split())
    assert f"public key (verify --public-key) │ {public}" in shown
    assert "skipped (unit_bound) │ 30" in shown
    warnings = [line for line in err.splitlines() if line.startswith("build-corpus: WARNING:")]
    assert len(warnings) == 1 and warnings == [f"build-corpus: WARNING: {summary['warnings'][0]}"]
    assert "left out 30 of the 40 records read (75%; 10 documents kept)" in warnings[0]
    assert "--unit-bound concat" in warnings[0]

    code, summary = _build(notes, tmp_path, "--unit-bound", "concat")
    assert code == 0 and summary["unit_bound"] == "concat" and summary["warnings"] == []
    err = capsys.readouterr().err
    shown = " ".join(err.split())
    assert "merged (unit_bound concat) │ 30" in shown and "skipped (unit_bound)" not in shown
    assert "WARNING" not in err


def test_the_pick_warning_threshold_and_labels() -> None:
    skipped = {"empty": 0, "too_long": 0, "unit_bound": 20}
    assert pick_warning("pick", 80, skipped) is None  # 20 % of 100: at the threshold
    assert pick_warning("pick", 79, {**skipped, "unit_bound": 21}) is not None
    assert pick_warning("concat", 10, {**skipped, "unit_bound": 90}) is None
    assert pick_warning(None, 10, {**skipped, "unit_bound": 90}) is None
    assert pick_warning("pick", 0, {"unit_bound": 0}) is None
    assert PICK_WARNING_FRACTION == 0.2
    assert skip_label("unit_bound", "concat") == "merged (unit_bound concat)"
    assert skip_label("unit_bound", "pick") == "skipped (unit_bound)"
    assert skip_label("too_long", "concat") == "skipped (too_long)"


def test_the_dry_run_says_merged_and_warns_as_the_build_does(
        notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.pipeline import dry_run

    monkeypatch.setattr(dry_run, "LocalRunner", lambda *_a: LocalRunner(NoLLM(), HashEmbedder()))
    base = [str(notes), "-o", str(tmp_path / "out"), "--runner", "local", "--state-dir",
            str(tmp_path / "state"), "--corpus-ledger", str(tmp_path / "corpus.sqlite"),
            "--unit-column", "unit", "--dry-run"]
    assert build_corpus_main(base) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "10 documents (one per privacy unit), 30 records skipped" in out
    assert "WARNING: --unit-bound pick kept one record per privacy unit and left out 30 of " \
           "the 40 records read" in out
    assert build_corpus_main([*base, "--unit-bound", "concat"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0 records skipped, 30 merged (unit_bound concat)" in out and "WARNING" not in out
