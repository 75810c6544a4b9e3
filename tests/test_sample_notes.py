"""benchmarks/sample_notes.py: ten texts of a report's first epsilon = 10 build, at evenly
spaced positions of its corpus (no one picks them), written beside the report's tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from benchmark_modules import load_benchmark

samples = load_benchmark("sample_notes")


def test_positions_are_evenly_spaced_and_hold_both_ends() -> None:
    assert samples.sample_positions(100, 10) == [0, 11, 22, 33, 44, 55, 66, 77, 88, 99]
    assert samples.sample_positions(4, 10) == [0, 1, 2, 3]
    assert samples.sample_positions(7, 1) == [0]


def test_the_samples_are_the_builds_texts_on_one_line_each(tmp_path: Path) -> None:
    build = tmp_path / "report" / "work" / "builds" / "dp-synrag-facts-eps10-run0"
    build.mkdir(parents=True)
    texts = [f"note {i}\nsecond line" for i in range(30)]
    pq.write_table(pa.table({"id": list(range(30)), "text": texts}), build / "corpus.parquet")
    out = samples.write_samples(tmp_path / "report", "10", 0, 10)
    lines = out.read_text(encoding="utf-8").splitlines()
    written = [line for line in lines if line.split(". ", 1)[0].isdigit()]
    assert len(written) == 10
    assert written[0] == "1. note 0 second line" and written[-1] == "30. note 29 second line"


def test_a_report_without_the_build_exits_2_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert samples.main([str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("sample_notes: ") and error.count("\n") == 1
