"""benchmarks/results_table.py: the results tables of README.md and docs/evaluation.md are
written from the current reports (benchmarks/results/current/), and are current."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def table() -> ModuleType:
    return load_benchmark("results_table")


def _report(folder: Path, name: str, dataset: str, methods: list[dict]) -> None:
    (folder / name).mkdir(parents=True)
    record = {"dataset": {"name": dataset, "queries": 160}, "methods": methods, "settings": {}}
    (folder / name / "results.json").write_text(json.dumps(record), encoding="utf-8")


def _runs(*pairs: tuple[float, float], rules: int = 18) -> list[dict]:
    return [{"recall_at_k": r, "accuracy": a, "recall_at_k_weighted": r,
             "names_in_corpus": 0, "verbatim_spans_one_note": 0,
             "code": {"facts_rules": rules}} for r, a in pairs]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_the_committed_tables_are_current(table: ModuleType) -> None:
    assert table.main(["--check"]) == 0, "run: .venv/bin/python benchmarks/results_table.py"


def test_the_current_reports_are_of_one_facts_rules_version(table: ModuleType) -> None:
    rules = {r for data in table.collect() for cell in data.cells.values()
             if cell.row["method"] == table.FACTS for r in cell.rules}
    assert len(rules) == 1, f"benchmarks/results/current/ mixes facts rules {sorted(rules)}"


def test_rows_take_the_reports_means_and_the_ratio_to_rag(table: ModuleType,
                                                          tmp_path: Path) -> None:
    _report(tmp_path, "films-eps1", "films", [
        {"method": "dp-synrag-facts", "epsilon": 1.0, "runs": _runs((0.5, 0.1), (0.7, 0.3))}])
    # private RAG of the same data set, from another report
    _report(tmp_path, "films-rag", "films", [
        {"method": "rag", "epsilon": None, "runs": [{"recall_at_k": 0.8, "accuracy": 0.4}]}])
    _report(tmp_path, "clinic", "clinic", [
        {"method": "dp-synrag-facts", "epsilon": 10.0, "runs": _runs((0.25, 0.2))}])
    sets = table.collect(tmp_path)
    assert [data.name for data in sets] == ["clinic", "films"]
    lines = table.render_readme(sets).splitlines()
    assert lines[0].startswith("160 queries per set; 1 or 2 runs per ε")
    assert "facts rules 18, as every run recorded" in lines[0]
    assert _cells(lines[2])[1] == "recall@10 × RAG, ε = 1 / 10"
    rows = [_cells(line) for line in lines[4:]]
    assert rows == [
        ["clinic", "-", "-", "-", "-, -"],                      # no RAG: no ratio
        ["films", "0.75", "-", "0.50", "80.0 %, 40.0 %"]]
    guide = table.render_guide(sets, link="reports").splitlines()
    assert _cells(guide[-1]) == ["", "dp-synrag-facts", "1", "2", "60.0 ± 14.1 %", "0.75",
                                 "60.0 ± 14.1 %", "20.0 ± 14.1 %", "0.50", "0, 0",
                                 "[films-eps1](reports/films-eps1/results.md)"]
    assert _cells(guide[-2])[1:3] == ["rag", "∞"]


def test_a_cell_measured_by_two_reports_is_refused(table: ModuleType, tmp_path: Path) -> None:
    for name, recall in (("a", 0.5), ("b", 0.6)):
        _report(tmp_path, name, "films", [
            {"method": "dp-synrag-facts", "epsilon": 1.0, "runs": _runs((recall, 0.1))}])
    with pytest.raises(table.TableError, match="two reports"):
        table.collect(tmp_path)


def test_the_same_figure_in_two_reports_is_one_figure(table: ModuleType,
                                                      tmp_path: Path) -> None:
    for name, seconds in (("a", 10.0), ("b", 12.0)):  # private RAG twice; wall time not shown
        _report(tmp_path, name, "films", [
            {"method": "rag", "epsilon": None,
             "runs": [{"recall_at_k": 0.8, "wall_seconds": seconds}]}])
    (data,) = table.collect(tmp_path)
    assert data.cells[("rag", None)].row["metrics"]["recall_at_k"]["mean"] == 0.8


def test_a_cell_of_two_reports_takes_each_metric_from_the_one_with_more_runs(
        table: ModuleType, tmp_path: Path) -> None:
    recall = [{"recall_at_k": r, "code": {"facts_rules": 18}} for r in (0.5, 0.7, 0.6)]
    _report(tmp_path, "recall", "films", [
        {"method": "dp-synrag-facts", "epsilon": 1.0, "runs": recall}])
    _report(tmp_path, "reader", "films", [
        {"method": "dp-synrag-facts", "epsilon": 1.0, "runs": _runs((0.9, 0.3))}])
    (data,) = table.collect(tmp_path)
    cell = data.cells[("dp-synrag-facts", 1.0)]
    assert cell.row["metrics"]["recall_at_k"]["n"] == 3  # the 3 runs, not the reader's 1
    assert cell.row["metrics"]["recall_at_k"]["mean"] == pytest.approx(0.6)
    assert cell.row["metrics"]["accuracy"]["mean"] == pytest.approx(0.3)
    assert cell.report == "reader, recall"
    guide = table.render_guide([data], link="r").splitlines()
    assert _cells(guide[-1])[-1] == "[reader](r/reader/results.md), [recall](r/recall/results.md)"


def test_only_the_block_between_the_markers_is_replaced(table: ModuleType) -> None:
    text = f"intro\n{table.START}\nold\n{table.END}\nrest\n"
    assert table.replace_block(text, "new") == f"intro\n{table.START}\nnew\n{table.END}\nrest\n"
    with pytest.raises(table.TableError, match="no"):
        table.replace_block("no markers\n", "new")


def test_check_fails_when_a_table_is_stale(table: ModuleType, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# p\n{table.START}\nan old table\n{table.END}\n", encoding="utf-8")
    monkeypatch.setattr(table, "TARGETS", {page: table.render_readme})
    assert table.main(["--check"]) == 1
    assert "not current" in capsys.readouterr().err
    assert table.main([]) == 0  # rewrites it
    assert table.main(["--check"]) == 0
    assert page.read_text(encoding="utf-8").startswith(f"# p\n{table.START}\n")
