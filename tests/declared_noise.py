"""A fake draw for ledger tests whose value does not matter: it declares the Gaussian noise its
charge records (as the real samplers do) and returns a fixed value, so the ledger's check that
a release drew the noise it is charged for (``ledger.check_drawn_noise``) holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpsynrag.accounting.ledger import Charge
from dpsynrag.accounting.rng import RandomSource


def as_drawn(charge: Charge, value: Any) -> Callable[[RandomSource], Any]:
    """A draw for ``charge`` that declares its sigma (if it has one) and returns ``value``."""
    sigma = charge.params.get("sigma")

    def draw(rng: RandomSource) -> Any:
        if sigma is not None:
            rng.declare_noise("gaussian", float(sigma))
        return value

    return draw
