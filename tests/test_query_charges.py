"""Issue 13.4, 13.6 and 13.7 (query side).

* 13.6: no query-time mechanism runs without a committed charge that it consumes exactly
  once, and a query charge needs a cap (or an explicit no-cap).
* 13.4: queries bound the corpus to one document per privacy unit like the build, and the
  corpus ledger refuses a query about another unit than its earlier charges.
* 13.7: the evaluation's DP-KSA answer cache is 0600 under a 0700 directory.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_build import HashEmbedder
from test_private_prediction import WORDS, tiny_llm

from dpsynrag.accounting.corpus_ledger import CorpusLedger, ReceiptError, consume_receipts
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.query import dp_ksa, dp_rag, sparse_vote
from dpsynrag.query.private_corpus import PrivateCorpus
from dpsynrag.query.service import QueryService, make_settings

MODULES = {"dp-rag": dp_rag, "dp-ksa": dp_ksa, "sparse-vote": sparse_vote,
           "vote": sparse_vote}
SETTINGS: dict[str, dict[str, Any]] = {
    "dp-rag": {"epsilon": 4.0, "max_new_tokens": 1},
    "dp-ksa": {"epsilon": 4.0, "ensemble": 4, "answer_tokens": 1, "final_tokens": 1},
    "sparse-vote": {"epsilon": 4.0, "voters": 3, "max_tokens": 1},
    "vote": {"epsilon": 4.0, "voters": 3, "max_tokens": 1},
}


class Tripwire:
    """A model or embedder that fails the test when anything uses it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"private computation started ({name}) without a valid receipt")


