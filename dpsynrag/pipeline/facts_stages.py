"""The stages of ``build-corpus --generate facts`` (issue 14): pay per released fact, not per token.

A pure function of the documents, the plan and the ledger (every release goes through it; a
resumed build reads released values back and never redraws them):

(a) K_s statistical keywords per document, from its words that are not capitalised (a rule
    of that document and the public wordfreq prior) -> the noisy keyword histogram (exact
    discrete Gaussian, rho = K_s / (2 sigma_h^2)) -> its top R_f keywords W (post-processing);
(f1) up to K_e terms per document, each with its role cue (``facts.terms``: ordinary
    multi-word terms, names, digits; the default ``--facts-items terms``), or up to K_e
    open-vocabulary phrases (``facts.phrases``, ``--facts-items open``), a rule of that
    document alone -> DP partition selection (``accounting.partition_selection``):
    delta_A-approximately rho_A-zCDP, rho_A = K_e / (2 sigma_A^2) -> released phrases A;
    with terms, each document then chooses its K_e terms again among its candidates in A
    (``facts.term_choice``: a rule of the document and released values, free);
(f1r) with terms: the role histogram of A (``facts.roles``: one (term, role) pair per
    term of a document, l2 sensitivity sqrt(K_e)) -> rho_R = K_e / (2 sigma_R^2); each term's
    role is post-processing, and each document chooses its K_e terms once more, the terms
    of a released naming role first;
(f2) clusters anchored on A, each document in at most L clusters, by released role then
    rarest anchor first, or among the terms without a released role the one the document
    lists first (a rule of the document and released values) -> one noisy
    histogram per cluster over the public domain D = A u W: each document adds at most
    K_e + K_s items to each of at most L clusters -> L (K_e + K_s) / (2 sigma_C^2) by
    overlapping parallel composition;
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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from dpsynrag.facts.fact_clusters import (
    GROUP,
    anchor_clusters,
    fact_domain,
    partition_name,
    release_fact_histograms,
)
from dpsynrag.facts.fact_writer import (
    FactRule,
    display_names,
    distinct_views,
    estimated_documents,
    keyword_shares,
    select_facts,
    write_notes,
)
from dpsynrag.facts.phrases import document_phrases
from dpsynrag.facts.roles import OWN_ORDER_PRIORITIES, release_roles, role_priority, term_roles
from dpsynrag.facts.term_choice import (
    CANDIDATES,
    anchor_terms,
    first_terms,
    released_choices,
)
from dpsynrag.facts.terms import DocumentTerms, document_terms
from dpsynrag.pipeline.config import ablated_levers
from dpsynrag.pipeline.context import BuildContext, StageResult
from dpsynrag.pipeline.ngram_stages import ngram_stages
from dpsynrag.pipeline.token_stages import ledger_token_texts
from dpsynrag.transforms.histogram import released_top_keywords
from dpsynrag.transforms.keywords import statistical_keywords
from dpsynrag.transforms.vocabulary import public_vocabulary

if TYPE_CHECKING:
    import numpy as np

    from dpsynrag.facts.fact_writer import ClusterFacts
    from dpsynrag.pipeline.config import BuildConfig
    from dpsynrag.transforms.public_prior import PublicPriorSettings
    from dpsynrag.transforms.vocabulary import PublicVocabulary

PHRASES_KEY = "phrases"
T = TypeVar("T")

__all__ = ["PHRASES_KEY", "fact_keywords", "facts_stages", "without_names"]


class ReleasedKeywords(NamedTuple):
    """(a): each document's keywords (private), the released noisy histogram, its top
    indices and their words W (released)."""

    per_document: list[list[str]]
    noisy: np.ndarray
    top: np.ndarray
    words: list[str]


class ReleasedPhrases(NamedTuple):
    """(f1): each document's phrases or terms (private), the released phrases A, and, with
    ``--facts-items terms``, each document's terms with their roles chosen among its
    released candidates (private; ``facts.term_choice``), the released role of each term of A
    (post-processing of the role histogram) and each document's candidates (private)."""

    per_document: list[list[str]]
    released: dict[str, int]
    terms: list[DocumentTerms] | None = None
    roles: dict[str, str] | None = None
    candidates: list[DocumentTerms] | None = None
    anchoring: list[list[str]] | None = None  # the terms that choose each one's cluster


class FactClusters(NamedTuple):
    """(f2): the public domain D, the clusters' anchors and documents, and their released
    fact histograms (None when no phrase was released)."""

    domain: list[str]
    anchors: list[str]
    members: list[list[int]]
    noisy: np.ndarray | None


