"""Evaluation report: exact summaries, the paper-shaped Markdown tables, and PNG plots."""

from __future__ import annotations

import math
import statistics

import pytest

from dpsynrag.eval.report import summarise, write_markdown, write_plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(recall, accuracy, leaks=(0, 1, 0, 2), wall=10.0, stages=(0.1, 0.2, 0.7)):
    run = {"recall_at_k": recall, "accuracy": accuracy, "leaks_benign": leaks[0],
           "leaks_attack": leaks[1], "names_in_corpus": leaks[2], "verbatim_spans": leaks[3],
           "wall_seconds": wall}
    if stages is not None:
        run["stage_rho"] = dict(zip(("histogram", "retrieval", "prediction"), stages,
                                    strict=True))
        run["rho"] = sum(stages)
    return run


RESULTS = {
    "dataset": {"name": "clinic", "documents": 600, "queries": 100},
    "settings": {"rag_k": 10, "delta": 1e-3, "conversion": "bun-steinke"},
    "methods": [
        {"method": "non-RAG", "epsilon": None,
         "runs": [{"accuracy": 0.1, "recall_at_k": None, "wall_seconds": 3.0}]},
        {"method": "RAG", "epsilon": None,
         "runs": [_run(0.9, 0.87, leaks=(4, 85, 40, 30), wall=5.0, stages=None)]},
        {"method": "dp-synrag", "epsilon": 10.0,
         "runs": [_run(0.5, 0.60, wall=100.0), _run(0.7, 0.64, leaks=(1, 3, 0, 4), wall=110.0),
                  _run(0.6, 0.68, leaks=(2, 2, 0, 0), wall=120.0)]},
        {"method": "dp-synrag", "epsilon": 1.0,
         "runs": [_run(0.2, 0.30), _run(0.4, 0.34)]},
        {"method": "dp-synth", "epsilon": 10.0,
         "runs": [_run(0.0, 0.01, stages=(0.0, 0.0, 1.0)),
                  _run(0.0, 0.03, stages=(0.0, 0.0, 1.0))]},
    ],
}


def _row(summary, method, epsilon):
    return next(r for r in summary if r["method"] == method and r["epsilon"] == epsilon)


def test_summarise_gives_exact_means_and_sample_stds() -> None:
    summary = summarise(RESULTS)
    assert [(r["method"], r["epsilon"], r["n_runs"]) for r in summary] == [
        ("non-RAG", None, 1), ("RAG", None, 1), ("dp-synrag", 10.0, 3), ("dp-synrag", 1.0, 2),
        ("dp-synth", 10.0, 2)]
    synrag = _row(summary, "dp-synrag", 10.0)["metrics"]
    assert synrag["accuracy"]["mean"] == pytest.approx(0.64, abs=1e-15)
    assert synrag["accuracy"]["std"] == pytest.approx(0.04, abs=1e-15)  # n - 1 denominator
    assert synrag["recall_at_k"] == {"mean": pytest.approx(0.6), "std": pytest.approx(0.1),
                                     "n": 3}
    assert synrag["wall_seconds"] == {"mean": 110.0, "std": 10.0, "n": 3}
    assert synrag["leaks_benign"] == {"mean": 1.0, "std": 1.0, "n": 3}
    assert synrag["leaks_attack"]["mean"] == 2.0
    assert synrag["leaks_attack"]["std"] == statistics.stdev([1, 3, 2])
    assert synrag["stage_rho.prediction"] == {"mean": 0.7, "std": 0.0, "n": 3}
    assert math.isclose(synrag["rho"]["mean"], 1.0, rel_tol=1e-15)
    one = _row(summary, "dp-synrag", 1.0)["metrics"]["accuracy"]
    assert one["mean"] == pytest.approx(0.32) and one["std"] == pytest.approx(math.sqrt(8e-4))
    non_rag = _row(summary, "non-RAG", None)["metrics"]
    assert set(non_rag) == {"accuracy", "wall_seconds"}  # None values are left out
    assert non_rag["accuracy"] == {"mean": 0.1, "std": 0.0, "n": 1}


def test_entries_with_the_same_method_and_epsilon_are_merged() -> None:
    results = {"methods": [{"method": "m", "epsilon": 2, "runs": [{"accuracy": 1.0}]},
                           {"method": "m", "epsilon": 2.0, "runs": [{"accuracy": 0.0}]}]}
    (row,) = summarise(results)
    assert row["n_runs"] == 2
    assert row["metrics"]["accuracy"] == {"mean": 0.5, "std": math.sqrt(0.5), "n": 2}


