"""The sparse vector technique (AboveThreshold), "below" direction, as in Koga et al.'s
DPSparseVoteRAG (Algorithm 2): a query "triggers" when its noisy value falls at or below the
noisy threshold.

One epoch: draw tau_hat = tau + Lap(2 Delta / epsilon) once; answer each query a_t (l1
sensitivity Delta, chosen adaptively) with fresh noise, triggering when
a_t + Lap(4 Delta / epsilon) <= tau_hat; after a trigger, redraw tau_hat (a new epoch).

Privacy: each epoch -- any number of non-triggering queries up to and including one trigger --
is epsilon-DP (Dwork & Roth 2014, Theorem 3.23, with the comparison direction reversed, which
changes nothing), charged as epsilon^2 / 2 zCDP. c triggers cost c epochs; queries after the
last trigger belong to the current (already charged) epoch. Callers must charge an epoch before
running it (e.g. charge c_max epochs up front, as Koga et al. do).

The noisy threshold is private: it is held in a private attribute, and neither ``repr`` nor any
public attribute reveals it.
"""

from __future__ import annotations

import math
from numbers import Real

from dpsynrag.accounting.laplace import laplace
from dpsynrag.accounting.rng import RandomSource


def _is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


class SparseVectorBelow:
    """AboveThreshold with a "value <= threshold" trigger; see the module docstring.

    ``epochs`` counts the triggers so far (each closed epoch costs epsilon-DP).
    """

    __slots__ = ("_epsilon", "_rng", "_sensitivity", "_threshold", "_threshold_hat", "epochs")

    def __init__(
        self, threshold: float, epsilon: float, rng: RandomSource, sensitivity: float = 1.0
    ) -> None:
        if not (_is_real(threshold) and math.isfinite(threshold)):
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
        if not (_is_real(epsilon) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
        if not (
            _is_real(sensitivity) and math.isfinite(sensitivity) and sensitivity > 0
        ):
            raise ValueError(f"sensitivity must be a finite positive number, got {sensitivity!r}")
        self._threshold = float(threshold)
        self._epsilon = float(epsilon)
        self._sensitivity = float(sensitivity)
        self._rng = rng
        self.epochs = 0
        self._threshold_hat = self._draw_threshold()

    @property
    def threshold_scale(self) -> float:
        """Laplace scale of the threshold noise, 2 Delta / epsilon."""
        return 2.0 * self._sensitivity / self._epsilon

    @property
    def query_scale(self) -> float:
        """Laplace scale of the per-query noise, 4 Delta / epsilon."""
        return 4.0 * self._sensitivity / self._epsilon

    def _draw_threshold(self) -> float:
        return self._threshold + float(laplace(self.threshold_scale, self._rng))

    def triggered(self, value: float) -> bool:
        """True when value + Lap(4 Delta / epsilon) <= tau_hat; a trigger redraws tau_hat.

        Fresh query noise on every call. The outcome is the only thing to release.
        """
        if not (_is_real(value) and math.isfinite(value)):
            raise ValueError(f"value must be a finite number, got {value!r}")
        noisy = float(value) + float(laplace(self.query_scale, self._rng))
        if noisy <= self._threshold_hat:
            self.epochs += 1
            self._threshold_hat = self._draw_threshold()
            return True
        return False

    def __repr__(self) -> str:
        return (
            f"SparseVectorBelow(threshold={self._threshold!r}, epsilon={self._epsilon!r}, "
            f"sensitivity={self._sensitivity!r}, epochs={self.epochs})"
        )
