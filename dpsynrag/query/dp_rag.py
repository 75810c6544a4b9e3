"""DP-RAG (Grislain): a private threshold retrieval, then a private answer token by token.

Per query, over the PRIVATE corpus (docs/mechanisms.md, section 11, with its corrections):

1. **Retrieval.** Cosine similarities s_i of the question to every document, clipped into the
   PUBLIC range [lo, hi] (default [-0.5, 0.8]). A threshold theta is drawn by the continuous
   exponential mechanism with the top-p utility -|sum_{s_i>theta} w(s_i) - p sum_i w(s_i)|
   (w with public bounds) or the top-k utility -|#{s_i > theta} - k|; both have sensitivity 1.
   Every document above theta is used: **no cap** (a capped random subset would turn an added
   document into a swap and double the sensitivity). theta is never logged or returned.
   Cost: epsilon_ret-DP, charged epsilon_ret^2/8 zCDP (bounded range).
2. **Generation.** For each step, every selected document's next-token logits (document and
   question in context, the answer so far shared) go through the clipping transform (rows in
   [-c, c], as DP-SynRAG stage d) and are summed; an optional public prior adds
   ``prior_weight`` x the no-context log-probabilities. The token is drawn from exactly
   softmax(U / tau) over the whole vocabulary with tau = 2c / epsilon_tok (no warper). One
   step is epsilon_tok-DP and bounded range: epsilon_tok^2/8 zCDP; all ``max_new_tokens``
   steps are charged up front whether or not EOS comes early.

The per-query budget is split as the reference does: epsilon_ret for retrieval, the rest of
the query's rho (Bun–Steinke inverse at delta) spread evenly over the tokens. The answers of
several queries decode together in the packed engine (one group per query).

With no document above theta the vote is zero and the answer is drawn from the prior alone
(uniform without one): gibberish by design; the number of documents is private and is not
used to branch.

``answer`` consumes one corpus-ledger receipt per question (``consume_receipts``) before the
corpus is read: no receipt, no computation, and a receipt pays once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from dpsynrag.accounting.conversions import rho_for
from dpsynrag.accounting.corpus_ledger import ChargeReceipt, consume_receipts
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.threshold import (
    sample_threshold,
    threshold_interval_log_weights,
    top_p_interval_log_weights,
)
from dpsynrag.accounting.token_sampling import sample_tokens
from dpsynrag.models.protocols import LLM, Embedder
from dpsynrag.prompts.query import collapse, document_prompt, sanitize_question
from dpsynrag.prompts.rag import no_context_prompt
from dpsynrag.query.private_corpus import PrivateCorpus
from dpsynrag.query.public_stream import PublicStream
from dpsynrag.transforms.private_prediction import private_predict, response_prefix_ids


@dataclass(frozen=True)
class DPRagSettings:
    """Public parameters of one DP-RAG query. ``epsilon``/``delta``: the query's own target."""

    epsilon: float
    delta: float = 1e-3
    retrieval_epsilon: float = 0.5
    max_new_tokens: int = 30
    mode: Literal["top-p", "top-k"] = "top-p"
    top_p: float = 0.02
    top_k: int = 10
    weight_alpha: float = 5.0
    score_low: float = -0.5
    score_high: float = 0.8
    clip: float = 0.5
    prior_weight: float = 0.0
    instruction: str = "Answer briefly."
    response_prefix: str = ""
    conversion: str = "bun-steinke"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError("epsilon must be a finite positive number")
        if not (0 < self.delta < 1):
            raise ValueError("delta must lie in (0, 1)")
        if not (math.isfinite(self.retrieval_epsilon) and self.retrieval_epsilon > 0):
            raise ValueError("retrieval_epsilon must be a finite positive number")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if self.mode not in ("top-p", "top-k"):
            raise ValueError("mode must be 'top-p' or 'top-k'")
        if not (0 < self.clip <= 0.5):
            raise ValueError("clip must lie in (0, 0.5] (0.5 is the transform's natural range)")
        if self.prior_weight < 0:
            raise ValueError("prior_weight must be non-negative")
        if self.generation_rho() <= 0:
            raise ValueError(
                f"epsilon {self.epsilon:g} at delta {self.delta:g} leaves nothing for generation "
                f"after retrieval_epsilon {self.retrieval_epsilon:g}; lower the retrieval share")

    # ------------------------------------------------------------------ accounting
    def query_rho(self) -> float:
        return rho_for(self.epsilon, self.delta, self.conversion)

    def generation_rho(self) -> float:
        return self.query_rho() - self.retrieval_epsilon**2 / 8.0

    def token_epsilon(self) -> float:
        """Per-token epsilon: max_new_tokens steps of epsilon_tok^2/8 use the rest of rho."""
        return math.sqrt(8.0 * self.generation_rho() / self.max_new_tokens)

    def temperature(self) -> float:
        """tau = 2c / epsilon_tok, so that softmax(U / tau) = exp(epsilon_tok U / (2c))."""
        return 2.0 * self.clip / self.token_epsilon()

    def mechanisms(self) -> list[dict[str, Any]]:
        """What one query releases, for the corpus ledger (which recomputes the cost)."""
        return [
            {"mechanism": "exponential_threshold",
             "params": {"epsilon": self.retrieval_epsilon}, "count": 1},
            {"mechanism": "token_softmax",
             "params": {"clip": self.clip, "temperature": self.temperature(),
                        "tokens": self.max_new_tokens}, "count": 1},
        ]


