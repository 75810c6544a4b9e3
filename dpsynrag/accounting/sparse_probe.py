"""The ledger's statistical self-check of the sparse kept-entries sampler
(``sparse_noise.discrete_gaussian_kept_rows``), as ``noise.probe_sampler`` is of the dense one.

A span histogram's row is drawn sparsely: the counted cells by the dense sampler (which
``noise.probe_sampler`` probes), the zero cells by Geometric(q) gaps and exact draws from the
tail law of Z given Z >= t. A wrong gap or tail sampler would release a row whose law is not
the charged mechanism's, and neither the certificate nor the dense probe would show it. So the
first time a ledger sees a (sigma, t) drawn sparsely it runs this public probe
(``ledger.check_sampler``): the sampler draws one row of ``width`` zero cells, width chosen so
that about ``PROBE_KEPT`` cells are kept, on a fresh CSPRNG source of its own (a seeded
build's draws stay what they were), and the draws are discarded. Three statistics of the row
must be near their exact values:

- the number kept K, Binomial(width, q) with q = P(Z >= t) (``discrete_gaussian_tail_bracket``):
  |K / (width q) - 1| <= ``COUNT_TOLERANCE``;
- the mean of the kept cells' positions / (width - 1): given K = k the kept positions are a
  uniformly random k-subset, whose mean has expectation exactly 1/2:
  |mean - 1/2| <= ``SHARE_TOLERANCE``;
- the share of kept values at or above t + m (m about the conditional median of Z - t), whose
  exact probability p = P(Z >= t + m) / P(Z >= t) is known to 50 digits:
  |share - p| <= ``SHARE_TOLERANCE``.

An exact sampler is refused with probability at most ``refusal_bound(sigma, t)``: Chernoff's
bounds on the binomial, exp(-a^2 mu / (2 + a)) + exp(-a^2 mu / 2) with mu = width q and
a = COUNT_TOLERANCE, plus, given K >= (1 - a) mu, Hoeffding's bound 2 exp(-2 K b^2) for each
of the two means (b = SHARE_TOLERANCE; for the positions, Hoeffding's bound for sampling
without replacement): below 3e-12 at the defaults. A sampler keeping cells at q of
sigma / 2, or drawing the kept values at sigma / 2, or bunching its kept cells, fails it.
What it cannot see: a sampler wrong only on some inputs (counted cells mixed in, a width, a
seed), or a sigma below ``noise.PROBE_MIN_SIGMA`` (not probed); a probe whose width would
exceed ``MAX_WIDTH`` is skipped (q below about 1e-9: not a floor a build uses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mpmath
import numpy as np

from dpsynrag.accounting import sparse_noise
from dpsynrag.accounting.partition_threshold import discrete_gaussian_tail_bracket
from dpsynrag.accounting.rng import RandomSource

__all__ = ["COUNT_TOLERANCE", "MAX_WIDTH", "PROBE_KEPT", "REFUSAL_BOUND", "SHARE_TOLERANCE",
           "KeptProbe", "probe_kept", "refusal_bound"]

#: About this many zero cells are kept in the probe's row (its expected number).
PROBE_KEPT = 2000
#: The probe refuses when the number kept is off its expectation by more than this fraction.
COUNT_TOLERANCE = 0.3
#: ... or a mean of the kept cells (positions, tail share) is off its exact value by more.
SHARE_TOLERANCE = 0.1
#: A probe row wider than this is not drawn (the check is skipped).
MAX_WIDTH = 2**42
#: What the probe's refusal of an exact sampler may have as probability, at most, at the
#: defaults above (``refusal_bound``; tests/test_sparse_probe.py evaluates it on a grid of
#: sigma), as ``noise.PROBE_REFUSAL_BOUND`` is the dense probe's.
REFUSAL_BOUND = 3e-12


@dataclass(frozen=True)
class KeptProbe:
    """What one probe measured, against the exact values, and whether it passes."""

    width: int
    expected_kept: float
    kept: int
    position_mean: float
    tail_offset: int
    tail_share: float
    expected_tail_share: float

    @property
    def passes(self) -> bool:
        if self.kept == 0:
            return False
        return (abs(self.kept / self.expected_kept - 1.0) <= COUNT_TOLERANCE
                and abs(self.position_mean - 0.5) <= SHARE_TOLERANCE
                and abs(self.tail_share - self.expected_tail_share) <= SHARE_TOLERANCE)


def _tail(sigma: float, t: int) -> mpmath.mpf:
    low, high = discrete_gaussian_tail_bracket(sigma, t)
    return (low + high) / 2


def probe_width(sigma: float, t: int) -> int:
    """The probe row's width: about ``PROBE_KEPT`` / P(Z >= t) cells."""
    return max(2, math.ceil(PROBE_KEPT / float(_tail(sigma, t))))


def tail_offset(sigma: float, t: int) -> int:
    """m >= 1, about the median of Z - t given Z >= t (the tail is close to exponential of
    mean sigma^2 / t beyond 3 sigma): the split of the tail-share statistic."""
    return max(1, round(math.log(2.0) * float(sigma) ** 2 / t))


def refusal_bound(sigma: float, t: int) -> float:
    """An upper bound on the probability that the probe refuses an exact sampler at
    (sigma, t) (module docstring)."""
    mu = probe_width(sigma, t) * float(_tail(sigma, t))
    a, b = COUNT_TOLERANCE, SHARE_TOLERANCE
    least = (1.0 - a) * mu
    return (math.exp(-a * a * mu / (2.0 + a)) + math.exp(-a * a * mu / 2.0)
            + 4.0 * math.exp(-2.0 * least * b * b))


def probe_kept(sigma: float, t: int) -> KeptProbe | None:
    """Draw the probe row with the very sampler every sparse release calls (looked up when it
    runs) and measure it; None where the row would be wider than ``MAX_WIDTH``."""
    width = probe_width(sigma, t)
    if width > MAX_WIDTH:
        return None
    q = _tail(sigma, t)
    m = tail_offset(sigma, t)
    empty = np.zeros(0, dtype=np.int64)
    ((index, value),) = sparse_noise.discrete_gaussian_kept_rows(
        [(empty, empty)], width, float(sigma), float(t), RandomSource())
    kept = int(index.size)
    position = float(np.mean(index / (width - 1))) if kept else 0.0
    share = float(np.mean(value >= t + m)) if kept else 0.0
    return KeptProbe(width=width, expected_kept=width * float(q), kept=kept,
                     position_mean=position, tail_offset=m, tail_share=share,
                     expected_tail_share=float(_tail(sigma, t + m) / q))
