"""benchmarks/answers_whole.py: the answers many units write, and whether each build's
corpus writes them verbatim (a title with its year, not cut at its colon)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from benchmark_modules import load_benchmark

whole = load_benchmark("answers_whole")


def test_units_count_once_and_case_and_year_must_match() -> None:
    notes = [("u1", "likes Toy Story (1995) and Heat (1995)"), ("u1", "Toy Story (1995)"),
             ("u2", "likes toy story (1995)"), ("u3", "Toy Story 2 (1999), Toy Story (1995)")]
    held = whole.answer_units(["Toy Story (1995)", "Heat (1995)", "Alien (1979)"], notes)
    assert held == {"Toy Story (1995)": 2, "Heat (1995)": 1, "Alien (1979)": 0}
    assert whole.kept_whole(held, ["In particular: Toy Story (1995), Heat"], 2) == (1, 1.0)
    assert whole.kept_whole(held, ["Toy Story, Heat (1995)"], 1) == (2, 0.5)
    count, share = whole.kept_whole(held, ["anything"], 3)
    assert count == 0 and math.isnan(share)


def test_the_report_gets_a_json_of_every_build(tmp_path: Path) -> None:
    data = tmp_path / "set"
    data.mkdir()
    (data / "queries.jsonl").write_text(json.dumps({"question": "q", "answers": ["Heat (1995)"]})
                                        + "\n" + json.dumps({"question": "r", "answer": "Up"}))
    (data / "notes.jsonl").write_text("\n".join(
        json.dumps({"unit": f"u{i}", "text": "Heat (1995) and Up"}) for i in range(3)))
    for run, text in enumerate(["Heat (1995)", "Heat, Up"]):
        build = tmp_path / "r" / "work" / "builds" / f"dp-synrag-facts-eps10-run{run}"
        build.mkdir(parents=True)
        pq.write_table(pa.table({"text": [text]}), build / "corpus.parquet")
    assert whole.main([str(tmp_path / "r"), "--dataset", str(data), "--min-units", "3"]) == 0
    result = json.loads((tmp_path / "r" / "answers-whole-eps10.json").read_text())
    assert result["rows"] == [{"min_units": 3, "answers": 2, "share_whole": [0.5, 0.5],
                               "mean": 0.5}]
    assert whole.main([str(tmp_path / "none"), "--dataset", str(data)]) == 2
