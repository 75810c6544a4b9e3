"""zCDP cost of a recorded release ``(mechanism name, params)``, from its public parameters alone.

The ledger never trusts a caller's rho: it recomputes it from the recorded parameters, and
``dpsynrag verify`` re-derives it the same way. Each mechanism is a typed value of
``mechanisms`` (its formula in its docstring); this module reads records into those values
and composes lists of them with ``composition.compose``.

Mechanisms that are only (epsilon, delta)-DP (LimitedDomain, PTR, partition selection) are
accounted as *approximate* zCDP (Bun & Steinke 2016, Def. 8.1): ``mechanism_rho`` gives their
rho and ``mechanism_delta`` their approximate delta (0 for every pure/zCDP mechanism).
Approximate zCDP composes by adding rho and adding delta; delta-approximately rho-zCDP implies
(epsilon(rho, delta'), delta + delta')-DP for every delta' > 0 (see ``conversions``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpsynrag.accounting.composition import Repeated, Sequential, compose
from dpsynrag.accounting.mechanisms import (
    Cost,
    Mechanism,
    PartitionSelection,
    approximate_delta,
    exponential_rho,
    from_record,
    gaussian_rho,
    pure_dp_rho,
    token_rho,
)

__all__ = [
    "approximate_delta",
    "dp_spend_of",
    "exponential_rho",
    "gaussian_rho",
    "mechanism_delta",
    "mechanism_dp",
    "mechanism_rho",
    "mechanism_sensitivity",
    "partition_selection_delta",
    "partition_selection_rho",
    "pure_dp_rho",
    "sequential_of",
    "spend_of",
    "token_rho",
]


def mechanism_rho(mechanism: str, params: Mapping[str, Any]) -> float:
    """The zCDP cost of one recorded release, from its mechanism name and parameters."""
    return from_record(mechanism, params).cost.rho


def mechanism_delta(mechanism: str, params: Mapping[str, Any]) -> float:
    """The approximate delta of one recorded release (0.0 for a pure or zCDP mechanism)."""
    return from_record(mechanism, params).cost.delta


def mechanism_dp(mechanism: str, params: Mapping[str, Any]) -> tuple[float, float]:
    """(epsilon, delta) charged in DP currency by one release ((0, 0) for zCDP mechanisms)."""
    cost = from_record(mechanism, params).cost
    return cost.dp_epsilon, cost.dp_delta


def mechanism_sensitivity(mechanism: str, params: Mapping[str, Any]) -> tuple[str, float]:
    """The (norm, sensitivity) a release of ``mechanism`` with ``params`` is calibrated to."""
    event = from_record(mechanism, params)
    return event.norm, event.sensitivity()


def partition_selection_rho(p: Mapping[str, Any]) -> float:
    """Partition selection: rho = max_items / (2 sigma^2) (discrete Gaussian, sqrt(max_items))."""
    return PartitionSelection.from_params(p).cost.rho


def partition_selection_delta(p: Mapping[str, Any]) -> float:
    """Partition selection's approximate delta, max_items * P(Z >= threshold - 1), rounded up;
    ``ValueError`` if the recorded ``delta`` is smaller (see ``mechanisms.PartitionSelection``)."""
    return PartitionSelection.from_params(p).cost.delta


_SPEND_KEYS = frozenset({"mechanism", "params", "count"})


def sequential_of(mechanisms: Sequence[Mapping[str, Any]]) -> Sequential:
    """``{"mechanism", "params", "count" (default 1)}`` items as a sequential composition.

    An item carrying anything else (a ``rho``, say) is refused, so a caller cannot state its
    own cost.
    """
    if isinstance(mechanisms, str | bytes | Mapping):
        raise ValueError("mechanisms must be a sequence of {mechanism, params, count} mappings")
    children: list[Repeated] = []
    for item in mechanisms:
        if not isinstance(item, Mapping):
            raise ValueError(f"each mechanism must be a mapping, got {type(item).__name__}")
        extra = sorted(set(item) - _SPEND_KEYS)
        if extra:
            raise ValueError(f"unexpected field(s) {extra} in a mechanism; costs are recomputed "
                             "from 'mechanism' and 'params' only")
        name, params = item.get("mechanism"), item.get("params", {})
        if not isinstance(name, str):
            raise ValueError("each mechanism needs a 'mechanism' name")
        if not isinstance(params, Mapping):
            raise ValueError(f"mechanism {name!r}: 'params' must be a mapping")
        event: Mechanism = from_record(name, params)
        children.append(Repeated(event, item.get("count", 1)))
    return Sequential(tuple(children))


def _spend(mechanisms: Sequence[Mapping[str, Any]]) -> Cost:
    return compose(sequential_of(mechanisms))


def spend_of(mechanisms: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """Summed (rho, approximate delta) of ``{"mechanism", "params", "count"}`` items."""
    cost = _spend(mechanisms)
    return cost.rho, cost.delta


def dp_spend_of(mechanisms: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """Summed (epsilon, delta) of the items charged in DP currency (basic composition)."""
    cost = _spend(mechanisms)
    return cost.dp_epsilon, cost.dp_delta
