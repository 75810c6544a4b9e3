"""verify checks a build's releases against its plan's events (issue 18): BudgetPlan.events()
describes the build once; every cluster must cost the planned cluster, the group must declare
the plan's L, and the plan's mechanisms must compose to its rho_total."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from declared_noise import as_drawn
from test_certificate import FakeEmbedder

from dpsynrag.accounting.certificate import (
    build_certificate,
    load_certificate,
    verify_output,
    write_certificate,
)
from dpsynrag.accounting.composition import compose
from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.mechanisms import DiscreteGaussian, TokenSoftmax
from dpsynrag.accounting.planner import BudgetPlan, PlanRequest, plan_budget
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.signing import generate_keypair, load_private_key, sign_document
from dpsynrag.io.output_files import output_file_hashes
from dpsynrag.transforms.emit import write_output
from dpsynrag.transforms.retrieval import retrieve_cluster

CLIP = 0.5


def _plan() -> BudgetPlan:
    plan = plan_budget(PlanRequest(epsilon=10.0, delta=1e-3, K=10, L=2, T=4, eps_theta=0.4,
                                   rho_hist=0.1, rho_mean=0.009))
    assert isinstance(plan, BudgetPlan)
    return plan


def _ledger(plan: BudgetPlan, tokens: tuple[int, ...] = (4, 4, 4)) -> Ledger:
    ledger = Ledger(rng=secure_rng(None))
    hist = Charge.of("a-histogram", DiscreteGaussian(sigma=plan.sigma_h,
                                                    l2_sensitivity=math.sqrt(plan.K)))
    ledger.release("histogram", hist, as_drawn(hist, np.zeros(3, dtype=np.int64)))
    ledger.declare_parallel_group("clusters", plan.L, "test clusters")
    rs = np.random.default_rng(0)
    token = TokenSoftmax(clip=CLIP, temperature=CLIP / plan.c_over_tau)
    for r, made in enumerate(tokens):
        retrieve_cluster(ledger, r, rs.standard_normal((5, 8)), sigma_mu=plan.sigma_mu,
                         eps_theta=plan.eps_theta, k=3)
        for n in range(made):
            ledger.release(f"cluster/{r:05d}/token/{n:03d}",
                           Charge.of("d-prediction", token, group="clusters",
                                     partition=f"cluster/{r:05d}"), lambda rng: 7)
    return ledger


def _output(tmp_path: Path, ledger: Ledger, plan: dict[str, object]) -> Path:
    key = tmp_path / "keys" / "signing_key.pem"
    generate_keypair(key)
    out = tmp_path / "out"
    out.mkdir()
    write_output(out, texts=["a b", "c", "d"], cluster_keywords=["x", "y", "z"],
                 kept=[True, True, True], token_counts=[4, 4, 4], embedder=FakeEmbedder())
    cert = build_certificate(
        ledger, delta=1e-3, conversion="cks", plan=plan,
        model_identity={"name": "tiny"}, embedder_identity={"name": "fake"},
        vocabulary_sha256="33" * 32, output_files=output_file_hashes(out), seeded=False,
        package_version="0.1.0", config={"clip": CLIP})
    write_certificate(out, sign_document(cert, load_private_key(key)))
    return out


def test_a_build_that_follows_its_plan_verifies(tmp_path: Path) -> None:
    plan = _plan()
    ledger = _ledger(plan)
    assert compose(plan.events(CLIP)).rho == pytest.approx(plan.rho_total, rel=1e-12)
    # the build costs what its plan's events cost (3 clusters, L = 2)
    assert ledger.total_rho() == pytest.approx(plan.rho_total, rel=1e-12)
    assert verify_output(_output(tmp_path, ledger, plan.as_dict())) == []
    assert load_certificate(tmp_path / "out" / "certificate.json")["plan"]["L"] == 2


def test_a_cluster_charged_less_than_planned_is_reported(tmp_path: Path) -> None:
    plan = _plan()
    problems = verify_output(_output(tmp_path, _ledger(plan, (4, 3, 4)), plan.as_dict()))
    assert any("partition 1 of group clusters costs rho" in p for p in problems), problems


def test_a_plan_whose_events_do_not_compose_to_its_rho_is_reported(tmp_path: Path) -> None:
    plan = _plan()
    record = {**plan.as_dict(), "rho_total": plan.rho_total * 1.5}
    problems = verify_output(_output(tmp_path, _ledger(plan), record))
    assert any("its mechanisms compose to rho" in p for p in problems), problems


def test_a_group_with_another_L_than_planned_is_reported(tmp_path: Path) -> None:
    plan = _plan()
    ledger = _ledger(plan)
    record = {**plan.as_dict(), "L": 1}
    problems = verify_output(_output(tmp_path, ledger, record))
    assert any("declares max_overlap 2" in p for p in problems), problems
