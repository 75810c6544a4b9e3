"""The continuous Laplace distribution, sampled by inverse CDF on the package's CSPRNG.

``laplace(scale, rng)`` returns Lap(scale) variates. Adding Lap(Delta_1 / epsilon) to a query of
l1 sensitivity Delta_1 is epsilon-DP (Dwork, McSherry, Nissim & Smith 2006), hence
epsilon^2 / 2 zCDP (Bun & Steinke 2016, Proposition 1.4). Callers account for the mechanism they
build on top (see ``sparse_vector``); this module is the noise primitive only.

Caveat: the draw is floating point (53-bit uniforms, ``log1p``), so it inherits the usual
floating-point Laplace caveats (Mironov 2012) for the low-order bits of a released value. The
package uses it only for internal comparisons (the sparse-vector threshold and query noise),
whose noisy values are never released.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from dpsynrag.accounting.rng import RandomSource


def _check_scale(scale: float) -> None:
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite positive number, got {scale!r}")


def laplace(
    scale: float, rng: RandomSource, size: int | tuple[int, ...] | None = None
) -> float | np.ndarray:
    """Laplace(0, ``scale``) variates: density exp(-|x| / scale) / (2 scale).

    Inverse CDF on an open-interval uniform u in (0, 1): with v = u - 1/2,
    x = -scale * sign(v) * ln(1 - 2|v|). Since u < 1 and u > 0, the logarithm's argument is
    strictly positive, so the output is always finite. ``size=None`` returns one float.
    """
    _check_scale(scale)
    count = 1 if size is None else size
    centred = rng.open_unit(count) - 0.5
    values = -float(scale) * np.sign(centred) * np.log1p(-2.0 * np.abs(centred))
    if size is None:
        return float(values.reshape(-1)[0])
    return values
