"""Figures of the window under a training budget (docs/method.md §10b). They draw the stored tables
of the budget protocol; the only aggregation is the display's seed mean (± 1 sd).

* :func:`plot_budget_surface`: per model, the held-out score r(l, N) of each lag's own training as a
  heat map over (log2 N, lag), the mean over the seeds that scored the cell (blank: not scored; a
  lag's training stops once it is learned at two consecutive budgets, and lags beyond the frontier
  are not run), with H_emp(N) (seed mean, one threshold) over it; triangles where a seed is censored.
* :func:`plot_budget_window`: H_emp(N) per model against N (log2 x), one panel per threshold: seed
  mean ± 1 sd; open triangles where a seed is censored (the last grid lag learned); dashed, the
  primary variant's leave-one-model-out prediction (the confirmatory test's, §10b).
* :func:`plot_budget_N_hat`: log2 N̂_emp(l) against the lag per model, one panel per threshold: seed
  mean ± 1 sd over the lags run; open up-triangles where a seed is right-censored at N_max (the lag
  never stays learned), down-triangles where one is left-censored at the first budget.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from learnwin.plots.style import (
    MODEL_COLORS,
    PANEL_H,
    draw_band,
    model_legend,
    model_panels,
    no_data,
    saved,
    seed_band,
    subplots,
)

CENSORED = dict(marker="^", facecolor="none", s=22, zorder=3)
#: A black outline that keeps the white H_emp line visible over every colour of the heat map.
OUTLINE = [patheffects.withStroke(linewidth=2.6, foreground="k")]


def _models(df: pd.DataFrame) -> list[str]:
    """The models of ``df`` in the registry's order, then the others (plain modules, black)."""
    return [m for m in MODEL_COLORS if m in set(df["model"])] + sorted(set(df["model"]) - set(MODEL_COLORS))


