"""DP accounting core: random source, mechanisms, zCDP ledger, conversions and planner.

The names exported here are a stable API that external audits call. The torch-based pieces
(``clip_logits``, ``sample_token``, ``sample_tokens``) load torch on first use only, so that
planning a budget stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from dpsynrag.accounting.conversions import (
    Conversion,
    bun_steinke_epsilon,
    bun_steinke_rho,
    cks_epsilon,
    cks_rho,
    epsilon_for,
    rho_for,
)
from dpsynrag.accounting.costs import exponential_rho, gaussian_rho, mechanism_rho, token_rho
from dpsynrag.accounting.ledger import (
    BudgetExceededError,
    Charge,
    Ledger,
    LedgerError,
    ReleaseMismatchError,
)
from dpsynrag.accounting.noise import discrete_gaussian, gaussian
from dpsynrag.accounting.planner import BudgetPlan, PlanError, PlanRequest, plan_budget
from dpsynrag.accounting.rng import RandomSource, secure_rng
from dpsynrag.accounting.threshold import exponential_threshold

_LAZY = {
    "clip_logits": "dpsynrag.accounting.clipping",
    "sample_token": "dpsynrag.accounting.token_sampling",
    "sample_tokens": "dpsynrag.accounting.token_sampling",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BudgetExceededError",
    "BudgetPlan",
    "Charge",
    "Conversion",
    "Ledger",
    "LedgerError",
    "PlanError",
    "PlanRequest",
    "RandomSource",
    "ReleaseMismatchError",
    "bun_steinke_epsilon",
    "bun_steinke_rho",
    "cks_epsilon",
    "cks_rho",
    "clip_logits",
    "discrete_gaussian",
    "epsilon_for",
    "exponential_rho",
    "exponential_threshold",
    "gaussian",
    "gaussian_rho",
    "mechanism_rho",
    "plan_budget",
    "rho_for",
    "sample_token",
    "sample_tokens",
    "secure_rng",
    "token_rho",
]
