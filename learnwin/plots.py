"""The figures of docs/method.md §9, drawn from stored artifacts.

One function per figure. Each takes the tables it shows (already read, see
docs/artifacts.md), the two output paths and plain settings, and writes a PNG and a PDF
atomically. Plots compute no statistics: everything shown was computed and stored by an
earlier stage. The only aggregation done here is for display, :func:`seed_band`
(mean ± 1 std over seeds); histograms and CCDFs of stored per-unit time scales are
drawings of the stored values.

Figures are drawn with the object-oriented API (``matplotlib.figure.Figure``, Agg canvas),
so no pyplot state or display is involved. Missing runs, empty tables and non-finite values
are drawn around: a panel with nothing to show says "no data".
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter

from learnwin.io import atomic_path
from learnwin.summary import SCALE_NAME, fmt
from learnwin.window import NOISES

#: Fixed colour of each model in every figure (docs/method.md §9).
MODEL_COLORS = {
    "const": "tab:blue",
    "shared": "tab:orange",
    "diag": "tab:green",
    "gru": "tab:red",
    "lstm": "tab:purple",
}
#: Line style of the i-th configured optimizer where optimizers share a panel (figure 10).
OPTIMIZER_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))

#: Panel size in inches: one journal column per panel.
PANEL_W, PANEL_H = 3.4, 2.5

_RC = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 10,
}


# ---------------------------------------------------------------- display aggregation ----


def seed_band(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Mean ± 1 std of ``y`` over the rows sharing each ``x`` (over seeds), finite values only.

    Returns columns ``x, mean, std, n`` sorted by ``x``; ``std`` is 0 where one seed exists.
    """
    values = df[[x, y]].replace([np.inf, -np.inf], np.nan).dropna()
    if values.empty:
        return pd.DataFrame({x: [], "mean": [], "std": [], "n": []})
    out = values.groupby(x)[y].agg(mean="mean", std="std", n="count").reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out.sort_values(x)


# ------------------------------------------------------------------------- helpers ----


def _sel(df: pd.DataFrame, **equal) -> pd.DataFrame:
    """Rows whose columns equal the given values (compared as strings: epoch '10' == 10)."""
    mask = np.ones(len(df), dtype=bool)
    for col, value in equal.items():
        mask &= (df[col].astype(str) == str(value)).to_numpy()
    return df[mask]


def _finite(df: pd.DataFrame, *cols: str, positive: bool = False) -> pd.DataFrame:
    """Rows where every ``cols`` value is finite (and > 0 when ``positive``)."""
    mask = np.ones(len(df), dtype=bool)
    for col in cols:
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        mask &= np.isfinite(values)
        if positive:
            mask &= values > 0
    return df[mask]


