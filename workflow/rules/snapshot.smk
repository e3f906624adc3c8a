# Stage snapshot (docs/method.md §4-5): one job per (model, optimizer, seed, snapshot epoch). Streams
# the diag split in batches and writes envelope, units, psi and total (S_n, docs/method.md §7b) tables,
# and the memory curve u . d y_hat_t / d x_{t-l} by autograd (docs/method.md §4b; independent of the
# transport, in the same job to save a process start-up per snapshot), and the Lyapunov spectrum of
# the exact transport (docs/method.md §4c, on snapshot.exact_sequences sequences, whatever the transport).


rule take_snapshot:
    input:
        checkpoint=snapshot_checkpoint,
        x=f"{DATA}/diag_x.npy",
        y=f"{DATA}/diag_y.npy",
        task=f"{DATA}/task.json",
    output:
        envelope=f"{SNAP}/envelope.parquet",
        units=f"{SNAP}/units.parquet",
        psi=f"{SNAP}/psi.parquet",
        total=f"{SNAP}/total.parquet",
        memory=f"{SNAP}/memory.parquet",
        lyapunov=f"{SNAP}/lyapunov.parquet",
    log:
        f"{LOGS}/take_snapshot/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.log",
    benchmark:
        f"{BENCH}/take_snapshot/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **sized(
            "take_snapshot",
            resources.snapshot_mem_mb,
            resources.snapshot_runtime_min,
            resources.snapshot_gpu_mem_mb,
        ),
    params:
        snapshot=section("snapshot"),
        device=config["device"],
    script:
        "../scripts/take_snapshot.py"


SNAPSHOT_TARGETS = [
    *snapshots("psi.parquet"),
    *snapshots("total.parquet"),
    *snapshots("memory.parquet"),
    *snapshots("lyapunov.parquet"),
]
