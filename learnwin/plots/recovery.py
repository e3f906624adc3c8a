"""Figures of the ground truth of the window (docs/method.md §10). Computes nothing: it draws the
stored tables of `snakemake recovery`.

* :func:`plot_recovery_window`: per model, H against N (log x) at one threshold: each seed's H
  (small points, open triangles where censored), the seed mean ± 1 std (solid, band), and the
  leave-one-model-out predictions of the primary variants, from the ground truth's own trained
  networks (dashed: diagonal transport, per_lag; dotted: exact transport, pooled).
* :func:`plot_recovery_scores`: per model, the score r against lag, one colour per N: the task
  trainings (solid, points; the full-grid arm when present, else the bisection's lags), and the
  bar a score must pass, max(threshold, |control| + null) (dotted).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from learnwin.plots.style import MODEL_COLORS, PANEL_H, draw_band, model_panels, no_data, saved, seed_band
from learnwin.stats.prediction import PRIMARY
from learnwin.stats.window import PER_LAG, POOLED

NOISE_STYLE = {PER_LAG: "--", POOLED: ":"}


@saved
def plot_recovery_window(window: pd.DataFrame, prediction: pd.DataFrame, *, threshold: float) -> Figure:
    """H_emp(N) per model with the predicted curves over it."""
    w = window[(window["arm"] == "main") & np.isclose(window["threshold"], threshold)]
    models = [m for m in MODEL_COLORS if m in set(w["model"])]
    fig, axes = model_panels(models)
    pred = prediction[np.isclose(prediction["threshold"], threshold) & prediction["primary"]] \
        if len(prediction) else prediction
    for ax, model in zip(axes, models):
        color, g = MODEL_COLORS[model], w[w["model"] == model]
        if g.empty:
            no_data(ax)
            continue
        ax.scatter(g.loc[~g["censored"], "N"], g.loc[~g["censored"], "H"], s=6, color=color, alpha=0.5, lw=0)
        ax.scatter(g.loc[g["censored"], "N"], g.loc[g["censored"], "H"], s=14, marker="^",
                   facecolor="none", edgecolor=color)
        draw_band(ax, seed_band(g, "N", "H"), "N", color)
        for noise, p in (pred[pred["model"] == model].groupby("noise") if len(pred) else []):
            p = p.sort_values("N")
            ax.plot(p["N"], p["predicted"], color=color, ls=NOISE_STYLE.get(noise, "-."), lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training sequences $N$")
        ax.set_title(model)
    axes[0].set_ylabel(f"window $H_N$ (lags), r > {threshold:g}")
    handles = [Line2D([], [], color="k", marker="o", ms=3, label="measured (seed mean ± std)"),
               Line2D([], [], color="k", marker="^", ls="", mfc="none", label="censored"),
               *[Line2D([], [], color="k", ls=NOISE_STYLE[noise], label=f"predicted, {transport}, {noise}")
                 for _, transport, noise in PRIMARY]]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return fig


@saved
def plot_recovery_scores(scores: pd.DataFrame, *, threshold: float) -> Figure:
    """Score against lag per N (one seed: the full-grid arm's, else the first seed's main arm)."""
    arm = "full_grid" if (scores["arm"] == "full_grid").any() else "main"
    s = scores[scores["arm"] == arm]
    s = s[s["seed"] == s["seed"].min()]
    models = [m for m in MODEL_COLORS if m in set(s["model"])]
    fig, axes = model_panels(models, height=PANEL_H + 0.3)
    Ns = sorted(s["N"].unique())
    cmap = colormaps["viridis"]
    colors = {n: cmap(i / max(len(Ns) - 1, 1)) for i, n in enumerate(Ns)}
    for ax, model in zip(axes, models):
        g = s[s["model"] == model]
        for N, b in g.groupby("N"):
            task = b[b["target"] == "task"].sort_values("lag")
            ctrl = b[b["target"] == "control"].sort_values("lag")
            ax.plot(task["lag"], task["r"], color=colors[N], marker="o", ms=2.5, lw=1)
            bar = np.maximum(threshold, ctrl["r"].abs() + ctrl["null"])
            ax.plot(ctrl["lag"], bar, color=colors[N], ls=":", lw=0.9)
        ax.axhline(threshold, color="0.5", lw=0.6)
        ax.set_xlabel("lag $l$")
        ax.set_title(f"{model} ({arm}, seed {int(g['seed'].min()) if len(g) else '-'})")
    axes[0].set_ylabel("score r (held out)")
    handles = [Line2D([], [], color=colors[n], lw=1.5, label=f"N={n}") for n in Ns]
    handles += [Line2D([], [], color="k", marker="o", ms=2.5, label="task"),
                Line2D([], [], color="k", ls=":", label="max(threshold, |control| + null)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    return fig