@pytest.fixture()
def guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step of every mechanism that reads the corpus fails the test if reached."""
    def touched(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("private computation started without a valid receipt")

    for target in ("dp_rag.select_documents", "dp_rag.private_predict",
                   "sparse_vote.voter_documents", "sparse_vote.private_predict",
                   "dp_ksa._ensemble_responses", "dp_ksa.release_keywords"):
        module, name = target.split(".")
        monkeypatch.setattr({"dp_rag": dp_rag, "sparse_vote": sparse_vote,
                             "dp_ksa": dp_ksa}[module], name, touched)
    monkeypatch.setattr(PrivateCorpus, "similarities", touched)


def _corpus(n: int = 12) -> PrivateCorpus:
    rs = np.random.default_rng(0)
    texts = [" ".join(rs.choice(WORDS[:-8], 10)) for _ in range(n)]
    return PrivateCorpus.from_texts([f"d{i}" for i in range(n)], texts, HashEmbedder())


def _receipts(ledger: CorpusLedger, method: str, settings: Any, n: int,
              unit: str = "record") -> list:
    return [ledger.charge(f"q-{uuid.uuid4().hex}", kind="query", method=method,
                          mechanisms=settings.mechanisms(), privacy_unit=unit,
                          allow_no_cap=True).receipt for _ in range(n)]


def _call(method: str, settings: Any, corpus: PrivateCorpus, questions: list[str],
          llm: Any = None, embedder: Any = None, **kwargs: Any) -> list[str]:
    extra = {"responses": [["x"] * 4 for _ in questions]} if method == "dp-ksa" else {}
    receipts = kwargs.get("receipts")
    if corpus.ledger_path is None and receipts and hasattr(receipts[0], "ledger_path"):
        corpus.bind(receipts[0].ledger_path)  # the corpus of the receipts' ledger
    return MODULES[method].answer(questions, corpus, llm or Tripwire(),
                                  embedder or Tripwire(), settings, secure_rng(0),
                                  **extra, **kwargs)


# ---------------------------------------------------------------------- 13.6: receipts
@pytest.mark.parametrize("method", list(MODULES))
def test_item6_answer_without_a_receipt_raises_before_any_model_call(
        method: str, guarded: None) -> None:
    from dpsynrag.accounting.corpus_ledger import ReceiptError

    settings = make_settings(method, **SETTINGS[method])
    with pytest.raises(TypeError, match="receipts"):
        _call(method, settings, _corpus(), ["q"])
    for receipts in ([], None, "q-key"):
        with pytest.raises(ReceiptError):
            _call(method, settings, _corpus(), ["q"], receipts=receipts)


@pytest.mark.parametrize("method", list(MODULES))
def test_item6_answer_refuses_a_receipt_of_another_method_or_settings(
        method: str, guarded: None, tmp_path: Path) -> None:
    from dpsynrag.accounting.corpus_ledger import ReceiptError

    settings = make_settings(method, **SETTINGS[method])
    other_method = "dp-rag" if method != "dp-rag" else "dp-ksa"
    other_settings = make_settings(other_method, **SETTINGS[other_method])
    richer = make_settings(method, **{**SETTINGS[method], "epsilon": 8.0})
    with CorpusLedger(tmp_path / "l.sqlite") as ledger:
        wrong = [_receipts(ledger, other_method, other_settings, 1),  # another method
                 _receipts(ledger, method, richer, 1),  # this method, other settings
                 _receipts(ledger, other_method, settings, 1)]  # right cost, wrong name
        for receipts in wrong:
            with pytest.raises(ReceiptError, match="another computation"):
                _call(method, settings, _corpus(), ["q"], receipts=receipts)
        # one receipt for two questions
        with pytest.raises(ReceiptError, match="1 receipt"):
            _call(method, settings, _corpus(), ["q", "r"],
                  receipts=_receipts(ledger, method, settings, 1))
        # a hand-made receipt for a charge that was never committed
        [real] = _receipts(ledger, method, settings, 1)
        forged = type(real)(real.ledger_path, "query/never-charged", real.method,
                            real.mechanisms, real.privacy_unit)
        with pytest.raises(ReceiptError, match="no such charge"):
            _call(method, settings, _corpus(), ["q"], receipts=[forged])
        assert ledger.summary()["queries_unused"] == len(ledger.entries())


@pytest.mark.parametrize("method", list(MODULES))
def test_item6_a_receipt_is_used_once_and_a_second_use_is_refused_before_any_model_call(
        method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynrag.accounting.corpus_ledger import ReceiptError

    settings = make_settings(method, **SETTINGS[method])
    corpus = _corpus()
    with CorpusLedger(tmp_path / "l.sqlite") as ledger:
        [receipt] = _receipts(ledger, method, settings, 1)
        monkeypatch.setattr("dpsynrag.query.dp_ksa.answer_questions",
                            lambda _llm, p, **_k: ["x"] * len(p))
        [reply] = _call(method, settings, corpus, ["what is it"], llm=tiny_llm(),
                        embedder=HashEmbedder(), receipts=[receipt])
        assert isinstance(reply, str)
        assert ledger.summary()["queries_unused"] == 0
    guarded_calls: list[str] = []
    monkeypatch.setattr(PrivateCorpus, "similarities",
                        lambda *_a: guarded_calls.append("read") or np.zeros(len(corpus)))
    with pytest.raises(ReceiptError, match="already used"):
        _call(method, settings, corpus, ["again"], receipts=[receipt])
    assert guarded_calls == []


def test_item6_a_batch_with_one_bad_receipt_consumes_none(tmp_path: Path,
                                                         guarded: None) -> None:
    from dpsynrag.accounting.corpus_ledger import ReceiptError

    settings = make_settings("dp-rag", **SETTINGS["dp-rag"])
    with CorpusLedger(tmp_path / "l.sqlite") as ledger:
        fresh, used = _receipts(ledger, "dp-rag", settings, 2)
        ledger.consume([used], method="dp-rag", mechanisms=settings.mechanisms(),
                       privacy_unit="record")
        for batch in ([fresh, used], [fresh, fresh]):
            with pytest.raises(ReceiptError, match="already used"):
                _call("dp-rag", settings, _corpus(), ["a", "b"], receipts=batch)
        ledger.consume([fresh], method="dp-rag", mechanisms=settings.mechanisms(),
                       privacy_unit="record")  # still unused: the batches changed nothing
        # a build charge is not a query receipt
        build = ledger.charge("build/1", kind="build", method="dp-rag",
                              mechanisms=settings.mechanisms(), privacy_unit="record").receipt
        with pytest.raises(ReceiptError, match="build charge"):
            _call("dp-rag", settings, _corpus(), ["a"], receipts=[build])


def test_item6_service_answer_needs_receipts_and_ask_consumes_them(tmp_path: Path) -> None:
    ledger = CorpusLedger(tmp_path / "l.sqlite")
    ledger.set_cap(50.0, 1e-3)
    service = QueryService(_corpus(), ledger, tiny_llm(), HashEmbedder(), rng=secure_rng(0))
    settings = make_settings("dp-rag", **SETTINGS["dp-rag"])
    with pytest.raises(TypeError):
        service.answer("dp-rag", settings, ["q"])  # type: ignore[call-arg]
    result = service.ask(["q one", "q two"], method="dp-rag", epsilon=4.0, max_new_tokens=1)
    assert result.charged == 2 and len(result.charge_keys) == 2
    summary = ledger.summary()
    assert summary["queries"] == 2 and summary["queries_unused"] == 0
    ledger.close()


# ---------------------------------------------------------------------- 13.6: the cap
def test_item6_a_query_charge_on_an_uncapped_ledger_is_refused_unless_explicit(
        tmp_path: Path, guarded: None) -> None:
    from dpsynrag.accounting.corpus_ledger import NoCapError

    settings = make_settings("dp-rag", **SETTINGS["dp-rag"])
    with CorpusLedger(tmp_path / "l.sqlite") as ledger:
        with pytest.raises(NoCapError) as refused:
            ledger.charge("q1", kind="query", method="dp-rag",
                          mechanisms=settings.mechanisms(), privacy_unit="record")
        message = str(refused.value)
        assert "dpsynrag ledger cap" in message and "--no-cap" in message
        assert "\n" not in message
        assert ledger.entries() == [] and ledger.refusal_count() == 0
        service = QueryService(_corpus(), ledger, Tripwire(), Tripwire())
        with pytest.raises(NoCapError):
            service.ask(["q"], method="dp-rag", epsilon=4.0, max_new_tokens=1)
        assert ledger.entries() == []
        # a build charge is not a query: builds fix their own epsilon
        ledger.charge("b1", kind="build", method="dp-synrag",
                      mechanisms=settings.mechanisms(), privacy_unit="record")
        ledger.charge("q1", kind="query", method="dp-rag", mechanisms=settings.mechanisms(),
                      privacy_unit="record", allow_no_cap=True)
        assert [e.kind for e in ledger.entries()] == ["build", "query"]


@pytest.fixture()
def tiny_models(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The CLI's models, and a record of each load (a refused query loads none)."""
    model = tiny_llm()
    loads: list[str] = []
    monkeypatch.setattr("dpsynrag.query.service.load_llm",
                        lambda *_a, **_k: loads.append("llm") or model)
    monkeypatch.setattr("dpsynrag.query.service.load_embedder",
                        lambda *_a, **_k: loads.append("embedder") or HashEmbedder())
    return loads


