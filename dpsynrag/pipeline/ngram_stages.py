"""The stages of ``build-corpus --generate facts --facts-items ngrams``: no word list.

A pure function of the documents, the plan and the ledger (``facts.span_corpus`` runs them
with the build's releases, ``facts.span_releases.LedgerReleases``):

(n1) each document's tokens (``facts.tokens``, a rule of the document alone) -> the n-gram
     release (``facts.ngrams``): one DP partition selection per public length, K_j n-grams
     per document at level j, rho = sum_j K_j / (2 sigma_A^2), delta_phrases in all;
(n2) the public span domain D and anchors (post-processing of released values); each
     document's spans and clusters (a rule of the document and public values);
(n3) one noisy span histogram per cluster over D (``release_span_histograms``: each
     document adds <= K_e + K_s spans to each of <= L clusters -> L (K_e + K_s) / (2
     sigma_C^2) by overlapping parallel composition; noise on every entry of D, 32 clusters
     at a time, each noisy row kept at once to its spans at or above 3 sigma_C, which is
     what the ledger stores: post-processing, so memory is bounded by the batch, not by
     clusters x |D|);
(n4) each cluster's note: its kept spans stitched by their overlaps (post-processing);
(n5) the leftover notes: released anchors no note holds, grouped by the public embedder
     (``facts.leftover_notes``, post-processing).

The only language knowledge: nltk's Treebank tokenizer and the public stopword list
(``dpsynrag/resources/stopwords.txt``); ``vocabulary_sha256`` records their hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

import numpy as np

from dpsynrag.facts.span_corpus import SpanSettings, span_corpus
from dpsynrag.facts.span_releases import LedgerReleases
from dpsynrag.facts.tokens import TOKENIZER, detokenize, ngram_tokens
from dpsynrag.pipeline.context import BuildContext, StageResult
from dpsynrag.transforms.vocabulary import stopwords

if TYPE_CHECKING:
    from dpsynrag.accounting.planner import FactsBudgetPlan

__all__ = ["language_sha256", "ngram_settings", "ngram_stages"]


def language_sha256(stop: Collection[str]) -> str:
    """The hash of what language knowledge the n-gram mode reads: the tokenizer's name and
    the stopword list."""
    text = TOKENIZER + "\n" + "\n".join(sorted(stop))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ngram_settings(plan: FactsBudgetPlan, L: int, anchor_rule: str = "rarest") -> SpanSettings:
    """The public settings of the n-gram stages from a facts plan with n-grams."""
    return SpanSettings(lengths=tuple(plan.ngram_lengths), level_items=tuple(plan.ngram_items),
                        cluster_cap=plan.K_e + plan.K_s, L=L, anchor_rule=anchor_rule)


def _handed_on(texts: list[str]) -> Iterator[str]:
    """The texts, then the list emptied: the Beam path writes them to its private shards
    and reads them there, so the driver holds none of them through the passes (at 10^6
    documents about 700 MB)."""
    yield from texts
    texts.clear()


def ngram_stages(ctx: BuildContext, texts: list[str]) -> StageResult:
    """Run (n1)-(n5); return the build's notes, one per cluster that passes, then the
    leftover notes. With ``--runner beam`` the stages consume ``texts`` (the list is empty
    afterwards: the build hands over its only copy, ``InputDocuments.hand_over_texts``)."""
    plan, config = ctx.plan, ctx.config
    stop = stopwords()
    settings = ngram_settings(plan, config.L, config.ngram_anchors)
    releases = LedgerReleases(ctx.ledger, weight_scale=plan.ngram_weight_scale or None,
                              span_weight_scale=plan.span_weight_scale or None,
                              sigma_levels=plan.sigma_A,
                              level_delta=plan.level_delta, sigma_clusters=plan.sigma_C)

    def embed(batch: list[str]) -> np.ndarray:  # the public embedder, through the runner
        return ctx.runner.embed(batch, lambda _n: None)

    ctx.log("(n1)-(n5) n-grams, clusters, span histograms, notes")
    with ctx.state.timed("n_ngram_stages"), \
            ctx.progress("(n) n-gram levels and span histograms",
                         len(settings.lengths)) as advance:
        if config.runner == "beam":  # the same stages on Apache Beam (pipeline.beam_ngrams)
            from dpsynrag.pipeline.beam_ingest import parse_beam_options
            from dpsynrag.pipeline.beam_ngrams import SCRATCH, beam_span_corpus

            corpus = beam_span_corpus(_handed_on(texts), settings, releases, stop=stop,
                                      scratch=ctx.state.directory / SCRATCH,
                                      runner=config.beam_runner,
                                      beam_options=parse_beam_options(config.beam_options),
                                      workers=config.workers, embed=embed, progress=advance)
        else:
            corpus = span_corpus(texts, settings, releases, stop=stop, embed=embed,
                                 progress=advance)
    notes = corpus.notes
    return StageResult(texts=[note.text for note in notes],
                       tokens=[sum(len(s) for s in note.spans) for note in notes],
                       kept=[True] * len(notes),
                       cluster_keywords=[detokenize(ngram_tokens(note.anchor))
                                         for note in notes],
                       vocabulary_sha256=language_sha256(stop), clusters=corpus.clusters)
