"""The ledger's statistical self-check of the Gaussian sampler (issue 58, item 2): at the first
draw of each sigma, a public probe of ``noise.PROBE_DRAWS`` draws of the sampler at that sigma
must have a mean square within 1 +- ``PROBE_TOLERANCE`` of the exact variance.

The false refusal of an exact sampler is bounded by Chernoff's inequality with the discrete
Gaussian's exact moment generating function (``noise.probe_refusal_bound``): evaluated here on
a grid of sigma, checked against simulation where it is not negligible, and the probe is shown
to refuse samplers at sigma / 2 and sigma / sqrt(2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from declared_noise import as_drawn

from dpsynrag.accounting import ledger as ledger_module
from dpsynrag.accounting import noise
from dpsynrag.accounting.ledger import Charge, Ledger, SamplerCheckError
from dpsynrag.accounting.noise import (
    PROBE_DRAWS,
    PROBE_MIN_SIGMA,
    PROBE_REFUSAL_BOUND,
    PROBE_TOLERANCE,
    discrete_gaussian,
    discrete_gaussian_variance,
    probe_refusal_bound,
    probe_sampler,
)
from dpsynrag.accounting.rng import RandomSource, secure_rng

SIGMAS = [PROBE_MIN_SIGMA, 0.8, 1.0, 1.3, 2.0, 3.0, 7.0710678, 12.5, 29.99, 30.0, 100.0,
          2048.0, 1e6, 1e12]


@pytest.mark.parametrize("sigma", SIGMAS)
def test_an_exact_sampler_is_refused_with_probability_below_1e_minus_9(sigma: float) -> None:
    bound = probe_refusal_bound(sigma)
    assert bound <= PROBE_REFUSAL_BOUND == 1e-9
    assert bound < 1e-16  # what the docs state


def test_the_bound_is_chernoffs_for_a_continuous_gaussian_at_large_sigma() -> None:
    """For large sigma the discrete Gaussian's X^2 / sigma^2 is chi-square(1): the bound is
    exp(-n (t - log(1 + t)) / 2) + exp(-n (-t - log(1 - t)) / 2), to the grid's precision."""
    n, t = PROBE_DRAWS, PROBE_TOLERANCE
    chi2 = math.exp(-n * (t - math.log1p(t)) / 2) + math.exp(-n * (-t - math.log1p(-t)) / 2)
    assert probe_refusal_bound(1e4) == pytest.approx(chi2, rel=0.05)


def test_the_bound_holds_where_it_is_not_negligible() -> None:
    """With 40 draws the bound is large enough to be checked by simulation: the exact
    sampler's refusal rate over 2,000 probes stays below it (it is an upper bound)."""
    draws, probes = 40, 2000
    rng = secure_rng(58)
    for sigma in (1.0, 5.0):
        bound = probe_refusal_bound(sigma, draws=draws)
        assert 0.05 < bound < 1
        x = noise.discrete_gaussian_noise(draws * probes, sigma, rng).astype(np.float64)
        ratios = (x.reshape(probes, draws) ** 2).mean(axis=1) / discrete_gaussian_variance(sigma)
        refused = float(np.mean(np.abs(ratios - 1) > PROBE_TOLERANCE))
        # the rate's standard error is below 0.012: 4 of them of slack
        assert refused <= bound + 0.05, (sigma, refused, bound)


def test_the_exact_variance_is_sigma_squared_except_for_small_sigma() -> None:
    assert discrete_gaussian_variance(50.0) == 2500.0
    assert discrete_gaussian_variance(3.0) == pytest.approx(9.0, rel=1e-12)
    x = np.arange(-40, 41, dtype=np.float64)
    w = np.exp(-x * x / (2 * 0.8**2))
    assert discrete_gaussian_variance(0.8) == pytest.approx(float(np.sum(x * x * w) / w.sum()),
                                                            rel=1e-12)


@pytest.mark.parametrize("sigma", [1.0, 7.0710678, 2048.0])
def test_the_probe_of_the_exact_sampler_passes(sigma: float) -> None:
    assert abs(probe_sampler(sigma) - 1.0) <= PROBE_TOLERANCE