def _notes(tmp_path: Path) -> Path:
    """Notes of 6 patients, 3 records each, no id column."""
    rs = np.random.default_rng(2)
    path = tmp_path / "notes.jsonl"
    path.write_text("".join(
        json.dumps({"person": f"p{i % 6}", "text": " ".join(rs.choice(WORDS, 8))}) + "\n"
        for i in range(18)))
    return path


def test_item6_cli_query_without_a_cap_exits_2_and_reads_nothing(tmp_path: Path, tiny_models,
                                                                 capsys) -> None:
    from dpsynrag.cli import main

    ledger = tmp_path / "l.sqlite"
    code = main(["query", "--corpus", str(_notes(tmp_path)), "--corpus-ledger", str(ledger),
                 "--method", "dp-rag", "--epsilon", "2", "--max-new-tokens", "1", "q"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "dpsynrag ledger cap" in err
    assert tiny_models == []  # refused before the models loaded or the corpus was read
    with CorpusLedger(ledger) as opened:
        assert opened.entries() == []


# ---------------------------------------------------------------------- 13.4: units
@pytest.mark.parametrize("rule", ["pick", "concat"])
def test_item4_from_path_bounds_units_like_the_build(tmp_path: Path, rule: str) -> None:
    from dpsynrag.accounting.corpus_ledger import privacy_unit_definition
    from dpsynrag.io.reader import read_documents
    from dpsynrag.io.units import bound_units

    notes = _notes(tmp_path)
    corpus = PrivateCorpus.from_path(notes, HashEmbedder(), unit_column="person",
                                     unit_bound=rule)
    expected = bound_units(read_documents(notes, unit_column="person"), rule, 20000)
    assert len(corpus) == 6 and corpus.texts == expected.texts
    assert corpus.privacy_unit == privacy_unit_definition("person", rule)
    if rule == "concat":
        assert all(text.count("\n\n") == 2 for text in corpus.texts)
    records = PrivateCorpus.from_path(notes, HashEmbedder())
    assert len(records) == 18 and records.privacy_unit == "record"


def test_item4_a_record_level_query_on_a_person_level_ledger_is_refused(
        tmp_path: Path, tiny_models, capsys) -> None:
    from dpsynrag.accounting.corpus_ledger import (
        PrivacyUnitMismatchError,
        privacy_unit_definition,
    )
    from dpsynrag.cli import main

    notes, path = _notes(tmp_path), tmp_path / "l.sqlite"
    person = privacy_unit_definition("person", "pick")
    with CorpusLedger(path) as ledger:  # what a build with --unit-column person charges
        ledger.set_cap(100.0, 1e-3)
        ledger.charge("build/1", kind="build", method="dp-synrag",
                      mechanisms=[{"mechanism": "exponential", "params": {"epsilon": 1.0}}],
                      privacy_unit=person)
    base = ["query", "--corpus", str(notes), "--corpus-ledger", str(path), "--method", "dp-rag",
            "--epsilon", "2", "--max-new-tokens", "1", "--json"]
    for extra in ([], ["--unit-column", "person", "--unit-bound", "concat"]):
        assert main([*base, *extra, "q"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "privacy unit" in err and "nothing was charged" in err
    assert tiny_models == []
    with pytest.raises(PrivacyUnitMismatchError):
        QueryService.open(notes, ledger=path)
    assert main([*base, "--unit-column", "person", "first", "second"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{")]
    assert len(answers) == 2 and not any(a["refused"] for a in answers)
    with CorpusLedger(path) as ledger:
        assert [e.kind for e in ledger.entries()] == ["build", "query", "query"]
        assert ledger.summary()["privacy_unit"] == person
        assert ledger.summary()["queries_unused"] == 0
    service = QueryService.open(notes, ledger=path, unit_column="person")
    assert len(service.corpus) == 6 and service.corpus.privacy_unit == person
    assert service.ledger is not None
    service.ledger.close()


# ---------------------------------------------------------------------- 13.7: the KSA cache
def test_item7_the_ksa_answer_cache_is_0600_under_a_0700_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynrag.eval import query_methods

    monkeypatch.setattr(dp_ksa, "_ensemble_responses",
                        lambda questions, *_a, **_k: [["private answer"] for _ in questions])
    old_umask = os.umask(0o022)
    try:
        work = tmp_path / "work"
        # what run_query_method's mkdir(parents=True, mode=0o700) of a run directory left:
        # the parents, work/state included, 0755
        (work / "state" / "dp-ksa-eps2-run0").mkdir(parents=True, mode=0o700)
        settings = make_settings("dp-ksa", 2.0, ensemble=2)
        worker = SimpleNamespace(llm=None, embedder=None)
        first = query_methods._ksa_responses(work, ["q"], None, worker, settings)
        [cache] = (work / "state").glob("ksa-responses-*.json")
        assert first == [["private answer"]]
        assert stat.S_IMODE(cache.stat().st_mode) == 0o600
        assert stat.S_IMODE((work / "state").stat().st_mode) == 0o700
        # a cache (and its directory) left world-readable by an older version is closed
        os.chmod(cache, 0o644)
        os.chmod(work / "state", 0o755)
        monkeypatch.setattr(dp_ksa, "_ensemble_responses", lambda *_a, **_k: pytest.fail(
            "the cache was not read"))
        assert query_methods._ksa_responses(work, ["q"], None, worker, settings) == first
        assert stat.S_IMODE(cache.stat().st_mode) == 0o600
        assert stat.S_IMODE((work / "state").stat().st_mode) == 0o700
        assert sorted(p.name for p in (work / "state").iterdir()) == [
            "dp-ksa-eps2-run0", cache.name]  # no temporary file left
    finally:
        os.umask(old_umask)


@pytest.mark.parametrize("method", sorted(MODULES))
def test_a_receipt_opens_only_the_corpus_of_its_own_ledger(tmp_path: Path, method: str,
                                                           guarded: None) -> None:
    """A receipt charged to corpus A's ledger opens nothing on corpus B, and a corpus bound to
    no ledger answers nothing; the receipt stays unused either way."""
    settings = make_settings(method, **SETTINGS[method])
    extra = {"responses": [["x"] * 4]} if method == "dp-ksa" else {}
    with CorpusLedger(tmp_path / "a.sqlite") as ledger_a:
        receipts = _receipts(ledger_a, method, settings, 1)
    for corpus, message in ((_corpus().bind(tmp_path / "b.sqlite"), "opens only its own"),
                            (_corpus(), "bound to no corpus ledger")):
        with pytest.raises(ReceiptError, match=message):
            MODULES[method].answer(["q"], corpus, Tripwire(), Tripwire(), settings,
                                   secure_rng(0), receipts=receipts, **extra)
    consume_receipts(receipts, questions=1, method=getattr(settings, "method", method),
                     mechanisms=settings.mechanisms(), privacy_unit="record",
                     corpus_ledger=tmp_path / "a.sqlite")  # still unused: it opens A once
