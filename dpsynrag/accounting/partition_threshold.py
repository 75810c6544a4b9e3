"""The threshold and delta_A of DP partition selection: exact discrete Gaussian tails.

The math behind ``partition_selection.release_partitions`` (see that module's docstring for
the privacy argument), kept apart from the release so that the mechanism records
(``mechanisms``) and the planner can re-derive a release's delta without importing the
ledger. ``selection_threshold`` picks the smallest tau >= 2 whose delta_A does not exceed
the requested delta, using ``discrete_gaussian_tail``, an upper bound of the exact tail
computed with 60-digit arithmetic and rounded up.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction
from statistics import NormalDist

import mpmath
import numpy as np

__all__ = ["contribution_weight", "discrete_gaussian_tail", "discrete_gaussian_tail_bracket",
           "partition_selection_delta",
           "selection_threshold", "weighted_selection_delta", "weighted_selection_threshold"]

_DIGITS = 60
_NEGLIGIBLE = mpmath.mpf(10) ** -55  # relative size at which a series is cut
_DIRECT_SIGMA = 500.0  # above this sigma, tails far from 0 are bounded by an integral


def _check_sigma(sigma: float) -> float:
    if isinstance(sigma, bool) or not (isinstance(sigma, int | float)
                                       and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite positive number, got {sigma!r}")
    return float(sigma)


def _check_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _one_sided_sum(a: mpmath.mpf, start: int) -> mpmath.mpf:
    """sum_{x >= start} exp(-a x^2) for start >= 0, with a bound on the cut remainder added."""
    term = mpmath.exp(-a * start * start)
    ratio = mpmath.exp(-a * (2 * start + 1))  # term(x + 1) / term(x), decreasing in x
    step = mpmath.exp(-2 * a)
    total = mpmath.mpf(0)
    while True:
        total += term
        term *= ratio
        ratio *= step
        # every later ratio is <= ratio, so the rest is at most term / (1 - ratio)
        remainder = term / (1 - ratio)
        if remainder <= total * _NEGLIGIBLE:
            return total + remainder


@functools.lru_cache(maxsize=256)
def _normaliser(sigma: float) -> mpmath.mpf:
    """sum_{x in Z} exp(-x^2 / (2 sigma^2)) to ~55 digits."""
    with mpmath.workdps(_DIGITS):
        s = mpmath.mpf(sigma)
        if sigma < 1:
            return 1 + 2 * _one_sided_sum(1 / (2 * s * s), 1)
        # Poisson summation (exact identity): sigma sqrt(2 pi) sum_k exp(-2 pi^2 sigma^2 k^2)
        b = 2 * mpmath.pi**2 * s * s
        return s * mpmath.sqrt(2 * mpmath.pi) * (1 + 2 * _one_sided_sum(b, 1))


def _round_up(value: mpmath.mpf) -> float:
    """The float just above ``value``: at least one ulp of margin over the 60-digit error."""
    result = float(value)
    if mpmath.mpf(result) < value:
        result = math.nextafter(result, math.inf)
    return min(1.0, math.nextafter(result, math.inf))


def _tail_sum(sigma: float, start: int, *, upper: bool) -> mpmath.mpf:
    """A bound (upper or lower) of sum_{x >= start} exp(-x^2 / (2 sigma^2)), start >= 1.

    Summed term by term (with the cut remainder bounded geometrically) while sigma <=
    _DIRECT_SIGMA. Beyond, the terms before m = ceil(sigma + 1/2) are summed and the rest,
    where the Gaussian is convex, is bracketed by integrals: each term is at most its mean
    over [x - 1/2, x + 1/2] (Hermite-Hadamard), so the rest is at most the integral from
    m - 1/2 (too large by a relative amount of about (t / sigma^2)^2 / 24 at t), and at
    least the integral from m plus f(m)/2 (trapezoid rule on a convex function).
    """
    s = mpmath.mpf(sigma)
    a = 1 / (2 * s * s)
    if sigma <= _DIRECT_SIGMA:
        total = _one_sided_sum(a, start)
        return total if upper else total * (1 - _NEGLIGIBLE)
    m = max(start, math.ceil(sigma + 0.5))
    head = mpmath.fsum(mpmath.exp(-a * x * x) for x in range(start, m))

    def integral_from(u: mpmath.mpf) -> mpmath.mpf:
        return s * mpmath.sqrt(mpmath.pi / 2) * mpmath.erfc(u / (s * mpmath.sqrt(2)))

    if upper:
        return (head + integral_from(mpmath.mpf(m) - mpmath.mpf(1) / 2)) * (1 + _NEGLIGIBLE)
    rest = integral_from(mpmath.mpf(m)) + mpmath.exp(-a * m * m) / 2
    return (head + rest) * (1 - _NEGLIGIBLE)


@functools.lru_cache(maxsize=4096)
def _tail_cached(sigma: float, t: int) -> float:
    with mpmath.workdps(_DIGITS):
        norm = _normaliser(sigma)
        if t >= 1:
            probability = _tail_sum(sigma, t, upper=True) / norm
        else:  # P(Z >= t) = 1 - P(Z >= 1 - t) by symmetry, with a lower bound of the latter
            probability = 1 - _tail_sum(sigma, 1 - t, upper=False) / norm
        return _round_up(probability)


#: How far ``discrete_gaussian_tail_bracket`` widens its 60-digit figures: far beyond their
#: error (series cut at 1e-55 of their sum, 60-digit arithmetic).
_BRACKET_MARGIN = mpmath.mpf(10) ** -50


@functools.lru_cache(maxsize=256)
def discrete_gaussian_tail_bracket(sigma: float, t: int) -> tuple[mpmath.mpf, mpmath.mpf]:
    """(lower, upper) with lower <= P(Z >= t) <= upper for Z ~ N_Z(0, sigma^2), t >= 1 and
    sigma <= 500 (the tail summed term by term), as 60-digit numbers a relative 1e-50 or
    so apart: what ``sparse_noise`` draws its exact Geometric(P(Z >= t)) gaps against."""
    sigma = _check_sigma(sigma)
    t = _check_int(t, "t", 1)
    if sigma > _DIRECT_SIGMA:
        raise ValueError(f"a tail bracket needs sigma <= {_DIRECT_SIGMA:g}")
    with mpmath.workdps(_DIGITS):
        norm = _normaliser(sigma)
        lower = _tail_sum(sigma, t, upper=False) / (norm * (1 + _BRACKET_MARGIN))
        upper = _tail_sum(sigma, t, upper=True) / (norm * (1 - _BRACKET_MARGIN))
        return lower * (1 - _BRACKET_MARGIN), min(mpmath.mpf(1), upper * (1 + _BRACKET_MARGIN))


def discrete_gaussian_tail(sigma: float, t: int) -> float:
    """P(Z >= t) for Z ~ N_Z(0, sigma^2), the discrete Gaussian over all integers.

    Computed with 60-digit arithmetic and rounded up by at least one ulp, so the returned
    float is never below the true value. The normaliser is summed directly (sigma < 1) or by
    Poisson summation (an exact identity; its series cut after 1e-55). The tail is summed
    term by term until the rest, bounded geometrically, is below 1e-55 of the sum; for
    sigma > 500 the part beyond sigma + 1/2 is bounded by an integral instead, which
    over-states the tail by a relative (t / sigma^2)^2 / 24 or so (about 1e-5 at t = 10 sigma,
    sigma = 600): still an upper bound, a hair loose.
    """
    sigma = _check_sigma(sigma)
    if isinstance(t, bool) or not isinstance(t, int | np.integer):
        raise ValueError(f"t must be an integer, got {t!r}")
    return _tail_cached(sigma, int(t))


def partition_selection_delta(sigma: float, max_items: int, threshold: int) -> float:
    """delta_A = max_items * P(Z >= threshold - 1), rounded up to a float (an upper bound).

    The probability that any of ``max_items`` phrases held by one unit alone (count 1) passes
    ``threshold`` under N_Z(0, sigma^2) noise.
    """
    sigma = _check_sigma(sigma)
    max_items = _check_int(max_items, "max_items", 1)
    threshold = _check_int(threshold, "threshold", 2)
    exact = max_items * Fraction(discrete_gaussian_tail(sigma, threshold - 1))
    result = float(exact)
    if Fraction(result) < exact:
        result = math.nextafter(result, math.inf)
    return result


def _smallest_fit(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The smallest tau in (low, high] with ``fits(tau)``, by bisection: ``fits(high)`` holds,
    ``low`` does not fit (or is below every allowed threshold), and ``fits`` is monotone."""
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid
    return high


