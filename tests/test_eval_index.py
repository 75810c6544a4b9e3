"""examples/eval/index.py: the index of the evaluation reports is current and says what each
report measured and which pages cite it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def _index_module() -> ModuleType:
    path = REPO / "examples" / "eval" / "index.py"
    spec = importlib.util.spec_from_file_location("eval_index", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(folder: Path, name: str, methods: list[dict]) -> None:
    (folder / name).mkdir(parents=True)
    record = {"dataset": {"name": "films", "queries": 160}, "methods": methods, "settings": {}}
    (folder / name / "results.json").write_text(json.dumps(record), encoding="utf-8")


def test_the_committed_index_is_current() -> None:
    assert _index_module().main(["--check"]) == 0, "run: .venv/bin/python examples/eval/index.py"


def test_a_report_row_has_its_means_rules_and_citations(tmp_path: Path) -> None:
    index = _index_module()
    folder, repo = tmp_path / "examples" / "eval", tmp_path
    runs = [{"recall_at_k": 0.5, "accuracy": 0.1, "code": {"facts_rules": 18}},
            {"recall_at_k": 0.7, "accuracy": 0.3, "code": {"facts_rules": 18}}]
    _report(folder, "results-films-x", [
        {"method": "rag", "epsilon": None, "runs": [{"recall_at_k": 0.9, "accuracy": 0.2}]},
        {"method": "dp-synrag-facts", "epsilon": 1.0, "runs": runs}])
    _report(folder, "results-films-x-eps3", [
        {"method": "dp-synrag-facts", "epsilon": 3.0, "runs": [{"recall_at_k": 0.25}]}])
    (repo / "docs").mkdir()
    (repo / "README.md").write_text("see [x](examples/eval/results-films-x/results.md)\n")
    (repo / "docs" / "evaluation.md").write_text("[both](../examples/eval/results-films-x)\n"
                                                 "[eps3](../examples/eval/results-films-x-eps3)")
    rows = {line.split("](")[0].lstrip("| ["): line
            for line in index.render(folder, repo).splitlines() if line.startswith("| [")}
    assert set(rows) == {"results-films-x", "results-films-x-eps3"}
    cells = [cell.strip() for cell in rows["results-films-x"].strip("|").split("|")]
    assert cells[1:5] == ["films", "160", "2", "18"]
    assert cells[5] == "rag ε -: 90.0 / 20.0; dp-synrag-facts ε 1: 60.0 / 20.0"
    assert cells[6] == "README.md, docs/evaluation.md"
    # a longer name's link does not cite its prefix, and a missing figure reads "-"
    cells = [cell.strip() for cell in rows["results-films-x-eps3"].strip("|").split("|")]
    assert cells[4:] == ["not recorded", "dp-synrag-facts ε 3: 25.0 / -", "docs/evaluation.md"]


def test_check_fails_when_the_index_is_stale(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    index = _index_module()
    stale = tmp_path / "README.md"
    stale.write_text("# an old index\n", encoding="utf-8")
    monkeypatch.setattr(index, "INDEX", stale)
    assert index.main(["--check"]) == 1
    assert "not current" in capsys.readouterr().err
