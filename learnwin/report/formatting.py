"""Text of numbers and decay-law parameters shared by the summary and the figures
(docs/method.md §8, §9), and the Markdown tables of a committed page read back."""

from __future__ import annotations

import itertools
import math

import pandas as pd

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


def table_after(text: str, heading: str) -> pd.DataFrame:
    """The first Markdown table after ``heading`` in ``text``: its header row as the columns, its
    body rows (the separator row dropped) as strings."""
    lines = text.split(heading, 1)[1].splitlines()
    rows = list(itertools.takewhile(lambda s: s.startswith("|"),
                                    itertools.dropwhile(lambda s: not s.startswith("|"), lines)))
    cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
    return pd.DataFrame(cells[2:], columns=cells[0])
