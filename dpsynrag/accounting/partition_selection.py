"""DP partition selection over an open vocabulary: noisy counts above a threshold.

The "facts" generation mode releases phrases that are not in any public vocabulary. Each
privacy unit holds at most ``max_items`` distinct phrases; ``release_partitions`` adds exact
discrete Gaussian noise N_Z(0, sigma^2) to the count of every phrase present in the data and
releases the phrases whose noisy count reaches the threshold ``tau``, with their noisy counts.

Privacy (add/remove one unit; Bun & Steinke 2016, Def. 8.1):

* on the phrases present in both neighbours the counts move by at most 1 in at most
  ``max_items`` coordinates (l2 sensitivity sqrt(max_items)), so the noisy counts are the
  discrete Gaussian mechanism, rho = max_items / (2 sigma^2) zCDP (Canonne, Kamath & Steinke
  2020, Thm 14); thresholding is post-processing;
* the phrases held only by the added unit have count 1 and are released each with
  probability P(1 + Z >= tau), so at least one of them appears with probability at most
  delta_A = max_items * P(Z >= tau - 1). Conditioned on none of them appearing (the noise is
  independent per phrase), the output is the thresholded release of the shared phrases'
  counts, rho-zCDP-close to the output without the unit.

So the release is delta_A-approximately rho-zCDP, and approximate zCDP composes by adding rho
and adding delta. Converted, it is (epsilon(rho, delta'), delta' + delta_A)-DP for any delta' in
both directions: with p = P(some unit-only phrase is released) <= delta_A, the outputs that
carry such a phrase lie outside the support of the output without the unit, so adding the
unit costs at most p on top of the Gaussian part, and removing it costs at most
H_{e^eps (1 - p)} <= (1 - p) delta' + p (hockey-stick divergence, convex in its parameter).

``selection_threshold`` picks the smallest tau >= 2 whose delta_A does not exceed the requested
delta, using ``discrete_gaussian_tail``, an upper bound of the exact tail computed with 60-digit
arithmetic and rounded up. The caller must bound each unit to ``max_items`` distinct phrases
(``phrase_counts`` does and checks it): the release cannot see units, only counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.partition_threshold import (
    _check_int,
    _check_sigma,
    discrete_gaussian_tail,
    partition_selection_delta,
    selection_threshold,
)

if TYPE_CHECKING:
    from dpsynrag.accounting.rng import RandomSource

__all__ = ["MECHANISM", "STAGE", "discrete_gaussian_tail", "partition_selection_delta",
           "phrase_counts", "release_partitions", "selection_threshold"]

MECHANISM = "partition_selection"
STAGE = "f-phrases"


def phrase_counts(unit_phrases: Iterable[Sequence[str]], max_items: int) -> dict[str, int]:
    """counts[phrase] = the number of units listing ``phrase``: the input of the release.

    Raises ``ValueError`` if a unit lists more than ``max_items`` phrases or one phrase twice
    (the release's sensitivity assumes neither); the message never names a phrase.
    """
    max_items = _check_int(max_items, "max_items", 1)
    counts: dict[str, int] = {}
    for phrases in unit_phrases:
        if isinstance(phrases, str):
            raise TypeError("each unit's phrases must be a sequence of strings, not a str")
        if len(phrases) > max_items:
            raise ValueError(f"a unit lists more than max_items={max_items} phrases")
        if len(set(phrases)) != len(phrases):
            raise ValueError("a unit lists the same phrase twice")
        for phrase in phrases:
            if not isinstance(phrase, str):
                raise TypeError("phrases must be strings")
            counts[phrase] = counts.get(phrase, 0) + 1
    return counts


def release_partitions(
    ledger: Ledger,
    key: str,
    counts: Mapping[str, int],
    *,
    max_items: int,
    sigma: float,
    delta: float,
    stage: str = STAGE,
) -> dict[str, int]:
    """Release {phrase: noisy count} for the phrases whose noisy count reaches the threshold.

    ``counts[phrase]`` is the number of privacy units holding ``phrase`` (an integer >= 1);
    the caller guarantees that each unit holds at most ``max_items`` distinct phrases
    (``phrase_counts`` builds such counts and checks it). Every
    phrase present gets exact discrete Gaussian noise N_Z(0, sigma^2) (drawn in sorted phrase
    order from the ledger's random source); tau = ``selection_threshold(sigma, max_items,
    delta)`` is recorded in the charge and applied by the ledger
    (``Ledger.release_selection``: the draw returns every candidate's noisy count, the ledger
    keeps those >= the recorded tau), so the released phrases are those the recorded delta_A
    is about; only phrases present in ``counts`` can be released.

    Privacy: one ledger release (mechanism ``partition_selection``, l2 sensitivity
    sqrt(max_items)) that is delta_A-approximately rho-zCDP with rho = max_items /
    (2 sigma^2) and delta_A = max_items * P(Z >= tau - 1) <= ``delta`` (module docstring;
    Bun & Steinke 2016, Def. 8.1). A resumed build gets the stored value back, uncharged.
    Never log the result next to ``counts``.
    """
    max_items = _check_int(max_items, "max_items", 1)
    sigma = _check_sigma(sigma)
    phrases = sorted(counts)
    for phrase in phrases:
        if not isinstance(phrase, str):
            raise TypeError("phrases must be strings")
    exact = [counts[p] for p in phrases]
    for value in exact:
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError("every count must be an integer >= 1 (only phrases present in "
                             "the data may be candidates)")
    threshold = selection_threshold(sigma, max_items, delta)
    charge = Charge(stage=stage, mechanism=MECHANISM,
                    params={"sigma": sigma, "max_items": max_items, "threshold": threshold,
                            "delta": float(delta)},
                    sensitivity=math.sqrt(max_items), sensitivity_norm="l2")
    values = np.asarray(exact, dtype=np.int64)

    def draw(rng: RandomSource) -> np.ndarray:
        # every candidate's noisy count; the ledger keeps those at the charge's threshold
        return discrete_gaussian(values, sigma, rng, sensitivity=math.sqrt(max_items))

    return ledger.release_selection(key, charge, phrases, draw)
