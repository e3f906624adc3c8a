"""Adapter: rule snapshot_recovery, one (model, seed) of the ground truth's main arm ->
learnwin.stats.groundtruth_job.groundtruth_networks (its init and trained networks, checked
against the job's recorded score) and groundtruth_snapshots (their envelope, psi and total)."""
from learnwin.infra import io, runtime

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.stats.groundtruth_job import groundtruth_networks, groundtruth_snapshots  # noqa: E402

wc, params = snakemake.wildcards, snakemake.params
device = runtime.resolve_device(params.device)
nets = groundtruth_networks(
    model=wc.model,
    optimizer=wc.optimizer,
    seed=int(wc.seed),
    n_train=params.n_train,
    lags=params.lags,
    steps=params.steps,
    task=params.task,
    model_config=params.model,
    optim_config=params.optim,
    train_config=params.train,
    gt=params.gt,
    recorded=io.read_table(snakemake.input.scores, "recovery"),
    device=device,
)
tables = groundtruth_snapshots(nets, seed=int(wc.seed), lag=min(params.lags), task=params.task, gt=params.gt,
                               n_diag=params.task["n_diag"], snapshot=params.snapshot, device=device)
for name, table in zip(("envelope", "psi", "total"), tables):
    io.write_table(table, snakemake.output[name], name)
log.info("snapshots of %s: %d envelope rows", dict(wc), len(tables[0]))
