"""Adapter: stage train, the (optimizer, seed) runs of one model together -> learnwin.models.ensemble.train_runs."""
from pathlib import Path

from learnwin.infra import runtime
from learnwin.infra.config import job_device

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.models.ensemble import train_runs  # noqa: E402  (after the thread caps)

wc, params = snakemake.wildcards, snakemake.params
diverged = train_runs(
    data_dirs=[Path(f).parent for f in snakemake.input.x],
    out_dirs=[Path(f).parent for f in snakemake.output.final],
    model=wc.model,
    optimizers=params.optimizers,
    seeds=params.seeds,
    model_config=params.model,
    optim_configs=params.optim,
    train_config=params.train,
    snapshot_epochs=params.train["snapshot_epochs"],
    device=job_device(params.device),
)
for message in diverged.values():
    # the run's outputs are tombstones; its rule check_training fails with the message, the others go on
    log.error("training diverged: %s", message)
