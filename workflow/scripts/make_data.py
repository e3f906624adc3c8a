"""Adapter: stage data -> learnwin.tasks.splits.write_splits."""
from pathlib import Path

from learnwin.infra import runtime
from learnwin.tasks.splits import write_splits

log = runtime.setup(snakemake.log[0], snakemake.threads)
seed = int(snakemake.wildcards.seed)
write_splits(seed, snakemake.params.task, Path(snakemake.output.task).parent)
log.info("wrote splits of seed %d to %s", seed, Path(snakemake.output.task).parent)
