"""The budget planner on the paper's Table 6 setting, and its refusals."""

from __future__ import annotations

import math

import pytest

from dpsynrag.accounting import PlanError, PlanRequest, plan_budget
from dpsynrag.accounting.costs import exponential_rho, gaussian_rho, token_rho


def table6(conversion: str = "bun-steinke", **overrides: object) -> PlanRequest:
    fields: dict[str, object] = dict(epsilon=10.0, delta=1e-3, K=10, L=5, T=70, eps_theta=0.4,
                                     rho_hist=0.1, rho_mean=0.009, conversion=conversion)
    fields.update(overrides)
    return PlanRequest(**fields)  # type: ignore[arg-type]


def test_table6_bun_steinke_pins_the_papers_figures() -> None:
    plan = plan_budget(table6())
    assert plan.rho_total == pytest.approx(2.2012, abs=5e-5)
    assert plan.sigma_h == pytest.approx(7.0711, abs=5e-5)
    assert plan.sigma_mu == pytest.approx(7.4536, abs=5e-5)
    assert plan.c_over_tau == pytest.approx(0.1057, abs=5e-5)
    assert plan.rho_retrieval == pytest.approx(0.029, abs=1e-12)
    assert plan.epsilon_bun_steinke == pytest.approx(10.0, rel=1e-9)
    assert plan.epsilon_cks < plan.epsilon_bun_steinke


def test_table6_cks_admits_more() -> None:
    plan = plan_budget(table6("cks"))
    assert plan.rho_total == pytest.approx(2.607, abs=5e-4)
    assert plan.c_over_tau == pytest.approx(0.1162, abs=5e-5)
    assert plan.epsilon_cks == pytest.approx(10.0, rel=1e-9)
    assert plan.conversion == "cks"


@pytest.mark.parametrize("conversion", ["bun-steinke", "cks"])
def test_plan_recomposes_to_its_total_through_the_cost_functions(conversion: str) -> None:
    """The derived noise scales, fed back through each mechanism's cost, give rho_total."""
    plan = plan_budget(table6(conversion))
    per_cluster = (exponential_rho(plan.eps_theta) + gaussian_rho(1.0, plan.sigma_mu)
                   + plan.T * token_rho(plan.c_over_tau, 1.0))
    total = gaussian_rho(math.sqrt(plan.K), plan.sigma_h) + plan.L * per_cluster
    assert total == pytest.approx(plan.rho_total, rel=1e-12)


def test_consensus_rows_follow_the_design_formula() -> None:
    plan = plan_budget(table6())
    expected = math.ceil(math.log(49_151) / (2 * plan.c_over_tau))
    assert plan.consensus_rows == expected
    assert 50 <= plan.consensus_rows <= 53  # DESIGN.md: about 51 for SmolLM2's vocabulary


def test_impossible_plan_is_refused_with_a_reason() -> None:
    with pytest.raises(PlanError, match="nothing is left for private prediction"):
        plan_budget(table6(epsilon=0.5))
    with pytest.raises(PlanError, match="nothing is left"):
        plan_budget(table6(rho_hist=2.5))


@pytest.mark.parametrize(
    "overrides",
    [dict(delta=0.0), dict(delta=1.0), dict(K=0), dict(L=0), dict(T=0), dict(eps_theta=-1.0),
     dict(rho_mean=0.0), dict(epsilon=math.inf), dict(vocab_size=1)],
)
def test_bad_parameters_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(PlanError):
        plan_budget(table6(**overrides))


def test_more_tokens_means_a_smaller_per_token_budget() -> None:
    short, long = plan_budget(table6(T=35)), plan_budget(table6(T=140))
    assert short.c_over_tau == pytest.approx(long.c_over_tau * 2.0, rel=1e-12)
