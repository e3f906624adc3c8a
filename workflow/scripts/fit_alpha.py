"""Adapter: psi.parquet -> alpha.parquet (METHOD §6; learnwin.alpha.fit_lags)."""

from learnwin import alpha, io, runtime

ALPHA_SEED_OFFSET = 6_000  # bootstrap seed = run seed + stage offset

log = runtime.setup(snakemake.log[0], snakemake.threads)
cfg = snakemake.params.alpha
psi = io.read_table(snakemake.input.psi, "psi")
seed = int(psi["seed"].iloc[0]) + ALPHA_SEED_OFFSET
log.info("fitting alpha on %d psi rows, %s, seed %d", len(psi), cfg, seed)
out = alpha.fit_lags(psi, **cfg, seed=seed)  # the config section's keys are the keywords
log.info("%d lags, %d reliable, methods %s", len(out), out["reliable"].sum(), out["method"].value_counts().to_dict())
io.write_table(out, snakemake.output.alpha, "alpha")
