"""A frozen copy of dpsynrag/accounting/costs.py as of a622f4a (before issue 18).

Kept only so that tests can compare the typed mechanisms of ``accounting.mechanisms`` with the
lookup tables they replaced, value for value. Never import it from the package.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def gaussian_rho(l2_sensitivity: float, sigma: float) -> float:
    """Gaussian or discrete Gaussian noise: rho = Delta_2^2 / (2 sigma^2)."""
    _positive(sigma, "sigma")
    _non_negative(l2_sensitivity, "l2_sensitivity")
    return l2_sensitivity**2 / (2.0 * sigma**2)


def exponential_rho(epsilon: float) -> float:
    """Exponential mechanism (bounded range): rho = epsilon^2 / 8 (Cesar & Rogers 2021)."""
    _positive(epsilon, "epsilon")
    return epsilon**2 / 8.0


def token_rho(clip: float, temperature: float) -> float:
    """One softmax draw over summed rows in [-c, c]: epsilon = 2c/tau, rho = (c/tau)^2 / 2."""
    _positive(clip, "clip")
    _positive(temperature, "temperature")
    return (clip / temperature) ** 2 / 2.0


def pure_dp_rho(epsilon: float) -> float:
    """Pure epsilon-DP implies rho = epsilon^2 / 2 zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    _positive(epsilon, "epsilon")
    return epsilon**2 / 2.0


