"""The detection threshold eps calibrated against the direct measurement of the window
(docs/method.md §7, §7b; the recovery stage measures H_N_emp by training on single-lag tasks).

window.parquet holds snr(l, N) = m(l) N^(1/kappa(l)) / sigma(l) per noise definition. The SNR
grows with N, so N_hat(l) <= N exactly when snr(l, N) > eps, and the window at threshold eps is

    H_N(eps) = max{l : snr(l, N) > eps}   (0 when no lag qualifies).

:func:`calibrate` picks, for one run, the eps whose H_N(eps) is closest to the measured window:
H_N(eps) is a step function of eps that changes only at the snr values, so every candidate is
tried at once (vectorised) and the calibrated eps is the geometric middle of the interval of
thresholds with the smallest |H_N(eps) - H_emp| (choice: the middle, so that a small change of
the snapshot statistics does not move the calibrated window). :func:`out_of_sample` applies one
eps to the other (model, N) points and scores the prediction against the measurement: Spearman's
rho over (model, N) and whether the models rank the same by their window averaged over N.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from learnwin.stats.recovery import model_order, spearman


def window_at(snr: np.ndarray, lags: np.ndarray, eps) -> np.ndarray:
    """H_N(eps) for one N: snr and lags (L,), eps scalar or (E,) -> (E,) int."""
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    detected = np.nan_to_num(snr, nan=-np.inf)[None, :] > eps[:, None]  # (E, L)
    return np.max(np.where(detected, lags[None, :], 0), axis=1, initial=0).astype(np.int64)


def calibrate(snr: np.ndarray, lags: np.ndarray, h_emp: float) -> tuple[float, float, float]:
    """(eps, eps_lo, eps_hi): the geometric middle and ends of the thresholds whose H_N(eps) is
    closest to ``h_emp`` (snr and lags of one run at the calibration N)."""
    s = np.unique(snr[np.isfinite(snr) & (snr > 0)])
    if s.size == 0:
        return np.nan, np.nan, np.nan
    # one candidate inside each interval between consecutive snr values, and one beyond each end
    edges = np.concatenate([[s[0] / 2], np.sqrt(s[:-1] * s[1:]), [s[-1] * 2]])
    err = np.abs(window_at(snr, lags, edges) - h_emp)
    best = np.flatnonzero(err == err.min())
    lo = s[best[0] - 1] if best[0] > 0 else 0.0  # the thresholds of that interval: (lo, hi]
    hi = s[best[-1]] if best[-1] < s.size else np.inf
    middle = np.sqrt(lo * hi) if 0 < lo and np.isfinite(hi) else edges[best].mean()
    return float(middle), float(lo), float(hi)


def predicted_windows(window: pd.DataFrame, eps: float) -> pd.DataFrame:
    """H_N(eps) per (model, optimizer, seed, noise, N) from stacked window.parquet rows."""
    keys = ["model", "optimizer", "seed", "noise", "N"]
    rows = [{**dict(zip(keys, k)), "H_pred": int(window_at(g["snr"].to_numpy(float),
                                                           g["lag"].to_numpy(), eps)[0])}
            for k, g in window.groupby(keys, sort=True)]
    return pd.DataFrame(rows, columns=[*keys, "H_pred"])


def out_of_sample(window: pd.DataFrame, measured: pd.DataFrame, *, model: str, N: int,
                  noise: str) -> dict:
    """Calibrate eps on (model, N) per seed, then predict every other (model, N) with the median
    eps over seeds and score it against the seed-mean measured window (``measured``: recovery
    window rows model, optimizer, seed, N, H_N_emp)."""
    w = window[window["noise"] == noise]
    eps_seed = []
    for seed, g in w[(w["model"] == model) & (w["N"] == N)].groupby("seed"):
        h = measured.loc[(measured["model"] == model) & (measured["N"] == N) & (measured["seed"] == seed),
                         "H_N_emp"]
        if len(h):
            eps_seed.append(calibrate(g["snr"].to_numpy(float), g["lag"].to_numpy(), float(h.iloc[0]))[0])
    eps_seed = np.asarray(eps_seed, dtype=float)
    eps = float(np.nanmedian(eps_seed)) if np.isfinite(eps_seed).any() else np.nan
    pred = predicted_windows(w[w["N"].isin(measured["N"].unique())], eps)
    both = (pred.groupby(["model", "N"])["H_pred"].mean().rename("predicted").to_frame()
            .join(measured.groupby(["model", "N"])["H_N_emp"].mean().rename("measured"), how="inner")
            .reset_index())
    held_out = both[~((both["model"] == model) & (both["N"] == N))]
    rho, p = spearman(held_out["predicted"], held_out["measured"])
    means = both.groupby("model")[["predicted", "measured"]].mean()
    order_pred, order_meas = model_order(means["predicted"]), model_order(means["measured"])
    return {"noise": noise, "eps": eps, "eps_seeds": eps_seed.tolist(), "spearman": rho, "p": p,
            "n_points": int(len(held_out)), "order_predicted": order_pred, "order_measured": order_meas,
            "same_order": order_pred == order_meas, "table": both}
