"""Figures of the learnability window, the master law and the tail index (docs/method.md §6, §7,
§7b): figures 1, 5, 6, 7, 9 and the exponents figure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from learnwin.plots.style import (
    MODEL_COLORS,
    cell,
    draw_band,
    finite,
    log_ok,
    model_legend,
    no_data,
    noise_rows,
    saved,
    seed_band,
    sel,
    subplots,
)
from learnwin.stats.window import master_points


@saved
def plot_H_N(H_N_agg, *, models, optimizers, epoch) -> Figure:
    """Figure 1: learnability window H_N vs budget N (log x), one row per optimizer and noise
    definition (docs/method.md §7b).

    Left: mean ± 1 std over seeds; right: median and IQR. Dashed: H_N predicted in closed
    form from the decay class selected for the seed-mean envelope (docs/method.md §7-§8).
    """
    agg = sel(H_N_agg, epoch=epoch)
    panels = noise_rows(agg, optimizers)
    fig, axes = subplots(len(panels), 2)
    for row, (opt, noise) in enumerate(panels):
        for col, (centre, lo, hi, title) in enumerate(
            [
                ("mean", None, None, "mean ± 1 std over seeds"),
                ("median", "q25", "q75", "median, IQR"),
            ]
        ):
            ax, drawn, top = axes[row, col], False, 0.0
            for model in models:
                sub = finite(sel(agg, optimizer=opt, model=model, noise=noise), "N", centre)
                sub = sub.sort_values("N")
                if sub.empty:
                    continue
                color = MODEL_COLORS.get(model, "k")
                ax.plot(sub["N"], sub[centre], color=color, marker="o", ms=3, lw=1.4)
                low = sub[centre] - sub["std"] if lo is None else sub[lo]
                high = sub[centre] + sub["std"] if hi is None else sub[hi]
                ax.fill_between(
                    sub["N"],
                    low.fillna(sub[centre]),
                    high.fillna(sub[centre]),
                    color=color,
                    alpha=0.2,
                    lw=0,
                )
                pred = finite(sub, "predicted")
                if not pred.empty:
                    ax.plot(pred["N"], pred["predicted"], color=color, ls="--", lw=1)
                top = max(top, float(np.nanmax(high.fillna(sub[centre]))))
                drawn = True
            if not drawn:
                no_data(ax)
            elif ax.get_ylim()[1] > 1.5 * top:  # a predicted law far above the measured window
                ax.set_ylim(top=1.5 * max(top, 1.0))
            ax.set_xscale("log")
            ax.set_xlabel("sample budget $N$")
            ax.set_ylabel("$H_N$ (lags)")
            ax.set_title(f"{opt}, {noise} noise: {title}")
    model_legend(
        fig, models, [Line2D([], [], color="k", ls="--", lw=1, label="predicted (decay class)")]
    )
    return fig


def _nhat_panels(window, master, models, optimizers, epoch, with_kappa: bool) -> Figure:
    """Scatter of the sample complexity against -log f(l) (or -kappa log f(l)) with the stored
    master-law fit of each seed evaluated at the plotted points (figures 5 and 9), one row per
    optimizer and noise definition (docs/method.md §7b).

    The points are :func:`learnwin.stats.window.master_points`, the master fit's own. Filled markers are
    log N*(l) of the lags the fit uses, the continuous sample complexity the master law regresses
    (docs/method.md §7); hollow markers are the grid value log N_hat(l) of the same lags, for
    reference; grey crosses are the lags the fit leaves out (mean psi not significant, tail index
    not reliable, or kappa infinite).
    """
    points = window.drop_duplicates(["optimizer", "model", "seed", "epoch", "noise", "lag"])
    x_master, log_nstar, included = master_points(
        points["f"], points["kappa"], points["N_star"],
        significant=points["significant"], reliable=points["reliable"],
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        points = points.assign(
            x_master=x_master,
            log_nstar=log_nstar,
            included=included,
            minus_log_f=-np.log(points["f"].astype(float)),
            log_nhat=np.log(points["N_hat"].astype(float)),
        )
    fits = sel(master, epoch=epoch)
    x = "x_master" if with_kappa else "minus_log_f"
    panels = noise_rows(window, optimizers)
    fig, axes = subplots(len(panels), len(models))
    markers = "osD^v<>"
    for row, (opt, noise) in enumerate(panels):
        for col, model in enumerate(models):
            ax, color = axes[row, col], MODEL_COLORS.get(model, "k")
            sub = finite(sel(points, optimizer=opt, model=model, noise=noise), x, "log_nstar")
            off, sub = sub[~sub["included"]], sub[sub["included"]]
            for i, (seed, run) in enumerate(sub.groupby("seed")):
                marker = markers[i % len(markers)]
                ax.scatter(run[x], run["log_nstar"], s=10, color=color, marker=marker,
                           label=f"seed {seed}")
                ax.scatter(run[x], run["log_nhat"], s=10, facecolors="none", edgecolors=color,
                           marker=marker, linewidths=0.6)
                fit = finite(
                    sel(fits, optimizer=opt, model=model, seed=seed, noise=noise), "slope", "intercept"
                )
                line = run.sort_values(x)
                if not fit.empty:
                    r = fit.iloc[0]
                    ax.plot(
                        line[x],
                        r["intercept"] + r["slope"] * line["x_master"],
                        color=color,
                        lw=1,
                        alpha=0.8,
                    )
            if not off.empty:
                ax.scatter(off[x], off["log_nstar"], s=8, color="0.6", marker="x", linewidths=0.6)
            stats = finite(sel(fits, optimizer=opt, model=model, noise=noise), "slope", "r2")
            if not stats.empty:
                s, r2 = stats["slope"].astype(float), stats["r2"].astype(float)
                spread = f" ± {s.std(ddof=1):.2f}" if len(s) > 1 else ""
                cis = "\n".join(
                    f"[{cell(r['slope_lo'], 2)}, {cell(r['slope_hi'], 2)}] on {r['n_points']}/{r['n_significant']}"
                    for _, r in stats.iterrows()
                )
                ax.text(
                    0.03,
                    0.97,
                    f"slope {s.mean():.2f}{spread}\n$R^2$ {r2.mean():.2f}\n95 % CI {cis}",
                    transform=ax.transAxes,
                    va="top",
                    ha="left",
                    bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1.5},
                )
            if sub.empty and off.empty:
                no_data(ax)
            elif sub["seed"].nunique() > 1:
                ax.legend(loc="lower right", frameon=False)
            ax.set_xlabel(r"$-\kappa(l)\,\log f(l)$" if with_kappa else r"$-\log f(l)$")
            ax.set_ylabel(r"$\log N^*(l)$ (filled), $\log \hat N(l)$ (hollow)")
            ax.set_title(f"{model}, {opt}, {noise}")
    return fig


@saved
def plot_N_hat_vs_f(window, master, *, models, optimizers, epoch) -> Figure:
    """Figure 5: log N_hat(l) against -log f(l) per model (docs/method.md §7); lines: each seed's
    stored master-law fit evaluated at its points, with mean slope and R^2."""
    return _nhat_panels(window, master, models, optimizers, epoch, with_kappa=False)


@saved
def plot_master_law(window, master, *, models, optimizers, epoch) -> Figure:
    """Figure 9: master-law scatter log N_hat(l) against x = -kappa(l) log f(l) per model,
    with each seed's stored fit line and the mean slope and R^2 (theory: slope 1, docs/method.md §7)."""
    return _nhat_panels(window, master, models, optimizers, epoch, with_kappa=True)


