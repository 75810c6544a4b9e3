"""Issue 57's eval on any folder set: several answers per query, the supported-query (SearchQA)
metrics, a reader prompt and answer prefix from ``reader.json``, the corpus's span share, and
the n-gram mode's epsilon = inf ceiling through the build's own stage function. Small
generated fixtures only (no real set, no model download)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_build import HashEmbedder
from test_private_prediction import tiny_llm

from dpsynrag.eval import harness
from dpsynrag.eval.datasets import DatasetError, QAItem, load_qa_jsonl
from dpsynrag.eval.harness import EvalError, EvalSettings, load_data, measure_corpus
from dpsynrag.eval.metrics import (
    MIN_SUPPORT,
    accuracy,
    answer_options,
    answer_recall_at_k,
    answer_weights,
    contains_answer,
    first_answer,
    shared_token_ngrams,
    span_share,
    supported_queries,
    weighted_recall_at_k,
)
from dpsynrag.eval.report import write_markdown
from dpsynrag.models.lazy import LazyModels
from dpsynrag.prompts.rag import DEFAULT_INSTRUCTION


@pytest.fixture(autouse=True)
def _config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------ queries.jsonl
def test_answers_lists_are_read_and_answer_alone_still_works(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "queries.jsonl", [
        {"question": "Q1?", "answer": "A1"},  # an older set: one answer
        {"question": "Q2?", "answers": [" Toy Story (1995) ", "Fargo (1996)"]},
        {"question": "Q3?", "answer": "Fargo (1996)", "answers": ["Heat (1995)", "Fargo (1996)"]},
        {"question": "Q4?", "answer": "Alien (1979)", "answers": ["Heat (1995)", "Heat (1995)"]},
    ])
    items = load_qa_jsonl(path)
    assert items[0] == QAItem("line-1", "Q1?", "A1", None)
    assert items[0].answers == ("A1",)
    assert items[1].answer == "Toy Story (1995)"  # the first of the list, stripped
    assert items[1].answers == ("Toy Story (1995)", "Fargo (1996)")
    assert items[2].answer == "Fargo (1996)"  # answer is the primary one, counted once
    assert items[2].answers == ("Fargo (1996)", "Heat (1995)")
    assert items[3].answers == ("Alien (1979)", "Heat (1995)")  # added first, repeats dropped


@pytest.mark.parametrize(("row", "problem"), [
    ({"question": "q"}, "missing field 'answer' (or 'answers')"),
    ({"question": "q", "answers": []}, "'answers' must be a non-empty list"),
    ({"question": "q", "answers": "Fargo"}, "'answers' must be a non-empty list"),
    ({"question": "q", "answers": ["Fargo", 3]}, "'answers' must be a non-empty list"),
    ({"question": "q", "answers": ["Fargo", "  "]}, "'answers' must be a non-empty list"),
    ({"question": "q", "answer": "", "answers": ["Fargo"]}, "'answer' must be a non-empty"),
])
def test_bad_answers_are_one_line_errors_naming_file_and_line(tmp_path: Path, row: Any,
                                                              problem: str) -> None:
    path = _jsonl(tmp_path / "my-set.jsonl", [{"question": "ok", "answer": "a"}, row])
    with pytest.raises(DatasetError) as info:
        load_qa_jsonl(path)
    message = str(info.value)
    assert "\n" not in message and "my-set.jsonl" in message and "line 2" in message
    assert problem in message


# ------------------------------------------------------------------ metrics over answer lists
def test_every_answer_metric_counts_a_query_when_any_of_its_answers_is_found() -> None:
    answers: list[Any] = [("Toy Story (1995)", "Fargo (1996)"), "Heat", ["Alien"]]
    assert contains_answer("we watched fargo (1996)", answers[0])
    assert not contains_answer("we watched Fargo", answers[0])  # the year is part of it
    retrieved = [["about Fargo (1996)."], ["cold"], ["an Alien film", "Heat"]]
    assert answer_recall_at_k(retrieved, answers) == pytest.approx(2 / 3)
    assert accuracy(["Toy Story (1995)", "Heat!", "no idea"], answers) == pytest.approx(2 / 3)
    notes = ["Toy Story (1995) and Fargo (1996)",  # both answers: counts once
             "Fargo (1996)", "Heat at noon", "nothing"]
    weights = answer_weights(answers, notes)
    assert weights == [2, 1, 0]
    assert weighted_recall_at_k(retrieved, answers, weights) == pytest.approx(2 / 3)
    assert weighted_recall_at_k([["x"], ["Heat"], []], answers, weights) == pytest.approx(1 / 3)
    assert first_answer(answers[0]) == "Toy Story (1995)" and first_answer("Heat") == "Heat"
    assert answer_options("Heat") == ("Heat",)
    with pytest.raises(ValueError):
        answer_options([])
    with pytest.raises(TypeError):
        answer_options(["Heat", 3])  # type: ignore[list-item]


def test_supported_queries_are_those_enough_notes_hold() -> None:
    assert MIN_SUPPORT == 40
    assert supported_queries([40, 39, 120, 0]) == [0, 2]
    assert supported_queries([3, 1, 2], 2) == [0, 2]
    assert supported_queries([3, 1], 0) == [0, 1]
    with pytest.raises(ValueError):
        supported_queries([1], -1)


# ------------------------------------------------------------------ span share
def test_span_share_counts_tokens_inside_3_grams_two_notes_share() -> None:
    notes = ["In particular, she likes Toy Story (1995).",
             "Last year she likes Toy Story (1995) a lot",
             "a rare phrase only here",
             "a rare phrase only here",  # the same note twice: two holders
             "single holder words alone"]
    shared = shared_token_ngrams(notes)
    assert ("likes", "Toy", "Story") in shared and ("rare", "phrase", "only") in shared
    assert ("single", "holder", "words") not in shared  # one note holds it
    assert ("In", "particular", ",") not in shared
    # "she likes Toy Story ( 1995 )" = 7 tokens all covered; "zebra" not: 7 of 8
    assert span_share(["she likes Toy Story (1995) zebra"], shared) == pytest.approx(7 / 8)
    # a bare keyword list and a lone holder's text score 0; case is kept
    assert span_share(["Reported: flat abdominal hoarse", "single holder words alone"],
                      shared) == 0.0
    assert span_share(["She Likes TOY story"], shared) == 0.0
    # texts are pooled: 5 covered of 5 + 3 of 6 -> 8 / 11; no tokens: None
    assert span_share(["a rare phrase only here", "x y z rare phrase only"],
                      shared) == pytest.approx(8 / 11)
    assert span_share([], shared) is None and span_share([""], shared) is None
    # one note holding a 3-gram twice is still one holder
    assert shared_token_ngrams(["a b c a b c", "z"]) == frozenset()


# ------------------------------------------------------------------ a folder set
def _folder(root: Path, reader: dict[str, Any] | None = None) -> Path:
    """6 notes: 'Fargo (1996)' in 3, 'Heat (1995)' in 1; queries with one or two answers."""
    root.mkdir(parents=True, exist_ok=True)
    texts = ["She likes Fargo (1996) and snow.", "He likes Fargo (1996) a lot.",
             "They like Fargo (1996) too.", "He likes Heat (1995) at night.",
             "Nothing about films here.", "More about the weather today."]
    _jsonl(root / "notes.jsonl", [{"id": f"n{i}", "text": t} for i, t in enumerate(texts)])
    _jsonl(root / "queries.jsonl", [
        {"id": "a", "question": "Which snowy film?", "answers": ["Fargo (1996)", "Alien"],
         "patient": "Ann Lee"},
        {"id": "b", "question": "Which night film?", "answer": "Heat (1995)"},
    ])
    if reader is not None:
        (root / "reader.json").write_text(json.dumps(reader), encoding="utf-8")
    return root


def test_a_folder_set_keeps_each_querys_answers_and_asks_attacks_of_the_first(
        tmp_path: Path) -> None:
    data = load_data(EvalSettings(dataset=str(_folder(tmp_path / "set"))), tmp_path / "w")
    assert data.answers == [("Fargo (1996)", "Alien"), "Heat (1995)"]
    assert data.answer_weights() == [3, 1]
    assert data.attack_questions == [
        harness.ATTACK_TEMPLATE.replace("{disease}", a) for a in ("Fargo (1996)", "Heat (1995)")]
    assert data.description["queries_with_several_answers"] == 1
    assert data.answer_prefix is None


def test_supported_metrics_cover_only_the_queries_enough_notes_hold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_data(EvalSettings(dataset=str(_folder(tmp_path / "set"))), tmp_path / "w")
    models = LazyModels(tiny_llm(), HashEmbedder())
    corpus = ["A note on Fargo (1996).", "Rain and wind."]  # holds query a's answer only
    result = measure_corpus(corpus, data, models, k=5, end_to_end=False, synthetic=True,
                            min_support=2)
    assert result["supported_queries"] == 1  # Fargo: 3 notes; Heat: 1
    assert result["recall_at_k"] == 0.5 and result["recall_at_k_supported"] == 1.0
    assert 0.0 < result["span_share"] < 1.0  # "likes Fargo ( 1996 )" is not in the corpus
    none = measure_corpus(corpus, data, models, k=5, end_to_end=False, synthetic=True,
                          min_support=4)
    assert none["supported_queries"] == 0 and none["recall_at_k_supported"] is None
    private = measure_corpus(data.notes, data, models, k=5, end_to_end=False, synthetic=False)
    assert "span_share" not in private  # a readability figure of synthetic corpora only

    # end to end: the reader answers "Heat (1995)" to every question -> accuracy 1/2 over
    # all queries, 0 over the supported one (Fargo's)
    monkeypatch.setattr(harness, "reader_answers",
                        lambda llm, prompts, prefix: ["Heat (1995)"] * len(prompts))
    answered = measure_corpus(corpus, data, models, k=5, end_to_end=True, synthetic=False,
                              min_support=2)
    assert answered["accuracy"] == 0.5 and answered["accuracy_supported"] == 0.0


# ------------------------------------------------------------------ reader.json
def test_reader_json_sets_instruction_and_prefix_and_the_options_override_it(
        tmp_path: Path) -> None:
    root = _folder(tmp_path / "set", {"instruction": "Answer with the film's title only.",
                                      "answer_prefix": "The answer is"})
    data = load_data(EvalSettings(dataset=str(root)), tmp_path / "w1")
    assert data.instruction == "Answer with the film's title only."
    assert data.answer_prefix == "The answer is"
    given = EvalSettings(dataset=str(root), instruction="Name it.", answer_prefix="It is")
    data = load_data(given, tmp_path / "w2")
    assert (data.instruction, data.answer_prefix) == ("Name it.", "It is")
    (root / "reader.json").write_text('{"answer_prefix": "Answer:"}')  # both optional
    data = load_data(EvalSettings(dataset=str(root)), tmp_path / "w3")
    assert data.instruction == DEFAULT_INSTRUCTION
    assert data.answer_prefix == "Answer:"


@pytest.mark.parametrize(("content", "problem"), [
    ('{"instructions": "x"}', "unknown key(s) 'instructions'"),
    ('{"answer_prefix": 3}', "'answer_prefix' must be one non-empty line"),
    ('{"instruction": "two\\nlines"}', "'instruction' must be one non-empty line"),
    ('["x"]', "expected a JSON object"),
    ("{not json", "not a JSON file"),
])
def test_a_bad_reader_json_is_a_one_line_error(tmp_path: Path, content: str,
                                               problem: str) -> None:
    root = _folder(tmp_path / "set")
    (root / "reader.json").write_text(content)
    with pytest.raises(EvalError) as info:
        load_data(EvalSettings(dataset=str(root)), tmp_path / "w")
    assert problem in str(info.value) and "reader.json" in str(info.value)
    assert "\n" not in str(info.value)


def test_the_answer_prefix_starts_the_readers_reply_and_is_not_scored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynrag.transforms.private_prediction import response_prefix_ids

    llm = tiny_llm()
    seen: list[list[list[int]]] = []
    real = harness.generate_greedy

    def spy(model: Any, ids: Any, **kwargs: Any) -> list[str]:
        seen.append([list(row) for row in ids])
        return [" Fargo (1996) " for _ in ids]

    monkeypatch.setattr(harness, "generate_greedy", spy)
    prompts = ["Question: which film?", "Question: which other?"]
    replies = harness.reader_answers(llm, prompts, "The answer is")
    forced = response_prefix_ids(llm, "The answer is")
    assert forced and seen == [[[*llm.chat_prompt_ids(p), *forced] for p in prompts]]
    assert replies == ["Fargo (1996)"] * 2  # the continuation alone, stripped
    monkeypatch.setattr(harness, "generate_greedy", real)
    # with the real decoder: the same replies as decoding the prefixed prompts by hand
    assert harness.reader_answers(llm, prompts, "The answer is") == [
        r.strip() for r in real(llm, [[*llm.chat_prompt_ids(p), *forced] for p in prompts],
                                max_new_tokens=harness.READER_TOKENS, pad_multiple=16)]


def test_measure_corpus_reads_with_the_sets_prefix(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = _folder(tmp_path / "set", {"answer_prefix": "The answer is"})
    data = load_data(EvalSettings(dataset=str(root)), tmp_path / "w")
    prefixes: list[str | None] = []

    def reader(llm: Any, prompts: list[str], prefix: str | None) -> list[str]:
        prefixes.append(prefix)
        return ["x"] * len(prompts)

    monkeypatch.setattr(harness, "reader_answers", reader)
    measure_corpus(data.notes, data, LazyModels(tiny_llm(), HashEmbedder()), k=2,
                   end_to_end=True, synthetic=False)
    assert prefixes == ["The answer is", "The answer is"]  # benign and attack questions


def test_the_reader_reads_only_the_top_reader_k_texts(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """recall@k counts all k retrieved texts; the reader's prompt holds only reader_k."""
    root = _folder(tmp_path / "set", {"answer_prefix": "The answer is"})
    data = load_data(EvalSettings(dataset=str(root)), tmp_path / "w")
    shown: list[int] = []

    def prompt(question: str, texts: list[str], **_: Any) -> str:
        shown.append(len(texts))
        return question

    monkeypatch.setattr(harness, "answer_prompt", prompt)
    monkeypatch.setattr(harness, "reader_answers", lambda llm, p, prefix: ["x"] * len(p))
    texts = [f"text {i}" for i in range(6)]
    for reader_k in (1, 3):
        shown.clear()
        measure_corpus(texts, data, LazyModels(tiny_llm(), HashEmbedder()), k=4,
                       end_to_end=True, synthetic=False, reader_k=reader_k)
        assert shown and set(shown) == {reader_k}
    for bad in (0, -1, True):
        with pytest.raises(EvalError, match="--reader-k"):
            EvalSettings(reader_k=bad).validate()  # type: ignore[arg-type]


