"""The stages of ``build-corpus --generate tokens``: DP-SynRAG Algorithm 1, (a) to (e).

``token_stages`` calls one function per stage. Each stage's output is kept by
``BuildState.checkpoint`` (stored before the next stage starts, read back by a resumed build)
and each noisy value is released by the ledger (read back by key, never redrawn), so a build
killed anywhere and run again spends exactly the rho of an uninterrupted one:

(a) K keywords per document (a private intermediate) -> the noisy keyword histogram (one
    release, ``transforms.histogram``) -> its top R keywords (post-processing);
(b) soft clusters C_r, rarest keyword first, each document in at most L of them;
(c) per cluster, a noisy embedding sum and an exponential-mechanism threshold select S_r, its
    k documents (``transforms.retrieval``; with ``--no-retrieval`` S_r = C_r, no release);
(d) private prediction of T tokens per cluster over S_r, one charged release per token
    (``transforms.prediction_release``);
(e) the self-filter: post-processing of the released texts, no ledger entry.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynrag.accounting.contributions import declared_overlap, membership_pairs
from dpsynrag.pipeline.context import BuildContext, StageResult
from dpsynrag.transforms.clustering import soft_clusters as clusters_of
from dpsynrag.transforms.histogram import released_top_keywords
from dpsynrag.transforms.keywords import statistical_keywords
from dpsynrag.transforms.retrieval import GROUP, retrieve_cluster
from dpsynrag.transforms.vocabulary import public_vocabulary

if TYPE_CHECKING:
    from dpsynrag.pipeline.config import BuildConfig
    from dpsynrag.transforms.public_prior import PublicPriorSettings
    from dpsynrag.transforms.vocabulary import PublicVocabulary

DEFAULT_REPHRASE_PROMPT = (
    "Rephrase the following document without altering the important information contained "
    "within it.\n\nDocument: {document}")

#: the names of the stages' seconds in the build summary
SECONDS_A, SECONDS_B, SECONDS_C, SECONDS_D, SECONDS_E = (
    "a_keywords_histogram", "b_clusters", "c_retrieval", "d_prediction", "e_self_filter")

__all__ = ["DEFAULT_REPHRASE_PROMPT", "ledger_token_texts", "model_eos_ids",
           "public_prior_settings", "token_stages"]


def token_stages(ctx: BuildContext, texts: list[str]) -> StageResult:
    """Run stages (a)-(e) over the documents ``texts``; return one text per cluster."""
    vocab = public_vocabulary()
    doc_keywords, top_words = keyword_histogram(ctx, texts, vocab)  # (a)
    clusters = soft_clusters(ctx, doc_keywords, top_words)  # (b)
    selected = retrieval(ctx, texts, clusters)  # (c)
    synthetic = private_prediction(ctx, texts, selected, top_words)  # (d)
    kept = self_filter(ctx, synthetic["texts"])  # (e)
    return StageResult(texts=synthetic["texts"], tokens=synthetic["tokens"], kept=kept,
                       cluster_keywords=top_words, vocabulary_sha256=vocab.sha256,
                       clusters=len(synthetic["texts"]))


# ---------------------------------------------------------------------- (a)
def keyword_histogram(ctx: BuildContext, texts: list[str], vocab: PublicVocabulary
                      ) -> tuple[list[list[str]], list[str]]:
    """(a): each document's keywords (private, checkpoint ``keywords``) and the top R words of
    the released noisy histogram over the public vocabulary."""
    doc_keywords = ctx.state.checkpoint(
        "keywords", lambda: _document_keywords(ctx, texts, vocab), stage=SECONDS_A)
    with ctx.state.timed(SECONDS_A):
        _, _, top_words = released_top_keywords(ctx.ledger, doc_keywords, vocab,
                                                K=ctx.config.K, sigma=ctx.plan.sigma_h,
                                                R=ctx.config.R)
    return doc_keywords, top_words


def _document_keywords(ctx: BuildContext, texts: list[str], vocab: PublicVocabulary
                       ) -> list[list[str]]:
    config = ctx.config
    ctx.log("(a) extracting keywords")
    if config.keywords == "statistical":
        with ctx.progress("(a) keywords", len(texts)) as advance:
            doc_keywords = statistical_keywords(texts, vocab, config.K)
            advance(len(texts))
        return doc_keywords
    with ctx.progress("(a) keywords (LLM)", len(texts)) as advance:
        return ctx.runner.llm_keywords(texts, config.K, config.keyword_prompt, advance)


# ---------------------------------------------------------------------- (b)
def soft_clusters(ctx: BuildContext, doc_keywords: list[list[str]], top_words: list[str]
                  ) -> list[list[int]]:
    """(b): the clusters' document indices (checkpoint ``clusters``); a rule of the
    documents' keywords and the released top words."""
    return ctx.state.checkpoint(
        "clusters", lambda: clusters_of(doc_keywords, top_words, ctx.config.L),
        stage=SECONDS_B)


