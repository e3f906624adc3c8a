"""Adapter: psi + alpha + envelope -> window, H_N, master (METHOD §7; learnwin.window)."""

from learnwin import io, runtime, window

log = runtime.setup(snakemake.log[0], snakemake.threads)
cfg = snakemake.params.window
psi = io.read_table(snakemake.input.psi, "psi")
alpha = io.read_table(snakemake.input.alpha, "alpha")
envelope = io.read_table(snakemake.input.envelope, "envelope")
win, h_n, master = window.window_table(psi, alpha, envelope, eps=cfg["eps"], N_grid=cfg["N_grid"])
log.info("H_N = %s; master slope %.3f", h_n["H_N"].tolist(), master["slope"].iloc[0])
io.write_table(win, snakemake.output.window, "window")
io.write_table(h_n, snakemake.output.H_N, "H_N")
io.write_table(master, snakemake.output.master, "master")
