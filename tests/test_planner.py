"""The budget planner on the paper's Table 6 setting, its facts mode, and their refusals."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from dpsynrag.accounting import PlanError, PlanRequest, plan_budget
from dpsynrag.accounting.costs import (
    exponential_rho,
    gaussian_rho,
    mechanism_delta,
    mechanism_rho,
    token_rho,
)
from dpsynrag.accounting.partition_selection import discrete_gaussian_tail, selection_threshold
from dpsynrag.accounting.planner import FactsBudgetPlan
from dpsynrag.cli import main


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
    assert 50 <= plan.consensus_rows <= 53  # docs/mechanisms.md V5: 52 for SmolLM2


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


# ---------------------------------------------------------------------- facts mode
def facts(conversion: str = "bun-steinke", **overrides: object) -> PlanRequest:
    fields: dict[str, object] = dict(epsilon=10.0, delta=1e-3, L=2, rho_hist=0.1,
                                     conversion=conversion, generate="facts")
    fields.update(overrides)
    return PlanRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("conversion", ["bun-steinke", "cks"])
@pytest.mark.parametrize("overrides", [{}, dict(epsilon=1.0, delta=1e-6, rho_hist=0.005),
                                       dict(K_e=3, K_s=8, L=4, share_phrases=0.5,
                                            delta_phrases=2e-4)])
def test_facts_plan_is_consistent(conversion: str, overrides: dict[str, object]) -> None:
    request = facts(conversion, **overrides)
    plan = plan_budget(request)
    assert isinstance(plan, FactsBudgetPlan) and plan.generate == "facts"
    delta_phrases = request.delta_phrases or request.delta / 10
    assert plan.delta_phrases == delta_phrases
    assert plan.delta_conversion == request.delta - delta_phrases
    # the parts add up to rho_total
    assert plan.rho_hist + plan.rho_A + plan.rho_R + plan.rho_C == pytest.approx(
        plan.rho_total, rel=1e-12)
    assert plan.rho_R == pytest.approx(request.share_roles * (plan.rho_total - plan.rho_hist),
                                       rel=1e-12)
    assert plan.rho_A == pytest.approx(request.share_phrases * (plan.rho_total - plan.rho_hist),
                                       rel=1e-12)
    # ... and the noise scales, fed back through the mechanisms' costs, give them back
    ps = {"sigma": plan.sigma_A, "max_items": plan.K_e, "threshold": plan.tau_A,
          "delta": plan.delta_phrases}
    total = (gaussian_rho(math.sqrt(plan.K_s), plan.sigma_h) + mechanism_rho(
        "partition_selection", ps) + plan.L * gaussian_rho(math.sqrt(plan.K_e + plan.K_s),
                                                           plan.sigma_C)
        + gaussian_rho(math.sqrt(plan.K_e), plan.sigma_R))
    assert total == pytest.approx(plan.rho_total, rel=1e-12)
    assert plan.rho_C_per_cluster * plan.L == pytest.approx(plan.rho_C, rel=1e-12)
    # the epsilon recomputed from rho at delta - delta_phrases is the target
    target = plan.epsilon_bun_steinke if conversion == "bun-steinke" else plan.epsilon_cks
    assert target == pytest.approx(request.epsilon, rel=1e-9)
    assert plan.epsilon_cks <= plan.epsilon_bun_steinke
    # the threshold: the phrase release's delta fits, and tau_A is the smallest that does
    assert plan.tau_A == selection_threshold(plan.sigma_A, plan.K_e, delta_phrases)
    assert plan.delta_A == mechanism_delta("partition_selection", ps) <= delta_phrases
    if plan.tau_A > 2:
        assert plan.K_e * discrete_gaussian_tail(plan.sigma_A, plan.tau_A - 2) > delta_phrases
    assert plan.docs_to_release == plan.tau_A
    assert plan.sigma_h == pytest.approx(math.sqrt(plan.K_s / (2 * plan.rho_hist)), rel=1e-15)


def test_facts_plan_reports_the_documented_keys() -> None:
    keys = set(plan_budget(facts()).as_dict())
    assert {"rho_A", "delta_phrases", "sigma_A", "tau_A", "rho_C", "sigma_C", "rho_hist",
            "sigma_h", "epsilon_bun_steinke", "epsilon_cks", "rho_total", "K_e", "K_s", "R_f",
            "L", "generate"} <= keys
    assert not keys & {"T", "eps_theta", "sigma_mu", "c_over_tau"}  # no token-mode checks


def test_a_bigger_phrase_share_lowers_sigma_a_and_the_threshold() -> None:
    low, high = plan_budget(facts(share_phrases=0.1)), plan_budget(facts(share_phrases=0.6))
    assert high.sigma_A < low.sigma_A and high.tau_A <= low.tau_A
    assert high.sigma_C > low.sigma_C


def test_tokens_plan_is_unchanged_by_the_facts_fields() -> None:
    plan = plan_budget(table6(K_e=9, share_phrases=0.9))  # facts fields ignored for tokens
    assert plan.generate == "tokens"
    assert plan.rho_total == pytest.approx(2.2012, abs=5e-5)


def test_impossible_facts_plan_is_refused_with_a_reason() -> None:
    with pytest.raises(PlanError, match="nothing is left for the phrases"):
        plan_budget(facts(epsilon=0.1))


@pytest.mark.parametrize(
    "overrides",
    [dict(share_phrases=0.0), dict(share_phrases=1.0), dict(delta_phrases=1e-3),
     dict(delta_phrases=0.0), dict(K_e=-1), dict(K_s=-1), dict(R_f=0), dict(L=0),
     dict(rho_hist=-0.1), dict(share_roles=-0.1), dict(share_roles=0.7),
     dict(share_hist=1.0), dict(K=10), dict(generate="prose")],
)
def test_bad_facts_parameters_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(PlanError):
        plan_budget(facts(**overrides))


def test_facts_k_may_be_given_when_it_equals_k_s() -> None:
    assert plan_budget(facts(K=14, K_s=14)).sigma_h == plan_budget(facts(K_s=14)).sigma_h


# ---------------------------------------------------------------------- dpsynrag budget --generate
FACTS = ["budget", "--generate", "facts", "--epsilon", "10", "--delta", "1e-3", "--L", "2",
         "--rho-hist", "0.1", "--facts-items", "terms"]


def test_budget_facts_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FACTS, "--K-e", "3", "--share-phrases", "0.4", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    expected = plan_budget(facts("cks", K_e=3, share_phrases=0.4)).as_dict()  # the default
    assert shown.keys() == expected.keys()
    for name in ("rho_A", "sigma_A", "tau_A", "rho_C", "sigma_C", "delta_phrases"):
        assert shown[name] == expected[name]


def test_budget_facts_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FACTS, "--conversion", "cks"]) == 0
    out = capsys.readouterr().out
    plan = plan_budget(facts("cks"))
    for fragment in ("keyword histogram", "phrases", "cluster facts", f"τ_A={plan.tau_A}",
                     f"{plan.sigma_C:.4f}", "CKS", "delta_phrases"):
        assert fragment in out, fragment


def test_budget_plans_facts_by_default_with_the_build_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "--epsilon", "10", "--delta", "1e-3", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    # exactly the plan build-corpus makes of its own defaults (L 1, K_e 3, rho_hist a share of
    # the total, roles)
    from dpsynrag.pipeline.build import make_plan
    from dpsynrag.pipeline.config import make_config

    expected = make_plan(make_config(None, {})).as_dict()
    assert shown["generate"] == "facts" and shown["L"] == 1
    assert shown["ngram_lengths"] == [1, 2, 4, 8]  # the default reads no word list: n-grams
    for name in ("rho_hist", "rho_A", "sigma_A", "tau_A", "ngram_items", "ngram_thresholds",
                 "rho_C", "sigma_C"):
        assert shown[name] == expected[name]
    # a token-only option without --generate plans the token mode, as build-corpus builds it
    assert main(["budget", "--epsilon", "10", "--delta", "1e-3", "--K", "10", "--L", "5",
                 "--T", "70", "--eps-theta", "0.4", "--rho-hist", "0.1", "--rho-mean", "0.009",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["generate"] == "tokens"


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [([*FACTS, "--T", "70"], 2, "--T applies only to --generate tokens"),
     (["budget", *FACTS[3:7], "--K", "10", "--K-e", "2"], 2, "token-only and facts-only options"),
     ([*FACTS[:4], "0.1", *FACTS[5:]], 1, "nothing is left"),
     ([*FACTS, "--delta-phrases", "0.01"], 1, "--delta-phrases"),
     (["budget", "--generate", "tokens", "--epsilon", "10", "--delta", "1e-3", "--K", "10",
       "--L", "5", "--T", "70", "--eps-theta", "0.4", "--rho-hist", "0.1", "--rho-mean",
       "0.009", "--K-e", "3"], 2, "--K-e applies only to --generate facts")],
)
def test_budget_facts_refusals_are_one_line(args: list[str], code: int, fragment: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsynrag: error:") and fragment in lines[0]
    assert captured.out == ""


def test_budget_plans_the_token_writer(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15: --writer tokens takes --share-tokens of the rho after the histogram for
    L T (c/tau)^2 / 2; the rest is split as before; --T is read in this mode only."""
    assert main([*FACTS, "--writer", "tokens", "--T", "32", "--share-tokens", "0.25",
                 "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    rest = shown["rho_total"] - shown["rho_hist"]
    assert shown["writer"] == "tokens" and shown["T"] == 32
    assert math.isclose(shown["rho_tokens"], 0.25 * rest, rel_tol=1e-12)
    assert math.isclose(shown["rho_A"] + shown["rho_R"] + shown["rho_C"] + shown["rho_tokens"],
                        rest, rel_tol=1e-12)
    assert math.isclose(2 * 32 * shown["L"] * shown["rho_per_token"], 2 * shown["rho_tokens"],
                        rel_tol=1e-12)
    assert math.isclose(shown["c_over_tau"] ** 2 / 2, shown["rho_per_token"], rel_tol=1e-12)
    assert main([*FACTS, "--writer", "tokens", "--T", "32"]) == 0
    assert "token writer" in capsys.readouterr().out
    # the template writer's plan is unchanged by the new fields
    plain = plan_budget(facts("cks"))
    assert plain.writer == "template" and plain.rho_tokens == 0.0
    assert math.isclose(plain.rho_A + plain.rho_R + plain.rho_C, plain.rho_total - plain.rho_hist,
                        rel_tol=1e-12)
    assert main([*FACTS, "--writer", "tokens", "--share-phrases", "0.6", "--share-tokens",
                 "0.5"]) == 1
    assert "--share-tokens" in capsys.readouterr().err


@pytest.mark.parametrize("generate", ["facts", "tokens"])
def test_an_epsilon_above_the_sanity_bound_is_refused_unless_asked_for(generate: str) -> None:
    from dpsynrag.accounting.conversions import MAX_EPSILON

    request = (PlanRequest(epsilon=1e9, delta=1e-3, L=1, generate="facts")
               if generate == "facts" else table6(epsilon=1e9))
    with pytest.raises(PlanError, match=r"above 30.*--allow-large-epsilon"):
        plan_budget(request)
    plan_budget(dataclasses.replace(request, epsilon=MAX_EPSILON))  # the bound itself plans
    assert plan_budget(dataclasses.replace(request, allow_large_epsilon=True)).epsilon == 1e9
