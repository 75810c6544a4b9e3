#!/usr/bin/env python3
"""Write the results tables of README.md and docs/evaluation.md from the current reports.

Usage: ``.venv/bin/python benchmarks/results_table.py`` (rewrites both tables) or ``--check``
(exit 1 when a committed table is not what this script writes; ``make test`` runs it through
``tests/test_results_table.py``).

``benchmarks/results/current/`` holds the ``dpsynrag eval`` reports of the current code only
(one folder per report: ``results.md``, ``results.json``, per-run JSON under ``runs/``).
Each table lies between ``<!-- results-table:start -->`` and ``<!-- results-table:end -->``
in its page; everything outside the markers is left alone. Every figure is the report's own
(``dpsynrag.eval.report.summarise``: exact means over the runs, sample standard deviations),
and a ratio is a mean divided by private RAG's mean on the same data set, as the reports'
"Against private RAG" table divides. A data set's private RAG may come from another report
than its DP cells (the same data and reader; RAG does not depend on the facts rules). Two
reports measuring the same (data set, method, ε) are refused: the folder must say one thing.
Run it with the project's Python (``.venv/bin/python``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynrag.eval.report import summarise

REPO = Path(__file__).resolve().parent.parent
CURRENT = REPO / "benchmarks" / "results" / "current"
START, END = "<!-- results-table:start -->", "<!-- results-table:end -->"
#: the private method whose cells the tables show, and the baselines beside it
FACTS, RAG, CEILING = "dp-synrag-facts", "rag", "facts-ceiling"
COMMAND = ".venv/bin/python benchmarks/results_table.py"
#: the reader's texts in a report made before ``--reader-k`` existed
READER_K = 5


#: the metrics the tables show (a cell's other metrics, wall times say, are not compared)
SHOWN = frozenset({"recall_at_k", "recall_at_k_weighted", "recall_at_k_supported", "accuracy",
                   "names_in_corpus", "verbatim_spans_one_note",
                   "verbatim_spans_one_note_in_spans"})


class TableError(ValueError):
    """The current reports cannot make one table (a cell measured twice, no report)."""


@dataclass
class Cell:
    """One (method, epsilon) of one data set: its summary row and the report it comes from."""

    row: dict[str, Any]
    report: str
    rules: set[int] = field(default_factory=set)


@dataclass
class DataSet:
    name: str
    queries: Any
    cells: dict[tuple[str, float | None], Cell] = field(default_factory=dict)
    #: how many retrieved texts the reader read, in the reports that ran it
    reader_k: set[int] = field(default_factory=set)


def _rules(entry: dict[str, Any]) -> set[int]:
    return {int(run["code"]["facts_rules"]) for run in entry.get("runs") or []
            if (run.get("code") or {}).get("facts_rules") is not None}


def _set_name(record: dict[str, Any]) -> str:
    """A report's data set: its name, or for a real set's half (a folder named tune or
    report, as ``benchmarks/real_sets`` writes them) the set and the half
    (``.data/sets/movielens/report`` is ``movielens/report``)."""
    given = Path(str((record.get("settings") or {}).get("dataset") or ""))
    if given.name in ("tune", "report"):
        return f"{given.parent.name}/{given.name}"
    return str((record.get("dataset") or {}).get("name", "?"))


def _merge(cell: Cell, row: dict[str, Any], report: str, what: str) -> None:
    """A cell measured by two reports (recall over 3 runs in one, the reader's accuracy over
    fewer in another): each metric comes from the report with more runs of it; the same
    metric over as many runs in both is refused unless both say the same (the folder must
    say one thing)."""
    metrics = dict(cell.row["metrics"])
    for name, stats in row["metrics"].items():
        if name not in metrics or stats["n"] > metrics[name]["n"]:
            metrics[name] = stats
        elif stats == metrics[name] or name not in SHOWN:
            continue  # the same figure twice (private RAG is deterministic), or none shown
        elif stats["n"] == metrics[name]["n"]:
            raise TableError(f"{what} is in two reports ({cell.report}, {report}) that both "
                             f"measure {name} over {stats['n']} runs: keep one")
    cell.row = {**cell.row, "metrics": metrics,
                "n_runs": max(cell.row["n_runs"], row["n_runs"])}
    cell.report = f"{cell.report}, {report}"


def collect(folder: Path = CURRENT) -> list[DataSet]:
    """Every (data set, method, epsilon) of the reports under ``folder``, in name order."""
    sets: dict[str, DataSet] = {}
    reports = sorted(folder.glob("*/results.json")) if folder.is_dir() else []
    if not reports:
        raise TableError(f"no report under {folder}")
    for path in reports:
        record = json.loads(path.read_text(encoding="utf-8"))
        dataset = record.get("dataset") or {}
        name = _set_name(record)
        data = sets.setdefault(name, DataSet(name, dataset.get("queries", "?")))
        settings = record.get("settings") or {}
        if settings.get("end_to_end"):
            data.reader_k.add(int(settings.get("reader_k", READER_K)))
        rules: dict[tuple[str, float | None], set[int]] = {}
        for entry in record.get("methods") or []:
            key = (entry["method"], entry.get("epsilon"))
            rules[key] = rules.get(key, set()) | _rules(entry)
        for row in summarise(record):
            key = (row["method"], row["epsilon"])
            if key in data.cells:
                _merge(data.cells[key], row, path.parent.name, f"{name}: {key[0]} at epsilon "
                       f"{key[1]}")
                data.cells[key].rules |= rules.get(key, set())  # the caption names both
                continue
            data.cells[key] = Cell(row, path.parent.name, rules.get(key, set()))
    return [sets[name] for name in sorted(sets)]


# ------------------------------------------------------------------------------ formatting
def _mean(cell: Cell | None, metric: str) -> float | None:
    stats = None if cell is None else cell.row["metrics"].get(metric)
    return None if stats is None else float(stats["mean"])


def _percent(cell: Cell | None, metric: str) -> str:
    stats = None if cell is None else cell.row["metrics"].get(metric)
    if stats is None:
        return "-"
    mean = f"{100 * stats['mean']:.1f}"
    return f"{mean} ± {100 * stats['std']:.1f} %" if stats["n"] > 1 else f"{mean} %"


def _ratio(cell: Cell | None, rag: Cell | None, metric: str) -> str:
    value, base = _mean(cell, metric), _mean(rag, metric)
    return "-" if value is None or not base else f"{value / base:.2f}"


def _epsilon(value: float | None) -> str:
    return "∞" if value is None or value == float("inf") else f"{value:g}"


def _facts_cells(data: DataSet) -> list[tuple[float, Cell]]:
    return sorted((eps, cell) for (method, eps), cell in data.cells.items()
                  if method == FACTS and eps is not None)


def _caption(sets: list[DataSet]) -> str:
    cells = [cell for data in sets for _, cell in _facts_cells(data)]
    rules = sorted({r for cell in cells for r in cell.rules})
    runs = sorted({cell.row["n_runs"] for cell in cells})
    queries = sorted({str(data.queries) for data in sets})
    shown = ", ".join(str(r) for r in rules) if rules else "not recorded"
    reader = sorted({cell.row["metrics"]["accuracy"]["n"] for cell in cells
                     if "accuracy" in cell.row["metrics"]})
    read = sorted({k for data in sets for k in data.reader_k}, reverse=True)
    texts = f", the reader reading the top {' or '.join(str(k) for k in read)} texts" \
        if read else ""
    accuracy = (f" (accuracy: {' or '.join(str(r) for r in reader)}{texts}, where shown)"
                if reader and reader != runs else "")
    return (f"{' or '.join(queries)} queries per set; {' or '.join(str(r) for r in runs)} "
            f"runs per ε{accuracy}, mean ± sample standard deviation; × RAG: the mean "
            f"divided by private RAG's (code: facts rules {shown}, as every run recorded).")


def _ratios(data: DataSet, rag: Cell | None, metric: str) -> str:
    return " / ".join(_ratio(cell, rag, metric) for _, cell in _facts_cells(data)) or "-"


def render_readme(sets: list[DataSet]) -> str:
    """The README's table: one row per set, the ratios to private RAG at each epsilon (the
    full figures are in docs/evaluation.md's table)."""
    epsilons = sorted({eps for data in sets for eps, _ in _facts_cells(data)})
    shown = " / ".join(_epsilon(e) for e in epsilons)
    lines = [_caption(sets), "",
             f"| set | recall@10 × RAG, ε = {shown} | the same, answers ≥ 40 notes hold | "
             "accuracy × RAG | private RAG: recall@10, accuracy |",
             "|---|---|---|---|---|"]
    for data in sets:
        if not _facts_cells(data):
            continue
        rag = data.cells.get((RAG, None))
        lines.append(f"| {data.name} | {_ratios(data, rag, 'recall_at_k')} | "
                     f"{_ratios(data, rag, 'recall_at_k_supported')} | "
                     f"{_ratios(data, rag, 'accuracy')} | {_percent(rag, 'recall_at_k')}, "
                     f"{_percent(rag, 'accuracy')} |")
    return "\n".join(lines)