@pytest.mark.parametrize("factor", [0.5, 1 / math.sqrt(2), 1.6])
def test_the_probe_sees_a_sampler_at_another_scale(factor: float,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real = noise.discrete_gaussian_noise
    monkeypatch.setattr(noise, "discrete_gaussian_noise",
                        lambda size, sigma, rng: real(size, sigma * factor, rng))
    for sigma in (1.0, 7.0710678, 300.0):
        assert abs(probe_sampler(sigma) - 1.0) > PROBE_TOLERANCE


def _gaussian_charge(sigma: float) -> Charge:
    return Charge("a-histogram", "discrete_gaussian", {"sigma": sigma, "l2_sensitivity": 1.0},
                  1.0, "l2")


def test_the_ledger_refuses_a_release_whose_sampler_draws_at_half_its_sigma(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-line refusal naming the problem and the declared (public) sigma; the charge is
    rolled back and nothing is stored."""
    real = noise.discrete_gaussian_noise
    monkeypatch.setattr(noise, "discrete_gaussian_noise",
                        lambda size, sigma, rng: real(size, sigma / 2, rng))
    ledger = Ledger(rng=secure_rng(3))
    charge = _gaussian_charge(4.0)
    with pytest.raises(SamplerCheckError) as error:
        ledger.release("histogram", charge,
                       lambda rng: discrete_gaussian(np.arange(5), 4.0, rng, sensitivity=1.0))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("release 'histogram': the discrete Gaussian sampler does not "
                              "draw at the sigma 4 it declares")
    assert ledger.releases() == [] and ledger.total_rho() == 0.0
    monkeypatch.setattr(noise, "discrete_gaussian_noise", real)
    value = ledger.release("histogram", charge,
                           lambda rng: discrete_gaussian(np.arange(5), 4.0, rng,
                                                         sensitivity=1.0))
    assert value.shape == (5,)


def test_each_sigma_is_probed_once_per_ledger_and_small_sigmas_not_at_all(
        monkeypatch: pytest.MonkeyPatch) -> None:
    probed: list[float] = []
    real = noise.probe_sampler

    def spy(sigma: float) -> float:
        probed.append(sigma)
        return real(sigma)

    monkeypatch.setattr(ledger_module, "probe_sampler", spy)
    ledger = Ledger(rng=secure_rng(4))
    for i, sigma in enumerate([3.0, 3.0, 5.0, 3.0, PROBE_MIN_SIGMA / 2]):
        charge = _gaussian_charge(sigma)
        ledger.release(f"h{i}", charge, as_drawn(charge, 0))
    assert probed == [3.0, 5.0]
    another = Ledger(rng=secure_rng(4))
    charge = _gaussian_charge(3.0)
    another.release("h", charge, as_drawn(charge, 0))
    assert probed == [3.0, 5.0, 3.0]  # each ledger (each build) probes its own sigmas


def test_the_probe_leaves_a_seeded_ledgers_draws_unchanged() -> None:
    """The probe has its own CSPRNG source: a seeded build draws what it drew before."""
    counts = np.arange(50, dtype=np.int64)
    ledger = Ledger(rng=secure_rng(11))
    charge = _gaussian_charge(6.0)
    drawn = ledger.release("h", charge,
                           lambda rng: discrete_gaussian(counts, 6.0, rng, sensitivity=1.0))
    expected = discrete_gaussian(counts, 6.0, secure_rng(11))
    assert drawn.tolist() == expected.tolist()


def test_the_probe_costs_a_few_hundred_kilobytes_of_randomness(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A build probes each of its sigmas once: four of a facts build, up to 1e6. Its cost is
    counted in random bytes drawn, not timed (benchmarks time things; tests do not)."""
    drawn: list[int] = []
    real = RandomSource.bytes

    def counting(self: RandomSource, n: int) -> bytes:
        drawn.append(n)
        return real(self, n)

    monkeypatch.setattr(RandomSource, "bytes", counting)
    for sigma in (2.0, 7.0710678, 2048.0, 1e6):
        drawn.clear()
        probe_sampler(sigma)
        # 2,000 draws: a few rounds of a few 64-bit words per proposal
        assert sum(drawn) < 400 * PROBE_DRAWS
