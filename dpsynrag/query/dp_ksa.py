"""DP-KSA (Tang et al.): keywords from an ensemble of one-document answers, released by PTR.

Per query, over the PRIVATE corpus (docs/mechanisms.md, section 12, with its corrections):

1. Exact top-N retrieval (ties by a hash of each document's own text, never its position).
   Under add/remove at most one of the N documents changes (a swap at worst).
2. N greedy answers, each from the question and ONE document (bucketed batching: an answer
   never depends on its batch mates).
3. Histogram over words with set semantics: a word counts once per answer, so every count
   moves by at most 1 between neighbours and every gap d_k = c_(k) - c_(k+1) by at most 2.
   Words are normalised by a public rule: NFKC, lower case, split on non-alphanumerics,
   public stop words and the question's own words removed.
4. k-hat by the exponential mechanism on the gaps (Gumbel scale 4/epsilon_em: the
   corrected scale; the paper printed 2/epsilon). Cost epsilon_em^2/8 zCDP.
5. Propose-test-release on the gap at k-hat: Gaussian noise of std 2 sigma on max(2, d),
   shifted by the (1 - delta_ptr) quantile. Cost 1/(2 sigma^2) zCDP plus delta_ptr.
   On a pass the top-k-hat words are released as an unordered (alphabetical) set.
6. The final answer sees the question and the released words only; on a failed test the
   prompt is exactly the non-RAG prompt. Post-processing, free.

Budget split: the query's (epsilon, delta): delta_ptr = delta_conv = delta / 2; the zCDP
budget rho(epsilon, delta_conv) goes ``em_share`` to the EM and the rest to PTR.
Nothing here logs answers, counts, gaps or noise: only the DP outputs (k-hat, pass/fail, W).
``answer`` consumes one corpus-ledger receipt per question (``consume_receipts``) before
anything private is computed: no receipt, no computation, and a receipt pays once.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpsynrag.accounting.conversions import rho_for
from dpsynrag.accounting.corpus_ledger import ChargeReceipt, consume_receipts
from dpsynrag.accounting.ptr import find_best_k, ptr_stable_gap
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.models.greedy import answer_questions
from dpsynrag.models.protocols import LLM, Embedder
from dpsynrag.prompts.query import keyword_prompt, sanitize_question, single_document_prompt
from dpsynrag.prompts.rag import no_context_prompt
from dpsynrag.query.private_corpus import PrivateCorpus
from dpsynrag.transforms.vocabulary import stopwords

_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")


@dataclass(frozen=True)
class DPKsaSettings:
    """Public parameters of one DP-KSA query. ``epsilon``/``delta``: the query's own target."""

    epsilon: float
    delta: float = 1e-4
    ensemble: int = 80
    em_share: float = 0.25
    k_max: int = 20
    answer_tokens: int = 16
    final_tokens: int = 24
    instruction: str = "Answer briefly."
    conversion: str = "bun-steinke"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError("epsilon must be a finite positive number")
        if not (0 < self.delta < 1):
            raise ValueError("delta must lie in (0, 1)")
        if self.ensemble < 2 or self.k_max < 1:
            raise ValueError("ensemble must be >= 2 and k_max >= 1")
        if not (0 < self.em_share < 1):
            raise ValueError("em_share must lie strictly between 0 and 1")

    @property
    def delta_ptr(self) -> float:
        return self.delta / 2.0

    def query_rho(self) -> float:
        return rho_for(self.epsilon, self.delta / 2.0, self.conversion)

    def em_epsilon(self) -> float:
        return math.sqrt(8.0 * self.em_share * self.query_rho())

    def ptr_sigma(self) -> float:
        return math.sqrt(1.0 / (2.0 * (1.0 - self.em_share) * self.query_rho()))

    def mechanisms(self) -> list[dict[str, Any]]:
        """What one query releases, for the corpus ledger (which recomputes the cost)."""
        return [
            {"mechanism": "exponential", "params": {"epsilon": self.em_epsilon()}, "count": 1},
            {"mechanism": "ptr_gaussian",
             "params": {"sigma": self.ptr_sigma(), "delta": self.delta_ptr}, "count": 1},
        ]



