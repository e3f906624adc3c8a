"""Adapter: rule memory_curve -> learnwin.memory.memory_checkpoint (docs/method.md §4b)."""
import json
from pathlib import Path

from learnwin import runtime

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin import io  # noqa: E402  (after the thread caps)
from learnwin.config import lag_grid  # noqa: E402
from learnwin.memory import memory_checkpoint  # noqa: E402

wc, cfg = snakemake.wildcards, snakemake.params.snapshot
keys = {"model": wc.model, "optimizer": wc.optimizer, "seed": int(wc.seed), "epoch": wc.epoch}
table = memory_checkpoint(
    checkpoint=snakemake.input.checkpoint,
    data_dir=Path(snakemake.input.x).parent,
    u=json.loads(Path(snakemake.input.task).read_text())["u"],
    lags=lag_grid(cfg),
    batch_size=cfg["batch_size"],
    sequences=cfg["memory_sequences"],
    keys=keys,
    device=runtime.resolve_device(snakemake.params.device),
)
io.write_table(table, snakemake.output.memory, "memory")
log.info("memory curve %s: %d lags", keys, len(table))
