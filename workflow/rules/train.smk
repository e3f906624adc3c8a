# Stage train (docs/method.md §2-3): one job per (model, optimizer, seed). Checkpoints at the snapshot
# epochs, best and final, and the learning curve. A re-run of a killed job resumes from
# its .resume/ state (see learnwin.models.train).


# On CUDA (learnwin.infra.resources.ensemble_seeds, config key `ensemble`) one job trains the seeds of a
# (model, optimizer) together (learnwin.models.ensemble) and writes each seed's usual outputs.
if resources.ensemble_seeds(config):

    rule train_ensemble:
        input:
            x=expand(f"{DATA}/train_x.npy", seed=SEEDS),
            y=expand(f"{DATA}/train_y.npy", seed=SEEDS),
            val_x=expand(f"{DATA}/val_x.npy", seed=SEEDS),
            val_y=expand(f"{DATA}/val_y.npy", seed=SEEDS),
        output:
            checkpoints=expand(
                f"{RUN}/{{name}}",
                name=[checkpoint_name(e) for e in INT_EPOCHS],
                seed=SEEDS,
                allow_missing=True,
            ),
            best=expand(f"{RUN}/best.pt", seed=SEEDS, allow_missing=True),
            final=expand(f"{RUN}/final.pt", seed=SEEDS, allow_missing=True),
            curve=expand(f"{RUN}/curve.parquet", seed=SEEDS, allow_missing=True),
        log:
            f"{LOGS}/train_ensemble/{{optimizer}}/{{model}}.log",
        benchmark:
            f"{BENCH}/train_ensemble/{{optimizer}}/{{model}}.tsv"
        conda:
            ENV
        threads: 1
        resources:
            **sized(resources.train_mem_mb, resources.train_runtime_min),
            train_slot=1,
            gpu=0,
        params:
            model=section("model"),
            optim=optimizer_hparams,
            train=section("train"),
            device=config["device"],
            seeds=SEEDS,
        script:
            "../scripts/train_ensemble.py"

else:

    rule train_model:
        input:
            x=f"{DATA}/train_x.npy",
            y=f"{DATA}/train_y.npy",
            val_x=f"{DATA}/val_x.npy",
            val_y=f"{DATA}/val_y.npy",
        output:
            checkpoints=expand(
                f"{RUN}/{{name}}",
                name=[checkpoint_name(e) for e in INT_EPOCHS],
                allow_missing=True,
            ),
            best=f"{RUN}/best.pt",
            final=f"{RUN}/final.pt",
            curve=f"{RUN}/curve.parquet",
        log:
            f"{LOGS}/train_model/{{optimizer}}/{{model}}/seed{{seed}}.log",
        benchmark:
            f"{BENCH}/train_model/{{optimizer}}/{{model}}/seed{{seed}}.tsv"
        conda:
            ENV
        threads: 1
        resources:
            **sized(resources.train_mem_mb, resources.train_runtime_min),
            train_slot=1,
            gpu=0,
        params:
            model=section("model"),
            optim=optimizer_hparams,
            train=section("train"),
            device=config["device"],
        script:
            "../scripts/train_model.py"


rule check_training:
    """Fails, naming the run and epoch, when training diverged (its outputs are tombstones).

    Reads only the divergence note in the curve's Parquet metadata: no torch import. (A `run:`
    block would be slower: Snakemake 9 runs it in a subprocess that re-parses the workflow.)
    """
    input:
        curve=f"{RUN}/curve.parquet",
    output:
        f"{RUN}/converged.txt",
    log:
        f"{LOGS}/check_training/{{optimizer}}/{{model}}/seed{{seed}}.log",
    benchmark:
        f"{BENCH}/check_training/{{optimizer}}/{{model}}/seed{{seed}}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/check_training.py"


localrules:
    check_training,


TRAIN_TARGETS = runs(f"{RUN}/converged.txt")
