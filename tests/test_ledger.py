"""The zCDP ledger: charging before use, durability, resume without redraw, composition."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from declared_noise import as_drawn

from dpsynrag.accounting import (
    BudgetExceededError,
    BudgetPlan,
    Charge,
    Ledger,
    LedgerError,
    PlanRequest,
    RandomSource,
    ReleaseMismatchError,
    discrete_gaussian,
    plan_budget,
    secure_rng,
)
from dpsynrag.accounting.costs import gaussian_rho


def hist_charge(sigma: float = 7.0710678118654755, k: int = 10) -> Charge:
    return Charge(stage="histogram", mechanism="discrete_gaussian",
                  params={"sigma": sigma, "l2_sensitivity": math.sqrt(k)},
                  sensitivity=math.sqrt(k), sensitivity_norm="l2")


def cluster_charges(cluster: int, plan: BudgetPlan) -> list[tuple[str, Charge]]:
    part = f"cluster/{cluster:05d}"
    common = dict(group="clusters", partition=part)
    charges = [
        (f"{part}/sum", Charge("retrieval", "gaussian",
                               {"sigma": plan.sigma_mu, "l2_sensitivity": 1.0}, 1.0, "l2",
                               **common)),
        (f"{part}/threshold", Charge("retrieval", "exponential_threshold",
                                     {"epsilon": plan.eps_theta, "k": 80}, 1.0, "count",
                                     **common)),
    ]
    for step in range(plan.T):
        charges.append((f"{part}/token/{step:04d}",
                        Charge("prediction", "token_softmax",
                               {"clip": plan.c_over_tau, "temperature": 1.0}, plan.c_over_tau,
                               "linf", **common)))
    return charges


def test_ledger_composes_table6_to_the_planned_total() -> None:
    """A whole DP-SynRAG run on Table 6: rho_hist + L x (per-cluster), whatever R is."""
    plan = plan_budget(PlanRequest(epsilon=10, delta=1e-3, K=10, L=5, T=70, eps_theta=0.4,
                                   rho_hist=0.1, rho_mean=0.009, conversion="bun-steinke"))
    ledger = Ledger(rho_budget=plan.rho_total, rng=secure_rng(1))
    ledger.declare_parallel_group("clusters", 5, "each document in at most L=5 clusters")
    ledger.release("histogram", hist_charge(plan.sigma_h),
                   lambda rng: discrete_gaussian(np.zeros(4, dtype=np.int64), plan.sigma_h, rng))
    for cluster in range(12):  # R = 12 > L
        ledger.release_many([(key, charge, as_drawn(charge, 0)) for key, charge in
                             cluster_charges(cluster, plan)])
    assert ledger.total_rho() == pytest.approx(plan.rho_total, rel=1e-12)
    assert ledger.epsilon(1e-3, "bun-steinke") == pytest.approx(10.0, rel=1e-9)
    # nothing more fits: one more histogram-sized release is refused before drawing
    drawn = []
    with pytest.raises(BudgetExceededError):
        ledger.release("extra", hist_charge(), lambda rng: drawn.append(1))
    assert drawn == []


def test_parallel_group_costs_its_L_most_expensive_partitions() -> None:
    ledger = Ledger()
    ledger.declare_parallel_group("clusters", 2, "test")
    costs = {"a": 1.0, "b": 3.0, "c": 2.0}
    for part, sigma_sq_inv in costs.items():
        sigma = math.sqrt(1 / (2 * sigma_sq_inv))
        charge = Charge("s", "gaussian", {"sigma": sigma, "l2_sensitivity": 1.0}, 1.0, "l2",
                        "clusters", part)
        ledger.release(f"{part}/x", charge, as_drawn(charge, 0.0))
    assert ledger.total_rho() == pytest.approx(3.0 + 2.0)
    seq = Charge("s", "gaussian", {"sigma": 1.0, "l2_sensitivity": 1.0}, 1.0, "l2")
    ledger.release("seq", seq, as_drawn(seq, 0.0))
    assert ledger.total_rho() == pytest.approx(5.5)


def test_fewer_partitions_than_L_cost_their_sum() -> None:
    ledger = Ledger()
    ledger.declare_parallel_group("clusters", 5, "test")
    ledger.release("p/x", Charge("s", "exponential_threshold", {"epsilon": 2.0}, 1.0, "count",
                                 "clusters", "p"), lambda rng: 0.5)
    assert ledger.total_rho() == pytest.approx(0.5)


def test_rho_is_recomputed_from_parameters_not_trusted() -> None:
    charge = hist_charge(sigma=2.0, k=4)
    assert charge.rho == pytest.approx(gaussian_rho(2.0, 2.0)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="unknown mechanism"):
        _ = Charge("s", "laplace", {"b": 1.0}, 1.0, "l1").rho


def test_resume_returns_stored_values_and_never_redraws(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.sqlite"
    with Ledger(path, rho_budget=10.0) as ledger:
        first = ledger.release("histogram", hist_charge(),
                               lambda rng: discrete_gaussian(np.arange(5), 7.0710678118654755,
                                                            rng))
        spent = ledger.total_rho()
    calls = []

    def must_not_draw(rng: RandomSource) -> np.ndarray:
        calls.append(1)
        return np.zeros(5, dtype=np.int64)

    with Ledger(path, rho_budget=10.0) as resumed:
        again = resumed.release("histogram", hist_charge(), must_not_draw)
        assert calls == []
        np.testing.assert_array_equal(again, first)
        assert again.dtype == np.int64
        assert resumed.total_rho() == pytest.approx(spent)
        assert len(resumed.releases()) == 1


def test_resume_with_other_parameters_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.release("histogram", hist_charge(sigma=7.0), as_drawn(hist_charge(sigma=7.0), 1))
    with Ledger(path) as ledger, pytest.raises(ReleaseMismatchError):
        ledger.release("histogram", hist_charge(sigma=8.0), lambda rng: 1)
    with pytest.raises(ReleaseMismatchError):
        Ledger(path, rho_budget=1.0).close()
        Ledger(path, rho_budget=2.0)


def test_a_failed_draw_charges_nothing_and_a_batch_is_atomic(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite")

    def boom(rng: RandomSource) -> int:
        raise RuntimeError("draw failed")

    with pytest.raises(RuntimeError):
        ledger.release_many([("a", hist_charge(), as_drawn(hist_charge(), 1)),
                             ("b", hist_charge(), boom)])
    assert ledger.releases() == []
    assert ledger.total_rho() == 0.0
    with pytest.raises(LedgerError, match="twice"):
        ledger.release_many([("a", hist_charge(), lambda rng: 1),
                             ("a", hist_charge(), lambda rng: 2)])


def test_undeclared_group_is_refused() -> None:
    ledger = Ledger()
    with pytest.raises(LedgerError, match="not declared"):
        ledger.release("x", Charge("s", "gaussian", {"sigma": 1.0, "l2_sensitivity": 1.0}, 1.0,
                                   "l2", "clusters", "p"), lambda rng: 0)
    ledger.declare_parallel_group("clusters", 3, "t")
    with pytest.raises(ReleaseMismatchError):
        ledger.declare_parallel_group("clusters", 4, "t")


def test_ledger_file_is_private_and_seeded_flag_persists(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as production:
        assert not production.seeded
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    Ledger(path, rng=secure_rng(3)).close()
    with Ledger(path) as reopened:  # once seeded, always seeded
        assert reopened.seeded


def test_values_round_trip_in_their_types(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    values = {"int": 3, "float": 0.125, "list": [1, 2, 3], "f32": np.ones(3, np.float32),
              "i64": np.arange(4, dtype=np.int64)}
    with Ledger(path) as ledger:
        for key, value in values.items():
            ledger.release(key, Charge("s", "exponential_threshold", {"epsilon": 0.1}, 1.0,
                                       "count"), lambda rng, v=value: v)
    with Ledger(path) as ledger:
        for key, value in values.items():
            stored = ledger.released_value(key)
            if isinstance(value, np.ndarray):
                assert stored.dtype == value.dtype
                np.testing.assert_array_equal(stored, value)
            else:
                assert stored == value
        summary = ledger.stage_summary()
        assert summary == [{"stage": "s", "mechanism": "exponential_threshold", "group": None,
                            "releases": 5, "rho_sum": pytest.approx(5 * 0.1**2 / 8)}]


def test_a_charge_must_state_the_sensitivity_its_mechanism_is_calibrated_to() -> None:
    with pytest.raises(ValueError, match="calibrated to l2 sensitivity"):
        Charge("histogram", "discrete_gaussian", {"sigma": 7.0, "l2_sensitivity": 3.0}, 1.0, "l2")
    with pytest.raises(ValueError, match="linf"):
        Charge("prediction", "token_softmax", {"clip": 0.1, "temperature": 1.0}, 0.1, "l2")


def test_the_build_target_is_recorded_once(tmp_path) -> None:
    from dpsynrag.accounting.ledger import LedgerError

    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        assert ledger.target is None
        ledger.record_target(1e-3, "cks")
        ledger.record_target(1e-3, "cks")  # a resumed build: the same target
        with pytest.raises(LedgerError, match="started for delta"):
            ledger.record_target(1e-4, "cks")
        with pytest.raises(LedgerError):
            ledger.record_target(1.5, "cks")
    with Ledger(path) as reopened:
        assert reopened.target == (1e-3, "cks")


def test_the_audit_view_hashes_each_value_and_never_shows_it(tmp_path: Path) -> None:
    import hashlib

    from dpsynrag.accounting.ledger import encode_value

    path = tmp_path / "state" / "ledger.sqlite"
    with Ledger(path) as ledger:
        value = ledger.release("histogram", hist_charge(), as_drawn(hist_charge(), np.arange(5)))
        rows = ledger.audit_releases()
    assert len(rows) == 1
    row = rows[0]
    assert row["value_sha256"] == hashlib.sha256(encode_value(value)).hexdigest()
    assert (row["key"], row["stage"], row["mechanism"]) == ("histogram", "histogram",
                                                            "discrete_gaussian")
    assert row["params"] == dict(hist_charge().params)
    assert row["rho"] == pytest.approx(hist_charge().rho)
    assert (row["group"], row["partition"]) == (None, None) and row["charged_at"]
    assert "value" not in row


def token_charge(partition: str = "cluster/00000") -> Charge:
    return Charge("prediction", "token_softmax", {"clip": 1.0, "temperature": 10.0}, 1.0,
                  "linf", group="clusters", partition=partition)


def test_draw_many_charges_first_and_store_many_records_the_release(tmp_path: Path) -> None:
    """Device-side sampling: the ledger draws u (charged, committed), the release is stored
    later; a resumed ledger returns the stored token and draws nothing."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path, rng=secure_rng(5))
    ledger.declare_parallel_group("clusters", 1, "test")
    rho_before = ledger.total_rho()
    [(stored, u)] = ledger.draw_many([("cluster/00000/token/000", token_charge(),
                                       lambda rng: float(rng.random(1)[0]))])
    assert not stored and 0.0 <= u < 1.0
    # the charge is committed before the value exists: another connection sees it
    assert Ledger(path, rng=secure_rng(9)).total_rho() == pytest.approx(rho_before + 0.005)
    with pytest.raises(LedgerError, match="awaits its value"):
        ledger.draw_many([("cluster/00000/token/000", token_charge(), lambda rng: 0.5)])
    with pytest.raises(LedgerError, match="awaits its value"):
        ledger.release("cluster/00000/token/000", token_charge(), lambda rng: 7)
    ledger.store_many([("cluster/00000/token/000", 42)])
    with pytest.raises(LedgerError, match="not drawn by draw_many"):
        ledger.store_many([("cluster/00000/token/000", 43)])
    resumed = Ledger(path, rng=secure_rng(6))
    drawn: list[int] = []
    assert resumed.draw_many([("cluster/00000/token/000", token_charge(),
                               lambda rng: drawn.append(1))]) == [(True, 42)]
    assert drawn == [] and resumed.total_rho() == pytest.approx(rho_before + 0.005)


