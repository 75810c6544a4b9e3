"""DPVoteRAG and DPSparseVoteRAG (Koga, Wu & Chaudhuri): token voting by disjoint voters.

Per query, over the PRIVATE corpus (docs/mechanisms.md, section 13, with its corrections):

* The corpus is split into m voters by a public function of each document's own text
  (``PrivateCorpus.voter_of``: never its position or id); each voter retrieves its own
  top-1 document exactly (an empty part gives an empty context). Adding or removing a
  document changes one voter's retrieval, so one vote at most: the vote histogram has
  l_inf 1 and l_0 2.
* Every step, each voter's greedy next token (same answer prefix for all) is one vote: the
  packed engine sums one-hot rows (``greedy_vote``), i.e. the histogram.
* **DPVoteRAG** releases each token with LimitedDomain(epsilon_tok, delta_tok), at most
  T_max tokens; ⊥ ends the answer.
* **DPSparseVoteRAG** also follows the public no-context stream u_t. The sparse vector test
  asks whether the voters' agreement h[u_t] is (noisily) at most m/2: if not, u_t is emitted
  for free; if so, the token is released by LimitedDomain(epsilon_tok/2, delta_tok) and the
  epoch is paid (SVT at epsilon_tok/2). At most c_max such private tokens; after the c_max-th
  the answer ends, and a public cap ``max_tokens`` bounds the free ones.

Accounting: T_max / c_max come from Koga's rule (``koga_max_steps``: the better of sequential
and advanced composition of (epsilon_tok, delta_tok) steps within the query's (epsilon,
delta)), and the whole query is charged up front as that composition, in (epsilon, delta)
currency (pure/approximate DP composes additively with the ledger's other spends). The
LimitedDomain Gumbel scale is the package's conservative 2/epsilon (non-monotone vote
switches) unless ``scale_factor=1`` is asked for, which reproduces the paper.
``answer`` consumes one corpus-ledger receipt per question (``consume_receipts``) before the
corpus is read: no receipt, no computation, and a receipt pays once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dpsynrag.accounting.calibration import koga_max_steps
from dpsynrag.accounting.corpus_ledger import ChargeReceipt, consume_receipts
from dpsynrag.accounting.limited_domain import limited_domain_top1
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.sparse_vector import SparseVectorBelow
from dpsynrag.models.protocols import LLM, Embedder
from dpsynrag.prompts.query import collapse, document_prompt, sanitize_question
from dpsynrag.prompts.rag import no_context_prompt
from dpsynrag.query.private_corpus import PrivateCorpus
from dpsynrag.query.public_stream import PublicStream
from dpsynrag.transforms.private_prediction import private_predict, response_prefix_ids


@dataclass(frozen=True)
class SparseVoteSettings:
    """Public parameters of one (Sparse)VoteRAG query; ``epsilon``/``delta`` per query."""

    epsilon: float
    delta: float = 1e-4
    token_epsilon: float | None = None  # default min(2, epsilon)
    token_delta: float = 1e-5
    voters: int = 30
    sparse: bool = True
    max_tokens: int = 32
    scale_factor: float = 2.0
    instruction: str = "Answer briefly."
    response_prefix: str = ""

    def __post_init__(self) -> None:
        if self.token_epsilon is None:
            if not (isinstance(self.epsilon, int | float) and self.epsilon > 0):
                raise ValueError("epsilon must be a finite positive number")
            object.__setattr__(self, "token_epsilon", min(2.0, float(self.epsilon)))
        for name in ("epsilon", "token_epsilon"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite positive number")
        if not (0 < self.token_delta < self.delta < 1):
            raise ValueError("need 0 < token_delta < delta < 1")
        if self.voters < 2 or self.max_tokens < 1:
            raise ValueError("voters must be >= 2 and max_tokens >= 1")
        if self.private_tokens() < 1:
            raise ValueError(
                f"epsilon {self.epsilon:g}, delta {self.delta:g} do not allow one private "
                f"token at token_epsilon {self.per_token_epsilon:g}, token_delta "
                f"{self.token_delta:g}; raise epsilon or lower token_epsilon")

    @property
    def per_token_epsilon(self) -> float:
        assert self.token_epsilon is not None
        return float(self.token_epsilon)

    def private_tokens(self) -> int:
        """T_max (Vote) or c_max (Sparse), by Koga's composition rule."""
        return koga_max_steps(self.per_token_epsilon, self.token_delta, self.epsilon,
                              self.delta)

    @property
    def method(self) -> str:
        return "sparse-vote" if self.sparse else "vote"

    def mechanisms(self) -> list[dict[str, Any]]:
        """What one query can release, charged in full up front, for the corpus ledger."""
        return [{"mechanism": "dp_composition",
                 "params": {"token_epsilon": self.per_token_epsilon,
                            "token_delta": self.token_delta,
                            "steps": self.private_tokens(),
                            "epsilon": self.epsilon, "delta": self.delta},
                 "count": 1}]


