"""Which code an evaluation ran (``eval.provenance``): the imported package, its facts rules
and its git commit and edits, named in every run and in the report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dpsynrag
import dpsynrag.eval.provenance as provenance
from dpsynrag.eval.report import write_markdown
from dpsynrag.pipeline.config import FACTS_RULES_VERSION


def test_the_record_names_the_imported_package_and_its_rules() -> None:
    record = provenance.code_provenance()
    assert record["package_dir"] == str(Path(dpsynrag.__file__).resolve().parent)
    assert record["facts_rules"] == FACTS_RULES_VERSION
    assert record["version"] == dpsynrag.__version__
    if "git_commit" in record:  # a checkout (a clean clone in CI); an install has none
        assert re.fullmatch(r"[0-9a-f]{40}", record["git_commit"])
        assert record["git_dirty"] in (True, False, None)


def test_outside_a_checkout_no_commit_is_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "_git", lambda directory, *args: None)
    record = provenance.code_provenance()
    assert "git_commit" not in record and "git_dirty" not in record


def test_edits_are_told_apart_from_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"rev-parse": "a" * 40, "status": " M dpsynrag/facts/terms.py"}
    monkeypatch.setattr(provenance, "_git", lambda directory, *args: answers[args[0]])
    assert provenance.code_provenance()["git_dirty"] is True
    answers["status"] = ""
    assert provenance.code_provenance()["git_dirty"] is False


def _record(commit: str, dirty: bool | None) -> dict[str, object]:
    return {"package_dir": "/x/dpsynrag", "version": "0.1.0", "facts_rules": 16,
            "git_commit": commit, "git_dirty": dirty}


def test_distinct_records_are_counted_most_frequent_first() -> None:
    clean, edited = _record("b" * 40, False), _record("c" * 40, True)
    lines = provenance.describe_code([edited, clean, clean, None])
    assert lines[0] == ("commit bbbbbbbbbbbb (clean), facts rules 16, version 0.1.0, "
                        "/x/dpsynrag: 2 runs")
    assert "commit cccccccccccc (with uncommitted edits)" in lines[1]
    assert lines[1].endswith(": 1 run")
    assert lines[2] == "not recorded (a run from before the record): 1 run"


def test_the_report_names_the_code_of_its_runs(tmp_path: Path) -> None:
    results = {"dataset": {"name": "films"}, "settings": {"rag_k": 10},
               "methods": [{"method": "dp-synrag-facts", "epsilon": 3.0,
                            "runs": [{"recall_at_k": 0.5, "accuracy": 0.2,
                                      "code": _record("d" * 40, True)},
                                     {"recall_at_k": 0.6, "accuracy": 0.3}]}]}
    text = write_markdown(results, tmp_path / "r.md").read_text()
    assert "## Code" in text
    assert "- commit dddddddddddd (with uncommitted edits), facts rules 16" in text
    assert "- not recorded (a run from before the record): 1 run" in text
