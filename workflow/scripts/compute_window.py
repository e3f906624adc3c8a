"""Adapter: psi + alpha + envelope (+ total) -> window, H_N, master, exponents (docs/method.md §7, §7b;
learnwin.stats.window)."""

from learnwin.infra import io, runtime
from learnwin.stats import window

log = runtime.setup(snakemake.log[0], snakemake.threads)
cfg = snakemake.params.window
psi = io.read_table(snakemake.input.psi, "psi")
alpha = io.read_table(snakemake.input.alpha, "alpha")
envelope = io.read_table(snakemake.input.envelope, "envelope")
total = io.read_table(snakemake.input.total, "total") if window.POOLED in cfg["noise"] else None
win, h_n, master, expo = window.window_table(
    psi, alpha, envelope, total, eps=cfg["eps"], N_grid=cfg["N_grid"], noise=cfg["noise"],
    bootstrap=cfg["bootstrap"], alpha_fit=snakemake.params.alpha,
)  # the bootstrap seed comes from the run seed (window.bootstrap_seed)
for row in master.itertuples():
    log.info("%s: master slope %.3f [%.3f, %.3f] on %d of %d significant lags", row.noise, row.slope,
             row.slope_lo, row.slope_hi, row.n_points, row.n_significant)
io.write_table(win, snakemake.output.window, "window")
io.write_table(h_n, snakemake.output.H_N, "H_N")
io.write_table(master, snakemake.output.master, "master")
io.write_table(expo, snakemake.output.exponents, "exponents")