def facts_stages(ctx: BuildContext, texts: list[str]) -> StageResult:
    """Run stages (a), (f1)-(f3) (and (f4) with ``--writer tokens``, which needs the
    context's runner); return the build's result (notes, kept, anchors, ...). With
    ``--facts-items ngrams``: the n-gram stages (``pipeline.ngram_stages``) instead."""
    if ctx.config.facts_items == "ngrams":
        return ngram_stages(ctx, texts)
    vocab = public_vocabulary()
    keywords = keyword_histogram(ctx, texts, vocab)  # (a)
    phrases = released_phrases(ctx, texts, vocab)  # (f1)
    phrases = released_roles(ctx, phrases)  # (f1r), with --facts-items terms
    clusters = fact_histograms(ctx, phrases, keywords)  # (f2)
    written, notes = write_facts(ctx, keywords, phrases, clusters)  # (f3)
    anchors = [item.anchor for item in written]
    if ctx.config.facts_writer_tokens:
        with ctx.state.timed("f4_token_writer"):  # (f4)
            groups = [[texts[i] for i in clusters.members[item.cluster]] for item in written]
            replies, tokens = token_writer(ctx, groups, written, notes)
        notes = with_released_notes(replies, notes) if ctx.config.writer_keeps_note \
            else replies
    else:  # the template's views of each kept cluster (post-processing, free)
        views = distinct_views(written, ctx.config.resolved_texts_per_cluster)
        anchors, notes = [a for a, _ in views], [v for _, v in views]
        tokens = [len(note.split()) for note in notes]
    return StageResult(texts=notes, tokens=tokens, kept=[True] * len(notes),
                       cluster_keywords=anchors,
                       vocabulary_sha256=vocab.sha256, clusters=len(clusters.anchors))


def keyword_histogram(ctx: BuildContext, texts: list[str], vocab: PublicVocabulary
                      ) -> ReleasedKeywords:
    """(a): keywords per document (checkpoint ``keywords``) and the noisy keyword histogram
    -> its top R_f keywords W."""
    def extract() -> list[list[str]]:
        return _per_document(ctx, "(a) keywords", texts,
                             lambda: fact_keywords(texts, vocab, ctx.plan.K_s))

    stage = "a_keywords_histogram"
    doc_keywords = ctx.state.checkpoint("keywords", extract, stage=stage)
    with ctx.state.timed(stage):
        noisy, top, words = released_top_keywords(ctx.ledger, doc_keywords, vocab,
                                                  K=ctx.plan.K_s, sigma=ctx.plan.sigma_h,
                                                  R=ctx.config.R_f)
    return ReleasedKeywords(doc_keywords, noisy, top, words)


def _per_document(ctx: BuildContext, label: str, texts: list[str], rule: Callable[[], T]) -> T:
    """Run a per-document rule over ``texts`` with a log line and a progress bar."""
    ctx.log(f"{label}: extracting")
    with ctx.progress(label, len(texts)) as advance:
        found = rule()
        advance(len(texts))
    return found


def released_phrases(ctx: BuildContext, texts: list[str], vocab: PublicVocabulary
                     ) -> ReleasedPhrases:
    """(f1): terms with their roles (checkpoint ``terms``) or open-vocabulary phrases
    (checkpoint ``phrases``) per document -> DP partition selection."""
    # mpmath (60-digit tails): loaded for the facts mode only
    from dpsynrag.accounting.partition_selection import phrase_counts, release_partitions

    candidates: list[DocumentTerms] | None = None
    if ctx.config.facts_items == "terms":
        def extract_terms() -> list[list[list[str]]]:
            found = _per_document(ctx, "(f1) terms", texts,
                                  lambda: document_terms(texts, vocab, CANDIDATES))
            return [item.as_json() for item in found]

        stage = "f1_terms"
        candidates = [DocumentTerms.from_json(pairs) for pairs
                      in ctx.state.checkpoint("term-candidates", extract_terms, stage=stage)]
        doc_phrases = [list(first_terms(item, ctx.plan.K_e).terms) for item in candidates]
    else:
        def extract() -> list[list[str]]:
            return _per_document(ctx, "(f1) phrases", texts,
                                 lambda: document_phrases(texts, vocab, ctx.plan.K_e))

        stage = "f1_phrases"
        doc_phrases = ctx.state.checkpoint("phrases", extract, stage=stage)
    with ctx.state.timed(stage):
        counts = phrase_counts(doc_phrases, ctx.plan.K_e)  # refuses > K_e per document
        released = release_partitions(ctx.ledger, PHRASES_KEY, counts,
                                      max_items=ctx.plan.K_e, sigma=ctx.plan.sigma_A,
                                      delta=ctx.plan.delta_phrases)
    if candidates is None:
        return ReleasedPhrases(doc_phrases, released)
    # each document's K_e terms again, among its released candidates (facts.term_choice:
    # a rule of the document and released values)
    terms = released_choices(candidates, released, ctx.plan.K_e)
    return ReleasedPhrases([list(item.terms) for item in terms], released, terms=terms,
                           candidates=candidates)


