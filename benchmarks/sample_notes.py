#!/usr/bin/env python3
"""Write ``samples-eps10.md`` into ``dpsynrag eval`` reports: ten texts of one ε = 10 build.

Usage: ``.venv/bin/python benchmarks/sample_notes.py REPORT [REPORT ...]`` (``--epsilon``,
``--count``, ``--run`` change which build and how many texts). A report keeps its builds under
``REPORT/work/builds/`` (not committed); this reads the corpus of the build
``dp-synrag-facts-eps10-run0`` and writes, beside ``results.md``, the texts at evenly spaced
positions of the corpus in its own order (the build's public order of clusters), so no one
chooses which texts are shown. The corpus is the DP release: showing it costs nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow.parquet as pq


def sample_positions(total: int, count: int) -> list[int]:
    """``count`` evenly spaced positions of ``range(total)`` (all of them when fewer)."""
    if total <= count:
        return list(range(total))
    return [round(i * (total - 1) / (count - 1)) for i in range(count)] if count > 1 else [0]


def write_samples(report: Path, epsilon: str, run: int, count: int) -> Path:
    build = report / "work" / "builds" / f"dp-synrag-facts-eps{epsilon}-run{run}"
    corpus = build / "corpus.parquet"
    if not corpus.is_file():
        raise FileNotFoundError(f"{corpus}: no such build in the report (run the eval first)")
    texts = pq.read_table(corpus, columns=["text"]).column("text").to_pylist()
    picked = sample_positions(len(texts), count)
    lines = [f"# Sample texts at ε = {epsilon}", "",
             f"{len(picked)} of the {len(texts)} texts of the build "
             f"`dp-synrag-facts-eps{epsilon}-run{run}` of this report, at evenly spaced "
             "positions of the corpus (written by `benchmarks/sample_notes.py`).", ""]
    for position in picked:
        text = " ".join(str(texts[position]).split())
        lines.append(f"{position + 1}. {text}")
    out = report / f"samples-eps{epsilon}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--epsilon", default="10", help="the build's epsilon as the report "
                        "names it (default 10)")
    parser.add_argument("--run", type=int, default=0)
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args(argv)
    for report in args.reports:
        try:
            print(write_samples(report, args.epsilon, args.run, args.count))
        except (FileNotFoundError, OSError) as error:
            print(f"sample_notes: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