@saved
def plot_alpha(alpha, *, models, optimizers) -> Figure:
    """Figure 6: tail index alpha_hat(l) (reliable estimates only, docs/method.md §6): against lag
    (mean ± 1 std over seeds, left) and its distribution over lags and seeds per model (right)."""
    fig, axes = subplots(len(optimizers), 2)
    reliable = alpha[alpha["reliable"].astype(bool)] if len(alpha) else alpha
    for row, opt in enumerate(optimizers):
        lag_ax, box_ax = axes[row]
        drawn, data, labels, colors = False, [], [], []
        for model in models:
            sub = finite(sel(reliable, optimizer=opt, model=model), "alpha")
            color = MODEL_COLORS.get(model, "k")
            drawn |= draw_band(lag_ax, seed_band(sub, "lag", "alpha"), "lag", color, lw=1.2)
            if not sub.empty:
                data.append(sub["alpha"].to_numpy(float))
                labels.append(f"{model}\n(n={len(sub)})")
                colors.append(color)
        if drawn:
            box = box_ax.boxplot(data, patch_artist=True, widths=0.6)
            box_ax.set_xticks(range(1, len(labels) + 1), labels)
            for patch, color in zip(box["boxes"], colors, strict=True):
                patch.set(facecolor=color, alpha=0.5)
        else:
            no_data(lag_ax)
            no_data(box_ax)
        for ax in (lag_ax, box_ax):
            ax.set_ylim(0.95, 2.05)
            ax.set_ylabel(r"tail index $\hat\alpha$")
        lag_ax.set_xlabel("lag $l$")
        lag_ax.set_title(f"{opt}: " + r"$\hat\alpha(l)$, reliable only")
        box_ax.set_title(f"{opt}: distribution over lags and seeds")
    model_legend(fig, models)
    return fig


