"""The figures of docs/method.md §9, drawn from stored artifacts.

One function per figure. Each takes the tables it shows (already read, see
docs/artifacts.md), the two output paths and plain settings, and writes a PNG and a PDF
atomically. Plots compute no statistics: everything shown was computed and stored by an
earlier stage, or is taken from the package's own science functions (the stored decay fits
through :func:`learnwin.stats.decay.law_f`, the master-law points through
:func:`learnwin.stats.window.master_points`). The only aggregation done here is for display,
:func:`seed_band` (mean ± 1 std over seeds); histograms and CCDFs of stored per-unit time
scales are drawings of the stored values.

Figures are drawn with the object-oriented API (``matplotlib.figure.Figure``, Agg canvas),
so no pyplot state or display is involved. Missing runs, empty tables and non-finite values
are drawn around: a panel with nothing to show says "no data".

Modules: :mod:`.style` (colours, fonts, saving, shared helpers), :mod:`.envelope`,
:mod:`.window`, :mod:`.training`, :mod:`.recovery` (the ground truth's two figures) and
:mod:`.budget` (the window under a training budget: three figures). The table of the workflow's
figures, name -> drawing function and inputs, is :data:`learnwin.infra.figures.FIGURES`.
"""

from __future__ import annotations

import pandas as pd

from learnwin.plots.envelope import (
    plot_decay_table,
    plot_envelope,
    plot_envelope_decomposition,
    plot_memory,
    plot_optimizers,
    plot_tau_spectra,
)
from learnwin.plots.style import MODEL_COLORS, OPTIMIZER_STYLES, seed_band
from learnwin.plots.training import plot_epochs, plot_learning_curves
from learnwin.plots.window import (
    plot_alpha,
    plot_eps_th,
    plot_exponents,
    plot_H_N,
    plot_master_law,
    plot_N_hat_vs_f,
)
from learnwin.stats.decay import primary

__all__ = [
    "MODEL_COLORS",
    "OPTIMIZER_STYLES",
    "plot_H_N",
    "plot_N_hat_vs_f",
    "plot_alpha",
    "plot_decay_table",
    "plot_envelope",
    "plot_envelope_decomposition",
    "plot_epochs",
    "plot_eps_th",
    "plot_exponents",
    "plot_learning_curves",
    "plot_master_law",
    "plot_memory",
    "plot_optimizers",
    "plot_tau_spectra",
    "seed_band",
]


def one_transport(tables: dict[str, pd.DataFrame], transport: str) -> dict[str, pd.DataFrame]:
    """The figures' tables restricted to one transport (config ``figures.transport``, docs/method.md
    §4b), the decay fits to its primary functional; when the tables lack that transport (a run
    with one transport), the first transport they hold. Tables without the column are kept."""
    held = {t for df in tables.values() if "transport" in df.columns for t in df["transport"].unique()}
    name = transport if transport in held or not held else sorted(held)[0]
    out = {}
    for key, df in tables.items():
        if "functional" in df.columns:
            df = primary(df)
        out[key] = df[df["transport"] == name].reset_index(drop=True) if "transport" in df.columns else df
    return out
