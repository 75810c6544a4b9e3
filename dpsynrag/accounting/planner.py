"""The budget planner: from a target (epsilon, delta) to every noise scale of a DP-SynRAG build.

DP-SynRAG's cost (Theorem 1, with DESIGN.md's corrections) is

    rho = K / (2 sigma_h^2)                                   histogram, l2 sensitivity sqrt(K)
        + L * ( eps_theta^2 / 8 + 1 / (2 sigma_mu^2)          retrieval: threshold EM + noisy sum
                + T (c / tau)^2 / 2 )                         prediction: T softmax draws

The planner fixes rho from (epsilon, delta) and the named conversion, takes rho_hist,
rho_mean (= 1 / (2 sigma_mu^2), the Gaussian part of retrieval) and eps_theta as given shares,
and solves for sigma_h, sigma_mu and c / tau. Everything here is a public parameter.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from dpsynrag.accounting.conversions import (
    CONVERSION_REFERENCES,
    Conversion,
    epsilon_for,
    rho_for,
)
from dpsynrag.accounting.costs import exponential_rho

DEFAULT_VOCAB_SIZE = 49_152  # SmolLM2's tokenizer, the packaged model


class PlanError(ValueError):
    """The requested plan is impossible or ill-formed."""


@dataclass(frozen=True)
class PlanRequest:
    epsilon: float
    delta: float
    K: int
    L: int
    T: int
    eps_theta: float
    rho_hist: float
    rho_mean: float
    conversion: Conversion = Conversion.BUN_STEINKE
    vocab_size: int = DEFAULT_VOCAB_SIZE
    retrieval: bool = True  # False: the "w/o retrieval" ablation, S_r = C_r, stage (c) free

    def validate(self) -> None:
        _finite_positive(self.epsilon, "--epsilon")
        if not (0 < self.delta < 1):
            raise PlanError(f"--delta must lie strictly between 0 and 1, got {self.delta!r}")
        for name, value in (("--K", self.K), ("--L", self.L), ("--T", self.T),
                            ("--vocab-size", self.vocab_size)):
            if not (isinstance(value, int) and value >= 1):
                raise PlanError(f"{name} must be a positive integer, got {value!r}")
        if self.vocab_size < 2:
            raise PlanError("--vocab-size must be at least 2")
        _finite_positive(self.eps_theta, "--eps-theta")
        _finite_positive(self.rho_hist, "--rho-hist")
        _finite_positive(self.rho_mean, "--rho-mean")


@dataclass(frozen=True)
class BudgetPlan:
    """A solved plan. ``rho_retrieval`` and ``rho_prediction`` are per cluster (before x L)."""

    epsilon: float
    delta: float
    conversion: str
    conversion_reference: str
    K: int
    L: int
    T: int
    rho_total: float
    rho_hist: float
    sigma_h: float
    eps_theta: float
    rho_threshold: float
    rho_mean: float
    sigma_mu: float
    rho_retrieval: float
    rho_prediction: float
    rho_per_token: float
    c_over_tau: float
    epsilon_per_token: float
    rho_clusters_total: float
    epsilon_bun_steinke: float
    epsilon_cks: float
    vocab_size: int
    consensus_rows: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def stage_rows(self) -> list[tuple[str, str, float, float]]:
        """(stage, mechanism and noise, rho per cluster or NaN, rho after composition)."""
        return [
            ("(a) histogram", f"discrete Gauss. σ_h={self.sigma_h:.4f}", math.nan,
             self.rho_hist),
            ("(c) noisy sum", f"Gaussian σ_μ={self.sigma_mu:.4f}", self.rho_mean,
             self.L * self.rho_mean),
            ("(c) threshold", f"exp. mech. ε_θ={self.eps_theta:g}", self.rho_threshold,
             self.L * self.rho_threshold),
            ("(d) prediction", f"{self.T} draws, c/τ={self.c_over_tau:.4f}",
             self.rho_prediction, self.L * self.rho_prediction),
        ]


def _finite_positive(value: float, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise PlanError(f"{name} must be a finite positive number, got {value!r}")


def plan_budget(request: PlanRequest) -> BudgetPlan:
    """Solve the DP-SynRAG budget; raise ``PlanError`` when nothing is left for prediction."""
    request.validate()
    conversion = Conversion(request.conversion)
    rho_total = rho_for(request.epsilon, request.delta, conversion)
    rho_threshold = exponential_rho(request.eps_theta) if request.retrieval else 0.0
    rho_mean = request.rho_mean if request.retrieval else 0.0
    rho_retrieval = rho_threshold + rho_mean
    rho_clusters_total = rho_total - request.rho_hist
    rho_prediction = rho_clusters_total / request.L - rho_retrieval
    if rho_prediction <= 0:
        spent = request.rho_hist + request.L * rho_retrieval
        raise PlanError(
            f"impossible plan: epsilon={request.epsilon:g} at delta={request.delta:g} "
            f"({conversion.value}) allows rho={rho_total:.4f}, but the histogram and L x "
            f"retrieval already take rho={spent:.4f}; nothing is left for private prediction. "
            "Lower --rho-hist, --rho-mean, --eps-theta or --L, or raise --epsilon")
    rho_per_token = rho_prediction / request.T
    c_over_tau = math.sqrt(2.0 * rho_per_token)
    epsilon_per_token = 2.0 * c_over_tau
    return BudgetPlan(
        epsilon=request.epsilon,
        delta=request.delta,
        conversion=conversion.value,
        conversion_reference=CONVERSION_REFERENCES[conversion],
        K=request.K,
        L=request.L,
        T=request.T,
        rho_total=rho_total,
        rho_hist=request.rho_hist,
        sigma_h=math.sqrt(request.K / (2.0 * request.rho_hist)),
        eps_theta=request.eps_theta,
        rho_threshold=rho_threshold,
        rho_mean=rho_mean,
        sigma_mu=math.sqrt(1.0 / (2.0 * request.rho_mean)) if request.retrieval else 0.0,
        rho_retrieval=rho_retrieval,
        rho_prediction=rho_prediction,
        rho_per_token=rho_per_token,
        c_over_tau=c_over_tau,
        epsilon_per_token=epsilon_per_token,
        rho_clusters_total=rho_clusters_total,
        epsilon_bun_steinke=epsilon_for(rho_total, request.delta, Conversion.BUN_STEINKE),
        epsilon_cks=epsilon_for(rho_total, request.delta, Conversion.CKS),
        vocab_size=request.vocab_size,
        consensus_rows=consensus_rows(c_over_tau, request.vocab_size),
    )


def consensus_rows(c_over_tau: float, vocab_size: int) -> int:
    """Rows that must agree before a token beats the rest of the vocabulary.

    The agreed token scores +n c/tau against -n c/tau for each of the |V| - 1 others, so its
    probability passes 1/2 once 2 n c/tau >= ln(|V| - 1): n = ceil(ln(|V| - 1) / (2 c/tau)).
    """
    return math.ceil(math.log(vocab_size - 1) / (2.0 * c_over_tau))
