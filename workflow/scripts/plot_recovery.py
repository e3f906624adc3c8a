"""Adapter: rule plot_recovery, the ground-truth tables -> the two recovery figures
(learnwin.plots.recovery)."""
import logging

from learnwin.infra import io, runtime
from learnwin.infra.registry import load_cells
from learnwin.plots.recovery import plot_recovery_scores, plot_recovery_window

log = runtime.setup(snakemake.log[0], snakemake.threads)
load_cells(snakemake.config["model"]["cells_module"])  # the colours of a user's cells
logging.getLogger("fontTools").setLevel(logging.WARNING)  # PDF font subsetting chatter
inp, out, params = snakemake.input, snakemake.output, snakemake.params
plot_recovery_window(io.read_table(inp.window, "recovery"), io.read_table(inp.prediction, "recovery"),
                     threshold=params.threshold, dpi=params.dpi, png=out.window_png, pdf=out.window_pdf)
plot_recovery_scores(io.read_table(inp.scores, "recovery"), threshold=params.threshold,
                     dpi=params.dpi, png=out.scores_png, pdf=out.scores_pdf)