def released_roles(ctx: BuildContext, phrases: ReleasedPhrases) -> ReleasedPhrases:
    """(f1r): the role histogram of the released terms (``facts.roles``: one discrete
    Gaussian release, rho_R = K_e / (2 sigma_R^2)) and each term's role (post-processing).
    Without terms or with --share-roles 0: nothing released, no roles."""
    if phrases.terms is None or not ctx.plan.share_roles:
        return phrases
    released = sorted(phrases.released)
    with ctx.state.timed("f1r_roles"):
        noisy = release_roles(ctx.ledger, phrases.terms, released, K_e=ctx.plan.K_e,
                              sigma=ctx.plan.sigma_R)
        roles = dict(term_roles(noisy, released, ctx.plan.sigma_R))
    if phrases.candidates is None:
        return phrases._replace(roles=roles)
    # the released roles choose again: a term a reader asks for is never cut
    chosen = released_choices(phrases.candidates, phrases.released, ctx.plan.K_e, roles)
    return phrases._replace(per_document=[list(item.terms) for item in chosen], roles=roles,
                            anchoring=[anchor_terms(item, roles) for item in chosen])


def fact_histograms(ctx: BuildContext, phrases: ReleasedPhrases, keywords: ReleasedKeywords
                    ) -> FactClusters:
    """(f2): clusters anchored on the released phrases; one noisy fact histogram per
    cluster (every value read back from the ledger on resume: nothing to checkpoint)."""
    with ctx.state.timed("f2_fact_histograms"):
        domain = fact_domain(phrases.released, keywords.words)
        in_domain = set(domain)
        doc_items = [_items(doc_phrases, doc_keywords, in_domain) for doc_phrases, doc_keywords
                     in zip(phrases.per_document, keywords.per_document, strict=True)]
        # released roles: a document joins the cluster of what it is about first; only its
        # own terms (phrases) choose its cluster: a keyword that happens to be a released
        # term ("a comedy about ...") does not pull it away from its title's cluster
        priority = role_priority(phrases.roles, phrases.released) if phrases.roles else None
        anchoring = phrases.anchoring if phrases.anchoring is not None \
            else phrases.per_document
        anchors, members = anchor_clusters(anchoring, phrases.released,
                                           ctx.config.L, priority=priority,
                                           own_order=OWN_ORDER_PRIORITIES)
        noisy = None
        if anchors:
            with ctx.progress("(f2) fact histograms (clusters)", len(members)) as advance:
                noisy = release_fact_histograms(
                    ctx.ledger, members, doc_items, domain, sigma=ctx.plan.sigma_C,
                    max_items=ctx.plan.K_e + ctx.plan.K_s, L=ctx.config.L,
                    progress=advance)
    return FactClusters(domain, anchors, members, noisy)


def write_facts(ctx: BuildContext, keywords: ReleasedKeywords, phrases: ReleasedPhrases,
                clusters: FactClusters) -> tuple[list[ClusterFacts], list[str]]:
    """(f3): fact selection and one note per kept cluster: post-processing of released values
    only. Returns the kept clusters' facts and their notes."""
    with ctx.state.timed("f3_write"):
        shares = keyword_shares({w: float(keywords.noisy[int(i)])
                                 for w, i in zip(keywords.words, keywords.top, strict=True)},
                                ctx.plan.K_s)
        rule = FactRule(label=ctx.config.facts_label)
        n_hat = estimated_documents({w: float(keywords.noisy[int(i)]) for w, i
                                     in zip(keywords.words, keywords.top, strict=True)},
                                    ctx.plan.K_s)
        terms_mode = phrases.terms is not None
        facts = select_facts(clusters.noisy, clusters.domain, clusters.anchors,
                             set(phrases.released), ctx.plan.sigma_C, rule,
                             keyword_share=shares,
                             phrase_share={p: max(float(c), 0.0) / n_hat
                                           for p, c in phrases.released.items()}
                             if terms_mode else None,
                             roles=phrases.roles,
                             anchor_counts=phrases.released) if clusters.noisy is not None else []
        written = [item for item in facts if item is not None]  # dropped: by released values
        notes = write_notes(written)
    return written, notes


