"""Per-mechanism cross-check of our costs with Google's dp-accounting (issue 18).

Where dp-accounting has an event (Gaussian, Laplace, self-composition, composition) our rho is
compared with the one its RDP accountant gives, mechanism by mechanism and for whole plans;
where it has none (bounded-range exponential mechanisms, LimitedDomain, the sparse vector,
Koga's composition, approximate deltas) the event maps to None and the cost is tested against
the formula (tests/test_mechanisms.py).
"""

from __future__ import annotations

import itertools
import math

import pytest
from dp_accounting import dp_event

from dpsynrag.accounting.composition import ParallelGroup, Repeated, Sequential, compose
from dpsynrag.accounting.dp_accounting_check import (
    cross_check,
    dp_accounting_rho,
    epsilons,
    to_dp_event,
)
from dpsynrag.accounting.mechanisms import (
    DiscreteGaussian,
    DpComposition,
    Exponential,
    ExponentialThreshold,
    Gaussian,
    Laplace,
    LimitedDomain,
    PartitionSelection,
    PtrGaussian,
    SparseVectorEpoch,
    TokenSoftmax,
)
from dpsynrag.accounting.partition_selection import selection_threshold
from dpsynrag.accounting.planner import PlanRequest, plan_budget

SIGMAS = [0.5, 1.0, 2.1469, 5.0, 7.0710678118654755, 40.0]


@pytest.mark.parametrize(("sigma", "sensitivity"),
                         list(itertools.product(SIGMAS, [1.0, math.sqrt(2), math.sqrt(10)])))
def test_gaussians_cost_what_dp_accounting_says(sigma: float, sensitivity: float) -> None:
    for event in (DiscreteGaussian(sigma=sigma, l2_sensitivity=sensitivity),
                  Gaussian(sigma=sigma, l2_sensitivity=sensitivity)):
        mapped = to_dp_event(event)
        assert mapped == dp_event.GaussianDpEvent(sigma / sensitivity)
        assert dp_accounting_rho(mapped) == pytest.approx(event.cost.rho, rel=1e-12)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_ptr_and_partition_selection_rho_match_dp_accounting(sigma: float) -> None:
    ptr = PtrGaussian(sigma=sigma, delta=1e-5)
    assert dp_accounting_rho(to_dp_event(ptr)) == pytest.approx(ptr.cost.rho, rel=1e-12)
    for items in (1, 2, 14):
        threshold = selection_threshold(sigma, items, 1e-4)
        selection = PartitionSelection(sigma=sigma, max_items=items, threshold=threshold,
                                       delta=1e-4)
        assert dp_accounting_rho(to_dp_event(selection)) == pytest.approx(selection.cost.rho,
                                                                          rel=1e-12)


@pytest.mark.parametrize(("scale", "sensitivity"), [(0.5, 1.0), (2.0, 1.0), (4.0, 2.0),
                                                    (10.0, 1.0)])
def test_laplace_pure_dp_bound_lies_above_dp_accountings_exact_curve(scale: float,
                                                                     sensitivity: float) -> None:
    event = Laplace(scale=scale, l1_sensitivity=sensitivity)
    theirs = dp_accounting_rho(to_dp_event(event))
    assert theirs <= event.cost.rho
    assert theirs >= 0.5 * event.cost.rho  # and not loose by more than a factor of two here


def test_mechanisms_without_a_dp_accounting_event_map_to_none() -> None:
    for event in (ExponentialThreshold(epsilon=0.4), Exponential(epsilon=0.5),
                  TokenSoftmax(clip=0.5, temperature=0.4, tokens=3),
                  LimitedDomain(epsilon=1.0, delta=1e-5), SparseVectorEpoch(epsilon=0.5),
                  DpComposition(epsilon=5.0, delta=1e-4, token_epsilon=1.0, token_delta=1e-5,
                                steps=5)):
        assert to_dp_event(event) is None
        [check] = cross_check(event)
        assert check.dp_accounting_rho is None and check.agrees()


def test_composition_nodes_map_to_self_composed_and_composed_events() -> None:
    gauss = DiscreteGaussian(sigma=3.0, l2_sensitivity=1.0)
    wide = DiscreteGaussian(sigma=1.0, l2_sensitivity=1.0)
    assert to_dp_event(Repeated(gauss, 4)) == dp_event.SelfComposedDpEvent(
        dp_event.GaussianDpEvent(3.0), 4)
    group = ParallelGroup(2, (gauss, wide, Repeated(gauss, 3)))
    # the rule's L most expensive partitions, composed: wide (0.5) and 3 x gauss (1/6)
    assert dp_accounting_rho(to_dp_event(group)) == pytest.approx(compose(group).rho, rel=1e-12)
    assert to_dp_event(Sequential((gauss, TokenSoftmax(clip=0.5, temperature=1.0)))) is None


def _facts_plan(epsilon: float, L: int, writer: str = "template"):  # type: ignore[no-untyped-def]
    return plan_budget(PlanRequest(epsilon=epsilon, delta=1e-3, L=L, rho_hist=0.1,
                                   generate="facts", writer=writer, T=16))


@pytest.mark.parametrize(("epsilon", "L"), [(2.0, 1), (3.0, 1), (10.0, 2), (10.0, 5)])
def test_facts_plan_per_mechanism_and_in_total(epsilon: float, L: int) -> None:
    """A facts plan is all Gaussians: every mechanism's rho and the plan's epsilon agree
    (the keyword histogram, the terms, their role histogram, L cluster histograms)."""
    plan = _facts_plan(epsilon, L)
    events = plan.events()
    checks = cross_check(events)
    assert [c.mechanism for c in checks] == ["discrete_gaussian", "partition_selection",
                                             "discrete_gaussian",
                                             *["discrete_gaussian"] * L]
    for check in checks:
        assert check.dp_accounting_rho == pytest.approx(check.rho, rel=1e-12)
    ours, theirs = epsilons(events, plan.delta_conversion) or (math.nan, math.nan)
    assert theirs == pytest.approx(ours, rel=1e-9)
    assert compose(events).rho == pytest.approx(plan.rho_total, rel=1e-12)


@pytest.mark.parametrize(("epsilon", "L", "T"), [(10.0, 5, 70), (10.0, 2, 32), (3.0, 1, 8)])
def test_token_plan_per_mechanism(epsilon: float, L: int, T: int) -> None:
    """The token plan: the Gaussians agree with dp-accounting; the threshold and the token
    draws (bounded-range exponential mechanisms) have no event there."""
    plan = plan_budget(PlanRequest(epsilon=epsilon, delta=1e-3, K=10, L=L, T=T, eps_theta=0.4,
                                   rho_hist=0.1, rho_mean=0.009))
    events = plan.events(0.5)
    for check in cross_check(events):
        if check.mechanism == "discrete_gaussian":
            assert check.dp_accounting_rho == pytest.approx(check.rho, rel=1e-12)
        else:
            assert check.mechanism in ("exponential_threshold", "token_softmax")
            assert check.dp_accounting_rho is None
    assert epsilons(events, 1e-3) is None
