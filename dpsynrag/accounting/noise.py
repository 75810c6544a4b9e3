"""Additive noise mechanisms: the exact discrete Gaussian and the (float) Gaussian.

Privacy cost (zCDP, add/remove neighbours): adding N(0, sigma^2) noise -- discrete on integer
queries, continuous on real ones -- to a query with l2 sensitivity Delta is
rho = Delta^2 / (2 sigma^2) (Bun & Steinke 2016, Lemma 2.5; Canonne, Kamath & Steinke 2020,
Theorem 14 for the multivariate discrete Gaussian). See ``costs.gaussian_rho``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpsynrag.accounting.rng import RandomSource


def _check_sigma(sigma: float) -> None:
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be a finite positive number, got {sigma!r}")


def discrete_gaussian(counts: np.ndarray, sigma: float, rng: RandomSource, *,
                      sensitivity: float | None = None) -> np.ndarray:
    """``counts`` plus i.i.d. discrete Gaussian noise N_Z(0, sigma^2), exactly sampled.

    The sampler is Algorithm 3 of Canonne, Kamath & Steinke (2020): discrete-Laplace proposals
    with exact Bernoulli(exp(-gamma)) acceptance on rationals, so there is no floating point
    between the random bits and the output (``discrete_gaussian_noise``: all cells at once).
    ``sigma^2`` is taken as the exact rational value of ``float(sigma)**2``.

    Privacy: rho = Delta_2^2 / (2 sigma^2) zCDP for integer queries of l2 sensitivity Delta_2.

    ``sigma`` is declared to ``rng`` before drawing, with ``sensitivity``: the query's l2
    sensitivity in the units of ``counts`` as the caller computes it beside the draw (None:
    take the charge's), so the ledger can check sigma / sensitivity against the charge
    (``Ledger.release``, ``ledger.check_drawn_noise``).
    """
    _check_sigma(sigma)
    rng.declare_noise("gaussian", float(sigma), sensitivity)
    values = np.asarray(counts)
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError("discrete_gaussian needs integer counts; use gaussian() for real values")
    noise = discrete_gaussian_noise(values.size, sigma, rng)
    noisy: np.ndarray = values.astype(np.int64) + noise.reshape(values.shape)
    return noisy


def discrete_gaussian_noise(size: int, sigma: float, rng: RandomSource) -> np.ndarray:
    """``size`` i.i.d. exact N_Z(0, sigma^2) draws (int64): CKS Algorithm 3, vectorised.

    sigma^2 = num / den is the exact rational of ``float(sigma) ** 2`` and t = floor(sigma) + 1.
    Each round proposes discrete Laplace(t) values y (``_discrete_laplace``) and accepts y with
    probability exp(-(|y| - sigma^2 / t)^2 / (2 sigma^2)), written as the one rational
    (|y| den t - num)^2 / (2 num den t^2) and drawn by
    :meth:`RandomSource.bernoulli_exp_minus_grouped` for all proposals at once (one
    rational per distinct |y|); accepted draws are kept in order until ``size`` are found.
    Every comparison is of integers, so there is no floating point between the random bits
    and the output, as in the one-at-a-time algorithm; only the order in which random bits
    are used differs.
    """
    variance = Fraction(float(sigma)) ** 2
    num, den = variance.numerator, variance.denominator
    t = int(Fraction(float(sigma))) + 1
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        proposals = _discrete_laplace(t, _with_spare(size - filled), rng)
        distinct, groups = np.unique(np.abs(proposals), return_inverse=True)
        gaps = [magnitude * den * t - num for magnitude in distinct.tolist()]
        accepted = rng.bernoulli_exp_minus_grouped(groups.ravel(), [g * g for g in gaps],
                                                   2 * num * den * t * t)
        kept = proposals[accepted][:size - filled]
        out[filled:filled + kept.size] = kept
        filled += kept.size
    return out


def _with_spare(need: int) -> int:
    """How many proposals a rejection round draws for ``need`` accepted ones: half again and
    a few more, so that one round nearly always suffices (each round costs a fixed number of
    array operations whatever its size). The spare accepted draws are discarded: the first
    ``need`` accepted of an i.i.d. sequence of proposals are i.i.d. draws of the target
    law whatever the number of proposals drawn."""
    return need + need // 2 + 8


def _discrete_laplace(t: int, size: int, rng: RandomSource) -> np.ndarray:
    """``size`` exact discrete Laplace draws with scale t (CKS Algorithm 2, s = 1), int64:
    U uniform on [0, t) kept with probability exp(-U / t), V the number of successes of
    Bernoulli(exp(-1)) before the first failure, X = U + t V, a fair sign, and (-, 0)
    rejected."""
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        x = exp_geometric_round(t, _with_spare(size - filled), rng)
        negative = rng.integers_array(2, x.size) == 1
        valid = ~(negative & (x == 0))
        kept = np.where(negative, -x, x)[valid][:size - filled]
        out[filled:filled + kept.size] = kept
        filled += kept.size
    return out


def exp_geometric_round(t: int, need: int, rng: RandomSource) -> np.ndarray:
    """One round of CKS Algorithm 2's magnitude (s = 1): ``need`` proposals U uniform on
    [0, t), each kept with probability exp(-U / t), and for each kept one V, the number of
    successes of Bernoulli(exp(-1)) before the first failure; returns X = U + t V (int64, at
    most ``need`` of them). Each X is exactly P(X = x) = (1 - e^(-1/t)) e^(-x/t), x >= 0,
    independently."""
    u = rng.integers_array(t, need)
    u = u[rng.bernoulli_exp_minus_array(u, t)]
    v = np.zeros(u.size, dtype=np.int64)
    running = np.arange(u.size)
    while running.size:
        success = rng.bernoulli_exp_minus_one(running.size)
        running = running[success]
        v[running] += 1
    x: np.ndarray = u + t * v
    return x


def gaussian(x: np.ndarray, sigma: float, rng: RandomSource) -> np.ndarray:
    """``x`` plus i.i.d. N(0, sigma^2) noise (float64), from the CSPRNG.

    Privacy: rho = Delta_2^2 / (2 sigma^2) zCDP for a query of l2 sensitivity Delta_2.
    Floating-point caveat: like every float Gaussian, the low-order bits are not an exact
    continuous Gaussian and can reveal ``x`` (Mironov 2012; Jin et al. 2022), so no mechanism
    of the package uses it: stage (c) puts its real-valued sum on a fixed-point grid and uses
    :func:`discrete_gaussian` (``transforms.retrieval``). Kept for tests and experiments only.
    """
    _check_sigma(sigma)
    rng.declare_noise("gaussian", float(sigma))
    values = np.asarray(x, dtype=np.float64)
    return values + sigma * rng.standard_normal(values.shape if values.shape else 1).reshape(
        values.shape
    )


# ---------------------------------------------------------------------- the sampler's probe
#: The public probe of ``probe_sampler``: this many draws of ``discrete_gaussian`` at the
#: declared sigma, from a fresh CSPRNG source, on zeros (no data, nothing stored or released).
PROBE_DRAWS = 2000
#: The probe refuses when the draws' mean square is off the exact variance of N_Z(0, sigma^2)
#: by more than this fraction of it. A sampler drawing at sigma / 2 has a mean square of
#: about 0.25 of it, one at sigma / sqrt(2) about 0.5.
PROBE_TOLERANCE = 0.3
#: Below this sigma the probe is not run (the exact discrete Gaussian is then too far from
#: its variance's concentration for 2,000 draws to bound a refusal by PROBE_REFUSAL_BOUND).
PROBE_MIN_SIGMA = 0.75
#: What the probe's refusal of an exact sampler may have as probability, at most, for every
#: sigma >= PROBE_MIN_SIGMA (``probe_refusal_bound``; tests/test_noise_probe.py evaluates it
#: on a grid of sigma and finds it below 1e-16).
PROBE_REFUSAL_BOUND = 1e-9


def _log_theta(s: float) -> float:
    """log sum_{x in Z} exp(-x^2 / (2 s^2)): directly for s < 30, else by Poisson summation,
    sqrt(2 pi) s (1 + 2 sum_k exp(-2 pi^2 k^2 s^2)), whose correction is below 1e-7000."""
    if s >= 30.0:
        return math.log(math.sqrt(2.0 * math.pi) * s)
    x = np.arange(1, math.ceil(40.0 * s) + 2, dtype=np.float64)
    return math.log1p(2.0 * float(np.sum(np.exp(-(x * x) / (2.0 * s * s)))))


def discrete_gaussian_variance(sigma: float) -> float:
    """The exact variance of N_Z(0, sigma^2): sum x^2 p(x) (below sigma^2, by a relative
    amount under 1e-7 for sigma >= 1 and under 1e-300 for sigma >= 30)."""
    _check_sigma(sigma)
    s = float(sigma)
    if s >= 30.0:
        return s * s
    x = np.arange(1, math.ceil(40.0 * s) + 2, dtype=np.float64)
    w = np.exp(-(x * x) / (2.0 * s * s))
    return float(2.0 * np.sum(x * x * w) / (1.0 + 2.0 * np.sum(w)))


def probe_refusal_bound(sigma: float, draws: int = PROBE_DRAWS,
                        tolerance: float = PROBE_TOLERANCE) -> float:
    """An upper bound on the probability that an exact N_Z(0, sigma^2) sampler is refused by
    the probe (``draws`` draws, mean square outside (1 +- ``tolerance``) x the variance v).

    Chernoff's bound with the exact moment generating function of X^2: E exp(u X^2) =
    theta(s_u) / theta(sigma), theta(s) = sum_x exp(-x^2 / (2 s^2)) and 1 / s_u^2 =
    1 / sigma^2 - 2 u, for u < 1 / (2 sigma^2). So P(sum X^2 <= n a) <= min over l > 0 of
    (exp(l a) E exp(-l X^2))^n and P(sum X^2 >= n b) <= min over 0 < u < 1 / (2 sigma^2) of
    (exp(-u b) E exp(u X^2))^n, with a = (1 - tolerance) v and b = (1 + tolerance) v; any l
    and u give a bound, and the minimum is taken over a grid. Returns their sum."""
    _check_sigma(sigma)
    s = float(sigma)
    v = discrete_gaussian_variance(s)
    base = _log_theta(s)
    low, high = (1.0 - tolerance) * v, (1.0 + tolerance) * v
    best_low = best_high = 0.0
    for c in np.geomspace(1e-3, 1e3, 121):  # l = c / (2 sigma^2)
        lam = float(c) / (2.0 * s * s)
        s_l = 1.0 / math.sqrt(1.0 / (s * s) + 2.0 * lam)
        best_low = min(best_low, lam * low + _log_theta(s_l) - base)
    for f in np.linspace(0.005, 0.995, 199):  # u = f / (2 sigma^2)
        u = float(f) / (2.0 * s * s)
        s_u = 1.0 / math.sqrt(1.0 / (s * s) - 2.0 * u)
        best_high = min(best_high, -u * high + _log_theta(s_u) - base)
    return math.exp(draws * best_low) + math.exp(draws * best_high)


def probe_sampler(sigma: float, draws: int = PROBE_DRAWS) -> float:
    """The mean square of ``draws`` draws of :func:`discrete_gaussian` at ``sigma`` on zeros,
    as a multiple of the exact variance of N_Z(0, sigma^2) (about 1 for an exact sampler).

    A public probe: its random source is a fresh CSPRNG source of its own (not a build's:
    a seeded build's draws stay what they were), its input is zeros, and its draws are
    discarded. It calls the very sampler every release calls (looked up when it runs), so a
    sampler that draws at another scale than it declares shows here (``Ledger.release``
    refuses the release, ``ledger.check_sampler``)."""
    _check_sigma(sigma)
    # the module's own sampler, looked up now: what every release calls
    noisy = discrete_gaussian(np.zeros(int(draws), dtype=np.int64), float(sigma), RandomSource())
    values = noisy.astype(np.float64)
    return float(np.mean(values * values)) / discrete_gaussian_variance(float(sigma))
