"""Adapter: rule plot_recovery, the recovery comparison and agreement tables -> the recovery figure
(learnwin.plots.recovery.plot_recovery)."""
import logging

from learnwin.infra import io, runtime
from learnwin.plots.recovery import plot_recovery

log = runtime.setup(snakemake.log[0], snakemake.threads)
logging.getLogger("fontTools").setLevel(logging.WARNING)  # PDF font subsetting chatter
plot_recovery(
    io.read_table(snakemake.input.comparison, "recovery"),
    io.read_table(snakemake.input.agreement, "recovery"),
    epoch=snakemake.params.epoch,
    dpi=snakemake.params.dpi,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
)
