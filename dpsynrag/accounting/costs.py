"""zCDP cost of each mechanism, as a function of its public parameters alone.

The ledger never trusts a caller's rho: it recomputes it here from the recorded parameters, and
``dpsynrag verify`` re-derives it the same way. One entry per mechanism name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
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
}


MECHANISM_SENSITIVITY: Mapping[str, tuple[str, Callable[[Mapping[str, Any]], float]]] = {
    "discrete_gaussian": ("l2", lambda p: float(p["l2_sensitivity"])),
    "gaussian": ("l2", lambda p: float(p["l2_sensitivity"])),
    "exponential_threshold": ("count", lambda p: 1.0),
    "token_softmax": ("linf", lambda p: float(p["clip"])),
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
