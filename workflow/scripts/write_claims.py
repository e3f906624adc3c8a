"""Adapter: rule claims -> learnwin.stats.claims (verdict table) and learnwin.report.findings."""

from learnwin.infra import runtime
from learnwin.infra.io import write_table
from learnwin.infra.registry import load_cells
from learnwin.report import findings
from learnwin.stats import claims

log = runtime.setup(snakemake.log[0], snakemake.threads)
load_cells(snakemake.config["model"]["cells_module"])  # the expectations of a user's cells

inp, par, out = snakemake.input, snakemake.params, snakemake.output
table = claims.claim_table({name: inp[name] for name in claims.INPUTS}, par.epoch)
write_table(table, out.parquet, "claims")
findings.write(table, findings=out.findings, html_path=out.html)
log.info("claims: %d verdict rows, %d hold", len(table), int(table["holds"].sum()))
