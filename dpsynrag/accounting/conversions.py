"""Converting rho-zCDP to (epsilon, delta)-DP and back. Every epsilon names its conversion.

* ``bun-steinke``: epsilon = rho + 2 sqrt(rho ln(1/delta)) (Bun & Steinke 2016, Prop. 1.3),
  the conversion of DP-SynRAG's Theorem 1.
* ``cks``: Canonne, Kamath & Steinke (2020), Prop. 12 / Cor. 13, applied to the RDP curve
  alpha * rho of rho-zCDP:
      epsilon = min_{alpha > 1} alpha rho + ln(1 - 1/alpha) + (ln(1/delta) - ln alpha)/(alpha - 1).
  Never larger than Bun-Steinke; the same formula dp-accounting's RDP accountant uses.
"""

from __future__ import annotations

import math
from enum import StrEnum

from scipy.optimize import minimize_scalar


class Conversion(StrEnum):
    BUN_STEINKE = "bun-steinke"
    CKS = "cks"


#: The largest epsilon a build plans or a certificate passes without a measurement flag: above
#: it (e^30 ~ 10^13 as a likelihood ratio) differential privacy promises nothing an operator
#: could sign off; the eval's noise-free ceilings use larger values on purpose.
MAX_EPSILON = 30.0

CONVERSION_REFERENCES = {
    Conversion.BUN_STEINKE: "Bun & Steinke 2016, Proposition 1.3",
    Conversion.CKS: "Canonne, Kamath & Steinke 2020, Proposition 12 / Corollary 13",
}


def _check(rho: float, delta: float) -> None:
    if not (math.isfinite(rho) and rho >= 0):
        raise ValueError(f"rho must be finite and non-negative, got {rho!r}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")


def bun_steinke_epsilon(rho: float, delta: float) -> float:
    """epsilon = rho + 2 sqrt(rho ln(1/delta))."""
    _check(rho, delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def bun_steinke_rho(epsilon: float, delta: float) -> float:
    """The largest rho whose Bun-Steinke epsilon is ``epsilon``: (sqrt(eps + L) - sqrt(L))^2."""
    _check_epsilon(epsilon)
    _check(0.0, delta)
    log_inv_delta = math.log(1.0 / delta)
    return (math.sqrt(epsilon + log_inv_delta) - math.sqrt(log_inv_delta)) ** 2


def _cks_objective(alpha: float, rho: float, log_inv_delta: float) -> float:
    return (
        alpha * rho
        + math.log1p(-1.0 / alpha)
        + (log_inv_delta - math.log(alpha)) / (alpha - 1.0)
    )


def cks_epsilon(rho: float, delta: float) -> float:
    """The Canonne-Kamath-Steinke epsilon of rho-zCDP at ``delta`` (optimised over alpha)."""
    _check(rho, delta)
    if rho == 0:
        return 0.0
    log_inv_delta = math.log(1.0 / delta)
    # The objective is unimodal in log(alpha): coarse scan, then bounded Brent around the best.
    grid = [1.0 + 10 ** (e / 20.0) for e in range(-120, 141)]
    values = [_cks_objective(a, rho, log_inv_delta) for a in grid]
    best = min(range(len(grid)), key=values.__getitem__)
    low = grid[max(best - 1, 0)]
    high = grid[min(best + 1, len(grid) - 1)]
    result = minimize_scalar(
        _cks_objective, bounds=(low, high), args=(rho, log_inv_delta), method="bounded",
        options={"xatol": 1e-12},
    )
    epsilon = min(float(result.fun), values[best])
    return max(0.0, min(epsilon, bun_steinke_epsilon(rho, delta)))


def cks_rho(epsilon: float, delta: float) -> float:
    """The largest rho whose CKS epsilon at ``delta`` does not exceed ``epsilon`` (bisection)."""
    _check_epsilon(epsilon)
    _check(0.0, delta)
    low = bun_steinke_rho(epsilon, delta)  # CKS <= Bun-Steinke, so this rho is admissible
    high = max(2.0 * low, 1e-12)
    while cks_epsilon(high, delta) <= epsilon:
        low, high = high, 2.0 * high
    for _ in range(200):
        mid = (low + high) / 2.0
        if cks_epsilon(mid, delta) <= epsilon:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * high:
            break
    return low


def _check_epsilon(epsilon: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")


def epsilon_for(rho: float, delta: float, conversion: Conversion | str) -> float:
    """epsilon of rho-zCDP at ``delta`` under the named conversion."""
    conversion = Conversion(conversion)
    if conversion is Conversion.BUN_STEINKE:
        return bun_steinke_epsilon(rho, delta)
    return cks_epsilon(rho, delta)


def rho_for(epsilon: float, delta: float, conversion: Conversion | str) -> float:
    """The zCDP budget rho that a target (epsilon, delta) admits under the named conversion."""
    conversion = Conversion(conversion)
    if conversion is Conversion.BUN_STEINKE:
        return bun_steinke_rho(epsilon, delta)
    return cks_rho(epsilon, delta)