def _delta_bound(delta: float, max_items: int) -> tuple[Fraction, float]:
    """The requested delta as an exact rational, and the standard normal quantile of
    1 - delta / max_items (where a threshold search starts)."""
    if isinstance(delta, bool) or not (isinstance(delta, int | float) and math.isfinite(delta)
                                       and 0 < delta < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")
    per_item = float(delta) / max_items
    quantile = NormalDist().inv_cdf(1.0 - per_item) if per_item > 1e-15 \
        else math.sqrt(2.0 * math.log(1.0 / per_item))
    return Fraction(float(delta)), quantile


def selection_threshold(sigma: float, max_items: int, delta: float) -> int:
    """The smallest integer tau >= 2 with max_items * P(1 + Z >= tau) <= delta.

    A phrase held by one unit (count 1) is then released with probability <= delta /
    max_items, so the phrases that exist only because of one unit appear with total
    probability <= delta. The comparison is exact (rationals) on the upper-bounded tail.
    """
    sigma = _check_sigma(sigma)
    max_items = _check_int(max_items, "max_items", 1)
    bound, quantile = _delta_bound(delta, max_items)

    def fits(tau: int) -> bool:
        return max_items * Fraction(discrete_gaussian_tail(sigma, tau - 1)) <= bound

    # Start near the continuous-Gaussian answer, then bracket [low fails, high fits] exactly.
    guess = max(2, 1 + round(sigma * quantile))
    width = 1
    if fits(guess):
        high, low = guess, guess - 1
        while low >= 2 and fits(low):
            high, width = low, 2 * width
            low = max(1, high - width)
    else:
        low, high = guess, guess + 1
        while not fits(high):
            low, width = high, 2 * width
            high = low + width
    return _smallest_fit(fits, low, high)


# ------------------------------------------------- weighted contributions (policy weights)

def contribution_weight(items: int, scale: int) -> int:
    """floor(scale / sqrt(items)), exactly: the integer weight each of a unit's ``items``
    distinct phrases gets, so that items * weight^2 <= scale^2 (l2 norm <= ``scale``)."""
    items = _check_int(items, "items", 1)
    scale = _check_int(scale, "scale", 1)
    return math.isqrt(scale * scale // items)  # floor(sqrt(floor(x))) = floor(sqrt(x))


def _weighted_bound(sigma: float, max_items: int, scale: int, threshold: int) -> Fraction:
    """max over m = 1..max_items of m * P(Z >= threshold - w(m)), w(m) = contribution_weight:
    a unit with m phrases of its own (count w(m) each) gets any of them released with at
    most this probability. For each weight value only its largest m can be the maximum."""
    largest: dict[int, int] = {}
    for m in range(1, max_items + 1):
        largest[contribution_weight(m, scale)] = m
    return max(m * Fraction(discrete_gaussian_tail(sigma, threshold - w))
               for w, m in largest.items())


def weighted_selection_delta(sigma: float, max_items: int, scale: int, threshold: int) -> float:
    """delta_A of weighted partition selection, rounded up to a float (an upper bound):
    max_m m * P(Z >= threshold - floor(scale / sqrt(m))) over m <= ``max_items``."""
    sigma = _check_sigma(sigma)
    max_items = _check_int(max_items, "max_items", 1)
    scale = _check_int(scale, "scale", 1)
    threshold = _check_int(threshold, "threshold", 2)
    exact = _weighted_bound(sigma, max_items, scale, threshold)
    result = float(exact)
    if Fraction(result) < exact:
        result = math.nextafter(result, math.inf)
    return result


def weighted_selection_threshold(sigma: float, max_items: int, scale: int,
                                 delta: float) -> int:
    """The smallest integer tau >= 2 whose ``weighted_selection_delta`` is <= ``delta``
    (exact comparison on the upper-bounded tails; the bound falls as tau grows)."""
    sigma = _check_sigma(sigma)
    max_items = _check_int(max_items, "max_items", 1)
    scale = _check_int(scale, "scale", 1)
    bound, quantile = _delta_bound(delta, max_items)

    def fits(tau: int) -> bool:
        return _weighted_bound(sigma, max_items, scale, tau) <= bound

    low = 1  # tau = 1 is below every allowed threshold
    high = max(2, scale + math.ceil(sigma * quantile))  # the one-item unit's bound
    while not fits(high):
        low, high = high, 2 * high
    return _smallest_fit(fits, low, high)
