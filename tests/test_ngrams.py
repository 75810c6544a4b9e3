"""DP n-gram extraction (``facts.ngrams``): levels, per-unit bounds, neighbouring inputs,
the ledger's charges and delta, and the tokenizer it reads (``facts.tokens``)."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import numpy as np
import pytest

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.partition_selection import phrase_counts
from dpsynrag.accounting.partition_threshold import (
    partition_selection_delta,
    selection_threshold,
)
from dpsynrag.accounting.planner import NGRAM_LEVEL_ITEMS, PlanRequest, plan_facts
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.facts.ngrams import (
    document_key,
    exact_release,
    ledger_release,
    level_candidates,
    level_choices,
    level_key,
    release_ngrams,
    unit_choice,
)
from dpsynrag.facts.spans import is_content, stitch
from dpsynrag.facts.tokens import detokenize, ngram_key, ngram_tokens, tokenize
from dpsynrag.transforms.vocabulary import stopwords

STOP = stopwords()


def public(token: str) -> bool:
    return not is_content(token, STOP)


TITLES = ["Star Wars: Episode IV - A New Hope (1977)", "The Godfather (1972)",
          "Toy Story (1995)", "Back to the Future (1985)", "The Matrix (1999)"]


def profiles(n: int, seed: int = 0) -> list[tuple[str, ...]]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        liked = rng.sample(TITLES, 3)
        docs.append(tokenize(f"Viewer {i} is {rng.randint(18, 70)} years old. In particular, "
                             f"she likes {liked[0]}, {liked[1]} and {liked[2]}."))
    return docs


# ---------------------------------------------------------------------- tokens
def test_tokens_keep_punctuation_digits_and_case_and_split_a_sentence_period() -> None:
    assert tokenize("He was diagnosed with acid reflux. It's 3.5 mg") == (
        "He", "was", "diagnosed", "with", "acid", "reflux", ".", "It", "'s", "3.5", "mg")
    assert tokenize("in the U.S. now") == ("in", "the", "U.S.", "now")
    assert tokenize("Star Wars: Episode IV (1977)") == (
        "Star", "Wars", ":", "Episode", "IV", "(", "1977", ")")
    assert tokenize("two\nlines") == ("two", "lines")


def test_a_title_survives_tokens_and_detokenizing_whole() -> None:
    for title in TITLES:
        assert detokenize(tokenize(title)) == title
    assert ngram_tokens(ngram_key(("a", "b", ","))) == ("a", "b", ",")


# ---------------------------------------------------------------------- levels
def test_each_released_ngram_has_every_window_released_or_public() -> None:
    docs = profiles(300)
    levels = release_ngrams(docs, (1, 2, 4, 8), max_items=24, release=exact_release(20),
                            public=public)
    assert levels.released[8], "long n-grams are released when many units write them"
    lengths = levels.lengths
    for previous, length in itertools.pairwise(lengths):
        for gram in levels.released[length]:
            tokens = ngram_tokens(gram)
            for start in range(length - previous + 1):
                window = tokens[start:start + previous]
                assert ngram_key(window) in levels.released[previous] \
                    or all(public(t) for t in window)
    # every title, with its year, is released whole: inside the released 8-grams stitched
    # by their overlaps (the 12 tokens of "Star Wars: Episode IV - A New Hope (1977)" too)
    stitched = [" ".join(span) for span in stitch(sorted(levels.released[8]))]
    for title in TITLES:
        assert any(ngram_key(tokenize(title)) in span for span in stitched), title


def test_public_tokens_alone_are_never_candidates() -> None:
    tokens = tokenize("of the , and of the cat")
    first = level_candidates(tokens, 1, None, None, public)
    assert set(first) == {"cat"}
    pairs = level_candidates(tokens, 2, {"cat": 30}, 1, public)
    assert "of the" not in pairs and ", and" not in pairs
    assert pairs == {"the cat": 30}


def test_unit_choice_is_bounded_deterministic_and_rarest_first_after_level_one() -> None:
    candidates = {f"g{i}": 100 - i for i in range(20)}
    key = document_key(("a", "b"))
    chosen = unit_choice(candidates, 5, key, first_level=False)
    assert len(chosen) == 5
    assert set(chosen) == {f"g{i}" for i in range(15, 20)}  # the smallest supports
    assert chosen == unit_choice(candidates, 5, key, first_level=False)
    first = unit_choice(candidates, 5, key, first_level=True)
    assert set(first) == {f"g{i}" for i in range(5)}  # the most frequent in the document


def test_removing_a_unit_changes_only_its_own_contributions() -> None:
    """Neighbouring inputs: given the releases of the levels before, every other unit's
    choice is the same and the counts differ by the removed unit's own <= K n-grams."""
    docs = profiles(120, seed=3)
    levels = release_ngrams(docs, (1, 2, 4), max_items=6, release=exact_release(10),
                            public=public)
    keys = [document_key(t) for t in docs]
    for length, previous, previous_length in ((1, None, None),
                                              (2, levels.released[1], 1),
                                              (4, levels.released[2], 2)):
        full = level_choices(docs, length, previous, previous_length, 6, keys, public)
        for removed in (0, 57, 119):
            rest = docs[:removed] + docs[removed + 1:]
            rest_keys = keys[:removed] + keys[removed + 1:]
            without = level_choices(rest, length, previous, previous_length, 6, rest_keys,
                                    public)
            assert without == full[:removed] + full[removed + 1:]
            diff = Counter(phrase_counts(full, 6))
            diff.subtract(phrase_counts(without, 6))
            changed = {g: c for g, c in diff.items() if c}
            assert set(changed) == set(full[removed])
            assert all(c == 1 for c in changed.values()) and len(changed) <= 6


