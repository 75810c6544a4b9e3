"""Tests of DP-KSA's FindBestK and PTR stability test (``dpsynrag.accounting.ptr``).

Statistical tests draw from ``secure_rng(<fixed seed>)``, so they are deterministic. Each runs
at significance alpha = 1e-3 (Bonferroni within a test): a correct mechanism fails with
probability <= 1e-3 for a seed chosen at random. The expected distributions are computed here
from the formulas (softmax of eps * u / 4 in float64; the normal tail of the shifted noisy gap),
not through the module. 3 statistical cases: family-wise false-positive rate <= 0.3% for random
seeds. The power checks show the same samples reject the paper's printed scale (2/eps) and a
PTR test without the quantile shift.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpsynrag.accounting.ptr import (
    find_best_k,
    gap_statistics,
    ptr_pass_probability,
    ptr_stable_gap,
    ptr_zcdp,
)
from dpsynrag.accounting.rng import secure_rng

ALPHA = 1e-3


def _softmax(logits: np.ndarray) -> np.ndarray:
    finite = np.where(np.isfinite(logits), logits, -np.inf)
    weights = np.exp(finite - finite[np.isfinite(finite)].max())
    return weights / weights.sum()


# ----------------------------------------------------------------------------- gaps
def test_gap_statistics_pad_with_zeros() -> None:
    gaps = gap_statistics(np.array([10, 7, 7, 3]), 6)
    assert gaps.tolist() == [3, 0, 4, 3, 0, 0]
    assert gap_statistics(np.array([5]), 1).tolist() == [5]
    assert gap_statistics(np.array([], dtype=np.int64), 2).tolist() == [0, 0]
    assert gap_statistics(np.array([9, 8, 7, 6, 5]), 2).tolist() == [1, 1]  # truncated


def test_gap_statistics_sensitivity_is_two() -> None:
    """One response changes: every count moves by <= 1, every sorted gap by <= 2."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        presence = rng.random((20, 30)) < rng.random(30)  # 20 responses x 30 words
        neighbour = presence.copy()
        neighbour[rng.integers(20)] = rng.random(30) < 0.5  # replace one response
        gaps = gap_statistics(np.sort(presence.sum(0))[::-1], 25)
        other = gap_statistics(np.sort(neighbour.sum(0))[::-1], 25)
        assert np.abs(gaps - other).max() <= 2


@pytest.mark.parametrize(
    "counts,k_max,error",
    [
        (np.array([1, 3, 2]), 2, ValueError),  # not sorted
        (np.array([3, -1]), 2, ValueError),
        (np.array([3.0, np.nan]), 2, ValueError),
        (np.array([[3, 1]]), 2, ValueError),
        (np.array([3, 1]), 0, ValueError),
        (np.array([3, 1]), True, ValueError),
        (np.array(["b", "a"]), 1, TypeError),
    ],
)
def test_gap_statistics_validation(counts: np.ndarray, k_max: int, error: type) -> None:
    with pytest.raises(error):
        gap_statistics(counts, k_max)


# ----------------------------------------------------------------------------- FindBestK
COUNTS = np.array([20, 18, 10, 9, 9, 2])  # gaps for k = 1..8: 2, 8, 1, 0, 7, 2, 0, 0


def _draw_k(epsilon: float, seed: int, regulariser=None, samples: int = 20_000) -> np.ndarray:
    rng = secure_rng(seed)
    draws = [find_best_k(COUNTS, 8, epsilon, rng, regulariser) for _ in range(samples)]
    return np.bincount(draws, minlength=9)[1:]


def test_find_best_k_matches_softmax_with_scale_four_over_epsilon() -> None:
    """Chi-square (alpha 1e-3) of 20k draws against softmax(eps u / 4), u = d_k."""
    epsilon = 2.0
    utilities = np.array([2, 8, 1, 0, 7, 2, 0, 0], dtype=float)
    observed = _draw_k(epsilon, 501)
    expected = _softmax(epsilon * utilities / 4.0) * observed.sum()
    assert expected.min() >= 5
    assert stats.chisquare(observed, expected).pvalue > ALPHA
    # power: the paper's printed scale 2/eps (softmax(eps u / 2)) is rejected by the same data
    printed = _softmax(epsilon * utilities / 2.0) * observed.sum()
    assert stats.chisquare(observed, printed).pvalue < 1e-12