def approximate_delta(delta: float) -> float:
    """The approximate delta of an (epsilon, delta)-DP mechanism: delta itself, in (0, 1)."""
    if not (isinstance(delta, int | float) and not isinstance(delta, bool)
            and math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")
    return float(delta)


def _with_delta(rho: float, delta: float) -> float:
    """``rho``, once the approximate ``delta`` of the same mechanism is validated."""
    approximate_delta(delta)
    return rho


def _positive(value: float, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def _non_negative(value: float, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")


MECHANISM_COSTS: Mapping[str, Callable[..., float]] = {
    "discrete_gaussian": lambda p: gaussian_rho(p["l2_sensitivity"], p["sigma"]),
    "gaussian": lambda p: gaussian_rho(p["l2_sensitivity"], p["sigma"]),
    "exponential_threshold": lambda p: exponential_rho(p["epsilon"]),
    "token_softmax": lambda p: p.get("tokens", 1) * token_rho(p["clip"], p["temperature"]),
    # Query-time mechanisms (docs/mechanisms.md, sections 1, 12, 13); see MECHANISM_DELTAS.
    # Exponential mechanism, epsilon-DP and epsilon-bounded-range: rho = eps^2/8 (Cesar & Rogers
    # 2021; docs/mechanisms.md section 1).
    "exponential": lambda p: exponential_rho(p["epsilon"]),
    # LimitedDomain, (eps, delta)-DP (Durfee & Rogers 2019): delta-approximately eps^2/2-zCDP
    # (Bun & Steinke 2016, Prop. 1.4 and Def. 8.1; docs/mechanisms.md section 13).
    "limited_domain": lambda p: _with_delta(pure_dp_rho(p["epsilon"]), p["delta"]),
    # One sparse-vector epoch (AboveThreshold up to one crossing), eps-DP (Dwork & Roth 2014,
    # Thm 3.23): rho = eps^2/2 (Bun & Steinke 2016, Prop. 1.4; docs/mechanisms.md section 13).
    "sparse_vector_epoch": lambda p: pure_dp_rho(p["epsilon"]),
    # PTR test: statistic of l2 sensitivity 2 plus N(0, (2 sigma)^2): rho = 2^2/(2 (2 sigma)^2)
    # = 1/(2 sigma^2), delta-approximate (Zhu & Wang 2022 as used by DP-KSA;
    # docs/mechanisms.md section 12).
    "ptr_gaussian": lambda p: _with_delta(gaussian_rho(2.0, 2.0 * p["sigma"]), p["delta"]),
    # Koga et al.'s per-query composition, charged in (epsilon, delta) currency, not zCDP:
    # see MECHANISM_DP. Its rho is 0; the ledger adds its epsilon after converting the rest.
    "dp_composition": lambda p: _check_dp_composition(p) * 0.0,
    # DP partition selection (open-vocabulary phrases): discrete Gaussian counts of l2
    # sensitivity sqrt(max_items), rho = max_items/(2 sigma^2), delta-approximate (see
    # MECHANISM_DELTAS and accounting.partition_selection).
    "partition_selection": lambda p: _with_delta(partition_selection_rho(p),
                                                 partition_selection_delta(p)),
}


MECHANISM_DELTAS: Mapping[str, Callable[[Mapping[str, Any]], float]] = {
    # LimitedDomain: its (eps, delta)-DP delta (Bun & Steinke 2016, Def. 8.1).
    "limited_domain": lambda p: approximate_delta(p["delta"]),
    # PTR: the probability delta that the test passes on an unstable input
    # (docs/mechanisms.md section 12).
    "ptr_gaussian": lambda p: approximate_delta(p["delta"]),
    # Partition selection: max_items * P(Z >= threshold - 1), re-derived from sigma, max_items
    # and threshold (never the recorded delta, which must not be smaller).
    "partition_selection": lambda p: partition_selection_delta(p),
}


def partition_selection_rho(p: Mapping[str, Any]) -> float:
    """Partition selection: rho = max_items / (2 sigma^2) (discrete Gaussian, sqrt(max_items))."""
    sigma, max_items = p["sigma"], p["max_items"]
    _positive(sigma, "sigma")
    if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
        raise ValueError(f"max_items must be a positive integer, got {max_items!r}")
    return max_items / (2.0 * float(sigma) ** 2)


def partition_selection_delta(p: Mapping[str, Any]) -> float:
    """Partition selection's approximate delta, max_items * P(Z >= threshold - 1), rounded up.

    Re-derived from ``sigma``, ``max_items`` and ``threshold``; ``ValueError`` if the
    threshold is not an integer >= 2 or the recorded ``delta`` is smaller than the re-derived
    one (an understated delta).
    """
    from dpsynrag.accounting.partition_selection import (
        partition_selection_delta as derive,
    )

    partition_selection_rho(p)  # validates sigma and max_items
    threshold = p["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2:
        raise ValueError(f"threshold must be an integer >= 2, got {threshold!r}")
    recorded = approximate_delta(p["delta"])
    derived = derive(float(p["sigma"]), p["max_items"], threshold)
    if recorded < derived:
        raise ValueError(f"partition_selection: the recorded delta {recorded!r} is smaller than "
                         f"max_items * P(Z >= threshold - 1) = {derived!r}")
    return derived


def _check_dp_composition(p: Mapping[str, Any]) -> float:
    """Validate a ``dp_composition`` charge; returns 1.0.

    ``steps`` (epsilon_tok, delta_tok)-DP private tokens must fit in the charged (epsilon,
    delta) by Koga et al.'s rule (the better of sequential and advanced composition).
    """
    from dpsynrag.accounting.calibration import koga_max_steps

    epsilon, delta = float(p["epsilon"]), float(p["delta"])
    token_epsilon, token_delta = float(p["token_epsilon"]), float(p["token_delta"])
    steps = p["steps"]
    _positive(epsilon, "epsilon")
    _positive(token_epsilon, "token_epsilon")
    approximate_delta(delta)
    approximate_delta(token_delta)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if koga_max_steps(token_epsilon, token_delta, epsilon, delta) < steps:
        raise ValueError(f"{steps} steps of ({token_epsilon:g}, {token_delta:g})-DP do not fit "
                         f"in ({epsilon:g}, {delta:g})-DP")
    return 1.0


# Mechanisms charged in (epsilon, delta)-DP currency: composed with the rest by basic
# composition (the zCDP part is converted to (eps', delta') first, then epsilons and deltas add).
MECHANISM_DP: Mapping[str, Callable[[Mapping[str, Any]], tuple[float, float]]] = {
    "dp_composition": lambda p: (float(p["epsilon"]), float(p["delta"])),
}


def mechanism_dp(mechanism: str, params: Mapping[str, Any]) -> tuple[float, float]:
    """(epsilon, delta) charged in DP currency by one release ((0, 0) for zCDP mechanisms)."""
    mechanism_rho(mechanism, params)  # validates the name and the parameters
    cost = MECHANISM_DP.get(mechanism)
    return (0.0, 0.0) if cost is None else cost(params)


def dp_spend_of(mechanisms: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """Summed (epsilon, delta) of the items charged in DP currency (basic composition)."""
    spend_of(mechanisms)  # validates every item
    epsilon = delta = 0.0
    for item in mechanisms:
        e, d = mechanism_dp(item["mechanism"], item.get("params", {}))
        epsilon += item.get("count", 1) * e
        delta += item.get("count", 1) * d
    return epsilon, delta


MECHANISM_SENSITIVITY: Mapping[str, tuple[str, Callable[[Mapping[str, Any]], float]]] = {
    "discrete_gaussian": ("l2", lambda p: float(p["l2_sensitivity"])),
    "gaussian": ("l2", lambda p: float(p["l2_sensitivity"])),
    "exponential_threshold": ("count", lambda p: 1.0),
    "token_softmax": ("linf", lambda p: float(p["clip"])),
    "exponential": ("count", lambda p: 1.0),
    "limited_domain": ("count", lambda p: 1.0),  # a vote count moves by at most 1
    "sparse_vector_epoch": ("count", lambda p: 1.0),  # each query has sensitivity 1
    "ptr_gaussian": ("l2", lambda p: 2.0),  # the tested gap statistic has sensitivity 2
    "dp_composition": ("count", lambda p: 1.0),  # one vote changes per neighbour
    # each unit adds 1 to at most max_items phrase counts
    "partition_selection": ("l2", lambda p: math.sqrt(p["max_items"])),
}


def mechanism_sensitivity(mechanism: str, params: Mapping[str, Any]) -> tuple[str, float]:
    """The (norm, sensitivity) a release of ``mechanism`` with ``params`` is calibrated to."""
    mechanism_rho(mechanism, params)  # validates the name and the parameters
    norm, sensitivity = MECHANISM_SENSITIVITY[mechanism]
    return norm, sensitivity(params)


def mechanism_rho(mechanism: str, params: Mapping[str, Any]) -> float:
    """The zCDP cost of one recorded release, from its mechanism name and parameters."""
    try:
        cost = MECHANISM_COSTS[mechanism]
    except KeyError:
        known = sorted(MECHANISM_COSTS)
        raise ValueError(f"unknown mechanism {mechanism!r}; known: {known}") from None
    try:
        return float(cost(params))
    except KeyError as missing:
        raise ValueError(f"mechanism {mechanism!r} needs parameter {missing}") from None


def mechanism_delta(mechanism: str, params: Mapping[str, Any]) -> float:
    """The approximate delta of one recorded release (0.0 for a pure or zCDP mechanism)."""
    mechanism_rho(mechanism, params)  # validates the name and the parameters
    delta = MECHANISM_DELTAS.get(mechanism)
    return 0.0 if delta is None else float(delta(params))


_SPEND_KEYS = frozenset({"mechanism", "params", "count"})


def spend_of(mechanisms: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """Summed (rho, approximate delta) of ``{"mechanism", "params", "count" (default 1)}`` items.

    Costs are recomputed from each mechanism's parameters; an item carrying anything else (a
    ``rho``, say) is refused, so a caller cannot state its own cost.
    """
    if isinstance(mechanisms, str | bytes | Mapping):
        raise ValueError("mechanisms must be a sequence of {mechanism, params, count} mappings")
    rho = delta = 0.0
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
        count = item.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"mechanism {name!r}: 'count' must be a positive integer, "
                             f"got {count!r}")
        rho += count * mechanism_rho(name, params)
        delta += count * mechanism_delta(name, params)
    return rho, delta


# ---------------------------------------------------------------------- the old composition rule
# As coded (three times) before issue 18: ledger.py summed the L most expensive partitions with
# ``sum``, certificate.py with ``math.fsum``.
def ledger_top_sum(values: Sequence[float], overlap: int) -> float:
    """accounting/ledger.py ``Ledger._total_of`` / ``total_delta`` per group, as of a622f4a."""
    return sum(sorted(values, reverse=True)[:overlap])


def certificate_top_sum(values: Sequence[float], overlap: int) -> float:
    """accounting/certificate.py ``_top_sum``, as of a622f4a."""
    return math.fsum(sorted(values, reverse=True)[:overlap])


# ---------------------------------------------------------------------- the old build dicts
def corpus_ledger_mechanisms(config: Any, plan: Any) -> list[dict[str, Any]]:
    """pipeline/build.py ``corpus_ledger_mechanisms`` as of a622f4a (the second shape)."""
    if config.generate == "facts":
        return [
            {"mechanism": "discrete_gaussian",
             "params": {"sigma": plan.sigma_h, "l2_sensitivity": math.sqrt(plan.K_s)},
             "count": 1},
            {"mechanism": "partition_selection",
             "params": {"sigma": plan.sigma_A, "max_items": plan.K_e,
                        "threshold": plan.tau_A, "delta": plan.delta_phrases}, "count": 1},
            # added since a622f4a: the role histogram of the released terms (one release)
            *([{"mechanism": "discrete_gaussian",
                "params": {"sigma": plan.sigma_R, "l2_sensitivity": math.sqrt(plan.K_e)},
                "count": 1}] if plan.share_roles else []),
            {"mechanism": "discrete_gaussian",
             "params": {"sigma": plan.sigma_C,
                        "l2_sensitivity": math.sqrt(plan.K_e + plan.K_s)},
             "count": config.L},
            *([{"mechanism": "token_softmax",
                "params": {"clip": config.clip, "temperature": config.clip / plan.c_over_tau,
                           "tokens": config.T}, "count": config.L}]
              if config.facts_writer_tokens else [])]
    temperature = config.clip / plan.c_over_tau
    mechanisms: list[dict[str, Any]] = [
        {"mechanism": "discrete_gaussian",
         "params": {"sigma": plan.sigma_h, "l2_sensitivity": math.sqrt(config.K)}, "count": 1}]
    if not config.no_retrieval:
        mechanisms += [
            {"mechanism": "discrete_gaussian",
             "params": {"sigma": plan.sigma_mu, "l2_sensitivity": 1.0}, "count": config.L},
            {"mechanism": "exponential_threshold", "params": {"epsilon": config.eps_theta},
             "count": config.L}]
    mechanisms.append({"mechanism": "token_softmax",
                       "params": {"clip": config.clip, "temperature": temperature,
                                  "tokens": config.T}, "count": config.L})
    return mechanisms
