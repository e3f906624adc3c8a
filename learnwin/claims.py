"""The paper's four claims, measured on one run's artifacts (issue 8; METHOD §4, §7, §8).

:func:`claim_metrics` gives one row per (model, optimizer) at one snapshot epoch, from the
seed-mean envelope and the per-seed tables:

- ``val_r2``: mean validation R² of the checkpoint (does the model learn the task at all);
- ``law``: the decay class selected for the seed-mean envelope (METHOD §8);
- ``tau_env``: -1 / slope of the OLS of log f on l over the lag grid (the envelope's decay
  length, comparable across classes; larger = slower decay);
- ``decel``: the slope over the second half of the lag grid divided by the slope over the first
  half (1 for an exponential, < 1 when the decay slows down as for a power law);
- ``tau_iqr``: IQR over units of tau_q (finite values), mean over seeds;
- ``H_low``, ``H_mid``, ``H_max``: seed-mean H_N at N_max / 256, N_max / 16 and N_max;
  ``accel`` = (H_max - H_mid) / (H_mid - H_low), the growth over the last factor 16 of N against
  the factor 16 before it. An exponential envelope gives H_N linear in log N (accel about 1; less
  when it saturates), a power law H_N ~ N^(1/(beta kappa)) (accel > 1). ``capped`` when H_max is
  within one step of the largest diagnostic lag, where H_N cannot grow further;
- ``slope``, ``slope_r2``: master-law slope and R², mean over seeds.

:func:`claim_verdicts` turns the rows into one line per claim (a)-(d) with counts, so a sweep can
rank configs. The thresholds are choices, stated in each verdict's text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from learnwin import io
from learnwin.decay import ols

SLOW = ["diag", "gru", "lstm"]  # the paper's slowly decaying (power-law-like) cells
FAST = ["const", "shared"]  # exponential, saturating H_N


def _log_slope(lag: np.ndarray, f: np.ndarray) -> float:
    ok = np.isfinite(f) & (f > 0)
    if ok.sum() < 3:
        return float("nan")
    return float(ols(lag[ok], np.log(f[ok]))[1])


def envelope_shape(lag: np.ndarray, f: np.ndarray) -> tuple[float, float]:
    """(tau_env, decel) of one envelope: -1 / OLS slope of log f on l, late / early slope."""
    lag, f = np.asarray(lag, dtype=float), np.asarray(f, dtype=float)
    slope = _log_slope(lag, f)
    half = len(lag) // 2
    early, late = _log_slope(lag[:half + 1], f[:half + 1]), _log_slope(lag[half:], f[half:])
    tau = -1.0 / slope if slope < 0 else float("inf")
    return tau, late / early if early < 0 else float("nan")


def claim_metrics(results: str | Path, models, optimizers, seeds, epoch: str = "best") -> pd.DataFrame:
    """One row per (model, optimizer) of the run in ``results`` (a ``results/`` directory)."""
    results = Path(results)
    summary = io.read_table(results / "summary.parquet", "summary")
    H = io.read_table(results / "stats" / "H_N_agg.parquet", "H_N")
    master = io.read_table(results / "stats" / "master.parquet", "master")
    rows = []
    for opt in optimizers:
        for model in models:
            snaps = [results / "snapshots" / opt / model / f"seed{s}" / f"epoch{epoch}" for s in seeds]
            env = pd.concat([io.read_table(p / "envelope.parquet", "envelope") for p in snaps])
            mean_f = env.groupby("lag")["f"].mean()
            lags = mean_f.index.to_numpy()
            tau, decel = envelope_shape(lags, mean_f.to_numpy())
            iqr = []
            for p in snaps:
                taus = io.read_table(p / "units.parquet", "units").groupby("unit")["tau"].first()
                taus = taus[np.isfinite(taus)]
                iqr.append(np.subtract(*np.percentile(taus, [75, 25])) if len(taus) else np.nan)
            decay = io.read_table(results / "decay" / opt / model / f"epoch{epoch}.parquet", "decay")
            law = decay.loc[decay["selected"] & (decay["scope"] == "mean"), "law"]
            h = H[(H["model"] == model) & (H["optimizer"] == opt) & (H["epoch"] == epoch)].sort_values("N")
            n_max = h["N"].max()
            at = lambda n: h.loc[h["N"] == h["N"][h["N"] <= n].max(), "mean"].iloc[0]  # noqa: E731
            h_low, h_mid, h_max = at(n_max / 256), at(n_max / 16), at(n_max)
            with np.errstate(divide="ignore", invalid="ignore"):
                accel = np.float64(h_max - h_mid) / np.float64(h_mid - h_low)
            sel = lambda t: t[(t["model"] == model) & (t["optimizer"] == opt) & (t["epoch"] == epoch)]  # noqa: E731
            m = sel(master)
            rows.append(dict(
                model=model, optimizer=opt, val_r2=sel(summary)["val_r2"].mean(),
                law=law.iloc[0] if len(law) else "none", tau_env=tau, decel=decel,
                tau_iqr=float(np.nanmean(iqr)), H_low=h_low, H_mid=h_mid, H_max=h_max, accel=accel,
                capped=bool(h_max >= lags.max() - np.diff(lags).min()),
                slope=m["slope"].mean(), slope_r2=m["r2"].mean(),
            ))
    return pd.DataFrame(rows)


def claim_verdicts(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per claim (a)-(d): the number of checks that hold, out of how many, and the rule."""
    m = metrics.set_index(["optimizer", "model"])
    out = []
    if "adamw" in m.index.get_level_values(0):
        a = m.loc["adamw"]
        fast_tau = a.loc[a.index.intersection(FAST), "tau_env"].max()
        slow = a.loc[a.index.intersection(SLOW)]
        out.append(("a", int((slow["tau_env"] > fast_tau).sum() + (slow["decel"] < 0.8).sum()), 2 * len(slow),
                    "AdamW: each of diag/gru/lstm decays slower (tau_env) than const and shared, and "
                    "decelerates (decel < 0.8)"))
        fast = a.loc[a.index.intersection(FAST)]
        out.append(("b", int((fast["accel"] <= 1).sum() + (slow["accel"] > 1).sum()), len(fast) + len(slow),
                    "AdamW: H_N does not accelerate in log N for const/shared (accel <= 1), and does for "
                    "diag/gru/lstm (accel > 1)"))
    if {"adamw", "sgd"} <= set(m.index.get_level_values(0)):
        a, s = m.loc["adamw"], m.loc["sgd"]
        common = a.index.intersection(s.index)
        checks = (a.loc[common, "tau_env"] > s.loc[common, "tau_env"]).sum() + \
            (a.loc[common, "tau_iqr"] > s.loc[common, "tau_iqr"]).sum()
        out.append(("c", int(checks), 2 * len(common),
                    "per model: AdamW's envelope decays slower (tau_env) and its tau_q IQR is larger than SGD's"))
    near = ((m["slope"] - 1).abs() <= 0.3) & (m["slope_r2"] >= 0.5)
    out.append(("d", int(near.sum()), len(m), "per (model, optimizer): master slope within 1 +- 0.3 with R^2 >= 0.5"))
    return pd.DataFrame(out, columns=["claim", "holds", "of", "rule"])
