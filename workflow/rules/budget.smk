# Stage recovery under the budget protocol (docs/method.md §10b): one job per (model, seed) trains
# the shuffled-target control and the lags online, one pass over fresh sequences of the seed's
# train stream, scored at every budget of recovery.budgets, with early stop and the frontier rule
# (learnwin.recovery.budget_job); it keeps each finished training (lag chunk) in its .resume/
# state, asks at most learnwin.infra.resources.MAX_RUNTIME and is re-submitted as often as it
# needs (retries). One job per (model, seed) snapshots its init and its first lag's training (the
# same networks). Per seed set (exploration: recovery.seeds; confirm:
# recovery.confirm_seeds) the aggregate reads N̂_emp(l) and H_emp(N) off the scores
# (learnwin.stats.budget), fits claims (b) and (d) on them, predicts the window from the networks and
# scores the prediction, the confirmatory test included (learnwin.stats.prediction); one job draws
# its three figures. The target `recovery` requests the
# exploration set when recovery.protocol is budget; `recovery_confirm` the confirm set, always.
# On CUDA (config key `ensemble`, learnwin.infra.resources.lag_ensemble) a job trains its lags in
# chunks of recovery.ensemble_lags along a leading ensemble dimension, and snapshot_budget trains its
# first chunk again (with the thresholds of its early stop) to rebuild the network it scored.
LAG_ENSEMBLE = resources.lag_ensemble(config)


BUDGET_RETRIES = resume_retries(
    "train_budget", costed(resources.budget_runtime_min), REC_MODELS
)


BUDGET_ENSEMBLE = {"ensemble": LAG_ENSEMBLE} if LAG_ENSEMBLE else {}
BUDGET_SEEDS = {"exploration": REC_SEEDS, "confirm": REC["confirm_seeds"]}
BUDGET_JOB = "{optimizer}/{model}/seed{seed}"
BUDGET_LABELS = {
    "budget_surface": "budget · r(l, N) surface",
    "budget_window": "budget · H_emp(N)",
    "budget_N_hat": "budget · log N_hat_emp(l)",
}


localrules:
    aggregate_budget,
    plot_budget,


wildcard_constraints:
    seed_set="|".join(BUDGET_SEEDS),


rule train_budget:
    output:
        scores=layout.BUDGET_RUN,
    log:
        f"{LOGS}/train_budget/{BUDGET_JOB}.log",
    benchmark:
        f"{BENCH}/train_budget/{BUDGET_JOB}.tsv"
    retries: BUDGET_RETRIES
    conda:
        ENV
    threads: 1
    resources:
        **sized(
            "train_budget",
            costed(resources.budget_mem_mb),
            costed(resources.budget_runtime_min),
            costed(
                lambda cfg, model: resources.scored_gpu_mem_mb(
                    cfg, model, LAG_ENSEMBLE + 1
                )
            ),
        ),
        train_slot=1,
    params:
        **BUDGET_ENSEMBLE,
        task=REC_TASK,
        model_config=budget_model_config,
        optim_config=section("optim", REC_OPT),
        train_config={k: config["train"][k] for k in ("batch_size", "grad_clip")},
        gt={k: REC[k] for k in ("coef", "n_test", "n_perm", "null_quantile")},
        lags=REC_LAGS,
        thresholds=REC["thresholds"],
        budgets=REC["budgets"],
        frontier_stop=REC["frontier_stop"],
        device=config["device"],
    script:
        "../scripts/train_budget.py"


rule snapshot_budget:
    input:
        scores=layout.BUDGET_RUN,
    output:
        **layout.BUDGET_SNAPSHOT,
    log:
        f"{LOGS}/snapshot_budget/{BUDGET_JOB}.log",
    benchmark:
        f"{BENCH}/snapshot_budget/{BUDGET_JOB}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **sized(
            "snapshot_budget",
            resources.budget_snapshot_mem_mb,
            resources.budget_snapshot_runtime_min,
            lambda cfg, model: max(
                resources.scored_gpu_mem_mb(cfg, model, LAG_ENSEMBLE + 1),
                resources.snapshot_gpu_mem_mb(cfg, model),
            ),
        ),
    params:
        **(
            {**BUDGET_ENSEMBLE, "thresholds": REC["thresholds"]}
            if BUDGET_ENSEMBLE
            else {}
        ),
        task={**REC_TASK, "n_diag": config["task"]["n_diag"]},
        model_config=section("model"),
        optim_config=section("optim", REC_OPT),
        train_config={k: config["train"][k] for k in ("batch_size", "grad_clip")},
        gt={k: REC[k] for k in ("coef", "n_test", "n_perm", "null_quantile")},
        lags=REC_LAGS,
        budgets=REC["budgets"],
        snapshot={
            k: v for k, v in section("snapshot").items() if k != "memory_sequences"
        },
        device=config["device"],
    script:
        "../scripts/snapshot_networks.py"


rule aggregate_budget:
    input:
        **{
            f"network_{name}": budget_runs(path, REC_CELLS)
            for name, path in layout.BUDGET_SNAPSHOT.items()
        },
        scores=budget_runs(layout.BUDGET_RUN),
    output:
        **layout.BUDGET,
    log:
        f"{LOGS}/aggregate_budget/{{seed_set}}.log",
    benchmark:
        f"{BENCH}/aggregate_budget/{{seed_set}}.tsv"
    conda:
        ENV
    threads: 4
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        thresholds=REC["thresholds"],
        budgets=REC["budgets"],
        optimizer=REC_OPT,
        alpha=section("alpha"),
        window=section("window"),
        decay=section("decay"),
    script:
        "../scripts/aggregate_budget.py"


rule plot_budget:
    input:
        **{
            name: layout.BUDGET[name]
            for name in ("scores", "learning_budget", "H_emp", "prediction")
        },
    output:
        **{
            f"{fig}_png": report(
                layout.figure(f"{fig}_{{seed_set}}", "png"),
                caption=f"../report/{fig}.rst",
                category="Learnability window",
                labels={"figure": BUDGET_LABELS[fig], "seeds": "{seed_set}"},
            )
            for fig in layout.BUDGET_FIGURES
        },
        **{
            f"{fig}_pdf": layout.figure(f"{fig}_{{seed_set}}", "pdf")
            for fig in layout.BUDGET_FIGURES
        },
    log:
        f"{LOGS}/plot_budget/{{seed_set}}.log",
    benchmark:
        f"{BENCH}/plot_budget/{{seed_set}}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        threshold=REC["thresholds"][len(REC["thresholds"]) // 2],
        dpi=config["figures"]["dpi"],
    script:
        "../scripts/plot_budget.py"


BUDGET_TARGETS = {
    seed_set: expand(
        [*rules.aggregate_budget.output, *rules.plot_budget.output], seed_set=seed_set
    )
    for seed_set in BUDGET_SEEDS
}

# what the target `recovery` requests under each recovery.protocol
PROTOCOL_TARGETS = {
    "dataset": RECOVERY_TARGETS,
    "budget": BUDGET_TARGETS["exploration"],
}
