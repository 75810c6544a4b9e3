"""The per-corpus privacy ledger: recomputed costs, the cap, resumes, deltas, processes, CLI."""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from dpsynrag.accounting.conversions import bun_steinke_epsilon, epsilon_for
from dpsynrag.accounting.corpus_ledger import (
    RECORD_UNIT,
    BudgetRefusedError,
    CapError,
    ChargeMismatchError,
    CorpusLedger,
    default_corpus_ledger_path,
)
from dpsynrag.accounting.costs import (
    gaussian_rho,
    mechanism_delta,
    mechanism_rho,
    mechanism_sensitivity,
    spend_of,
)
from dpsynrag.accounting.ledger import BudgetExceededError, Ledger, LedgerError
from dpsynrag.cli import main

R = RECORD_UNIT  # the privacy unit of every charge below that is not about units


def gauss(sigma: float, sensitivity: float = 1.0, count: int = 1) -> dict:
    return {"mechanism": "gaussian", "params": {"sigma": sigma, "l2_sensitivity": sensitivity},
            "count": count}


def limited(epsilon: float, delta: float, count: int = 1) -> dict:
    return {"mechanism": "limited_domain", "params": {"epsilon": epsilon, "delta": delta},
            "count": count}


def ptr(sigma: float, delta: float) -> dict:
    return {"mechanism": "ptr_gaussian", "params": {"sigma": sigma, "delta": delta}}


# ---------------------------------------------------------------------- costs
def test_query_mechanism_costs_follow_their_formulas() -> None:
    assert mechanism_rho("exponential", {"epsilon": 2.0}) == pytest.approx(0.5)
    assert mechanism_sensitivity("exponential", {"epsilon": 2.0}) == ("count", 1.0)
    assert mechanism_rho("limited_domain", {"epsilon": 1.0, "delta": 1e-5}) == pytest.approx(0.5)
    assert mechanism_delta("limited_domain", {"epsilon": 1.0, "delta": 1e-5}) == 1e-5
    assert mechanism_rho("sparse_vector_epoch", {"epsilon": 0.5}) == pytest.approx(0.125)
    # PTR: sensitivity 2, noise std 2 sigma -> 4 / (2 * 4 sigma^2) = 1 / (2 sigma^2)
    assert mechanism_rho("ptr_gaussian", {"sigma": 2.0, "delta": 1e-6}) == pytest.approx(0.125)
    assert mechanism_delta("ptr_gaussian", {"sigma": 2.0, "delta": 1e-6}) == 1e-6
    for name, params in [("gaussian", {"sigma": 1.0, "l2_sensitivity": 1.0}),
                         ("exponential", {"epsilon": 1.0}),
                         ("sparse_vector_epoch", {"epsilon": 1.0}),
                         ("token_softmax", {"clip": 1.0, "temperature": 2.0})]:
        assert mechanism_delta(name, params) == 0.0
    # existing entries keep their costs
    assert mechanism_rho("exponential_threshold", {"epsilon": 2.0}) == pytest.approx(0.5)
    assert mechanism_rho("gaussian", {"sigma": 2.0, "l2_sensitivity": 1.0}) == gaussian_rho(1, 2)


def test_spend_of_sums_counts_and_refuses_a_stated_cost() -> None:
    rho, delta = spend_of([gauss(1.0), limited(1.0, 1e-6, count=3), ptr(1.0, 1e-7),
                           {"mechanism": "exponential", "params": {"epsilon": 2.0}}])
    assert rho == pytest.approx(0.5 + 1.5 + 0.5 + 0.5)
    assert delta == pytest.approx(3e-6 + 1e-7)
    with pytest.raises(ValueError, match="recomputed"):
        spend_of([{**gauss(1.0), "rho": 1e-9}])
    for bad in (limited(1.0, 1.0), limited(1.0, 0.0), ptr(0.0, 1e-6), gauss(1.0, count=0),
                {"mechanism": "nope", "params": {}}, {"mechanism": "exponential",
                                                      "params": {}}):
        with pytest.raises(ValueError):
            spend_of([bad])


