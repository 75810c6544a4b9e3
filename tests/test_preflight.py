"""Fail before spending (issue 16): every setup problem stops the build before the corpus
ledger is charged and before the build's ledger holds a release, with one line and exit 2
(1 for a model that does not load, as documented)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
import torch

from dpsynrag.cli import build_corpus_main
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.pipeline import preflight


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clinic")
    return write_clinic_dataset(out, n_notes=60, n_diseases=4, seed=2)["notes"]


@pytest.fixture(autouse=True)
def _config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))


def _build(notes: Path, tmp_path: Path, *extra: str) -> int:
    return build_corpus_main([str(notes), "-o", str(tmp_path / "out"), "--runner", "local",
                              "--state-dir", str(tmp_path / "state"), "--corpus-ledger",
                              str(tmp_path / "corpus.sqlite"), "--quiet", "--unit-column",
                              "unit", *extra])


def _nothing_spent(tmp_path: Path) -> bool:
    corpus = tmp_path / "corpus.sqlite"
    if corpus.exists():
        with sqlite3.connect(corpus) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            if "charges" in tables and db.execute("SELECT COUNT(*) FROM charges").fetchone()[0]:
                return False
    ledger = tmp_path / "state" / "ledger.sqlite"
    if ledger.exists():
        with sqlite3.connect(ledger) as db:
            if db.execute("SELECT COUNT(*) FROM releases").fetchone()[0]:
                return False
    return not (tmp_path / "out").exists()


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_a_world_readable_signing_key_fails_before_spending(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.accounting.signing import generate_keypair

    key = tmp_path / "key.pem"
    generate_keypair(key)
    os.chmod(key, 0o644)
    assert _build(notes, tmp_path, "--signing-key", str(key)) == 2
    assert "readable by others" in _one_line(capsys.readouterr().err)
    assert _nothing_spent(tmp_path)
    assert _build(notes, tmp_path, "--signing-key", str(tmp_path / "absent.pem")) == 2
    assert "cannot read the signing key" in _one_line(capsys.readouterr().err)
    assert _nothing_spent(tmp_path)


def test_an_output_location_that_cannot_be_written_fails_before_spending(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code = build_corpus_main([str(notes), "-o", str(blocker / "out"), "--runner", "local",
                              "--state-dir", str(tmp_path / "state"), "--corpus-ledger",
                              str(tmp_path / "corpus.sqlite"), "--quiet"])
    assert code == 2
    assert "cannot write the output directory here" in _one_line(capsys.readouterr().err)
    assert _nothing_spent(tmp_path)


def test_too_little_free_disk_fails_before_spending(
        notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(preflight, "MIN_FREE_BYTES", 2**62)
    assert _build(notes, tmp_path) == 2
    line = _one_line(capsys.readouterr().err)
    assert "MiB free for the output directory" in line
    assert _nothing_spent(tmp_path)


def test_a_model_that_does_not_load_fails_before_spending(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(notes, tmp_path, "--embedder", str(tmp_path / "no-such-model")) == 1
    assert "no-such-model" in _one_line(capsys.readouterr().err)
    assert _nothing_spent(tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_cuda_fails_before_spending(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(notes, tmp_path, "--device", "cuda") == 1
    assert "CUDA is not available" in _one_line(capsys.readouterr().err)
    assert _nothing_spent(tmp_path)


def test_required_free_bytes_counts_the_input(tmp_path: Path) -> None:
    data = tmp_path / "notes.jsonl"
    data.write_bytes(b"x" * 1000)
    assert preflight.required_free_bytes(data) == preflight.MIN_FREE_BYTES + 1000
    assert preflight.required_free_bytes("gs://bucket/notes-*.jsonl") == \
        preflight.MIN_FREE_BYTES


def test_a_useless_corpus_exits_5_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 12 notes at epsilon 1: no phrase reaches tau_A, so no note is written (0 kept)
    tiny = write_clinic_dataset(tmp_path / "tiny", n_notes=12, n_diseases=3, seed=4)["notes"]
    assert _build(tiny, tmp_path, "--epsilon", "1", "--rho-hist", "0.01") == 5
    err = capsys.readouterr().err
    assert "USELESS CORPUS: 0 synthetic texts, 0 kept" in " ".join(err.split())
    assert (tmp_path / "out" / "certificate.json").exists()  # built and signed nonetheless
    assert _build(tiny, tmp_path, "--epsilon", "1", "--rho-hist", "0.01", "--force",
                  "--allow-empty") == 0


def test_dry_run_plans_checks_and_estimates_spending_nothing(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(notes, tmp_path, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "DP-SynRAG facts budget" in out and "n-gram levels: 1-grams K 128 tau" in out
    for check in ("input", "signing key", "output directory", "state directory",
                  "corpus ledger", "embedder"):
        assert f"ok    {check}" in out, check
    assert "every check passed; nothing was spent" in out and "estimate" in out
    assert _nothing_spent(tmp_path) and not (tmp_path / "corpus.sqlite").exists()
    assert not (tmp_path / "state" / "ledger.sqlite").exists()
    # tokens: the model is timed on public filler text, the estimate has the run's shape
    assert _build(notes, tmp_path, "--dry-run", "--generate", "tokens", "--keywords",
                  "statistical", "--R", "6", "--k", "4", "--T", "8", "--L", "1",
                  "--batch-rows", "8") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "ok language model" in out and "one batch of 8 rows" in out
    assert "at most 6 clusters x 4 rows x 8 tokens" in out
    assert _nothing_spent(tmp_path)
    # facts with the token writer: the model is loaded and timed, the estimate names it
    assert _build(notes, tmp_path, "--dry-run", "--writer", "tokens", "--T", "8",
                  "--batch-rows", "8", "--facts-items", "terms", "--verbose") == 0  # estimate
    out = " ".join(capsys.readouterr().out.split())
    assert "ok language model" in out and "the token writer ~" in out
    assert "(f) token writer" in out
    assert _nothing_spent(tmp_path)


def test_dry_run_reports_every_failed_check_and_exits_2(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.accounting.signing import generate_keypair

    key = tmp_path / "key.pem"
    generate_keypair(key)
    os.chmod(key, 0o644)
    (tmp_path / "out").mkdir()
    assert _build(notes, tmp_path, "--dry-run", "--signing-key", str(key)) == 2
    out = capsys.readouterr().out
    assert "FAIL  signing key" in out and "readable by others" in out
    assert "FAIL  output directory" in out and "pass --force" in out
    assert "2 check(s) failed; nothing was spent" in out
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert _build(notes, tmp_path, "--dry-run", "--force", "--state-dir", str(blocker)) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"FAIL state directory: {blocker}: exists and is not a directory" in out


def test_dry_run_says_when_the_corpus_ledger_cap_would_refuse_the_build(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.cli import main

    ledger = str(tmp_path / "corpus.sqlite")
    assert main(["ledger", "cap", "--corpus-ledger", ledger, "--epsilon", "1", "--delta",
                 "1e-3"]) == 0
    capsys.readouterr()
    assert _build(notes, tmp_path, "--dry-run") == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "FAIL corpus ledger" in out and "would be refused (exit 3)" in out
    assert _build(notes, tmp_path, "--dry-run", "--epsilon", "0.5", "--rho-hist", "0.001") == 0
    assert "ok corpus ledger" in " ".join(capsys.readouterr().out.split())


def test_a_state_directory_that_cannot_be_used_fails_before_spending(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for state, problem in ((blocker, "exists and is not a directory; choose another "
                                     "--state-dir"),
                           (blocker / "state", "cannot write the state directory here")):
        code = build_corpus_main([str(notes), "-o", str(tmp_path / "out"), "--runner", "local",
                                  "--state-dir", str(state), "--corpus-ledger",
                                  str(tmp_path / "corpus.sqlite"), "--quiet"])
        assert code == 2
        line = _one_line(capsys.readouterr().err)
        assert line.startswith("build-corpus: error: ") and str(state) in line, line
        assert problem in line and "nothing was spent" in line, line
        assert _nothing_spent(tmp_path)


def test_a_read_only_state_directory_fails_before_spending(
        notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import errno
    import tempfile

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    make_temp = tempfile.mkstemp

    def read_only(*args: object, dir: str | Path | None = None, **kwargs: object) -> object:
        if dir is not None and Path(dir) == state:  # root writes anywhere: say it is read-only
            raise OSError(errno.EROFS, "Read-only file system", str(state))
        return make_temp(*args, dir=dir, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(preflight.tempfile, "mkstemp", read_only)
    assert _build(notes, tmp_path) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{state}: cannot write the state directory here (Read-only file system); choose " \
           "a writable --state-dir (nothing was spent)" in line
    assert _nothing_spent(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_state_directory_without_write_permission_fails_before_spending(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o500)
    try:
        assert _build(notes, tmp_path) == 2
    finally:
        state.chmod(0o700)
    line = _one_line(capsys.readouterr().err)
    assert f"{state}: cannot write the state directory here" in line
    assert _nothing_spent(tmp_path)


def test_an_os_error_on_a_path_is_one_line_naming_it_with_exit_2(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a location problem no check foresaw (here the state directory's lock is a directory)
    (tmp_path / "state" / "lock").mkdir(parents=True)
    assert _build(notes, tmp_path) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == f"build-corpus: error: {tmp_path / 'state' / 'lock'}: is a directory"
    assert _nothing_spent(tmp_path)


def test_an_output_on_a_mount_point_is_refused_before_spending_without_force_advice(
        notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    mount = tmp_path / "volume"
    mount.mkdir()
    ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == mount or ismount(path))
    for extra in ((), ("--force",)):
        code = build_corpus_main([str(notes), "-o", str(mount), "--runner", "local",
                                  "--state-dir", str(tmp_path / "state"), "--corpus-ledger",
                                  str(tmp_path / "corpus.sqlite"), "--quiet", *extra])
        assert code == 2
        line = _one_line(capsys.readouterr().err)
        assert f"{mount}: is a mount point" in line and "--force" not in line, line
        assert mount.is_dir() and not (tmp_path / "state" / "ledger.sqlite").exists()


def test_an_unwritable_summary_json_fails_before_spending(
        notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no-such-dir" / "summary.json"
    assert _build(notes, tmp_path, "--summary-json", str(target)) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{target.parent}: no such directory for --summary-json" in line
    assert _nothing_spent(tmp_path)


def test_a_config_directory_that_cannot_hold_the_default_key_fails_before_spending(
        notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(blocker / "config"))
    assert _build(notes, tmp_path) == 2
    line = _one_line(capsys.readouterr().err)
    assert "cannot create the default signing key here" in line
    assert "--signing-key" in line and "DPSYNRAG_CONFIG_DIR" in line
    assert _nothing_spent(tmp_path)
