"""Figure of the direct measurement: H_N_emp against N next to the predicted H_N.

One panel per (optimizer, model), model colours of docs/method.md §9
(:data:`learnwin.plots.style.MODEL_COLORS`), log-x N axis. Solid with band: H_N_emp, seed
mean ± 1 std (:mod:`learnwin.stats.recovery`). Dashed: H_N of the snapshot statistics (docs/method.md §7,
seed mean); dotted: closed-form prediction of the selected decay class (docs/method.md §8); both
from the snapshot epoch ``epoch``. The panel title carries the Spearman correlation of the
optimizer's points. Computes nothing: it draws stored tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from learnwin.plots.style import MODEL_COLORS, saved


@saved
def plot_recovery(comparison: pd.DataFrame, agreement: pd.DataFrame, *, epoch: str) -> Figure:
    """The recovery figure; written as PNG and PDF (atomically, keywords ``png``, ``pdf``,
    ``dpi``) and returned."""
    if "noise" in comparison:  # the snapshot predictions of the per_lag definition (docs/method.md §7b)
        comparison = comparison[comparison["noise"].isna() | (comparison["noise"] == "per_lag")]
        agreement = agreement[agreement["noise"] == "per_lag"]
    comp = comparison[comparison["epoch"].astype(str) == str(epoch)]
    emp_only = comparison.drop_duplicates(["model", "optimizer", "N"])  # drawn even without a prediction
    optimizers = list(dict.fromkeys(emp_only["optimizer"]))
    models = [m for m in MODEL_COLORS if m in set(emp_only["model"])]
    fig = Figure(figsize=(2.6 * max(len(models), 1), 2.4 * max(len(optimizers), 1)),
                 layout="constrained")
    axes = fig.subplots(max(len(optimizers), 1), max(len(models), 1), squeeze=False, sharey=True)
    for r, opt in enumerate(optimizers):
        agree = agreement[(agreement["optimizer"] == opt) & (agreement["epoch"].astype(str) == str(epoch))]
        rho = {row.source: row.spearman for row in agree.itertuples()}
        for c, model in enumerate(models):
            ax, color = axes[r, c], MODEL_COLORS[model]
            emp = emp_only[(emp_only["optimizer"] == opt) & (emp_only["model"] == model)].sort_values("N")
            std = emp["emp_std"].fillna(0.0)
            ax.plot(emp["N"], emp["emp_mean"], color=color, marker="o", ms=3, lw=1.4)
            ax.fill_between(emp["N"], emp["emp_mean"] - std, emp["emp_mean"] + std, color=color,
                            alpha=0.2, lw=0)
            pred = comp[(comp["optimizer"] == opt) & (comp["model"] == model)].sort_values("N")
            ax.plot(pred["N"], pred["H_N_snapshot"], color=color, ls="--", lw=1)
            ax.plot(pred["N"], pred["H_N_decay"], color=color, ls=":", lw=1.2)
            ax.set_xscale("log")
            ax.set_xticks(emp["N"], [str(n) for n in emp["N"]])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel("training sequences $N$")
            ax.set_title(f"{opt} / {model}")
            if c == 0:
                ax.set_ylabel("window $H_N$ (lags)")
        axes[r, 0].annotate(
            f"Spearman: snapshot {_signed(rho.get('snapshot'))}, decay {_signed(rho.get('decay'))}",
            xy=(0.02, 0.98), xycoords="axes fraction", va="top", fontsize=7)
    handles = [
        Line2D([], [], color="k", marker="o", ms=3, label="measured $H_N^{emp}$ (mean ± std)"),
        Line2D([], [], color="k", ls="--", label=f"snapshot $H_N$ (epoch {epoch})"),
        Line2D([], [], color="k", ls=":", label="decay-class prediction"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3 if len(models) > 2 else 1,
               frameon=False)
    return fig


def _signed(value) -> str:
    """Two decimals with a sign; "n/a" when missing."""
    return "n/a" if value is None or not np.isfinite(value) else f"{value:+.2f}"