def check_overlap(ctx: BuildContext, clusters: list[list[int]], n_docs: int, what: str) -> None:
    """Refuse (``contributions.ContributionError``) member lists in which a document is in
    more than the L that the ledger's group ``clusters`` declares (the L its releases are
    composed with), on the very lists whose members' embeddings and logits are summed."""
    membership_pairs(clusters, n_docs, declared_overlap(ctx.ledger, GROUP), what=what)


# ---------------------------------------------------------------------- (c)
def retrieval(ctx: BuildContext, texts: list[str], clusters: list[list[int]]
              ) -> list[list[int]]:
    """(c): each cluster's selected documents S_r (checkpoint ``selected``).

    The documents' embeddings are a private cache (``embeddings.npy``, 0600) until the
    selections are stored, so a run killed mid-stage does not embed again."""
    check_overlap(ctx, clusters, len(texts), "(c) the noisy sums")
    selected = ctx.state.checkpoint("selected", lambda: _select(ctx, texts, clusters),
                                    stage=SECONDS_C)
    _embeddings_path(ctx).unlink(missing_ok=True)
    return selected


def _embeddings_path(ctx: BuildContext) -> Path:
    return ctx.state.directory / "embeddings.npy"


def _select(ctx: BuildContext, texts: list[str], clusters: list[list[int]]
            ) -> list[list[int]]:
    if ctx.config.no_retrieval:  # ablation: S_r = C_r, nothing released
        return [list(members) for members in clusters]
    path = _embeddings_path(ctx)
    if path.exists():
        embeddings = np.load(path)
    else:
        with ctx.progress("(c) embedding documents", len(texts)) as advance:
            embeddings = ctx.runner.embed(texts, advance)
        _save_private_npy(path, embeddings)
    selected = []
    with ctx.progress("(c) retrieval per cluster", len(clusters)) as advance:
        for r, members in enumerate(clusters):
            member_embeddings = embeddings[np.asarray(members, dtype=np.int64)] if members \
                else np.zeros((0, embeddings.shape[1]), dtype=np.float32)
            positions = retrieve_cluster(ctx.ledger, r, member_embeddings,
                                         sigma_mu=ctx.plan.sigma_mu,
                                         eps_theta=ctx.config.eps_theta, k=ctx.config.k)
            selected.append([int(members[int(p)]) for p in positions])
            advance(1)
    return selected


def _save_private_npy(path: Path, array: np.ndarray) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


# ---------------------------------------------------------------------- (d)
def private_prediction(ctx: BuildContext, texts: list[str], selected: list[list[int]],
                       top_words: list[str]) -> dict[str, list[Any]]:
    """(d): one synthetic text per cluster and its count of released tokens (checkpoint
    ``synthetic``: ``{"texts": [...], "tokens": [...]}``)."""
    check_overlap(ctx, selected, len(texts), "(d) the summed logits")
    return ctx.state.checkpoint("synthetic", lambda: _predict(ctx, texts, selected, top_words),
                                stage=SECONDS_D)


def _predict(ctx: BuildContext, texts: list[str], selected: list[list[int]],
             top_words: list[str]) -> dict[str, list[Any]]:
    # loads torch: imported when this runs, not with this module
    from dpsynrag.transforms.prediction_release import GROUP, STAGE, partition_name

    config = ctx.config
    groups = [[texts[i] for i in members] for members in selected]
    return ledger_token_texts(
        ctx, "(d)", "private prediction", groups,
        partitions=[partition_name(r) for r in range(len(groups))], group=GROUP, stage=STAGE,
        prompt=config.rephrase_prompt or DEFAULT_REPHRASE_PROMPT,
        response_prefix=_reply_prefixes(config, top_words),
        public_prior=public_prior_settings(config, top_words))


