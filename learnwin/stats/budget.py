"""The window under a training budget (docs/method.md §10b): the learning budget N̂_emp(l) per lag
and the window H_emp(N) per budget, from the scores of :func:`learnwin.recovery.budget_job.budget_trainings`.
Pure numpy, vectorised over (model, optimizer, seed), thresholds, lags and budgets.

* **Margin.** m(l, N) = :func:`learnwin.stats.groundtruth.margin` of the lag's own training against
  the control at the same (l, N); a budget a training did not reach (early stop) has no score.
* **Pair.** The first doubling j with m > 0 at N_j and N_{j+1} (:func:`first_pair`): from there the
  lag stays learned. N̂_grid = N_j; N̂ interpolates log N between N_{j-1} and N_j where the margin
  crosses 0 (N_j when m_{j-1} is not finite); j = 0 gives N̂ = N_0, left-censored; no pair gives
  N̂ = N_{max-1}, right-censored there, N̂_grid NaN: a pair starts at N_{max-1} at the latest, so
  the data show only N̂ > N_{max-1} (a lag learned only at N_max does not yet stay learned).
* **Window.** A lag is learned at N when N >= N̂_grid. H_emp(N) is the largest lag of the learned
  prefix of the grid (0 when the first grid lag is not learned: left-censored), right-censored
  when it is the last grid lag; H_max, the largest learned grid lag, and holes, the grid lags below
  it not learned, are secondary. N runs over every budget but the last, which only confirms (no
  lag can become learned there). Lags not run (the frontier rule) are not learned.
* **Over seeds.** :func:`window_over_seeds`: H_emp(N) per model, seed mean ± sd.
* **Claim (d).** :func:`seed_slopes`: per (model, optimizer, seed, epoch, transport, threshold) the
  slope of log N̂ on -log f(l) by the censored likelihood (censored lags kept as censored,
  docs/method.md §10c); :func:`learning_slope`: its seed mean with its Student t-interval over
  seeds (:func:`learnwin.stats.intervals.t_interval`), beside kappa = alpha / (alpha - 1) of the
  same snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from learnwin.stats.alpha import kappa as alpha_kappa
from learnwin.stats.groundtruth import margin
from learnwin.stats.growth import fit_linear
from learnwin.stats.intervals import t_interval
from learnwin.stats.window import PER_LAG

KEYS = ["model", "optimizer", "seed"]
SLOPE_KEYS = ["model", "optimizer", "epoch", "transport", "threshold"]
MIN_SLOPE_LAGS = 3


def first_pair(learned: np.ndarray) -> np.ndarray:
    """Index j of the first pair learned[..., j] & learned[..., j + 1] along the last axis; -1 when none."""
    learned = np.asarray(learned, dtype=bool)
    pair = np.concatenate([learned[..., :-1] & learned[..., 1:], np.ones(learned.shape[:-1] + (1,), bool)], axis=-1)
    j = pair.argmax(axis=-1)  # the sentinel: no pair
    return np.where(j < learned.shape[-1] - 1, j, -1)


def budget_grid(budgets: Sequence[int], batch_size: int = 1) -> np.ndarray:
    """``budgets`` as an int array, checked: at least two, increasing, positive multiples of ``batch_size``."""
    budgets = np.asarray(budgets, dtype=int)
    if budgets.size < 2 or np.any(np.diff(budgets) <= 0) or budgets[0] <= 0 or np.any(budgets % batch_size):
        raise ValueError(f"budgets must be at least two increasing positive multiples of batch_size={batch_size}, "
                         f"got {budgets.tolist()}")
    return budgets


def _grid(scores: pd.DataFrame, budgets: Sequence[int]) -> tuple[pd.MultiIndex, np.ndarray, np.ndarray]:
    """(index of (keys..., lag) over every grid lag, budgets, lags run): the grid lags are the
    control's, which every (model, optimizer, seed) scores at every lag and budget."""
    budgets = budget_grid(budgets)
    ctrl = scores[scores["target"] == "control"]
    missing = set(budgets.tolist()) - set(ctrl["N"].astype(int))
    if missing:
        raise ValueError(f"the control has no scores at budgets {sorted(missing)}")
    index = pd.MultiIndex.from_frame(ctrl[[*KEYS, "lag"]].drop_duplicates().sort_values([*KEYS, "lag"]))
    run = index.isin(pd.MultiIndex.from_frame(scores.loc[scores["target"] == "task", [*KEYS, "lag"]]))
    return index, budgets, run


def _surface(scores: pd.DataFrame, target: str, column: str, index: pd.MultiIndex, budgets: np.ndarray) -> np.ndarray:
    """``column`` of ``target``'s rows as an array (rows of ``index``, budgets); NaN where not scored."""
    table = scores[scores["target"] == target].set_index([*KEYS, "lag", "N"])[column].unstack("N")
    return table.reindex(index=index, columns=budgets).to_numpy(dtype=float)


