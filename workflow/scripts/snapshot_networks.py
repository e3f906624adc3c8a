"""Adapter: rules snapshot_recovery and snapshot_budget, one (model, seed) of the ground truth ->
its own networks (learnwin.recovery.groundtruth_job.groundtruth_networks under the dataset protocol,
learnwin.recovery.budget_job.budget_networks under the budget protocol: the init and one training,
checked against the job's recorded score; the rule's params are their keywords) and
learnwin.recovery.task.groundtruth_snapshots (their envelope, psi and total)."""
from learnwin.infra import io, runtime
from learnwin.infra.config import job_device

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.recovery.budget_job import budget_networks  # noqa: E402  (after the thread caps)
from learnwin.recovery.groundtruth_job import groundtruth_networks  # noqa: E402
from learnwin.recovery.task import groundtruth_snapshots  # noqa: E402

networks, artifact = {"snapshot_recovery": (groundtruth_networks, "recovery"),
                      "snapshot_budget": (budget_networks, "budget")}[snakemake.rule]
wc, kw = snakemake.wildcards, dict(snakemake.params.items())
snapshot, device = kw.pop("snapshot"), job_device(kw.pop("device"))
recorded = io.read_table(snakemake.input.scores, artifact)
nets = networks(model=wc.model, optimizer=wc.optimizer, seed=int(wc.seed), recorded=recorded, device=device, **kw)
tables = groundtruth_snapshots(nets, task=kw["task"], gt=kw["gt"], snapshot=snapshot, device=device)
for name, table in zip(("envelope", "psi", "total"), tables):
    io.write_table(table, snakemake.output[name], name)
log.info("snapshots of %s: %d envelope rows", dict(wc), len(tables[0]))
