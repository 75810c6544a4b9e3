"""Public budget calibrations for the query-time mechanisms. Nothing here touches data.

* ``koga_max_steps``: Koga et al.'s T_max / c_max, the number of (eps_token, delta_token)
  steps that fit in (eps_total, delta_total) under the better of sequential and advanced
  composition (Dwork, Rothblum & Vadhan 2010).
* ``dp_ksa_sigma_rdp``: DP-KSA's PTR noise multiplier sigma from the paper's RDP accounting
  (Bun-Steinke pure-DP RDP curve for FindBestK + Gaussian RDP for PTR, Mironov's conversion).
* ``grislain_token_epsilon_pld`` / ``pld_epsilon``: Grislain's DP-RAG budget split, composing
  pure-DP steps with Google's ``dp_accounting`` privacy-loss-distribution accountant
  (pessimistic PLD of a generic epsilon-DP mechanism).
* ``em_zcdp_token_epsilon`` / ``em_zcdp_rho``: the tighter alternative that treats every step as
  an exponential mechanism, epsilon-bounded-range hence epsilon^2 / 8 zCDP, with the Bun-Steinke
  conversion.

``dp_accounting`` is imported inside the functions that need it, so planning stays light.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from numbers import Integral, Real

import numpy as np

from dpsynrag.accounting.conversions import bun_steinke_epsilon, bun_steinke_rho

DEFAULT_ALPHA_GRID = np.linspace(1.1, 200.9, 1999)
DEFAULT_ALPHA_GRID.flags.writeable = False
"""RDP orders 1.1, 1.2, ..., 200.9 (the grid of table V4, docs/mechanisms.md section 17)."""

DEFAULT_PLD_DISCRETIZATION = 1e-4


def _is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def _check_positive(value: float, name: str) -> None:
    if not (_is_real(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def _check_delta(value: float, name: str, *, allow_zero: bool = False) -> None:
    low_ok = value >= 0 if allow_zero else value > 0
    if not (_is_real(value) and low_ok and value < 1):
        bound = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must lie in {bound}, got {value!r}")


def _check_count(value: int, name: str) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


# --------------------------------------------------------------------------- Koga et al.
def advanced_composition_epsilon(epsilon: float, steps: int, delta_prime: float) -> float:
    """sqrt(2 T ln(1/delta')) eps + T eps (e^eps - 1) (Dwork, Rothblum & Vadhan 2010)."""
    return math.sqrt(2.0 * steps * math.log(1.0 / delta_prime)) * epsilon + steps * epsilon * (
        math.expm1(epsilon)
    )


def _decimal(value: float) -> Fraction:
    """The exact rational of a float's shortest decimal repr (1e-4 / 1e-5 is exactly 10).

    Budgets are given as decimal literals; dividing their binary floats could land just below
    an integer (and flooring would then lose a whole step).
    """
    return Fraction(repr(float(value)))


def _check_koga(
    eps_token: float, delta_token: float, eps_total: float, delta_total: float
) -> None:
    _check_positive(eps_token, "eps_token")
    _check_positive(eps_total, "eps_total")
    _check_delta(delta_token, "delta_token", allow_zero=True)
    _check_delta(delta_total, "delta_total", allow_zero=True)


def koga_sequential_steps(
    eps_token: float, delta_token: float, eps_total: float, delta_total: float
) -> int:
    """T_seq = floor(min(eps_total / eps_token, delta_total / delta_token)) (basic composition;
    no delta limit when delta_token = 0)."""
    _check_koga(eps_token, delta_token, eps_total, delta_total)
    steps = math.floor(_decimal(eps_total) / _decimal(eps_token))
    if delta_token > 0:
        steps = min(steps, math.floor(_decimal(delta_total) / _decimal(delta_token)))
    return steps


def koga_advanced_steps(
    eps_token: float, delta_token: float, eps_total: float, delta_total: float
) -> int:
    """T_adv: the largest T with delta' = delta_total - T delta_token > 0 and
    sqrt(2 T ln(1/delta')) eps_token + T eps_token (e^eps_token - 1) <= eps_total (0 if none)."""
    _check_koga(eps_token, delta_token, eps_total, delta_total)
    total, per_step = _decimal(delta_total), _decimal(delta_token)
    advanced = 0
    steps = 1
    while True:
        delta_prime = total - steps * per_step
        if delta_prime <= 0:
            break
        # the advanced-composition epsilon grows with T, so stop at the first failure
        if advanced_composition_epsilon(eps_token, steps, float(delta_prime)) > eps_total:
            break
        advanced = steps
        steps += 1
    return advanced


def koga_max_steps(
    eps_token: float, delta_token: float, eps_total: float, delta_total: float
) -> int:
    """T_max (DPVoteRAG) or c_max (DPSparseVoteRAG): the number of (eps_token, delta_token)
    steps that fit in (eps_total, delta_total), max(T_seq, T_adv) (Koga et al., footnote 3).

    See ``koga_sequential_steps`` and ``koga_advanced_steps``. Charge all of them up front.
    """
    return max(
        koga_sequential_steps(eps_token, delta_token, eps_total, delta_total),
        koga_advanced_steps(eps_token, delta_token, eps_total, delta_total),
    )


# --------------------------------------------------------------------------- DP-KSA
def _log_cosh(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return x + np.log1p(np.exp(-2.0 * x)) - math.log(2.0)


def pure_dp_rdp(epsilon: float, alpha: np.ndarray) -> np.ndarray:
    """Bun-Steinke RDP curve of an epsilon-DP mechanism at orders ``alpha`` (> 1).

    min(alpha eps^2 / 2, ln[(sinh(alpha eps) - sinh((alpha - 1) eps)) / sinh(eps)] / (alpha - 1)),
    with the ratio rewritten as cosh((alpha - 1/2) eps) / cosh(eps / 2) to avoid overflow.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    log_ratio = _log_cosh((alpha - 0.5) * epsilon) - _log_cosh(np.asarray(epsilon / 2.0))
    curve: np.ndarray = np.minimum(alpha * epsilon**2 / 2.0, log_ratio / (alpha - 1.0))
    return curve


def dp_ksa_epsilon_rdp(
    sigma: float,
    delta: float,
    epsilon_em: float,
    alpha_grid: Sequence[float] | np.ndarray | None = None,
    *,
    bounded_range: bool = False,
) -> float:
    """DP-KSA's epsilon at total ``delta`` (delta_conv = delta_ptr = delta / 2):

    min over the grid of eps_EM(alpha) + alpha / (2 sigma^2) + ln(1 / delta_conv) / (alpha - 1).
    ``bounded_range=True`` uses the tighter EM curve alpha eps_EM^2 / 8 instead of Bun-Steinke.
    """
    _check_positive(sigma, "sigma")
    _check_positive(epsilon_em, "epsilon_em")
    _check_delta(delta, "delta")
    alpha = _alpha_grid(alpha_grid)
    em_curve = alpha * epsilon_em**2 / 8.0 if bounded_range else pure_dp_rdp(epsilon_em, alpha)
    delta_conv = delta / 2.0
    total = em_curve + alpha / (2.0 * sigma**2) + math.log(1.0 / delta_conv) / (alpha - 1.0)
    return float(np.min(total))


def _alpha_grid(alpha_grid: Sequence[float] | np.ndarray | None) -> np.ndarray:
    alpha = DEFAULT_ALPHA_GRID if alpha_grid is None else np.asarray(alpha_grid, dtype=np.float64)
    if alpha.ndim != 1 or alpha.size == 0 or not np.isfinite(alpha).all() or (alpha <= 1).any():
        raise ValueError("alpha_grid must be a non-empty 1-D sequence of finite orders > 1")
    return alpha


def dp_ksa_sigma_rdp(
    epsilon: float,
    delta: float,
    epsilon_em: float,
    alpha_grid: Sequence[float] | np.ndarray | None = None,
    *,
    bounded_range: bool = False,
) -> float:
    """The smallest PTR noise multiplier sigma whose DP-KSA epsilon (see ``dp_ksa_epsilon_rdp``)
    is at most ``epsilon`` at total ``delta``; bisection to relative precision 1e-12.

    The PTR noise standard deviation is 2 sigma. Raises ValueError when even sigma -> infinity
    cannot meet ``epsilon`` (FindBestK plus the conversion already exceed it).
    """
    _check_positive(epsilon, "epsilon")
    alpha = _alpha_grid(alpha_grid)

    def achieved(sigma: float) -> float:
        return dp_ksa_epsilon_rdp(sigma, delta, epsilon_em, alpha, bounded_range=bounded_range)

    floor = achieved(1e12)
    if floor >= epsilon:
        raise ValueError(
            f"epsilon_em={epsilon_em} alone uses epsilon >= {floor:.4g} at delta={delta}; "
            f"no sigma reaches epsilon={epsilon}"
        )
    low, high = 1e-6, 1.0
    while achieved(high) > epsilon:
        low, high = high, 2.0 * high
    for _ in range(200):
        mid = 0.5 * (low + high)
        if achieved(mid) <= epsilon:
            high = mid
        else:
            low = mid
        if high - low <= 1e-12 * high:
            break
    return high


# --------------------------------------------------------------------------- Grislain (PLD)
def pld_epsilon(
    pure_epsilons: Sequence[tuple[float, int]],
    delta: float,
    *,
    value_discretization_interval: float = DEFAULT_PLD_DISCRETIZATION,
) -> float:
    """epsilon at ``delta`` of composing ``count`` epsilon-DP steps for each (epsilon, count).

    Uses dp_accounting's pessimistic PLD of a generic epsilon-DP mechanism
    (``from_privacy_parameters``), self-composed and composed; the discretisation rounds
    privacy losses up, so the result is an upper bound.
    """
    from dp_accounting.pld import common, privacy_loss_distribution

    _check_delta(delta, "delta")
    _check_positive(value_discretization_interval, "value_discretization_interval")
    if not pure_epsilons:
        raise ValueError("pure_epsilons must name at least one (epsilon, count) pair")
    composed = None
    for epsilon, count in pure_epsilons:
        _check_positive(epsilon, "epsilon")
        _check_count(count, "count")
        pld = privacy_loss_distribution.from_privacy_parameters(
            common.DifferentialPrivacyParameters(float(epsilon), 0.0),
            value_discretization_interval=value_discretization_interval,
        ).self_compose(int(count))
        composed = pld if composed is None else composed.compose(pld)
    assert composed is not None
    return float(composed.get_epsilon_for_delta(delta))


def exact_pure_composition_delta(epsilon: float, steps: int, total_epsilon: float) -> float:
    """Exact delta(total_epsilon) of ``steps`` epsilon-DP steps (optimal composition).

    The worst case of an epsilon-DP step is randomized response, whose privacy loss is +eps
    with probability e^eps / (1 + e^eps) and -eps otherwise (Kairouz, Oh & Viswanath 2015), so
    delta(E) = E_K[(1 - e^(E - eps (2K - T)))_+] with K ~ Binomial(T, e^eps / (1 + e^eps)).
    Used as a warm start for the PLD search (the pessimistic PLD is never below it).
    """
    from scipy.stats import binom

    _check_positive(epsilon, "epsilon")
    _check_count(steps, "steps")
    if not (_is_real(total_epsilon) and math.isfinite(total_epsilon)):
        raise ValueError(f"total_epsilon must be a finite number, got {total_epsilon!r}")
    ones = np.arange(steps + 1)
    loss = epsilon * (2.0 * ones - steps)
    mass = binom.pmf(ones, steps, 1.0 / (1.0 + math.exp(-epsilon)))
    above = loss > total_epsilon
    return float(np.sum(mass[above] * -np.expm1(total_epsilon - loss[above])))


def _exact_token_epsilon(eps_gen: float, tokens: int, delta: float) -> float:
    low, high = eps_gen / tokens, float(eps_gen)
    if exact_pure_composition_delta(high, tokens, eps_gen) <= delta:
        return high
    for _ in range(100):
        mid = 0.5 * (low + high)
        if exact_pure_composition_delta(mid, tokens, eps_gen) <= delta:
            low = mid
        else:
            high = mid
    return low


def grislain_token_epsilon_pld(
    eps_gen: float,
    tokens: int,
    delta: float,
    *,
    value_discretization_interval: float = DEFAULT_PLD_DISCRETIZATION,
    tolerance: float = 1e-6,
) -> float:
    """The largest per-token pure epsilon (to within ``tolerance``) such that ``tokens``
    epsilon-DP steps compose, by dp_accounting's pessimistic PLD at ``delta``, to at most
    ``eps_gen``. The returned value is always PLD-admissible.

    Bisection on the PLD epsilon, bracketed above by the exact optimal-composition answer
    (the pessimistic PLD never under-reports) and below by stepping down from it. The search
    never exceeds eps_gen (for ``tokens=1`` a slightly larger value could also be admissible).
    """
    _check_positive(eps_gen, "eps_gen")
    _check_count(tokens, "tokens")
    _check_delta(delta, "delta")
    _check_positive(tolerance, "tolerance")

    def admissible(epsilon: float) -> bool:
        composed = pld_epsilon(
            [(epsilon, tokens)], delta, value_discretization_interval=value_discretization_interval
        )
        return composed <= eps_gen

    high = _exact_token_epsilon(eps_gen, tokens, delta)
    if admissible(high):
        return high
    width = 4.0 * value_discretization_interval
    low = max(high - width, 0.5 * high)
    while not admissible(low):
        if low < 1e-9 * eps_gen:
            raise ValueError(
                "no per-token epsilon is PLD-admissible at this discretisation; "
                "lower value_discretization_interval"
            )
        high, width = low, 2.0 * width
        low = max(high - width, 0.5 * high)
    while high - low > tolerance:
        mid = 0.5 * (low + high)
        if admissible(mid):
            low = mid
        else:
            high = mid
    return low


# --------------------------------------------------------------------------- EM as zCDP
def em_zcdp_rho(retrieval_epsilon: float, token_epsilon: float, tokens: int) -> float:
    """rho = eps_ret^2 / 8 + tokens * eps_tok^2 / 8 (every step epsilon-bounded-range)."""
    _check_positive(token_epsilon, "token_epsilon")
    _check_count(tokens, "tokens")
    if not (_is_real(retrieval_epsilon) and math.isfinite(retrieval_epsilon)) or (
        retrieval_epsilon < 0
    ):
        raise ValueError(f"retrieval_epsilon must be finite and >= 0, got {retrieval_epsilon!r}")
    return retrieval_epsilon**2 / 8.0 + tokens * token_epsilon**2 / 8.0


def em_zcdp_epsilon(
    retrieval_epsilon: float, token_epsilon: float, tokens: int, delta: float
) -> float:
    """Bun-Steinke epsilon at ``delta`` of ``em_zcdp_rho(...)``."""
    return bun_steinke_epsilon(em_zcdp_rho(retrieval_epsilon, token_epsilon, tokens), delta)


def em_zcdp_token_epsilon(
    target_epsilon: float, delta: float, tokens: int, retrieval_epsilon: float
) -> float:
    """Per-token EM epsilon so that retrieval + ``tokens`` EM steps meet target_epsilon.

    rho_total = bun_steinke_rho(target_epsilon, delta) = eps_ret^2 / 8 + tokens eps_tok^2 / 8,
    so eps_tok = sqrt(8 (rho_total - eps_ret^2 / 8) / tokens). Raises ValueError when the
    retrieval alone exhausts the budget.
    """
    _check_positive(target_epsilon, "target_epsilon")
    _check_delta(delta, "delta")
    _check_count(tokens, "tokens")
    if not (_is_real(retrieval_epsilon) and math.isfinite(retrieval_epsilon)) or (
        retrieval_epsilon < 0
    ):
        raise ValueError(f"retrieval_epsilon must be finite and >= 0, got {retrieval_epsilon!r}")
    remaining = bun_steinke_rho(target_epsilon, delta) - retrieval_epsilon**2 / 8.0
    if remaining <= 0:
        raise ValueError("the retrieval step alone exhausts the target epsilon")
    return math.sqrt(8.0 * remaining / tokens)
