# Statistics stage (docs/method.md §6-§8): alpha-stable tail fits per snapshot, the learnability window per
# snapshot, envelope decay classes per (optimizer, model, epoch), and the cross-run aggregates.
# Each rule's params hold only the config section(s) it reads.


localrules:
    fit_decay,
    aggregate_stats,


rule fit_alpha:
    input:
        psi=f"{SNAP}/psi.parquet",
    output:
        alpha=f"{SNAP}/alpha.parquet",
    log:
        f"{LOGS}/fit_alpha/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.log",
    benchmark:
        f"{BENCH}/fit_alpha/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        alpha=section("alpha"),
    script:
        "../scripts/fit_alpha.py"


rule compute_window:
    input:
        psi=f"{SNAP}/psi.parquet",
        alpha=f"{SNAP}/alpha.parquet",
        envelope=f"{SNAP}/envelope.parquet",
        total=f"{SNAP}/total.parquet",
    output:
        window=f"{SNAP}/window.parquet",
        H_N=f"{SNAP}/H_N.parquet",
        master=f"{SNAP}/master.parquet",
        exponents=f"{SNAP}/exponents.parquet",
    log:
        f"{LOGS}/compute_window/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.log",
    benchmark:
        f"{BENCH}/compute_window/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        window=section("window"),
        alpha=section("alpha"),
    script:
        "../scripts/compute_window.py"


rule fit_decay:
    input:
        envelopes=expand(f"{SNAP}/envelope.parquet", seed=SEEDS, allow_missing=True),
    output:
        decay=DECAY,
    log:
        f"{LOGS}/fit_decay/{{optimizer}}/{{model}}/epoch{{epoch}}.log",
    benchmark:
        f"{BENCH}/fit_decay/{{optimizer}}/{{model}}/epoch{{epoch}}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        decay=section("decay"),
    script:
        "../scripts/fit_decay.py"


DECAY_TARGETS = expand(DECAY, optimizer=OPTIMIZERS, model=MODELS, epoch=SNAPSHOT_EPOCHS)


rule aggregate_stats:
    input:
        H_N=snapshots("H_N.parquet"),
        window=snapshots("window.parquet"),
        master=snapshots("master.parquet"),
        exponents=snapshots("exponents.parquet"),
        decay=DECAY_TARGETS,
    output:
        **STATS,
    log:
        f"{LOGS}/aggregate_stats/aggregate_stats.log",
    benchmark:
        f"{BENCH}/aggregate_stats/aggregate_stats.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        window=section("window"),
    script:
        "../scripts/aggregate_stats.py"


ALPHA_TARGETS = snapshots("alpha.parquet")
WINDOW_TARGETS = list(STATS.values())