def test_a_unit_listing_more_than_k_ngrams_is_refused() -> None:
    with pytest.raises(ValueError, match="max_items"):
        phrase_counts([["a", "b", "c"]], 2)


def test_lengths_must_grow_by_at_most_double_and_never_shrink() -> None:
    with pytest.raises(ValueError):
        release_ngrams([("a",)], (1, 3), max_items=2, release=exact_release())
    with pytest.raises(ValueError):
        release_ngrams([("a",)], (2, 1), max_items=2, release=exact_release())
    # a repeated length is a second pass (test_a_second_pass_offers_what_the_first_did_not_...)
    release_ngrams([("a",)], (2, 2), max_items=2, release=exact_release())


# ---------------------------------------------------------------------- ledger and delta
def test_every_level_is_one_ledger_release_charged_once_even_when_empty() -> None:
    docs = profiles(60)
    ledger = Ledger(rng=secure_rng(7))
    release = ledger_release(ledger, sigma=3.0, delta=1e-6)
    first = release_ngrams(docs, (1, 2, 4, 8), max_items=4, release=release, public=public)
    keys = [r.key for r in ledger.releases()]
    assert keys == [level_key(n) for n in (1, 2, 4, 8)]
    rho = ledger.total_rho()
    assert rho == pytest.approx(4 * 4 / (2 * 3.0**2))
    again = release_ngrams(docs, (1, 2, 4, 8), max_items=4, release=release, public=public)
    assert again == first and ledger.total_rho() == rho  # read back, never redrawn
    assert ledger.total_delta() <= 4 * 1e-6
    empty = Ledger(rng=secure_rng(1))
    release_ngrams([("x",)], (1, 2), max_items=2,
                   release=ledger_release(empty, sigma=3.0, delta=1e-6), public=public)
    assert [r.key for r in empty.releases()] == [level_key(1), level_key(2)]


def test_the_plan_splits_rho_and_delta_over_the_levels() -> None:
    plan = plan_facts(PlanRequest(epsilon=10, delta=1e-3, generate="facts", L=2, K_e=8,
                                  K_s=4, share_ngrams=0.4, ngram_lengths=(1, 2, 4, 8),
                                  ngram_items=(32, 16, 8, 8)))
    rho_levels = sum(plan.ngram_items) / (2 * plan.sigma_A**2)
    rho_clusters = plan.L * (plan.K_e + plan.K_s) / (2 * plan.sigma_C**2)
    assert rho_levels + rho_clusters == pytest.approx(plan.rho_total)
    assert rho_levels == pytest.approx(0.4 * plan.rho_total)  # share_ngrams
    assert plan.level_delta * 4 == pytest.approx(plan.delta_phrases)
    assert plan.ngram_thresholds == tuple(
        selection_threshold(plan.sigma_A, k, plan.level_delta) for k in plan.ngram_items)
    assert plan.tau_A == max(plan.ngram_thresholds)
    assert plan.delta_A <= plan.delta_phrases
    selections = plan.events().children[:-1]
    assert sorted((leaf.mechanism.max_items, leaf.count) for leaf in selections) == [
        (8, 2), (16, 1), (32, 1)]
    assert plan.rho_hist == 0 and plan.sigma_h == 0
    uniform = plan_facts(PlanRequest(epsilon=10, delta=1e-3, generate="facts", L=2, K_e=8,
                                     ngram_lengths=(1, 2, 4, 8)))
    assert uniform.ngram_items == (NGRAM_LEVEL_ITEMS,) * 4 and uniform.K_e == 8
    again = type(plan).from_dict(plan.as_dict())
    assert again == plan


def test_a_lone_ngram_passes_the_threshold_no_more_often_than_delta() -> None:
    """Statistical: the n-gram only one unit holds (count 1) is released with probability
    at most P(Z >= tau - 1) per n-gram, the per-item part of delta_A."""
    sigma, k, delta = 1.0, 1, 0.05
    tau = selection_threshold(sigma, k, delta)
    bound = partition_selection_delta(sigma, k, tau)
    assert bound <= delta
    ledger = Ledger(rng=secure_rng())
    release = ledger_release(ledger, sigma=sigma, delta=delta)
    trials, hits = 4000, 0
    for trial in range(trials):
        released = release(f"lone/{trial}", [["only one unit"]], k)
        hits += bool(released)
    # binomial upper tail: 4 standard deviations above the bound
    assert hits / trials <= bound + 4 * math.sqrt(bound * (1 - bound) / trials)
    assert np.isfinite(bound)


def test_a_second_pass_offers_what_the_first_did_not_release() -> None:
    from dpsynrag.facts.ngrams import level_keys, merge_pass

    tokens = ("rare", "word", "common", "word", "common")
    first = {"common": 50}
    again = level_candidates(tokens, 1, first, 1)
    assert again == {"rare": 1, "word": 2}  # counted as at a first level, released ones out
    assert level_keys((1, 1, 2, 4, 4)) == ["ngrams/01", "ngrams/01-2", "ngrams/02",
                                           "ngrams/04", "ngrams/04-2"]
    assert merge_pass(first, {"rare": 9}) == {"common": 50, "rare": 9}
    docs = [("a", "b", "c")] * 12 + [("a", "d")] * 3
    levels = release_ngrams(docs, (1, 1, 2), max_items=4, release=exact_release(10))
    assert set(levels.released[1]) == {"a", "b", "c"}  # d (3 holders) passes in neither
    assert "a b" in levels.released[2]