# ---------------------------------------------------------------------- charging
def test_charges_add_up_and_are_recomputed(tmp_path: Path) -> None:
    with CorpusLedger(tmp_path / "c.sqlite") as ledger:
        assert ledger.cap is None
        first = ledger.charge("build", privacy_unit=R, kind="build", method="dp-synrag",
                              mechanisms=[gauss(2.0, count=10)], description="nightly")
        # a "rho" inside params is not a cost: the cost is recomputed from sigma
        second = ledger.charge("q1", privacy_unit=R, kind="query", method="dp-ksa",
                               mechanisms=[{"mechanism": "exponential",
                                            "params": {"epsilon": 1.0, "rho": 1e-12}},
                                           ptr(2.0, 1e-7)], allow_no_cap=True)
        with pytest.raises(ValueError, match="recomputed"):
            ledger.charge("q2", privacy_unit=R, kind="query", method="dp-ksa",
                          mechanisms=[{"mechanism": "exponential", "params": {"epsilon": 1.0},
                                       "rho": 1e-12}])
        with pytest.raises(ValueError, match="kind"):
            ledger.charge("q3", privacy_unit=R, kind="other", method="x", mechanisms=[gauss(1.0)])
        assert not first.resumed and not second.resumed
        assert first.rho == pytest.approx(10 * 1.0 / (2 * 4.0))
        assert second.rho == pytest.approx(1 / 8 + 1 / 8)
        assert second.delta == 1e-7
        spent = ledger.spent()
        assert spent.rho == pytest.approx(1.25 + 0.25)
        assert spent.delta_approx == 1e-7
        assert spent.epsilon is None  # no cap, no delta
        at = ledger.spent(delta=1e-3)
        assert at.epsilon == pytest.approx(bun_steinke_epsilon(1.5, 1e-3 - 1e-7))
        assert [e.key for e in ledger.entries()] == ["build", "q1"]
        assert ledger.entries()[0].description == "nightly"
        summary = ledger.summary()
        assert (summary["builds"], summary["queries"], summary["refusals"]) == (1, 1, 0)
        json.dumps(summary, allow_nan=False)


def test_the_cap_refuses_an_overspend_records_it_and_accepts_exactly_the_cap(
        tmp_path: Path) -> None:
    delta = 1e-5
    one, two = gaussian_rho(1.0, 3.0), gaussian_rho(1.0, 4.0)
    cap_epsilon = bun_steinke_epsilon(math.fsum([one, two]), delta)
    with CorpusLedger(tmp_path / "c.sqlite") as ledger:
        ledger.set_cap(cap_epsilon, delta)
        ledger.charge("a", privacy_unit=R, kind="build", method="dp-synrag",
                      mechanisms=[gauss(3.0)])
        before = ledger.spent()
        with pytest.raises(BudgetRefusedError) as refused:
            ledger.charge("big", privacy_unit=R, kind="query", method="dp-rag",
                          mechanisms=[gauss(1.0)])
        message = str(refused.value)
        assert "\n" not in message
        for part in ("'big'", "spent so far", "remaining epsilon", "cap epsilon", "bun-steinke"):
            assert part in message
        assert isinstance(refused.value, BudgetExceededError | LedgerError)
        assert ledger.spent() == before
        assert [e.key for e in ledger.entries()] == ["a"]
        (refusal,) = ledger.refusals()
        assert (refusal.key, refusal.kind, refusal.reason) == ("big", "query", "epsilon")
        assert refusal.epsilon_would_be == pytest.approx(
            bun_steinke_epsilon(one + 0.5, delta))
        assert refusal.epsilon_would_be > cap_epsilon
        assert refusal.refused_at
        # exactly at the cap: accepted, and nothing is left
        ledger.charge("b", privacy_unit=R, kind="query", method="dp-rag", mechanisms=[gauss(4.0)])
        assert ledger.spent().epsilon == pytest.approx(cap_epsilon, rel=1e-12)
        assert ledger.remaining_epsilon() == pytest.approx(0.0, abs=1e-9)
        with pytest.raises(BudgetRefusedError):
            ledger.charge("c", privacy_unit=R, kind="query", method="dp-rag",
                          mechanisms=[gauss(100.0)])
        assert ledger.refusal_count() == 2
        assert ledger.summary()["refusals"] == 2


