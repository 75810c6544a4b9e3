"""Tests of LimitedDomain top-1 (``dpsynrag.accounting.limited_domain``).

Statistical tests draw from ``secure_rng(<fixed seed>)``, so they are deterministic. Each runs
at significance alpha = 1e-3 (a correct mechanism fails with probability <= 1e-3 for a seed
chosen at random). The expected output distribution (items and ⊥) is computed independently of
the module, by numerically integrating the Gumbel-max race

    P(i wins) = integral pdf_i(x) prod_{j != i} CDF_j(x) dx

over the noisy limited-domain counts and the noisy null score, then cross-checked against
the closed-form softmax. 2 chi-square cases plus 2 "rare event" cases (whose exact failure
probability is computed in the test and asserted to be < 1e-3), so the family-wise
false-positive rate for random seeds is <= 0.4%.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpsynrag.accounting.limited_domain import (
    limited_domain,
    limited_domain_threshold,
    limited_domain_top1,
)
from dpsynrag.accounting.rng import secure_rng

ALPHA = 1e-3


# ----------------------------------------------------------------------------- helpers
def _gumbel_race(locations: np.ndarray, scale: float) -> np.ndarray:
    """P(entry i has the largest value) for independent Gumbel(location_i, scale) variables."""
    locations = np.asarray(locations, dtype=np.float64)

    def log_cdf(x: float) -> np.ndarray:
        return -np.exp(-(x - locations) / scale)

    def density(x: float, i: int) -> float:
        z = (x - locations[i]) / scale
        log_pdf = -z - math.exp(-z) - math.log(scale)
        others = log_cdf(x)
        return math.exp(log_pdf + others.sum() - others[i])

    low = locations.min() - 15.0 * scale
    high = locations.max() + 40.0 * scale
    points = list(locations)
    return np.array(
        [
            integrate.quad(density, low, high, args=(i,), points=points, limit=200,
                           epsabs=1e-12, epsrel=1e-10)[0]
            for i in range(locations.size)
        ]
    )


def _exact_output_distribution(
    counts: np.ndarray, kbar: int, epsilon: float, delta: float, scale_factor: float
) -> tuple[list[int | None], np.ndarray]:
    """Outcomes (domain ids, then None) and their exact probabilities, computed from scratch."""
    counts = np.asarray(counts, dtype=np.float64)
    order = sorted(range(counts.size), key=lambda i: (-counts[i], i))  # plain Python, lowest id
    domain = sorted(order[:kbar])
    next_count = counts[order[kbar]]
    b = scale_factor / epsilon
    null_score = next_count + 1 + b * math.log(min(2, kbar, counts.size - kbar) / delta)
    locations = np.array([counts[i] for i in domain] + [null_score])
    probabilities = _gumbel_race(locations, b)
    softmax = np.exp(locations / b - np.max(locations / b))
    softmax /= softmax.sum()
    np.testing.assert_allclose(probabilities.sum(), 1.0, atol=1e-8)
    np.testing.assert_allclose(probabilities, softmax, atol=1e-8)
    return [*domain, None], probabilities


# ----------------------------------------------------------------------------- V2 vectors
@pytest.mark.parametrize(
    "epsilon,expected",
    [(0.5, 25.412), (1.0, 13.206), (2.0, 7.103), (2.5, 5.882), (5.0, 3.441)],
)
def test_null_threshold_matches_appendix_b2(epsilon: float, expected: float) -> None:
    """h_perp = 1 + ln(2 / 1e-5) / eps with kbar = m = 30, h_(kbar+1) = 0, scale 1/eps."""
    value = limited_domain_threshold(0, 30, epsilon, 1e-5, 50_000, scale_factor=1.0)
    assert round(value, 3) == expected


def test_null_threshold_default_is_the_conservative_scale() -> None:
    """scale_factor = 2 doubles the log term (b = 2 / eps); next_count shifts it additively."""
    dp_opt = limited_domain_threshold(0, 30, 1.0, 1e-5, 50_000, scale_factor=1.0)
    default = limited_domain_threshold(0, 30, 1.0, 1e-5, 50_000)
    assert default - 1.0 == pytest.approx(2.0 * (dp_opt - 1.0))
    assert limited_domain_threshold(4, 30, 1.0, 1e-5, 50_000) == pytest.approx(default + 4.0)


def test_null_threshold_uses_min_of_l0_kbar_and_complement() -> None:
    eps, delta = 1.0, 1e-3
    # d - kbar = 1 is the binding term
    assert limited_domain_threshold(0, 9, eps, delta, 10, scale_factor=1) == pytest.approx(
        1 + math.log(1 / delta)
    )
    # kbar = 1 is the binding term
    assert limited_domain_threshold(0, 1, eps, delta, 10, scale_factor=1) == pytest.approx(
        1 + math.log(1 / delta)
    )
    # a larger l0 sensitivity binds only up to min(kbar, d - kbar)
    assert limited_domain_threshold(
        0, 5, eps, delta, 100, l0_sensitivity=10, scale_factor=1
    ) == pytest.approx(1 + math.log(5 / delta))


# ----------------------------------------------------------------------------- the domain
def test_domain_ties_fill_by_lowest_id() -> None:
    counts = np.array([0, 4, 0, 0, 1, 0])
    domain, next_count = limited_domain(counts, 3)
    assert domain.tolist() == [0, 1, 4]
    assert next_count == 0
    domain, next_count = limited_domain(np.array([2, 3, 2, 2, 3, 0, 2]), 3)
    assert domain.tolist() == [0, 1, 4]  # both 3s, then the lowest-id 2
    assert next_count == 2


def test_domain_of_a_large_vocabulary_is_exact() -> None:
    rng = np.random.default_rng(3)
    counts = np.zeros(50_000, dtype=np.int64)
    voted = rng.choice(50_000, size=12, replace=False)
    counts[voted] = rng.integers(1, 5, size=12)
    domain, next_count = limited_domain(counts, 30)
    reference = sorted(range(counts.size), key=lambda i: (-counts[i], i))
    assert domain.tolist() == sorted(reference[:30])
    assert next_count == counts[reference[30]] == 0


# ----------------------------------------------------------------------------- distribution
@pytest.mark.parametrize(
    "counts,kbar,epsilon,delta,scale_factor,seed",
    [
        # DP-OPT scale; the null score takes a sizeable share of the mass
        (np.array([5, 3, 0, 2, 0, 1, 0, 0]), 3, 1.0, 0.5, 1.0, 201),
        # default scale; fewer than kbar voted tokens, so zero-count ids 0 and 2 fill the domain
        (np.array([0, 4, 0, 0, 1, 0]), 4, 2.0, 0.2, 2.0, 202),
    ],
)
def test_output_distribution_matches_the_exact_gumbel_race(
    counts: np.ndarray, kbar: int, epsilon: float, delta: float, scale_factor: float, seed: int
) -> None:
    """Chi-square goodness of fit of 20k outputs (including ⊥) to the exact race, alpha 1e-3."""
    outcomes, probabilities = _exact_output_distribution(
        counts, kbar, epsilon, delta, scale_factor
    )
    assert probabilities.min() * 20_000 >= 5  # every cell is well populated
    rng = secure_rng(seed)
    draws = [
        limited_domain_top1(counts, kbar, epsilon, delta, rng, scale_factor=scale_factor)
        for _ in range(20_000)
    ]
    assert set(draws) <= set(outcomes)
    observed = np.array([draws.count(outcome) for outcome in outcomes])
    result = stats.chisquare(observed, probabilities * len(draws))
    assert result.pvalue > ALPHA


def test_zero_count_fillers_can_win() -> None:
    """The policy: filler tokens get noise like any other member and can be output."""
    outcomes, probabilities = _exact_output_distribution(np.array([0, 4, 0, 0, 1, 0]), 4, 2.0,
                                                          0.2, 2.0)
    assert outcomes[:4] == [0, 1, 2, 4]
    assert probabilities[0] > 0.01 and probabilities[2] > 0.01


# ----------------------------------------------------------------------------- behaviour
def test_spread_votes_return_bottom() -> None:
    """30 voters, one vote each on 30 different tokens: ⊥ (the exact chance of any other
    outcome in 50 calls is computed below and is < 1e-3)."""
    counts = np.zeros(50_000, dtype=np.int64)
    counts[np.arange(100, 3100, 100)] = 1
    _, probabilities = _exact_output_distribution(counts, 30, 1.0, 1e-5, 2.0)
    assert 50 * (1 - probabilities[-1]) < 1e-2
    rng = secure_rng(301)
    assert all(limited_domain_top1(counts, 30, 1.0, 1e-5, rng) is None for _ in range(50))


def test_agreeing_votes_return_the_token() -> None:
    """28 of 30 votes on token 12345: returned essentially always (each call fails with
    probability < 1e-10, computed below)."""
    counts = np.zeros(50_000, dtype=np.int64)
    counts[12345] = 28
    counts[[7, 8]] = 1
    _, probabilities = _exact_output_distribution(counts, 30, 5.0, 1e-5, 2.0)
    # the domain is 7, 8, 12345 and the 27 lowest zero-count ids: 12345 is the last domain id
    assert np.delete(probabilities, -2).sum() < 1e-10
    rng = secure_rng(302)
    results = [limited_domain_top1(counts, 30, 5.0, 1e-5, rng) for _ in range(200)]
    assert all(result == 12345 for result in results)


def test_output_type_is_a_python_int() -> None:
    counts = np.zeros(100)
    counts[42] = 50.0
    result = limited_domain_top1(counts, 10, 5.0, 1e-5, secure_rng(4), scale_factor=1.0)
    assert type(result) is int and result == 42


def test_seeded_runs_are_reproducible() -> None:
    counts = np.array([3, 2, 2, 1, 0, 0, 0])
    first = [limited_domain_top1(counts, 3, 1.0, 0.3, secure_rng(9)) for _ in range(5)]
    second = [limited_domain_top1(counts, 3, 1.0, 0.3, secure_rng(9)) for _ in range(5)]
    assert first == second


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kbar": 0},
        {"kbar": 10},  # kbar must be < domain size
        {"kbar": True},
        {"kbar": 2.0},
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"epsilon": math.inf},
        {"delta": 0.0},
        {"delta": 1.0},
        {"l0_sensitivity": 0},
        {"scale_factor": 0.5},
        {"scale_factor": math.nan},
    ],
)
def test_invalid_parameters_are_rejected(kwargs: dict) -> None:
    params = {"kbar": 3, "epsilon": 1.0, "delta": 1e-5} | kwargs
    counts = np.arange(10)
    with pytest.raises(ValueError):
        limited_domain_top1(counts, rng=secure_rng(1), **params)


@pytest.mark.parametrize(
    "counts",
    [np.array([1.0, -1.0, 2.0, 0.0]), np.array([1.0, np.nan, 2.0, 0.0]),
     np.array([[1, 2], [3, 4]])],
)
def test_invalid_counts_are_rejected(counts: np.ndarray) -> None:
    with pytest.raises(ValueError):
        limited_domain_top1(counts, 2, 1.0, 1e-5, secure_rng(1))


def test_non_numeric_counts_are_rejected() -> None:
    with pytest.raises(TypeError):
        limited_domain_top1(np.array(["a", "b", "c"]), 1, 1.0, 1e-5, secure_rng(1))


def test_threshold_validation() -> None:
    with pytest.raises(ValueError):
        limited_domain_threshold(0, 10, 1.0, 1e-5, 10)
    with pytest.raises(ValueError):
        limited_domain_threshold(-1, 3, 1.0, 1e-5, 10)
