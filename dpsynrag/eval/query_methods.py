"""Query-time methods in the evaluation: DP-RAG, DP-KSA and (Sparse)VoteRAG per query.

Each run answers every benign and attack question from the PRIVATE notes with the mechanism
at ``epsilon`` per query, charging a run-private corpus ledger so that the total spend of the
run is composed exactly as a deployment would compose it. That ledger has no cap, and says so
explicitly (``allow_no_cap``): the run's total is what the report shows. The answers go through
the same receipts as ``dpsynrag query`` (one charge consumed per question), and each note is
one privacy unit (``"record"``). The report shows the
per-query epsilon and the run's total (epsilon, delta): these mechanisms pay for every query,
DP-SynRAG once.

DP-KSA's one-document ensemble answers are greedy and depend only on the question, the notes
and the model (not on epsilon), so they are computed once per dataset and reused. They are
private: cached 0600 in ``work/state`` (0700), like every private file of the evaluation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from dpsynrag.accounting.corpus_ledger import CorpusLedger
from dpsynrag.eval.eval_data import EvalData
from dpsynrag.eval.metrics import accuracy, name_leaks
from dpsynrag.io.private_files import write_private
from dpsynrag.models.lazy import LazyModels
from dpsynrag.prompts.rag import DEFAULT_INSTRUCTION
from dpsynrag.query import dp_ksa
from dpsynrag.query.dp_ksa import DPKsaSettings
from dpsynrag.query.private_corpus import PrivateCorpus

# A run's total is reported at delta = (sum of the queries' approximate deltas) + this, the
# delta of the zCDP conversion; DP-SynRAG's whole corpus uses delta = 1e-3 too.
CONVERSION_DELTA = 1e-3

# clinic answers are disease names: a short answer and the RAG baseline's instruction
DEFAULT_QUERY_OPTIONS: dict[str, dict[str, Any]] = {
    "dp-rag": {"max_new_tokens": 16},
    "dp-ksa": {"ensemble": 20, "answer_tokens": 12, "final_tokens": 24},
    "sparse-vote": {"max_tokens": 24, "voters": 60},
}


def run_query_method(data: EvalData, models: LazyModels, work: Path, method: str,
                     epsilon: float, run: int, note_vectors: np.ndarray,
                     options: dict[str, Any] | None = None,
                     *, attack: bool = True) -> dict[str, Any]:
    """Accuracy, leakage and spend of ``method`` at ``epsilon`` per query (one run),
    answering with ``models``."""
    # loads torch and transformers: imported when this runs, not with this module
    from dpsynrag.query.service import QueryService, make_settings

    corpus = PrivateCorpus(list(data.note_ids), list(data.notes), note_vectors)
    merged = {"instruction": DEFAULT_INSTRUCTION, **DEFAULT_QUERY_OPTIONS.get(method, {}),
              **(options or {})}
    settings = make_settings(method, epsilon, **merged)
    state = _private_dir(work / "state") / f"{method}-eps{epsilon:g}-run{run}"
    _private_dir(state)
    ledger_path = state / "ledger.sqlite"
    ledger_path.unlink(missing_ok=True)  # a rerun is a new run: start its ledger afresh
    ledger = CorpusLedger(ledger_path)
    try:
        service = QueryService(corpus, ledger, models.llm, models.embedder, allow_no_cap=True)
        questions = [*data.questions, *(data.attack_questions if attack else [])]
        receipts, refused, _ = service.charge(method, settings, len(questions))
        if refused:
            raise RuntimeError("the evaluation ledger has no cap; a refusal is a bug")
        extra: dict[str, Any] = {}
        releases: list[Any] = []
        if method == "dp-ksa":
            extra["responses"] = _ksa_responses(work, questions, corpus, models, settings)
            extra["releases"] = releases
        answers = service.answer(method, settings, questions, receipts, **extra)
        spent = ledger.spent(delta=ledger.spent().delta_approx + CONVERSION_DELTA)
    finally:
        ledger.close()
    benign = answers[:len(data.questions)]
    attack_answers = answers[len(data.questions):]
    result: dict[str, Any] = {
        "recall_at_k": None,
        "accuracy": accuracy(benign, data.answers),
        "leaks_benign": name_leaks(benign, data.names),
        **({"leaks_attack": name_leaks(attack_answers, data.names)} if attack else {}),
        "epsilon_per_query": epsilon,
        "queries_charged": len(receipts),
        "rho": spent.rho,
        "epsilon_total": spent.epsilon,
        "delta_total": spent.delta,
    }
    if releases:
        result["ptr_pass_rate"] = 100.0 * sum(r.passed for r in releases) / len(releases)
    if method == "sparse-vote":
        result["private_tokens_per_query"] = settings.private_tokens()
    return result


def _ksa_responses(work: Path, questions: list[str], corpus: PrivateCorpus,
                   models: LazyModels, settings: DPKsaSettings) -> list[list[str]]:
    """The ensemble answers (private), cached 0600 in ``work/state`` (0700)."""
    key = f"ksa-responses-n{settings.ensemble}-t{settings.answer_tokens}.json"
    cache = _private_dir(work / "state") / key
    if cache.exists():
        os.chmod(cache, 0o600)  # a cache written by an older version was 0644
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored.get("questions") == questions:
            return stored["responses"]
    responses = dp_ksa._ensemble_responses(questions, corpus, models.llm, models.embedder,
                                          settings)
    write_private(cache, json.dumps({"questions": questions, "responses": responses}).encode())
    return responses


def _private_dir(path: Path) -> Path:
    """``path`` and its missing parents created 0700, and ``path`` itself made 0700 (it holds
    private files: ledgers, cached answers). Returns ``path``."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path
