"""Ground truth of the learnability window: the learned criterion and the bisection over lags
(docs/method.md §10). Pure numpy: the trainings that produce the scores are
:mod:`learnwin.recovery.groundtruth_job`.

* **Score.** r(l) = Pearson correlation, pooled over held-out sequences and t >= l, of a model's
  predictions with the lagged component s_t = u . x_{t-l} (NaN when l >= T or a side is
  constant). :func:`lag_scores` computes it for every lag at once, with its permutation null:
  the ``quantile`` of r with the predictions paired with other held-out sequences' components.
* **Learned.** l is learned when r(l) > threshold and r(l) > |r_ctrl(l)| + null(l), where r_ctrl
  is the score of the shuffled-target control (same init and steps, targets permuted across
  sequences) at the same lag; :func:`margin` is r(l) minus the larger of the two bars.
* **Bisection.** Assuming learned lags form a prefix of the lag grid, :func:`bisect_window`
  finds its last element with 2 + ceil(log2(L - 1)) evaluations of the margin (each one
  training) and reads a continuous H by linear interpolation of the margin between the
  bracketing lags (the lag where it crosses 0). H = 0 when the first lag is not learned; a lag
  learned at the largest grid point is right-censored: H >= lag_max, flagged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd


def lag_scores(pred: np.ndarray, comp: np.ndarray, lags: Sequence[int], *, n_perm: int,
               quantile: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(r, null), each (L,): the score of predictions ``pred`` (n, T) against the lagged
    components ``comp`` (n, T) = u . x_t, shifted by each lag, and its permutation-null quantile.

    Vectorised over lags and permutations: per lag the masked (t >= l) predictions and
    components are standardised, C[a, b] = sum_t zp[a, t] zs[b, t], r = trace(C) / M and a
    permutation pi gives sum_n C[pi(n), n] / M (the pooled means and variances do not depend on
    the pairing of sequences).
    """
    pred, comp = np.asarray(pred, dtype=float), np.asarray(comp, dtype=float)
    n, T = pred.shape
    lags = np.asarray(lags, dtype=int)
    t = np.arange(T)
    mask = t[None, :] >= lags[:, None]  # (L, T): receiving times of each lag
    shifted = np.stack([np.roll(comp, lag, axis=1) for lag in np.minimum(lags, T - 1)])  # (L, n, T)
    m = mask[:, None, :].astype(float)
    count = n * mask.sum(axis=1).astype(float)  # M per lag

    def standardise(a):
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (a * m).sum(axis=(1, 2)) / count
            centred = (a - mean[:, None, None]) * m
            sd = np.sqrt((centred ** 2).sum(axis=(1, 2)) / count)
            return centred / sd[:, None, None], sd

    zp, sd_p = standardise(np.broadcast_to(pred, shifted.shape))
    zs, sd_s = standardise(shifted)
    C = np.einsum("lat,lbt->lab", np.nan_to_num(zp), np.nan_to_num(zs))  # (L, n, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.trace(C, axis1=1, axis2=2) / count
        rng = np.random.default_rng([seed, 7])
        perms = np.stack([rng.permutation(n) for _ in range(n_perm)])  # (P, n)
        r_perm = C[:, perms, np.arange(n)[None, :]].sum(axis=2) / count[:, None]  # (L, P)
        null = np.quantile(r_perm, quantile, axis=1)
    bad = (lags >= T) | ~(sd_p > 0) | ~(sd_s > 0)
    return np.where(bad, np.nan, r), np.where(bad, np.nan, null)


def margin(r, r_ctrl, null, threshold: float) -> np.ndarray:
    """r minus the larger of the effect threshold and |r_ctrl| + null: > 0 means learned (a NaN
    score is not learned)."""
    r, r_ctrl, null = (np.asarray(v, dtype=float) for v in (r, r_ctrl, null))
    out = r - np.maximum(threshold, np.abs(r_ctrl) + null)
    return np.where(np.isnan(out), -np.inf, out)


