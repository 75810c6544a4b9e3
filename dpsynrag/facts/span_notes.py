"""The n-gram mode's notes: which released spans a cluster keeps, and its note (post-
processing of released values only: the noisy span histogram of the cluster, the released
n-grams and public parameters; never a document).

A cluster keeps the spans of its noisy histogram whose noisy count reaches ``z`` sigma_C (a
span no member holds passes with probability about P(Z >= z sigma_C)), at most
``max_spans`` of them by noisy count, highest first; the note is those spans stitched by
their overlaps (``facts.spans.stitch``) in that order, each trimmed of its loose ends
(``trim_span``) and closed where it ends inside a bracket that a released n-gram closes
(``close_bracket``: "Toy Story (1995" becomes "Toy Story (1995)"), written anchor first,
then in an order keyed by the anchor (``note_order``). A cluster whose anchor does not pass
writes no note (its members are too few to say anything above the noise).

The notes read of each cluster's noisy histogram only its spans at or above ``z`` sigma_C
(highest first; the top ``max_spans`` and whether the anchor is among them). The build's
releases (``facts.span_releases.LedgerReleases``) therefore keep exactly those, with their
noisy counts, as each histogram is drawn (``fact_clusters.KeptCounts``: post-processing of
the full-row release, done at once so that no clusters x |D| table is ever held), and
``span_notes`` takes either that or the dense noisy table: the same notes from the same
release.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpsynrag.facts.fact_clusters import KeptCounts, kept_entries
from dpsynrag.facts.spans import (
    close_bracket,
    note_order,
    note_text,
    stitch,
    trim_span,
    windows_released,
)

__all__ = ["KEEP_Z", "MAX_SPANS", "SpanNote", "span_notes"]

KEEP_Z = 3.0  # a span is kept where its noisy count reaches KEEP_Z sigma_C
MAX_SPANS = 16  # spans stitched into one note at most


@dataclass(frozen=True)
class SpanNote:
    """One cluster's note: its anchor, the stitched spans (tokens) and the text."""

    cluster: int
    anchor: str
    spans: tuple[tuple[str, ...], ...]
    text: str


def _kept_rows(noisy: np.ndarray | KeptCounts, domain: Sequence[str],
               floor: float) -> Iterator[list[int]]:
    """Each cluster's domain indices at or above ``floor``, highest first."""
    if isinstance(noisy, KeptCounts):
        if noisy.width != len(domain):
            raise ValueError("the kept span histograms have another width than the domain")
        if noisy.floor > floor:
            raise ValueError("the span histograms were kept at a higher floor than the "
                             "notes read")
        for r in range(noisy.rows):
            indices, values = noisy.row(r)
            yield indices[values >= floor].tolist()  # already highest first
        return
    for r in range(len(noisy)):
        yield [j for j, _ in kept_entries(noisy[r], domain, floor)]


def span_notes(noisy: np.ndarray | KeptCounts, domain: Sequence[str],
               anchors: Sequence[str], sigma: float, *, stopwords: Collection[str],
               released: Mapping[int, Collection[str]], z: float = KEEP_Z,
               max_spans: int = MAX_SPANS) -> list[SpanNote]:
    """A note per cluster whose anchor passes, from the clusters x |domain| noisy counts or
    their kept entries (``KeptCounts``, kept at a floor no higher than ``z`` sigma). Spans
    are joined only where every window of the longest released length stays a released
    one."""
    index = {span: j for j, span in enumerate(domain)}
    notes: list[SpanNote] = []
    rows = _kept_rows(noisy, domain, z * sigma)
    for r, (anchor, kept) in enumerate(zip(anchors, rows, strict=True)):
        j = index.get(anchor)
        if j is None or j not in kept:
            continue
        spans = [domain[i] for i in kept[:max_spans]]
        if anchor not in spans:  # the anchor leads: it is what the cluster is about
            spans = [anchor, *spans[:max_spans - 1]]
        stitched = stitch(spans, stopwords=stopwords,
                          allowed=lambda tokens: windows_released(tokens, released))
        trimmed = [close_bracket(t, released) for t in
                   (trim_span(span, stopwords) for span in stitched) if t]
        stitched = note_order(list(dict.fromkeys(trimmed)), anchor)
        notes.append(SpanNote(r, anchor, tuple(stitched), note_text(stitched)))
    return notes