def test_draw_many_uses_the_same_random_stream_as_release_many() -> None:
    """One uniform per key, in request order: the stream a host-side release would consume."""
    keys = [f"cluster/0000{g}/token/000" for g in range(3)]
    host, device = Ledger(rng=secure_rng(11)), Ledger(rng=secure_rng(11))
    for ledger in (host, device):
        ledger.declare_parallel_group("clusters", 1, "test")
    expected = host.release_many([(k, token_charge(k[:13]), lambda rng: float(rng.random(1)[0]))
                                  for k in keys])
    drawn = device.draw_many([(k, token_charge(k[:13]), lambda rng: float(rng.random(1)[0]))
                              for k in keys])
    assert [u for _stored, u in drawn] == expected


def test_store_many_refuses_a_key_never_drawn_and_a_crash_leaves_it_to_draw_afresh(
        tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path, rng=secure_rng(3))
    ledger.declare_parallel_group("clusters", 1, "test")
    with pytest.raises(LedgerError, match="not drawn by draw_many"):
        ledger.store_many([("cluster/00000/token/000", 1)])
    ledger.draw_many([("cluster/00000/token/000", token_charge(), lambda rng: 0.25)])
    # a crash before store_many: the key stays charged with no value, drawn afresh once
    resumed = Ledger(path, rng=secure_rng(4))
    rho = resumed.total_rho()
    assert resumed.draw_many([("cluster/00000/token/000", token_charge(),
                               lambda rng: 0.75)]) == [(False, 0.75)]
    assert resumed.total_rho() == rho  # not charged twice
    resumed.store_many([("cluster/00000/token/000", 3)])
    assert resumed.release("cluster/00000/token/000", token_charge(), lambda rng: 9) == 3


