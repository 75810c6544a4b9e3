"""The sparse discrete Gaussian (``accounting.sparse_noise``): its kept entries have the law
of the dense draw's kept entries. Statistical tests with fixed seeds; each threshold is a
p-value far from what an exact sampler gives and near what a wrong one gives."""

from __future__ import annotations

import math
from collections import Counter

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpsynrag.accounting import sparse_noise
from dpsynrag.accounting.noise import discrete_gaussian_noise
from dpsynrag.accounting.partition_threshold import (
    discrete_gaussian_tail,
    discrete_gaussian_tail_bracket,
)
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.sparse_noise import (
    discrete_gaussian_kept,
    discrete_gaussian_kept_rows,
    tail_values,
)

P_MIN = 1e-4  # an exact sampler fails one of these tests with probability about this


def _pmf(sigma: float, xs: range) -> np.ndarray:
    weights = np.array([math.exp(-x * x / (2 * sigma * sigma)) for x in xs])
    return weights / weights.sum()


def test_the_tail_bracket_holds_the_tail() -> None:
    for sigma, t in [(0.6, 1), (3.9, 12), (40.0, 120), (499.0, 1500)]:
        low, high = discrete_gaussian_tail_bracket(sigma, t)
        assert low <= high
        assert low <= discrete_gaussian_tail(sigma, t)  # the tail's upper bound
        assert (high - low) / high < mpmath.mpf(10) ** -49
    with pytest.raises(ValueError):
        discrete_gaussian_tail_bracket(600.0, 2000)


@pytest.mark.parametrize(("sigma", "t"), [(3.94, 12), (1.3, 2), (25.0, 60)])
def test_tail_values_follow_the_conditional_law(sigma: float, t: int) -> None:
    values = tail_values(40_000, sigma, t, RandomSource(7))
    assert values.min() >= t
    top = t + int(4 * sigma) + 4
    xs = range(t, top)
    expected = _pmf(sigma, range(t, top + 200))
    expected = np.concatenate([expected[:len(xs)], [expected[len(xs):].sum()]]) * values.size
    observed = np.array([np.sum(values == x) for x in xs] + [np.sum(values >= top)])
    keep = expected >= 5
    rest = observed[~keep].sum(), expected[~keep].sum()
    _, p = stats.chisquare(np.append(observed[keep], rest[0]),
                           np.append(expected[keep], rest[1]))
    assert p > P_MIN


def test_a_wrong_conditional_law_is_seen() -> None:
    # the same test on draws of Z >= t at 1.2 sigma fails: the test has power
    values = tail_values(40_000, 3.94 * 1.2, 12, RandomSource(7))
    xs = range(12, 30)
    expected = _pmf(3.94, range(12, 230))
    expected = np.concatenate([expected[:len(xs)], [expected[len(xs):].sum()]]) * values.size
    observed = np.array([np.sum(values == x) for x in xs] + [np.sum(values >= 30)])
    keep = expected >= 5
    _, p = stats.chisquare(observed[keep], expected[keep] * observed[keep].sum()
                           / expected[keep].sum())
    assert p < 1e-10


def test_the_number_kept_of_zero_entries_is_binomial() -> None:
    rng = RandomSource(3)
    sigma, floor, width = 3.94, 11.8, 6000
    q = discrete_gaussian_tail(sigma, 12)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    kept = [index.size for index, _ in discrete_gaussian_kept_rows([empty] * 2000, width, sigma,
                                                                   floor, rng)]
    mean, var = width * q, width * q * (1 - q)
    # the mean of 2,000 counts: within 4.5 standard errors
    assert abs(np.mean(kept) - mean) < 4.5 * math.sqrt(var / len(kept))
    assert 0.85 < np.var(kept) / var < 1.15


def test_kept_zero_entries_are_everywhere_alike_and_skip_the_counted_ones() -> None:
    rng = RandomSource(5)
    sigma, floor, width = 1.0, 1.0, 40  # t = 1: q about 0.24, many kept per row
    counted = np.array([3, 4, 20, 39])
    hits = np.zeros(width)
    rows = 4000
    for index, value in discrete_gaussian_kept_rows([(counted, np.full(4, 50))] * rows, width,
                                                    sigma, floor, rng):
        assert np.all(np.diff(index) > 0)
        assert set(counted) <= set(index.tolist())  # count 50 >> floor: always kept
        assert np.all(value[~np.isin(index, counted)] >= 1)
        hits[index] += 1
    zero = np.setdiff1d(np.arange(width), counted)
    q = discrete_gaussian_tail(sigma, 1)
    _, p = stats.chisquare(hits[zero], np.full(zero.size, hits[zero].mean()))
    assert p > P_MIN
    assert abs(hits[zero].mean() / rows - q) < 5 * math.sqrt(q * (1 - q) / (rows * zero.size))


