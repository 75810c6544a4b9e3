"""The random source: CSPRNG by default, reproducible only when seeded, exact integer draws."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from scipy import stats

from dpsynrag.accounting import secure_rng


def test_seeded_sources_reproduce_and_unseeded_do_not() -> None:
    assert secure_rng(3).bytes(64) == secure_rng(3).bytes(64)
    assert secure_rng(3).bytes(64) != secure_rng(4).bytes(64)
    assert secure_rng().bytes(64) != secure_rng().bytes(64)
    assert secure_rng(3).seeded and not secure_rng().seeded


def test_refused_seeds() -> None:
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            secure_rng(bad)  # type: ignore[arg-type]


def test_integers_are_uniform_including_big_ranges() -> None:
    """Chi-square, fixed seed, alpha = 1e-3 (a correct sampler fails with prob. 1e-3)."""
    rng = secure_rng(11)
    draws = [rng.integers(7) for _ in range(35_000)]
    counts = np.bincount(draws, minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-3
    big = 3 * 2**70 + 1
    samples = [rng.integers(big) for _ in range(2000)]
    assert all(0 <= s < big for s in samples)
    # top third of the range: share should be about 1/3 (binomial test, alpha 1e-3)
    top = sum(s >= 2 * 2**70 for s in samples)
    assert stats.binomtest(top, 2000, (big - 2 * 2**70) / big).pvalue > 1e-3


@pytest.mark.parametrize("high", [1, 2, 7, 61, 2**62 + 3])
def test_integers_array_is_uniform_and_in_range(high: int) -> None:
    """Chi-square on 7 equal-probability bins of [0, high) (high 7: the values themselves;
    bins of unequal size are weighted by their exact size), n = 35,000, fixed seed,
    alpha = 1e-3 per case (a correct sampler fails one case with probability <= 5e-3)."""
    draws = secure_rng(high % 1000 + 31).integers_array(high, 35_000)
    assert draws.dtype == np.int64 and draws.shape == (35_000,)
    assert draws.min() >= 0 and draws.max() < high
    if high == 1:
        assert not draws.any()
        return
    bins = min(high, 7)
    edges = [high * j // bins for j in range(bins + 1)]
    observed = np.histogram(draws, bins=np.asarray(edges, dtype=np.float64))[0]
    sizes = np.diff(np.asarray(edges, dtype=np.float64))
    assert stats.chisquare(observed, 35_000 * sizes / high).pvalue > 1e-3


def test_integers_array_refuses_ranges_it_cannot_draw() -> None:
    for bad in (0, 2**63 + 1):
        with pytest.raises(ValueError):
            secure_rng(0).integers_array(bad, 3)


@pytest.mark.parametrize("numerator,denominator", [(0, 1), (1, 3), (1, 1), (5, 2), (7, 3),
                                                   (10**30 + 7, 3 * 10**29)])
def test_bernoulli_exp_minus_is_exact_in_distribution(numerator: int, denominator: int) -> None:
    """Binomial tests against exp(-n/d) for the array draws (small integers), the
    repeated draws of one rational of any size and the grouped draws of one group,
    n = 40,000 each, fixed seeds,
    alpha = 1e-3 / (the draws compared) per comparison (Bonferroni); exp(0) = 1 must always
    succeed."""
    expected = float(np.exp(-numerator / denominator))
    rng = secure_rng(numerator % 997 + denominator % 991)
    draws = [rng.bernoulli_exp_minus_repeated(40_000, numerator, denominator),
             rng.bernoulli_exp_minus_grouped(np.zeros(40_000, dtype=np.int64), [numerator],
                                             denominator)]
    assert all(d.dtype == bool and d.shape == (40_000,) for d in draws)
    if denominator < 2**40:
        values = np.full(40_000, numerator, dtype=np.int64)
        draws.append(rng.bernoulli_exp_minus_array(values, denominator))
    if numerator == 1 and denominator == 1:
        draws.append(rng.bernoulli_exp_minus_one(40_000))
    for drawn in draws:
        if numerator == 0:
            assert drawn.all()
        else:
            assert stats.binomtest(int(drawn.sum()), 40_000, expected).pvalue > 1e-3 / len(draws)


def test_vectorised_bernoulli_exp_minus_takes_each_elements_own_numerator() -> None:
    """Mixed numerators in one call: each group's frequency against its own exp(-n/d),
    n = 20,000 per group, alpha = 1e-3 / 3 per group."""
    values = np.repeat(np.array([0, 2, 9], dtype=np.int64), 20_000)
    drawn = secure_rng(77).bernoulli_exp_minus_array(values, 4)
    assert drawn[:20_000].all()  # exp(0) = 1
    for n, group in ((2, drawn[20_000:40_000]), (9, drawn[40_000:])):
        assert stats.binomtest(int(group.sum()), 20_000, float(np.exp(-n / 4))).pvalue > 1e-3 / 3


def test_grouped_bernoulli_exp_minus_takes_each_groups_own_rational() -> None:
    """Five rationals of any size over one denominator (gamma 0, 0.3, 1, 2.7 and 12), their
    elements interleaved in one call in a shuffled order: each group's frequency against its
    own exp(-gamma), n = 30,000 per group, alpha = 1e-3 / 4 per group (Bonferroni); the
    groups' results are independent of each other's order (a chi-square test of group 1's
    successes by the group of the element before it)."""
    denominator = 10**40 + 3
    gammas = [0, 0.3, 1, 2.7, 12]
    numerators = [int(g * 10**6) * (denominator // 10**6) for g in gammas]
    groups = np.repeat(np.arange(5), 30_000)
    order = np.argsort(secure_rng(4).words(groups.size))
    groups = groups[order]
    drawn = secure_rng(11).bernoulli_exp_minus_grouped(groups, numerators, denominator)
    assert drawn.dtype == bool and drawn.shape == groups.shape
    assert drawn[groups == 0].all()
    for g in range(1, 5):
        expected = math.exp(-numerators[g] / denominator)
        assert stats.binomtest(int(drawn[groups == g].sum()), 30_000,
                               expected).pvalue > 1e-3 / 4
    ones = np.flatnonzero(groups[1:] == 1) + 1
    table = [[int(drawn[ones][groups[ones - 1] == b].sum()),
              int((~drawn[ones][groups[ones - 1] == b]).sum())] for b in range(5)]
    assert stats.chi2_contingency(table).pvalue > 1e-3


def test_grouped_bernoulli_exp_minus_refuses_bad_arguments() -> None:
    rng = secure_rng(0)
    assert rng.bernoulli_exp_minus_grouped(np.zeros(0, dtype=np.int64), [], 3).size == 0
    for groups, numerators, denominator in (([0], [1], 0), ([0], [-1], 2), ([1], [1], 2),
                                            ([-1], [1], 2)):
        with pytest.raises(ValueError):
            rng.bernoulli_exp_minus_grouped(np.asarray(groups), numerators, denominator)


class _TiedWords:
    """A source whose 64-bit words all equal floor(2^64 r / m): every comparison is a tie,
    settled by the exact remainder draw (its integers come from a seeded source)."""

    def __init__(self, word: int) -> None:
        self.word, self.inner = word, secure_rng(5)

    def words(self, size: int) -> np.ndarray:
        return np.full(size, self.word, dtype=np.uint64)

    def bernoulli_fraction(self, numerator: int, denominator: int) -> bool:
        return self.inner.bernoulli_fraction(numerator, denominator)


def test_a_tied_word_is_settled_by_the_exact_remainder() -> None:
    """r / m = 1/3: q = floor(2^64 / 3) and the remainder's probability is
    (2^64 - 3 q) / 3 = 1/3; with every word tied, the draws are Bernoulli(1/3)
    (binomial test, n = 3,000, alpha = 1e-3)."""
    from dpsynrag.accounting.rng import RandomSource

    q = (1 << 64) // 3
    tied = _TiedWords(q)
    one = np.zeros(3_000, dtype=np.int64)
    drawn = RandomSource._bernoulli_fraction_words(tied, [1], 3, one)  # type: ignore[arg-type]
    assert stats.binomtest(int(drawn.sum()), 3_000, 1 / 3).pvalue > 1e-3
    below = RandomSource._bernoulli_fraction_words(_TiedWords(q - 1), [1], 3, one[:10])  # type: ignore[arg-type]
    above = RandomSource._bernoulli_fraction_words(_TiedWords(q + 1), [1], 3, one[:10])  # type: ignore[arg-type]
    assert below.all() and not above.any()


def test_a_tied_word_in_a_grouped_draw_is_settled_by_the_exact_remainder() -> None:
    """gamma = 1/3: every word equals round 1's q = floor(2^64 / 3), so round 1 is the tie,
    settled with probability 1/3 (the remainder, as above), and round 2 (q smaller) fails:
    the draw is "K odd", Bernoulli(2/3) (binomial test, n = 3,000, alpha = 1e-3)."""
    rng = secure_rng(5)
    q = (1 << 64) // 3
    rng.words = lambda size: np.full(size, q, dtype=np.uint64)  # type: ignore[method-assign]
    drawn = rng.bernoulli_exp_minus_grouped(np.zeros(3_000, dtype=np.int64), [1], 3)
    assert stats.binomtest(int(drawn.sum()), 3_000, 2 / 3).pvalue > 1e-3


def test_uniform_floats_use_53_bits_and_stay_in_range() -> None:
    values = np.asarray(secure_rng(5).random(100_000))
    assert values.min() >= 0.0 and values.max() < 1.0
    assert np.all(values * 2**53 == np.floor(values * 2**53))
    assert stats.kstest(values, "uniform").pvalue > 1e-3
    assert np.all(secure_rng(5).open_unit(10_000) > 0.0)
    assert secure_rng(5).uniform(2.0, 2.0) == 2.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_never_replays_the_parents_buffered_bytes() -> None:
    """Issue 13 (minor): a forked worker must not draw the bytes its parent will draw next."""
    source = secure_rng()
    source.bytes(1)  # fills the 64 KiB buffer from os.urandom
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next 32 bytes, then leave without running pytest's atexit
        os.close(read_end)
        os.write(write_end, source.bytes(32))
        os._exit(0)
    os.close(write_end)
    child = b""
    while len(child) < 32:
        chunk = os.read(read_end, 32 - len(child))
        if not chunk:
            break
        child += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    parent = source.bytes(32)
    assert len(child) == 32
    assert child != parent  # equal with probability 2^-256 when the buffers are independent
