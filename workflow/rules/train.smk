# Stage train (METHOD §2-3): one job per (model, optimizer, seed). Checkpoints at the snapshot
# epochs, best and final, and the learning curve. A re-run of a killed job resumes from
# its .resume/ state (see learnwin.train).


rule train_model:
    input:
        x=f"{DATA}/train_x.npy",
        y=f"{DATA}/train_y.npy",
        val_x=f"{DATA}/val_x.npy",
        val_y=f"{DATA}/val_y.npy",
    output:
        checkpoints=expand(f"{RUN}/{{name}}", name=[checkpoint_name(e) for e in INT_EPOCHS], allow_missing=True),
        best=f"{RUN}/best.pt",
        final=f"{RUN}/final.pt",
        curve=f"{RUN}/curve.parquet",
    params:
        model=section("model"),
        optim=optimizer_hparams,
        train=section("train"),
        device=config["device"],
    log:
        f"{LOGS}/train_model/{{optimizer}}/{{model}}/seed{{seed}}.log",
    benchmark:
        f"{BENCH}/train_model/{{optimizer}}/{{model}}/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=lambda wc: train_mem_mb(),
        runtime=lambda wc: train_runtime_min(),
        train_slot=1,
        gpu=0,
    script:
        "../scripts/train_model.py"


TRAIN_TARGETS = runs(f"{RUN}/final.pt")