def test_the_kept_row_has_the_law_of_the_dense_rows_kept_entries() -> None:
    """A two-sample chi-square over whole outcomes (which entries are kept, with which
    values) of a 6-entry row with two counted entries: sparse against dense."""
    sigma, floor, width = 1.2, 1.5, 6
    counted, counts = np.array([1, 4]), np.array([1, 3])
    row = np.zeros(width, dtype=np.int64)
    row[counted] = counts
    rng_s, rng_d = RandomSource(11), RandomSource(12)
    draws = 30_000

    def outcome(index: np.ndarray, value: np.ndarray) -> tuple[tuple[int, int], ...]:
        return tuple((int(j), min(int(v), 5)) for j, v in zip(index, value, strict=True))

    rows = discrete_gaussian_kept_rows([(counted, counts)] * draws, width, sigma, floor, rng_s)
    sparse = Counter(outcome(index, value) for index, value in rows)
    dense: Counter[tuple[tuple[int, int], ...]] = Counter()
    noise = discrete_gaussian_noise(draws * width, sigma, rng_d).reshape(draws, width)
    for noisy in row + noise:
        kept = np.flatnonzero(noisy >= floor)
        dense[outcome(kept, noisy[kept])] += 1
    common = [o for o in set(sparse) | set(dense) if sparse[o] + dense[o] >= 20]
    table = np.array([[sparse[o] for o in common] + [draws - sum(sparse[o] for o in common)],
                      [dense[o] for o in common] + [draws - sum(dense[o] for o in common)]])
    table = table[:, table.sum(axis=0) > 0]
    _, p, _, _ = stats.chi2_contingency(table)
    assert len(common) > 50
    assert p > P_MIN


def test_the_exact_gap_path_draws_the_same_law(monkeypatch: pytest.MonkeyPatch) -> None:
    # a float margin of 1/2 sends about every gap to the 60-digit path
    monkeypatch.setattr(sparse_noise, "FLOAT_MARGIN", 0.5)
    sparse_noise._log_survival.cache_clear()
    try:
        gaps = sparse_noise._gaps(3000, 2.0, 3, RandomSource(9))
    finally:
        monkeypatch.undo()
        sparse_noise._log_survival.cache_clear()
    q = discrete_gaussian_tail(2.0, 3)
    assert gaps.min() >= 0
    mean = (1 - q) / q
    sd = math.sqrt((1 - q) / (q * q))
    assert abs(gaps.mean() - mean) < 4.5 * sd / math.sqrt(gaps.size)
    # P(G >= m) = (1 - q)^m at a few m
    for m in (1, 3, 8):
        share = float(np.mean(gaps >= m))
        assert abs(share - (1 - q) ** m) < 4.5 * math.sqrt(share * (1 - share) / gaps.size)


def test_a_large_sigma_is_drawn_densely_with_the_same_output_shape() -> None:
    index, value = discrete_gaussian_kept(np.array([2]), np.array([5000]), 50, 600.0,
                                          1800.0, RandomSource(1))
    assert 2 in index.tolist()
    assert np.all(value >= 1800)


def test_bad_rows_are_refused() -> None:
    rng = RandomSource(1)
    for where in ([2, 2], [3, 1], [-1], [7]):
        with pytest.raises(ValueError):
            discrete_gaussian_kept(np.array(where), np.ones(len(where), np.int64), 7, 2.0, 6.0,
                                   rng)
    with pytest.raises(ValueError):
        discrete_gaussian_kept(np.array([1]), np.array([1]), 7, 2.0, 0.0, rng)
    with pytest.raises(TypeError):
        discrete_gaussian_kept(np.array([1]), np.array([1.5]), 7, 2.0, 6.0, rng)


def test_one_row_alone_and_in_a_batch_are_drawn_alike() -> None:
    """A row's entries far above the floor are kept whether it is drawn alone or in a
    batch; an empty batch draws nothing."""
    counted, counts = np.array([0, 2]), np.array([30, 30])
    alone = discrete_gaussian_kept(counted, counts, 3, 2.0, 6.0, RandomSource(4))
    assert alone[0].tolist() == [0, 2]
    batch = discrete_gaussian_kept_rows([(counted, counts), (np.array([1]), np.array([9]))],
                                        3, 2.0, 6.0, RandomSource(4))
    assert len(batch) == 2 and batch[0][0].tolist() == [0, 2]
    assert discrete_gaussian_kept_rows([], 3, 2.0, 6.0, RandomSource(4)) == []


def test_the_noise_is_declared_to_the_ledger() -> None:
    rng = RandomSource(1)
    rng.start_noise_log()
    discrete_gaussian_kept(np.array([1]), np.array([3]), 10, 2.5, 7.0, rng, sensitivity=4.0)
    declared = rng.stop_noise_log()
    # the Gaussian noise the charge is checked against, and the floor the ledger's probe of
    # this sampler needs (accounting.sparse_probe)
    assert [(d.kind, d.scale, d.sensitivity, d.floor) for d in declared] == [
        ("gaussian", 2.5, 4.0, None), ("gaussian_kept", 2.5, None, 7.0)]