def ledger_token_texts(ctx: BuildContext, tag: str, title: str, groups: list[list[str]], *,
                       partitions: list[str], group: str, stage: str, prompt: str,
                       response_prefix: str | list[str],
                       public_prior: PublicPriorSettings | None) -> dict[str, list[Any]]:
    """One text per group by private prediction through the ledger, T draws per group:
    stage (d) of the token mode and the facts mode's token writer (f4).

    Group g's tokens are released under ``<partitions[g]>/token/<step>`` in the parallel
    group ``group`` (``PartitionTokenSampler``). A resumed build reads the stored tokens first
    (``resume``: the ledger is only read, nothing drawn or charged), logs what it replays
    (``tag`` and :func:`_resume_line`), and the runner continues each group after its stored
    tokens (``released``); a finished group is not run again. The progress bar counts draws
    (groups x T, public) from the ones settled before. Returns ``{"texts": [...], "tokens":
    [...]}`` (the released token count of each group)."""
    # loads torch: imported when this runs, not with this module
    from dpsynrag.transforms.prediction_release import PartitionTokenSampler, charge_unstarted

    config = ctx.config
    temperature = config.clip / ctx.plan.c_over_tau
    token_counts = [0] * len(groups)
    settled = [0]  # draws settled before the progress bar opens (a resumed build's)

    def finished(group: int, n_tokens: int) -> None:
        token_counts[group] = n_tokens

    def count(n: int) -> None:
        settled[0] += n

    progress: list[Callable[[int], None]] = [count]
    sampler = PartitionTokenSampler(
        ctx.ledger, partitions, group=group, stage=stage, clip=config.clip,
        temperature=temperature, max_new_tokens=config.T, eos_ids=model_eos_ids(ctx),
        on_finish=finished, on_tokens=lambda n: progress[0](n))
    released = sampler.resume()  # reads the ledger only: nothing drawn or charged
    resuming = _resume_line(released, sampler.finished)
    if resuming:
        ctx.log(f"{tag} {resuming}")
    # progress in draws (released tokens and the reservations of groups that end early):
    # groups x T in all, public; a resumed build starts at the draws it released before
    # and says so in the bar's description (the CLI shows bars, not log lines)
    label = f"{tag} {title} (tokens" + (f"; {resuming})" if resuming else ")")
    with ctx.progress(label, len(groups) * config.T) as advance:
        advance(settled[0])
        progress[0] = advance
        out_texts = ctx.runner.predict(groups, sampler, prompt=prompt, max_new_tokens=config.T,
                                       clip=config.clip, temperature=temperature,
                                       batch_rows=config.batch_rows,
                                       token_sampling=config.token_sampling,
                                       response_prefix=response_prefix,
                                       public_prior=public_prior,
                                       released=released) if groups else []
        charge_unstarted(ctx.ledger, sampler)
    return {"texts": out_texts, "tokens": token_counts}


def _resume_line(released: list[list[int]], finished: list[bool]) -> str:
    """What a resumed token stage replays, or "" when no token was released before: counts
    of released tokens and clusters (public), nothing about the documents."""
    tokens = sum(len(t) for t in released)
    if not tokens:
        return ""
    started = sum(1 for t in released if t)
    return (f"resuming: replaying {tokens} released tokens of {started} of {len(released)} "
            f"clusters ({sum(finished)} finished); no token is drawn or charged again")


def model_eos_ids(ctx: BuildContext) -> frozenset[int]:
    """The language model's end-of-sequence token ids (public; checkpoint ``eos_ids``)."""
    ids = ctx.state.checkpoint(
        "eos_ids", lambda: sorted(int(t) for t in
                                  ctx.runner.llm_identity().get("eos_token_ids", [])))
    return frozenset(int(t) for t in ids)


def _reply_prefixes(config: BuildConfig, top_words: list[str]) -> str | list[str]:
    """The public reply prefix; ``{keyword}`` names each cluster's released keyword."""
    prefix = config.response_prefix or ""
    if "{keyword}" not in prefix:
        return prefix
    return [prefix.replace("{keyword}", word) for word in top_words]


def public_prior_settings(config: BuildConfig,
                          top_words: list[str]) -> PublicPriorSettings | None:
    """The public-difference sampler's settings (issue 15), or None without --public-prior.

    Each cluster's public text is ``--public-document`` with ``{keyword}`` replaced by its
    released keyword, and that keyword's tokens join the support: released values only.
    """
    if not config.public_prior:
        return None
    # loads torch: imported when this runs, not with this module
    from dpsynrag.transforms.public_prior import PublicPriorSettings

    template = config.public_document or "{keyword}"
    return PublicPriorSettings(
        documents=[template.replace("{keyword}", word) for word in top_words],
        top_k=config.public_top_k, temperature=config.public_temperature,
        candidates=[[word] for word in top_words])


# ---------------------------------------------------------------------- (e)
def self_filter(ctx: BuildContext, synthetic_texts: list[str]) -> list[bool]:
    """(e): which synthetic texts the self-filter keeps (checkpoint ``kept``);
    post-processing of released texts, no ledger entry."""
    return ctx.state.checkpoint("kept", lambda: _filter(ctx, synthetic_texts), stage=SECONDS_E)


def _filter(ctx: BuildContext, synthetic_texts: list[str]) -> list[bool]:
    if ctx.config.no_filter:
        return [True] * len(synthetic_texts)
    with ctx.progress("(e) self-filter", len(synthetic_texts)) as advance:
        return ctx.runner.self_filter(synthetic_texts, ctx.config.filter_prompt, advance)
