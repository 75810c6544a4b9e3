"""benchmarks/writer_probe.py: how a sample file is read and how a rewrite is judged."""

from __future__ import annotations

from pathlib import Path

from benchmark_modules import load_benchmark

probe_module = load_benchmark("writer_probe")


def test_sample_notes_are_read_as_their_spans(tmp_path: Path) -> None:
    samples = tmp_path / "samples-eps10.md"
    samples.write_text("# Sample texts at ε = 10\n\n10 of the 59 texts ...\n\n"
                       "1. Toy Story (1995) … She mostly enjoys drama\n"
                       "43. eight\n", encoding="utf-8")
    assert probe_module.read_samples(samples) == [["Toy Story (1995)", "She mostly enjoys drama"],
                                                  ["eight"]]


def test_a_rewrite_keeps_a_span_only_verbatim_and_added_years_are_counted() -> None:
    spans = ["Toy Story (1995)", "She mostly enjoys drama"]
    whole = probe_module.probe(spans, "She mostly enjoys drama, and Toy Story (1995) too.")
    assert whole["kept"] == 2 and whole["all_kept"] and whole["added_years"] == []
    cut = probe_module.probe(spans, "She mostly enjoys Drama; Toy Story (1995), Liar Liar "
                                    "(1997).")
    assert cut["kept"] == 1 and not cut["all_kept"] and cut["added_years"] == ["1997"]
