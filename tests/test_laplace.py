"""Tests of the continuous Laplace sampler (``dpsynrag.accounting.laplace``).

Statistical tests draw from ``secure_rng(<fixed seed>)`` (a reproducible ChaCha20 stream), so
they are deterministic. Each one runs at significance alpha = 1e-3: for a correct sampler and a
seed chosen at random, it fails with probability at most 1e-3 (Bonferroni within a test). This
file has 3 statistical cases, so the family-wise false-positive rate for random seeds is
<= 0.3%.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpsynrag.accounting.laplace import laplace
from dpsynrag.accounting.rng import secure_rng

ALPHA = 1e-3


@pytest.mark.parametrize("scale,seed", [(1.0, 101), (4.0, 102), (0.05, 103)])
def test_laplace_matches_scipy_cdf(scale: float, seed: int) -> None:
    """One-sample KS test of 20k draws against scipy's Laplace(0, scale) CDF, alpha = 1e-3."""
    draws = laplace(scale, secure_rng(seed), 20_000)
    assert isinstance(draws, np.ndarray) and draws.shape == (20_000,)
    assert np.isfinite(draws).all()
    result = stats.kstest(draws, stats.laplace(loc=0.0, scale=scale).cdf)
    assert result.pvalue > ALPHA


def test_kolmogorov_smirnov_detects_the_wrong_scale() -> None:
    """Power check: the same KS test rejects Laplace(1) draws tested as Laplace(1.1)."""
    draws = laplace(1.0, secure_rng(104), 20_000)
    assert stats.kstest(draws, stats.laplace(scale=1.1).cdf).pvalue < 1e-6


def test_shapes_and_scalar_output() -> None:
    rng = secure_rng(1)
    one = laplace(2.0, rng)
    assert isinstance(one, float) and math.isfinite(one)
    assert laplace(2.0, rng, (3, 4)).shape == (3, 4)
    assert laplace(2.0, rng, 1).shape == (1,)
    assert laplace(3, rng, 5).dtype == np.float64  # an int scale is accepted


def test_seeded_draws_are_reproducible() -> None:
    first = laplace(1.5, secure_rng(7), 10)
    second = laplace(1.5, secure_rng(7), 10)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, laplace(1.5, secure_rng(8), 10))


def test_scale_multiplies_a_standard_draw() -> None:
    """Same uniforms, different scale: the draws scale exactly."""
    scaled = laplace(3.0, secure_rng(5), 50)
    np.testing.assert_allclose(scaled, 3.0 * laplace(1.0, secure_rng(5), 50))


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_invalid_scale_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError):
        laplace(bad, secure_rng(1))


@pytest.mark.parametrize("bad", [True, "1.0", None])
def test_non_numeric_scale_is_rejected(bad: object) -> None:
    with pytest.raises(TypeError):
        laplace(bad, secure_rng(1))  # type: ignore[arg-type]
