# Stage recovery (beyond the paper): direct measurement of the learnability window. One job per
# (optimizer, model, seed, lag, n_train) trains a single-lag task with the docs/method.md §3 recipe and
# equal gradient steps and measures recovery on held-out sequences; the aggregate turns the rows
# into H_N_emp(N) and holds it against the predicted H_N (learnwin.stats.recovery). Behind its own
# target `recovery`, not in `all`.
REC = config["recovery"]
REC_SEEDS = REC["seeds"] or SEEDS
REC_MODELS = REC["models"] or MODELS
REC_OPTIMIZERS = REC["optimizers"] or OPTIMIZERS
REC_CONTROL_N = REC["control_n_train"] or REC["n_train"][-1:]
REC_ROW = layout.RECOVERY_ROW
REC_JOB = "{optimizer}/{model}/seed{seed}/lag{lag}_n{n_train}"


localrules:
    aggregate_recovery,
    plot_recovery,


rule train_recovery:
    output:
        row=REC_ROW,
    log:
        f"{LOGS}/train_recovery/{REC_JOB}.log",
    benchmark:
        f"{BENCH}/train_recovery/{REC_JOB}.tsv"
    wildcard_constraints:
        lag=r"\d+",
        n_train=r"\d+",
    conda:
        ENV
    threads: 1
    resources:
        **sized(resources.recovery_mem_mb, resources.recovery_runtime_min),
        train_slot=1,
        gpu=0,
    params:
        task={k: config["task"][k] for k in ("T", "D", "noise_std")},
        model=section("model"),
        optim=optimizer_hparams,
        train={k: config["train"][k] for k in ("batch_size", "grad_clip")},
        recovery={
            k: REC[k] for k in ("steps", "coef", "n_test", "n_perm", "null_quantile")
        },
        control=lambda wc: int(wc.n_train) in REC_CONTROL_N,
        device=config["device"],
    script:
        "../scripts/train_recovery.py"


rule aggregate_recovery:
    input:
        rows=expand(
            REC_ROW,
            optimizer=REC_OPTIMIZERS,
            model=REC_MODELS,
            seed=REC_SEEDS,
            lag=REC["lags"],
            n_train=REC["n_train"],
        ),
        H_N_agg=rules.aggregate_window.output.H_N_agg,
    output:
        table=layout.RECOVERY["learned"],
        window=layout.RECOVERY["window"],
        comparison=layout.RECOVERY["comparison"],
        agreement=layout.RECOVERY["agreement"],
    log:
        f"{LOGS}/aggregate_recovery/aggregate_recovery.log",
    benchmark:
        f"{BENCH}/aggregate_recovery/aggregate_recovery.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        threshold=REC["threshold"],
    script:
        "../scripts/aggregate_recovery.py"


rule plot_recovery:
    input:
        comparison=rules.aggregate_recovery.output.comparison,
        agreement=rules.aggregate_recovery.output.agreement,
    output:
        png=report(
            layout.figure("recovery", "png"),
            caption="../report/recovery.rst",
            category="Learnability window",
        ),
        pdf=layout.figure("recovery", "pdf"),
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
        epoch=str(REC["epoch"]),
        dpi=config["figures"]["dpi"],
    script:
        "../scripts/plot_recovery.py"


RECOVERY_TARGETS = [
    *rules.aggregate_recovery.output[1:],
    *rules.plot_recovery.output,
]