@saved
def plot_eps_th(window, *, models, optimizers, budgets) -> Figure:
    """Figure 7: envelope f(l) with the implied threshold eps_th(l; N) = f (N_hat/N)^(1/kappa)
    for the configured budgets (each mapped to the nearest N of the grid), docs/method.md §7; one row
    per optimizer and noise definition (§7b)."""
    grid = np.sort(pd.unique(finite(window, "N", positive=True)["N"].astype(float)))
    chosen = (
        sorted({int(grid[np.argmin(np.abs(np.log(grid) - math.log(b)))]) for b in budgets})
        if len(grid)
        else []
    )
    styles = ["--", ":", "-.", (0, (1, 3))]
    panels = noise_rows(window, optimizers)
    fig, axes = subplots(len(panels), len(models))
    for row, (opt, noise) in enumerate(panels):
        for col, model in enumerate(models):
            ax, color = axes[row, col], MODEL_COLORS.get(model, "k")
            sub = sel(window, optimizer=opt, model=model, noise=noise)
            per_lag = sub.drop_duplicates(["seed", "lag"])
            drawn = draw_band(ax, seed_band(per_lag, "lag", "f"), "lag", color, label="$f(l)$")
            for i, N in enumerate(chosen):
                drawn |= draw_band(
                    ax,
                    seed_band(sel(sub, N=N), "lag", "eps_th"),
                    "lag",
                    "0.25",
                    ls=styles[i % len(styles)],
                    lw=1.1,
                    label=rf"$\epsilon_{{th}}$, $N$={N}",
                )
            if drawn:
                log_ok(ax, "y")
                ax.legend(loc="best", frameon=False)
            else:
                no_data(ax)
            ax.set_xlabel("lag $l$")
            ax.set_ylabel(r"$f(l)$, $\epsilon_{th}(l;N)$")
            ax.set_title(f"{model}, {opt}, {noise}")
    return fig


@saved
def plot_exponents(exponents, *, models, optimizers, epoch) -> Figure:
    """Figure 13: exponents m ~ f^b (filled circles) and sigma ~ f^a (hollow squares) per model,
    one point per seed with its stored 95 % sequence-bootstrap CI; one row per optimizer, one
    column per noise definition (docs/method.md §7b). Dotted lines: b = 1 (the master law's claim) and 0.
    Under per_lag the master-law slope is about b - a; under pooled a = 0 and the slope is b."""
    exps = sel(exponents, epoch=epoch)
    noises = [n for opt, n in noise_rows(exps, optimizers[:1])]
    fig, axes = subplots(len(optimizers), len(noises))
    for row, opt in enumerate(optimizers):
        for col, noise in enumerate(noises):
            ax, drawn = axes[row, col], False
            for i, model in enumerate(models):
                sub = sel(exps, optimizer=opt, model=model, noise=noise)
                color = MODEL_COLORS.get(model, "k")
                seeds = sub["seed"].tolist() if len(sub) else []
                for j, (_, r) in enumerate(sub.iterrows()):
                    shift = 0.08 * (j - (len(seeds) - 1) / 2)
                    for name, dx, face in (("b", -0.15, color), ("a", 0.15, "none")):
                        value = float(r[name])
                        if not np.isfinite(value):
                            continue
                        lo, hi = float(r[f"{name}_lo"]), float(r[f"{name}_hi"])
                        err = [[max(value - lo, 0.0)], [max(hi - value, 0.0)]] if np.isfinite([lo, hi]).all() else None
                        ax.errorbar(i + dx + shift, value, yerr=err, fmt="o" if name == "b" else "s",
                                    color=color, mfc=face, ms=4, capsize=2, lw=1)
                        drawn = True
            if drawn:
                ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
                ax.axhline(0.0, color="0.5", lw=0.8, ls=":")
            else:
                no_data(ax)
            ax.set_xticks(range(len(models)), models)
            ax.set_ylabel("exponent")
            ax.set_title(f"{opt}, {noise} noise")
    model_legend(fig, models, [
        Line2D([], [], color="k", marker="o", ls="none", label=r"$b$: $m \sim f^b$"),
        Line2D([], [], color="k", marker="s", mfc="none", ls="none", label=r"$a$: $\sigma \sim f^a$"),
    ])
    return fig
