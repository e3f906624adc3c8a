"""Intervals over a few seeds (docs/method.md §10, "Intervals over seeds").

A percentile bootstrap of a mean over n seeds resamples n values: with three seeds its 95 %
interval is close to the lowest and the highest seed, and covers the mean far less often than
95 %. Over seeds the interval is the Student t-interval of the mean, with n - 1 degrees of
freedom, named as such where it is stored (``*_t_lo``, ``*_t_hi``) and printed beside each
seed's value.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

T_LEVEL = 0.95  # two-sided coverage of t_interval


def t_interval(values, level: float = T_LEVEL) -> tuple[float, float, float, int]:
    """(mean, lo, hi, n) of the finite ``values``: mean ± t_{(1 + level) / 2, n - 1} sd / sqrt(n),
    sd with ddof 1; lo and hi NaN with fewer than two values, the mean NaN with none."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.nan, np.nan, np.nan, 0
    mean = float(v.mean())
    if v.size < 2:
        return mean, np.nan, np.nan, 1
    half = float(stats.t.ppf((1 + level) / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return mean, mean - half, mean + half, int(v.size)
