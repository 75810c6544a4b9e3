"""Tests of the sparse vector technique, "below" direction (``sparse_vector.SparseVectorBelow``).

Statistical tests draw from ``secure_rng(<fixed seed>)``, so they are deterministic. Each runs
at significance alpha = 1e-3 (Bonferroni within a test): a correct mechanism fails with
probability <= 1e-3 for a seed chosen at random. The exact trigger probability of a fresh epoch,
P(value + Lap(4/eps) <= tau + Lap(2/eps)), is computed here in closed form (the CDF of a sum
of two independent Laplace variables with different scales) and cross-checked by numerical
integration. 2 statistical cases: family-wise false-positive rate <= 0.2% for random seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.sparse_vector import SparseVectorBelow

ALPHA = 1e-3


def _laplace_sum_cdf(z: float, a: float, b: float) -> float:
    """P(L_a + L_b <= z) for independent Laplace(0, a) and Laplace(0, b), a != b.

    The tail is P(S > z) = (a^2 e^{-z/a} - b^2 e^{-z/b}) / (2 (a^2 - b^2)) for z >= 0, and the
    distribution is symmetric.
    """
    tail = (a * a * math.exp(-abs(z) / a) - b * b * math.exp(-abs(z) / b)) / (2 * (a * a - b * b))
    return 1.0 - tail if z >= 0 else tail


def _trigger_probability(
    value: float, threshold: float, epsilon: float, sens: float = 1.0
) -> float:
    """P(value + Lap(4 s/eps) <= threshold + Lap(2 s/eps)) = P(L_4 + L_2 <= threshold - value)
    (the Laplace is symmetric, so -L_2 has the law of L_2)."""
    return _laplace_sum_cdf(threshold - value, 4 * sens / epsilon, 2 * sens / epsilon)


def _trigger_probability_by_integration(value: float, threshold: float, epsilon: float) -> float:
    """The same probability as an integral over the threshold noise."""
    query, noise = stats.laplace(scale=4 / epsilon), stats.laplace(scale=2 / epsilon)
    return integrate.quad(
        lambda t: noise.pdf(t) * query.cdf(threshold + t - value), -np.inf, np.inf,
        epsabs=1e-12, epsrel=1e-10, limit=200,
    )[0]


@pytest.mark.parametrize("value", [-10.0, 12.0, 15.0, 22.0, 40.0])
def test_closed_form_matches_integration(value: float) -> None:
    assert _trigger_probability(value, 15.0, 0.5) == pytest.approx(
        _trigger_probability_by_integration(value, 15.0, 0.5), abs=1e-9
    )


@pytest.mark.parametrize(
    "values,threshold,epsilon,sensitivity,seed",
    [((12.0, 17.0), 15.0, 0.5, 1.0, 401), ((1.0, 4.0), 3.0, 2.0, 2.0, 402)],
)
def test_fresh_epoch_trigger_rate_matches_the_exact_probability(
    values: tuple[float, float], threshold: float, epsilon: float, sensitivity: float, seed: int
) -> None:
    """Binomial tests (two values, alpha 1e-3 / 2 each) of 10k fresh epochs per value."""
    rng = secure_rng(seed)
    trials = 10_000
    for value in values:
        hits = sum(
            SparseVectorBelow(threshold, epsilon, rng, sensitivity).triggered(value)
            for _ in range(trials)
        )
        expected = _trigger_probability(value, threshold, epsilon, sensitivity)
        assert 0.05 < expected < 0.95
        assert stats.binomtest(hits, trials, expected).pvalue > ALPHA / len(values)


def test_threshold_is_redrawn_only_after_a_trigger() -> None:
    rng = secure_rng(403)
    svt = SparseVectorBelow(10.0, 1.0, rng)
    triggers = 0
    for value in np.linspace(0.0, 20.0, 400):
        before = svt._threshold_hat  # white-box: the private noisy threshold
        hit = svt.triggered(float(value))
        after = svt._threshold_hat
        assert (before != after) == hit
        triggers += hit
    assert 10 < triggers < 390  # both branches exercised
    assert svt.epochs == triggers


def test_query_noise_is_fresh_on_every_call() -> None:
    """Same threshold (no trigger in between), same value: decisions still vary."""
    svt = SparseVectorBelow(0.0, 1.0, secure_rng(404))
    outcomes = set()
    for _ in range(200):
        outcomes.add(svt.triggered(0.0))
        if len(outcomes) == 2:
            break
    assert outcomes == {True, False}


def test_noise_scales_follow_sensitivity_and_epsilon() -> None:
    svt = SparseVectorBelow(5.0, 0.5, secure_rng(1), sensitivity=3.0)
    assert svt.threshold_scale == pytest.approx(12.0)
    assert svt.query_scale == pytest.approx(24.0)


def test_noisy_threshold_is_not_exposed() -> None:
    svt = SparseVectorBelow(15.0, 0.5, secure_rng(405))
    secret = svt._threshold_hat
    text = repr(svt) + str(svt)
    assert repr(secret) not in text and f"{secret:.3f}" not in text
    assert not hasattr(svt, "__dict__")  # slots only: no stray attributes
    public = [name for name in dir(svt) if not name.startswith("_")]
    for name in public:
        attribute = getattr(svt, name)
        if isinstance(attribute, float):
            assert attribute != secret


def test_numpy_scalars_are_accepted() -> None:
    counts = np.array([3, 9, 1])
    svt = SparseVectorBelow(np.float64(5.0), 1.0, secure_rng(2))
    assert isinstance(svt.triggered(counts[1]), bool)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": math.nan},
        {"threshold": math.inf},
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"sensitivity": 0.0},
        {"sensitivity": math.inf},
    ],
)
def test_invalid_parameters_are_rejected(kwargs: dict) -> None:
    params = {"threshold": 1.0, "epsilon": 1.0} | kwargs
    with pytest.raises(ValueError):
        SparseVectorBelow(rng=secure_rng(1), **params)


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "3"])
def test_invalid_values_are_rejected(bad: object) -> None:
    svt = SparseVectorBelow(1.0, 1.0, secure_rng(1))
    with pytest.raises(ValueError):
        svt.triggered(bad)  # type: ignore[arg-type]
    assert svt.epochs == 0
