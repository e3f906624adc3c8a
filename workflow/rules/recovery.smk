# Stage recovery (beyond the paper): direct measurement of the learnability window. One job per
# (optimizer, model, seed, lag, n_train) trains a single-lag task with the docs/method.md §3 recipe and
# equal gradient steps and measures recovery on held-out sequences; the aggregate turns the rows
# into H_N_emp(N) and holds it against the predicted H_N (learnwin/recovery.py). Behind its own
# target `recovery`, not in `all`.
REC = config["recovery"]
REC_SEEDS = REC["seeds"] or SEEDS
REC_MODELS = REC["models"] or MODELS
REC_OPTIMIZERS = REC["optimizers"] or OPTIMIZERS
REC_CONTROL_N = REC["control_n_train"] or REC["n_train"][-1:]
REC_ROW = "results/recovery/{optimizer}/{model}/seed{seed}/lag{lag}_n{n_train}.parquet"
REC_JOB = "{optimizer}/{model}/seed{seed}/lag{lag}_n{n_train}"


def recovery_runtime_min():
    """Rough wall time: 0.6 ms per time step of a batch (as train_runtime_min), two runs at most."""
    per_step_ms = 0.6 * config["task"]["T"]
    return max(5, int(2 * 2 * REC["steps"] * per_step_ms / 60000))


def recovery_mem_mb():
    """Largest training set plus the held-out set, and one batch of activations."""
    t, h, b = config["task"], config["model"]["hidden"], config["train"]["batch_size"]
    data = (REC["n_train"][-1] + REC["n_test"]) * t["T"] * (t["D"] + 1) * 4
    return _mb(data + 40 * b * t["T"] * h * 4, base=1200)


localrules:
    aggregate_recovery,
    plot_recovery,


rule train_recovery:
    output:
        row=REC_ROW,
    params:
        task={k: config["task"][k] for k in ("T", "D", "noise_std")},
        model=section("model"),
        optim=optimizer_hparams,
        train={k: config["train"][k] for k in ("batch_size", "grad_clip")},
        recovery={k: REC[k] for k in ("steps", "coef", "n_test", "n_perm", "null_quantile")},
        control=lambda wc: int(wc.n_train) in REC_CONTROL_N,
        device=config["device"],
    wildcard_constraints:
        lag=r"\d+",
        n_train=r"\d+",
    log:
        f"{LOGS}/train_recovery/{REC_JOB}.log",
    benchmark:
        f"{BENCH}/train_recovery/{REC_JOB}.tsv"
    threads: 1
    resources:
        mem_mb=lambda wc: recovery_mem_mb(),
        runtime=lambda wc: recovery_runtime_min(),
        train_slot=1,
        gpu=0,
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
        H_N_agg="results/stats/H_N_agg.parquet",
    output:
        table="results/recovery/learned.parquet",
        window="results/recovery/window.parquet",
        comparison="results/recovery/comparison.parquet",
        agreement="results/recovery/agreement.parquet",
    params:
        threshold=REC["threshold"],
    log:
        f"{LOGS}/aggregate_recovery/aggregate_recovery.log",
    benchmark:
        f"{BENCH}/aggregate_recovery/aggregate_recovery.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/aggregate_recovery.py"


rule plot_recovery:
    input:
        comparison="results/recovery/comparison.parquet",
        agreement="results/recovery/agreement.parquet",
    output:
        png=report(
            "results/figures/recovery.png",
            caption="../report/recovery.rst",
            category="Learnability window",
        ),
        pdf="results/figures/recovery.pdf",
    params:
        epoch=str(REC["epoch"]),
        dpi=config["figures"]["dpi"],
    log:
        f"{LOGS}/plot_recovery/plot_recovery.log",
    benchmark:
        f"{BENCH}/plot_recovery/plot_recovery.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/plot_recovery.py"


RECOVERY_TARGETS = [
    "results/recovery/window.parquet",
    "results/recovery/comparison.parquet",
    "results/recovery/agreement.parquet",
    "results/figures/recovery.png",
    "results/figures/recovery.pdf",
]
