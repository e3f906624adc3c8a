"""Adapter: psi.parquet -> alpha.parquet (docs/method.md §6; learnwin.stats.alpha.fit_lags)."""

from learnwin.infra import io, runtime
from learnwin.stats import alpha

log = runtime.setup(snakemake.log[0], snakemake.threads)
cfg = snakemake.params.alpha
psi = io.read_table(snakemake.input.psi, "psi")
log.info("fitting alpha on %d psi rows, %s", len(psi), cfg)
out = alpha.fit_lags(psi, **cfg)  # config keys are the keywords; the seed comes from the run seed
log.info("%d lags, %d reliable, methods %s", len(out), out["reliable"].sum(), out["method"].value_counts().to_dict())
io.write_table(out, snakemake.output.alpha, "alpha")