def test_a_changed_reader_or_min_support_is_not_resumed_into_one_report(tmp_path: Path) -> None:
    from dpsynrag.eval.harness import _check_resumable

    root = _folder(tmp_path / "set", {"answer_prefix": "The answer is"})
    report = tmp_path / "report"
    (report / "runs").mkdir(parents=True)
    _check_resumable(EvalSettings(dataset=str(root)), report)
    (report / "runs" / "rag-epsinf-run0.json").write_text("{}")
    _check_resumable(EvalSettings(dataset=str(root)), report)
    with pytest.raises(EvalError, match="min_support"):
        _check_resumable(EvalSettings(dataset=str(root), min_support=5), report)
    (root / "reader.json").write_text('{"answer_prefix": "Answer:"}')
    with pytest.raises(EvalError, match="reader"):
        _check_resumable(EvalSettings(dataset=str(root)), report)
    # a settings file from before these settings existed resumes at their defaults
    stored = json.loads((report / harness.SETTINGS_FILE).read_text())
    for key in ("answer_prefix", "min_support", "reader"):
        stored.pop(key)
    (report / harness.SETTINGS_FILE).write_text(json.dumps(stored))
    (root / "reader.json").unlink()
    _check_resumable(EvalSettings(dataset=str(root)), report)


def test_bad_prefix_and_min_support_settings_are_refused() -> None:
    for bad in ({"answer_prefix": " "}, {"answer_prefix": "a\nb"}, {"min_support": -1}):
        with pytest.raises(EvalError):
            EvalSettings(**bad).validate()  # type: ignore[arg-type]