def learning_budget(scores: pd.DataFrame, thresholds: Sequence[float], budgets: Sequence[int]) -> pd.DataFrame:
    """One row per (model, optimizer, seed, lag of the grid, threshold): N_hat, N_hat_grid,
    left_censored, right_censored and run (whether the lag was trained; a lag not run is
    right-censored). A right-censored N_hat is N_{max-1}, the last reported budget, where the data
    censor it. ``budgets``: the doubling grid the trainings were scored on."""
    index, budgets, run = _grid(scores, budgets)
    r, null = (_surface(scores, "task", c, index, budgets) for c in ("r", "null"))
    r_ctrl = _surface(scores, "control", "r", index, budgets)
    thr = np.asarray(thresholds, dtype=float)
    m = margin(r[None], r_ctrl[None], null[None], thr[:, None, None])  # (threshold, lag, budget)
    j = first_pair(m > 0)
    found = j >= 0
    jj = np.maximum(j, 1)  # the crossing's bracket (N_{j-1}, N_j); j = 0 is left-censored
    m_lo = np.take_along_axis(m, (jj - 1)[..., None], axis=-1)[..., 0]
    m_hi = np.take_along_axis(m, jj[..., None], axis=-1)[..., 0]
    interior = found & (j > 0)
    frac = np.ones(j.shape)  # m_{j-1} not finite (no score): N_j
    ok = interior & np.isfinite(m_lo)
    frac[ok] = m_lo[ok] / (m_lo[ok] - m_hi[ok])
    log_n = np.log(budgets.astype(float))
    n_hat = np.exp(log_n[jj - 1] + frac * (log_n[jj] - log_n[jj - 1]))
    n_hat = np.where(interior, n_hat, np.where(j == 0, budgets[0], budgets[-2]))
    n_grid = np.where(found, budgets[np.maximum(j, 0)], np.nan)
    out = index.to_frame(index=False)
    return pd.concat(
        [out.assign(threshold=t, N_hat=n_hat[i], N_hat_grid=n_grid[i], left_censored=j[i] == 0,
                    right_censored=~found[i], run=run) for i, t in enumerate(thr)],
        ignore_index=True)


def window_by_budget(budget: pd.DataFrame, budgets: Sequence[int]) -> pd.DataFrame:
    """One row per (model, optimizer, seed, N, threshold) from :func:`learning_budget`'s table, N
    every budget but the last, which only confirms (docs/method.md §10b, "Corrections"): H_emp, the
    largest grid lag L with every grid lag up to L learned at N (0 when the first is not:
    left_censored, the window below first_lag); censored when H_emp is the last grid lag; H_max,
    the largest grid lag learned at N (0 when none), and holes, the grid lags below H_max not
    learned at N; lags_run."""
    budgets = budget_grid(budgets)
    cols = [*KEYS, "threshold"]
    table = budget.set_index([*cols, "lag"])["N_hat_grid"].unstack("lag")
    runs = budget.groupby(cols)["run"].sum().reindex(table.index).to_numpy()
    lags = table.columns.to_numpy(dtype=int)
    n_grid = table.to_numpy(dtype=float)  # (group, lag)
    reported = budgets[:-1]
    with np.errstate(invalid="ignore"):
        learned = reported[None, :, None] >= n_grid[:, None, :]  # (group, budget, lag); NaN: never
    prefix = np.cumprod(learned, axis=-1).sum(axis=-1)  # learned grid lags before the first unlearned one
    H = np.where(prefix > 0, lags[np.maximum(prefix - 1, 0)], 0)
    last = np.where(learned.any(axis=-1), lags.size - 1 - learned[..., ::-1].argmax(axis=-1), -1)
    H_max = np.where(last >= 0, lags[np.maximum(last, 0)], 0)
    holes = (np.arange(lags.size)[None, None, :] < last[..., None]) & ~learned
    out = table.index.to_frame(index=False)
    return pd.concat(
        [out.assign(N=N, H_emp=H[:, k], censored=prefix[:, k] == lags.size, left_censored=prefix[:, k] == 0,
                    first_lag=int(lags[0]), H_max=H_max[:, k], holes=holes[:, k].sum(axis=-1), lags_run=runs)
         for k, N in enumerate(reported)],
        ignore_index=True)[[*KEYS, "N", "threshold", "H_emp", "censored", "left_censored", "first_lag", "H_max",
                            "holes", "lags_run"]]


