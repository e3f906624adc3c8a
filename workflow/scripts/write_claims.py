"""Adapter: rule claims -> learnwin.stats.claims (verdict table), learnwin.stats.band (the run
against the default run's band) and learnwin.report.findings."""

import yaml

from learnwin.infra import runtime
from learnwin.infra.io import write_table
from learnwin.infra.registry import load_cells
from learnwin.report import findings
from learnwin.stats import band, claims

log = runtime.setup(snakemake.log[0], snakemake.threads)
load_cells(snakemake.config["model"]["cells_module"])  # the expectations of a user's cells

inp, par, out = snakemake.input, snakemake.params, snakemake.output
table = claims.claim_table({name: inp[name] for name in claims.INPUTS}, par.epoch)
write_table(table, out.parquet, "claims")
with open(par.default_config) as f:
    differing = band.differing_keys(snakemake.config, yaml.safe_load(f))
position = band.position(table, band.read(), differing, band.read(band.RESAMPLED), band.read_checks(),
                         band.read(band.FRESH))
findings.write(table, findings=out.findings, html_path=out.html, position=position)
log.info("claims: %d verdict rows, %d hold", len(table), int(table["holds"].sum()))
