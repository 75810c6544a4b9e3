"""The continuous top-k threshold of Grislain's DP-RAG and DP-SynRAG stage (c).

Exponential mechanism over theta in the public interval [lo, hi] with Lebesgue base measure and
utility u(theta) = -| #{i : s_i > theta} - k |. Adding or removing one document changes the
count by at most one for every theta, so the sensitivity is 1 and the density is
proportional to exp(epsilon * u(theta) / 2).

Privacy: epsilon-DP and epsilon-bounded-range, hence rho = epsilon^2 / 8 zCDP
(Cesar & Rogers 2021). See ``costs.exponential_rho``.
"""

from __future__ import annotations

import numpy as np

from dpsynrag.accounting.rng import RandomSource


def threshold_interval_log_weights(
    scores: np.ndarray, k: int, epsilon: float, lo: float = 0.0, hi: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints and the log of each interval's probability mass (unnormalised).

    The density is constant between consecutive sorted (clipped) scores; interval j spans
    ``[b[j], b[j+1]]`` and has ``N - j`` scores strictly above any theta inside it.
    Returns ``(breakpoints, log_mass)`` with ``log_mass = log(width) + epsilon * u / 2``
    (``-inf`` for empty intervals).
    """
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError("the threshold range needs finite lo < hi")
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a finite positive number")
    if k < 0:
        raise ValueError("k must be non-negative")
    clipped = np.clip(np.asarray(scores, dtype=np.float64).ravel(), lo, hi)
    if np.isnan(clipped).any():
        raise ValueError("scores contain NaN")
    breakpoints = np.concatenate([[lo], np.sort(clipped), [hi]])
    widths = np.diff(breakpoints)
    above = clipped.size - np.arange(widths.size)
    utility = -np.abs(above - k).astype(np.float64)
    with np.errstate(divide="ignore"):
        log_mass = np.log(widths) + epsilon * utility / 2.0
    log_mass[widths <= 0] = -np.inf
    return breakpoints, log_mass


def exponential_threshold(
    scores: np.ndarray,
    k: int,
    epsilon: float,
    rng: RandomSource,
    lo: float = 0.0,
    hi: float = 1.0,
) -> float:
    """Sample theta with density proportional to exp(epsilon * u(theta) / 2) on [lo, hi].

    Exact over intervals: pick an interval with probability proportional to
    ``width * exp(epsilon * u / 2)`` (Gumbel-max in log space), then a uniform point inside it.
    Never a grid. The result is private: do not log it.

    Privacy: epsilon-DP, rho = epsilon^2 / 8 zCDP.
    """
    breakpoints, log_mass = threshold_interval_log_weights(scores, k, epsilon, lo, hi)
    keys = log_mass + rng.gumbel(log_mass.size)
    j = int(np.argmax(keys))
    return rng.uniform(float(breakpoints[j]), float(breakpoints[j + 1]))


def top_p_weight(scores: np.ndarray, alpha: float, lo: float, hi: float) -> np.ndarray:
    """Grislain's contrast weight w(s) = exp(alpha (s - hi) / (hi - lo)) in (0, 1].

    The bounds are PUBLIC constants (the paper's observed min/max would break sensitivity 1).
    """
    clipped = np.clip(np.asarray(scores, dtype=np.float64).ravel(), lo, hi)
    return np.exp(alpha * (clipped - hi) / (hi - lo))


def top_p_interval_log_weights(
    scores: np.ndarray, p: float, alpha: float, epsilon: float, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`threshold_interval_log_weights` with the top-p utility.

    u(theta) = -| sum_{s_i > theta} w(s_i) - p * sum_i w(s_i) |. Adding or removing one
    document changes it by at most max(p, 1 - p) * max w <= 1, so the sensitivity is 1.
    """
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError("the threshold range needs finite lo < hi")
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a finite positive number")
    if not (0.0 < p < 1.0):
        raise ValueError("p must lie strictly between 0 and 1")
    if not (np.isfinite(alpha) and alpha >= 0):
        raise ValueError("alpha must be a finite non-negative number")
    clipped = np.sort(np.clip(np.asarray(scores, dtype=np.float64).ravel(), lo, hi))
    if np.isnan(clipped).any():
        raise ValueError("scores contain NaN")
    weights = top_p_weight(clipped, alpha, lo, hi)
    breakpoints = np.concatenate([[lo], clipped, [hi]])
    widths = np.diff(breakpoints)
    # interval j lies above the j smallest scores: the mass above it is the sum of the rest
    mass_above = np.concatenate([np.cumsum(weights[::-1])[::-1], [0.0]])
    utility = -np.abs(mass_above - p * weights.sum())
    with np.errstate(divide="ignore"):
        log_mass = np.log(widths) + epsilon * utility / 2.0
    log_mass[widths <= 0] = -np.inf
    return breakpoints, log_mass


def sample_threshold(breakpoints: np.ndarray, log_mass: np.ndarray, rng: RandomSource) -> float:
    """Draw theta: an interval by Gumbel-max on ``log_mass``, then a uniform point inside.

    The result is private: use it only to select documents, never log or return it.
    """
    keys = log_mass + rng.gumbel(log_mass.size)
    j = int(np.argmax(keys))
    return rng.uniform(float(breakpoints[j]), float(breakpoints[j + 1]))
