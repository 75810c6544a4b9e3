"""The stages of ``build-corpus --generate facts`` (issue 14): pay per released fact, not per token.

A pure function of the documents, the plan and the ledger (every release goes through it; a
resumed build reads released values back and never redraws them):

(a) K_s statistical keywords per document, from its words that are not capitalised (a rule
    of that document and the public wordfreq prior) -> the noisy keyword histogram (exact
    discrete Gaussian, rho = K_s / (2 sigma_h^2)) -> its top R_f keywords W (post-processing);
(f1) up to K_e open-vocabulary phrases per document (``transforms.phrases``, a rule of that
    document alone) -> DP partition selection (``accounting.partition_selection``):
    delta_A-approximately rho_A-zCDP, rho_A = K_e / (2 sigma_A^2) -> released phrases A;
(f2) clusters anchored on A, each document in at most L clusters, rarest anchor first (a rule
    of the document and released values) -> one noisy histogram per cluster over the public
    domain D = A u W: each document adds at most K_e + K_s items to each of at most L clusters
    -> L (K_e + K_s) / (2 sigma_C^2) by overlapping parallel composition;
(f3) fact selection and one note per cluster from released values only (post-processing,
    free; the writer never sees a document);
(f4) with ``--writer tokens`` (issue 15): each kept cluster's note is rewritten by the
    public-difference token sampler (``transforms.public_prior``) over that cluster's
    documents, the released note as the public document and its facts as candidates:
    T draws of rho = (c / tau)^2 / 2 per cluster, in the fact clusters' parallel group
    (each document is in at most L of them) -> L T (c / tau)^2 / 2.

The total is (epsilon(rho, delta - delta_phrases), delta)-DP: ``accounting.planner.plan_facts``.
Without ``--writer tokens`` no language model is used; the embedder only embeds the written
notes for the index.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.planner import FactsBudgetPlan
from dpsynrag.pipeline.config import BuildConfig
from dpsynrag.pipeline.state import BuildState

if TYPE_CHECKING:
    from dpsynrag.transforms.vocabulary import PublicVocabulary

PHRASES_KEY = "phrases"

__all__ = ["PHRASES_KEY", "fact_keywords", "facts_stages", "without_names"]


def facts_stages(texts: list[str], config: BuildConfig, plan: FactsBudgetPlan,
                 state: BuildState, ledger: Ledger, progress: Any,
                 seconds: dict[str, float], log: Callable[[str], None],
                 runner: Any = None) -> dict[str, Any]:
    """Run stages (a), (f1)-(f3) (and (f4) with ``--writer tokens``, which needs the
    ``runner``); return the build's result (texts, kept, anchors, ...)."""
    from dpsynrag.accounting.partition_selection import phrase_counts, release_partitions
    from dpsynrag.transforms.fact_clusters import (
        anchor_clusters,
        fact_domain,
        release_fact_histograms,
    )
    from dpsynrag.transforms.fact_writer import (
        FactRule,
        keyword_shares,
        select_facts,
        write_notes,
    )
    from dpsynrag.transforms.histogram import released_top_keywords
    from dpsynrag.transforms.phrases import document_phrases
    from dpsynrag.transforms.vocabulary import public_vocabulary

    vocab = public_vocabulary()

    # (a) keywords per document and the noisy keyword histogram -> top R_f keywords W
    t0 = time.monotonic()
    doc_keywords = state.load("keywords")
    if doc_keywords is None:
        log("(a) extracting keywords")
        with progress("(a) keywords", len(texts)) as advance:
            doc_keywords = fact_keywords(texts, vocab, config.K_s)
            advance(len(texts))
        state.save("keywords", doc_keywords)
    noisy_hist, top, top_words = released_top_keywords(ledger, doc_keywords, vocab,
                                                       K=config.K_s, sigma=plan.sigma_h,
                                                       R=config.R_f)
    seconds["a_keywords_histogram"] = time.monotonic() - t0

    # (f1) open-vocabulary phrases per document -> DP partition selection
    t0 = time.monotonic()
    doc_phrases = state.load("phrases")
    if doc_phrases is None:
        log("(f1) extracting phrases")
        with progress("(f1) phrases", len(texts)) as advance:
            doc_phrases = document_phrases(texts, vocab, config.K_e)
            advance(len(texts))
        state.save("phrases", doc_phrases)
    counts_of_phrases = phrase_counts(doc_phrases, config.K_e)  # refuses > K_e per document
    released = release_partitions(ledger, PHRASES_KEY, counts_of_phrases, max_items=config.K_e,
                                  sigma=plan.sigma_A, delta=plan.delta_phrases)
    seconds["f1_phrases"] = time.monotonic() - t0

    # (f2) clusters anchored on the released phrases; one noisy fact histogram per cluster
    t0 = time.monotonic()
    domain = fact_domain(released, top_words)
    in_domain = set(domain)
    doc_items = [_items(phrases, keywords, in_domain)
                 for phrases, keywords in zip(doc_phrases, doc_keywords, strict=True)]
    anchors, clusters = anchor_clusters(doc_items, released, config.L)
    noisy = None
    if anchors:
        with progress("(f2) fact histograms (clusters)", len(clusters)) as advance:
            noisy = release_fact_histograms(
                ledger, clusters, doc_items, domain, sigma=plan.sigma_C,
                max_items=config.K_e + config.K_s, L=config.L, progress=advance)
    seconds["f2_fact_histograms"] = time.monotonic() - t0

    # (f3) selection and writing: post-processing of released values only
    t0 = time.monotonic()
    shares = keyword_shares({w: float(noisy_hist[int(i)]) for w, i in zip(top_words, top,
                                                                           strict=True)},
                            config.K_s)
    rule = FactRule(label=config.facts_label)
    facts = select_facts(noisy, domain, anchors, set(released), plan.sigma_C, rule,
                         keyword_share=shares) if noisy is not None else []
    written = [item for item in facts if item is not None]  # dropped: by released values
    notes = write_notes(written)
    seconds["f3_write"] = time.monotonic() - t0
    if config.facts_writer_tokens:
        t0 = time.monotonic()
        members = [[texts[i] for i in clusters[item.cluster]] for item in written]
        notes, tokens = token_writer(members, written, notes, config, plan, state, ledger,
                                     runner, progress, log)
        seconds["f4_token_writer"] = time.monotonic() - t0
        if config.writer_keeps_note:
            notes = with_released_notes(notes, written)
        return {"texts": notes, "tokens": tokens, "kept": [True] * len(notes),
                "cluster_keywords": [item.anchor for item in written],
                "vocabulary_sha256": vocab.sha256, "clusters": len(anchors)}
    return {"texts": notes, "tokens": [len(note.split()) for note in notes],
            "kept": [True] * len(notes), "cluster_keywords": [item.anchor for item in written],
            "vocabulary_sha256": vocab.sha256, "clusters": len(anchors)}


