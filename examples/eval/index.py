#!/usr/bin/env python3
"""Write examples/eval/README.md: one line per evaluation report in this folder.

Usage: ``.venv/bin/python examples/eval/index.py`` (rewrites the index) or ``--check``
(exit 1 when the committed index is not what this script writes; ``tests/test_eval_index.py``
runs it).

Each ``results-*/results.json`` (written by ``dpsynrag eval``) gives its data set, query
count, runs, the facts rules its package recorded, and the mean recall@10 and answer accuracy
of every (method, epsilon); the index also says which reports the README and the pages of
docs/ cite, so that a reader can tell the current figures from the history.
Run it with the project's Python (``.venv/bin/python``): the means are the reports' own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dpsynrag.eval.report import summarise

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
INDEX = HERE / "README.md"

HEADER = """# Evaluation reports

Every `results-*` folder is one `dpsynrag eval` report (`results.md`, `results.json`, per-run
JSON under `runs/`). This index is written by `.venv/bin/python examples/eval/index.py`
from the reports themselves; `make test` checks it is current. Figures are means over the runs,
recall@10 / answer accuracy in %, per method and ε (`∞`: no privacy; `-`: a baseline
without ε). "Cited by" names the pages that link the report: the README's tables are the
current figures, the others are the history that
[docs/evaluation.md](../../docs/evaluation.md) tells.

| report | data set | queries | runs | facts rules | recall@10 / accuracy (%) | cited by |
|---|---|---|---|---|---|---|
"""


def _cell(stats: dict | None) -> str:
    return "-" if stats is None else f"{100 * stats['mean']:.1f}"


def _epsilon(value: float | None) -> str:
    if value is None:
        return "-"
    return "∞" if value == float("inf") else f"{value:g}"


def _figures(record: dict) -> tuple[str, int, str]:
    """The report's figures (means per method and epsilon, as its own Table 1 computes them:
    ``eval.report.summarise``), its largest run count and its facts rules (as recorded)."""
    rows = summarise(record)
    parts = [f"{row['method']} ε {_epsilon(row['epsilon'])}: "
             f"{_cell(row['metrics'].get('recall_at_k'))} / "
             f"{_cell(row['metrics'].get('accuracy'))}" for row in rows]
    rules = {int(run["code"]["facts_rules"]) for entry in record.get("methods") or []
             for run in entry.get("runs") or []
             if (run.get("code") or {}).get("facts_rules") is not None}
    shown = ", ".join(str(r) for r in sorted(rules)) if rules else "not recorded"
    return "; ".join(parts), max((row["n_runs"] for row in rows), default=0), shown


def _citations(name: str, pages: dict[str, str]) -> str:
    """The pages that link the report (its name then "/" or ")": not a longer name's prefix)."""
    cited = [page for page, text in pages.items() if f"{name}/" in text or f"{name})" in text]
    return ", ".join(cited) if cited else "-"


def render(folder: Path = HERE, repo: Path = REPO) -> str:
    """The index's text for the reports under ``folder``."""
    pages = {str(page.relative_to(repo)): page.read_text(encoding="utf-8")
             for page in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
             if page.is_file()}
    lines = [HEADER]
    for report in sorted(folder.glob("results-*/**/results.json")):
        record = json.loads(report.read_text(encoding="utf-8"))
        name = report.parent.relative_to(folder).as_posix()
        dataset = record.get("dataset") or {}
        figures, runs, rules = _figures(record)
        lines.append(f"| [{name}]({name}/results.md) | {dataset.get('name', '?')} | "
                     f"{dataset.get('queries', '?')} | {runs} | {rules} | {figures} | "
                     f"{_citations(name, pages)} |\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when examples/eval/README.md is not current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = INDEX.read_text(encoding="utf-8") if INDEX.is_file() else ""
        if current != text:
            print("examples/eval/README.md is not current: run .venv/bin/python "
                  "examples/eval/index.py",
                  file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text, encoding="utf-8")
    print(f"wrote {INDEX.relative_to(REPO)}: {text.count(chr(10)) - HEADER.count(chr(10))} "
          "reports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
