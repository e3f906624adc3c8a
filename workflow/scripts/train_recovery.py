"""Adapter: rule train_recovery, one (arm, model, seed) of the ground truth ->
learnwin.recovery.groundtruth_job.groundtruth_job (every training of its N ladder in this process). Each
finished training is kept in the job's .resume/ directory, from which a re-submitted job goes on;
removed once both tables are written."""
from learnwin.infra import io, layout, resume, runtime
from learnwin.infra.config import job_device

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.recovery.groundtruth_job import groundtruth_job  # noqa: E402  (after the thread caps)

wc, params = snakemake.wildcards, snakemake.params
work = layout.resume_dir(snakemake.output.scores)
scores, window = groundtruth_job(
    model=wc.model,
    optimizer=wc.optimizer,
    seed=int(wc.seed),
    arm=wc.arm,
    n_train=params.n_train,
    lags=params.lags,
    thresholds=params.thresholds,
    steps=params.steps,
    task=params.task,
    model_config=params.model,
    optim_config=params.optim,
    train_config=params.train,
    gt=params.gt,
    device=job_device(params.device),
    resume=work,
)
log.info("window:\n%s", window.to_string())
io.write_table(scores, snakemake.output.scores, "recovery")
io.write_table(window, snakemake.output.window, "recovery")
resume.clear(work)