def select_documents(corpus: PrivateCorpus, question_vector: np.ndarray,
                     settings: DPRagSettings, rng: RandomSource) -> list[int]:
    """Indices of the documents above the private threshold (private; never log them)."""
    scores = corpus.similarities(question_vector)
    lo, hi = settings.score_low, settings.score_high
    if settings.mode == "top-p":
        breakpoints, log_mass = top_p_interval_log_weights(
            scores, settings.top_p, settings.weight_alpha, settings.retrieval_epsilon, lo, hi)
    else:
        breakpoints, log_mass = threshold_interval_log_weights(
            scores, settings.top_k, settings.retrieval_epsilon, lo, hi)
    theta = sample_threshold(breakpoints, log_mass, rng)
    clipped = np.clip(scores, lo, hi)
    return [int(i) for i in np.flatnonzero(clipped > theta)]


def answer(questions: Sequence[str], corpus: PrivateCorpus, llm: LLM, embedder: Embedder,
           settings: DPRagSettings, rng: RandomSource, *,
           receipts: Sequence[ChargeReceipt], batch_rows: int | None = None) -> list[str]:
    """DP-RAG answers to ``questions``, one committed charge each.

    ``receipts`` (one per question, from ``CorpusLedger.charge`` of ``settings.mechanisms()``
    under method ``"dp-rag"`` and the corpus's privacy unit) are consumed first, before the
    corpus is read: ``ReceiptError`` for a missing, used or mismatched one, nothing computed.
    """
    consume_receipts(receipts, questions=len(questions), method="dp-rag",
                     mechanisms=settings.mechanisms(), privacy_unit=corpus.privacy_unit,
                     corpus_ledger=corpus.ledger_path)
    questions = [sanitize_question(q) for q in questions]
    if not questions:
        return []
    vectors = embedder.encode(list(questions))
    groups = [[collapse(corpus.texts[i]) for i in select_documents(corpus, v, settings, rng)]
              for v in vectors]
    prompts = [document_prompt(q, settings.instruction) for q in questions]
    temperature = settings.temperature()
    streams: list[PublicStream] | None = None
    if settings.prior_weight > 0:
        forced = response_prefix_ids(llm, settings.response_prefix)
        streams = [PublicStream(llm, [*llm.chat_prompt_ids(
            no_context_prompt(q, settings.instruction)), *forced]) for q in questions]

    def sampler(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        utility = votes.to(device="cpu", dtype=torch.float64)
        if streams is not None:
            prior = torch.stack([streams[g].log_probs()[:utility.shape[1]] for g in active])
            utility = utility + settings.prior_weight * prior
        tokens = sample_tokens(utility, temperature, rng)
        if streams is not None:
            for g, token in zip(active, tokens, strict=True):
                streams[g].feed(int(token))
        return tokens

    return private_predict(
        llm, groups, prompt=prompts, max_new_tokens=settings.max_new_tokens,
        clip=settings.clip, temperature=temperature, rng=rng, sampler=sampler,
        batch_rows=batch_rows, response_prefix=settings.response_prefix)
