"""Evaluation metrics: hand-made cases with known answers (exact counts, word boundaries)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynrag.eval.metrics import (
    accuracy,
    answer_recall_at_k,
    answer_weights,
    contains_answer,
    mean_std,
    name_leaks,
    names_in_corpus,
    normalise_for_match,
    verbatim_spans,
    weighted_recall_at_k,
)


# ------------------------------------------------------------------ normalisation and matching
@pytest.mark.parametrize(("text", "expected"), [
    ("Velarin Syndrome", "velarin syndrome"),
    ("  VELARIN\t\nsyndrome!! ", "velarin syndrome"),
    ("velarin-syndrome.", "velarin syndrome"),
    ("Ka\u2013Lum\u2011Tor Fever", "ka lum tor fever"),
    ("Dorvan\u2019s Disease", "dorvans disease"),
    ("Dorvan's Disease", "dorvans disease"),
    ("'quoted' text", "quoted text"),
    ("Caf\u00e9 na\u00efve \uff21", "cafe naive a"),
    ("snake_case/and,commas", "snake case and commas"),
    ("", ""),
    ("...", ""),
])
def test_normalise_for_match(text: str, expected: str) -> None:
    assert normalise_for_match(text) == expected


@pytest.mark.parametrize(("text", "answer", "expected"), [
    ("velarin-syndrome.", "Velarin Syndrome", True),
    ("It is VELARIN SYNDROME", "Velarin Syndrome", True),
    ("The answer: Velarin\u2010Syndrome!", "Velarin Syndrome", True),
    ("Velarinx Syndrome", "Velarin Syndrome", False),
    ("xVelarin Syndrome", "Velarin Syndrome", False),
    ("Velarin Syndromes", "Velarin Syndrome", False),
    ("Velarin", "Velarin Syndrome", False),
    ("Ka-Lum Fever", "Ka-Lum Fever", True),
    ("ka lum fever", "Ka-Lum Fever", True),
    ("Kalum Fever", "Ka-Lum Fever", False),
    ("Dorvan\u2019s disease", "Dorvan's Disease", True),
    ("Dorvan disease", "Dorvan's Disease", False),
    ("anything", "", False),
    ("anything", "--", False),
])
def test_contains_answer(text: str, answer: str, expected: bool) -> None:
    assert contains_answer(text, answer) is expected


def test_answer_recall_at_k_counts_queries_with_a_hit() -> None:
    retrieved = [
        ["nothing here", "the patient has velarin-syndrome."],  # hit in second text
        ["Velarinx syndrome", "velarin"],  # near misses only
        [],  # nothing retrieved
        ["KA-LUM FEVER was diagnosed", "Ka-Lum Fever again"],  # two hits: counts once
    ]
    answers = ["Velarin Syndrome", "Velarin Syndrome", "Velarin Syndrome", "Ka-Lum Fever"]
    assert answer_recall_at_k(retrieved, answers) == 0.5
    with pytest.raises(ValueError):
        answer_recall_at_k(retrieved[:2], answers)
    with pytest.raises(ValueError):
        answer_recall_at_k([], [])
    with pytest.raises(TypeError):
        answer_recall_at_k(["a string, not a list"], ["x"])


def test_accuracy() -> None:
    outputs = ["Velarin Syndrome.", "I think it's velarinx", "ka-lum fever", ""]
    answers = ["Velarin Syndrome", "Velarin Syndrome", "Ka-Lum Fever", "Ka-Lum Fever"]
    assert accuracy(outputs, answers) == 0.5
    assert accuracy(["x"], ["x"]) == 1.0
    with pytest.raises(ValueError):
        accuracy(outputs, answers[:3])


# ------------------------------------------------------------------ names
NAMES = ["John Smith", "John A. Smith", "Maria Lopez", "Ann Lee"]


def test_name_leaks_counts_outputs_with_any_full_name() -> None:
    outputs = [
        "Patient JOHN SMITH was seen.",  # John Smith
        "john a smith and maria lopez",  # two names, one output
        "John A. Smith came back.",  # only the middle-initial name
        "John B. Smith is someone else",  # neither (different initial)
        "Johnny Smith, Maria Lopezz, Annie Lee",  # boundaries: no match
        "Smith, John",  # reversed order is not the full name
        "Ann-Lee was here",  # hyphen normalises to a space: match
        "nothing",
    ]
    assert name_leaks(outputs, NAMES) == 4
    assert name_leaks(outputs, ["John A. Smith"]) == 2
    assert name_leaks(outputs, ["John Smith"]) == 1  # "john a smith" is not "john smith"
    assert name_leaks([], NAMES) == 0
    assert name_leaks(outputs, []) == 0


def test_names_in_corpus_counts_distinct_names() -> None:
    corpus = [
        "John Smith visited. John Smith returned.",
        "john smith again; Maria Lopez too",
        "JOHN A. SMITH",
        "Ann Leeward",
    ]
    assert names_in_corpus(corpus, NAMES) == 3
    assert names_in_corpus(corpus, [*NAMES, "john smith"]) == 3  # same name twice
    assert names_in_corpus([], NAMES) == 0
    with pytest.raises(TypeError):
        names_in_corpus("John Smith", NAMES)


# ------------------------------------------------------------------ verbatim spans
PRIVATE = [
    "one two three four five six seven eight nine ten",  # 3 distinct 8-grams
    "alpha beta gamma delta epsilon zeta eta theta",  # exactly one 8-gram
    "short note",  # none
]


def test_verbatim_spans_exact_counts() -> None:
    # The first private note's first 8-gram, with case/punctuation changes: counts once.
    copied = ["One, two: THREE four-five six seven eight!"]
    assert verbatim_spans(copied, PRIVATE) == 1
    # Two overlapping 8-grams (1..9 covers "1..8" and "2..9").
    assert verbatim_spans(["x one two three four five six seven eight nine y"], PRIVATE) == 2
    # A 7-gram alone never counts, nor an 8-gram across two synthetic texts.
    seven = ["alpha beta gamma delta epsilon zeta eta", "theta"]
    assert verbatim_spans(seven, PRIVATE) == 0
    assert verbatim_spans(seven, PRIVATE, n=7) == 1
    # Everything copied, repeated twice: distinct n-grams count once.
    assert verbatim_spans(PRIVATE * 2, PRIVATE) == 4
    assert verbatim_spans(PRIVATE, PRIVATE * 2) == 4
    assert verbatim_spans([], PRIVATE) == 0
    assert verbatim_spans(PRIVATE, []) == 0
    assert verbatim_spans(["short note"], PRIVATE, n=2) == 1


def test_verbatim_spans_max_private_frequency_skips_shared_template_text() -> None:
    private = [
        "the patient presented today with a cough and fever said Ann",
        "the patient presented today with a cough and fever said Bob",
    ]
    synthetic = ["the patient presented today with a cough and fever said Ann"]
    # 11 words: 4 distinct 8-grams in the first note, 3 of them shared with the second note.
    assert verbatim_spans(synthetic, private) == 4
    assert verbatim_spans(synthetic, private, max_private_frequency=1) == 1
    assert verbatim_spans(synthetic, private, max_private_frequency=2) == 4
    with pytest.raises(ValueError):
        verbatim_spans(synthetic, private, n=0)
    with pytest.raises(ValueError):
        verbatim_spans(synthetic, private, max_private_frequency=0)


def test_verbatim_spans_counts_copies_at_benchmark_scale() -> None:
    """Its speed is a target of benchmarks/helper_speed.py, not of this test."""
    rs = np.random.default_rng(0)
    words = [f"w{i}" for i in range(3000)]
    private = [" ".join(rs.choice(words, 120)) for _ in range(2000)]
    synthetic = [" ".join(rs.choice(words, 150)) for _ in range(495)]
    synthetic += private[:5]  # five notes copied whole: 5 × 113 distinct 8-grams
    assert verbatim_spans(synthetic, private) == 5 * 113


# ------------------------------------------------------------------ aggregates
def test_mean_std() -> None:
    assert mean_std([3.0]) == (3.0, 0.0)
    mean, std = mean_std([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert math.isclose(std, math.sqrt(5.0 / 3.0))
    assert mean_std(iter([2, 2])) == (2.0, 0.0)
    with pytest.raises(ValueError):
        mean_std([])


def test_frequency_weighted_recall_weights_queries_by_the_notes_holding_their_answer() -> None:
    notes = ["Diagnosis: Velmor Syndrome.", "velmor syndrome again", "Kraxi's Disease.",
             "nothing here"]
    answers = ["Velmor Syndrome", "Kraxi's Disease", "Absent Fever"]
    weights = answer_weights(answers, notes)
    assert weights == [2, 1, 0]
    retrieved = [["... Velmor Syndrome ..."], ["no"], ["Absent Fever"]]
    assert answer_recall_at_k(retrieved, answers) == pytest.approx(2 / 3)
    assert weighted_recall_at_k(retrieved, answers, weights) == pytest.approx(2 / 3)
    assert weighted_recall_at_k([["no"], ["Kraxi's Disease"], []], answers,
                                weights) == pytest.approx(1 / 3)
    assert weighted_recall_at_k(retrieved, answers, [0, 0, 0]) is None
    with pytest.raises(ValueError):
        weighted_recall_at_k(retrieved, answers, [1, 1])
