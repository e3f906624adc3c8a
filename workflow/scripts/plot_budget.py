"""Adapter: rule plot_budget, the budget protocol's tables of one seed set -> its three figures
(learnwin.plots.budget)."""
import logging

from learnwin.infra import io, runtime
from learnwin.infra.registry import load_cells
from learnwin.plots.budget import plot_budget_N_hat, plot_budget_surface, plot_budget_window

log = runtime.setup(snakemake.log[0], snakemake.threads)
load_cells(snakemake.config["model"]["cells_module"])  # the colours of a user's cells
logging.getLogger("fontTools").setLevel(logging.WARNING)  # PDF font subsetting chatter
inp, out, params = snakemake.input, snakemake.output, snakemake.params
h_emp = io.read_table(inp.H_emp, "budget_tables")
plot_budget_surface(io.read_table(inp.scores, "budget"), h_emp, threshold=params.threshold, dpi=params.dpi,
                    png=out.budget_surface_png, pdf=out.budget_surface_pdf)
plot_budget_window(h_emp, io.read_table(inp.prediction, "budget_tables"), dpi=params.dpi, png=out.budget_window_png, pdf=out.budget_window_pdf)
plot_budget_N_hat(io.read_table(inp.learning_budget, "budget_tables"), dpi=params.dpi, png=out.budget_N_hat_png,
                  pdf=out.budget_N_hat_pdf)
