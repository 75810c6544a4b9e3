"""Epsilons shown to people: float noise gone, never rounded down."""

from __future__ import annotations

import math

import pytest

from dpsynrag.display import format_epsilon


@pytest.mark.parametrize(("value", "shown"), [
    (9.999999999999998, "10"), (10.0, "10"), (10.000000000000002, "10"), (2.20123, "2.2013"),
    (2.2012, "2.2012"), (43.29999, "43.3"), (0.0, "0"), (1e-5, "0.0001"), (None, "inf"),
    (math.inf, "inf")])
def test_epsilon_display(value: float | None, shown: str) -> None:
    assert format_epsilon(value) == shown


def test_display_never_understates_a_spent_epsilon() -> None:
    gen = __import__("random").Random(3)
    for _ in range(2000):
        value = gen.uniform(0, 50)
        assert float(format_epsilon(value)) >= value - 1e-10
        assert float(format_epsilon(value)) - value <= 1e-4 + 1e-10