WRITER_PROMPT = ("Summarize the diagnosis and the symptoms of the following patient note in one "
                 "sentence.\n\nNote: {document}")
WRITER_STAGE = "f-writer"


def token_writer(groups: list[list[str]], written: list[Any], notes: list[str],
                 config: BuildConfig, plan: FactsBudgetPlan, state: BuildState, ledger: Ledger,
                 runner: Any, progress: Any, log: Callable[[str], None]
                 ) -> tuple[list[str], list[int]]:
    """(f4): one text per kept cluster by the public-difference token sampler.

    Group g is the documents of cluster ``written[g].cluster``; its public document is its
    released note ``notes[g]`` and its candidates the note's facts (released values). Each
    draw is released under ``cluster/RRRRR/token/NNN`` in the fact clusters' parallel group,
    ``{keyword}`` in the reply prefix is the note's first name (``display_names``: names with
    more words first, e.g. the disease before its drug),
    T of them per cluster whatever the data (``PartitionTokenSampler``): rho = T (c/tau)^2 / 2
    per cluster. A resumed build reads the released tokens back (never redrawn).
    """
    from dpsynrag.pipeline.build import _eos_ids
    from dpsynrag.transforms.fact_clusters import GROUP, partition_name
    from dpsynrag.transforms.fact_writer import display_names
    from dpsynrag.transforms.prediction_release import PartitionTokenSampler, charge_unstarted
    from dpsynrag.transforms.public_prior import PublicPriorSettings

    synthetic = state.load("synthetic")
    if synthetic is not None:
        return list(synthetic["texts"]), list(synthetic["tokens"])
    if runner is None:
        raise ValueError("--writer tokens needs a runner with a language model")
    log("(f4) token writer")
    temperature = config.clip / plan.c_over_tau
    eos = frozenset(int(t) for t in state.load("eos_ids") or [])
    if not eos:
        eos = _eos_ids(runner)
        state.save("eos_ids", sorted(eos))
    token_counts = [0] * len(groups)
    with progress("(f4) token writer (clusters)", len(groups)) as advance:
        def finished(group: int, n_tokens: int) -> None:
            token_counts[group] = n_tokens
            advance(1)

        sampler = PartitionTokenSampler(
            ledger, [partition_name(item.cluster) for item in written], group=GROUP,
            stage=WRITER_STAGE, clip=config.clip, temperature=temperature,
            max_new_tokens=config.T, eos_ids=eos, on_finish=finished)
        prefix = config.response_prefix or ""
        names = [display_names(item) for item in written]  # as the notes write them
        prefixes = [prefix.replace("{keyword}", group_names[0]) for group_names in names]
        settings = PublicPriorSettings(
            documents=notes, top_k=config.public_top_k, temperature=config.public_temperature,
            candidates=[[*group_names, *item.keywords]
                        for group_names, item in zip(names, written, strict=True)])
        texts = runner.predict(groups, sampler, prompt=config.rephrase_prompt or WRITER_PROMPT,
                               max_new_tokens=config.T, clip=config.clip,
                               temperature=temperature, batch_rows=config.batch_rows,
                               response_prefix=prefixes, public_prior=settings) if groups else []
        charge_unstarted(ledger, sampler)
    state.save("synthetic", {"texts": texts, "tokens": token_counts})
    return list(texts), token_counts


