"""Figures of the envelope, its time scales and its decay class (docs/method.md §4, §4b, §8):
figures 2, 3, 4, 10, 11 and the memory figure."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from learnwin.plots.style import (
    MODEL_COLORS,
    OPTIMIZER_STYLES,
    cell,
    draw_band,
    finish_loglog,
    finite,
    log_ok,
    model_legend,
    no_data,
    saved,
    seed_band,
    sel,
    subplots,
)
from learnwin.report.formatting import SCALE_NAME
from learnwin.stats.decay import law_f


def _tau_values(units: pd.DataFrame) -> tuple[np.ndarray, int]:
    """Per-unit time scales of one panel (one value per run and unit): finite ones, count of inf."""
    per_unit = units.drop_duplicates(["optimizer", "model", "seed", "epoch", "unit"])
    tau = pd.to_numeric(per_unit["tau"], errors="coerce").to_numpy(float)
    finite = tau[np.isfinite(tau) & (tau > 0)]
    return np.sort(finite), int(np.sum(np.isinf(tau)))


def _ccdf(ax, tau: np.ndarray, color, label=None, ls="-") -> None:
    """Empirical P(tau_q > x) of the stored values as a step line."""
    n = len(tau)
    ax.step(tau, (n - np.arange(n)) / n, where="post", color=color, ls=ls, label=label)


def _density(ax, tau: np.ndarray, bins: np.ndarray, color, label=None) -> None:
    """Histogram density of the stored values on log-spaced bins, drawn as a step line."""
    dens, edges = np.histogram(tau, bins=bins, density=True)
    centres = np.sqrt(edges[:-1] * edges[1:])
    keep = dens > 0
    ax.plot(centres[keep], dens[keep], marker="o", ms=2.5, color=color, label=label)


def _log_bins(values: np.ndarray) -> np.ndarray:
    lo, hi = values.min(), values.max()
    if hi <= lo * 1.001:
        lo, hi = lo / 1.5, hi * 1.5
    nbins = int(np.clip(np.sqrt(len(values)), 5, 30))
    return np.geomspace(lo, hi, nbins + 1)


@saved
def plot_envelope(envelope, decay, *, models, optimizers) -> Figure:
    """Figure 2: envelope f(l) vs lag l on linear, semi-log and log-log axes, per optimizer.

    Bands: mean ± 1 std over seeds. Dashed: the stored exponential (semi-log panel) and power
    (log-log panel) fits of the seed-mean envelope over their fit windows (docs/method.md §4, §8).
    """
    fig, axes = subplots(len(optimizers), 3)
    fits = {1: "exp", 2: "power"}
    for row, opt in enumerate(optimizers):
        for col, title in enumerate(
            ["linear", "semi-log, dashed: exp fit", "log-log, dashed: power fit"]
        ):
            ax, drawn = axes[row, col], False
            for model in models:
                color = MODEL_COLORS.get(model, "k")
                drawn |= draw_band(
                    ax,
                    seed_band(sel(envelope, optimizer=opt, model=model), "lag", "f"),
                    "lag",
                    color,
                )
                if col in fits:
                    fit = finite(
                        sel(decay, optimizer=opt, model=model, scope="mean", law=fits[col]),
                        "A",
                        "scale",
                        "lag_min",
                        "lag_max",
                    )
                    for _, r in fit.iterrows():
                        lag = np.linspace(max(r["lag_min"], 1e-9), r["lag_max"], 100)
                        ax.plot(lag, law_f(r, lag), color=color, ls="--", lw=1)
            if not drawn:
                no_data(ax)
            if col >= 1:
                log_ok(ax, "y")
            if col == 2:
                log_ok(ax, "x")
            ax.set_xlabel("lag $l$")
            ax.set_ylabel("envelope $f(l)$")
            ax.set_title(f"{opt}: {title}")
    model_legend(fig, models)
    return fig


@saved
def plot_envelope_decomposition(envelope, *, models, optimizers) -> Figure:
    """Figure 3: envelope f vs its gate-only part f_gates (upper row) and their ratio
    f / f_gates (lower row), per model (columns) and optimizer (row pairs); docs/method.md §4.
    """
    fig, axes = subplots(2 * len(optimizers), len(models))
    for i, opt in enumerate(optimizers):
        for col, model in enumerate(models):
            sub = sel(envelope, optimizer=opt, model=model)
            color = MODEL_COLORS.get(model, "k")
            top, bottom = axes[2 * i, col], axes[2 * i + 1, col]
            drawn = draw_band(top, seed_band(sub, "lag", "f"), "lag", color, label="$f$")
            drawn |= draw_band(
                top, seed_band(sub, "lag", "f_gates"), "lag", "0.3", ls="--", label="$f_{gates}$"
            )
            if drawn:
                top.legend(loc="best", frameon=False)
                log_ok(top, "y")
            else:
                no_data(top)
            if draw_band(bottom, seed_band(sub, "lag", "ratio"), "lag", color):
                bottom.axhline(1.0, color="0.6", lw=0.8, ls=":")
                log_ok(bottom, "y")
            else:
                no_data(bottom)
            top.set_title(f"{model}, {opt}")
            top.set_ylabel("$f(l)$, $f_{gates}(l)$")
            bottom.set_ylabel("$f / f_{gates}$")
            for ax in (top, bottom):
                ax.set_xlabel("lag $l$")
    return fig


@saved
def plot_tau_spectra(units, *, models, optimizers) -> Figure:
    """Figure 4: spectra of the per-unit time scales tau_q (docs/method.md §4): histogram density
    (left) and CCDF P(tau_q > tau) (right) on log-log axes, seeds pooled; infinite tau_q
    (non-decaying units) are counted in the legend, not drawn.
    """
    fig, axes = subplots(len(optimizers), 2)
    for row, opt in enumerate(optimizers):
        dens_ax, ccdf_ax = axes[row]
        drawn = False
        for model in models:
            tau, n_inf = _tau_values(sel(units, optimizer=opt, model=model))
            if len(tau) == 0:
                continue
            color = MODEL_COLORS.get(model, "k")
            label = f"{model} ({n_inf} inf)" if n_inf else model
            _density(dens_ax, tau, _log_bins(tau), color, label)
            _ccdf(ccdf_ax, tau, color, label)
            drawn = True
        for ax, ylabel in ((dens_ax, r"density of $\tau_q$"), (ccdf_ax, r"$P(\tau_q > \tau)$")):
            finish_loglog(ax, drawn)
            ax.set_xlabel(r"time scale $\tau$ (lags)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{opt}: {'density' if ax is dens_ax else 'CCDF'}")
    return fig


@saved
def plot_optimizers(envelope, units, *, models, optimizers) -> Figure:
    """Figure 10: optimizer comparison per model: envelope f(l) (mean ± 1 std over seeds,
    upper row) and CCDF of the per-unit time scales tau_q (lower row); line style = optimizer
    (docs/method.md §3-§4: the optimizer's adaptive rate enters the effective learning rate)."""
    fig, axes = subplots(2, len(models))
    for col, model in enumerate(models):
        env_ax, tau_ax = axes[:, col]
        color = MODEL_COLORS.get(model, "k")
        env_drawn = tau_drawn = False
        for i, opt in enumerate(optimizers):
            ls = OPTIMIZER_STYLES[i % len(OPTIMIZER_STYLES)]
            env_drawn |= draw_band(
                env_ax,
                seed_band(sel(envelope, optimizer=opt, model=model), "lag", "f"),
                "lag",
                color,
                ls=ls,
                label=opt,
            )
            tau, n_inf = _tau_values(sel(units, optimizer=opt, model=model))
            if len(tau):
                _ccdf(tau_ax, tau, color, ls=ls, label=f"{opt} ({n_inf} inf)" if n_inf else opt)
                tau_drawn = True
        if env_drawn:
            log_ok(env_ax, "y")
            env_ax.legend(loc="best", frameon=False)
        else:
            no_data(env_ax)
        finish_loglog(tau_ax, tau_drawn)
        env_ax.set(xlabel="lag $l$", ylabel="envelope $f(l)$", title=f"{model}: envelope")
        tau_ax.set(
            xlabel=r"time scale $\tau$ (lags)",
            ylabel=r"$P(\tau_q > \tau)$",
            title=f"{model}: " + r"$\tau_q$ CCDF",
        )
    return fig


@saved
def plot_decay_table(decay, *, models, optimizers) -> Figure:
    """Figure 11: decay class selected (by AIC) for the seed-mean envelope of each
    (model, optimizer), with its parameters, 95 % block-bootstrap CI, R^2 and Akaike weight
    (docs/method.md §8). '*' marks an ambiguous selection."""
    columns = [
        "model",
        "optimizer",
        "class",
        "A",
        "scale [95% CI]",
        "$l_c$",
        "k",
        "floor",
        "$R^2$",
        "weight",
        "window",
    ]
    rows, colors = [], []
    for model in models:
        for opt in optimizers:
            chosen = sel(decay, optimizer=opt, model=model, scope="mean")
            chosen = chosen[chosen["selected"].astype(bool)] if len(chosen) else chosen
            if chosen.empty:
                rows.append([model, opt, "no data"] + ["–"] * (len(columns) - 3))
            else:
                r = chosen.iloc[0]
                law = f"{r['law']}{' *' if bool(r['ambiguous']) else ''}"
                scale = f"{SCALE_NAME.get(r['law'], 's')} = {cell(r['scale'])} [{cell(r['scale_lo'])}, {cell(r['scale_hi'])}]"
                window = f"{cell(r['lag_min'])}–{cell(r['lag_max'])}"
                rows.append(
                    [
                        model,
                        opt,
                        law,
                        cell(r["A"]),
                        scale,
                        cell(r["l_c"]),
                        cell(r["k"]),
                        cell(r["floor"]),
                        cell(r["r2"]),
                        cell(r["weight"], 2),
                        window,
                    ]
                )
            colors.append(MODEL_COLORS.get(model, "k"))
    fig = Figure(figsize=(7.0, max(2.5, 0.8 + 0.3 * (len(rows) + 1))), layout="constrained")
    ax = fig.subplots()
    ax.axis("off")
    table = ax.table(cellText=rows, colLabels=columns, loc="center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.auto_set_column_width(list(range(len(columns))))
    table.scale(1.0, 1.4)
    for i, color in enumerate(colors, start=1):
        table[i, 0].set_facecolor(mpl.colors.to_rgba(color, 0.3))
    ax.set_title("Decay class of the seed-mean envelope (* = ambiguous by AIC)")
    return fig


@saved
def plot_memory(envelope, memory, *, models, optimizers) -> Figure:
    """Figure 13: the envelope f of the configured transport and the diagonal envelope
    f_diagonal, each normalised at the first lag, against the memory curve
    mean |u . d y_hat_t / d x_{t-l}| (dotted), normalised the same way (docs/method.md §4b);
    one panel per model and optimizer, semi-log y.
    """
    fig, axes = subplots(len(optimizers), len(models))
    curves = (("envelope", "f", "-", "$f$"), ("envelope", "f_diagonal", "--", "$f_{diagonal}$"),
              ("memory", "m_mem_abs", ":", "mean$|u\\cdot\\partial\\hat y_t/\\partial x_{t-l}|$"))
    for i, opt in enumerate(optimizers):
        for col, model in enumerate(models):
            ax = axes[i, col]
            tables = {"envelope": sel(envelope, optimizer=opt, model=model),
                      "memory": sel(memory, optimizer=opt, model=model)}
            drawn = False
            for (name, column, ls, label), color in zip(curves, (MODEL_COLORS.get(model, "k"), "0.3", "0.5")):
                drawn |= draw_band(ax, seed_band(_normalised(tables[name], column), "lag", column),
                               "lag", color, label=label, ls=ls)
            if drawn:
                ax.legend(loc="best", frameon=False)
                log_ok(ax, "y")
            else:
                no_data(ax)
            ax.set_title(f"{model}, {opt}")
            ax.set_xlabel("lag $l$")
            ax.set_ylabel("normalised at the first lag")
    return fig


def _normalised(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """``column`` divided by its value at the first lag, per seed (NaN when that is not > 0)."""
    if df.empty:
        return df
    df = df.sort_values("lag")
    first = df.groupby("seed")[column].transform("first")
    return df.assign(**{column: np.where(first > 0, df[column] / first, np.nan)})