def window_over_seeds(window: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, optimizer, N, threshold) of :func:`window_by_budget`'s table, over its
    seeds: n_seeds, H_mean, H_sd (sample sd, NaN with one seed), n_censored (seeds whose H_emp is
    censored), holes_mean."""
    cols = ["model", "optimizer", "N", "threshold"]
    return window.groupby(cols, sort=False).agg(
        n_seeds=("seed", "nunique"), H_mean=("H_emp", "mean"), H_sd=("H_emp", "std"),
        n_censored=("censored", "sum"), holes_mean=("holes", "mean")).reset_index()


def kappa_inputs(network_h_n: pd.DataFrame) -> pd.DataFrame:
    """The alpha of claim (d) (docs/method.md §10b) from the same networks' window aggregate
    (:func:`learnwin.stats.prediction.network_stats`): pred_alpha under per_lag noise, one row per
    (model, optimizer, epoch, transport)."""
    rows = network_h_n[network_h_n["noise"] == PER_LAG]
    return (rows.drop_duplicates(SLOPE_KEYS[:-1])[[*SLOPE_KEYS[:-1], "pred_alpha"]]
            .rename(columns={"pred_alpha": "alpha"}).reset_index(drop=True))


def kappa_of(alpha) -> np.ndarray:
    """The paper's slope of claim (d), :func:`learnwin.stats.alpha.kappa`, with NaN (no slope to
    compare with) where that is infinite, alpha <= 1 (docs/method.md §10b)."""
    k = np.asarray(alpha_kappa(alpha), dtype=float)
    return np.where(np.isfinite(k), k, np.nan)


def seed_slopes(learning_budget: pd.DataFrame, envelope: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, optimizer, seed, epoch, transport, threshold): slope, the slope s of
    log N_hat = a + s (-log f) + e over the grid lags with finite f > 0 by the censored likelihood
    (docs/method.md §10c: N_hat left-censored at N_0, right-censored at the last reported budget
    N_{max-1}, lags not run right-censored; NaN with fewer than :data:`MIN_SLOPE_LAGS` distinct
    -log f among the uncensored lags), n_lags (uncensored lags), n_left and n_right (censored
    ones). ``envelope``'s ``f`` is each transport's primary functional; lags absent from it are
    dropped."""
    env = envelope[[*KEYS, "epoch", "transport", "lag", "f"]]
    d = learning_budget.merge(env, on=[*KEYS, "lag"], how="inner")
    with np.errstate(divide="ignore", invalid="ignore"):
        d = d.assign(x=-np.log(d["f"].to_numpy(float)), y=np.log(d["N_hat"].to_numpy(float)))
    d = d[np.isfinite(d["x"]) & np.isfinite(d["y"])]
    keys = [*KEYS, "epoch", "transport", "threshold"]
    groups = list(d.groupby(keys, sort=True))
    out = pd.DataFrame([key for key, _ in groups], columns=keys).astype(d[keys].dtypes.to_dict())
    fits = pd.DataFrame([_censored_slope(g) for _, g in groups], columns=["slope", "n_lags", "n_left", "n_right"])
    return pd.concat([out, fits], axis=1)


def _censored_slope(g: pd.DataFrame) -> dict:
    """s of one (model, seed, ...) block's lags by :func:`learnwin.stats.growth.fit_linear`."""
    left, right = g["left_censored"].to_numpy(bool), g["right_censored"].to_numpy(bool)
    x, exact = g["x"].to_numpy(float), ~(left | right)
    counts = dict(n_lags=int(exact.sum()), n_left=int(left.sum()), n_right=int(right.sum()))
    if np.unique(x[exact]).size < MIN_SLOPE_LAGS:
        return dict(slope=np.nan, **counts)
    X = np.stack([np.ones_like(x), x], axis=1)
    return dict(slope=float(fit_linear(X, g["y"], right, left)["params"][1]), **counts)


def learning_slope(learning_budget: pd.DataFrame, envelope: pd.DataFrame, kappa: pd.DataFrame) -> pd.DataFrame:
    """Claim (d) of docs/method.md §10b: one row per (model, optimizer, epoch, transport, threshold)
    of :func:`seed_slopes` over seeds: slope (mean of the seeds' finite slopes), n_seeds, slope_t_lo
    and slope_t_hi (its 95 % Student t-interval over seeds, n_seeds - 1 degrees of freedom; NaN
    with fewer than two seeds, §10 "Intervals over seeds"), alpha and kappa = alpha / (alpha - 1)
    (NaN when alpha <= 1) from ``kappa`` (model, optimizer, epoch, transport, alpha)."""
    per_seed = seed_slopes(learning_budget, envelope)
    rows = []
    for key, g in per_seed.groupby(SLOPE_KEYS, sort=True):
        slope, lo, hi, n = t_interval(g["slope"])
        rows.append(dict(zip(SLOPE_KEYS, key), slope=slope, n_seeds=n, slope_t_lo=lo, slope_t_hi=hi))
    out = pd.DataFrame(rows, columns=[*SLOPE_KEYS, "slope", "n_seeds", "slope_t_lo", "slope_t_hi"])
    a = kappa[[*SLOPE_KEYS[:-1], "alpha"]]
    a = a.assign(kappa=kappa_of(a["alpha"]))
    return out.merge(a, on=SLOPE_KEYS[:-1], how="left", validate="many_to_one")
