"""The figure table: every figure of docs/method.md §9 as one entry, read by the workflow without
importing matplotlib.

An entry (:class:`FigureSpec`) names the drawing function by its import path (``"module:function"``,
imported by :meth:`FigureSpec.load` in the figure job, never here: the Snakefile parse reads this
floor only), the tables it takes (argument -> source, see :data:`SOURCES`), the settings it takes
beyond the shared ones (models, optimizers, dpi, transport; see :data:`SETTINGS`), and its place in
the report (category and label). ``workflow/rules/figures.smk`` makes one ``plot_<name>`` job of
each entry (``workflow/rules/common.smk`` resolves the sources and settings to the run's paths and
values) and ``workflow/scripts/plot_figure.py`` calls the entry's function; its caption is
``workflow/report/<name>.rst``. A new figure is a drawing function, one :func:`register_figure`
entry here and its caption.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from learnwin.infra.registry import enter

#: Where a figure's table comes from, ``kind:artifact``: ``run`` the artifact of every run at the
#: figures' epoch, ``epochs`` of every run at every snapshot epoch, ``stat`` a pooled statistics
#: table (``layout.STATS``), ``decay`` the decay fits at the figures' epoch, ``curve`` the learning curves.
SOURCES = ("run", "epochs", "stat", "decay", "curve")
#: The settings a figure may take beyond the shared ones: the figures' epoch, the eps_th figure's
#: budgets (``figures.budgets``) and the snapshot epochs.
SETTINGS = ("epoch", "budgets", "epochs")


@dataclass(frozen=True)
class FigureSpec:
    """One figure: ``draw``, the drawing function's import path ``"module:function"``; ``inputs``,
    argument -> source ``kind:artifact`` (:data:`SOURCES`; the artifact names the table read);
    ``settings``, names of :data:`SETTINGS` it takes; ``category`` and ``label`` in the report."""

    draw: str
    inputs: Mapping[str, str]
    category: str
    label: str
    settings: tuple[str, ...] = field(default=())

    def __post_init__(self):
        if ":" not in self.draw:
            raise ValueError(f"FigureSpec.draw = {self.draw!r} must be the function's import path 'module:function'")
        bad = [s for s in self.inputs.values() if s.partition(":")[0] not in SOURCES]
        if bad or not self.inputs:
            raise ValueError(f"FigureSpec.inputs {bad or '{}'}: each a source kind:artifact, kind one of {', '.join(SOURCES)}")
        unknown = sorted(set(self.settings) - set(SETTINGS))
        if unknown:
            raise ValueError(f"FigureSpec.settings {unknown}; allowed: {', '.join(SETTINGS)}")

    def load(self):
        """The drawing function, imported from :attr:`draw`."""
        module, name = self.draw.split(":")
        return getattr(importlib.import_module(module), name)


#: The table: figure name (the stem of its files, rule ``plot_<name>``) -> :class:`FigureSpec`.
FIGURES: dict[str, FigureSpec] = {}


def register_figure(name: str, spec: FigureSpec) -> None:
    """Add a figure under ``name``, as :func:`learnwin.infra.registry.register` adds a cell."""
    enter(FIGURES, "figure", name, spec, "register_figure", FigureSpec, re.compile(r"[A-Za-z][A-Za-z0-9_]*"))


# The figure behind each claim goes to the report's "Claims" category, beside the verdict table
# (rule claims); the report lists categories alphabetically, so "Claims" comes first.
_ENV, _WIN, _TRAIN = "learnwin.plots.envelope", "learnwin.plots.window", "learnwin.plots.training"
for _name, _spec in {
    "H_N": FigureSpec(f"{_WIN}:plot_H_N", {"H_N_agg": "stat:H_N_agg"}, "Claims", "b · H_N vs N (claim b)", ("epoch",)),
    "envelope": FigureSpec(f"{_ENV}:plot_envelope", {"envelope": "run:envelope", "decay": "decay:decay"},
                           "Envelope", "2 · envelope f(l)"),
    "envelope_decomposition": FigureSpec(f"{_ENV}:plot_envelope_decomposition", {"envelope": "run:envelope"},
                                         "Envelope", "3 · f vs f_gates"),
    "tau_spectra": FigureSpec(f"{_ENV}:plot_tau_spectra", {"units": "run:units"}, "Envelope", "4 · tau_q spectra"),
    "N_hat_vs_f": FigureSpec(f"{_WIN}:plot_N_hat_vs_f", {"window": "run:window", "master": "stat:master"},
                             "Learnability window", "5 · log N_hat vs -log f", ("epoch",)),
    "alpha": FigureSpec(f"{_WIN}:plot_alpha", {"alpha": "run:alpha"}, "Tail index", "6 · tail index alpha"),
    "eps_th": FigureSpec(f"{_WIN}:plot_eps_th", {"window": "run:window"}, "Learnability window", "7 · f and eps_th",
                         ("budgets",)),
    "learning_curves": FigureSpec(f"{_TRAIN}:plot_learning_curves", {"curve": "curve:curve"}, "Data & training",
                                  "8 · learning curves"),
    "master_law": FigureSpec(f"{_WIN}:plot_master_law", {"window": "run:window", "master": "stat:master"},
                             "Claims", "d · master law (claim d)", ("epoch",)),
    "optimizers": FigureSpec(f"{_ENV}:plot_optimizers", {"envelope": "run:envelope", "units": "run:units"},
                             "Claims", "c · optimizer comparison (claim c)"),
    "decay_table": FigureSpec(f"{_ENV}:plot_decay_table", {"decay": "decay:decay"}, "Claims",
                              "a · decay-class table (claim a)"),
    "epochs": FigureSpec(f"{_TRAIN}:plot_epochs", {"envelope": "epochs:envelope", "alpha": "epochs:alpha"},
                         "Envelope", "12 · envelope and tails over training", ("epochs",)),
    "exponents": FigureSpec(f"{_WIN}:plot_exponents", {"exponents": "stat:exponents"}, "Learnability window",
                            "13 · exponents a and b", ("epoch",)),
    "memory": FigureSpec(f"{_ENV}:plot_memory", {"envelope": "run:envelope", "memory": "run:memory"},
                         "Envelope", "14 · envelopes vs memory curve"),
}.items():
    register_figure(_name, _spec)