def render_guide(sets: list[DataSet], *, link: str = "../benchmarks/results/current") -> str:
    """docs/evaluation.md's table: every cell of every method, its leakage and its report."""
    lines = [_caption(sets), "",
             "| set | method | ε | runs | recall@10 | × RAG | weighted recall | accuracy "
             "| × RAG | names, spans of one note | report |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {RAG: 0, CEILING: 1, FACTS: 2}
    for data in sets:
        rag = data.cells.get((RAG, None))
        keys = sorted(data.cells, key=lambda k: (order.get(k[0], 3), k[0],
                                                  -1.0 if k[1] is None else k[1]))
        for i, key in enumerate(keys):
            cell = data.cells[key]
            leaks = "-"
            if key[0] != RAG:
                names = _mean(cell, "names_in_corpus")
                spans = _mean(cell, "verbatim_spans_one_note")
                inside = _mean(cell, "verbatim_spans_one_note_in_spans")
                leaks = ("-" if names is None or spans is None
                         else f"{names:g}, {spans:g}"
                         + ("" if inside is None else f" ({inside:g} in spans)"))
            ratio = key[0] != RAG
            lines.append(
                f"| {data.name if i == 0 else ''} | {key[0]} | {_epsilon(key[1])} | "
                f"{cell.row['n_runs']} | {_percent(cell, 'recall_at_k')} | "
                f"{_ratio(cell, rag, 'recall_at_k') if ratio else ''} | "
                f"{_percent(cell, 'recall_at_k_weighted')} | {_percent(cell, 'accuracy')} | "
                f"{_ratio(cell, rag, 'accuracy') if ratio else ''} | {leaks} | "
                + ", ".join(f"[{r}]({link}/{r}/results.md)" for r in cell.report.split(", "))
                + " |")
    return "\n".join(lines)


#: each page with its table
TARGETS = {REPO / "README.md": render_readme, REPO / "docs" / "evaluation.md": render_guide}


def replace_block(text: str, table: str, page: str = "the page") -> str:
    """``text`` with the block between the markers replaced by ``table``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise TableError(f"{page} has no {START} ... {END} block")
    return f"{text[:start + len(START)]}\n{table}\n{text[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a table is not what the current reports give")
    args = parser.parse_args(argv)
    try:
        sets = collect(CURRENT)
        changed = {}  # every page is rendered before any is written
        for page, render in TARGETS.items():
            text = page.read_text(encoding="utf-8") if page.is_file() else ""
            new = replace_block(text, render(sets), page.name)
            if new != text:
                changed[page] = new
    except TableError as error:
        print(f"results_table: {error}", file=sys.stderr)
        return 1
    stale = [page.name for page in changed]
    if not args.check:
        for page, new in changed.items():
            page.write_text(new, encoding="utf-8")
            print(f"wrote the results table of {page.name}")
        return 0
    if stale:
        print(f"the results table of {', '.join(stale)} is not current: run {COMMAND}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
