"""What a finished ``build-corpus`` tells the operator: where the signing key's public half is,
records merged by ``--unit-bound concat``, a warning when ``--unit-bound pick`` leaves out
most of the input, and (issue 58) no exact count on stderr unless ``--verbose``: the counts go
to ``STATE/summary.json``. Tiny facts builds through the command line, with a bag-of-words embedder
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
    """With --verbose: the counts and the warning about them are on stderr."""
    code, summary = _build(notes, tmp_path, "--verbose")  # the default key and --unit-bound
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

    code, summary = _build(notes, tmp_path, "--unit-bound", "concat", "--verbose")
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
            "--unit-column", "unit", "--dry-run", "--verbose"]  # counts: --verbose only
    assert build_corpus_main(base) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "10 documents (one per privacy unit), 30 records skipped" in out
    assert "WARNING: --unit-bound pick kept one record per privacy unit and left out 30 of " \
           "the 40 records read" in out
    assert build_corpus_main([*base, "--unit-bound", "concat"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0 records skipped, 30 merged (unit_bound concat)" in out and "WARNING" not in out


@pytest.fixture(scope="module")
def odd_notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """53 clinic notes of 19 units: 19 documents, 34 records left out by pick (numbers that
    nothing else on stderr is)."""
    out = tmp_path_factory.mktemp("odd")
    path = write_clinic_dataset(out, n_notes=53, n_diseases=4, seed=3)["notes"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({**row, "unit": f"u{i % 19}"}) + "\n"
                            for i, row in enumerate(rows)), encoding="utf-8")
    return path


def _counts_shown(err: str, tmp_path: Path) -> list[str]:
    """The input's exact counts (53 records, 19 documents, 34 left out) found in ``err``,
    paths (which hold pytest's own numbers) left out."""
    import re

    text = err.replace(str(tmp_path), "TMP")
    return re.findall(r"(?<![\w.])(?:53|19|34)(?![\w.])", text)


def test_by_default_no_exact_count_reaches_stderr(
        odd_notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not even without --quiet (stderr is a file here, as in a scheduled build's log): the
    summary says where the counts are, STATE/summary.json (0600), and prints none of them,
    nor the pick warning that names them, nor progress bars (their totals count documents)."""
    state = tmp_path / "state"
    code = build_corpus_main([str(odd_notes), "-o", str(tmp_path / "out"), "--runner",
                              "local", "--state-dir", str(state), "--corpus-ledger",
                              str(tmp_path / "corpus.sqlite"), "--unit-column", "unit",
                              "--allow-empty"])
    assert code == 0
    err = capsys.readouterr().err
    assert _counts_shown(err, tmp_path) == [], err
    shown = " ".join(err.split())
    assert f"input counts (records, documents, skips) │ in {state}/summary.json (private)" \
        in shown
    assert "records read" not in shown.replace("(records read,", "")
    assert "WARNING" not in err and "%|" not in err
    assert f"any warning about them are in {state}/summary.json (private); --verbose " \
           "prints them here" in shown
    summary_file = state / "summary.json"
    assert summary_file.stat().st_mode & 0o777 == 0o600
    summary = json.loads(summary_file.read_text())
    assert summary["documents_in"] == 19 and summary["skipped"]["unit_bound"] == 34
    assert summary["warnings"] and "left out 34 of the 53 records" in summary["warnings"][0]
    # the summary states the certificate's guarantee, the realised cost beside it
    cert = json.loads((tmp_path / "out" / "certificate.json").read_text())
    assert summary["epsilon"] == cert["guarantee"]["epsilon"]
    assert summary["epsilon_realised"] == cert["guarantee"]["epsilon_realised"]
    assert "epsilon (the plan's: the guarantee)" in shown
    assert "epsilon_realised (the releases that ran; not a guarantee)" in shown


def test_verbose_prints_the_counts_and_progress_counts(
        odd_notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    base = [str(odd_notes), "-o", str(tmp_path / "out"), "--runner", "local", "--state-dir",
            str(state), "--corpus-ledger", str(tmp_path / "corpus.sqlite"), "--unit-column",
            "unit", "--allow-empty", "--force"]
    assert build_corpus_main([*base, "--verbose"]) == 0
    err = capsys.readouterr().err
    shown = " ".join(err.split())
    assert "records read │ 53" in shown and "skipped (unit_bound) │ 34" in shown
    assert "documents used (one per privacy unit) │ 19" in shown
    assert "build-corpus: WARNING: --unit-bound pick kept one record" in err
    import re

    assert re.search(r"\| \d+/\d+ \[", err)  # progress bars with their counts
    # --purge-state: no state left to hold them; --summary-json FILE does
    keep = tmp_path / "kept.json"
    assert build_corpus_main([*base, "--purge-state", "--summary-json", str(keep)]) == 0
    err = capsys.readouterr().err
    assert _counts_shown(err, tmp_path) == [] and not state.exists()
    assert f"are in {keep} (private)" in " ".join(err.split())
    assert json.loads(keep.read_text())["documents_in"] == 19
    assert build_corpus_main([*base, "--purge-state"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "not kept (--purge-state deleted the state directory" in err


def test_a_terminal_gets_bars_without_counts(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """On a terminal the default bars show a percentage and the time, never n/total."""
    import sys

    from dpsynrag.cli.build_report import progress_factory

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    for quiet, verbose in ((False, False), (True, False), (False, True)):
        with progress_factory(quiet, verbose)("(a) keywords", 19) as advance:
            advance(19)
        err = capsys.readouterr().err
        if quiet:
            assert err == ""
        elif verbose:
            assert "19/19" in err
        else:
            assert "(a) keywords: 100%|" in err and "19" not in err