def test_explicit_no_cap_accepts_everything_and_a_cap_cannot_go_below_the_spend(
        tmp_path: Path) -> None:
    with CorpusLedger(tmp_path / "c.sqlite") as ledger:
        for i in range(3):
            ledger.charge(f"q{i}", privacy_unit=R, kind="query", method="dp-rag",
                          mechanisms=[gauss(0.1)], allow_no_cap=True)
        spent = ledger.spent(delta=1e-5).epsilon
        assert spent > 100
        with pytest.raises(CapError, match="already spent"):
            ledger.set_cap(10.0, 1e-5)
        assert ledger.cap is None
        ledger.set_cap(spent * 1.01, 1e-5)
        ledger.set_cap(spent * 1.01, 1e-5)  # the same cap again: not a change
        ledger.set_cap(spent * 2, 1e-5, "cks")
        with pytest.raises(CapError):
            ledger.set_cap(spent * 0.99, 1e-5)
        history = ledger.cap_history()
        assert [h["conversion"] for h in history] == ["bun-steinke", "cks"]
        assert history[0]["spent_rho"] == pytest.approx(3 * 50.0)
        assert ledger.cap is not None and ledger.cap.conversion == "cks"
        with pytest.raises(CapError):
            ledger.set_cap(1.0, 1.5)


def test_keys_are_idempotent_and_a_changed_plan_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with CorpusLedger(path) as ledger:
        ledger.set_cap(20.0, 1e-5)
        first = ledger.charge("build-1", privacy_unit=R, kind="build", method="dp-synrag",
                              mechanisms=[gauss(2.0, count=4), limited(0.5, 1e-7)])
    with CorpusLedger(path) as ledger:  # a resumed build, in another process or later
        again = ledger.charge("build-1", privacy_unit=R, kind="build", method="dp-synrag",
                              mechanisms=[gauss(2.0, count=4), limited(0.5, 1e-7)],
                              description="resumed")
        assert again.resumed and again.entry == first.entry
        assert len(ledger.entries()) == 1
        assert ledger.spent().rho == pytest.approx(first.rho)
        for mechanisms, kind, method in [([gauss(2.0, count=5), limited(0.5, 1e-7)], "build",
                                          "dp-synrag"),
                                         ([gauss(2.0, count=4), limited(0.5, 1e-7)], "query",
                                          "dp-synrag"),
                                         ([gauss(2.0, count=4), limited(0.5, 1e-7)], "build",
                                          "dp-synth")]:
            with pytest.raises(ChargeMismatchError):
                ledger.charge("build-1", privacy_unit=R, kind=kind, method=method,
                              mechanisms=mechanisms)
        assert len(ledger.entries()) == 1 and ledger.refusal_count() == 0


def test_approximate_deltas_add_up_and_shrink_the_conversion_delta(tmp_path: Path) -> None:
    cap_delta = 1e-5
    with CorpusLedger(tmp_path / "c.sqlite") as ledger:
        ledger.set_cap(1000.0, cap_delta)
        ledger.charge("q1", privacy_unit=R, kind="query", method="dpvote",
                      mechanisms=[limited(1.0, 2e-6, 2)])
        ledger.charge("q2", privacy_unit=R, kind="query", method="dp-ksa",
                      mechanisms=[{"mechanism": "exponential", "params": {"epsilon": 1.0}},
                                  ptr(1.0, 3e-6)])
        spent = ledger.spent()
        assert spent.delta_approx == pytest.approx(7e-6)
        assert spent.rho == pytest.approx(1.0 + 0.125 + 0.5)
        assert spent.epsilon == pytest.approx(epsilon_for(1.625, cap_delta - 7e-6,
                                                          "bun-steinke"))
        assert spent.epsilon > bun_steinke_epsilon(1.625, cap_delta)
        # the delta alone breaks the cap: refused whatever the epsilon
        with pytest.raises(BudgetRefusedError, match="delta"):
            ledger.charge("q3", privacy_unit=R, kind="query", method="dpvote",
                          mechanisms=[limited(0.1, 4e-6)])
        (refusal,) = ledger.refusals()
        assert refusal.reason == "delta" and refusal.epsilon_would_be is None
        ledger.charge("q4", privacy_unit=R, kind="query", method="dpvote",
                      mechanisms=[limited(0.1, 2e-6)])
        assert ledger.spent().delta_approx == pytest.approx(9e-6)
        summary = ledger.summary()
        by_method = {m["method"]: m for m in summary["methods"]}
        assert by_method["dpvote"]["charges"] == 2
        assert by_method["dpvote"]["delta_approx"] == pytest.approx(6e-6)
        assert by_method["dp-ksa"]["rho"] == pytest.approx(0.625)


