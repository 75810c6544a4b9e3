"""A partition selection's threshold is applied by the ledger, from the charge's own recorded
parameters (issue 58, item 2): ``Ledger.release_selection``. The draw returns every
candidate's noisy count; it cannot choose what passes. Through ``Ledger.release`` a uniform
selection may release nothing, and a weighted one (until it adopts ``release_selection``)
nothing below its recorded threshold."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpsynrag.accounting.ledger import (
    Charge,
    Ledger,
    LedgerError,
    SelectionThresholdError,
)
from dpsynrag.accounting.mechanisms import PartitionSelection
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.partition_selection import release_partitions, selection_threshold
from dpsynrag.accounting.partition_threshold import weighted_selection_threshold
from dpsynrag.accounting.rng import RandomSource, secure_rng

SIGMA, ITEMS, DELTA = 2.0, 3, 1e-5


def _charge(threshold: int | None = None) -> Charge:
    tau = selection_threshold(SIGMA, ITEMS, DELTA) if threshold is None else threshold
    return Charge("f-phrases", "partition_selection",
                  {"sigma": SIGMA, "max_items": ITEMS, "threshold": tau, "delta": DELTA},
                  math.sqrt(ITEMS), "l2")


def _fixed(values: list[int]) -> Callable[[RandomSource], np.ndarray]:
    """A draw that declares the charged noise and returns ``values`` as every candidate's
    noisy count (the ledger's check of the declared noise holds)."""
    def draw(rng: RandomSource) -> np.ndarray:
        rng.declare_noise("gaussian", SIGMA, math.sqrt(ITEMS))
        return np.asarray(values, dtype=np.int64)

    return draw


def test_the_ledger_keeps_the_candidates_at_the_recorded_threshold() -> None:
    charge = _charge()
    tau = int(charge.params["threshold"])
    ledger = Ledger(rng=secure_rng(1))
    released = ledger.release_selection("phrases", charge, ["a", "b", "c", "d"],
                                        _fixed([tau - 1, tau, tau + 5, -3]))
    assert released == {"b": tau, "c": tau + 5}
    assert ledger.released_value("phrases") == released
    # resumed: the stored selection, nothing drawn or charged
    again = ledger.release_selection("phrases", charge, ["a", "b", "c", "d"],
                                     lambda rng: pytest.fail("drawn again"))
    assert again == released and len(ledger.releases()) == 1


def test_the_threshold_is_the_charges_whatever_the_caller_meant() -> None:
    """A charge recording a higher threshold keeps fewer candidates: the rule reads the
    record, and the delta composed is the one that record gives."""
    tau = selection_threshold(SIGMA, ITEMS, DELTA)
    higher = _charge(tau + 2)
    ledger = Ledger(rng=secure_rng(2))
    released = ledger.release_selection("p", higher, ["a", "b", "c"],
                                        _fixed([tau, tau + 1, tau + 2]))
    assert released == {"c": tau + 2}
    assert ledger.total_delta() == pytest.approx(higher.delta, rel=1e-15)


@pytest.mark.parametrize("value", [
    {"a": 10},  # its own choice of candidates
    np.array([10, 11]),  # not one count per candidate
    np.array([10.0, 11.0, 12.0]),  # not integers
])
def test_a_draw_that_does_not_return_every_candidates_count_is_refused(value: object) -> None:
    ledger = Ledger(rng=secure_rng(3))

    def draw(rng: RandomSource) -> Any:
        rng.declare_noise("gaussian", SIGMA, math.sqrt(ITEMS))
        return value

    with pytest.raises(SelectionThresholdError, match="one integer noisy count per candidate"):
        ledger.release_selection("p", _charge(), ["a", "b", "c"], draw)
    assert ledger.releases() == []


def test_release_selection_takes_selections_with_distinct_candidates_only() -> None:
    ledger = Ledger(rng=secure_rng(4))
    gaussian = Charge("a-histogram", "discrete_gaussian",
                      {"sigma": 2.0, "l2_sensitivity": 1.0}, 1.0, "l2")
    with pytest.raises(LedgerError, match="not a selection"):
        ledger.release_selection("h", gaussian, ["a"], _fixed([1]))
    with pytest.raises(LedgerError, match="distinct strings"):
        ledger.release_selection("p", _charge(), ["a", "a"], _fixed([1, 1]))
    assert ledger.releases() == []


def test_a_uniform_selection_through_release_may_release_nothing_else() -> None:
    """The draw of ``Ledger.release`` chooses what it returns: a uniform selection releasing
    anything that way is refused, even at the right threshold; nothing is stored."""
    charge = _charge()
    tau = int(charge.params["threshold"])
    ledger = Ledger(rng=secure_rng(5))

    def own_choice(rng: RandomSource) -> dict[str, int]:
        rng.declare_noise("gaussian", SIGMA, math.sqrt(ITEMS))
        return {"a": tau}

    with pytest.raises(SelectionThresholdError,
                       match=r"goes through Ledger\.release_selection"):
        ledger.release("p", charge, own_choice)
    assert ledger.releases() == []

    def nothing(rng: RandomSource) -> dict[str, int]:
        rng.declare_noise("gaussian", SIGMA, math.sqrt(ITEMS))
        return {}

    assert ledger.release("p", charge, nothing) == {}


def _weighted(scale: int = 64) -> Charge:
    sigma = SIGMA * scale
    tau = weighted_selection_threshold(sigma, ITEMS, scale, DELTA)
    return Charge.of("f-ngrams", PartitionSelection(sigma=sigma, max_items=ITEMS,
                                                     threshold=tau, delta=DELTA,
                                                     weight_scale=scale))


def test_a_weighted_selection_through_release_is_refused_if_it_releases_anything() -> None:
    """A weighted selection goes through ``Ledger.release_selection`` as a uniform one does:
    a draw through ``Ledger.release`` that releases anything chose what passes, and is
    refused (even a count above the threshold); releasing nothing is accepted."""
    charge = _weighted()
    tau = int(charge.params["threshold"])
    sigma = float(charge.params["sigma"])
    ledger = Ledger(rng=secure_rng(6))

    def returning(value: dict[str, int]) -> Callable[[RandomSource], dict[str, int]]:
        def draw(rng: RandomSource) -> dict[str, int]:
            rng.declare_noise("gaussian", sigma, 64.0)
            return value
        return draw

    for value in ({"a": tau + 3, "b": tau - 1}, {"a": tau + 3}):
        with pytest.raises(SelectionThresholdError, match="goes through"):
            ledger.release("n1", charge, returning(value))
        assert ledger.releases() == []
    assert ledger.release("n1", charge, returning({})) == {}


def test_release_partitions_releases_exactly_the_noisy_counts_at_its_recorded_threshold(
        tmp_path: Path) -> None:
    """Every candidate is noised once; the ledger keeps those >= the recorded tau: the same
    seed's noise, thresholded by hand, is what comes out."""
    counts = {f"p{i:02d}": c for i, c in enumerate([1, 2, 5, 8, 9, 10, 11, 12, 20, 40])}
    ledger = Ledger(tmp_path / "l.sqlite", rng=secure_rng(7))
    released = release_partitions(ledger, "phrases", counts, max_items=ITEMS, sigma=SIGMA,
                                  delta=DELTA)
    (row,) = ledger.releases()
    tau = row.params["threshold"]
    noisy = discrete_gaussian(np.asarray([counts[p] for p in sorted(counts)]), SIGMA,
                              secure_rng(7))
    assert released == {p: int(v) for p, v in zip(sorted(counts), noisy, strict=True)
                        if v >= tau}
    assert all(v >= tau for v in released.values())
    ledger.close()
    with Ledger(tmp_path / "l.sqlite", rng=secure_rng(8)) as resumed:  # never redrawn
        assert release_partitions(resumed, "phrases", counts, max_items=ITEMS, sigma=SIGMA,
                                  delta=DELTA) == released
