"""Tests of the public calibrations (``dpsynrag.accounting.calibration``) against the test
vectors of docs/mechanisms.md, section 17 (tables V1, V3, V4) and basic invariants.

No randomness: every test here is deterministic. The PLD cases call dp_accounting (about
0.5 s each).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpsynrag.accounting.calibration import (
    advanced_composition_epsilon,
    dp_ksa_epsilon_rdp,
    dp_ksa_sigma_rdp,
    em_zcdp_epsilon,
    em_zcdp_rho,
    em_zcdp_token_epsilon,
    exact_pure_composition_delta,
    grislain_token_epsilon_pld,
    koga_advanced_steps,
    koga_max_steps,
    koga_sequential_steps,
    pld_epsilon,
    pure_dp_rdp,
)

# ----------------------------------------------------------------------------- Koga (V1)
# eps_token, eps_total, T_seq, T_adv, T_max -- docs/mechanisms.md table V1 (delta_token 1e-5,
# delta_total 1e-4)
KOGA_TABLE = [
    (1, 2, 2, 0, 2),
    (1, 5, 5, 0, 5),
    (1, 10, 10, 2, 10),
    (1, 20, 10, 5, 10),
    (1, 40, 10, 9, 10),
    (2, 2, 1, 0, 1),
    (2, 5, 2, 0, 2),
    (2, 10, 5, 0, 5),
    (2, 20, 10, 0, 10),
    (2, 40, 10, 2, 10),
    (5, 5, 1, 0, 1),
    (5, 10, 2, 0, 2),
    (5, 20, 4, 0, 4),
    (5, 40, 8, 0, 8),
]


@pytest.mark.parametrize("eps_token,eps_total,t_seq,t_adv,t_max", KOGA_TABLE)
def test_koga_table_3_6(eps_token: float, eps_total: float, t_seq: int, t_adv: int,
                        t_max: int) -> None:
    assert koga_sequential_steps(eps_token, 1e-5, eps_total, 1e-4) == t_seq
    assert koga_advanced_steps(eps_token, 1e-5, eps_total, 1e-4) == t_adv
    assert koga_max_steps(eps_token, 1e-5, eps_total, 1e-4) == t_max


@pytest.mark.parametrize(
    "eps_token,eps_total,expected",
    [(1, 10, 10), (1, 40, 10), (2, 10, 5), (2, 20, 10), (5, 5, 1), (5, 40, 8), (1, 2, 2),
     (2, 2, 1), (5, 2, 0)],
)
def test_koga_key_cases_b1(eps_token: float, eps_total: float, expected: int) -> None:
    assert koga_max_steps(eps_token, 1e-5, eps_total, 1e-4) == expected


def test_koga_advanced_boundary() -> None:
    """(1, 40): T = 9 leaves delta' = 1e-5 and fits; T = 10 leaves no delta'."""
    assert advanced_composition_epsilon(1.0, 9, 1e-5) <= 40
    assert koga_advanced_steps(1.0, 1e-5, 1e6, 1e-4) == 9  # capped by delta' > 0 alone


def test_koga_decimal_ratios_do_not_lose_a_step() -> None:
    assert 0.3 / 0.1 < 3  # the binary floats alone would floor to 2
    assert koga_sequential_steps(0.1, 1e-6, 0.3, 1e-5) == 3
    assert koga_sequential_steps(1.0, 1e-6, 100.0, 3e-6) == 3


def test_koga_pure_dp_steps() -> None:
    """delta_token = 0: no delta cap; advanced composition needs delta_total > 0."""
    assert koga_max_steps(0.5, 0.0, 5.0, 0.0) == 10
    assert koga_advanced_steps(0.01, 0.0, 1.0, 1e-5) > 100 == koga_sequential_steps(
        0.01, 0.0, 1.0, 1e-5
    )


@pytest.mark.parametrize(
    "args", [(0, 1e-5, 1, 1e-4), (1, -1e-5, 1, 1e-4), (1, 1e-5, math.inf, 1e-4), (1, 1e-5, 1, 1)]
)
def test_koga_validation(args: tuple) -> None:
    with pytest.raises(ValueError):
        koga_max_steps(*args)


# ----------------------------------------------------------------------------- DP-KSA (V4)
# target eps, eps_EM, sigma, PTR std, quantile shift, gap for ~50% pass -- docs/mechanisms.md V4
KSA_TABLE = [
    (1, 0.25, 5.872, 11.745, 45.69, 47.7),
    (1, 0.50, 8.799, 17.598, 68.47, 70.5),
    (2, 0.50, 3.006, 6.012, 23.39, 25.4),
    (2, 1.00, 4.491, 8.982, 34.94, 36.9),
    (3, 0.75, 2.048, 4.095, 15.93, 17.9),
    (3, 1.50, 3.046, 6.092, 23.70, 25.7),
    (5, 1.25, 1.276, 2.552, 9.93, 11.9),
    (5, 2.50, 1.880, 3.759, 14.62, 16.6),
    (8, 2.00, 0.837, 1.673, 6.51, 8.5),
    (8, 4.00, 1.215, 2.429, 9.45, 11.5),
]


@pytest.mark.parametrize("epsilon,epsilon_em,sigma,std,shift,gap", KSA_TABLE)
def test_dp_ksa_table_2_6(epsilon: float, epsilon_em: float, sigma: float, std: float,
                          shift: float, gap: float) -> None:
    found = dp_ksa_sigma_rdp(epsilon, 1e-4, epsilon_em)
    assert round(found, 3) == sigma
    assert abs(2 * found - std) <= 1.5e-3  # the table rounds 2 sigma from the unrounded sigma
    z = stats.norm.isf(5e-5)
    assert round(2 * found * z, 2) == pytest.approx(shift, abs=0.011)
    assert round(2 + 2 * found * z, 1) == pytest.approx(gap, abs=0.051)
    assert dp_ksa_epsilon_rdp(found, 1e-4, epsilon_em) <= epsilon
    assert dp_ksa_epsilon_rdp(found * (1 - 1e-6), 1e-4, epsilon_em) > epsilon


def test_dp_ksa_b4_optimal_order() -> None:
    """eps = 5, eps_EM = 1.25 -> sigma 1.276 with alpha* about 6.6."""
    sigma = dp_ksa_sigma_rdp(5.0, 1e-4, 1.25)
    alpha = np.linspace(1.1, 200.9, 1999)
    values = [dp_ksa_epsilon_rdp(sigma, 1e-4, 1.25, [a]) for a in alpha]
    assert alpha[int(np.argmin(values))] == pytest.approx(6.6, abs=0.15)


def test_dp_ksa_bounded_range_curve_is_tighter() -> None:
    paper = dp_ksa_sigma_rdp(5.0, 1e-4, 1.25)
    tighter = dp_ksa_sigma_rdp(5.0, 1e-4, 1.25, bounded_range=True)
    assert tighter < paper


def test_dp_ksa_custom_grid_and_errors() -> None:
    coarse = dp_ksa_sigma_rdp(5.0, 1e-4, 1.25, alpha_grid=[2.0, 4.0, 8.0, 16.0])
    assert coarse >= dp_ksa_sigma_rdp(5.0, 1e-4, 1.25)  # a coarser grid is never tighter
    with pytest.raises(ValueError):
        dp_ksa_sigma_rdp(1.0, 1e-4, 2.0)  # the EM alone exceeds the target
    with pytest.raises(ValueError):
        dp_ksa_sigma_rdp(5.0, 1e-4, 1.25, alpha_grid=[1.0, 2.0])
    with pytest.raises(ValueError):
        dp_ksa_sigma_rdp(5.0, 0.0, 1.25)


def test_pure_dp_rdp_matches_the_sinh_formula_and_does_not_overflow() -> None:
    alpha = np.array([1.5, 2.0, 6.6, 30.0])
    for eps in (0.25, 1.25, 4.0):
        direct = np.minimum(
            alpha * eps**2 / 2,
            np.log((np.sinh(alpha * eps) - np.sinh((alpha - 1) * eps)) / np.sinh(eps))
            / (alpha - 1),
        )
        np.testing.assert_allclose(pure_dp_rdp(eps, alpha), direct, rtol=1e-12)
    with np.errstate(over="raise"):
        big = pure_dp_rdp(8.0, np.array([200.9]))
    assert np.isfinite(big).all() and big[0] <= 8.0


# ----------------------------------------------------------------------------- Grislain (V3)
@pytest.mark.parametrize(
    "eps_gen,tokens,expected",
    [(5.0, 70, 0.1757), (3.0, 70, 0.1165), (2.0, 50, 0.0996), (10.0, 70, 0.2998),
     (10.0, 30, 0.4702)],
)
def test_grislain_pld_token_epsilon_b3(eps_gen: float, tokens: int, expected: float) -> None:
    found = grislain_token_epsilon_pld(eps_gen, tokens, 1e-3, tolerance=1e-5)
    assert found == pytest.approx(expected, abs=2e-4)
    assert pld_epsilon([(found, tokens)], 1e-3) <= eps_gen  # admissible


def test_pld_retrieval_plus_generation_b3() -> None:
    assert pld_epsilon([(0.5, 1), (0.1757, 70)], 1e-3) == pytest.approx(5.3252, abs=2e-4)


def test_pld_is_never_below_exact_composition() -> None:
    """The pessimistic PLD upper-bounds the exact optimal composition of eps-DP steps."""
    epsilon = pld_epsilon([(0.2, 40)], 1e-4)
    assert exact_pure_composition_delta(0.2, 40, epsilon) <= 1e-4
    assert exact_pure_composition_delta(0.2, 40, epsilon - 0.05) > 1e-4
    assert exact_pure_composition_delta(0.3, 1, 0.3) == 0.0


def test_pld_validation() -> None:
    with pytest.raises(ValueError):
        pld_epsilon([], 1e-3)
    with pytest.raises(ValueError):
        pld_epsilon([(0.1, 0)], 1e-3)
    with pytest.raises(ValueError):
        grislain_token_epsilon_pld(5.0, 0, 1e-3)


# ----------------------------------------------------------------------------- EM as zCDP
def test_em_zcdp_token_epsilon_b3() -> None:
    found = em_zcdp_token_epsilon(5.0, 1e-3, 70, 0.5)
    assert round(found, 4) == 0.2716
    assert em_zcdp_epsilon(0.5, found, 70, 1e-3) == pytest.approx(5.0)


def test_em_zcdp_reference_configuration_b3() -> None:
    assert round(em_zcdp_rho(0.5, 0.1757, 70), 4) == 0.3014
    assert round(em_zcdp_epsilon(0.5, 0.1757, 70, 1e-3), 3) == 3.187


def test_em_zcdp_validation() -> None:
    with pytest.raises(ValueError):
        em_zcdp_token_epsilon(0.1, 1e-3, 70, 5.0)  # retrieval alone exceeds the target
    with pytest.raises(ValueError):
        em_zcdp_token_epsilon(5.0, 1e-3, 0, 0.5)
    with pytest.raises(ValueError):
        em_zcdp_rho(-0.5, 0.1, 10)


def test_grislain_default_tolerance_is_admissible_and_tight() -> None:
    found = grislain_token_epsilon_pld(10.0, 30, 1e-3)
    assert round(found, 4) == 0.4702
    assert pld_epsilon([(found, 30)], 1e-3) <= 10.0 < pld_epsilon([(found + 2e-6, 30)], 1e-3)
