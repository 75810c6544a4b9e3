"""DP partition selection with weighted contributions: a unit's phrases share one l2 budget.

Uniform partition selection (``partition_selection``) counts each of a unit's at most K
phrases 1, so every unit pays the l2 sensitivity sqrt(K) whether it holds 1 phrase or K. Here
(the Gaussian "weighted" policy of Gopi et al. 2020, used level by level by Kim et al. 2021)
a unit holding m <= ``max_items`` distinct phrases adds the integer weight

    w(m) = floor(W / sqrt(m))        (``partition_threshold.contribution_weight``)

to each of them, W = ``weight_scale`` a public integer. A short document's few phrases then
weigh more than a long document's many, and a unit's contribution vector has
m * w(m)^2 <= W^2: l2 norm <= W whatever m is. Counts stay integers (the weight is exact
integer arithmetic), so the exact discrete Gaussian N_Z(0, sigma^2) is added as before, and
phrases whose noisy weighted count reaches the integer threshold tau are released with it.

Privacy (add/remove one unit u; the argument of ``partition_selection`` with weights):

* on the phrases present in both neighbours the counts differ by u's weights there, a
  vector of l2 norm <= W: the discrete Gaussian mechanism, rho = W^2 / (2 sigma^2) zCDP
  (Canonne, Kamath & Steinke 2020, Thm 14); thresholding is post-processing;
* the phrases only u holds have count exactly w(m_u), at most m_u of them, so at least one
  is released with probability <= m_u P(Z >= tau - w(m_u)) <= delta_A = max over
  m <= max_items of m P(Z >= tau - w(m)) (``weighted_selection_delta``, exact tails
  rounded up). Conditioned on none appearing, the output is the thresholded release of the
  shared phrases' counts.

So the release is delta_A-approximately rho-zCDP, exactly as uniform partition selection
with W in place of sqrt(K); the ledger records it as ``partition_selection`` with the
parameter ``weight_scale`` (``mechanisms.PartitionSelection``), which re-derives both costs.
``weighted_counts`` computes the counts and refuses a unit whose weights exceed the l2
bound on the very array that is released.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.mechanisms import PartitionSelection
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.partition_threshold import (
    _check_int,
    _check_sigma,
    contribution_weight,
    weighted_selection_threshold,
)

if TYPE_CHECKING:
    from dpsynrag.accounting.rng import RandomSource

__all__ = ["DEFAULT_WEIGHT_SCALE", "release_weighted_partitions", "weighted_counts"]

#: W: weights are floor(1024 / sqrt(m)), within 1 % of 1 / sqrt(m) for m <= 128 (and the
#: discrete Gaussian's sigma is W times the unit-scale sigma)
DEFAULT_WEIGHT_SCALE = 1024


def weighted_counts(unit_phrases: Iterable[Sequence[str]], max_items: int,
                    scale: int) -> dict[str, int]:
    """counts[phrase] = the sum over the units listing ``phrase`` of their weight
    floor(scale / sqrt(m)), m the number of phrases the unit lists.

    Raises ``ValueError`` if a unit lists more than ``max_items`` phrases or one twice, or
    if the weights one unit adds (checked on the accumulated array itself) have an l2 norm
    over ``scale``; the message never names a phrase.
    """
    max_items = _check_int(max_items, "max_items", 1)
    scale = _check_int(scale, "scale", 1)
    if scale * scale < max_items:
        raise ValueError("scale^2 must be at least max_items (every weight >= 1)")
    counts: dict[str, int] = {}
    for phrases in unit_phrases:
        if isinstance(phrases, str):
            raise TypeError("each unit's phrases must be a sequence of strings, not a str")
        if not phrases:
            continue
        if len(phrases) > max_items:
            raise ValueError(f"a unit lists more than max_items={max_items} phrases")
        if len(set(phrases)) != len(phrases):
            raise ValueError("a unit lists the same phrase twice")
        weight = contribution_weight(len(phrases), scale)
        added = [weight] * len(phrases)  # exact integers (no numpy per unit: a hot loop)
        if sum(value * value for value in added) > scale * scale:  # as it is added
            raise ValueError("a unit's weights exceed the l2 bound weight_scale")
        for phrase, value in zip(phrases, added, strict=True):
            if not isinstance(phrase, str):
                raise TypeError("phrases must be strings")
            counts[phrase] = counts.get(phrase, 0) + int(value)
    return counts


def release_weighted_partitions(
    ledger: Ledger,
    key: str,
    counts: Mapping[str, int],
    *,
    max_items: int,
    scale: int,
    sigma: float,
    delta: float,
    stage: str,
) -> dict[str, int]:
    """Release {phrase: noisy weighted count} for the phrases whose noisy count reaches the
    threshold tau = ``weighted_selection_threshold(sigma, max_items, scale, delta)``.

    ``counts`` are ``weighted_counts`` (integers >= 1 of phrases present in the data);
    ``sigma`` is in weight units (W times the unit-scale sigma). One ledger release,
    mechanism ``partition_selection`` with ``weight_scale`` (module docstring), through
    ``Ledger.release_selection``, which applies the threshold the charge records; a resumed
    build gets the stored value back, uncharged. Never log the result next to ``counts``.
    """
    max_items = _check_int(max_items, "max_items", 1)
    scale = _check_int(scale, "scale", 1)
    sigma = _check_sigma(sigma)
    phrases = sorted(counts)
    exact = [counts[p] for p in phrases]
    for phrase, value in zip(phrases, exact, strict=True):
        if not isinstance(phrase, str):
            raise TypeError("phrases must be strings")
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError("every count must be an integer >= 1 (only phrases present in "
                             "the data may be candidates)")
    threshold = weighted_selection_threshold(sigma, max_items, scale, delta)
    event = PartitionSelection(sigma=sigma, max_items=max_items, threshold=threshold,
                               delta=float(delta), weight_scale=scale)
    charge = Charge.of(stage, event)
    values = np.asarray(exact, dtype=np.int64)

    def draw(rng: RandomSource) -> np.ndarray:
        # every candidate's noisy count: the ledger keeps those at or above the threshold its
        # charge records (``Ledger.release_selection``), the draw cannot choose
        noisy: np.ndarray = discrete_gaussian(values, sigma, rng, sensitivity=float(scale))
        return noisy

    return ledger.release_selection(key, charge, phrases, draw)
