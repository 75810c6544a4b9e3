"""DP-KSA's private keyword-count selection (Tang et al.): FindBestK and the PTR stability test.

Setting: ``sorted_counts`` are word-presence counts over N single-document responses, sorted in
decreasing order (c_(1) >= c_(2) >= ...), implicitly padded with zeros for absent words. One
neighbouring document changes one response, so every count -- and every order statistic --
moves by at most 1, and every gap d_k = c_(k) - c_(k+1) moves by at most 2.

* ``find_best_k``: exponential mechanism over k = 1..k_max with utility d_k + r(k) (r public,
  data-independent), sensitivity 2. The utility is not monotone, so the Gumbel-max scale is
  2 * 2 / epsilon = 4 / epsilon (the corrected scale, docs/mechanisms.md section 12; the
  paper printed 2 / epsilon, which would only give 2 epsilon-DP). Privacy: epsilon-DP and
  epsilon-bounded-range, charged epsilon^2 / 8 zCDP (Cesar & Rogers 2021).
* ``ptr_stable_gap``: propose-test-release on the gap at the chosen k,
  d_hat = max(2, d) + N(0, (2 sigma)^2) - 2 sigma z_{1 - delta_ptr}, pass iff d_hat > 2.
  max(2, d) has sensitivity 2, so the noisy statistic is a Gaussian mechanism with
  rho = 2^2 / (2 (2 sigma)^2) = 1 / (2 sigma^2) zCDP; when the true gap is <= 2 the test passes
  with probability exactly delta_ptr. Privacy: delta_ptr-approximate 1 / (2 sigma^2) zCDP; if
  it passes, releasing the exact top-k set costs nothing more (its local sensitivity is 0 when
  d > 2).

Neither the counts, the gaps, the noisy gap nor k's utilities may be logged or released; only
k_hat, the pass/fail bit and (on pass) the unordered top-k set are outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
from scipy.stats import norm

from dpsynrag.accounting.rng import RandomSource

GAP_SENSITIVITY = 2.0
"""l_inf sensitivity of each gap d_k (each order statistic moves by at most 1)."""

PTR_PASS_GAP = 2.0
"""A gap strictly above this makes the top-k set identical on every neighbour."""


def _is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def _check_positive(value: float, name: str) -> None:
    if not (_is_real(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def _check_k_max(k_max: int) -> None:
    if not isinstance(k_max, Integral) or isinstance(k_max, bool) or k_max < 1:
        raise ValueError(f"k_max must be a positive integer, got {k_max!r}")


def _check_delta_ptr(delta_ptr: float) -> None:
    if not (_is_real(delta_ptr) and 0 < delta_ptr < 1):
        raise ValueError(f"delta_ptr must lie strictly between 0 and 1, got {delta_ptr!r}")


def gap_statistics(sorted_counts: np.ndarray, k_max: int) -> np.ndarray:
    """Gaps d_k = c_(k) - c_(k+1) for k = 1..k_max (entry k - 1), counts padded with zeros.

    ``sorted_counts`` must be finite, non-negative and non-increasing.
    """
    _check_k_max(k_max)
    counts = np.asarray(sorted_counts)
    if counts.ndim != 1:
        raise ValueError(f"sorted_counts must be 1-D, got shape {counts.shape}")
    if counts.size and (counts.dtype == bool or not np.issubdtype(counts.dtype, np.number)):
        raise TypeError(f"sorted_counts must be numeric, got dtype {counts.dtype}")
    counts = counts.astype(np.float64)
    if not np.isfinite(counts).all() or (counts < 0).any():
        raise ValueError("sorted_counts must be finite and non-negative")
    if (np.diff(counts) > 0).any():
        raise ValueError("sorted_counts must be sorted in non-increasing order")
    padded = np.zeros(k_max + 1, dtype=np.float64)
    head = counts[: k_max + 1]
    padded[: head.size] = head
    return padded[:-1] - padded[1:]


def find_best_k(
    sorted_counts: np.ndarray,
    k_max: int,
    epsilon: float,
    rng: RandomSource,
    regulariser: Callable[[int], float] | None = None,
) -> int:
    """FindBestK: k_hat in 1..k_max, drawn with Pr[k] proportional to exp(epsilon u_k / 4).

    u_k = d_k + r(k); ``regulariser`` r must be public and data-independent (``-inf`` excludes
    a k; ``None`` means r = 0). Implemented as Gumbel-max with scale 4 / epsilon.

    Privacy: epsilon-DP (exponential mechanism, sensitivity 2, non-monotone), charged
    epsilon^2 / 8 zCDP (bounded range).
    """
    _check_positive(epsilon, "epsilon")
    utilities = gap_statistics(sorted_counts, k_max)
    if regulariser is not None:
        bonus = np.array([float(regulariser(k)) for k in range(1, k_max + 1)], dtype=np.float64)
        if np.isnan(bonus).any() or (bonus == np.inf).any():
            raise ValueError("the regulariser must return finite values or -inf")
        if not np.isfinite(bonus).any():
            raise ValueError("the regulariser excludes every k in 1..k_max")
        utilities = utilities + bonus
    scale = 2.0 * GAP_SENSITIVITY / float(epsilon)
    keys = utilities + scale * rng.gumbel(k_max)
    return int(np.argmax(keys)) + 1


@lru_cache(maxsize=64)
def _upper_quantile(delta_ptr: float) -> float:
    """z_{1 - delta_ptr} = Phi^{-1}(1 - delta_ptr), computed as the inverse survival function."""
    return float(norm.isf(delta_ptr))


def _shift(sigma: float, delta_ptr: float) -> float:
    """The quantile shift 2 sigma z_{1 - delta_ptr}."""
    return 2.0 * float(sigma) * _upper_quantile(float(delta_ptr))


def ptr_stable_gap(gap: float, sigma: float, delta_ptr: float, rng: RandomSource) -> bool:
    """The PTR test: True (release the exact top-k set) iff the shifted noisy gap exceeds 2.

    d_hat = max(2, gap) + 2 sigma Z - 2 sigma z_{1 - delta_ptr}, Z ~ N(0, 1).

    Privacy: delta_ptr-approximate 1 / (2 sigma^2) zCDP (Gaussian, l2 sensitivity 2, standard
    deviation 2 sigma).
    """
    if not (_is_real(gap) and math.isfinite(gap)):
        raise ValueError(f"gap must be a finite number, got {gap!r}")
    _check_positive(sigma, "sigma")
    _check_delta_ptr(delta_ptr)
    noise = 2.0 * float(sigma) * float(rng.standard_normal(1)[0])
    noisy_gap = max(PTR_PASS_GAP, float(gap)) + noise - _shift(sigma, delta_ptr)
    return noisy_gap > PTR_PASS_GAP


def ptr_pass_probability(gap: float, sigma: float, delta_ptr: float) -> float:
    """Exact Pr[ptr_stable_gap passes] = Phi((max(2, gap) - 2) / (2 sigma) - z_{1 - delta_ptr}).

    Equals ``delta_ptr`` for every gap <= 2.
    """
    if not (_is_real(gap) and math.isfinite(gap)):
        raise ValueError(f"gap must be a finite number, got {gap!r}")
    _check_positive(sigma, "sigma")
    _check_delta_ptr(delta_ptr)
    excess = (max(PTR_PASS_GAP, float(gap)) - PTR_PASS_GAP) / (2.0 * float(sigma))
    return float(norm.sf(_upper_quantile(float(delta_ptr)) - excess))


def ptr_zcdp(sigma: float) -> float:
    """zCDP charge of one PTR test (before its delta_ptr): 1 / (2 sigma^2)."""
    _check_positive(sigma, "sigma")
    return 1.0 / (2.0 * float(sigma) ** 2)
