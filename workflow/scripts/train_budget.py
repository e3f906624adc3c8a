"""Adapter: rule train_budget, one (model, seed) of the budget protocol (docs/method.md §10b) ->
learnwin.recovery.budget_job.budget_trainings (the control and the lags' online trainings in this process);
the rule's params are that function's keywords. Each finished training is kept in the job's .resume/
directory, from which a re-submitted job goes on; removed once the scores are written."""
from learnwin.infra import io, layout, resume, runtime
from learnwin.infra.config import job_device

log = runtime.setup(snakemake.log[0], snakemake.threads)
runtime.set_torch_threads(snakemake.threads)
runtime.deterministic()

from learnwin.recovery.budget_job import budget_trainings  # noqa: E402  (after the thread caps)

wc, kw = snakemake.wildcards, dict(snakemake.params.items())
batch = kw["train_config"]["batch_size"]
work = layout.resume_dir(snakemake.output.scores)
scores = budget_trainings(model=wc.model, optimizer=wc.optimizer, seed=int(wc.seed), batch_size=batch,
                          **{**kw, "device": job_device(kw["device"])}, resume=work)
reached = scores[scores["target"] == "task"].groupby("lag")["N"].max()
n_max = kw["budgets"][-1]
log.info("lags run: %d of %d; steps: %d (control %d); N reached per lag: %s", len(reached), len(kw["lags"]),
         (n_max + reached.sum()) // batch, n_max // batch, reached.to_dict())
io.write_table(scores, snakemake.output.scores, "budget")
resume.clear(work)