WRITER_PROMPT = ("Summarize the diagnosis and the symptoms of the following patient note in one "
                 "sentence.\n\nNote: {document}")
WRITER_STAGE = "f-writer"
# --writer-ablate public-facts: the public text in place of the released note
WRITER_NEUTRAL_DOCUMENT = "(not shown)"
ALL_TOKENS = 2**31 - 1  # --writer-ablate top-k: a public top-k that keeps the whole vocabulary


def token_writer(ctx: BuildContext, groups: list[list[str]], written: list[ClusterFacts],
                 notes: list[str]) -> tuple[list[str], list[int]]:
    """(f4): one text per kept cluster by the public-difference token sampler (checkpoint
    ``synthetic``: ``{"texts": [...], "tokens": [...]}``).

    Group g is the documents of cluster ``written[g].cluster``; its public document is its
    released note ``notes[g]`` and its candidates the note's facts (released values). Each
    draw is released under ``cluster/RRRRR/token/NNN`` in the fact clusters' parallel group,
    ``{keyword}`` in the reply prefix is the note's first name (``display_names``: names with
    more words first, e.g. the disease before its drug),
    T of them per cluster whatever the data (``PartitionTokenSampler``): rho = T (c/tau)^2 / 2
    per cluster. A resumed build continues each cluster after its stored tokens (read back
    from the ledger, never redrawn or charged again) and skips the finished ones, as stage (d)
    does (``token_stages.ledger_token_texts``).
    ``--writer-ablate`` switches levers off (config.WRITER_LEVERS): public choices, the same
    draws and rho.
    """
    synthetic = ctx.state.checkpoint("synthetic",
                                     lambda: _write_tokens(ctx, groups, written, notes))
    return list(synthetic["texts"]), list(synthetic["tokens"])


def _write_tokens(ctx: BuildContext, groups: list[list[str]], written: list[ClusterFacts],
                  notes: list[str]) -> dict[str, list[Any]]:
    if ctx.runner is None:
        raise ValueError("--writer tokens needs a runner with a language model")
    config = ctx.config
    ctx.log("(f4) token writer")
    prefixes, settings = writer_inputs(config, written, notes)
    return ledger_token_texts(
        ctx, "(f4)", "token writer", groups,
        partitions=[partition_name(item.cluster) for item in written], group=GROUP,
        stage=WRITER_STAGE, prompt=config.rephrase_prompt or WRITER_PROMPT,
        response_prefix=prefixes, public_prior=settings)


def writer_inputs(config: BuildConfig, written: list[ClusterFacts], notes: list[str]
                  ) -> tuple[list[str], PublicPriorSettings | None]:
    """Each written cluster's reply prefix and the writer's public-prior settings (``None``:
    the paper's plain sampler), after ``--writer-ablate`` (config.WRITER_LEVERS).

    Public values in, public values out: the response prefix, the released notes and their
    facts; no lever changes what is drawn or charged.
    """
    # loads torch: imported when this runs, not with this module
    from dpsynrag.transforms.public_prior import PublicPriorSettings

    levers = set(ablated_levers(config.writer_ablate))
    prefix = config.response_prefix or ""
    if "slot" in levers:  # no public slot: the private tokens write the diagnosis too
        prefix = prefix.split("{keyword}")[0].rstrip()
    names = [display_names(item) for item in written]  # as the notes write them
    prefixes = [prefix.replace("{keyword}", group_names[0]) for group_names in names]
    if "public-difference" in levers:
        return prefixes, None
    return prefixes, PublicPriorSettings(
        documents=([WRITER_NEUTRAL_DOCUMENT] * len(notes) if "public-facts" in levers
                   else list(notes)),
        top_k=ALL_TOKENS if "top-k" in levers else config.public_top_k,
        temperature=config.public_temperature,
        candidates=[[*group_names, *item.keywords]
                    for group_names, item in zip(names, written, strict=True)],
        candidate_support="candidates" not in levers,
        trie_completion="trie" not in levers)


def with_released_notes(replies: list[str], notes: list[str]) -> list[str]:
    """``--writer-keeps-note``: each writer reply followed by its cluster's template note.

    Privacy cost: none. The reply is a released token sequence and the note is written from
    the cluster's released facts (stage (f3)), so the text is post-processing.
    """
    return [f"{reply.strip()}\n{note}".strip()
            for reply, note in zip(replies, notes, strict=True)]


def fact_keywords(texts: list[str], vocab: PublicVocabulary, K_s: int) -> list[list[str]]:
    """Each document's K_s keywords of the facts mode: the statistical keywords of its
    uncapitalised words, inflections folded onto V (a rule of the document alone)."""
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
