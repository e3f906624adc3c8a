"""Text of numbers and decay-law parameters shared by the summary and the figures
(docs/method.md §8, §9)."""

from __future__ import annotations

import math

#: Name of the scale parameter of each decay law (docs/method.md §8).
SCALE_NAME = {
    "exp": "τ",
    "power": "β",
    "log": "γ",
    "tempered": "β",
    "exp_floor": "τ",
    "power_floor": "β",
    "log_floor": "γ",
}


def fmt(value, digits: int = 3, missing: str = "n/a") -> str:
    """``value`` to ``digits`` significant digits; ``missing`` when NaN or infinite."""
    value = float(value)
    return missing if not math.isfinite(value) else f"{value:.{digits}g}"
