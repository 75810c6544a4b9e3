#!/usr/bin/env python3
"""Are the answers that many units write kept whole in the corpus? (titles with their year)

Usage: ``.venv/bin/python benchmarks/answers_whole.py REPORT --dataset DIR`` after
``dpsynrag eval --dataset DIR ... -o REPORT``. For each answer string of the set's queries it
counts the private units whose notes hold it verbatim (case kept: "Toy Story (1995)"), reads
the corpus of every ``dp-synrag-facts`` build of the report at ``--epsilon`` (kept under
``REPORT/work/builds/``), and writes ``REPORT/answers-whole-eps{ε}.json``: for answers that
at least k units hold, k in ``--min-units``, how many there are and the share of them each
build writes verbatim. Not a private computation (it reads the private notes): run it on
the evaluation's data, never on a collection you release.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow.parquet as pq


def answer_units(answers: Iterable[str], notes: Sequence[tuple[str, str]]) -> dict[str, int]:
    """{answer: the number of distinct units with a note that holds it verbatim}."""
    units: dict[str, set[str]] = {a: set() for a in answers}
    for unit, text in notes:
        for answer, holders in units.items():
            if answer in text:
                holders.add(unit)
    return {a: len(h) for a, h in units.items()}


def kept_whole(held: dict[str, int], corpus: Sequence[str], min_units: int) -> tuple[int, float]:
    """(how many answers at least ``min_units`` units hold, the share the corpus writes)."""
    wanted = [a for a, n in held.items() if n >= min_units]
    if not wanted:
        return 0, float("nan")
    text = "\n".join(corpus)
    return len(wanted), sum(a in text for a in wanted) / len(wanted)


def read_set(folder: Path) -> tuple[list[str], list[tuple[str, str]]]:
    answers: list[str] = []
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            answers.extend(row.get("answers") or [row["answer"]])
    notes = []
    for number, line in enumerate((folder / "notes.jsonl").read_text(
            encoding="utf-8").splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            notes.append((str(row.get("unit", number)), str(row["text"])))
    return sorted(set(answers)), notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--epsilon", default="10")
    parser.add_argument("--min-units", default="2,10,20,40,80",
                        help="comma-separated thresholds k (default 2,10,20,40,80)")
    args = parser.parse_args(argv)
    builds = sorted((args.report / "work" / "builds").glob(
        f"dp-synrag-facts-eps{args.epsilon}-run*/corpus.parquet"))
    if not builds:
        print(f"answers_whole: {args.report}: no dp-synrag-facts build at epsilon "
              f"{args.epsilon} (run the eval first)", file=sys.stderr)
        return 2
    answers, notes = read_set(args.dataset)
    held = answer_units(answers, notes)
    corpora = [pq.read_table(b, columns=["text"]).column("text").to_pylist() for b in builds]
    rows = []
    for k in (int(v) for v in args.min_units.split(",")):
        shares = [kept_whole(held, [str(t) for t in c], k) for c in corpora]
        values = [s for _, s in shares]
        rows.append({"min_units": k, "answers": shares[0][0], "share_whole": values,
                     "mean": statistics.mean(values) if shares[0][0] else None})
    out = args.report / f"answers-whole-eps{args.epsilon}.json"
    result = {"dataset": str(args.dataset), "builds": [b.parent.name for b in builds],
              "rows": rows}
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for row in rows:
        mean = "-" if row["mean"] is None else f"{row['mean']:.2f}"
        print(f"answers held by >= {row['min_units']:3d} units: {row['answers']:4d}, "
              f"kept whole {mean}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