def test_default_path_permissions_and_foreign_files(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(config))
    notes = tmp_path / "data" / "notes.jsonl"
    path = default_corpus_ledger_path(notes)
    digest = hashlib.sha256(str(notes.resolve()).encode()).hexdigest()[:16]
    assert path == config / "ledgers" / f"notes.jsonl-{digest}.sqlite"
    monkeypatch.chdir(tmp_path)
    assert default_corpus_ledger_path(Path("data/notes.jsonl")) == path
    CorpusLedger(path).close()
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(config.stat().st_mode) == 0o700
    with pytest.raises(FileNotFoundError):
        CorpusLedger(tmp_path / "missing.sqlite", create=False)
    Ledger(tmp_path / "ledger.sqlite").close()  # a build's ledger is not a corpus ledger
    with pytest.raises(LedgerError, match="not a corpus ledger"):
        CorpusLedger(tmp_path / "ledger.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all, not at all" * 10)
    with pytest.raises(LedgerError):
        CorpusLedger(tmp_path / "junk.sqlite")


# ---------------------------------------------------------------------- processes
_PROCESSES, _ATTEMPTS = 6, 20
_MECHANISM = limited(0.1, 1e-7)
_CAP = (2.0, 1e-5)


def _charge_many(path: str, worker: int, barrier, results) -> None:  # runs in a child process
    accepted = refused = 0
    with CorpusLedger(path) as ledger:
        barrier.wait(timeout=60)
        for i in range(_ATTEMPTS):
            try:
                ledger.charge(f"w{worker}/q{i}", privacy_unit=R, kind="query", method="dpvote",
                              mechanisms=[_MECHANISM])
                accepted += 1
            except BudgetRefusedError:
                refused += 1
    results.put((worker, accepted, refused))


def _most_that_fit() -> int:
    rho, delta = spend_of([_MECHANISM])
    epsilon_cap, delta_cap = _CAP
    n = 0
    while True:
        rho_n, delta_n = math.fsum([rho] * (n + 1)), math.fsum([delta] * (n + 1))
        if delta_n >= delta_cap:
            return n
        epsilon = epsilon_for(rho_n, delta_cap - delta_n, "bun-steinke")
        # the boundary must not be a float tie, or the count would depend on round-off
        assert abs(epsilon - epsilon_cap) > 1e-6
        if epsilon > epsilon_cap:
            return n
        n += 1


