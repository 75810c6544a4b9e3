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
    between the random bits and the output. ``sigma^2`` is taken as the exact rational value
    of ``float(sigma)**2``.

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
    sampler = _DiscreteGaussianSampler(sigma, rng)
    noise = np.fromiter((sampler.sample() for _ in range(values.size)), dtype=np.int64,
                        count=values.size)
    return values.astype(np.int64) + noise.reshape(values.shape)


class _DiscreteGaussianSampler:
    """Exact N_Z(0, sigma^2) via CKS Algorithm 3 with sigma^2 = num/den in lowest terms."""

    def __init__(self, sigma: float, rng: RandomSource) -> None:
        variance = Fraction(float(sigma)) ** 2
        self.num, self.den = variance.numerator, variance.denominator
        self.t = int(Fraction(float(sigma))) + 1  # floor(sigma) + 1
        self.rng = rng

    def sample(self) -> int:
        rng, t = self.rng, self.t
        while True:
            y = self._discrete_laplace(t)
            # accept with probability exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)), as one rational:
            # ((|y| den t - num)^2) / (2 num den t^2)
            gap = abs(y) * self.den * t - self.num
            if rng.bernoulli_exp_minus(gap * gap, 2 * self.num * self.den * t * t):
                return y

    def _discrete_laplace(self, t: int) -> int:
        """Exact discrete Laplace with scale t (CKS Algorithm 2, s = 1)."""
        rng = self.rng
        while True:
            u = rng.integers(t)
            if not rng.bernoulli_exp_minus(u, t):
                continue
            v = 0
            while rng.bernoulli_exp_minus(1, 1):
                v += 1
            x = u + t * v
            negative = rng.integers(2) == 1
            if negative and x == 0:
                continue
            return -x if negative else x


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
