"""Adapter: every plot_<name> rule -> the drawing function of learnwin.infra.figures.FIGURES[<name>] (docs/method.md §9).

Each named input is a list of Parquet files of one artifact (the name, except H_N_agg, which
is an H_N table); they are read, stacked, restricted to the ``figures.transport`` rows
(learnwin.plots.one_transport) and passed by name with the rule's params.
"""

import logging

import pandas as pd

from learnwin import plots
from learnwin.infra import runtime
from learnwin.infra.figures import FIGURES
from learnwin.infra.io import read_table
from learnwin.infra.registry import load_cells

log = runtime.setup(snakemake.log[0], snakemake.threads)
load_cells(snakemake.config["model"]["cells_module"])  # the colours of a user's cells
logging.getLogger("fontTools").setLevel(logging.WARNING)  # PDF font subsetting chatter

ARTIFACT = {"H_N_agg": "H_N"}
name = snakemake.rule.removeprefix("plot_")
tables = {}
for key, paths in snakemake.input.items():
    paths = [paths] if isinstance(paths, str) else list(paths)
    tables[key] = pd.concat(
        [read_table(p, ARTIFACT.get(key, key)) for p in paths], ignore_index=True
    )
params = dict(snakemake.params.items())
tables = plots.one_transport(tables, params.pop("transport"))
FIGURES[name].load()(
    **tables, **params, png=snakemake.output.png, pdf=snakemake.output.pdf
)
log.info("figure %s: %s", name, {key: len(df) for key, df in tables.items()})