def test_processes_charging_one_ledger_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    with CorpusLedger(path) as ledger:
        ledger.set_cap(*_CAP)
    most = _most_that_fit()
    assert 0 < most < _PROCESSES * _ATTEMPTS
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(_PROCESSES + 1), ctx.Queue()
    workers = [ctx.Process(target=_charge_many, args=(str(path), w, barrier, results))
               for w in range(_PROCESSES)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    try:
        barrier.wait(timeout=60)
        outcomes = [results.get(timeout=60) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
    assert all(worker.exitcode == 0 for worker in workers)
    accepted = sum(a for _, a, _ in outcomes)
    refused = sum(r for _, _, r in outcomes)
    assert accepted + refused == _PROCESSES * _ATTEMPTS
    with CorpusLedger(path) as ledger:
        assert accepted == len(ledger.entries()) == most
        assert ledger.refusal_count() == refused == len(ledger.refusals())
        spent = ledger.spent()
        assert spent.epsilon <= _CAP[0] and spent.delta_approx < _CAP[1]
        assert spent.rho == pytest.approx(most * spend_of([_MECHANISM])[0])
    assert time.monotonic() - started < 60


# ---------------------------------------------------------------------- CLI
def test_cli_cap_then_show_reflects_the_charges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))
    notes = tmp_path / "notes.jsonl"
    assert main(["ledger", "cap", "--corpus", str(notes), "--epsilon", "10", "--delta",
                 "1e-3"]) == 0
    assert "epsilon=10" in capsys.readouterr().out
    with CorpusLedger(default_corpus_ledger_path(notes)) as ledger:
        ledger.charge("build", privacy_unit=R, kind="build", method="dp-synrag",
                      mechanisms=[gauss(2.0, count=8)])
        ledger.charge("q1", privacy_unit=R, kind="query", method="dp-rag", mechanisms=[gauss(4.0)])
        ledger.charge("q2", privacy_unit=R, kind="query", method="dpvote",
                      mechanisms=[limited(0.5, 1e-5, 3)])
        with pytest.raises(BudgetRefusedError):
            ledger.charge("q3", privacy_unit=R, kind="query", method="dp-rag",
                          mechanisms=[gauss(0.1)])
        expected = ledger.spent()
    assert main(["ledger", "show", "--corpus", str(notes), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cap"]["epsilon"] == 10.0 and report["cap"]["delta"] == 1e-3
    assert report["spent"]["rho"] == pytest.approx(expected.rho)
    assert report["spent"]["delta_approx"] == pytest.approx(3e-5)
    assert report["spent"]["epsilon"] == pytest.approx(expected.epsilon)
    assert report["remaining_epsilon"] == pytest.approx(10.0 - expected.epsilon)
    assert (report["builds"], report["queries"], report["refusals"]) == (1, 2, 1)
    assert {m["method"]: m["charges"] for m in report["methods"]} == {
        "dp-synrag": 1, "dp-rag": 1, "dpvote": 1}
    assert main(["ledger", "show", "--corpus-ledger",
                 str(default_corpus_ledger_path(notes))]) == 0
    text = capsys.readouterr().out
    for part in ("dp-synrag", "dpvote", "remaining epsilon", "builds: 1, queries: 2",
                 "refused charges: 1", "bun-steinke"):
        assert part in text
    # a cap below the spend is refused with one line
    assert main(["ledger", "cap", "--corpus", str(notes), "--epsilon", "0.5", "--delta",
                 "1e-3"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already spent" in err


def test_cli_missing_corpus_ledger_is_one_line_and_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["ledger", "show", "--corpus-ledger", str(tmp_path / "none.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no corpus ledger" in err
    assert main(["ledger", "show", "--corpus", str(tmp_path / "notes.jsonl"), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no corpus ledger" in err
    assert not (tmp_path / "config" / "ledgers").exists()  # showing creates nothing
    assert main(["ledger", "show"]) == 2  # one of --state-dir/--corpus/--corpus-ledger
    assert main(["ledger", "show", "--state-dir", str(tmp_path)]) == 2  # unchanged behaviour
    assert "no ledger.sqlite" in capsys.readouterr().err
    assert main(["ledger", "cap", "--corpus-ledger", str(tmp_path / "x.sqlite"), "--epsilon",
                 "1", "--delta", "2"]) == 2


def test_dp_currency_charges_add_their_epsilon_after_the_zcdp_conversion(tmp_path) -> None:
    from dpsynrag.accounting.conversions import epsilon_for

    koga = [{"mechanism": "dp_composition",
             "params": {"token_epsilon": 2.0, "token_delta": 1e-5, "steps": 5,
                        "epsilon": 10.0, "delta": 1e-4}}]
    exp = [{"mechanism": "exponential", "params": {"epsilon": 1.0}}]
    with CorpusLedger(tmp_path / "l.sqlite") as ledger:
        ledger.set_cap(epsilon=25.0, delta=1e-3)
        ledger.charge("q1", privacy_unit=R, kind="query", method="sparse-vote", mechanisms=koga)
        ledger.charge("q2", privacy_unit=R, kind="query", method="dp-rag", mechanisms=exp)
        spent = ledger.spent()
        assert spent.epsilon_dp == 10.0 and spent.delta_approx == pytest.approx(1e-4)
        assert spent.epsilon == pytest.approx(10.0 + epsilon_for(1 / 8, 1e-3 - 1e-4,
                                                                  "bun-steinke"), rel=1e-12)
        ledger.charge("q3", privacy_unit=R, kind="query", method="sparse-vote", mechanisms=koga)
        with pytest.raises(BudgetRefusedError):  # a third 10 would pass 25
            ledger.charge("q4", privacy_unit=R, kind="query", method="sparse-vote", mechanisms=koga)
    with pytest.raises(ValueError, match="do not fit"):  # 6 steps of 2 exceed 10 sequentially
        spend_of([{"mechanism": "dp_composition",
                   "params": {**koga[0]["params"], "steps": 6}}])


# ---------------------------------------------------------------------- privacy unit (issue 13.4)
def test_item4_privacy_unit_definition_names_the_column_and_the_bound() -> None:
    from dpsynrag.accounting.corpus_ledger import privacy_unit_definition

    assert privacy_unit_definition(None) == privacy_unit_definition(None, "concat") == "record"
    person = privacy_unit_definition("person")
    assert person != privacy_unit_definition("person", "concat") != "record"
    assert person != privacy_unit_definition("patient")
    with pytest.raises(ValueError, match="unit bound"):
        privacy_unit_definition("person", "first")


def test_item4_ledger_records_its_unit_at_the_first_charge_and_refuses_another(
        tmp_path: Path) -> None:
    from dpsynrag.accounting.corpus_ledger import (
        PrivacyUnitMismatchError,
        privacy_unit_definition,
    )

    person = privacy_unit_definition("person", "pick")
    with CorpusLedger(tmp_path / "c.sqlite") as ledger:
        ledger.set_cap(100.0, 1e-3)
        assert ledger.privacy_unit is None and ledger.summary()["privacy_unit"] is None
        with pytest.raises(TypeError):  # the unit is a required part of every charge
            ledger.charge("b0", kind="build", method="dp-synrag", mechanisms=[gauss(3.0)])
        with pytest.raises(ValueError, match="privacy_unit_definition"):
            ledger.charge("b0", kind="build", method="dp-synrag", mechanisms=[gauss(3.0)],
                          privacy_unit="person")
        ledger.charge("b1", kind="build", method="dp-synrag", mechanisms=[gauss(3.0)],
                      privacy_unit=person)
        assert ledger.privacy_unit == person and ledger.summary()["privacy_unit"] == person
        before = ledger.spent()
        for other in (RECORD_UNIT, privacy_unit_definition("person", "concat"),
                      privacy_unit_definition("patient")):
            for kind in ("query", "build"):
                with pytest.raises(PrivacyUnitMismatchError) as refused:
                    ledger.charge(f"x-{kind}", kind=kind, method="dp-rag",
                                  mechanisms=[gauss(3.0)], privacy_unit=other)
                message = str(refused.value)
                assert "\n" not in message and "nothing was charged" in message
                assert repr(person) in message and repr(other) in message
        assert ledger.spent() == before and len(ledger.entries()) == 1
        assert ledger.refusal_count() == 0
        ledger.charge("q1", kind="query", method="dp-rag", mechanisms=[gauss(3.0)],
                      privacy_unit=person)
        assert len(ledger.entries()) == 2
        with pytest.raises(PrivacyUnitMismatchError):
            ledger.check_query_allowed(RECORD_UNIT)
        ledger.check_query_allowed(person)


def test_item4_a_first_charge_refused_by_the_cap_records_no_unit(tmp_path: Path) -> None:
    from dpsynrag.accounting.corpus_ledger import privacy_unit_definition

    with CorpusLedger(tmp_path / "c.sqlite") as ledger:
        ledger.set_cap(1.0, 1e-5)
        with pytest.raises(BudgetRefusedError):
            ledger.charge("big", kind="query", method="dp-rag", mechanisms=[gauss(0.1)],
                          privacy_unit=privacy_unit_definition("person"))
        assert ledger.privacy_unit is None
        ledger.charge("ok", kind="query", method="dp-rag", mechanisms=[gauss(30.0)],
                      privacy_unit=R)
        assert ledger.privacy_unit == R


def _downgrade_to_schema_1(path: Path) -> None:
    """What a ledger written by schema 1 code looks like: no consumed table, no unit."""
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE consumed")
    db.execute("DELETE FROM meta WHERE key = 'privacy_unit'")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.close()


def test_item4_schema_1_ledgers_upgrade_safely(tmp_path: Path) -> None:
    from dpsynrag.accounting.corpus_ledger import (
        SCHEMA_VERSION,
        PrivacyUnitMismatchError,
        ReceiptError,
        privacy_unit_definition,
    )

    person = privacy_unit_definition("person")
    charged, empty = tmp_path / "charged.sqlite", tmp_path / "empty.sqlite"
    with CorpusLedger(charged) as ledger:
        ledger.set_cap(100.0, 1e-3)
        ledger.charge("b", kind="build", method="dp-synrag", mechanisms=[gauss(3.0)],
                      privacy_unit=person)
        old_query = ledger.charge("q", kind="query", method="dp-rag", mechanisms=[gauss(3.0)],
                                  privacy_unit=person).receipt
    with CorpusLedger(empty) as ledger:
        ledger.set_cap(100.0, 1e-3)
    _downgrade_to_schema_1(charged)
    _downgrade_to_schema_1(empty)
    with CorpusLedger(charged) as ledger:
        assert ledger._meta()["schema_version"] == str(SCHEMA_VERSION)
        assert ledger.privacy_unit is None and len(ledger.entries()) == 2
        # the unit of old charges is unknown: every charge is refused until it is declared
        for unit in (R, person):
            with pytest.raises(PrivacyUnitMismatchError, match="ledger declare-unit"):
                ledger.charge("q2", kind="query", method="dp-rag", mechanisms=[gauss(3.0)],
                              privacy_unit=unit)
        assert len(ledger.entries()) == 2
        # a query charged by schema 1 code already ran: its charge cannot pay again
        ledger.declare_privacy_unit(person)
        ledger.declare_privacy_unit(person)  # the same again: a no-op
        with pytest.raises(PrivacyUnitMismatchError):
            ledger.declare_privacy_unit(R)
        with pytest.raises(ReceiptError, match="already used"):
            ledger.consume([old_query], method="dp-rag", mechanisms=[gauss(3.0)],
                           privacy_unit=person)
        ledger.charge("q2", kind="query", method="dp-rag", mechanisms=[gauss(3.0)],
                      privacy_unit=person)
        assert ledger.summary()["privacy_unit"] == person
    with CorpusLedger(empty) as ledger:  # no charges: the first one records its unit
        ledger.charge("q", kind="query", method="dp-rag", mechanisms=[gauss(3.0)],
                      privacy_unit=R)
        assert ledger.privacy_unit == R and ledger.cap is not None


def test_item4_declare_unit_cli_records_the_unit_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.accounting.corpus_ledger import privacy_unit_definition
    from dpsynrag.cli import main

    path = tmp_path / "old.sqlite"
    with CorpusLedger(path) as ledger:
        ledger.set_cap(100.0, 1e-3)
        ledger.charge("b", kind="build", method="dp-synrag", mechanisms=[gauss(3.0)],
                      privacy_unit=privacy_unit_definition("person"))
    _downgrade_to_schema_1(path)
    args = ["ledger", "declare-unit", "--corpus-ledger", str(path)]
    assert main([*args, "--unit-column", "person"]) == 0
    assert main([*args, "--unit-column", "person"]) == 0  # the same unit again: a no-op
    assert main(args) == 1  # record-level is another unit: refused
    with CorpusLedger(path) as ledger:
        assert ledger.privacy_unit == privacy_unit_definition("person")
    capsys.readouterr()
    assert main(["ledger", "show", "--corpus-ledger", str(path)]) == 0
    assert "privacy unit: " in capsys.readouterr().out
