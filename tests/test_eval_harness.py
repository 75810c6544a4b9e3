"""The evaluation harness end to end on a tiny clinic with a tiny model: every method runs,
the report files appear, the private methods spend what they claim, and a rerun resumes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_build import SMALL, HashEmbedder
from test_private_prediction import tiny_llm

import dpsynrag
from dpsynrag.eval.harness import EvalError, EvalSettings, measure_corpus, run_eval
from dpsynrag.models.lazy import LazyModels
from dpsynrag.pipeline.config import FACTS_RULES_VERSION


@pytest.fixture(autouse=True)
def _config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))


def _settings(**overrides) -> EvalSettings:
    options = {k: v for k, v in SMALL.items() if k not in ("seed", "runner")}
    base = dict(n_notes=60, n_diseases=4, seed=5, epsilons=[10.0],
                methods=["non-rag", "rag", "dp-synth", "dp-synrag", "dp-synrag-hard"], runs=1,
                rag_k=3, build_options=options)
    base.update(overrides)
    return EvalSettings(**base)


def test_every_method_runs_and_the_report_is_written(tmp_path: Path) -> None:
    models = LazyModels(tiny_llm(), HashEmbedder())
    results = run_eval(_settings(), tmp_path / "report", models=models)
    assert {(m["method"], m["epsilon"]) for m in results["methods"]} == {
        ("non-rag", None), ("rag", None), ("dp-synth", 10.0), ("dp-synrag", 10.0),
        ("dp-synrag-hard", 10.0)}
    for name in ("results.json", "results.md", "utility_vs_epsilon.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0
    # every run records the package it imported, and the report names it
    package = str(Path(dpsynrag.__file__).resolve().parent)
    assert {m["runs"][0]["code"]["package_dir"] for m in results["methods"]} == {package}
    assert f"facts rules {FACTS_RULES_VERSION}" in (tmp_path / "report" / "results.md"
                                                     ).read_text()
    by_method = {m["method"]: m["runs"][0] for m in results["methods"]}
    # the private RAG baseline retrieves over the notes themselves, which name every disease
    assert by_method["rag"]["recall_at_k"] > 0
    assert by_method["non-rag"]["recall_at_k"] is None
    for method in ("dp-synth", "dp-synrag", "dp-synrag-hard"):
        run = by_method[method]
        assert math.isclose(sum(run["stage_rho"].values()), run["rho"], rel_tol=1e-9)
        assert run["names_in_corpus"] >= 0 and run["verbatim_spans"] >= 0
    # rerunning skips the finished runs: the stored results come back unchanged
    again = run_eval(_settings(), tmp_path / "report", models=models)
    assert json.dumps(again["methods"], sort_keys=True) == json.dumps(results["methods"],
                                                                       sort_keys=True)


def test_corpus_metrics_count_a_leaking_corpus(tmp_path: Path) -> None:
    from dpsynrag.eval.harness import load_data

    models = LazyModels(tiny_llm(), HashEmbedder())
    data = load_data(_settings(), tmp_path)
    leaky = data.notes[:5]  # a "synthetic" corpus that copies private notes verbatim
    result = measure_corpus(leaky, data, models, k=2, end_to_end=False, synthetic=True)
    assert result["names_in_corpus"] >= 1
    assert result["verbatim_spans"] > 0 and result["verbatim_spans_one_note"] > 0
    # each note's own spans (its patient, date, doctor) are spans of one note alone
    assert result["verbatim_spans_one_note"] <= result["verbatim_spans"]
    clean = measure_corpus(["nothing private here at all"], data, models, k=2,
                           end_to_end=False, synthetic=True)
    assert clean["names_in_corpus"] == 0 and clean["verbatim_spans"] == 0
    assert clean["verbatim_spans_one_note"] == 0


def test_unknown_methods_are_refused() -> None:
    with pytest.raises(EvalError, match="unknown method"):
        _settings(methods=["magic"]).validate()


def test_the_reader_instruction_is_the_data_sets_unless_given(tmp_path: Path) -> None:
    from dpsynrag.eval.harness import load_data
    from dpsynrag.prompts.rag import DEFAULT_INSTRUCTION

    assert load_data(_settings(), tmp_path / "a").instruction == DEFAULT_INSTRUCTION
    given = load_data(_settings(instruction="Answer with the product only."), tmp_path / "b")
    assert given.instruction == "Answer with the product only."
    for bad in ("", "   ", "two\nlines"):
        with pytest.raises(EvalError, match="--instruction"):
            _settings(instruction=bad).validate()


def test_a_saved_generated_set_keeps_its_reader_instruction(tmp_path: Path) -> None:
    """A directory written by ``dpsynrag dataset films`` asks for the film's title, as the
    generated set does; a plain directory keeps the default; --instruction still wins."""
    from dpsynrag.eval.datasets_ordinary import make_ordinary_dataset, save_dataset
    from dpsynrag.eval.harness import READER_INSTRUCTIONS, load_data
    from dpsynrag.prompts.rag import DEFAULT_INSTRUCTION

    films = tmp_path / "films"
    save_dataset(make_ordinary_dataset("films", n_notes=120, seed=1), films)
    assert (load_data(_settings(dataset=str(films)), tmp_path / "w1").instruction
            == READER_INSTRUCTIONS["films"])
    given = _settings(dataset=str(films), instruction="Answer with the title only.")
    assert load_data(given, tmp_path / "w2").instruction == "Answer with the title only."
    (films / "films.json").unlink()
    assert (load_data(_settings(dataset=str(films)), tmp_path / "w3").instruction
            == DEFAULT_INSTRUCTION)


def test_a_rerun_with_other_settings_is_refused_not_mixed(tmp_path: Path) -> None:
    from dpsynrag.eval.harness import SETTINGS_FILE, _check_resumable

    report = tmp_path / "report"
    (report / "runs").mkdir(parents=True)
    _check_resumable(_settings(), report)
    assert (report / SETTINGS_FILE).is_file()
    (report / "runs" / "rag-epsinf-run0.json").write_text("{}")
    _check_resumable(_settings(), report)  # the same settings resume
    _check_resumable(_settings(runs=5, epsilons=[1.0, 10.0]), report)  # more runs: resume
    with pytest.raises(EvalError, match="other settings \\(instruction\\)"):
        _check_resumable(_settings(instruction="Answer with the product only."), report)
    with pytest.raises(EvalError, match="build_options, seed"):
        _check_resumable(_settings(seed=3, build_options={"K_e": 2}), report)


def test_query_time_methods_report_accuracy_and_their_composed_total(tmp_path: Path) -> None:
    models = LazyModels(tiny_llm(), HashEmbedder())
    settings = _settings(methods=["dp-rag", "dp-ksa", "sparse-vote"], epsilons=[10.0],
                         n_queries=6,
                         query_options={"dp-rag": {"max_new_tokens": 3},
                                        "dp-ksa": {"ensemble": 4, "answer_tokens": 3,
                                                   "final_tokens": 3},
                                        "sparse-vote": {"max_tokens": 3, "voters": 4}})
    results = run_eval(settings, tmp_path / "report", models=models)
    runs = {m["method"]: m["runs"][0] for m in results["methods"]}
    questions = 6 + 4  # benign + one attack query per disease
    for method, run in runs.items():
        assert run["queries_charged"] == questions, method
        assert 0.0 <= run["accuracy"] <= 1.0 and run["recall_at_k"] is None
        # Q queries cost more than one, less than Q times one (zCDP) or exactly Q (basic)
        assert 10.0 < run["epsilon_total"] <= questions * 10.0 + 1e-9, method
    assert math.isclose(runs["sparse-vote"]["epsilon_total"], questions * 10.0, rel_tol=1e-12)
    assert 0.0 <= runs["dp-ksa"]["ptr_pass_rate"] <= 100.0
    text = (tmp_path / "report" / "results.md").read_text()
    assert "what the queries cost in total" in text


def test_facts_method_and_its_ceiling_run_and_report_weighted_recall(tmp_path: Path) -> None:
    models = LazyModels(tiny_llm(), HashEmbedder())
    settings = _settings(n_notes=300, n_diseases=4, methods=["rag", "dp-synrag-facts",
                                                             "facts-ceiling"],
                         end_to_end=False, build_options={"L": 2, "unit_column": "unit"})
    results = run_eval(settings, tmp_path / "report", models=models)
    by_method = {m["method"]: m for m in results["methods"]}
    assert by_method["dp-synrag-facts"]["epsilon"] == 10.0
    assert by_method["facts-ceiling"]["epsilon"] is None  # not private: no epsilon
    facts = by_method["dp-synrag-facts"]["runs"][0]
    # the default n-gram build: its levels are "phrases" and no role histogram is released
    assert set(facts["stage_rho"]) == {"histogram", "phrases", "cluster_facts"}
    assert math.isclose(sum(facts["stage_rho"].values()), facts["rho"], rel_tol=1e-9)
    for method in ("rag", "dp-synrag-facts", "facts-ceiling"):
        run = by_method[method]["runs"][0]
        assert 0.0 <= run["recall_at_k_weighted"] <= 1.0
    assert by_method["facts-ceiling"]["runs"][0]["names_in_corpus"] == 0
    text = (tmp_path / "report" / "results.md").read_text()
    assert "frequency-weighted" in text and "cluster_facts" in text


def test_tokens_ceiling_is_the_token_build_at_a_budget_where_noise_vanishes(
        tmp_path: Path) -> None:
    from dpsynrag.eval.harness import TOKENS_CEILING_EPSILON

    models = LazyModels(tiny_llm(), HashEmbedder())
    results = run_eval(_settings(methods=["tokens-ceiling"], end_to_end=False),
                       tmp_path / "report", models=models)
    (entry,) = results["methods"]
    assert entry["method"] == "tokens-ceiling" and entry["epsilon"] is None  # not private
    (run,) = entry["runs"]
    assert run["ceiling_epsilon"] == TOKENS_CEILING_EPSILON
    assert math.isclose(run["epsilon_spent"], TOKENS_CEILING_EPSILON, rel_tol=1e-3)
    assert set(run["stage_rho"]) == {"histogram", "retrieval", "prediction"}
    assert 0.0 <= run["recall_at_k"] <= 1.0
    assert "tokens-ceiling" in (tmp_path / "report" / "results.md").read_text()


def test_bad_build_options_are_refused_before_anything_runs(tmp_path: Path) -> None:
    for options, message in (({"bogus": 1}, "unknown option"), ({"K": "abc"}, "--K")):
        with pytest.raises(EvalError, match=message):
            run_eval(_settings(build_options=options), tmp_path / "report",
                     models=LazyModels(tiny_llm(), HashEmbedder()))
        assert not (tmp_path / "report").exists()


def test_a_generated_set_read_from_its_folder_is_described_by_its_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's dataset block names the ``dpsynrag dataset`` command of a set read from a
    folder (not only the folder's path), and says whether that command still writes it."""
    from dpsynrag.eval.datasets_ordinary import write_films_dataset
    from dpsynrag.eval.harness import _load_data

    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the template file's path is relative
    write_films_dataset(tmp_path / "films-set", n_notes=120, n_queries=40, seed=3,
                        templates="benchmarks/sets/blind8/films.toml")
    data = _load_data(EvalSettings(dataset=str(tmp_path / "films-set")), tmp_path / "work")
    assert data.description == {
        "name": "films-set", "queries": 40, "regenerated_identical": True,
        "generated_by": "dpsynrag dataset films --templates benchmarks/sets/blind8/films.toml "
                        "--notes 120 --queries 40 "
                        "--seed 3"}
