"""The build's privacy target when none is given, shared by ``build-corpus`` and ``dpsynrag
budget`` (and their help texts).

A module of plain constants: the command lines read it when they build their parsers, so it
must load nothing (``pipeline.config`` loads scipy through the conversions).
"""

from __future__ import annotations

__all__ = ["DEFAULT_DELTA", "DEFAULT_EPSILON"]

#: target epsilon of a build (and of a budget plan) without --epsilon
DEFAULT_EPSILON = 10.0
#: target delta of a build (and of a budget plan) without --delta
DEFAULT_DELTA = 1e-3
