"""Additive noise mechanisms: the exact discrete Gaussian and the (float) Gaussian.

Privacy cost (zCDP, add/remove neighbours): adding N(0, sigma^2) noise -- discrete on integer
queries, continuous on real ones -- to a query with l2 sensitivity Delta is
rho = Delta^2 / (2 sigma^2) (Bun & Steinke 2016, Lemma 2.5; Canonne, Kamath & Steinke 2020,
Theorem 14 for the multivariate discrete Gaussian). See ``costs.gaussian_rho``.
"""

from __future__ import annotations

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
    :meth:`RandomSource.bernoulli_exp_minus_repeated` for all proposals of the same |y| at
    once; accepted draws are kept in order until ``size`` are found. Every comparison is of
    integers, so there is no floating point between the random bits and the output, as in
    the one-at-a-time algorithm; only the order in which random bits are used differs.
    """
    variance = Fraction(float(sigma)) ** 2
    num, den = variance.numerator, variance.denominator
    t = int(Fraction(float(sigma))) + 1
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        proposals = _discrete_laplace(t, size - filled, rng)
        magnitudes = np.abs(proposals)
        accepted = np.zeros(proposals.size, dtype=bool)
        for magnitude in np.unique(magnitudes):
            same = np.flatnonzero(magnitudes == magnitude)
            gap = int(magnitude) * den * t - num
            accepted[same] = rng.bernoulli_exp_minus_repeated(same.size, gap * gap,
                                                              2 * num * den * t * t)
        kept = proposals[accepted]
        out[filled:filled + kept.size] = kept
        filled += kept.size
    return out


def _discrete_laplace(t: int, size: int, rng: RandomSource) -> np.ndarray:
    """``size`` exact discrete Laplace draws with scale t (CKS Algorithm 2, s = 1), int64:
    U uniform on [0, t) kept with probability exp(-U / t), V the number of successes of
    Bernoulli(exp(-1)) before the first failure, X = U + t V, a fair sign, and (-, 0)
    rejected."""
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        u = rng.integers_array(t, need)
        u = u[rng.bernoulli_exp_minus_array(u, t)]
        v = np.zeros(u.size, dtype=np.int64)
        running = np.arange(u.size)
        while running.size:
            success = rng.bernoulli_exp_minus_one(running.size)
            running = running[success]
            v[running] += 1
        x = u + t * v
        negative = rng.integers_array(2, u.size) == 1
        valid = ~(negative & (x == 0))
        kept = np.where(negative, -x, x)[valid]
        out[filled:filled + kept.size] = kept
        filled += kept.size
    return out


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
