"""Issue 58, item 4, for the two commands besides the build that read the whole input:
``build-corpus --dry-run`` (stdout) and ``dpsynrag ingest`` (stderr) print no exact count of
the input unless ``--verbose``, and say where the counts are or that they are withheld.

The input: 53 clinic notes of 19 units (19 documents, 34 records left out by pick): numbers
that nothing else these commands print is."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
from test_build import HashEmbedder
from test_cli_build_output import NoLLM

from dpsynrag.cli import build_corpus_main, main
from dpsynrag.cli.build import DRY_RUN_WITHHELD, dry_run_say
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.pipeline.runners import LocalRunner


@pytest.fixture(scope="module")
def odd_notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("odd")
    path = write_clinic_dataset(out, n_notes=53, n_diseases=4, seed=3)["notes"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({**row, "unit": f"u{i % 19}"}) + "\n"
                            for i, row in enumerate(rows)), encoding="utf-8")
    return path


def _counts_shown(text: str, tmp_path: Path) -> list[str]:
    """The input's exact counts (53 records, 19 documents, 34 left out) in ``text``, paths
    (which hold pytest's own numbers) left out."""
    return re.findall(r"(?<![\w.])(?:53|19|34)(?![\w.])", text.replace(str(tmp_path), "TMP"))


def _dry_run(notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             *extra: str) -> int:
    from dpsynrag.pipeline import dry_run

    monkeypatch.setattr(dry_run, "LocalRunner", lambda *_a: LocalRunner(NoLLM(), HashEmbedder()))
    return build_corpus_main([str(notes), "-o", str(tmp_path / "out"), "--runner", "local",
                              "--state-dir", str(tmp_path / "state"), "--corpus-ledger",
                              str(tmp_path / "corpus.sqlite"), "--unit-column", "unit",
                              "--dry-run", *extra])


def test_the_dry_run_withholds_the_input_counts_unless_verbose(
        odd_notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _dry_run(odd_notes, tmp_path, monkeypatch) == 0
    captured = capsys.readouterr()
    out = " ".join(captured.out.split())
    assert _counts_shown(captured.out + captured.err, tmp_path) == []
    assert "ok input: read and valid; its exact counts (documents, records skipped or " \
           "merged) are withheld; --verbose prints them" in out
    # pick leaves out 34 of 53 (64 %): the warning that names the counts is withheld too
    assert "a warning about the input's exact counts is withheld" in out
    assert "left out" not in out
    assert "estimate: withheld, it is computed from the input's exact size" in out
    assert "every check passed; nothing was spent" in out  # the other checks still run
    assert not (tmp_path / "state" / "ledger.sqlite").exists()
    # --verbose: the operator's terminal gets the counts, the warning and the estimate
    assert _dry_run(odd_notes, tmp_path, monkeypatch, "--verbose") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "19 documents (one per privacy unit), 34 records skipped" in out
    assert "left out 34 of the 53 records read" in out
    assert "estimate (this machine)" in out and "of 19 documents" in out


def test_dry_run_say_replaces_only_the_lines_that_hold_counts() -> None:
    said: list[str] = []
    say = dry_run_say(False, said.append)
    lines = ["  ok    input: 19 documents (one per privacy unit), 34 records skipped",
             "  WARNING: --unit-bound pick kept one record per privacy unit and left out 34",
             "estimate (this machine): about 3 s: reading, keywords and phrases of 19 documents",
             "  FAIL  input: notes.jsonl: line 2: not valid JSON",
             "  ok    signing key: keys/k.pem (Ed25519, owner-only)",
             "shape: at most 6 clusters x 4 rows x 8 tokens"]
    for line in lines:
        say(line)
    assert said == [DRY_RUN_WITHHELD["  ok    input"], DRY_RUN_WITHHELD["  WARNING"],
                    DRY_RUN_WITHHELD["estimate"], *lines[3:]]
    assert not any(re.search(r"\d", text) for text in DRY_RUN_WITHHELD.values())
    verbose: list[str] = []
    for line in lines:
        dry_run_say(True, verbose.append)(line)
    assert verbose == lines


def test_ingest_withholds_the_counts_unless_verbose(
        odd_notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    shards = tmp_path / "shards"
    assert main(["ingest", str(odd_notes), "-o", str(shards), "--unit-column", "unit",
                 "--shards", "2", "--report-json", str(report)]) == 0
    captured = capsys.readouterr()
    assert _counts_shown(captured.out + captured.err, tmp_path) == []
    err = " ".join(captured.err.split())
    assert (f"ingest: wrote 2 shard(s) at {shards}; the exact counts (records read, documents "
            "written, each skip reason, bad rows) and any warning about them are in "
            f"{shards}/_ingest/report.json and {report} (private); --verbose prints them "
            "here") in err
    assert "WARNING" not in err and "file(s)" not in err
    # the counts are where the line says, and the report is the owner's only
    written = json.loads(report.read_text())
    assert (written["records_read"], written["documents"]) == (53, 19)
    assert written["warnings"] and "34" in written["warnings"][0]
    assert json.loads((shards / "_ingest" / "report.json").read_text())["documents"] == 19
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    # --verbose: every count, the warning and the job's progress line
    assert main(["ingest", str(odd_notes), "-o", str(shards), "--unit-column", "unit",
                 "--shards", "2", "--force", "--verbose"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "documents written: 19 in 2 shard(s)" in err and "records read: 53" in err
    assert "skipped (unit_bound): 34" in err and "WARNING: --unit-bound pick" in err
    assert "ingest: 1 file(s), runner direct" in err