def _at(df: pd.DataFrame, threshold: float) -> pd.DataFrame:
    return df[np.isclose(df["threshold"], threshold)]


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges around increasing ``centres``: the midpoints, and half a step beyond each end."""
    c = np.asarray(centres, dtype=float)
    step = np.diff(c) if c.size > 1 else np.ones(1)
    mid = c[:-1] + step / 2
    return np.concatenate([[c[0] - step[0] / 2], mid, [c[-1] + step[-1] / 2]])


def _censored_legend(*markers: tuple[str, str]) -> list[Line2D]:
    return [Line2D([], [], color="k", marker=m, ls="", mfc="none", label=label) for m, label in markers]


@saved
def plot_budget_surface(scores: pd.DataFrame, h_emp: pd.DataFrame, *, threshold: float) -> Figure:
    """Heat map of r(l, N) per model with H_emp(N) at ``threshold`` over it."""
    task = scores[scores["target"] == "task"]
    models = _models(scores)
    fig, axes = model_panels(models, height=PANEL_H + 0.4)
    lags = np.sort(scores.loc[scores["target"] == "control", "lag"].unique())
    budgets = np.sort(scores["N"].unique())
    x = np.log2(budgets.astype(float))
    mesh = None
    for ax, model in zip(axes, models):
        r = (task[task["model"] == model].groupby(["lag", "N"])["r"].mean().unstack("N")
             .reindex(index=lags, columns=budgets))
        mesh = ax.pcolormesh(_edges(x), _edges(lags), np.ma.masked_invalid(r.to_numpy(dtype=float)),
                             cmap="viridis", vmin=0.0, vmax=1.0)
        h = _at(h_emp, threshold)
        h = h[h["model"] == model].sort_values("N")
        ax.plot(np.log2(h["N"].astype(float)), h["H_mean"], color="w", marker="o", ms=2.5, lw=1.3,
                path_effects=OUTLINE)
        cens = h[h["n_censored"] > 0]
        ax.scatter(np.log2(cens["N"].astype(float)), cens["H_mean"], edgecolor="w", **CENSORED)
        ax.set_xlabel("$\\log_2 N$ (training budget)")
        ax.set_title(model)
    if mesh is None:
        no_data(axes[0])
    else:
        fig.colorbar(mesh, ax=list(axes), label="score r (seed mean)", shrink=0.9)
    axes[0].set_ylabel("lag $l$")
    handles = [Line2D([], [], color="w", marker="o", ms=3, lw=1.3, label=f"$H_{{emp}}(N)$, r > {threshold:g}",
                      path_effects=OUTLINE),
               *_censored_legend(("^", "censored (a seed learns the last lag)"))]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return fig


def _per_threshold(df: pd.DataFrame, draw, *, xlabel: str, ylabel: str, extra: list[Line2D]) -> Figure:
    """One panel per threshold of ``df``, ``draw(ax, rows, colour)`` once per model in it."""
    thresholds = np.sort(df["threshold"].unique()) if len(df) else np.array([np.nan])
    fig, axes = subplots(1, thresholds.size)
    models = _models(df)
    for ax, t in zip(axes[0], thresholds):
        rows = _at(df, t)
        if rows.empty:
            no_data(ax)
            continue
        for model in models:
            draw(ax, rows[rows["model"] == model], MODEL_COLORS.get(model, "k"))
        ax.set_xlabel(xlabel)
        ax.set_title(f"r > {t:g}")
    axes[0, 0].set_ylabel(ylabel)
    model_legend(fig, models, extra)
    return fig


def _draw_window(ax, g: pd.DataFrame, color) -> None:
    g = g.sort_values("N")
    band = g.rename(columns={"H_mean": "mean", "H_sd": "std"}).fillna({"std": 0.0})
    draw_band(ax, band[["N", "mean", "std"]], "N", color)
    cens = g[g["n_censored"] > 0]
    ax.scatter(cens["N"], cens["H_mean"], edgecolor=color, **CENSORED)
    ax.plot(g["N"], g["predicted"], color=color, ls="--", lw=1.0)
    ax.set_xscale("log", base=2)


@saved
def plot_budget_window(h_emp: pd.DataFrame, prediction: pd.DataFrame) -> Figure:
    """H_emp(N) per model against N, one panel per threshold, with the primary variant's
    prediction (rows of ``prediction`` flagged ``primary``; NaN where it has none)."""
    pred = prediction[prediction["primary"]] if len(prediction) else pd.DataFrame(
        columns=["model", "N", "threshold", "predicted"])
    rows = h_emp.merge(pred[["model", "N", "threshold", "predicted"]], on=["model", "N", "threshold"], how="left")
    extra = [*_censored_legend(("^", "censored")), Line2D([], [], color="k", ls="--", lw=1.0, label="predicted")]
    return _per_threshold(rows, _draw_window, xlabel="training budget $N$ (sequences, one pass)",
                          ylabel="$H_{emp}(N)$ (lags; seed mean ± sd)", extra=extra)


def _draw_N_hat(ax, g: pd.DataFrame, color) -> None:
    band = seed_band(g.assign(log2N=np.log2(g["N_hat"].astype(float))), "lag", "log2N")
    draw_band(ax, band, "lag", color)
    flags = g.groupby("lag")[["right_censored", "left_censored"]].any().reindex(band["lag"])
    for column, marker in (("right_censored", "^"), ("left_censored", "v")):
        at = band[flags[column].to_numpy()]
        ax.scatter(at["lag"], at["mean"], edgecolor=color, **{**CENSORED, "marker": marker})


@saved
def plot_budget_N_hat(learning_budget: pd.DataFrame) -> Figure:
    """log2 N̂_emp(l) against the lag per model (lags run), one panel per threshold."""
    extra = _censored_legend(("^", "right-censored at $N_{max}$"), ("v", "left-censored at the first budget"))
    return _per_threshold(learning_budget[learning_budget["run"]], _draw_N_hat, xlabel="lag $l$",
                          ylabel="$\\log_2 \\hat N_{emp}(l)$ (seed mean ± sd)", extra=extra)
