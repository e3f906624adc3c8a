# Stage data (docs/method.md §1): seeded train / val / diag splits per seed, shared by every model.


rule make_data:
    output:
        x=expand(
            f"{DATA}/{{split}}_x.npy",
            split=["train", "val", "diag"],
            allow_missing=True,
        ),
        y=expand(
            f"{DATA}/{{split}}_y.npy",
            split=["train", "val", "diag"],
            allow_missing=True,
        ),
        task=f"{DATA}/task.json",
    log:
        f"{LOGS}/make_data/seed{{seed}}.log",
    benchmark:
        f"{BENCH}/make_data/seed{{seed}}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=lambda wc: resources.data_mem_mb(config),
        runtime=10,
    params:
        task=section("task"),
    script:
        "../scripts/make_data.py"


DATA_TARGETS = expand(f"{DATA}/task.json", seed=SEEDS)
