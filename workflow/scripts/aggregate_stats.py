"""Adapter: per-snapshot H_N/window/master/exponents + decay files -> the aggregated stats tables (docs/method.md §7-§8)."""

from learnwin.infra import io, runtime
from learnwin.stats import window

log = runtime.setup(snakemake.log[0], snakemake.threads)
cfg = snakemake.params.window
h_n, agg, master, expo = window.aggregate(
    (io.read_table(p, "H_N") for p in snakemake.input.H_N),
    (io.read_table(p, "window") for p in snakemake.input.window),
    (io.read_table(p, "master") for p in snakemake.input.master),
    (io.read_table(p, "exponents") for p in snakemake.input.exponents),
    (io.read_table(p, "decay") for p in snakemake.input.decay),
    eps=cfg["eps"],
    N_grid=cfg["N_grid"],
)
log.info("%d H_N rows, %d aggregate rows, %d master rows, %d exponent rows", len(h_n), len(agg),
         len(master), len(expo))
io.write_table(h_n, snakemake.output.H_N, "H_N")
io.write_table(agg, snakemake.output.H_N_agg, "H_N")
io.write_table(master, snakemake.output.master, "master")
io.write_table(expo, snakemake.output.exponents, "exponents")