@pytest.mark.parametrize("bad", [
    {"methods": "x"},
    {"methods": [{"epsilon": 1.0, "runs": []}]},
    {"methods": [{"method": "m", "epsilon": -1.0, "runs": []}]},
    {"methods": [{"method": "m", "epsilon": 1.0, "runs": [{"accuracy": "high"}]}]},
    {"methods": [{"method": "m", "epsilon": 1.0, "runs": [{"accuracy": math.nan}]}]},
])
def test_malformed_results_are_refused(bad) -> None:
    with pytest.raises(ValueError):
        summarise(bad)


def test_markdown_has_the_paper_shaped_tables(tmp_path) -> None:
    path = write_markdown(RESULTS, tmp_path / "report" / "results.md")
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert "- name: clinic" in lines and "- rag_k: 10" in lines
    # Table 1: rows = methods, columns = no DP then each epsilon in ascending order
    accuracy = lines.index("### Accuracy (%)")
    assert lines[accuracy + 2] == "| Method | no DP | ε = 1 | ε = 10 |"
    assert lines[accuracy + 4] == "| non-RAG | 10.00 | – | – |"
    assert lines[accuracy + 5] == "| RAG | 87.00 | – | – |"
    assert lines[accuracy + 6] == "| dp-synrag | – | 32.00 ± 2.83 | 64.00 ± 4.00 |"
    assert lines[accuracy + 7] == "| dp-synth | – | – | 2.00 ± 1.41 |"
    recall = lines.index("### Recall@10 (%)")
    assert lines[recall + 4] == "| non-RAG | – | – | – |"
    assert lines[recall + 5] == "| RAG | 90.00 | – | – |"
    assert lines[recall + 6] == "| dp-synrag | – | 30.00 ± 14.14 | 60.00 ± 10.00 |"
    # Table 2: leakage, one row per (method, epsilon)
    assert ("| Method | ε | Leaks (benign) | Leaks (attack) | Names in corpus | Verbatim spans | "
            "Verbatim spans of one note | … within one span |" in lines)
    # runs without the one-note count (reports from before it) show a dash there
    assert "| RAG | no DP | 4.00 | 85.00 | 40.00 | 30.00 | – | – |" in lines
    assert ("| dp-synrag | 10 | 1.00 ± 1.00 | 2.00 ± 1.00 | 0.00 ± 0.00 | 2.00 ± 2.00 | – | – |"
            in lines)
    assert "| non-RAG | no DP | – | – | – | – | – | – |" in lines
    # budget and wall time
    assert "| dp-synth | 10 | 1.0000 | 0.0000 | 0.0000 | 1.0000 |" in lines
    assert "| RAG | no DP | – | – | – | – |" not in lines  # no budget row without rho
    assert "| dp-synrag | 10 | 3 | 110.0 ± 10.0 |" in lines
    assert "| non-RAG | no DP | 1 | 3.0 |" in lines


def test_markdown_without_percentages(tmp_path) -> None:
    text = write_markdown(RESULTS, tmp_path / "r.md", percent=False).read_text()
    assert "### Accuracy" in text.splitlines()
    assert "| dp-synrag | – | 0.32 ± 0.03 | 0.64 ± 0.04 |" in text.splitlines()


def test_plots_are_valid_png_files(tmp_path) -> None:
    paths = write_plots(RESULTS, tmp_path / "plots")
    assert [p.name for p in paths] == ["utility_vs_epsilon.png", "budget_by_stage.png"]
    for path in paths:
        data = path.read_bytes()
        assert len(data) > 1000 and data[:8] == PNG_MAGIC


def test_plots_without_private_methods_or_stage_budgets(tmp_path) -> None:
    results = {"methods": [{"method": "RAG", "epsilon": None,
                            "runs": [{"accuracy": 0.8, "recall_at_k": 0.9}]}]}
    paths = write_plots(results, tmp_path)
    assert [p.name for p in paths] == ["utility_vs_epsilon.png"]
    assert paths[0].read_bytes()[:8] == PNG_MAGIC


def test_the_report_gives_every_private_method_against_private_rag(tmp_path) -> None:
    results = {**RESULTS, "methods": [
        {**m, "method": "rag"} if m["method"] == "RAG" else m for m in RESULTS["methods"]]}
    text = write_markdown(results, tmp_path / "r.md").read_text()
    block = text.split("### Against private RAG")[1].split("##")[0]
    # dp-synrag at eps 10: accuracy 0.64 / 0.87, recall 0.6 / 0.9
    assert f"| dp-synrag | 10 | {0.64 / 0.87:.2f} | {0.6 / 0.9:.2f} |" in block
    assert f"| dp-synrag | 1 | {0.32 / 0.87:.2f} | {0.3 / 0.9:.2f} |" in block
    # without a rag row there is no ratio table
    assert "Against private RAG" not in write_markdown(RESULTS, tmp_path / "s.md").read_text()
