"""House style of the figures (docs/method.md §9): model colours, line styles, panel sizes,
fonts, table-cell text, and the helpers every figure module shares: row selection, the
display-only seed band, "no data" panels, legends and atomic PNG/PDF saving (learnwin.infra.io).

Plots compute no statistics: :func:`seed_band` (mean ± 1 std over seeds) is the only
aggregation, and it is for display.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter

from learnwin.infra.io import atomic_path
from learnwin.infra.registry import Column
from learnwin.report.formatting import fmt
from learnwin.stats.window import NOISES

#: Fixed colour of each model in every figure (docs/method.md §9): a live view of the registry's
#: ``color`` (:class:`learnwin.infra.registry.CellSpec`); a model outside it is drawn black.
MODEL_COLORS = Column("color")
#: Line style of the i-th configured optimizer where optimizers share a panel (figure 10).
OPTIMIZER_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))

#: Panel size in inches: one journal column per panel.
PANEL_W, PANEL_H = 3.4, 2.5

RC = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 10,
}

#: Table cell text of a number: 3 significant digits, "–" when missing.
cell = functools.partial(fmt, missing="–")


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


def sel(df: pd.DataFrame, **equal) -> pd.DataFrame:
    """Rows whose columns equal the given values (compared as strings: epoch '10' == 10)."""
    mask = np.ones(len(df), dtype=bool)
    for col, value in equal.items():
        mask &= (df[col].astype(str) == str(value)).to_numpy()
    return df[mask]


def finite(df: pd.DataFrame, *cols: str, positive: bool = False) -> pd.DataFrame:
    """Rows where every ``cols`` value is finite (and > 0 when ``positive``)."""
    mask = np.ones(len(df), dtype=bool)
    for col in cols:
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        mask &= np.isfinite(values)
        if positive:
            mask &= values > 0
    return df[mask]


def model_panels(models: Sequence[str], height: float = PANEL_H) -> tuple[Figure, np.ndarray]:
    """One row of narrow panels (2.6 in), one per model, sharing the y axis."""
    fig = Figure(figsize=(2.6 * max(len(models), 1), height), layout="constrained")
    return fig, fig.subplots(1, max(len(models), 1), squeeze=False, sharey=True)[0]


def subplots(nrows: int, ncols: int, height: float = PANEL_H) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(PANEL_W * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def noise_rows(df: pd.DataFrame, optimizers: Sequence[str]) -> list[tuple[str, str]]:
    """One panel row per (optimizer, noise definition) found in ``df`` (docs/method.md §7b); the
    definitions in the order of :data:`learnwin.stats.window.NOISES`. A table without rows gets
    one row per optimizer (its first definition, drawn as "no data"); one without a ``noise``
    column is an error."""
    if "noise" not in df:
        raise ValueError(f"no 'noise' column (one of {list(NOISES)}) in a table of columns {list(df.columns)}")
    found = set(df["noise"].astype(str))
    noises = [n for n in NOISES if n in found] or list(NOISES[:1])
    return [(opt, noise) for opt in optimizers for noise in noises]


def no_data(ax, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def draw_band(ax, band: pd.DataFrame, x: str, color, label=None, ls="-", lw=1.4) -> bool:
    """Draw a mean line with a ±1 std band; False when there is nothing to draw."""
    if band.empty:
        return False
    xs, mean, std = band[x].to_numpy(float), band["mean"].to_numpy(), band["std"].to_numpy()
    ax.plot(xs, mean, color=color, ls=ls, lw=lw, label=label)
    if np.any(std > 0):
        ax.fill_between(xs, mean - std, mean + std, color=color, alpha=0.2, lw=0)
    return True


def model_legend(fig: Figure, models: Sequence[str], extra: Sequence[Line2D] = ()) -> None:
    handles = [Line2D([], [], color=MODEL_COLORS.get(m, "k"), lw=2, label=m) for m in models]
    handles += list(extra)
    fig.legend(
        handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False
    )


def save(fig: Figure, png, pdf, dpi: int) -> None:
    """Write the figure as PNG (at ``dpi``) and PDF, each atomically. The constrained layout
    computed for the PNG is kept for the PDF (it is in inches, independent of dpi)."""
    with atomic_path(png, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    fig.set_layout_engine("none")
    with atomic_path(pdf, suffix=".pdf") as tmp:
        fig.savefig(tmp, format="pdf")


def saved(fig_fn: Callable) -> Callable:
    """Draw under the house style (8 pt fonts), save to the ``png``/``pdf`` keywords and
    return the figure (for inspection)."""

    @functools.wraps(fig_fn)
    def wrapper(*args, png, pdf, dpi: int = 150, **kwargs) -> Figure:
        with mpl.rc_context(RC):
            fig = fig_fn(*args, **kwargs)
            save(fig, png, pdf, dpi)
        return fig

    return wrapper


def finish_loglog(ax, drawn: bool) -> None:
    """Log-log axes and a legend on a panel that holds data; "no data" otherwise."""
    if drawn:
        log_ok(ax, "x")
        log_ok(ax, "y")
        ax.legend(loc="best", frameon=False)
    else:
        no_data(ax)


def log_ok(ax, axis: str = "y") -> None:
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
