"""The query-time API: charge the corpus ledger first, then answer from the private corpus.

    from dpsynrag.query import QueryService
    service = QueryService.open("notes.jsonl", ledger="notes.ledger.sqlite")
    result = service.ask(["What is my disease?"], method="dp-rag", epsilon=1.0)

Every query is charged in full to the private corpus's ledger (``CorpusLedger``) before any
private computation; a query the cap cannot afford is refused and never computed. A charged
query keeps its charge whatever happens next (an early EOS, a crash): released noise is never
redrawn and a retry is a new query. Queries over a SYNTHETIC corpus are ordinary RAG
(post-processing of a DP release) and never come here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynrag.accounting.corpus_ledger import BudgetRefusedError, CorpusLedger
from dpsynrag.accounting.rng import RandomSource, secure_rng
from dpsynrag.query import dp_ksa, dp_rag, sparse_vote
from dpsynrag.query.private_corpus import PrivateCorpus

METHODS = ("dp-rag", "dp-ksa", "sparse-vote", "vote")


def make_settings(method: str, epsilon: float, delta: float | None = None,
                  **options: Any) -> Any:
    """The settings object of ``method`` (options are its dataclass fields)."""
    extra = dict(options)
    if delta is not None:
        extra["delta"] = delta
    if method == "dp-rag":
        return dp_rag.DPRagSettings(epsilon=epsilon, **extra)
    if method == "dp-ksa":
        return dp_ksa.DPKsaSettings(epsilon=epsilon, **extra)
    if method in ("sparse-vote", "vote"):
        return sparse_vote.SparseVoteSettings(epsilon=epsilon, sparse=method == "sparse-vote",
                                              **extra)
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


@dataclass
class QueryResult:
    """Answers in question order (None where the ledger refused), and what was charged."""

    answers: list[str | None]
    charged: int
    refused: int
    refusal_message: str = ""
    charge_keys: list[str] = field(default_factory=list)


class QueryService:
    """A private corpus, its ledger and the models, ready to answer DP queries."""

    def __init__(self, corpus: PrivateCorpus, ledger: CorpusLedger | None, llm: Any,
                 embedder: Any, *, rng: RandomSource | None = None) -> None:
        self.corpus = corpus
        self.ledger = ledger
        self.llm = llm
        self.embedder = embedder
        self.rng = secure_rng() if rng is None else rng

    @classmethod
    def open(cls, private_input: str | Path, *, ledger: str | Path | None = None,
             model: str | None = None, embedder: str | None = None,
             text_column: str = "text", id_column: str | None = "id",
             rng: RandomSource | None = None) -> QueryService:
        """Load the models, read and embed ``private_input``, open its ledger."""
        from dpsynrag.accounting.corpus_ledger import default_corpus_ledger_path
        from dpsynrag.models.embedder import load_embedder
        from dpsynrag.models.llm import load_llm

        loaded_embedder = load_embedder(embedder)
        corpus = PrivateCorpus.from_path(private_input, loaded_embedder,
                                         text_column=text_column, id_column=id_column)
        path = Path(ledger) if ledger else default_corpus_ledger_path(Path(private_input))
        return cls(corpus, CorpusLedger(path), load_llm(model), loaded_embedder, rng=rng)

    def charge(self, method: str, settings: Any, count: int) -> tuple[list[str], int, str]:
        """Charge up to ``count`` queries; stop at the first refusal. Returns keys, refusals."""
        keys: list[str] = []
        if self.ledger is None:
            raise ValueError("no corpus ledger: query-time mechanisms must be charged")
        for _ in range(count):
            key = f"query/{method}/{uuid.uuid4().hex}"
            try:
                self.ledger.charge(key, kind="query", method=method,
                                   mechanisms=settings.mechanisms())
            except BudgetRefusedError as refusal:
                return keys, count - len(keys), str(refusal)
            keys.append(key)
        return keys, 0, ""

    def ask(self, questions: Sequence[str], *, method: str, epsilon: float,
            delta: float | None = None, **options: Any) -> QueryResult:
        """Charge each question, then answer the charged ones together."""
        settings = make_settings(method, epsilon, delta, **options)
        keys, refused, message = self.charge(method, settings, len(questions))
        answered = list(questions[:len(keys)])
        answers: list[str | None] = list(self.answer(method, settings, answered))
        answers.extend([None] * refused)
        return QueryResult(answers, len(keys), refused, message, keys)

    def answer(self, method: str, settings: Any, questions: Sequence[str],
               **extra: Any) -> list[str]:
        """Run ``method`` for questions that are ALREADY charged (no ledger access here)."""
        module = {"dp-rag": dp_rag, "dp-ksa": dp_ksa, "sparse-vote": sparse_vote,
                  "vote": sparse_vote}[method]
        return module.answer(questions, self.corpus, self.llm, self.embedder, settings,
                             self.rng, **extra)
