"""Regenerate ``learnwin/stats/tables/mcculloch_alpha.csv``: the symmetric McCulloch table (docs/method.md §6).

For symmetric alpha-stable laws (beta = 0, scale 1, S1 = S0 parametrisation) the table lists,
per alpha in [1, 2], the quantile ratio R(alpha) = (q95 - q05) / (q75 - q25) = q95 / q75 and the
unit-scale quartile q75 (so that sigma = IQR / (2 q75(alpha))). Values come from
``scipy.stats.levy_stable.ppf``. scipy evaluates every alpha with |alpha - 1| <= 0.005 as the
Cauchy law, so the grid is alpha = 1 followed by 200 points evenly spaced on [1.01, 2]; the table
is checked to be strictly monotone before it is written.

Usage: ``python tools/build_alpha_table.py [OUTPUT_CSV]`` (about 5 s on one core).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import levy_stable

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "learnwin" / "tables" / "mcculloch_alpha.csv"


def build() -> pd.DataFrame:
    alpha = np.concatenate([[1.0], np.linspace(1.01, 2.0, 200)])
    q75, q95 = levy_stable.ppf([[0.75], [0.95]], alpha[None, :], 0.0)
    table = pd.DataFrame({"alpha": alpha, "ratio": q95 / q75, "q75": q75})
    if not (np.all(np.diff(table["ratio"]) < 0) and np.all(np.diff(table["q75"]) < 0)):
        raise RuntimeError("McCulloch table is not strictly decreasing; check scipy's levy_stable")
    return table


def main(out: str | Path = DEFAULT_OUT) -> None:
    table = build()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False, float_format="%.12g")
    print(f"wrote {len(table)} rows to {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