def test_a_draw_with_less_noise_than_charged_is_refused_and_rolled_back(tmp_path: Path) -> None:
    """The samplers declare their sigma to the ledger's source; a draw whose sigma (or, on a
    fixed-point grid, sigma / sensitivity) is not the charged one is refused, and nothing of
    it is charged, stored or returned."""
    from dpsynrag.accounting.ledger import NoiseMismatchError

    ledger = Ledger(tmp_path / "l.sqlite")
    charge = hist_charge(sigma=7.0)
    with pytest.raises(NoiseMismatchError, match="charged for"):
        ledger.release("histogram", charge,
                       lambda rng: discrete_gaussian(np.zeros(3, dtype=np.int64), 3.5, rng))
    assert ledger.releases() == [] and ledger.total_rho() == 0.0
    with pytest.raises(NoiseMismatchError, match="drew no Gaussian noise"):
        ledger.release("histogram", charge, lambda rng: np.zeros(3, dtype=np.int64))
    threshold = Charge("s", "exponential_threshold", {"epsilon": 0.5}, 1.0, "count")
    with pytest.raises(NoiseMismatchError, match="records no sigma"):
        ledger.release("t", threshold,
                       lambda rng: discrete_gaussian(np.zeros(1, dtype=np.int64), 7.0, rng))
    assert ledger.releases() == [] and ledger.total_rho() == 0.0
    # one of several draws off is enough to refuse
    with pytest.raises(NoiseMismatchError):
        ledger.release("histogram", charge, lambda rng: (
            discrete_gaussian(np.zeros(2, dtype=np.int64), 7.0, rng),
            discrete_gaussian(np.zeros(2, dtype=np.int64), 6.9, rng)))
    # the charged sigma passes; a grid draw passes at sigma * B with sensitivity B
    ledger.release("histogram", charge,
                   lambda rng: discrete_gaussian(np.zeros(3, dtype=np.int64), 7.0, rng))
    grid = Charge("s", "gaussian", {"sigma": 0.5, "l2_sensitivity": 1.0}, 1.0, "l2")
    ledger.release("sum", grid, lambda rng: discrete_gaussian(
        np.zeros(4, dtype=np.int64), 0.5 * 1025, rng, sensitivity=1025.0))
    with pytest.raises(NoiseMismatchError):
        ledger.release("sum2", grid, lambda rng: discrete_gaussian(
            np.zeros(4, dtype=np.int64), 0.5 * 1025, rng, sensitivity=2050.0))
    assert [r.key for r in ledger.releases()] == ["histogram", "sum"]
    # declarations outside a release are not kept
    assert ledger.rng.stop_noise_log() == ()
