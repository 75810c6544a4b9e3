"""The n-gram mode from documents to notes, one function for the build and the ceiling.

(n1) each document's tokens (``facts.tokens``) -> the n-gram release (``facts.ngrams``);
(n2) the public span domain D: the released n-grams holding a content token (neither
     punctuation nor a public stopword); the anchors: the spans of D that no longer
     released n-gram contains (post-processing of released values). Each document's items:
     its maximal released spans in D, those that overlap its other spans least first
     (``spans.document_spans``), then those with the most content tokens, then the
     longest, then the rarest (``document_items``), at most ``cluster_cap``: a rule of the
     document and released values. Its clusters: the first L anchors among its items,
     anchors of two content tokens or more first, then the rarest released count
     (``anchor_priority``, the default rule), or, with the opt-in ``nearest`` rule, those
     nearest the document's text by the public embedder (``facts.anchor_choice``): a
     function of the document, released values and a public model, so adding or removing
     one document changes no other document's clusters;
(n3) one span histogram per cluster over D (``releases.histograms``; in a build each
     document adds <= cluster_cap spans to each of <= L clusters);
(n4) each cluster's note (``facts.span_notes``): post-processing;
(n5) given the public embedder, the notes of the released anchors that no note holds
     (``facts.leftover_notes``): post-processing.

``releases`` is ``facts.span_releases.LedgerReleases`` in a build and ``ExactReleases`` for
the eval's ceiling.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from dpsynrag.facts.anchor_choice import ANCHOR_RULES, Embed, nearest_first
from dpsynrag.facts.fact_clusters import anchor_clusters
from dpsynrag.facts.leftover_notes import leftover_notes
from dpsynrag.facts.ngrams import release_ngrams
from dpsynrag.facts.span_notes import SpanNote, span_notes
from dpsynrag.facts.span_releases import SpanReleases
from dpsynrag.facts.spans import document_spans, is_content
from dpsynrag.facts.tokens import ngram_tokens, tokenize

__all__ = ["SpanCorpus", "SpanSettings", "anchor_priority", "anchors_of", "cluster_members",
           "document_items",
           "span_corpus", "span_domain"]


@dataclass(frozen=True)
class SpanSettings:
    """Public parameters of the n-gram mode."""

    lengths: tuple[int, ...]
    level_items: tuple[int, ...]
    cluster_cap: int
    L: int
    anchor_rule: str = "rarest"  # facts.anchor_choice.ANCHOR_RULES

    def __post_init__(self) -> None:
        if self.anchor_rule not in ANCHOR_RULES:
            raise ValueError(f"anchor_rule must be one of {', '.join(ANCHOR_RULES)}, got "
                             f"{self.anchor_rule!r}")


@dataclass(frozen=True)
class SpanCorpus:
    """The notes, and how many clusters there were (empty ones included)."""

    notes: list[SpanNote]
    clusters: int


def span_domain(released: Mapping[str, int], stop: Collection[str]) -> list[str]:
    """D: the released n-grams with a content token, sorted. A released word alone ("Linux",
    "Iraq") is a span too: the rarest of them are what a short text is about."""
    return sorted(g for g in released if any(is_content(t, stop) for t in ngram_tokens(g)))


def anchors_of(domain: Sequence[str], released: Mapping[str, int]) -> dict[str, int]:
    """The spans of D that no longer released n-gram contains, with their released counts."""
    contained: set[str] = set()
    for g in released:
        tokens = ngram_tokens(g)
        n = len(tokens)
        for size in range(1, n):
            for start in range(n - size + 1):
                contained.add(" ".join(tokens[start:start + size]))
    return {g: released[g] for g in domain if g not in contained}


def anchor_priority(anchors: Mapping[str, int], stop: Collection[str]) -> dict[str, int]:
    """Anchors with two content tokens or more first, then those with one."""
    return {a: 0 if sum(is_content(t, stop) for t in ngram_tokens(a)) >= 2 else 1
            for a in anchors}


def document_items(tokens: Sequence[str], levels: Mapping[int, Mapping[str, int]],
                   domain: Collection[str], released: Mapping[str, int], cap: int,
                   stop: Collection[str],
                   shape: Callable[[str], tuple[int, int]] | None = None) -> list[str]:
    """A document's spans for the clusters: its maximal released spans in D, the fresh
    ones first, then those overlapping them (``spans.document_spans``), within each tier
    those with the most content tokens first, then the longest, then the rarest released
    count (ties: the order they occur), at most ``cap``. ``shape(span)``: (content tokens,
    tokens) of a span, e.g. ``span_shape`` cached for the build (public: a function of the
    span)."""
    fresh, overlapping = document_spans(tokens, levels)
    tiers = [[s for s in fresh if s in domain], [s for s in overlapping if s in domain]]
    order = {s: i for i, s in enumerate(tiers[0] + tiers[1])}
    measure = shape if shape is not None else functools.partial(span_shape, stop=stop)

    def rank(span: str) -> tuple[int, int, int, int]:
        content, size = measure(span)
        return (-content, -size, released[span], order[span])

    return [*sorted(tiers[0], key=rank), *sorted(tiers[1], key=rank)][:cap]


def span_shape(span: str, stop: Collection[str]) -> tuple[int, int]:
    """(content tokens, tokens) of a released span."""
    words = ngram_tokens(span)
    return sum(is_content(t, stop) for t in words), len(words)


def cluster_members(texts: Sequence[str], items: Sequence[Sequence[str]],
                    anchor_counts: Mapping[str, int], settings: SpanSettings,
                    stop: Collection[str], embed: Embed | None
                    ) -> tuple[list[str], list[list[int]]]:
    """The clusters' anchors (the public order of ``anchor_clusters``) and members under
    the settings' anchor rule."""
    if settings.anchor_rule == "nearest":
        if embed is None:
            raise ValueError("the nearest anchor rule needs the public embedder (embed=)")
        ordered = nearest_first(texts, items, anchor_counts, embed)
        return anchor_clusters(ordered, anchor_counts, settings.L,
                               priority=dict.fromkeys(anchor_counts, 0), own_order={0})
    return anchor_clusters(items, anchor_counts, settings.L,
                           priority=anchor_priority(anchor_counts, stop))


