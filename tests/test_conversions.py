"""zCDP -> (epsilon, delta) conversions, checked against closed forms and dp-accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dpsynrag.accounting import (
    Conversion,
    bun_steinke_epsilon,
    bun_steinke_rho,
    cks_epsilon,
    cks_rho,
    epsilon_for,
    rho_for,
)

RHOS = [0.01, 0.1, 0.5, 1.0, 2.2012, 5.0, 20.0]
DELTAS = [1e-3, 1e-5, 1e-8]
FINE_ORDERS = 1.0 + np.logspace(-3, 3.7, 20000)  # relative spacing < 0.1%


def test_bun_steinke_closed_form_on_the_paper_setting() -> None:
    rho = (math.sqrt(10 + math.log(1e3)) - math.sqrt(math.log(1e3))) ** 2
    assert bun_steinke_rho(10.0, 1e-3) == pytest.approx(rho, rel=1e-15)
    assert bun_steinke_rho(10.0, 1e-3) == pytest.approx(2.2012, abs=5e-5)
    assert bun_steinke_epsilon(2.2012, 1e-3) == pytest.approx(10.0, abs=1e-3)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 5.0, 10.0, 40.0])
def test_inverses_round_trip(epsilon: float, delta: float) -> None:
    for conversion in Conversion:
        rho = rho_for(epsilon, delta, conversion)
        assert epsilon_for(rho, delta, conversion) == pytest.approx(epsilon, rel=1e-9)
        # and rho is the largest admissible: a little more overshoots epsilon
        assert epsilon_for(rho * (1 + 1e-6), delta, conversion) > epsilon


def test_cks_admits_more_rho_on_the_paper_setting() -> None:
    assert cks_rho(10.0, 1e-3) == pytest.approx(2.607, abs=5e-4)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("rho", RHOS)
def test_cks_is_never_looser_than_bun_steinke(rho: float, delta: float) -> None:
    assert cks_epsilon(rho, delta) <= bun_steinke_epsilon(rho, delta) + 1e-12


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("rho", RHOS)
def test_cks_matches_dp_accounting_zcdp_event(rho: float, delta: float) -> None:
    """dp-accounting composes ZCDpEvent into RDP alpha*rho and converts with the CKS bound.

    Its order grid is discrete, so its epsilon is >= ours and close to it with a fine grid.
    """
    accountant = rdp.RdpAccountant(orders=list(FINE_ORDERS))
    accountant.compose(dp_event.ZCDpEvent(rho))
    theirs = accountant.get_epsilon(delta)
    ours = cks_epsilon(rho, delta)
    assert ours <= theirs + 1e-9
    assert theirs == pytest.approx(ours, rel=2e-4)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("rho", RHOS)
def test_bun_steinke_matches_mironov_conversion_of_dp_accounting_curve(
    rho: float, delta: float
) -> None:
    """Bun-Steinke equals min_alpha alpha*rho + ln(1/delta)/(alpha-1) over the same RDP curve."""
    accountant = rdp.RdpAccountant(orders=list(FINE_ORDERS))
    accountant.compose(dp_event.ZCDpEvent(rho))
    curve = rho * FINE_ORDERS  # the curve the accountant composes for a ZCDpEvent
    mironov = float(np.min(curve + math.log(1 / delta) / (FINE_ORDERS - 1)))
    assert bun_steinke_epsilon(rho, delta) == pytest.approx(mironov, rel=1e-4)
    # and the accountant's (CKS) answer is never above Bun-Steinke
    assert accountant.get_epsilon(delta) <= bun_steinke_epsilon(rho, delta) + 1e-9


def test_conversion_names_and_errors() -> None:
    assert {c.value for c in Conversion} == {"bun-steinke", "cks"}
    with pytest.raises(ValueError):
        epsilon_for(1.0, 1e-3, "rdp")
    with pytest.raises(ValueError):
        bun_steinke_epsilon(-1.0, 1e-3)
    with pytest.raises(ValueError):
        cks_epsilon(1.0, 1.5)
    with pytest.raises(ValueError):
        rho_for(0.0, 1e-3, "cks")
    assert cks_epsilon(0.0, 1e-3) == 0.0
