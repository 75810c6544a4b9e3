"""Weighted partition selection (``accounting.weighted_selection``): the weights' l2 bound,
neighbouring inputs, the delta of the lone unit (statistical), the ledger's record and the
n-gram plan that uses it."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpsynrag.accounting.composition import compose
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.mechanisms import PartitionSelection
from dpsynrag.accounting.partition_threshold import (
    contribution_weight,
    discrete_gaussian_tail,
    weighted_selection_delta,
    weighted_selection_threshold,
)
from dpsynrag.accounting.planner import (
    NGRAM_LEVEL_ITEMS_WEIGHTED,
    PlanError,
    PlanRequest,
    plan_facts,
)
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.weighted_selection import (
    DEFAULT_WEIGHT_SCALE,
    release_weighted_partitions,
    weighted_counts,
)
from dpsynrag.facts.ngrams import ledger_release, level_key, release_ngrams


@pytest.mark.parametrize("scale", [1, 7, 64, 1024])
def test_each_weight_is_the_largest_integer_within_the_l2_bound(scale: int) -> None:
    for m in range(1, 200):
        w = contribution_weight(m, scale)
        assert m * w * w <= scale * scale < m * (w + 1) ** 2
        assert w == math.floor(scale / math.sqrt(m)) or m * (w + 1) ** 2 > scale * scale


def test_removing_a_unit_changes_only_its_own_phrases_by_its_own_weights() -> None:
    units = [["a", "b", "c", "d"], ["a"], ["a", "b"], ["e", "f", "g", "h", "i", "j", "k",
                                                       "l", "m"]]
    scale = 1024
    full = weighted_counts(units, 16, scale)
    for u, own in enumerate(units):
        without = weighted_counts(units[:u] + units[u + 1:], 16, scale)
        diff = {p: full.get(p, 0) - without.get(p, 0) for p in set(full) | set(without)}
        changed = {p for p, d in diff.items() if d}
        assert changed == set(own)  # only its own phrases
        assert all(d == contribution_weight(len(own), scale) for p, d in diff.items() if d)
        assert sum(d * d for d in diff.values()) <= scale * scale  # l2 norm <= W
    assert full["a"] == 512 + 1024 + 724  # 4, 1 and 2 phrases: floor(1024 / sqrt(m))


def test_a_unit_over_its_bound_is_refused_without_naming_a_phrase() -> None:
    with pytest.raises(ValueError, match="more than max_items=2") as error:
        weighted_counts([["secret one", "secret two", "secret three"]], 2, 64)
    assert "secret" not in str(error.value)
    with pytest.raises(ValueError, match="same phrase twice"):
        weighted_counts([["x", "x"]], 4, 64)
    with pytest.raises(ValueError, match="at least max_items"):
        weighted_counts([["x"]], 50, 7)


def test_delta_is_the_worst_unit_size_and_the_threshold_the_smallest_that_fits() -> None:
    sigma, k, scale, delta = 900.0, 12, 1024, 1e-4
    tau = weighted_selection_threshold(sigma, k, scale, delta)
    brute = max(m * Fraction(discrete_gaussian_tail(sigma, tau - contribution_weight(m, scale)))
                for m in range(1, k + 1))
    assert weighted_selection_delta(sigma, k, scale, tau) >= float(brute) * (1 - 1e-15)
    assert weighted_selection_delta(sigma, k, scale, tau) <= delta
    assert weighted_selection_delta(sigma, k, scale, tau - 1) > delta


def test_the_record_reads_back_with_its_costs_and_a_uniform_record_is_unchanged() -> None:
    event = PartitionSelection(sigma=2048.0, max_items=128, threshold=9000, delta=1e-3,
                               weight_scale=1024)
    assert event.cost.rho == pytest.approx(1024**2 / (2 * 2048.0**2))
    assert event.sensitivity() == 1024
    assert event.cost.delta == weighted_selection_delta(2048.0, 128, 1024, 9000)
    assert PartitionSelection.from_params(event.params()) == event
    uniform = PartitionSelection(sigma=3.0, max_items=4, threshold=20, delta=1e-3)
    assert "weight_scale" not in uniform.params()
    with pytest.raises(ValueError, match="smaller than"):
        PartitionSelection(sigma=2048.0, max_items=128, threshold=3000, delta=1e-9,
                           weight_scale=1024)


def test_a_lone_unit_of_one_phrase_is_released_as_often_as_its_tail_says() -> None:
    """Statistical: a phrase one unit alone holds (count W, its only phrase) passes with
    probability P(Z >= tau - W) <= delta_A; measured on both sides of it."""
    scale, k, sigma, delta = 16, 4, 16.0, 0.2
    tau = weighted_selection_threshold(sigma, k, scale, delta)
    p = discrete_gaussian_tail(sigma, tau - scale)
    assert p <= weighted_selection_delta(sigma, k, scale, tau) <= delta
    ledger = Ledger(rng=secure_rng())
    trials = 3000
    hits = sum(bool(release_weighted_partitions(ledger, f"lone/{t}", {"alone": scale},
                                                max_items=k, scale=scale, sigma=sigma,
                                                delta=delta, stage="test"))
               for t in range(trials))
    spread = 4 * math.sqrt(p * (1 - p) / trials)
    assert p - spread <= hits / trials <= p + spread


def test_weighted_ngram_levels_are_one_charge_each_and_never_redrawn() -> None:
    docs = [("the", "red", "door", "opens", "slowly")] * 30 + [("a", "blue", "door")] * 30
    ledger = Ledger(rng=secure_rng(3))
    sigma = 2.0 * 1024
    release = ledger_release(ledger, sigma=sigma, delta=1e-6, weight_scale=1024)
    first = release_ngrams(docs, (1, 2), max_items=8, release=release)
    assert [r.key for r in ledger.releases()] == [level_key(1), level_key(2)]
    assert ledger.total_rho() == pytest.approx(2 * 1024**2 / (2 * sigma**2))
    assert all(r.params["weight_scale"] == 1024 for r in ledger.releases())
    assert "red door" in first.released[2] and "blue" in first.released[1]
    rho = ledger.total_rho()
    assert release_ngrams(docs, (1, 2), max_items=8, release=release) == first
    assert ledger.total_rho() == rho


def test_the_weighted_plan_charges_w_per_level_and_spends_its_rho() -> None:
    plan = plan_facts(PlanRequest(epsilon=3, delta=1e-3, generate="facts", L=1,
                                  ngram_lengths=(1, 2, 4, 8), ngram_weights="weighted"))
    assert plan.ngram_weight_scale == DEFAULT_WEIGHT_SCALE
    assert plan.ngram_items == (NGRAM_LEVEL_ITEMS_WEIGHTED,) * 4
    rho_levels = 4 * DEFAULT_WEIGHT_SCALE**2 / (2 * plan.sigma_A**2)
    assert rho_levels == pytest.approx(plan.rho_A)
    assert compose(plan.events()).rho == pytest.approx(plan.rho_total)
    assert plan.ngram_thresholds == tuple(
        weighted_selection_threshold(plan.sigma_A, k, DEFAULT_WEIGHT_SCALE, plan.level_delta)
        for k in plan.ngram_items)
    assert plan.delta_A <= plan.delta_phrases
    assert type(plan).from_dict(plan.as_dict()) == plan
    uniform = plan_facts(PlanRequest(epsilon=3, delta=1e-3, generate="facts", L=1,
                                     ngram_lengths=(1, 2, 4, 8)))
    assert "ngram_weight_scale" not in uniform.as_dict()
    with pytest.raises(PlanError, match="--ngram-weights"):
        plan_facts(PlanRequest(epsilon=3, delta=1e-3, generate="facts", L=1,
                               ngram_lengths=(1, 2), ngram_weights="sqrt"))


@pytest.mark.parametrize("lengths", ["1", "1,2,4,8"])
def test_verify_checks_each_level_against_the_plans_caps_and_weight_scale(lengths: str) -> None:
    from dpsynrag.accounting.certificate import _check_facts_plan
    from dpsynrag.accounting.composition import records
    from dpsynrag.pipeline.build import make_plan
    from dpsynrag.pipeline.config import make_config

    for weights in ("weighted", "uniform"):
        plan = make_plan(make_config(None, {"ngram_lengths": lengths, "ngram_weights": weights}))
        # one entry per release, as a certificate lists them (records() groups repeats)
        honest = [dict(e, count=1) for e in records(plan.events())
                  for _ in range(int(e.get("count", 1)))]
        problems: list[str] = []
        _check_facts_plan(plan.as_dict(), honest, [], problems)
        assert problems == []  # a single level is n-gram mode too, not the terms' K_e
        wrong = [dict(e) for e in honest]
        level = next(e for e in wrong if e["mechanism"] == "partition_selection")
        level["params"] = {**level["params"], "weight_scale": 4096}
        problems = []
        _check_facts_plan(plan.as_dict(), wrong, [], problems)
        assert "plan: an n-gram level's weight_scale is not the planned one" in problems