def with_released_notes(replies: list[str], written: list[Any]) -> list[str]:
    """``--writer-keeps-note``: each writer reply followed by its cluster's template note.

    Privacy cost: none. The reply is a released token sequence and the note is written from
    the cluster's released facts (``write_notes``), so the text is post-processing.
    """
    from dpsynrag.transforms.fact_writer import write_notes

    return [f"{reply.strip()}\n{note}".strip()
            for reply, note in zip(replies, write_notes(written), strict=True)]


def fact_keywords(texts: list[str], vocab: PublicVocabulary, K_s: int) -> list[list[str]]:
    """Each document's K_s keywords of the facts mode: the statistical keywords of its
    uncapitalised words, inflections folded onto V (a rule of the document alone)."""
    from dpsynrag.transforms.keywords import statistical_keywords

    return statistical_keywords([without_names(t) for t in texts], vocab, K_s,
                                fold_inflections=True)


def without_names(text: str) -> str:
    """The document without its capitalised words (names of people, places, drugs; a rule of
    the document alone): the keywords of a fact note describe, the phrases name."""
    return " ".join(word for word in text.split() if not word[:1].isupper())


def _items(phrases: list[str], keywords: list[str], domain: set[str]) -> list[str]:
    """A document's distinct items of the public domain: its phrases, then its keywords."""
    seen: dict[str, None] = {}
    for item in (*phrases, *keywords):
        if item in domain:
            seen.setdefault(item, None)
    return list(seen)
