"""Numbers for people to read (no dependencies: imported by every command line)."""

from __future__ import annotations

import math


def format_epsilon(value: float | None, decimals: int = 4) -> str:
    """An epsilon for people to read: float noise removed (12 significant digits), then
    rounded UP to ``decimals`` decimals and trailing zeros dropped, so a display never states
    less privacy loss than was spent: 9.999999999999998 -> "10", 2.20123 -> "2.2013",
    None or infinity -> "inf". Machine-readable outputs (JSON) keep the exact value."""
    if value is None or math.isinf(value):
        return "inf"
    if math.isnan(value):
        return "nan"
    cleaned = float(f"{value:.12g}")
    scale = 10 ** decimals
    rounded = math.ceil(round(cleaned * scale, 6)) / scale
    text = f"{rounded:.{decimals}f}".rstrip("0").rstrip(".")
    return text or "0"
