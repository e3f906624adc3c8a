# Stage snapshot (docs/method.md §4-5): one job per (model, optimizer, seed, snapshot epoch). Streams
# the diag split in batches and writes envelope, units, psi and total (S_n, docs/method.md §7b) tables.


rule take_snapshot:
    input:
        checkpoint=snapshot_checkpoint,
        x=f"{DATA}/diag_x.npy",
        y=f"{DATA}/diag_y.npy",
    output:
        envelope=f"{SNAP}/envelope.parquet",
        units=f"{SNAP}/units.parquet",
        psi=f"{SNAP}/psi.parquet",
        total=f"{SNAP}/total.parquet",
    params:
        snapshot=section("snapshot"),
        device=config["device"],
    log:
        f"{LOGS}/take_snapshot/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.log",
    benchmark:
        f"{BENCH}/take_snapshot/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.tsv"
    threads: 1
    resources:
        mem_mb=lambda wc: snapshot_mem_mb(),
        runtime=lambda wc: max(10, train_runtime_min() // 4),
        gpu=0,
    script:
        "../scripts/take_snapshot.py"


SNAPSHOT_TARGETS = snapshots("psi.parquet") + snapshots("total.parquet")


# Memory curve (docs/method.md §4b): u . d y_hat_t / d x_{t-l} by autograd, independent of both
# transports. One job per snapshot; reads the checkpoint, the diag inputs and the task vector u.
rule memory_curve:
    input:
        checkpoint=snapshot_checkpoint,
        x=f"{DATA}/diag_x.npy",
        task=f"{DATA}/task.json",
    output:
        memory=f"{SNAP}/memory.parquet",
    params:
        snapshot=section("snapshot"),
        device=config["device"],
    log:
        f"{LOGS}/memory_curve/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.log",
    benchmark:
        f"{BENCH}/memory_curve/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.tsv"
    threads: 1
    resources:
        mem_mb=lambda wc: snapshot_mem_mb(),
        runtime=lambda wc: max(10, train_runtime_min() // 4),
        gpu=0,
    script:
        "../scripts/memory_curve.py"


MEMORY_TARGETS = snapshots("memory.parquet")
