"""The stages of ``build-corpus --generate facts --facts-items ngrams``: no word list.

A pure function of the documents, the plan and the ledger:

(n1) each document's tokens (``facts.tokens``, a rule of the document alone) -> the n-gram
     release (``facts.ngrams``): one DP partition selection per public length, K_e
     n-grams per document and level, rho = J K_e / (2 sigma_A^2), delta_phrases in all;
(n2) the public span domain D: the released n-grams of >= 2 tokens holding a token that is
     neither punctuation nor a public stopword; the anchors: those of D that no longer
     released n-gram contains (post-processing of released values);
     each document's items: its maximal released spans in D, rarest released count first,
     at most K_e + K_s (a rule of the document and released values); its clusters: the
     first L anchors among them (``facts.fact_clusters.anchor_clusters``);
(n3) one noisy span histogram per cluster over D (``release_fact_histograms``: each
     document adds <= K_e + K_s spans to each of <= L clusters -> L (K_e + K_s) / (2
     sigma_C^2) by overlapping parallel composition);
(n4) each cluster's note: its kept spans stitched by their overlaps (``facts.span_notes``,
     post-processing, free).

The only language knowledge: nltk's Treebank tokenizer and the public stopword list
(``dpsynrag/resources/stopwords.txt``); ``vocabulary_sha256`` records their hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence

from dpsynrag.facts.fact_clusters import anchor_clusters, release_fact_histograms
from dpsynrag.facts.ngrams import ledger_release, release_ngrams
from dpsynrag.facts.span_notes import span_notes
from dpsynrag.facts.spans import document_spans, is_content
from dpsynrag.facts.tokens import TOKENIZER, detokenize, ngram_tokens, tokenize
from dpsynrag.pipeline.context import BuildContext, StageResult
from dpsynrag.transforms.vocabulary import stopwords

__all__ = ["anchors_of", "document_items", "language_sha256", "ngram_stages", "span_domain"]


def language_sha256(stop: Collection[str]) -> str:
    """The hash of what language knowledge the n-gram mode reads: the tokenizer's name and
    the stopword list."""
    text = TOKENIZER + "\n" + "\n".join(sorted(stop))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def span_domain(released: Mapping[str, int], stop: Collection[str]) -> list[str]:
    """D: the released n-grams of at least two tokens with a content token, sorted."""
    return sorted(g for g in released
                  if " " in g and any(is_content(t, stop) for t in ngram_tokens(g)))


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
    """Anchors with two content tokens or more first (a name, a title, a finding: "Lars Zhou"
    before ". Saw"), then those with one: a public rule of released values."""
    return {a: 0 if sum(is_content(t, stop) for t in ngram_tokens(a)) >= 2 else 1
            for a in anchors}


def document_items(tokens: Sequence[str], levels: Mapping[int, Mapping[str, int]],
                   domain: Collection[str], released: Mapping[str, int], cap: int
                   ) -> list[str]:
    """A document's spans for the clusters: its maximal released spans in D, those with
    the most content tokens first, then the longest, then the rarest released count (ties:
    the order they occur), at most ``cap``."""
    spans = [s for s in document_spans(tokens, levels) if s in domain]
    order = {s: i for i, s in enumerate(spans)}
    stop = stopwords()

    def rank(span: str) -> tuple[int, int, int, int]:
        words = ngram_tokens(span)
        return (-sum(is_content(t, stop) for t in words), -len(words), released[span],
                order[span])

    return sorted(spans, key=rank)[:cap]


def ngram_stages(ctx: BuildContext, texts: list[str]) -> StageResult:
    """Run (n1)-(n4); return the build's notes, one per cluster that passes."""
    plan, config = ctx.plan, ctx.config
    stop = stopwords()
    ctx.log("(n1) n-grams: tokenizing")
    with ctx.progress("(n1) tokens", len(texts)) as advance:
        tokens = [tokenize(text) for text in texts]
        advance(len(texts))
    with ctx.state.timed("n1_ngrams"), \
            ctx.progress("(n1) n-gram levels", len(plan.ngram_lengths)) as advance:
        levels = release_ngrams(tokens, plan.ngram_lengths, max_items=plan.ngram_items,
                                release=ledger_release(ctx.ledger, sigma=plan.sigma_A,
                                                       delta=plan.level_delta),
                                public=lambda token: not is_content(token, stop),
                                progress=advance)
    with ctx.state.timed("n2_clusters"):
        released = levels.all_released()
        domain = span_domain(released, stop)
        in_domain = set(domain)
        cap = plan.K_e + plan.K_s
        items = [document_items(t, levels.released, in_domain, released, cap)
                 for t in tokens]
        anchor_counts = anchors_of(domain, released)
        anchors, members = anchor_clusters(items, anchor_counts, config.L,
                                           priority=anchor_priority(anchor_counts, stop))
    notes = []
    if anchors:
        with ctx.state.timed("n3_span_histograms"), \
                ctx.progress("(n3) span histograms (clusters)", len(members)) as advance:
            noisy = release_fact_histograms(ctx.ledger, members, items, domain,
                                            sigma=plan.sigma_C, max_items=cap, L=config.L,
                                            progress=advance)
        with ctx.state.timed("n4_write"):
            notes = span_notes(noisy, domain, anchors, plan.sigma_C, stopwords=stop,
                               released=levels.released)
    texts_out = [note.text for note in notes]
    return StageResult(texts=texts_out, tokens=[sum(len(s) for s in note.spans)
                                                for note in notes],
                       kept=[True] * len(notes),
                       cluster_keywords=[detokenize(ngram_tokens(note.anchor))
                                         for note in notes],
                       vocabulary_sha256=language_sha256(stop), clusters=len(anchors))
