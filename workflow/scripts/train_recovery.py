"""Adapter: stage recovery, one job -> learnwin.stats.recovery_job.recovery_run."""
from learnwin.infra import io, runtime

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.stats.recovery_job import recovery_run  # noqa: E402  (after the thread caps)

wc, params = snakemake.wildcards, snakemake.params
rows = recovery_run(
    model=wc.model,
    optimizer=wc.optimizer,
    seed=int(wc.seed),
    lag=int(wc.lag),
    n_train=int(wc.n_train),
    control=params.control,
    task=params.task,
    model_config=params.model,
    optim_config=params.optim,
    train_config=params.train,
    recovery=params.recovery,
    device=runtime.resolve_device(params.device),
)
log.info("%s", rows.to_dict("records"))
io.write_table(rows, snakemake.output.row, "recovery")
