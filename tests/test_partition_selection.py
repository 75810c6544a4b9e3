"""DP partition selection: the exact tail, the threshold, the release, its costs and the ledger.

Reproducibility and false-positive rate
---------------------------------------
* The statistical tests draw from ``secure_rng(<fixed seed>)`` (a reproducible ChaCha20
  stream), so they are deterministic: a pass is a pass every time.
* Each statistical comparison runs at alpha = 1e-3: for a *correct* mechanism and a seed
  drawn at random it fails with probability at most 1e-3. There are four such comparisons
  (the one-sided binomial test of the release rate of a count-1 phrase, its "not far below"
  companion, the same test on the power check's correct threshold, and the chi-square test of
  the noise pmf), so a random choice of seeds fails a correct implementation with probability
  <= 4e-3 (union bound); with the fixed seeds here the outcome is decided once.
* Power: the binomial test is run on a deliberately wrong threshold (tau - 2, and tau - 1)
  with noise from the same sampler. At sigma = 3, tau = 8 the true release rate there is
  P(Z >= 5) ~ 0.066 (P(Z >= 6) ~ 0.033) against the bound P(Z >= 7) ~ 0.0147: with 20,000
  trials the excess is about 60 (20) standard errors, so the test misses the wrong threshold
  with negligible probability.
* Every expected probability is computed here by brute force (mpmath sums over a wide
  window), never through the module's own tail function.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest
from declared_noise import as_drawn
from scipy import stats

from dpsynrag.accounting import Charge, Ledger, epsilon_for, secure_rng
from dpsynrag.accounting.costs import (
    mechanism_delta,
    mechanism_rho,
    mechanism_sensitivity,
    spend_of,
)
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.partition_selection import (
    discrete_gaussian_tail,
    partition_selection_delta,
    phrase_counts,
    release_partitions,
    selection_threshold,
)

ALPHA = 1e-3


def brute_tail(sigma: float, t: int, digits: int = 80) -> mpmath.mpf:
    """P(Z >= t) by summing the unnormalised pmf over [-W, W], W far beyond any mass (the
    pmf is symmetric: each weight exp(-x^2 / 2 sigma^2), x >= 0, is computed once)."""
    with mpmath.workdps(digits):
        s = mpmath.mpf(sigma)
        width = int(40 * sigma) + abs(t) + 40
        weights = [mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s * s)) for x in range(width + 1)]
        total = weights[0] + 2 * mpmath.fsum(weights[1:])
        return mpmath.fsum(weights[abs(x)] for x in range(t, width + 1)) / total


def brute_pmf(sigma: float, support: range) -> np.ndarray:
    with mpmath.workdps(40):
        s = mpmath.mpf(sigma)
        width = int(40 * sigma) + 40
        total = mpmath.fsum(mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s * s))
                            for x in range(-width, width + 1))
        return np.array([float(mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s * s)) / total)
                         for x in support])


def params(sigma: float = 3.0, max_items: int = 4, threshold: int | None = None,
           delta: float = 1e-5) -> dict[str, object]:
    tau = selection_threshold(sigma, max_items, delta) if threshold is None else threshold
    return {"sigma": sigma, "max_items": max_items, "threshold": tau, "delta": delta}


def ps_charge(stage: str = "f-phrases", group: str | None = None, partition: str | None = None,
              **kwargs: object) -> Charge:
    p = params(**kwargs)  # type: ignore[arg-type]
    return Charge(stage, "partition_selection", p, math.sqrt(p["max_items"]), "l2",  # type: ignore[arg-type]
                  group=group, partition=partition)


# ---------------------------------------------------------------------- (a) the tail
@pytest.mark.parametrize("sigma", [0.3, 0.8, 1.0, 1.7, 3.0, 10.5, 57.25])
@pytest.mark.parametrize("t", [-7, -1, 0, 1, 2, 5, 9, 30, 200])
def test_tail_is_an_upper_bound_and_exact_to_double_precision(sigma: float, t: int) -> None:
    exact = brute_tail(sigma, t)
    ours = discrete_gaussian_tail(sigma, t)
    assert mpmath.mpf(ours) >= exact
    if exact > mpmath.mpf(1e-300):
        assert float(mpmath.mpf(ours) / exact - 1) < 1e-15


def test_tail_in_rationals_for_a_tiny_sigma() -> None:
    """sigma = 0.5: the pmf is e^{-2x^2}/N; a few exact terms settle the value to 1e-40."""
    with mpmath.workdps(60):
        q = mpmath.exp(-2)
        terms = [q ** (x * x) for x in range(0, 12)]
        norm = terms[0] + 2 * mpmath.fsum(terms[1:])
        expected = mpmath.fsum(terms[2:]) / norm
    value = discrete_gaussian_tail(0.5, 2)
    assert Fraction(value) >= Fraction(str(mpmath.nstr(expected, 50)))
    assert value == pytest.approx(float(expected), rel=1e-15)


def test_tail_of_a_large_sigma_is_still_an_upper_bound() -> None:
    """Above sigma = 500 the far tail is bounded by an integral: still >= the exact sum."""
    for sigma, t in ((600.0, 3000), (600.0, 601), (1500.0, 6000), (1500.0, -700)):
        exact = brute_tail(sigma, t)
        assert mpmath.mpf(discrete_gaussian_tail(sigma, t)) >= exact
        assert discrete_gaussian_tail(sigma, t) == pytest.approx(float(exact), rel=2e-5)


def test_tail_is_monotone_and_symmetric() -> None:
    values = [discrete_gaussian_tail(2.5, t) for t in range(-10, 11)]
    assert all(a >= b for a, b in itertools.pairwise(values))
    # P(Z >= t) + P(Z >= 1 - t) = 1 up to the two round-ups
    for t in range(-4, 5):
        assert discrete_gaussian_tail(2.5, t) + discrete_gaussian_tail(2.5, 1 - t) \
            == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("sigma", [0.0, -1.0, math.inf, math.nan, True])
def test_tail_refuses_bad_sigma(sigma: float) -> None:
    with pytest.raises(ValueError):
        discrete_gaussian_tail(sigma, 1)


def test_tail_refuses_a_non_integer_t() -> None:
    with pytest.raises(ValueError):
        discrete_gaussian_tail(1.0, 1.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- (b) the threshold
@pytest.mark.parametrize(("sigma", "max_items", "delta"),
                         [(0.4, 1, 0.3), (1.0, 4, 1e-6), (3.0, 1, 0.02), (3.0, 10, 1e-9),
                          (23.2, 4, 1e-7), (150.0, 6, 1e-5), (2.0, 3, 0.9)])
def test_selection_threshold_is_minimal(sigma: float, max_items: int, delta: float) -> None:
    tau = selection_threshold(sigma, max_items, delta)
    assert tau >= 2
    assert max_items * brute_tail(sigma, tau - 1) <= delta
    assert max_items * Fraction(discrete_gaussian_tail(sigma, tau - 1)) <= Fraction(delta)
    if tau > 2:  # tau - 1 would break the bound, even computed exactly
        assert max_items * brute_tail(sigma, tau - 2) > delta


def test_selection_threshold_is_at_least_two() -> None:
    """A count-1 phrase needs noise >= 1 to pass even when delta would allow tau = 1."""
    assert selection_threshold(5.0, 1, 0.999) == 2


@pytest.mark.parametrize(("max_items", "delta"), [(0, 1e-3), (1.5, 1e-3), (1, 0.0), (1, 1.0),
                                                  (1, math.nan), (True, 1e-3)])
def test_selection_threshold_refuses_bad_parameters(max_items: object, delta: float) -> None:
    with pytest.raises(ValueError):
        selection_threshold(2.0, max_items, delta)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- (c) release rate
def binomial_above(k: int, n: int, p: float) -> float:
    """One-sided p-value of k or more successes in n trials at rate p."""
    return float(stats.binomtest(k, n, p, alternative="greater").pvalue)


def test_a_single_units_phrase_is_released_at_most_at_the_bound() -> None:
    """20,000 count-1 phrases (one unit each, max_items = 1): the release rate is <= the bound.

    One release of 20,000 distinct phrases draws 20,000 independent noises, so the number
    released is Binomial(20,000, P(1 + Z >= tau)). The one-sided test at alpha = 1e-3 must not
    find the rate above max_items * P(Z >= tau - 1) (per-phrase bound ~0.015 <= 0.02); a
    companion test checks the rate is not far below it either (a release that never fires
    would pass the first test).
    """
    sigma, n = 3.0, 20_000
    tau = selection_threshold(sigma, 1, 0.02)
    bound = discrete_gaussian_tail(sigma, tau - 1)
    assert 0.01 < bound <= 0.02
    ledger = Ledger(rng=secure_rng(20_240_601))
    released = release_partitions(ledger, "phrases", {f"p{i:05d}": 1 for i in range(n)},
                                  max_items=1, sigma=sigma, delta=0.02)
    k = len(released)
    assert binomial_above(k, n, bound) >= ALPHA, (k, n * bound)
    below = float(stats.binomtest(k, n, bound, alternative="less").pvalue)
    assert below >= ALPHA, (k, n * bound)
    assert all(v >= tau for v in released.values())


def test_the_rate_test_has_power_against_a_wrong_threshold() -> None:
    """The same test, on noise from the same sampler thresholded at tau - 2 (and tau - 1),
    rejects: a mechanism off by one or two in its threshold cannot pass it."""
    sigma, n = 3.0, 20_000
    tau = selection_threshold(sigma, 1, 0.02)
    bound = discrete_gaussian_tail(sigma, tau - 1)
    noisy = discrete_gaussian(np.ones(n, dtype=np.int64), sigma, secure_rng(77))
    for wrong in (tau - 2, tau - 1):
        k = int((noisy >= wrong).sum())
        assert binomial_above(k, n, bound) < 1e-20, (wrong, k, n * bound)
    assert binomial_above(int((noisy >= tau).sum()), n, bound) >= ALPHA


# ---------------------------------------------------------------------- (d) absent phrases
def test_only_phrases_present_in_the_data_are_ever_released() -> None:
    ledger = Ledger(rng=secure_rng(5))
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    for trial in range(300):
        counts = {f"w{j}": int(c) for j, c in enumerate(rng.integers(1, 30, size=12))
                  if rng.random() < 0.7}
        out = release_partitions(ledger, f"phrases/{trial}", counts, max_items=3, sigma=2.0,
                                 delta=1e-4)
        assert set(out) <= set(counts)
        seen |= set(out)
    assert seen  # large counts do get through
    empty = release_partitions(ledger, "phrases/empty", {}, max_items=3, sigma=2.0, delta=1e-4)
    assert empty == {}


def test_release_is_one_charge_stored_and_never_redrawn(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    counts = {"b phrase": 40, "a phrase": 25, "c": 1}
    with Ledger(path, rng=secure_rng(9)) as ledger:
        first = release_partitions(ledger, "phrases", counts, max_items=2, sigma=2.0,
                                   delta=1e-4)
        [release] = ledger.releases()
        assert release.mechanism == "partition_selection" and release.stage == "f-phrases"
        assert release.params == {"sigma": 2.0, "max_items": 2,
                                  "threshold": selection_threshold(2.0, 2, 1e-4),
                                  "delta": 1e-4}
        assert release.sensitivity == pytest.approx(math.sqrt(2))
        assert release.rho == pytest.approx(2 / (2 * 4.0), rel=1e-15)
    with Ledger(path, rng=secure_rng(10)) as ledger:
        again = release_partitions(ledger, "phrases", counts, max_items=2, sigma=2.0,
                                   delta=1e-4)
        assert again == first and len(ledger.releases()) == 1
        assert ledger.total_delta() == partition_selection_delta(2.0, 2, release.params[
            "threshold"])
        with pytest.raises(Exception, match="other parameters"):
            release_partitions(ledger, "phrases", counts, max_items=2, sigma=2.5, delta=1e-4)


def test_the_draw_is_deterministic_in_the_random_stream() -> None:
    counts = {f"p{i}": 5 + i for i in range(30)}
    shuffled = dict(reversed(list(counts.items())))
    a = release_partitions(Ledger(rng=secure_rng(3)), "k", counts, max_items=1, sigma=2.0,
                           delta=0.01)
    b = release_partitions(Ledger(rng=secure_rng(3)), "k", shuffled, max_items=1, sigma=2.0,
                           delta=0.01)
    assert a == b


@pytest.mark.parametrize("counts", [{"a": 0}, {"a": -1}, {"a": 1.0}, {"a": True}, {1: 3}])
def test_bad_counts_are_refused_before_anything_is_charged(counts: dict) -> None:
    ledger = Ledger(rng=secure_rng(1))
    with pytest.raises((ValueError, TypeError)):
        release_partitions(ledger, "k", counts, max_items=1, sigma=2.0, delta=0.01)
    assert ledger.releases() == [] and ledger.total_rho() == 0.0


# ---------------------------------------------------------------------- (e) the noise
def test_noise_on_large_counts_is_the_discrete_gaussian() -> None:
    """20,000 phrases of count 10,000 all pass; value - 10,000 must follow N_Z(0, 3^2)."""
    sigma, n, base = 3.0, 20_000, 10_000
    ledger = Ledger(rng=secure_rng(424_242))
    out = release_partitions(ledger, "big", {f"p{i:05d}": base for i in range(n)},
                             max_items=1, sigma=sigma, delta=0.02)
    assert len(out) == n
    noise = np.array(list(out.values())) - base
    support = range(-12, 13)
    pmf = brute_pmf(sigma, support)
    tail = float(brute_tail(sigma, 13))  # P(Z >= 13) = P(Z <= -13)
    observed = np.array([(noise < -12).sum(), *((noise == x).sum() for x in support),
                         (noise > 12).sum()], dtype=float)
    expected = np.array([tail, *pmf, tail]) * n
    keep = expected >= 5  # the bins with too little mass are pooled into one
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    assert exp.sum() == pytest.approx(n, rel=1e-12) and exp[-1] >= 5
    result = stats.chisquare(obs, exp)
    assert result.pvalue >= ALPHA, result


# ---------------------------------------------------------------------- (f) costs
def test_costs_rederive_rho_delta_and_sensitivity() -> None:
    p = params(sigma=2.5, max_items=4, delta=1e-5)
    assert mechanism_rho("partition_selection", p) == 4 / (2 * 2.5**2)
    derived = mechanism_delta("partition_selection", p)
    exact = 4 * brute_tail(2.5, p["threshold"] - 1)  # type: ignore[operator]
    assert mpmath.mpf(derived) >= exact and derived == pytest.approx(float(exact), rel=1e-15)
    assert derived <= 1e-5
    assert mechanism_sensitivity("partition_selection", p) == ("l2", 2.0)
    rho, delta = spend_of([{"mechanism": "partition_selection", "params": p, "count": 3}])
    assert rho == pytest.approx(3 * 4 / 12.5) and delta == pytest.approx(3 * derived)


def test_an_understated_delta_is_refused() -> None:
    p = params(sigma=2.5, max_items=4, delta=1e-5)
    understated = dict(p, delta=mechanism_delta("partition_selection", p) / 2)
    for function in (mechanism_delta, mechanism_rho):
        with pytest.raises(ValueError, match="smaller"):
            function("partition_selection", understated)
    with pytest.raises(ValueError, match="smaller"):
        Charge("f-phrases", "partition_selection", understated, 2.0, "l2")
    lowered = dict(p, threshold=p["threshold"] - 1)  # type: ignore[operator]
    with pytest.raises(ValueError, match="smaller"):
        mechanism_delta("partition_selection", lowered)


@pytest.mark.parametrize("change", [{"threshold": 1}, {"threshold": 5.0}, {"max_items": 0},
                                    {"max_items": 2.0}, {"sigma": 0.0}, {"delta": 1.5},
                                    {"delta": 0.0}])
def test_malformed_parameters_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        mechanism_delta("partition_selection", dict(params(), **change))


def test_missing_parameter_is_named() -> None:
    p = params()
    del p["threshold"]
    with pytest.raises(ValueError, match="threshold"):
        mechanism_rho("partition_selection", p)


def test_wrong_sensitivity_in_a_charge_is_refused() -> None:
    with pytest.raises(ValueError, match="calibrated"):
        Charge("f-phrases", "partition_selection", params(max_items=4), 1.0, "l2")


# ---------------------------------------------------------------------- (g) the ledger's delta
def test_total_delta_adds_sequential_releases() -> None:
    ledger = Ledger(rng=secure_rng(1))
    assert ledger.total_delta() == 0.0
    hist = Charge("a-histogram", "discrete_gaussian", {"sigma": 3.0, "l2_sensitivity": 2.0}, 2.0,
                  "l2")
    ledger.release("hist", hist, as_drawn(hist, 0))
    assert ledger.total_delta() == 0.0
    one, two = ps_charge(delta=1e-5), ps_charge(sigma=4.0, max_items=2, delta=1e-6)
    ledger.release("phrases/1", one, as_drawn(one, {}))
    ledger.release("phrases/2", two, as_drawn(two, {}))
    assert ledger.total_delta() == pytest.approx(one.delta + two.delta, rel=1e-15)
    assert ledger.total_rho() == pytest.approx(4 / 18 + one.rho + two.rho, rel=1e-15)
    approx = ledger.total_delta()
    assert ledger.epsilon(1e-3, "cks") == epsilon_for(ledger.total_rho(), 1e-3 - approx, "cks")
    with pytest.raises(ValueError, match="not below"):
        ledger.epsilon(approx / 2, "cks")


def test_total_delta_of_a_parallel_group_is_its_largest_partitions() -> None:
    ledger = Ledger(rng=secure_rng(1))
    ledger.declare_parallel_group("clusters", 2, "each unit in at most 2 clusters")
    charges = {"c0": ps_charge(group="clusters", partition="c0", delta=1e-4),
               "c1": ps_charge(group="clusters", partition="c1", delta=1e-6),
               "c2": ps_charge(group="clusters", partition="c2", sigma=5.0, delta=1e-3)}
    for name, charge in charges.items():
        ledger.release(f"{name}/phrases", charge, as_drawn(charge, {}))
    # c0 also gets a zCDP release: it changes rho, not delta
    facts = Charge("f-facts", "discrete_gaussian", {"sigma": 1.0, "l2_sensitivity": 1.0}, 1.0,
                   "l2", group="clusters", partition="c0")
    ledger.release("c0/hist", facts, as_drawn(facts, 0))
    deltas = sorted((c.delta for c in charges.values()), reverse=True)
    assert ledger.total_delta() == pytest.approx(deltas[0] + deltas[1], rel=1e-15)
    rhos = sorted([charges["c0"].rho + 0.5, charges["c1"].rho, charges["c2"].rho], reverse=True)
    assert ledger.total_rho() == pytest.approx(rhos[0] + rhos[1], rel=1e-15)


def test_total_delta_survives_reopening_and_budget_checks_ignore_it(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    charge = ps_charge(delta=1e-5)
    with Ledger(path, rng=secure_rng(2), rho_budget=charge.rho) as ledger:
        ledger.release("phrases", charge, as_drawn(charge, {}))
        total = ledger.total_delta()
    with Ledger(path, rng=secure_rng(2)) as ledger:
        assert ledger.total_delta() == total == charge.delta
        assert ledger.total_rho() == charge.rho


def test_phrase_counts_bound_each_units_contribution() -> None:
    units = [["fever", "rash"], ["fever"], [], ["rash", "cough", "x"]]
    assert phrase_counts(units, 3) == {"fever": 2, "rash": 2, "cough": 1, "x": 1}
    with pytest.raises(ValueError, match="more than max_items=2") as error:
        phrase_counts(units, 2)
    assert "cough" not in str(error.value)
    with pytest.raises(ValueError, match="twice"):
        phrase_counts([["a", "a"]], 3)
    with pytest.raises(TypeError):
        phrase_counts(["fever"], 3)  # type: ignore[list-item]