def bisect_window(lags: Sequence[int], margin_at: Callable[[int], float], known: Sequence[int] = ()) -> dict:
    """The largest learned lag of the sorted grid ``lags`` by bisection on ``margin_at(lag)``
    (called lazily, at most once per lag), and the interpolated H.

    ``known``: lags whose margin is free to ask (already trained, e.g. for another threshold);
    under the same monotonicity they narrow the first bracket (a warm start).

    Returns H (continuous), H_grid (the last learned grid lag, 0 when none), lag_lo and lag_hi
    (the bracketing lags; lag_hi NaN when censored), censored and the evaluated lags in order.
    """
    lags = np.asarray(lags, dtype=int)
    if lags.size == 0 or np.any(np.diff(lags) <= 0) or lags[0] <= 0:
        raise ValueError(f"bisect_window: lags must be positive and strictly increasing, got {lags.tolist()}")
    seen: dict[int, float] = {}

    def at(i: int) -> float:
        lag = int(lags[i])
        if lag not in seen:
            seen[lag] = float(margin_at(lag))
        return seen[lag]

    def result(H, H_grid, lo, hi, censored):
        return dict(H=float(H), H_grid=int(H_grid), lag_lo=lo, lag_hi=hi, censored=censored,
                    evaluated=list(seen))

    if not at(0) > 0:
        return result(0.0, 0, np.nan, float(lags[0]), False)
    last = lags.size - 1
    if at(last) > 0:
        return result(lags[last], lags[last], float(lags[last]), np.nan, True)
    lo, hi = 0, last  # invariant: lags[lo] learned, lags[hi] not
    for lag in sorted(set(known) & set(lags.tolist())):
        i = int(np.searchsorted(lags, lag))
        if lo < i < hi:
            lo, hi = (i, hi) if at(i) > 0 else (lo, i)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at(mid) > 0 else (lo, mid)
    m_lo, m_hi = at(lo), at(hi)
    frac = m_lo / (m_lo - m_hi) if np.isfinite(m_hi) else 0.0
    H = lags[lo] + frac * (lags[hi] - lags[lo])
    return result(H, lags[lo], float(lags[lo]), float(lags[hi]), False)


def monotonicity(scores: pd.DataFrame, window: pd.DataFrame) -> pd.DataFrame:
    """The full-grid arm against bisection, per (model, seed, N, threshold): H_full (the largest
    learned lag of the full grid), holes (unlearned grid lags below it: violations of the
    monotonicity bisection assumes) and whether bisection's H_grid equals H_full. The thresholds
    are the window table's (as stored, so that they match it exactly)."""
    full = scores[scores["arm"] == "full_grid"]
    keys = ["model", "seed", "N", "lag"]
    task = full[full["target"] == "task"].set_index(keys)
    ctrl = full[full["target"] == "control"].set_index(keys)["r"].rename("r_ctrl")
    both = task.join(ctrl, how="left").reset_index()
    bis = window[window["arm"] == "full_grid"][["model", "seed", "N", "threshold", "H_grid"]]
    rows = []
    for thr in np.unique(bis["threshold"]):
        m = margin(both["r"], both["r_ctrl"], both["null"], thr)
        b = both.assign(learned=m > 0)
        for (model, seed, N), g in b.groupby(["model", "seed", "N"], sort=True):
            g = g.sort_values("lag")
            H_full = int(g.loc[g["learned"], "lag"].max()) if g["learned"].any() else 0
            holes = int((~g["learned"] & (g["lag"] < H_full)).sum())
            rows.append(dict(model=model, seed=seed, N=N, threshold=thr, H_full=H_full, holes=holes))
    out = pd.DataFrame(rows, columns=["model", "seed", "N", "threshold", "H_full", "holes"])
    out = out.merge(bis, on=["model", "seed", "N", "threshold"], how="left")
    return out.assign(agrees=out["H_grid"] == out["H_full"])


def steps_check(window: pd.DataFrame) -> pd.DataFrame:
    """H with 2 x steps against H with the main budget at the same (model, seed, N, threshold)."""
    keys = ["model", "seed", "N", "threshold"]
    cols = [*keys, "H", "censored", "steps"]
    main = window.loc[window["arm"] == "main", cols]
    double = window.loc[window["arm"] == "double_steps", cols]
    out = main.merge(double, on=keys, suffixes=("_main", "_double"), how="inner")
    return out.assign(dH=out["H_double"] - out["H_main"])
