"""Adapter: rule write_summary -> learnwin.report.summary (summary table and its reading)."""

import pandas as pd

from learnwin.infra import runtime
from learnwin.infra.io import read_notes, read_table
from learnwin.report import summary

log = runtime.setup(snakemake.log[0], snakemake.threads)

inp, par, out = snakemake.input, snakemake.params, snakemake.output
curves = [read_table(p, "curve") for p in inp.curve]
diverged = [tuple(c[summary.KEYS].iloc[0]) for p, c in zip(inp.curve, curves) if "diverged" in read_notes(p)]
curve = pd.concat(curves, ignore_index=True)
alpha = pd.concat([read_table(p, "alpha") for p in inp.alpha], ignore_index=True)
decay = pd.concat([read_table(p, "decay") for p in inp.decay], ignore_index=True)
H_N, H_N_agg = read_table(inp.H_N, "H_N"), read_table(inp.H_N_agg, "H_N")
master, exponents = read_table(inp.master, "master"), read_table(inp.exponents, "exponents")

table = summary.build_summary(curve, alpha, decay, H_N, epoch=par.epoch, diverged=diverged,
                              master=master, exponents=exponents)
missing = [f"{r.model}/{r.optimizer}/seed{r.seed} ({r.status})"
           for r in table[table["status"] != "ok"].itertuples()]
text = summary.reading(
    decay, H_N_agg, epoch=par.epoch, models=par.models, optimizers=par.optimizers, missing=missing
)
summary.write(table, text, parquet=out.parquet, csv=out.csv, html=out.html, rst=out.reading)
log.info("summary: %d rows, columns %s", len(table), list(table.columns))
