"""The random source: CSPRNG by default, reproducible only when seeded, exact integer draws."""

from __future__ import annotations

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


@pytest.mark.parametrize("numerator,denominator", [(0, 1), (1, 3), (1, 1), (5, 2), (7, 3)])
def test_bernoulli_exp_minus_is_exact_in_distribution(numerator: int, denominator: int) -> None:
    """Binomial test against exp(-n/d), fixed seed, alpha = 1e-3 per case."""
    rng = secure_rng(numerator * 100 + denominator)
    trials = 20_000
    hits = sum(rng.bernoulli_exp_minus(numerator, denominator) for _ in range(trials))
    expected = float(np.exp(-numerator / denominator))
    if numerator == 0:
        assert hits == trials
    else:
        assert stats.binomtest(hits, trials, expected).pvalue > 1e-3


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