def test_the_cli_passes_prefix_and_min_support(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    from dpsynrag.cli import evaluate, main

    assert evaluate.DEFAULT_MIN_SUPPORT == MIN_SUPPORT
    seen: list[EvalSettings] = []
    monkeypatch.setattr(harness, "run_eval", lambda settings, out, **_: seen.append(settings))
    main(["eval", "-o", str(tmp_path / "r"), "--answer-prefix", "The answer is",
          "--min-support", "7"])
    main(["eval", "-o", str(tmp_path / "r2")])
    assert (seen[0].answer_prefix, seen[0].min_support) == ("The answer is", 7)
    assert (seen[1].answer_prefix, seen[1].min_support) == (None, MIN_SUPPORT)


# ------------------------------------------------------------------ the report
def test_the_report_shows_supported_rows_ratios_and_readability(tmp_path: Path) -> None:
    def run(recall: float, supported: float, share: float | None = None) -> dict[str, Any]:
        out = {"recall_at_k": recall, "recall_at_k_supported": supported, "accuracy": recall,
               "accuracy_supported": supported, "supported_queries": 12}
        if share is not None:
            out["span_share"] = share
        return out

    results = {"dataset": {"name": "x"}, "settings": {"rag_k": 10, "min_support": 40},
               "methods": [{"method": "rag", "epsilon": None, "runs": [run(0.8, 0.9)]},
                           {"method": "dp-synrag-facts", "epsilon": 10.0,
                            "runs": [run(0.4, 0.45, 0.8), run(0.4, 0.45, 0.6)]}]}
    text = write_markdown(results, tmp_path / "results.md").read_text()
    assert "Recall@10 over the 12 queries whose answer at least 40 private notes hold" in text
    assert "Accuracy over the 12 queries whose answer at least 40 private notes hold" in text
    assert "| dp-synrag-facts | 10 | 0.50 | 0.50 | 0.50 | 0.50 |" in text  # ratios to RAG
    assert "Recall@10, supported × RAG" in text
    assert "## Readability of the corpus" in text
    assert "| dp-synrag-facts | 70.00 ± 14.14 |" in text  # mean ± std of span share (%)


# ------------------------------------------------------------------ the n-gram ceiling
def test_the_ngram_ceiling_runs_the_builds_stage_function_on_exact_releases(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynrag.facts.ngrams import level_key
    from dpsynrag.facts.span_corpus import span_corpus
    from dpsynrag.facts.span_releases import ExactReleases
    from dpsynrag.pipeline.build import make_plan
    from dpsynrag.pipeline.ngram_stages import ngram_settings
    from dpsynrag.transforms.vocabulary import stopwords

    # as `dpsynrag eval --dataset films --set facts_items=ngrams --set unit_column=unit`
    settings = EvalSettings(dataset="films", n_notes=300, seed=1, epsilons=[10.0], runs=1,
                            rag_k=5, end_to_end=False, methods=["rag", "facts-ceiling"],
                            build_options={"L": 2, "unit_column": "unit",
                                           "facts_items": "ngrams"})
    settings.validate()
    data = load_data(settings, tmp_path / "w")

    def no_terms(*_: Any, **__: Any) -> None:
        raise AssertionError("the n-gram ceiling must not replay the terms mode")

    monkeypatch.setattr(harness, "document_terms", no_terms)
    monkeypatch.setattr(harness, "document_phrases", no_terms)
    models = LazyModels(tiny_llm(), HashEmbedder())
    texts = harness._facts_ceiling_texts(settings, data, models)
    config = harness._build_config(settings, "dp-synrag-facts", 10.0, 0)
    plan = make_plan(config)
    thresholds = {level_key(n): t for n, t in zip(plan.ngram_lengths, plan.ngram_thresholds,
                                                  strict=True)}
    expected = span_corpus(data.notes, ngram_settings(plan, config.L),
                           ExactReleases(thresholds,
                                         weight_scale=plan.ngram_weight_scale or None,
                                         span_weight_scale=plan.span_weight_scale or None),
                           stop=stopwords(),
                           embed=lambda batch: models.embedder.encode(list(batch)))
    assert texts and texts == [note.text for note in expected.notes]  # leftover notes too
    # exact releases at lower thresholds release more n-grams: the plan's tau_j is used
    lower = span_corpus(data.notes, ngram_settings(plan, config.L),
                        ExactReleases({k: 1 for k in thresholds}),
                        stop=stopwords())
    assert [n.text for n in lower.notes] != texts

    results = harness.run_eval(settings, tmp_path / "report",
                               models=LazyModels(tiny_llm(), HashEmbedder()))
    ceiling = next(m for m in results["methods"] if m["method"] == "facts-ceiling")["runs"][0]
    assert ceiling["corpus_size"] == len(texts) and 0.0 < ceiling["span_share"] <= 1.0
    assert "Readability of the corpus" in (tmp_path / "report" / "results.md").read_text()
