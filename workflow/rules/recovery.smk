# Stage recovery (beyond the paper): the ground truth of the learnability window (docs/method.md
# §10). One job per (arm, model, seed) runs every training of its N ladder in one process: per N,
# a shuffled-target control and a bisection over lags (learnwin.recovery.groundtruth_job); it keeps
# each finished training in its .resume/ state, asks at most learnwin.infra.resources.MAX_RUNTIME and
# is re-submitted as often as its longest arm needs (retries). Arms: main
# (every seed, every N), full_grid (every lag, first seed, recovery.validate_n_train: the
# monotonicity check), double_steps (2 x steps at the largest N, first recovery.steps_check_seeds
# seeds: the convergence check). snapshot_recovery snapshots each main-arm (model, seed)'s own
# networks (its init, and its training on the first lag at the largest N, trained again
# bitwise). The aggregate fits the growth of H with N and holds against it the prediction of those
# networks (primary: trained) and of the main run's snapshots. Behind its own target `recovery`.
REC = config["recovery"]
REC_SEEDS = REC["seeds"] or SEEDS
REC_MODELS = REC["models"] or MODELS
# models of your own that are any nn.Module (recovery.modules, docs/method.md §10b "Any model"):
# the budget protocol's trainings only, no snapshot and no prediction; REC_CELLS: the others
REC_MODULES = {m: path for m, path in REC["modules"].items() if m in REC_MODELS}
REC_CELLS = [m for m in REC_MODELS if m not in REC_MODULES]
if REC_MODULES:
    print(
        f"Note: {', '.join(REC_MODULES)} (recovery.modules) run the budget protocol's trainings "
        "only; their snapshot_budget jobs and the prediction are skipped (no trace interface)",
        file=sys.stderr,
    )
REC_OPT = REC["optimizer"]
REC_LAGS = lwconfig.recovery_lags(config)
REC_ARMS = resources.recovery_arms(config)
REC_JOB = "{arm}/{optimizer}/{model}/seed{seed}"
# the single-lag stream's task (learnwin.recovery.task.job_data): its kind and module where not
# the default, so that the synthetic task's jobs keep their params
REC_TASK = {
    k: config["task"][k]
    for k in ("T", "D", "noise_std", "kind", "module")
    if k in ("T", "D", "noise_std") or config["task"]["kind"] != "synthetic"
}


REC_RUNS = {
    name: [
        path.format(arm=arm, optimizer=REC_OPT, model=m, seed=s)
        for arm, spec in REC_ARMS.items()
        for m in REC_CELLS
        for s in spec["seeds"]
    ]
    for name, path in layout.RECOVERY_RUN.items()
}


localrules:
    aggregate_recovery,
    plot_recovery,


rule train_recovery:
    output:
        scores=layout.RECOVERY_RUN["scores"],
        window=layout.RECOVERY_RUN["window"],
    log:
        f"{LOGS}/train_recovery/{REC_JOB}.log",
    benchmark:
        f"{BENCH}/train_recovery/{REC_JOB}.tsv"
    wildcard_constraints:
        arm="|".join(REC_ARMS),
    retries: resume_retries("train_recovery", resources.recovery_longest_runtime_min, REC_CELLS)
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=lambda wc: resources.recovery_mem_mb(
            config, wc.model, asks_gpu("train_recovery")
        ),
        runtime=lambda wc: resources.recovery_runtime_min(
            config, wc.model, wc.arm, asks_gpu("train_recovery")
        ),
        gpu_mem_mb=lambda wc: resources.scored_gpu_mem_mb(config, wc.model),
        train_slot=1,
        gpu=0,
    params:
        task=REC_TASK,
        model=section("model"),
        optim=section("optim", REC_OPT),
        train={k: config["train"][k] for k in ("batch_size", "grad_clip")},
        gt={k: REC[k] for k in ("coef", "n_test", "n_perm", "null_quantile")},
        lags=REC_LAGS,
        thresholds=REC["thresholds"],
        n_train=lambda wc: REC_ARMS[wc.arm]["n_train"],
        steps=lambda wc: REC_ARMS[wc.arm]["steps"],
        device=config["device"],
    script:
        "../scripts/train_recovery.py"


rule snapshot_recovery:
    input:
        scores=layout.RECOVERY_RUN["scores"].replace("{arm}", "main"),
    output:
        **layout.RECOVERY_SNAPSHOT,
    log:
        f"{LOGS}/snapshot_recovery/{REC_JOB.replace('{arm}', 'main')}.log",
    benchmark:
        f"{BENCH}/snapshot_recovery/{REC_JOB.replace('{arm}', 'main')}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **sized(
            "snapshot_recovery",
            resources.recovery_snapshot_mem_mb,
            resources.recovery_snapshot_runtime_min,
            lambda cfg, model: max(
                resources.scored_gpu_mem_mb(cfg, model),
                resources.snapshot_gpu_mem_mb(cfg, model),
            ),
        ),
    params:
        task={**REC_TASK, "n_diag": config["task"]["n_diag"]},
        model_config=section("model"),
        optim_config=section("optim", REC_OPT),
        train_config={k: config["train"][k] for k in ("batch_size", "grad_clip")},
        gt={k: REC[k] for k in ("coef", "n_test", "n_perm", "null_quantile")},
        lags=REC_LAGS,
        n_train=REC_ARMS["main"]["n_train"],
        steps=REC_ARMS["main"]["steps"],
        snapshot={
            k: v for k, v in section("snapshot").items() if k != "memory_sequences"
        },
        device=config["device"],
    script:
        "../scripts/snapshot_networks.py"


rule aggregate_recovery:
    input:
        **{
            f"network_{name}": expand(
                path,
                optimizer=REC_OPT,
                model=REC_CELLS,
                seed=REC_ARMS["main"]["seeds"],
            )
            for name, path in layout.RECOVERY_SNAPSHOT.items()
        },
        scores=REC_RUNS["scores"],
        window=REC_RUNS["window"],
        H_N_agg=STATS["H_N_agg"],
        decay=expand(DECAY, optimizer=REC_OPT, model=REC_CELLS, epoch=str(REC["epoch"])),
    output:
        **{name: layout.RECOVERY[name] for name in layout.RECOVERY},
    log:
        f"{LOGS}/aggregate_recovery/aggregate_recovery.log",
    benchmark:
        f"{BENCH}/aggregate_recovery/aggregate_recovery.tsv"
    conda:
        ENV
    threads: 4
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        optimizer=REC_OPT,
        epoch=str(REC["epoch"]),
        alpha=section("alpha"),
        window=section("window"),
        decay=section("decay"),
    script:
        "../scripts/aggregate_recovery.py"


rule plot_recovery:
    input:
        window=layout.RECOVERY["window"],
        prediction=layout.RECOVERY["prediction"],
        scores=layout.RECOVERY["scores"],
    output:
        window_png=report(
            layout.figure("recovery_window", "png"),
            caption="../report/recovery.rst",
            category="Learnability window",
        ),
        window_pdf=layout.figure("recovery_window", "pdf"),
        scores_png=report(
            layout.figure("recovery_scores", "png"),
            caption="../report/recovery_scores.rst",
            category="Learnability window",
        ),
        scores_pdf=layout.figure("recovery_scores", "pdf"),
    log:
        f"{LOGS}/plot_recovery/plot_recovery.log",
    benchmark:
        f"{BENCH}/plot_recovery/plot_recovery.tsv"
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
        "../scripts/plot_recovery.py"


RECOVERY_TARGETS = [
    *rules.aggregate_recovery.output,
    *rules.plot_recovery.output,
]
