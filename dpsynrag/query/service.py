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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynrag.accounting.corpus_ledger import (
    BudgetRefusedError,
    ChargeReceipt,
    CorpusLedger,
    default_corpus_ledger_path,
    privacy_unit_definition,
)
from dpsynrag.accounting.rng import RandomSource, secure_rng
from dpsynrag.models.embedder import load_embedder
from dpsynrag.models.llm import load_llm
from dpsynrag.models.protocols import LLM, Embedder
from dpsynrag.query import dp_ksa, dp_rag, sparse_vote
from dpsynrag.query.private_corpus import PrivateCorpus, query_cache_dir

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

    def __init__(self, corpus: PrivateCorpus | None, ledger: CorpusLedger | None,
                 llm: LLM | None, embedder: Embedder | None, *,
                 rng: RandomSource | None = None, allow_no_cap: bool = False,
                 load: Callable[[], tuple[PrivateCorpus, LLM, Embedder]] | None = None,
                 privacy_unit: str | None = None) -> None:
        """``load`` (from ``open``) reads, bounds and embeds the corpus and loads the models
        the first time they are needed: after the charges, so a refused question costs no
        model load and no read of the private data. ``privacy_unit`` is then the unit the
        charges are made under before the corpus is read."""
        if corpus is None and load is None:
            raise ValueError("a QueryService needs a corpus or a loader")
        if corpus is not None and ledger is not None:  # its receipts open this corpus only
            if corpus.ledger_path is None:
                corpus.bind(ledger.path)
            elif corpus.ledger_path != str(Path(ledger.path).resolve()):
                raise ValueError("this private corpus is bound to another corpus ledger")
        self._corpus, self._llm, self._embedder = corpus, llm, embedder
        self._load = load
        self._privacy_unit = privacy_unit
        self.ledger = ledger
        self.rng = secure_rng() if rng is None else rng
        self.allow_no_cap = allow_no_cap

    def _ensure_loaded(self) -> None:
        if self._corpus is None:
            assert self._load is not None
            self._corpus, self._llm, self._embedder = self._load()
            self._load = None

    @property
    def loaded(self) -> bool:
        """True once the private corpus has been read and the models loaded."""
        return self._corpus is not None

    @property
    def corpus(self) -> PrivateCorpus:
        self._ensure_loaded()
        assert self._corpus is not None
        return self._corpus

    @property
    def llm(self) -> LLM:
        self._ensure_loaded()
        assert self._llm is not None, "no language model was given"
        return self._llm

    @property
    def embedder(self) -> Embedder:
        self._ensure_loaded()
        assert self._embedder is not None, "no embedder was given"
        return self._embedder

    @property
    def privacy_unit(self) -> str:
        if self._corpus is not None:
            return self._corpus.privacy_unit
        assert self._privacy_unit is not None
        return self._privacy_unit

    @classmethod
    def open(cls, private_input: str | Path, *, ledger: str | Path | None = None,
             model: str | None = None, embedder: str | None = None,
             text_column: str | Sequence[str] = "text", id_column: str | None = "id",
             unit_column: str | None = None, unit_bound: str = "pick",
             max_chars: int | None = 20000, rng: RandomSource | None = None,
             allow_no_cap: bool = False) -> QueryService:
        """Open the ledger and check it accepts queries; the models are loaded and the input
        read, bounded (``unit_column``/``unit_bound``/``max_chars`` as in the build) and
        embedded only when the first charged question is answered.

        The ledger is checked first (its cap unless ``allow_no_cap``, its privacy unit against
        this one: ``NoCapError``, ``PrivacyUnitMismatchError``), and ``ask`` charges before it
        loads anything, so a query that would be refused reads nothing private and loads no
        model (measured: a refusal took 18 s when the corpus was embedded first).
        """
        unit = privacy_unit_definition(unit_column, unit_bound)
        path = Path(ledger) if ledger else default_corpus_ledger_path(Path(private_input))
        opened = CorpusLedger(path)
        try:
            opened.check_query_allowed(unit, allow_no_cap=allow_no_cap)
        except BaseException:
            opened.close()
            raise

        def load() -> tuple[PrivateCorpus, LLM, Embedder]:
            loaded_embedder = load_embedder(embedder)
            corpus = PrivateCorpus.from_path(private_input, loaded_embedder,
                                             text_column=text_column, id_column=id_column,
                                             unit_column=unit_column, unit_bound=unit_bound,
                                             max_chars=max_chars,
                                             cache_dir=query_cache_dir())
            return corpus.bind(path), load_llm(model), loaded_embedder

        return cls(None, opened, None, None, rng=rng, allow_no_cap=allow_no_cap, load=load,
                   privacy_unit=unit)

    def charge(self, method: str, settings: Any,
               count: int) -> tuple[list[ChargeReceipt], int, str]:
        """Charge ``count`` queries under the corpus's privacy unit; each one the cap refuses is
        recorded as a refusal. Returns the receipts, the number refused and the first refusal's
        message.

        Raises ``NoCapError`` (no cap and not ``allow_no_cap``) or
        ``PrivacyUnitMismatchError`` before charging anything.
        """
        each, message = self._charge_each(method, settings, count)
        receipts = [r for r in each if r is not None]
        return receipts, count - len(receipts), message

    def _charge_each(self, method: str, settings: Any,
                     count: int) -> tuple[list[ChargeReceipt | None], str]:
        """One receipt or None (refused, and recorded as a refusal) per query, in order: every
        refused question is recorded, so 'ledger show' counts what the caller was told."""
        if self.ledger is None:
            raise ValueError("no corpus ledger: query-time mechanisms must be charged")
        out: list[ChargeReceipt | None] = []
        message = ""
        for _ in range(count):
            key = f"query/{method}/{uuid.uuid4().hex}"
            try:
                charged = self.ledger.charge(key, kind="query", method=method,
                                             mechanisms=settings.mechanisms(),
                                             privacy_unit=self.privacy_unit,
                                             allow_no_cap=self.allow_no_cap)
            except BudgetRefusedError as refusal:
                out.append(None)
                message = message or str(refusal)
                continue
            out.append(charged.receipt)
        return out, message

    def ask(self, questions: Sequence[str], *, method: str, epsilon: float,
            delta: float | None = None, **options: Any) -> QueryResult:
        """Charge each question, then answer the charged ones together."""
        settings = make_settings(method, epsilon, delta, **options)
        each, message = self._charge_each(method, settings, len(questions))
        charged = [i for i, receipt in enumerate(each) if receipt is not None]
        receipts = [r for r in each if r is not None]
        answers: list[str | None] = [None] * len(questions)
        if receipts:  # nothing charged: nothing read, no model loaded
            replies = self.answer(method, settings, [questions[i] for i in charged], receipts)
            for i, reply in zip(charged, replies, strict=True):
                answers[i] = reply
        return QueryResult(answers, len(receipts), len(questions) - len(receipts), message,
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
