"""Direct measurement of the learnability window, held against the prediction (beyond the paper):
the statistics over the training jobs of :mod:`learnwin.stats.recovery_job` (which holds the task, the
recovery score, the noise floor, the shuffled-target control and the seeding). Pure
pandas/scipy: no torch.

Choices:

* **Learned rule.** l is learned with N when r > threshold and r > r_ctrl + null.
* **Empirical window.** H_N_emp(N) = the largest learned lag of the grid (0 when none), per
  (model, optimizer, seed); over seeds: mean, std (ddof = 1), median, min, max. H_N_emp is
  non-decreasing "within noise" when every drop of the seed mean between consecutive N is at
  most the larger seed std of the two points.
* **Comparison.** Per snapshot epoch, against H_N of the snapshot statistics (column ``mean`` of
  H_N_agg, docs/method.md §7) and the decay-class prediction (``predicted``, docs/method.md §8) at N = n_train:
  Spearman rank correlation over all (model, N) points with finite values, and whether the
  model ordering (models ranked by their window averaged over N) is the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

KEYS = ["model", "optimizer", "seed", "lag"]


def learned(rows: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """The true-target rows with r_ctrl and ``learned`` = r > threshold and r > r_ctrl + null.

    r_ctrl is the largest |control recovery| of the same (model, optimizer, seed, lag); a lag
    without any control row is an error.
    """
    true = rows[rows["target"] == "true"].drop(columns="target")
    ctrl = (rows[rows["target"] == "shuffled"].assign(recovery=lambda d: d["recovery"].abs())
            .groupby(KEYS)["recovery"].max()
            .rename("r_ctrl").reset_index())
    out = true.merge(ctrl, on=KEYS, how="left")
    missing = out.loc[out["r_ctrl"].isna() & (out["null"].notna()), KEYS].drop_duplicates()
    if len(missing):
        raise ValueError(f"no shuffled-target control for {missing.to_dict('records')}")
    out["learned"] = (out["recovery"] > threshold) & (out["recovery"] > out["r_ctrl"] + out["null"])
    return out.sort_values([*KEYS, "n_train"], ignore_index=True)


def empirical_window(table: pd.DataFrame) -> pd.DataFrame:
    """H_N_emp per (model, optimizer, seed, N): the largest learned lag (0 when none)."""
    lag = table["lag"].where(table["learned"], 0)
    out = (table.assign(lag_learned=lag).groupby(["model", "optimizer", "seed", "n_train"])
           ["lag_learned"].max().rename("H_N_emp").reset_index())
    return out.rename(columns={"n_train": "N"}).astype({"H_N_emp": "int64"})


def aggregate_window(window: pd.DataFrame) -> pd.DataFrame:
    """Seed statistics of H_N_emp per (model, optimizer, N) and the ``monotone`` flag."""
    g = window.groupby(["model", "optimizer", "N"])["H_N_emp"]
    agg = g.agg(n_seeds="count", emp_mean="mean", emp_std="std", emp_median="median",
                emp_min="min", emp_max="max").reset_index()
    flags = {key: nondecreasing_within_noise(b.sort_values("N")["emp_mean"], b.sort_values("N")["emp_std"])
             for key, b in agg.groupby(["model", "optimizer"])}
    agg["monotone"] = [flags[key] for key in zip(agg["model"], agg["optimizer"])]
    return agg.astype({"n_seeds": "int64"})


def nondecreasing_within_noise(mean: Sequence[float], std: Sequence[float]) -> bool:
    """Every drop of the seed mean between consecutive N is <= the larger std of the two."""
    m = np.asarray(mean, dtype=float)
    s = np.nan_to_num(np.asarray(std, dtype=float))
    return bool(np.all(m[:-1] - m[1:] <= np.maximum(s[:-1], s[1:])))


def compare(agg: pd.DataFrame, h_n_agg: pd.DataFrame) -> pd.DataFrame:
    """Empirical window next to the predicted ones per (model, optimizer, epoch, noise, N); the
    noise definition (docs/method.md §7b) is carried when ``h_n_agg`` has one."""
    noise = ["noise"] if "noise" in h_n_agg else []
    pred = h_n_agg[["model", "optimizer", "epoch", *noise, "N", "mean", "predicted", "law"]].rename(
        columns={"mean": "H_N_snapshot", "predicted": "H_N_decay"})
    out = agg.merge(pred, on=["model", "optimizer", "N"], how="left")
    return out.sort_values(["optimizer", "epoch", *noise, "model", "N"], ignore_index=True)


def agreement(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per (optimizer, epoch[, noise], source): Spearman of empirical vs predicted over (model, N), and
    whether models rank the same by their window averaged over N."""
    rows = []
    noise = ["noise"] if "noise" in comparison else []
    for key, block in comparison.dropna(subset=["epoch"]).groupby(["optimizer", "epoch", *noise]):
        opt, epoch = key[:2]
        extra = dict(noise=key[2]) if noise else {}
        for source, col in (("snapshot", "H_N_snapshot"), ("decay", "H_N_decay")):
            ok = block[np.isfinite(block[col]) & np.isfinite(block["emp_mean"])]
            rho, p = spearman(ok["emp_mean"], ok[col])
            means = ok.groupby("model")[["emp_mean", col]].mean()
            emp_rank = means["emp_mean"].rank(method="average")
            pred_rank = means[col].rank(method="average")
            rows.append(dict(
                optimizer=opt, epoch=epoch, **extra, source=source, n_points=len(ok), spearman=rho,
                p_value=p, order_empirical=model_order(means["emp_mean"]), order_predicted=model_order(means[col]),
                order_agrees=bool(len(means) > 1 and emp_rank.equals(pred_rank)),
            ))
    return pd.DataFrame(rows).astype({"n_points": "int64"})


def spearman(a, b) -> tuple[float, float]:
    """Spearman's rho and its p-value (NaN with fewer than 3 points or a constant side)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan"), float("nan")
    res = stats.spearmanr(a, b)
    return float(res.statistic), float(res.pvalue)


def model_order(values: pd.Series) -> str:
    """Models from the largest to the smallest window, '=' between ties: 'gru>lstm=diag'."""
    ranked = values.sort_values(ascending=False, kind="stable")
    out = "".join(str(name) for name in ranked.index[:1])
    for name, v, prev in zip(ranked.index[1:], ranked.to_numpy()[1:], ranked.to_numpy()[:-1]):
        out += ("=" if np.isclose(v, prev) else ">") + str(name)
    return out
