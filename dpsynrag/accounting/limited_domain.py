"""LimitedDomain top-1 selection (Durfee & Rogers 2019), as used by Koga et al.'s DPVoteRAG.

The histogram is a dense, non-negative vector of vote counts indexed by token id, so the domain
size ``d`` is the vocabulary size. The mechanism keeps the ``kbar`` largest counts, adds i.i.d.
Gumbel(b) noise to each of them and to a data-dependent null score

    h_perp = h_(kbar+1) + 1 + b * ln( min(Delta0, kbar, d - kbar) / delta ),   b = s / epsilon,

and outputs the item with the largest noisy value, or ``None`` (the failure symbol ⊥) when the
noisy null score wins.

Limited-domain policy (data-independent tie-breaking)
------------------------------------------------------
The limited domain is the ``kbar`` largest counts with ties broken by the LOWEST token id. When
fewer than ``kbar`` tokens have votes, zero-count tokens (lowest ids first) fill the domain and
get Gumbel noise like every other member, so they can be output (with small probability). This
is the reading of the Durfee-Rogers analysis on a dense histogram; it never inspects anything
but the counts and the public token ids. ``h_(kbar+1)`` is the (kbar+1)-th largest count
(0 when fewer than kbar + 1 tokens have votes).

Gumbel scale policy
-------------------
``scale_factor`` s sets b = s / epsilon, used both for the noise and inside the logarithm.
Durfee & Rogers (and DP-OPT, which Koga et al. follow) use s = 1, which assumes that
neighbouring histograms differ monotonically. A vote switch (one voter moving from token a to
token b) lowers one count and raises another, so the package's default is the conservative
s = 2 (docs/mechanisms.md, sections 1 and 13). ``scale_factor=1`` reproduces Durfee-Rogers /
DP-OPT and table V2 of docs/mechanisms.md, section 17. Values below 1 are rejected.

Privacy: (epsilon, delta)-DP for a histogram whose neighbours differ in at most
``l0_sensitivity`` counts by at most 1 each; the ledger charges it as delta-approximate
epsilon^2 / 2 zCDP (pure epsilon-DP implies epsilon^2 / 2 zCDP, Bun & Steinke 2016, Prop. 1.4;
the delta is carried alongside).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from dpsynrag.accounting.rng import RandomSource


def _is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def _is_int(x: object) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


def _check_parameters(
    epsilon: float, delta: float, kbar: int, l0_sensitivity: int, scale_factor: float
) -> None:
    if not (_is_real(epsilon) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    if not (_is_real(delta) and 0 < delta < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")
    if not _is_int(kbar) or kbar < 1:
        raise ValueError(f"kbar must be a positive integer, got {kbar!r}")
    if (
        not _is_int(l0_sensitivity) or l0_sensitivity < 1
    ):
        raise ValueError(f"l0_sensitivity must be a positive integer, got {l0_sensitivity!r}")
    if not (
        _is_real(scale_factor) and math.isfinite(scale_factor) and scale_factor >= 1
    ):
        raise ValueError(f"scale_factor must be a finite number >= 1, got {scale_factor!r}")


def gumbel_scale(epsilon: float, scale_factor: float = 2.0) -> float:
    """The Gumbel scale b = scale_factor / epsilon."""
    return float(scale_factor) / float(epsilon)


def limited_domain_threshold(
    next_count: float,
    kbar: int,
    epsilon: float,
    delta: float,
    domain_size: int,
    l0_sensitivity: int = 2,
    scale_factor: float = 2.0,
) -> float:
    """The null score h_perp = next_count + 1 + b ln(min(Delta0, kbar, d - kbar) / delta).

    ``next_count`` is h_(kbar+1); ``b = scale_factor / epsilon``. Requires kbar < domain_size.
    The value is private (it depends on h_(kbar+1)): use it internally, never release it.
    """
    _check_parameters(epsilon, delta, kbar, l0_sensitivity, scale_factor)
    if not _is_int(domain_size):
        raise ValueError(f"domain_size must be an integer, got {domain_size!r}")
    if kbar >= domain_size:
        raise ValueError(f"kbar must be smaller than the domain size ({kbar} >= {domain_size})")
    if not (_is_real(next_count) and math.isfinite(next_count) and next_count >= 0):
        raise ValueError(f"next_count must be a finite non-negative number, got {next_count!r}")
    b = gumbel_scale(epsilon, scale_factor)
    reach = min(int(l0_sensitivity), int(kbar), int(domain_size) - int(kbar))
    return float(next_count) + 1.0 + b * math.log(reach / delta)


def limited_domain(counts: np.ndarray, kbar: int) -> tuple[np.ndarray, float]:
    """The limited domain (ascending token ids) and h_(kbar+1), in O(d) time.

    The domain is the ``kbar`` largest counts, ties broken by the lowest id: every id whose
    count exceeds v = h_(kbar+1), then the lowest ids with count exactly v. Requires
    1 <= kbar < len(counts).
    """
    values = _check_counts(counts)
    size = values.size
    if not _is_int(kbar) or kbar < 1:
        raise ValueError(f"kbar must be a positive integer, got {kbar!r}")
    if kbar >= size:
        raise ValueError(f"kbar must be smaller than the domain size ({kbar} >= {size})")
    # the (kbar+1)-th largest count is the (size - kbar - 1)-th smallest
    next_count = float(np.partition(values, size - kbar - 1)[size - kbar - 1])
    above = np.flatnonzero(values > next_count)  # at most kbar ids
    tied = np.flatnonzero(values == next_count)[: kbar - above.size]  # lowest ids first
    domain = np.sort(np.concatenate([above, tied]))
    return domain, next_count


def _check_counts(counts: np.ndarray) -> np.ndarray:
    values = np.asarray(counts)
    if values.ndim != 1:
        raise ValueError(f"counts must be a 1-D dense histogram, got shape {values.shape}")
    if values.dtype == bool or not np.issubdtype(values.dtype, np.number):
        raise TypeError(f"counts must be numeric, got dtype {values.dtype}")
    values = values.astype(np.float64, copy=False)
    if not np.isfinite(values).all():
        raise ValueError("counts contain NaN or infinite values")
    if (values < 0).any():
        raise ValueError("counts must be non-negative")
    return values


def limited_domain_top1(
    counts: np.ndarray,
    kbar: int,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    *,
    l0_sensitivity: int = 2,
    scale_factor: float = 2.0,
) -> int | None:
    """Top-1 token id by LimitedDomain, or ``None`` (⊥) when the noisy null score wins.

    ``counts`` is a dense non-negative histogram over the whole vocabulary (its length is the
    domain size d; 1 <= kbar < d). Each of the ``kbar`` limited-domain counts and the null
    score h_perp get independent Gumbel(b) noise, b = scale_factor / epsilon; ties with the
    null score go to ⊥. Only the returned id (or ⊥) may be released.

    Privacy: (epsilon, delta)-DP (Durfee & Rogers 2019) for neighbours that change at most
    ``l0_sensitivity`` counts by at most 1 (scale_factor = 2 covers non-monotone vote
    switches); charged as delta-approximate epsilon^2 / 2 zCDP.
    """
    _check_parameters(epsilon, delta, kbar, l0_sensitivity, scale_factor)
    values = _check_counts(counts)
    domain, next_count = limited_domain(values, kbar)
    null_score = limited_domain_threshold(
        next_count, kbar, epsilon, delta, values.size, l0_sensitivity, scale_factor
    )
    b = gumbel_scale(epsilon, scale_factor)
    noise = b * rng.gumbel(domain.size + 1)
    noisy_items = values[domain] + noise[:-1]
    winner = int(np.argmax(noisy_items))
    if noisy_items[winner] > null_score + noise[-1]:
        return int(domain[winner])
    return None
