"""Adapter: stage snapshot -> learnwin.probing.snapshot.snapshot_checkpoint, learnwin.probing.memory.memory_checkpoint
and learnwin.probing.lyapunov.lyapunov_checkpoint."""

import json
from pathlib import Path

from learnwin.infra import runtime
from learnwin.infra.config import job_device

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.infra import io  # noqa: E402  (after the thread caps)
from learnwin.infra.config import lag_grid  # noqa: E402
from learnwin.probing.lyapunov import lyapunov_checkpoint  # noqa: E402
from learnwin.probing.memory import memory_checkpoint  # noqa: E402
from learnwin.probing.snapshot import snapshot_checkpoint  # noqa: E402

wc, cfg = snakemake.wildcards, snakemake.params.snapshot
device = job_device(snakemake.params.device)
data_dir = Path(snakemake.input.x).parent
keys = {"model": wc.model, "optimizer": wc.optimizer, "seed": int(wc.seed), "epoch": wc.epoch}
envelope, units, psi, total = snapshot_checkpoint(
    checkpoint=snakemake.input.checkpoint,
    data_dir=data_dir,
    lags=lag_grid(cfg),
    order=cfg["order"],
    times_per_lag=cfg["times_per_lag"],
    directions=cfg["directions"],
    batch_size=cfg["batch_size"],
    keep_directions=cfg["keep_directions"],
    keys=keys,
    device=device,
    transport=cfg["transport"],
    exact_sequences=cfg["exact_sequences"],
)
io.write_table(envelope, snakemake.output.envelope, "envelope")
io.write_table(units, snakemake.output.units, "units")
io.write_table(psi, snakemake.output.psi, "psi")
io.write_table(total, snakemake.output.total, "total")
log.info("snapshot %s: %d lags, %d psi rows", keys, len(envelope), len(psi))
memory = memory_checkpoint(
    checkpoint=snakemake.input.checkpoint,
    data_dir=data_dir,
    u=json.loads(Path(snakemake.input.task).read_text())["u"],
    lags=lag_grid(cfg),
    batch_size=cfg["batch_size"],
    sequences=cfg["memory_sequences"],
    keys=keys,
    device=device,
)
io.write_table(memory, snakemake.output.memory, "memory")
log.info("memory curve %s: %d lags", keys, len(memory))
lyapunov = lyapunov_checkpoint(
    checkpoint=snakemake.input.checkpoint,
    data_dir=data_dir,
    sequences=cfg["exact_sequences"],
    batch_size=cfg["batch_size"],
    keys=keys,
    device=device,
)
io.write_table(lyapunov, snakemake.output.lyapunov, "lyapunov")
log.info("lyapunov spectrum %s: %d modes", keys, len(lyapunov))
