"""The ledger's self-check of the sparse kept-entries sampler (``accounting.sparse_probe``): an
exact sampler passes and its refusal bound is tiny; a sampler keeping zero cells at the wrong
rate, drawing their values at the wrong scale or bunching them is refused by the ledger, which
then stores nothing; each (sigma, floor) is probed once per ledger."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynrag.accounting import ledger as ledger_module
from dpsynrag.accounting import sparse_noise, sparse_probe
from dpsynrag.accounting.ledger import Charge, Ledger, SamplerCheckError
from dpsynrag.accounting.noise import PROBE_MIN_SIGMA
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.sparse_noise import discrete_gaussian_kept
from dpsynrag.accounting.sparse_probe import REFUSAL_BOUND, probe_kept, refusal_bound

SIGMAS = [PROBE_MIN_SIGMA, 1.0, 2.5, 9.0, 40.0, 157.3, 499.0]


@pytest.mark.parametrize("sigma", SIGMAS)
def test_an_exact_sampler_is_refused_with_probability_below_3e_minus_12(sigma: float) -> None:
    assert refusal_bound(sigma, math.ceil(3 * sigma)) < REFUSAL_BOUND == 3e-12


@pytest.mark.parametrize("sigma", [1.0, 9.0, 157.3])
def test_the_probe_of_the_exact_sampler_passes(sigma: float) -> None:
    probe = probe_kept(sigma, math.ceil(3 * sigma))
    assert probe is not None and probe.passes
    assert probe.expected_kept == pytest.approx(sparse_probe.PROBE_KEPT, rel=1e-3)
    assert 0.0 < probe.expected_tail_share < 1.0


def _half_rate_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sparse_noise._kept_zero_ranks
    monkeypatch.setattr(sparse_noise, "_kept_zero_ranks",
                        lambda n, sigma, t, rng: real(n, sigma, t, rng)[::2])


def _tail_at_half_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sparse_noise.tail_values
    monkeypatch.setattr(sparse_noise, "tail_values",
                        lambda size, sigma, t, rng: real(size, sigma / 2, t, rng))


def _bunched_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sparse_noise._kept_zero_ranks
    monkeypatch.setattr(sparse_noise, "_kept_zero_ranks",
                        lambda n, sigma, t, rng: np.sort(real(n, sigma, t, rng) // 2))


WRONG = {"half the rate": _half_rate_ranks, "tail at half scale": _tail_at_half_scale,
         "bunched": _bunched_ranks}


@pytest.mark.parametrize("wrong", WRONG)
def test_the_probe_sees_a_wrong_sampler(wrong: str, monkeypatch: pytest.MonkeyPatch) -> None:
    WRONG[wrong](monkeypatch)
    for sigma in (2.5, 40.0):
        probe = probe_kept(sigma, math.ceil(3 * sigma))
        assert probe is not None and not probe.passes


def _histogram_charge(sigma: float) -> Charge:
    return Charge("a-histogram", "discrete_gaussian", {"sigma": sigma, "l2_sensitivity": 1.0},
                  1.0, "l2")


def _sparse_draw(sigma: float, width: int = 50) -> object:
    cells, counts = np.array([3, 7]), np.array([40, 2])
    return lambda rng: [part.tolist() for part in discrete_gaussian_kept(
        cells, counts, width, sigma, 3 * sigma, rng, sensitivity=1.0)]


def test_the_ledger_refuses_a_sparse_release_whose_tail_sampler_is_wrong(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense sampler is exact here, so only the sparse probe can see it: one line, the
    charge rolled back, nothing stored; with the exact sampler the same release goes through."""
    _tail_at_half_scale(monkeypatch)
    ledger = Ledger(rng=secure_rng(5))
    with pytest.raises(SamplerCheckError) as error:
        ledger.release("cluster/00000/facts", _histogram_charge(6.0), _sparse_draw(6.0))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("release 'cluster/00000/facts': the sparse discrete Gaussian "
                              "sampler does not draw the kept entries of N_Z(0, 6^2) at or "
                              "above 18")
    assert ledger.releases() == [] and ledger.total_rho() == 0.0
    monkeypatch.undo()
    index, value = ledger.release("cluster/00000/facts", _histogram_charge(6.0),
                                  _sparse_draw(6.0))
    assert 3 in index and min(value) >= 18


def test_each_sigma_and_floor_is_probed_once_per_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    probed: list[tuple[float, int]] = []

    def spy(sigma: float, t: int) -> sparse_probe.KeptProbe | None:
        probed.append((sigma, t))
        return probe_kept(sigma, t)

    monkeypatch.setattr(ledger_module, "probe_kept", spy)
    ledger = Ledger(rng=secure_rng(6))
    for i, sigma in enumerate([4.0, 4.0, 5.0, 4.0, PROBE_MIN_SIGMA / 2]):
        ledger.release(f"h{i}", _histogram_charge(sigma), _sparse_draw(sigma))
    assert probed == [(4.0, 12), (5.0, 15)]
