"""Cross-check of each mechanism's rho with Google's dp-accounting, mechanism by mechanism.

``to_dp_event`` maps a mechanism (or a composition tree) to dp-accounting's ``DpEvent`` where
dp-accounting has one:

* ``Gaussian``, ``DiscreteGaussian``, ``PartitionSelection`` (its Gaussian part), and
  ``PtrGaussian`` (noise 2 sigma on sensitivity 2) -> ``GaussianDpEvent(sigma / Delta_2)``.
  dp-accounting has no *discrete* Gaussian event: the continuous one with the same ratio has
  the same rho = Delta_2^2 / (2 sigma^2);
* ``Laplace`` -> ``LaplaceDpEvent(b / Delta_1)`` (dp-accounting's exact Renyi curve, which lies
  below our pure-DP bound alpha * epsilon^2 / 2);
* ``Repeated`` -> ``SelfComposedDpEvent``, ``Sequential`` -> ``ComposedDpEvent``;
* ``ParallelGroup``: dp-accounting has no overlapping parallel composition; the group maps to
  the ``ComposedDpEvent`` of its L most expensive partitions, which is what the rule charges.

dp-accounting has no event for the exponential mechanism as bounded range (``Exponential``,
``ExponentialThreshold``, ``TokenSoftmax``: rho = epsilon^2 / 8), for LimitedDomain, the
sparse-vector epoch, Koga's (epsilon, delta) composition, or for any approximate delta: those
map to None, and the tests check them against their formulas instead.

``dp_accounting_rho`` reads the zCDP rho of an event off dp-accounting's ``RdpAccountant``:
the largest RDP(alpha) / alpha over the orders 1 + 10^(e/100), e = -300..300.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpsynrag.accounting.composition import (
    Node,
    ParallelGroup,
    Repeated,
    Sequential,
    compose,
    leaves,
)
from dpsynrag.accounting.mechanisms import (
    DiscreteGaussian,
    Gaussian,
    Laplace,
    Mechanism,
    PartitionSelection,
    PtrGaussian,
)

ORDERS = tuple(float(1.0 + 10.0 ** (e / 100.0)) for e in range(-300, 301))


def _mechanism_event(mechanism: Mechanism) -> Any | None:
    from dp_accounting import dp_event

    if isinstance(mechanism, Gaussian | DiscreteGaussian):
        if mechanism.l2_sensitivity == 0:
            return dp_event.NoOpDpEvent()
        return dp_event.GaussianDpEvent(float(mechanism.sigma) / mechanism.l2_sensitivity)
    if isinstance(mechanism, PtrGaussian):
        return dp_event.GaussianDpEvent(2.0 * float(mechanism.sigma) / 2.0)
    if isinstance(mechanism, PartitionSelection):
        return dp_event.GaussianDpEvent(float(mechanism.sigma) / mechanism.sensitivity())
    if isinstance(mechanism, Laplace):
        return dp_event.LaplaceDpEvent(float(mechanism.scale) / mechanism.l1_sensitivity)
    return None


def to_dp_event(node: Node) -> Any | None:
    """dp-accounting's ``DpEvent`` for ``node``, or None where it has none (module doc)."""
    from dp_accounting import dp_event

    if isinstance(node, Mechanism):
        return _mechanism_event(node)
    if isinstance(node, Repeated):
        inner = _mechanism_event(node.mechanism)
        return None if inner is None else dp_event.SelfComposedDpEvent(inner, node.count)
    if isinstance(node, Sequential):
        children = [to_dp_event(child) for child in node.children]
        return None if any(c is None for c in children) else dp_event.ComposedDpEvent(children)
    if isinstance(node, ParallelGroup):
        ranked = sorted(node.partitions, key=lambda part: compose(part).rho, reverse=True)
        return to_dp_event(Sequential(tuple(ranked[:node.max_overlap])))
    raise TypeError(f"not a mechanism or a composition node: {type(node).__name__}")


def dp_accounting_rho(event: Any) -> float:
    """The zCDP rho dp-accounting's RDP accountant gives ``event``: max RDP(alpha) / alpha."""
    from dp_accounting.rdp import rdp_privacy_accountant

    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(ORDERS))
    accountant.compose(event)
    return float(max(accountant.rdp / accountant.orders))


@dataclass(frozen=True)
class CrossCheck:
    """One mechanism (with its count) of a tree: our rho and dp-accounting's (None: no event)."""

    mechanism: str
    count: int
    rho: float
    dp_accounting_rho: float | None

    def agrees(self, rel_tol: float = 1e-9) -> bool:
        """dp-accounting's rho equals ours (a Gaussian) or lies below it (Laplace: our
        pure-DP bound); True when dp-accounting has no event for the mechanism."""
        theirs = self.dp_accounting_rho
        return theirs is None or theirs <= self.rho * (1 + rel_tol) + 1e-300


def cross_check(node: Node) -> list[CrossCheck]:
    """Every mechanism of ``node`` (``composition.leaves``), costed by us and by dp-accounting."""
    checks = []
    for leaf in leaves(node):
        event = to_dp_event(leaf)
        theirs = None if event is None else dp_accounting_rho(event)
        checks.append(CrossCheck(leaf.mechanism.name, leaf.count, compose(leaf).rho, theirs))
    return checks


def epsilons(node: Node, delta: float) -> tuple[float, float] | None:
    """(epsilon of ``compose(node).rho`` through dp-accounting's ``ZCDpEvent``, epsilon of
    ``to_dp_event(node)``) at ``delta``, on the same orders; None if some mechanism has no
    event. Equal for Gaussian-only trees."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    event = to_dp_event(node)
    if event is None:
        return None
    ours = rdp_privacy_accountant.RdpAccountant(orders=list(ORDERS))
    ours.compose(dp_event.ZCDpEvent(compose(node).rho))
    theirs = rdp_privacy_accountant.RdpAccountant(orders=list(ORDERS))
    theirs.compose(event)
    return float(ours.get_epsilon(delta)), float(theirs.get_epsilon(delta))
