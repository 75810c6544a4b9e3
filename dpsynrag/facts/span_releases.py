"""Where the n-gram stages take their releases from: the build's ledger, or exact counts for
the evaluation's epsilon = inf ceiling, so that the ceiling runs the very stage code.

``LedgerReleases`` is the only source a build uses: every n-gram level is a DP partition
selection and every cluster's span histogram a discrete Gaussian release, charged before
drawing and stored (``facts.ngrams``, ``facts.fact_clusters``). ``ExactReleases`` returns
the exact counts (the n-grams at or above each level's threshold, the histograms without
noise): NOT private, for measurements only; nothing it returns may be published.

Both return the span histograms as ``fact_clusters.KeptCounts``: per cluster, the spans whose
(noisy, or exact) count reaches ``span_notes.KEEP_Z`` sigma_C with their counts, highest
first -- all that the notes read. In a build each histogram is still released whole (exact
discrete Gaussian on every entry of D, charged as before) and only then post-processed to
its kept spans, which is what the ledger stores: post-processing of the release, free. The
driver never holds a clusters x |D| table (``fact_clusters.release_span_histograms``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.facts.fact_clusters import KeptCounts, release_span_histograms, sparse_fact_counts
from dpsynrag.facts.ngrams import exact_release, ledger_release
from dpsynrag.facts.span_notes import KEEP_Z

__all__ = ["EXACT_SIGMA", "ExactReleases", "LedgerReleases", "SpanReleases"]

EXACT_SIGMA = 1e-3  # the ceiling's stand-in sigma_C: a span kept where one member holds it


class SpanReleases(Protocol):
    """The two kinds of release the n-gram stages make."""

    @property
    def sigma_clusters(self) -> float:
        """The noise scale of the span histograms (what the notes' keep rule is relative
        to)."""
        ...

    def level(self, key: str, choices: Iterable[Sequence[str]],
              max_items: int) -> dict[str, int]:
        """One n-gram level: {n-gram: released count} of the candidates (each document's
        chosen n-grams) that pass."""
        ...

    def histograms(self, members: Sequence[Sequence[int]], items: Sequence[Sequence[str]],
                   domain: Sequence[str], *, max_items: int, L: int,
                   progress: Callable[[int], None] | None = None) -> KeptCounts:
        """Every cluster's span histogram over ``domain``, kept at ``KEEP_Z`` sigma_C (its
        spans at or above, highest first, with their counts)."""
        ...


@dataclass(frozen=True)
class LedgerReleases:
    """The build's releases: partition selection per level at ``sigma_levels`` and
    ``level_delta`` (weighted contributions with ``weight_scale``, ``sigma_levels`` then in
    weight units); discrete Gaussian span histograms at ``sigma_clusters`` (weighted counts
    with ``span_weight_scale``, ``sigma_clusters`` then in its weight units)."""

    ledger: Ledger
    sigma_levels: float
    level_delta: float
    sigma_clusters: float
    weight_scale: int | None = None
    span_weight_scale: int | None = None  # weighted span histograms (sigma_clusters in its units)

    def level(self, key: str, choices: Iterable[Sequence[str]],
              max_items: int) -> dict[str, int]:
        release = ledger_release(self.ledger, sigma=self.sigma_levels, delta=self.level_delta,
                                 weight_scale=self.weight_scale)
        return release(key, choices, max_items)

    def histograms(self, members: Sequence[Sequence[int]], items: Sequence[Sequence[str]],
                   domain: Sequence[str], *, max_items: int, L: int,
                   progress: Callable[[int], None] | None = None) -> KeptCounts:
        return release_span_histograms(self.ledger, members, items, domain,
                                       sigma=self.sigma_clusters, max_items=max_items, L=L,
                                       floor=KEEP_Z * self.sigma_clusters, progress=progress,
                                       weight_scale=self.span_weight_scale)


@dataclass(frozen=True)
class ExactReleases:
    """Exact counts (NOT private): each level's n-grams whose exact (weighted, with
    ``weight_scale``) count reaches ``thresholds[key]``, and the histograms without noise."""

    thresholds: Mapping[str, int]
    sigma_clusters: float = EXACT_SIGMA
    weight_scale: int | None = None
    span_weight_scale: int | None = None

    def level(self, key: str, choices: Iterable[Sequence[str]],
              max_items: int) -> dict[str, int]:
        return exact_release(self.thresholds[key], self.weight_scale)(key, choices, max_items)

    def histograms(self, members: Sequence[Sequence[int]], items: Sequence[Sequence[str]],
                   domain: Sequence[str], *, max_items: int, L: int,
                   progress: Callable[[int], None] | None = None) -> KeptCounts:
        counts = sparse_fact_counts(members, items, domain, max_items,
                                    weight_scale=self.span_weight_scale)
        if progress is not None:
            progress(len(members))
        return KeptCounts.from_sparse(counts, domain, KEEP_Z * self.sigma_clusters)