def _figure(nrows: int, ncols: int, height: float = PANEL_H) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(PANEL_W * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _noise_rows(df: pd.DataFrame, optimizers: Sequence[str]) -> list[tuple[str, str]]:
    """One panel row per (optimizer, noise definition) found in ``df`` (docs/method.md §7b); the
    definitions in the order of :data:`learnwin.window.NOISES`, per_lag alone when none."""
    found = set(df["noise"].astype(str)) if "noise" in df and len(df) else set()
    noises = [n for n in NOISES if n in found] or ["per_lag"]
    return [(opt, noise) for opt in optimizers for noise in noises]


def _no_data(ax, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _band(ax, band: pd.DataFrame, x: str, color, label=None, ls="-", lw=1.4) -> bool:
    """Draw a mean line with a ±1 std band; False when there is nothing to draw."""
    if band.empty:
        return False
    xs, mean, std = band[x].to_numpy(float), band["mean"].to_numpy(), band["std"].to_numpy()
    ax.plot(xs, mean, color=color, ls=ls, lw=lw, label=label)
    if np.any(std > 0):
        ax.fill_between(xs, mean - std, mean + std, color=color, alpha=0.2, lw=0)
    return True


def _model_legend(fig: Figure, models: Sequence[str], extra: Sequence[Line2D] = ()) -> None:
    handles = [Line2D([], [], color=MODEL_COLORS.get(m, "k"), lw=2, label=m) for m in models]
    handles += list(extra)
    fig.legend(
        handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False
    )


def _save(fig: Figure, png, pdf, dpi: int) -> None:
    """Write the figure as PNG (at ``dpi``) and PDF, each atomically. The constrained layout
    computed for the PNG is kept for the PDF (it is in inches, independent of dpi)."""
    with atomic_path(png, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    fig.set_layout_engine("none")
    with atomic_path(pdf, suffix=".pdf") as tmp:
        fig.savefig(tmp, format="pdf")


def _drawn(fig_fn: Callable) -> Callable:
    """Draw under the house style (8 pt fonts), save to the ``png``/``pdf`` keywords and
    return the figure (for inspection)."""

    @functools.wraps(fig_fn)
    def wrapper(*args, png, pdf, dpi: int = 150, **kwargs) -> Figure:
        with mpl.rc_context(_RC):
            fig = fig_fn(*args, **kwargs)
            _save(fig, png, pdf, dpi)
        return fig

    return wrapper


def _finish_loglog(ax, drawn: bool) -> None:
    """Log-log axes and a legend on a panel that holds data; "no data" otherwise."""
    if drawn:
        _log_ok(ax, "x")
        _log_ok(ax, "y")
        ax.legend(loc="best", frameon=False)
    else:
        _no_data(ax)


def _log_ok(ax, axis: str = "y") -> None:
    """Log scale on ``axis`` only when the panel holds positive data (else keep linear).

    A log x axis gets plain-number labels ("2", "5", "10"), so that the minor labels matplotlib
    adds over a short range stay narrow enough not to overlap.
    """
    data = [line.get_ydata() if axis == "y" else line.get_xdata() for line in ax.get_lines()]
    values = np.concatenate([np.asarray(d, float).ravel() for d in data]) if data else np.array([])
    if not np.any(np.isfinite(values) & (values > 0)):
        return
    if axis == "y":
        ax.set_yscale("log")
    else:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(LogFormatter())
        ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


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


# ------------------------------------------------------------------------- figures ----


@_drawn
def plot_H_N(H_N_agg, *, models, optimizers, epoch) -> Figure:
    """Figure 1: learnability window H_N vs budget N (log x), one row per optimizer and noise
    definition (docs/method.md §7b).

    Left: mean ± 1 std over seeds; right: median and IQR. Dashed: H_N predicted in closed
    form from the decay class selected for the seed-mean envelope (docs/method.md §7-§8).
    """
    agg = _sel(H_N_agg, epoch=epoch)
    panels = _noise_rows(agg, optimizers)
    fig, axes = _figure(len(panels), 2)
    for row, (opt, noise) in enumerate(panels):
        for col, (centre, lo, hi, title) in enumerate(
            [
                ("mean", None, None, "mean ± 1 std over seeds"),
                ("median", "q25", "q75", "median, IQR"),
            ]
        ):
            ax, drawn, top = axes[row, col], False, 0.0
            for model in models:
                sub = _finite(_sel(agg, optimizer=opt, model=model, noise=noise), "N", centre)
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
                pred = _finite(sub, "predicted")
                if not pred.empty:
                    ax.plot(pred["N"], pred["predicted"], color=color, ls="--", lw=1)
                top = max(top, float(np.nanmax(high.fillna(sub[centre]))))
                drawn = True
            if not drawn:
                _no_data(ax)
            elif ax.get_ylim()[1] > 1.5 * top:  # a predicted law far above the measured window
                ax.set_ylim(top=1.5 * max(top, 1.0))
            ax.set_xscale("log")
            ax.set_xlabel("sample budget $N$")
            ax.set_ylabel("$H_N$ (lags)")
            ax.set_title(f"{opt}, {noise} noise: {title}")
    _model_legend(
        fig, models, [Line2D([], [], color="k", ls="--", lw=1, label="predicted (decay class)")]
    )
    return fig


@_drawn
def plot_envelope(envelope, decay, *, models, optimizers) -> Figure:
    """Figure 2: envelope f(l) vs lag l on linear, semi-log and log-log axes, per optimizer.

    Bands: mean ± 1 std over seeds. Dashed: the stored exponential (semi-log panel) and power
    (log-log panel) fits of the seed-mean envelope over their fit windows (docs/method.md §4, §8).
    """
    fig, axes = _figure(len(optimizers), 3)
    fits = {
        1: ("exp", lambda lag, A, s: A * np.exp(-lag / s)),
        2: ("power", lambda lag, A, s: A * lag ** (-s)),
    }
    for row, opt in enumerate(optimizers):
        for col, title in enumerate(
            ["linear", "semi-log, dashed: exp fit", "log-log, dashed: power fit"]
        ):
            ax, drawn = axes[row, col], False
            for model in models:
                color = MODEL_COLORS.get(model, "k")
                drawn |= _band(
                    ax,
                    seed_band(_sel(envelope, optimizer=opt, model=model), "lag", "f"),
                    "lag",
                    color,
                )
                if col in fits:
                    law, fn = fits[col]
                    fit = _finite(
                        _sel(decay, optimizer=opt, model=model, scope="mean", law=law),
                        "A",
                        "scale",
                        "lag_min",
                        "lag_max",
                    )
                    for _, r in fit.iterrows():
                        lag = np.linspace(max(r["lag_min"], 1e-9), r["lag_max"], 100)
                        ax.plot(lag, fn(lag, r["A"], r["scale"]), color=color, ls="--", lw=1)
            if not drawn:
                _no_data(ax)
            if col >= 1:
                _log_ok(ax, "y")
            if col == 2:
                _log_ok(ax, "x")
            ax.set_xlabel("lag $l$")
            ax.set_ylabel("envelope $f(l)$")
            ax.set_title(f"{opt}: {title}")
    _model_legend(fig, models)
    return fig


@_drawn
def plot_envelope_decomposition(envelope, *, models, optimizers) -> Figure:
    """Figure 3: envelope f vs its gate-only part f_gates (upper row) and their ratio
    f / f_gates (lower row), per model (columns) and optimizer (row pairs); docs/method.md §4.
    """
    fig, axes = _figure(2 * len(optimizers), len(models))
    for i, opt in enumerate(optimizers):
        for col, model in enumerate(models):
            sub = _sel(envelope, optimizer=opt, model=model)
            color = MODEL_COLORS.get(model, "k")
            top, bottom = axes[2 * i, col], axes[2 * i + 1, col]
            drawn = _band(top, seed_band(sub, "lag", "f"), "lag", color, label="$f$")
            drawn |= _band(
                top, seed_band(sub, "lag", "f_gates"), "lag", "0.3", ls="--", label="$f_{gates}$"
            )
            if drawn:
                top.legend(loc="best", frameon=False)
                _log_ok(top, "y")
            else:
                _no_data(top)
            if _band(bottom, seed_band(sub, "lag", "ratio"), "lag", color):
                bottom.axhline(1.0, color="0.6", lw=0.8, ls=":")
                _log_ok(bottom, "y")
            else:
                _no_data(bottom)
            top.set_title(f"{model}, {opt}")
            top.set_ylabel("$f(l)$, $f_{gates}(l)$")
            bottom.set_ylabel("$f / f_{gates}$")
            for ax in (top, bottom):
                ax.set_xlabel("lag $l$")
    return fig


@_drawn
def plot_tau_spectra(units, *, models, optimizers) -> Figure:
    """Figure 4: spectra of the per-unit time scales tau_q (docs/method.md §4): histogram density
    (left) and CCDF P(tau_q > tau) (right) on log-log axes, seeds pooled; infinite tau_q
    (non-decaying units) are counted in the legend, not drawn.
    """
    fig, axes = _figure(len(optimizers), 2)
    for row, opt in enumerate(optimizers):
        dens_ax, ccdf_ax = axes[row]
        drawn = False
        for model in models:
            tau, n_inf = _tau_values(_sel(units, optimizer=opt, model=model))
            if len(tau) == 0:
                continue
            color = MODEL_COLORS.get(model, "k")
            label = f"{model} ({n_inf} inf)" if n_inf else model
            _density(dens_ax, tau, _log_bins(tau), color, label)
            _ccdf(ccdf_ax, tau, color, label)
            drawn = True
        for ax, ylabel in ((dens_ax, r"density of $\tau_q$"), (ccdf_ax, r"$P(\tau_q > \tau)$")):
            _finish_loglog(ax, drawn)
            ax.set_xlabel(r"time scale $\tau$ (lags)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{opt}: {'density' if ax is dens_ax else 'CCDF'}")
    return fig


def _nhat_panels(window, master, models, optimizers, epoch, with_kappa: bool) -> Figure:
    """Scatter of the sample complexity against -log f(l) (or -kappa log f(l)) with the stored
    master-law fit of each seed evaluated at the plotted points (figures 5 and 9), one row per
    optimizer and noise definition (docs/method.md §7b).

    Filled markers are log N*(l) of the significant lags, the continuous sample complexity the
    master law regresses (docs/method.md §7); hollow markers are the grid value log N_hat(l), for
    reference; grey crosses are lags whose mean psi is not significant (left out of the fit).
    """
    points = _finite(
        window.drop_duplicates(["optimizer", "model", "seed", "epoch", "noise", "lag"]),
        "N_star",
        "f",
        positive=True,
    )
    points = points.assign(
        minus_log_f=-np.log(points["f"].astype(float)),
        log_nstar=np.log(points["N_star"].astype(float)),
        log_nhat=np.log(points["N_hat"].astype(float)),
    )
    points = points.assign(x_master=points["kappa"].astype(float) * points["minus_log_f"])
    fits = _sel(master, epoch=epoch)
    x = "x_master" if with_kappa else "minus_log_f"
    panels = _noise_rows(window, optimizers)
    fig, axes = _figure(len(panels), len(models))
    markers = "osD^v<>"
    for row, (opt, noise) in enumerate(panels):
        for col, model in enumerate(models):
            ax, color = axes[row, col], MODEL_COLORS.get(model, "k")
            sub = _finite(_sel(points, optimizer=opt, model=model, noise=noise), x)
            off = sub[~sub["significant"].astype(bool)]
            sub = sub[sub["significant"].astype(bool)]
            for i, (seed, run) in enumerate(sub.groupby("seed")):
                marker = markers[i % len(markers)]
                ax.scatter(run[x], run["log_nstar"], s=10, color=color, marker=marker,
                           label=f"seed {seed}")
                ax.scatter(run[x], run["log_nhat"], s=10, facecolors="none", edgecolors=color,
                           marker=marker, linewidths=0.6)
                fit = _finite(
                    _sel(fits, optimizer=opt, model=model, seed=seed, noise=noise), "slope", "intercept"
                )
                line = _finite(run, "x_master").sort_values(x)
                if not fit.empty and not line.empty:
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
            stats = _finite(_sel(fits, optimizer=opt, model=model, noise=noise), "slope", "r2")
            if not stats.empty:
                s, r2 = stats["slope"].astype(float), stats["r2"].astype(float)
                spread = f" ± {s.std(ddof=1):.2f}" if len(s) > 1 else ""
                cis = "\n".join(
                    f"[{_fmt(r['slope_lo'], 2)}, {_fmt(r['slope_hi'], 2)}] on {r['n_points']}/{r['n_significant']}"
                    for _, r in stats.iterrows()
                )
                ax.text(
                    0.03,
                    0.97,
                    f"slope {s.mean():.2f}{spread}\n$R^2$ {r2.mean():.2f}\n95 % CI {cis}",
                    transform=ax.transAxes,
                    va="top",
                    ha="left",
                    bbox=dict(facecolor="white", alpha=0.8, edgecolor="none", pad=1.5),
                )
            if sub.empty and off.empty:
                _no_data(ax)
            elif sub["seed"].nunique() > 1:
                ax.legend(loc="lower right", frameon=False)
            ax.set_xlabel(r"$-\kappa(l)\,\log f(l)$" if with_kappa else r"$-\log f(l)$")
            ax.set_ylabel(r"$\log N^*(l)$ (filled), $\log \hat N(l)$ (hollow)")
            ax.set_title(f"{model}, {opt}, {noise}")
    return fig


@_drawn
def plot_N_hat_vs_f(window, master, *, models, optimizers, epoch) -> Figure:
    """Figure 5: log N_hat(l) against -log f(l) per model (docs/method.md §7); lines: each seed's
    stored master-law fit evaluated at its points, with mean slope and R^2."""
    return _nhat_panels(window, master, models, optimizers, epoch, with_kappa=False)


@_drawn
def plot_master_law(window, master, *, models, optimizers, epoch) -> Figure:
    """Figure 9: master-law scatter log N_hat(l) against x = -kappa(l) log f(l) per model,
    with each seed's stored fit line and the mean slope and R^2 (theory: slope 1, docs/method.md §7)."""
    return _nhat_panels(window, master, models, optimizers, epoch, with_kappa=True)


@_drawn
def plot_alpha(alpha, *, models, optimizers) -> Figure:
    """Figure 6: tail index alpha_hat(l) (reliable estimates only, docs/method.md §6): against lag
    (mean ± 1 std over seeds, left) and its distribution over lags and seeds per model (right)."""
    fig, axes = _figure(len(optimizers), 2)
    reliable = alpha[alpha["reliable"].astype(bool)] if len(alpha) else alpha
    for row, opt in enumerate(optimizers):
        lag_ax, box_ax = axes[row]
        drawn, data, labels, colors = False, [], [], []
        for model in models:
            sub = _finite(_sel(reliable, optimizer=opt, model=model), "alpha")
            color = MODEL_COLORS.get(model, "k")
            drawn |= _band(lag_ax, seed_band(sub, "lag", "alpha"), "lag", color, lw=1.2)
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
            _no_data(lag_ax)
            _no_data(box_ax)
        for ax in (lag_ax, box_ax):
            ax.set_ylim(0.95, 2.05)
            ax.set_ylabel(r"tail index $\hat\alpha$")
        lag_ax.set_xlabel("lag $l$")
        lag_ax.set_title(f"{opt}: " + r"$\hat\alpha(l)$, reliable only")
        box_ax.set_title(f"{opt}: distribution over lags and seeds")
    _model_legend(fig, models)
    return fig


@_drawn
def plot_eps_th(window, *, models, optimizers, budgets) -> Figure:
    """Figure 7: envelope f(l) with the implied threshold eps_th(l; N) = f (N_hat/N)^(1/kappa)
    for the configured budgets (each mapped to the nearest N of the grid), docs/method.md §7; one row
    per optimizer and noise definition (§7b)."""
    grid = np.sort(pd.unique(_finite(window, "N", positive=True)["N"].astype(float)))
    chosen = (
        sorted({int(grid[np.argmin(np.abs(np.log(grid) - math.log(b)))]) for b in budgets})
        if len(grid)
        else []
    )
    styles = ["--", ":", "-.", (0, (1, 3))]
    panels = _noise_rows(window, optimizers)
    fig, axes = _figure(len(panels), len(models))
    for row, (opt, noise) in enumerate(panels):
        for col, model in enumerate(models):
            ax, color = axes[row, col], MODEL_COLORS.get(model, "k")
            sub = _sel(window, optimizer=opt, model=model, noise=noise)
            per_lag = sub.drop_duplicates(["seed", "lag"])
            drawn = _band(ax, seed_band(per_lag, "lag", "f"), "lag", color, label="$f(l)$")
            for i, N in enumerate(chosen):
                drawn |= _band(
                    ax,
                    seed_band(_sel(sub, N=N), "lag", "eps_th"),
                    "lag",
                    "0.25",
                    ls=styles[i % len(styles)],
                    lw=1.1,
                    label=rf"$\epsilon_{{th}}$, $N$={N}",
                )
            if drawn:
                _log_ok(ax, "y")
                ax.legend(loc="best", frameon=False)
            else:
                _no_data(ax)
            ax.set_xlabel("lag $l$")
            ax.set_ylabel(r"$f(l)$, $\epsilon_{th}(l;N)$")
            ax.set_title(f"{model}, {opt}, {noise}")
    return fig


@_drawn
def plot_exponents(exponents, *, models, optimizers, epoch) -> Figure:
    """Figure 13: exponents m ~ f^b (filled circles) and sigma ~ f^a (hollow squares) per model,
    one point per seed with its stored 95 % sequence-bootstrap CI; one row per optimizer, one
    column per noise definition (docs/method.md §7b). Dotted lines: b = 1 (the master law's claim) and 0.
    Under per_lag the master-law slope is about b - a; under pooled a = 0 and the slope is b."""
    exps = _sel(exponents, epoch=epoch)
    noises = [n for opt, n in _noise_rows(exps, optimizers[:1])]
    fig, axes = _figure(len(optimizers), len(noises))
    for row, opt in enumerate(optimizers):
        for col, noise in enumerate(noises):
            ax, drawn = axes[row, col], False
            for i, model in enumerate(models):
                sub = _sel(exps, optimizer=opt, model=model, noise=noise)
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
                _no_data(ax)
            ax.set_xticks(range(len(models)), models)
            ax.set_ylabel("exponent")
            ax.set_title(f"{opt}, {noise} noise")
    _model_legend(fig, models, [
        Line2D([], [], color="k", marker="o", ls="none", label=r"$b$: $m \sim f^b$"),
        Line2D([], [], color="k", marker="s", mfc="none", ls="none", label=r"$a$: $\sigma \sim f^a$"),
    ])
    return fig


@_drawn
def plot_learning_curves(curve, *, models, optimizers) -> Figure:
    """Figure 8: learning curves, MSE (log y) and R^2 against epoch, train (dashed) and
    validation (solid), mean ± 1 std over seeds (docs/method.md §3)."""
    fig, axes = _figure(len(optimizers), 2)
    for row, opt in enumerate(optimizers):
        for col, metric in enumerate(["mse", "r2"]):
            ax, drawn = axes[row, col], False
            for model in models:
                sub = _sel(curve, optimizer=opt, model=model)
                color = MODEL_COLORS.get(model, "k")
                drawn |= _band(ax, seed_band(sub, "epoch", f"val_{metric}"), "epoch", color)
                drawn |= _band(
                    ax, seed_band(sub, "epoch", f"train_{metric}"), "epoch", color, ls="--", lw=1
                )
            if not drawn:
                _no_data(ax)
            elif metric == "mse":
                _log_ok(ax, "y")
            ax.set_xlabel("epoch")
            ax.set_ylabel("MSE" if metric == "mse" else "$R^2$")
            ax.set_title(f"{opt}: {'MSE' if metric == 'mse' else '$R^2$'}")
    _model_legend(
        fig,
        models,
        [
            Line2D([], [], color="k", lw=1.4, label="validation"),
            Line2D([], [], color="k", ls="--", lw=1, label="train"),
        ],
    )
    return fig


@_drawn
def plot_optimizers(envelope, units, *, models, optimizers) -> Figure:
    """Figure 10: optimizer comparison per model: envelope f(l) (mean ± 1 std over seeds,
    upper row) and CCDF of the per-unit time scales tau_q (lower row); line style = optimizer
    (docs/method.md §3-§4: the optimizer's adaptive rate enters the effective learning rate)."""
    fig, axes = _figure(2, len(models))
    for col, model in enumerate(models):
        env_ax, tau_ax = axes[:, col]
        color = MODEL_COLORS.get(model, "k")
        env_drawn = tau_drawn = False
        for i, opt in enumerate(optimizers):
            ls = OPTIMIZER_STYLES[i % len(OPTIMIZER_STYLES)]
            env_drawn |= _band(
                env_ax,
                seed_band(_sel(envelope, optimizer=opt, model=model), "lag", "f"),
                "lag",
                color,
                ls=ls,
                label=opt,
            )
            tau, n_inf = _tau_values(_sel(units, optimizer=opt, model=model))
            if len(tau):
                _ccdf(tau_ax, tau, color, ls=ls, label=f"{opt} ({n_inf} inf)" if n_inf else opt)
                tau_drawn = True
        if env_drawn:
            _log_ok(env_ax, "y")
            env_ax.legend(loc="best", frameon=False)
        else:
            _no_data(env_ax)
        _finish_loglog(tau_ax, tau_drawn)
        env_ax.set(xlabel="lag $l$", ylabel="envelope $f(l)$", title=f"{model}: envelope")
        tau_ax.set(
            xlabel=r"time scale $\tau$ (lags)",
            ylabel=r"$P(\tau_q > \tau)$",
            title=f"{model}: " + r"$\tau_q$ CCDF",
        )
    return fig


#: Table cell text of a number: 3 significant digits, "–" when missing.
_fmt = functools.partial(fmt, missing="–")


@_drawn
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
        "extra",
        "k",
        "$R^2$",
        "weight",
        "window",
    ]
    rows, colors = [], []
    for model in models:
        for opt in optimizers:
            sel = _sel(decay, optimizer=opt, model=model, scope="mean")
            sel = sel[sel["selected"].astype(bool)] if len(sel) else sel
            if sel.empty:
                rows.append([model, opt, "no data"] + ["–"] * (len(columns) - 3))
            else:
                r = sel.iloc[0]
                law = f"{r['law']}{' *' if bool(r['ambiguous']) else ''}"
                scale = f"{SCALE_NAME.get(r['law'], 's')} = {_fmt(r['scale'])} [{_fmt(r['scale_lo'])}, {_fmt(r['scale_hi'])}]"
                window = f"{_fmt(r['lag_min'])}–{_fmt(r['lag_max'])}"
                rows.append(
                    [
                        model,
                        opt,
                        law,
                        _fmt(r["A"]),
                        scale,
                        _fmt(r["extra"]),
                        _fmt(r["k"]),
                        _fmt(r["r2"]),
                        _fmt(r["weight"], 2),
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


@_drawn
def plot_epochs(envelope, alpha, *, models, optimizers, epochs) -> Figure:
    """Figure 12: envelope f(l) (upper row of each pair) and reliable tail index alpha(l)
    (lower row) at every snapshot epoch, colour = epoch, mean over seeds: how the envelope
    and the tails evolve during training (the self-organisation conjecture; docs/method.md §4, §6)."""
    cmap = mpl.colormaps["viridis"]
    # viridis up to 0.85: its last, pale yellow is hard to see on white
    shades = {str(e): cmap(0.85 * i / max(len(epochs) - 1, 1)) for i, e in enumerate(epochs)}
    reliable = alpha[alpha["reliable"].astype(bool)] if len(alpha) else alpha
    fig, axes = _figure(2 * len(optimizers), len(models))
    for i, opt in enumerate(optimizers):
        for col, model in enumerate(models):
            env_ax, alpha_ax = axes[2 * i, col], axes[2 * i + 1, col]
            env_drawn = alpha_drawn = False
            for epoch, shade in shades.items():
                env = _sel(envelope, optimizer=opt, model=model, epoch=epoch)
                env_drawn |= _band(
                    env_ax, seed_band(env, "lag", "f"), "lag", shade, label=f"epoch {epoch}", lw=1.2
                )
                tails = _sel(reliable, optimizer=opt, model=model, epoch=epoch)
                alpha_drawn |= _band(
                    alpha_ax, seed_band(tails, "lag", "alpha"), "lag", shade, lw=1.2
                )
            if env_drawn:
                _log_ok(env_ax, "y")
                env_ax.legend(loc="best", frameon=False)
            else:
                _no_data(env_ax)
            if not alpha_drawn:
                _no_data(alpha_ax)
            alpha_ax.set_ylim(0.95, 2.05)
            env_ax.set(xlabel="lag $l$", ylabel="envelope $f(l)$", title=f"{model}, {opt}")
            alpha_ax.set(xlabel="lag $l$", ylabel=r"$\hat\alpha(l)$ (reliable)")
    return fig


#: Figure name (file stem under results/figures/, rule plot_<name>) -> drawing function.
@_drawn
def plot_memory(envelope, memory, *, models, optimizers) -> Figure:
    """Figure 13: the envelope f of the configured transport and the diagonal envelope
    f_diagonal, each normalised at the first lag, against the memory curve
    mean |u . d y_hat_t / d x_{t-l}| (dotted), normalised the same way (docs/method.md §4b);
    one panel per model and optimizer, semi-log y.
    """
    fig, axes = _figure(len(optimizers), len(models))
    curves = (("envelope", "f", "-", "$f$"), ("envelope", "f_diagonal", "--", "$f_{diagonal}$"),
              ("memory", "m_mem_abs", ":", "mean$|u\\cdot\\partial\\hat y_t/\\partial x_{t-l}|$"))
    for i, opt in enumerate(optimizers):
        for col, model in enumerate(models):
            ax = axes[i, col]
            tables = {"envelope": _sel(envelope, optimizer=opt, model=model),
                      "memory": _sel(memory, optimizer=opt, model=model)}
            drawn = False
            for (name, column, ls, label), color in zip(curves, (MODEL_COLORS.get(model, "k"), "0.3", "0.5")):
                drawn |= _band(ax, seed_band(_normalised(tables[name], column), "lag", column),
                               "lag", color, label=label, ls=ls)
            if drawn:
                ax.legend(loc="best", frameon=False)
                _log_ok(ax, "y")
            else:
                _no_data(ax)
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


FIGURES: dict[str, Callable] = {
    "H_N": plot_H_N,
    "envelope": plot_envelope,
    "envelope_decomposition": plot_envelope_decomposition,
    "tau_spectra": plot_tau_spectra,
    "N_hat_vs_f": plot_N_hat_vs_f,
    "alpha": plot_alpha,
    "eps_th": plot_eps_th,
    "learning_curves": plot_learning_curves,
    "master_law": plot_master_law,
    "optimizers": plot_optimizers,
    "decay_table": plot_decay_table,
    "epochs": plot_epochs,
    "exponents": plot_exponents,
    "memory": plot_memory,
}
