"""Composition of mechanisms as immutable trees, and the one function that costs a tree.

A build, a query or a ledger is described as a tree of ``mechanisms.Mechanism`` leaves and
three kinds of nodes (docs/mechanisms.md, section 8):

* ``Repeated(mechanism, count)``: ``count`` adaptive runs of one mechanism; its cost is
  ``count`` times the mechanism's (each of rho, delta and the (epsilon, delta) currency);
* ``Sequential(children)``: adaptive sequential composition; costs add;
* ``ParallelGroup(max_overlap=L, partitions)``: overlapping parallel composition, where every
  privacy unit affects at most L of the partitions (its memberships are a function of its own
  document and of released values). The group costs the sum of its L most expensive
  partitions (at most L times the largest); approximate deltas (and the (epsilon, delta)
  currency) compose by the same rule, each on its own.

``compose`` is the only place where these rules are coded: the ledger's totals, the
certificate's composition and ``dpsynrag verify`` all call it. Sums are ``math.fsum`` (exactly
rounded, independent of the order in which releases were recorded).

``records`` flattens a tree into the ``{"mechanism", "params", "count"}`` list of the corpus
ledger (``costs.spend_of``), with L copies of a parallel group's one (repeated) partition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from dpsynrag.accounting.mechanisms import Cost, Mechanism


@dataclass(frozen=True)
class Repeated:
    """``count`` adaptive runs of ``mechanism`` (dp-accounting's ``SelfComposedDpEvent``)."""

    mechanism: Mechanism
    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"mechanism {self.mechanism.name!r}: 'count' must be a positive "
                             f"integer, got {self.count!r}")


@dataclass(frozen=True)
class Sequential:
    """Adaptive sequential composition of ``children`` (dp-accounting's ``ComposedDpEvent``)."""

    children: tuple[Node, ...]


@dataclass(frozen=True)
class ParallelGroup:
    """Overlapping parallel composition: each privacy unit affects at most ``max_overlap`` of
    ``partitions``; ``name`` is the group's public name (e.g. ``"clusters"``).

    dp-accounting has no event for it; ``dp_accounting_check`` composes the L most expensive
    partitions sequentially, which is what the rule charges.
    """

    max_overlap: int
    partitions: tuple[Node, ...]
    name: str = ""

    def __post_init__(self) -> None:
        overlap = self.max_overlap
        if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 1:
            raise ValueError("max_overlap must be a positive integer")


Node: TypeAlias = Mechanism | Repeated | Sequential | ParallelGroup


def _sum(costs: Iterable[Cost]) -> Cost:
    costs = list(costs)
    return Cost(math.fsum(c.rho for c in costs), math.fsum(c.delta for c in costs),
                math.fsum(c.dp_epsilon for c in costs), math.fsum(c.dp_delta for c in costs))


def _top(values: Sequence[float], overlap: int) -> float:
    """The sum of the ``overlap`` largest ``values``: the overlapping parallel rule."""
    return math.fsum(sorted(values, reverse=True)[:overlap])


def compose(node: Node) -> Cost:
    """The cost of ``node`` by the rules of the module docstring."""
    if isinstance(node, Mechanism):
        return node.cost
    if isinstance(node, Repeated):
        cost, n = node.mechanism.cost, node.count
        return Cost(n * cost.rho, n * cost.delta, n * cost.dp_epsilon, n * cost.dp_delta)
    if isinstance(node, Sequential):
        return _sum(compose(child) for child in node.children)
    if isinstance(node, ParallelGroup):
        parts = [compose(part) for part in node.partitions]
        overlap = node.max_overlap
        return Cost(_top([c.rho for c in parts], overlap), _top([c.delta for c in parts], overlap),
                    _top([c.dp_epsilon for c in parts], overlap),
                    _top([c.dp_delta for c in parts], overlap))
    raise TypeError(f"not a mechanism or a composition node: {type(node).__name__}")


def leaves(node: Node) -> list[Repeated]:
    """Every mechanism of ``node`` with its count, in order (a group's partitions in turn)."""
    if isinstance(node, Mechanism):
        return [Repeated(node, 1)]
    if isinstance(node, Repeated):
        return [node]
    children = node.children if isinstance(node, Sequential) else node.partitions
    return [leaf for child in children for leaf in leaves(child)]


def records(node: Node) -> list[dict[str, Any]]:
    """``node`` as ``[{"mechanism", "params", "count"}]`` items whose sequential sum costs the
    same as ``compose(node)``.

    A parallel group must hold identical partitions (a plan's "every cluster alike"): it is
    written as min(L, partitions) copies of one partition, i.e. counts multiplied by that.
    ``ValueError`` for a group with different partitions (its top-L sum is not a list).
    """
    if isinstance(node, Mechanism):
        return [{"mechanism": node.name, "params": node.params(), "count": 1}]
    if isinstance(node, Repeated):
        return [{"mechanism": node.mechanism.name, "params": node.mechanism.params(),
                 "count": node.count}]
    if isinstance(node, Sequential):
        return [item for child in node.children for item in records(child)]
    if not node.partitions:
        return []
    first = node.partitions[0]
    if any(part != first for part in node.partitions):
        raise ValueError(f"parallel group {node.name!r}: only a group of identical partitions "
                         "can be written as a list of mechanisms")
    copies = min(node.max_overlap, len(node.partitions))
    return [{**item, "count": item["count"] * copies} for item in records(first)]