def test_find_best_k_with_a_regulariser() -> None:
    """r(k) = -inf outside [2, 5] and a public bonus of 0.5 k: chi-square, alpha 1e-3."""
    epsilon = 1.5

    def regulariser(k: int) -> float:
        return 0.5 * k if 2 <= k <= 5 else -math.inf

    observed = _draw_k(epsilon, 502, regulariser)
    assert observed[[0, 5, 6, 7]].sum() == 0  # excluded ranks are never drawn
    utilities = np.array([-np.inf, 8 + 1.0, 1 + 1.5, 0 + 2.0, 7 + 2.5, -np.inf, -np.inf, -np.inf])
    probabilities = _softmax(epsilon * utilities / 4.0)
    keep = probabilities > 0
    assert stats.chisquare(observed[keep], probabilities[keep] * observed.sum()).pvalue > ALPHA


def test_find_best_k_range_and_validation() -> None:
    rng = secure_rng(503)
    assert all(1 <= find_best_k(COUNTS, 3, 0.1, rng) <= 3 for _ in range(50))
    assert find_best_k(np.array([], dtype=np.int64), 1, 1.0, rng) == 1
    with pytest.raises(ValueError):
        find_best_k(COUNTS, 4, 1.0, rng, lambda k: -math.inf)
    with pytest.raises(ValueError):
        find_best_k(COUNTS, 4, 1.0, rng, lambda k: math.nan)
    with pytest.raises(ValueError):
        find_best_k(COUNTS, 4, 1.0, rng, lambda k: math.inf)
    with pytest.raises(ValueError):
        find_best_k(COUNTS, 4, 0.0, rng)


# ----------------------------------------------------------------------------- PTR
def test_pass_probability_is_delta_for_unstable_gaps() -> None:
    for gap in (-3.0, 0.0, 1.0, 2.0):
        for sigma, delta in ((1.0, 0.05), (1.276, 5e-5), (8.8, 1e-6)):
            assert ptr_pass_probability(gap, sigma, delta) == pytest.approx(delta, rel=1e-9)


def test_pass_probability_is_monotone_and_half_at_the_shift() -> None:
    sigma, delta = 1.276, 5e-5  # docs/mechanisms.md V4, eps = 5, eps_EM = 1.25
    shift = 2 * sigma * stats.norm.isf(delta)
    assert round(shift, 2) == 9.93
    assert ptr_pass_probability(2 + shift, sigma, delta) == pytest.approx(0.5)
    gaps = np.linspace(2, 40, 50)
    values = [ptr_pass_probability(float(g), sigma, delta) for g in gaps]
    assert all(b >= a for a, b in itertools.pairwise(values))
    assert values[-1] > 0.999


def test_ptr_zcdp_is_one_over_two_sigma_squared() -> None:
    """Gaussian with l2 sensitivity 2 and std 2 sigma: 2^2 / (2 (2 sigma)^2)."""
    assert ptr_zcdp(1.276) == pytest.approx(4 / (2 * (2 * 1.276) ** 2))
    with pytest.raises(ValueError):
        ptr_zcdp(0.0)


def test_empirical_pass_rate_matches_the_exact_probability() -> None:
    """Binomial tests, 10k draws per gap, Bonferroni over 5 gaps (alpha 1e-3 / 5 each).

    delta_ptr = 0.05 is large enough for the unstable gaps (<= 2) to pass visibly often; their
    pass rate must equal delta_ptr (and so never exceed it beyond noise).
    """
    sigma, delta_ptr, trials = 1.0, 0.05, 10_000
    shift = 2 * sigma * stats.norm.isf(delta_ptr)
    gaps = [0.0, 2.0, 4.0, 2.0 + shift, 9.0]
    rng = secure_rng(504)
    for gap in gaps:
        passes = sum(ptr_stable_gap(gap, sigma, delta_ptr, rng) for _ in range(trials))
        expected = stats.norm.sf(stats.norm.isf(delta_ptr) - (max(2.0, gap) - 2.0) / (2 * sigma))
        assert ptr_pass_probability(gap, sigma, delta_ptr) == pytest.approx(expected)
        assert stats.binomtest(passes, trials, expected).pvalue > ALPHA / len(gaps)
        if gap <= 2:
            # power: without the quantile shift, unstable gaps would pass half the time
            assert stats.binomtest(passes, trials, 0.5).pvalue < 1e-12


def test_ptr_validation() -> None:
    rng = secure_rng(1)
    for args in ((math.nan, 1.0, 0.05), (3.0, 0.0, 0.05), (3.0, 1.0, 0.0), (3.0, 1.0, 1.0),
                 (True, 1.0, 0.05)):
        with pytest.raises(ValueError):
            ptr_stable_gap(*args, rng)
        with pytest.raises(ValueError):
            ptr_pass_probability(*args)
