"""Sample complexity, the learnability window H_N and the master law (METHOD §7).

Per snapshot and lag l: m(l) = |mean_n psi_n(l)|, SNR(l, N) = m N^(1/kappa) / sigma with
1/kappa = 1 - 1/alpha (0 at alpha = 1, so kappa = inf needs no special case), N_hat(l) = the
smallest N of the grid with SNR > eps (NaN when none), N*(l) = (eps sigma / m)^kappa,
H_N = max{l : N_hat(l) <= N} (0 when none), eps_th(l; N) = f(l) (N_hat(l) / N)^(1/kappa).

Choices where METHOD is silent:

* All lags enter SNR, N_hat and H_N, reliable or not (``reliable`` is carried along); a lag whose
  sigma is not positive and finite gets snr = NaN and is never detected (it carries no scale).
  m = 0 gives snr = 0, N* = inf. N* = 0 when the signal beats eps already at N = 1 with
  kappa = inf, inf when it never does.
* Master law: log N*(l) (the continuous sample complexity, not the grid-quantised N_hat) is
  regressed on x = -kappa(alpha(l)) log f(l). With m = c f and constant sigma and alpha,
  log N* = kappa log(eps sigma / c) + x exactly, so the slope is 1 without grid rounding. Lags
  enter when alpha is reliable, kappa finite, f > 0 and 0 < N* < inf; fewer than 3 such lags
  (or constant x) give NaN statistics with a ``flag``. CI: OLS slope +- t(0.975, n - 2) SE.
* Aggregation: H_N over seeds (mean, std with ddof = 1 so NaN for one seed, median, q25, q75).
  The predicted H_N uses the selected decay law of scope "mean" and, per seed, the medians over
  reliable lags (with f > 0) of alpha, sigma and c(l) = m(l) / f(l); then the median over seeds
  (columns pred_alpha, pred_sigma, pred_c). No reliable lag or no decay fit -> predicted NaN
  and law "none".
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import stdtrit  # not scipy.stats, whose import adds ~1.5 s to every window job

from learnwin.alpha import per_sequence
from learnwin.decay import ols, predict_window

RUN_KEYS = ("model", "optimizer", "seed", "epoch")
AGG_KEYS = ["model", "optimizer", "epoch"]


def inv_kappa(alpha) -> np.ndarray:
    """1/kappa = 1 - 1/alpha, clipped at 0 (alpha <= 1 -> kappa = inf)."""
    a = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isnan(a), np.nan, np.clip(1.0 - 1.0 / a, 0.0, None))


def n_star(m, sigma, alpha, eps: float) -> np.ndarray:
    """Continuous sample complexity N* = (eps sigma / m)^kappa, with the edge cases above."""
    m, sigma = np.asarray(m, dtype=float), np.asarray(sigma, dtype=float)
    ik = inv_kappa(alpha)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_r = np.log(eps * sigma) - np.log(m)  # m = 0 -> +inf
        out = np.where(ik > 0, np.exp(log_r / ik), np.where(log_r < 0, 0.0, np.inf))
    return np.where(np.isnan(log_r) | np.isnan(ik), np.nan, out)


def sample_complexity(f, m, sigma, alpha, *, eps: float, N_grid) -> dict[str, np.ndarray]:
    """SNR, detection, N_hat, N*, eps_th on the (lag, N) grid, vectorised over lags."""
    N = np.asarray(N_grid, dtype=float)
    f, m, sigma = (np.asarray(v, dtype=float) for v in (f, m, sigma))
    ik = inv_kappa(alpha)[:, None]
    scale_ok = (np.isfinite(sigma) & (sigma > 0))[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        snr = np.where(scale_ok, m[:, None] * N[None, :] ** ik / sigma[:, None], np.nan)
    detected = snr > eps
    any_det = detected.any(axis=1)
    N_hat = np.where(any_det, N[np.argmax(detected, axis=1)], np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eps_th = f[:, None] * (N_hat[:, None] / N[None, :]) ** ik
    return dict(snr=snr, detected=detected, N_hat=N_hat, N_star=n_star(m, sigma, alpha, eps), eps_th=eps_th)


def learnability_window(lag, N_hat, N_grid) -> np.ndarray:
    """H_N = max{l : N_hat(l) <= N} for every N of the grid (0 when no lag qualifies)."""
    N = np.asarray(N_grid, dtype=float)
    ok = np.asarray(N_hat, dtype=float)[:, None] <= N[None, :]  # NaN -> False
    return np.max(np.where(ok, np.asarray(lag)[:, None], 0), axis=0, initial=0).astype(np.int64)


def master_law(lag_table: pd.DataFrame) -> dict:
    """OLS of log N* on x = -kappa log f over valid lags (see the module docstring)."""
    t = lag_table
    with np.errstate(divide="ignore", invalid="ignore"):
        x = -t["kappa"].to_numpy(float) * np.log(t["f"].to_numpy(float))
        y = np.log(t["N_star"].to_numpy(float))
    ok = t["reliable"].to_numpy(bool) & np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    nan = float("nan")
    out = dict(slope=nan, intercept=nan, r2=nan, slope_lo=nan, slope_hi=nan, n_points=int(ok.sum()))
    if x.size < 3 or np.ptp(x) == 0:
        out["flag"] = f"{x.size} valid lags (need >= 3 with distinct x)"
        return out
    intercept, slope, rss = ols(x, y)
    syy = np.sum((y - y.mean()) ** 2)
    half = stdtrit(x.size - 2, 0.975) * np.sqrt(rss / (x.size - 2) / np.sum((x - x.mean()) ** 2))
    out.update(
        slope=slope, intercept=intercept, r2=1 - rss / syy if syy > 0 else 1.0,
        slope_lo=slope - half, slope_hi=slope + half, flag="",
    )
    return out


def window_table(
    psi: pd.DataFrame, alpha: pd.DataFrame, envelope: pd.DataFrame, *, eps: float, N_grid
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """window.parquet, H_N.parquet and master.parquet rows of one snapshot (METHOD §7)."""
    psi = per_sequence(psi)
    keys = {c: psi[c].iloc[0] for c in RUN_KEYS if c in psi.columns and len(psi)}
    m = psi.groupby("lag")["psi"].mean().abs().rename("m")
    lags = (
        alpha[["lag", "sigma", "alpha", "kappa", "reliable"]]
        .merge(envelope[["lag", "f"]], on="lag")
        .merge(m, left_on="lag", right_index=True)
        .sort_values("lag", ignore_index=True)
    )
    N = np.asarray(N_grid, dtype=np.int64)
    sc = sample_complexity(lags["f"], lags["m"], lags["sigma"], lags["alpha"], eps=eps, N_grid=N)
    lags["N_star"] = sc["N_star"]
    L, G = len(lags), N.size
    window = pd.DataFrame(
        {
            **{k: np.repeat(lags[k].to_numpy(), G) for k in ("lag", "f", "m", "sigma", "alpha", "kappa", "reliable")},
            "N": np.tile(N, L),
            "snr": sc["snr"].ravel(),
            "N_hat": np.repeat(sc["N_hat"], G),
            "N_star": np.repeat(sc["N_star"], G),
            "detected": sc["detected"].ravel(),
            "eps_th": sc["eps_th"].ravel(),
        }
    )
    window = window[["lag", "N", "f", "m", "sigma", "alpha", "kappa", "reliable", "snr", "N_hat", "N_star", "detected", "eps_th"]]
    h_n = pd.DataFrame({"N": N, "H_N": learnability_window(lags["lag"], sc["N_hat"], N)})
    master = pd.DataFrame([master_law(lags)])
    frames = []
    for df in (window, h_n, master):
        for col, val in reversed(keys.items()):
            df.insert(0, col, val)
        frames.append(df)
    window, h_n, master = frames
    return (
        window.astype({"lag": "int64", "N": "int64", "reliable": bool, "detected": bool}),
        h_n,
        master.astype({"n_points": "int64"}),
    )


def predicted_inputs(window: pd.DataFrame) -> pd.DataFrame:
    """Per (model, optimizer, epoch): medians over seeds of the per-seed medians over reliable
    lags of alpha, sigma and c = m / f (the inputs of the predicted H_N)."""
    lags = window.drop_duplicates([*RUN_KEYS, "lag"])
    lags = lags[lags["reliable"] & (lags["f"] > 0)].assign(c=lambda d: d["m"] / d["f"])
    per_seed = lags.groupby([*AGG_KEYS, "seed"])[["alpha", "sigma", "c"]].median()
    return per_seed.groupby(AGG_KEYS).median().add_prefix("pred_").reset_index()


def aggregate(
    h_n_frames, window_frames, master_frames, decay_frames, *, eps: float, N_grid
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """results/stats/{H_N, H_N_agg, master}.parquet from the per-snapshot and decay tables.

    Snapshots whose envelope is NaN at every lag (a diverged run's tombstones) are left out.
    """
    windows = pd.concat(list(window_frames), ignore_index=True)
    finite = np.isfinite(windows["f"].astype(float))
    alive = windows.loc[finite, list(RUN_KEYS)].drop_duplicates()
    h_n = pd.concat(list(h_n_frames), ignore_index=True).merge(alive, on=list(RUN_KEYS))
    grouped = h_n.groupby([*AGG_KEYS, "N"])["H_N"]
    agg = grouped.agg(n_seeds="count", mean="mean", std="std", median="median").reset_index()
    agg["q25"] = grouped.quantile(0.25).to_numpy()
    agg["q75"] = grouped.quantile(0.75).to_numpy()
    agg = agg.astype({"n_seeds": "int64"})
    inputs = predicted_inputs(windows)
    decay = pd.concat(list(decay_frames), ignore_index=True)
    chosen = decay[(decay["scope"] == "mean") & decay["selected"]]
    pred = []
    for key, block in agg.groupby(AGG_KEYS, sort=False):
        row_in = inputs.set_index(AGG_KEYS).reindex([key])
        law_row = chosen.set_index(AGG_KEYS).reindex([key])
        a, s, c = (float(row_in[f"pred_{v}"].iloc[0]) for v in ("alpha", "sigma", "c"))
        if law_row["law"].isna().iloc[0] or not np.isfinite([a, s, c]).all():
            values, law = np.full(len(block), np.nan), "none"
        else:
            law = law_row["law"].iloc[0]
            curve = predict_window(law_row.iloc[0], a, s, c, eps, N_grid)
            values = block["N"].map(dict(zip(np.asarray(N_grid).tolist(), curve))).to_numpy(float)
        pred.append(block.assign(predicted=values, law=law, pred_alpha=a, pred_sigma=s, pred_c=c))
    agg = pd.concat(pred).sort_index() if pred else agg.assign(  # every run diverged
        predicted=np.nan, law="none", pred_alpha=np.nan, pred_sigma=np.nan, pred_c=np.nan)
    master = pd.concat(list(master_frames), ignore_index=True)
    return h_n, agg, master