def span_corpus(texts: Sequence[str], settings: SpanSettings, releases: SpanReleases, *,
                stop: Collection[str], embed: Embed | None = None,
                progress: Callable[[int], None] | None = None) -> SpanCorpus:
    """(n1)-(n5) (module docstring). ``embed``: the public embedder, which the ``nearest``
    anchor rule and (n5) need (without it, the cluster notes only). ``progress(1)`` after
    each n-gram level and each batch of span histograms."""
    if settings.anchor_rule == "nearest" and embed is None:
        raise ValueError("the nearest anchor rule needs the public embedder (embed=)")
    tokens = [tokenize(text) for text in texts]

    @functools.cache
    def public(token: str) -> bool:  # one test per distinct token
        return not is_content(token, stop)

    levels = release_ngrams(tokens, settings.lengths, max_items=settings.level_items,
                            release=releases.level, public=public, progress=progress)
    released = levels.all_released()
    domain = span_domain(released, stop)
    in_domain = set(domain)
    shape = functools.cache(functools.partial(span_shape, stop=stop))  # one per span of D
    items = [document_items(t, levels.released, in_domain, released, settings.cluster_cap,
                            stop, shape) for t in tokens]
    anchor_counts = anchors_of(domain, released)
    anchors, members = cluster_members(texts, items, anchor_counts, settings, stop, embed)
    if not anchors:
        return SpanCorpus([], 0)
    noisy = releases.histograms(members, items, domain, max_items=settings.cluster_cap,
                                L=settings.L, progress=progress)
    notes = span_notes(noisy, domain, anchors, releases.sigma_clusters, stopwords=stop,
                       released=levels.released)
    if embed is not None:  # (n5) the released anchors no note holds
        notes = [*notes, *leftover_notes(notes, anchor_counts, embed, stop,
                                          released=levels.released)]
    return SpanCorpus(notes, len(anchors))
