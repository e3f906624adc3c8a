"""Adapter: stage train -> learnwin.models.train.train_run."""
from pathlib import Path

from learnwin.infra import runtime
from learnwin.infra.config import job_device

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.models.train import DivergenceError, train_run  # noqa: E402  (after the thread caps)

wc, params = snakemake.wildcards, snakemake.params
try:
    train_run(
        data_dir=Path(snakemake.input.x).parent,
        out_dir=Path(snakemake.output.final).parent,
        model=wc.model,
        optimizer=wc.optimizer,
        seed=int(wc.seed),
        model_config=params.model,
        optim_config=params.optim,
        train_config=params.train,
        snapshot_epochs=params.train["snapshot_epochs"],
        device=job_device(params.device),
    )
except DivergenceError:
    # outputs are written (tombstones past the divergence); rule check_training fails with the
    # message, so the run is reported while --keep-going lets the other runs finish
    log.exception("training diverged")