def greedy_vote(logits: torch.Tensor) -> torch.Tensor:
    """One-hot rows at each row's argmax (ties to the lowest id): one vote per voter."""
    votes = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
    votes.scatter_(1, torch.argmax(logits, dim=-1, keepdim=True), 1.0)
    return votes


def voter_documents(corpus: PrivateCorpus, question_vector: np.ndarray, voters: int) -> list[str]:
    """Each voter's own top-1 document ('' for an empty part), voter order (private)."""
    scores = corpus.similarities(question_vector)
    owner = corpus.voter_of(voters)
    docs: list[str] = []
    for voter in range(voters):
        top = corpus.exact_top(scores, 1, among=np.flatnonzero(owner == voter))
        docs.append(collapse(corpus.texts[top[0]]) if top else "")
    return docs


class _QueryState:
    """Per-query sampler state: the public stream, SVT, and private tokens spent."""

    def __init__(self, stream: PublicStream | None, svt: SparseVectorBelow | None) -> None:
        self.stream = stream
        self.svt = svt
        self.private_tokens = 0


def answer(questions: Sequence[str], corpus: PrivateCorpus, llm: LLM, embedder: Embedder,
           settings: SparseVoteSettings, rng: RandomSource, *,
           receipts: Sequence[ChargeReceipt], batch_rows: int | None = None) -> list[str]:
    """(Sparse)VoteRAG answers, one committed charge each.

    ``receipts`` (one per question, charged with ``settings.mechanisms()`` under method
    ``settings.method`` and the corpus's privacy unit) are consumed first, before the corpus
    is read: ``ReceiptError`` for a missing, used or mismatched one, nothing computed.
    """
    consume_receipts(receipts, questions=len(questions), method=settings.method,
                     mechanisms=settings.mechanisms(), privacy_unit=corpus.privacy_unit,
                     corpus_ledger=corpus.ledger_path)
    questions = [sanitize_question(q) for q in questions]
    if not questions:
        return []
    vectors = embedder.encode(list(questions))
    groups = [voter_documents(corpus, v, settings.voters) for v in vectors]
    prompts = [document_prompt(q, settings.instruction) for q in questions]
    budget = settings.private_tokens()
    eos = min(int(t) for t in llm.eos_token_ids)
    forced = response_prefix_ids(llm, settings.response_prefix)
    states: list[_QueryState] = []
    for question in questions:
        if settings.sparse:
            stream = PublicStream(llm, [*llm.chat_prompt_ids(
                no_context_prompt(question, settings.instruction)), *forced])
            svt = SparseVectorBelow(settings.voters / 2.0, settings.per_token_epsilon / 2.0, rng)
            states.append(_QueryState(stream, svt))
        else:
            states.append(_QueryState(None, None))
    ld_epsilon = settings.per_token_epsilon / (2.0 if settings.sparse else 1.0)

    def release(counts: np.ndarray, state: _QueryState) -> int:
        state.private_tokens += 1
        token = limited_domain_top1(counts, settings.voters, ld_epsilon, settings.token_delta,
                                    rng, scale_factor=settings.scale_factor)
        return eos if token is None else int(token)

    def sampler(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        histogram = votes.to(device="cpu", dtype=torch.float64).numpy()
        tokens = np.empty(len(active), dtype=np.int64)
        for row, g in enumerate(active):
            state = states[g]
            if state.private_tokens >= budget:
                tokens[row] = eos  # the c_max-th private token was the last one
            elif state.stream is None:
                tokens[row] = release(histogram[row], state)
            else:
                public = state.stream.greedy()
                assert state.svt is not None
                if state.svt.triggered(float(histogram[row, public])):
                    tokens[row] = release(histogram[row], state)
                else:
                    tokens[row] = public
            if state.stream is not None and tokens[row] != eos:
                state.stream.feed(int(tokens[row]))
        return tokens

    steps = settings.max_tokens if settings.sparse else min(settings.max_tokens, budget)
    # temperature and clip are unused by the one-hot transform and the custom sampler
    return private_predict(
        llm, groups, prompt=prompts, max_new_tokens=steps, clip=0.5, temperature=1.0,
        rng=rng, sampler=sampler, batch_rows=batch_rows,
        response_prefix=settings.response_prefix, row_transform=greedy_vote)