def normalise_words(text: str, drop: frozenset[str] = frozenset()) -> set[str]:
    """The public word normalisation: NFKC, lower case, alphanumeric words minus ``drop``."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
    return {w for w in words if w not in drop and len(w) > 1}


@dataclass
class KeywordRelease:
    """What DP-KSA releases for one query (all DP outputs)."""

    k_hat: int
    passed: bool
    keywords: list[str] = field(default_factory=list)


def release_keywords(responses: Sequence[str], question: str, settings: DPKsaSettings,
                     rng: RandomSource) -> KeywordRelease:
    """Steps 3-5 for one query's N responses (private in, DP out)."""
    drop = stopwords() | normalise_words(question)
    histogram: Counter[str] = Counter()
    for response in responses:
        histogram.update(normalise_words(response, drop))
    # counts descending; equal counts in a fixed public order (alphabetical)
    ranked = sorted(histogram.items(), key=lambda item: (-item[1], item[0]))
    counts = np.array([c for _, c in ranked], dtype=np.float64)
    k_hat = find_best_k(counts, settings.k_max, settings.em_epsilon(), rng)
    padded = np.concatenate([counts, np.zeros(k_hat + 1)])
    gap = float(padded[k_hat - 1] - padded[k_hat])
    passed = ptr_stable_gap(gap, settings.ptr_sigma(), settings.delta_ptr, rng)
    keywords = sorted(w for w, _ in ranked[:k_hat]) if passed else []
    return KeywordRelease(k_hat, passed, keywords)


def answer(questions: Sequence[str], corpus: PrivateCorpus, llm: LLM, embedder: Embedder,
           settings: DPKsaSettings, rng: RandomSource, *,
           receipts: Sequence[ChargeReceipt],
           responses: Sequence[Sequence[str]] | None = None,
           releases: list[KeywordRelease] | None = None) -> list[str]:
    """DP-KSA answers, one committed charge each.

    ``receipts`` (one per question, charged with ``settings.mechanisms()`` under method
    ``"dp-ksa"`` and the corpus's privacy unit) are consumed first, before anything private
    is computed or released: ``ReceiptError`` for a missing, used or mismatched one.
    ``responses`` may hold precomputed per-document answers (they depend only on the question,
    the documents and the model, not on epsilon: the evaluation reuses them across budgets);
    they are private, and this function (the charged release) is the only place they may go.
    ``releases`` receives each query's KeywordRelease.
    """
    consume_receipts(receipts, questions=len(questions), method="dp-ksa",
                     mechanisms=settings.mechanisms(), privacy_unit=corpus.privacy_unit,
                     corpus_ledger=corpus.ledger_path)
    questions = [sanitize_question(q) for q in questions]
    if responses is None:
        responses = _ensemble_responses(questions, corpus, llm, embedder, settings)
    finals: list[str] = []
    for question, answers in zip(questions, responses, strict=True):
        release = release_keywords(answers, question, settings, rng)
        if releases is not None:
            releases.append(release)
        finals.append(keyword_prompt(question, release.keywords, settings.instruction)
                      if release.passed else no_context_prompt(question, settings.instruction))
    return answer_questions(llm, finals, max_new_tokens=settings.final_tokens)


def _ensemble_responses(questions: Sequence[str], corpus: PrivateCorpus, llm: LLM,
                       embedder: Embedder, settings: DPKsaSettings) -> list[list[str]]:
    """Steps 1-2: the N one-document greedy answers per question.

    PRIVATE output that releases nothing by itself, and so not part of the module's API: it
    must only be kept 0600 (the evaluation's cache, ``eval.query_methods``, its one other
    caller) or passed to ``answer``, whose receipts pay for the release.
    """
    questions = [sanitize_question(q) for q in questions]
    vectors = embedder.encode(list(questions))
    prompts: list[str] = []
    for question, vector in zip(questions, vectors, strict=True):
        top = corpus.exact_top(corpus.similarities(vector), settings.ensemble)
        prompts.extend(single_document_prompt(question, corpus.texts[i], settings.instruction)
                       for i in top)
        # fewer documents than N: the missing answers are empty (public-shaped padding)
        prompts.extend([""] * (settings.ensemble - len(top)))
    real = [p for p in prompts if p]
    produced = iter(answer_questions(llm, real, max_new_tokens=settings.answer_tokens))
    flat = [next(produced) if p else "" for p in prompts]
    n = settings.ensemble
    return [flat[i * n:(i + 1) * n] for i in range(len(questions))]
