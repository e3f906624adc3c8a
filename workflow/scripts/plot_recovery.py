"""Adapter: results/recovery/{comparison,agreement}.parquet -> results/figures/recovery.{png,pdf}."""
import logging

from learnwin import io, runtime
from learnwin.plot_recovery import plot_recovery

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
