"""The query-time API: charge the corpus ledger first, then answer from the private corpus.

    from dpsynrag.query import QueryService
    service = QueryService.open("notes.jsonl", ledger="notes.ledger.sqlite",
                                unit_column="patient")  # the build's --unit-column
    result = service.ask(["What is my disease?"], method="dp-rag", epsilon=1.0)

Every query is charged in full to the private corpus's ledger (``CorpusLedger``) before any
private computation; a query the cap cannot afford is refused and never computed. Each charge
gives a receipt, and the mechanism's ``answer`` consumes it (once) before it reads the corpus:
there is no way to run a mechanism here without a committed charge. Query charges need a cap
on the ledger (or ``allow_no_cap=True``), and the corpus is bounded to one document per
privacy unit exactly as the build bounds it (``unit_column``, ``unit_bound``); the ledger
refuses a charge about another unit than its earlier charges. A charged query keeps its
charge whatever happens next (an early EOS, a crash): released noise is never redrawn and a
retry is a new query. Queries over a SYNTHETIC corpus are ordinary RAG
(post-processing of a DP release) and never come here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynrag.accounting.corpus_ledger import BudgetRefusedError, ChargeReceipt, CorpusLedger
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
    """A private corpus, its ledger and the models, ready to answer DP queries.

    ``allow_no_cap``: accept query charges on a ledger without a cap (otherwise refused with
    ``NoCapError``; set one with ``dpsynrag ledger cap``).
    """

    def __init__(self, corpus: PrivateCorpus, ledger: CorpusLedger | None, llm: Any,
                 embedder: Any, *, rng: RandomSource | None = None,
                 allow_no_cap: bool = False) -> None:
        self.corpus = corpus
        self.ledger = ledger
        self.llm = llm
        self.embedder = embedder
        self.rng = secure_rng() if rng is None else rng
        self.allow_no_cap = allow_no_cap

    @classmethod
    def open(cls, private_input: str | Path, *, ledger: str | Path | None = None,
             model: str | None = None, embedder: str | None = None,
             text_column: str = "text", id_column: str | None = "id",
             unit_column: str | None = None, unit_bound: str = "pick",
             max_chars: int | None = 20000, rng: RandomSource | None = None,
             allow_no_cap: bool = False) -> QueryService:
        """Open the ledger, check it accepts queries, then load the models and read, bound
        (``unit_column``/``unit_bound``/``max_chars`` as in the build) and embed the input.

        The ledger is checked first (its cap unless ``allow_no_cap``, its privacy unit against
        this one: ``NoCapError``, ``PrivacyUnitMismatchError``), so a query that would be
        refused reads nothing private.
        """
        from dpsynrag.accounting.corpus_ledger import (
            default_corpus_ledger_path,
            privacy_unit_definition,
        )
        from dpsynrag.models.embedder import load_embedder
        from dpsynrag.models.llm import load_llm

        unit = privacy_unit_definition(unit_column, unit_bound)
        path = Path(ledger) if ledger else default_corpus_ledger_path(Path(private_input))
        opened = CorpusLedger(path)
        try:
            opened.check_query_allowed(unit, allow_no_cap=allow_no_cap)
            loaded_embedder = load_embedder(embedder)
            corpus = PrivateCorpus.from_path(private_input, loaded_embedder,
                                             text_column=text_column, id_column=id_column,
                                             unit_column=unit_column, unit_bound=unit_bound,
                                             max_chars=max_chars)
            llm = load_llm(model)
        except BaseException:
            opened.close()
            raise
        return cls(corpus, opened, llm, loaded_embedder, rng=rng, allow_no_cap=allow_no_cap)

    def charge(self, method: str, settings: Any,
               count: int) -> tuple[list[ChargeReceipt], int, str]:
        """Charge up to ``count`` queries under the corpus's privacy unit; stop at the first
        refusal by the cap. Returns the receipts, the number refused and the refusal message.

        Raises ``NoCapError`` (no cap and not ``allow_no_cap``) or
        ``PrivacyUnitMismatchError`` before charging anything.
        """
        receipts: list[ChargeReceipt] = []
        if self.ledger is None:
            raise ValueError("no corpus ledger: query-time mechanisms must be charged")
        for _ in range(count):
            key = f"query/{method}/{uuid.uuid4().hex}"
            try:
                charged = self.ledger.charge(key, kind="query", method=method,
                                             mechanisms=settings.mechanisms(),
                                             privacy_unit=self.corpus.privacy_unit,
                                             allow_no_cap=self.allow_no_cap)
            except BudgetRefusedError as refusal:
                return receipts, count - len(receipts), str(refusal)
            receipts.append(charged.receipt)
        return receipts, 0, ""

    def ask(self, questions: Sequence[str], *, method: str, epsilon: float,
            delta: float | None = None, **options: Any) -> QueryResult:
        """Charge each question, then answer the charged ones together."""
        settings = make_settings(method, epsilon, delta, **options)
        receipts, refused, message = self.charge(method, settings, len(questions))
        answered = list(questions[:len(receipts)])
        answers: list[str | None] = list(self.answer(method, settings, answered, receipts))
        answers.extend([None] * refused)
        return QueryResult(answers, len(receipts), refused, message,
                           [r.key for r in receipts])

    def answer(self, method: str, settings: Any, questions: Sequence[str],
               receipts: Sequence[ChargeReceipt], **extra: Any) -> list[str]:
        """Run ``method`` for ``questions``, consuming one receipt of ``charge`` per question
        (the method's ``answer`` refuses missing, used or mismatched receipts before it
        reads the corpus)."""
        module = {"dp-rag": dp_rag, "dp-ksa": dp_ksa, "sparse-vote": sparse_vote,
                  "vote": sparse_vote}[method]
        return module.answer(questions, self.corpus, self.llm, self.embedder, settings,
                             self.rng, receipts=receipts, **extra)
