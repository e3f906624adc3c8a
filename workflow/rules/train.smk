# Stage train (docs/method.md §2-3): one job per (model, optimizer, seed). Checkpoints at the snapshot
# epochs, best and final, and the learning curve. A re-run of a killed job resumes from
# its .resume/ state (see learnwin.models.train): a job longer than one request
# (learnwin.infra.resources.MAX_RUNTIME) is re-submitted as often as it needs (retries).


# On CUDA (learnwin.infra.resources.train_together, config key `ensemble`) one job per model trains
# its (optimizer, seed) runs together (learnwin.models.ensemble) and writes each run's usual outputs.
if resources.train_together(config):

    rule train_ensemble:
        input:
            x=expand(f"{DATA}/train_x.npy", seed=ENSEMBLE_RUNS["seed"]),
            y=expand(f"{DATA}/train_y.npy", seed=ENSEMBLE_RUNS["seed"]),
            val_x=expand(f"{DATA}/val_x.npy", seed=ENSEMBLE_RUNS["seed"]),
            val_y=expand(f"{DATA}/val_y.npy", seed=ENSEMBLE_RUNS["seed"]),
        output:
            checkpoints=[
                f for e in INT_EPOCHS for f in ensemble_outputs(checkpoint_name(e))
            ],
            best=ensemble_outputs("best.pt"),
            final=ensemble_outputs("final.pt"),
            curve=ensemble_outputs("curve.parquet"),
        log:
            f"{LOGS}/train_ensemble/{{model}}.log",
        benchmark:
            f"{BENCH}/train_ensemble/{{model}}.tsv"
        retries: resume_retries("train_ensemble", resources.ensemble_runtime_min)
        conda:
            ENV
        threads: 1
        resources:
            **sized(
                "train_ensemble",
                resources.ensemble_mem_mb,
                resources.ensemble_runtime_min,
                resources.ensemble_gpu_mem_mb,
            ),
            train_slot=1,
        params:
            model=section("model"),
            optim={o: section("optim", o) for o in OPTIMIZERS},
            train=section("train"),
            device=config["device"],
            optimizers=ENSEMBLE_RUNS["optimizer"],
            seeds=ENSEMBLE_RUNS["seed"],
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
        retries: resume_retries("train_model", resources.train_runtime_min)
        conda:
            ENV
        threads: 1
        resources:
            **sized(
                "train_model",
                resources.train_mem_mb,
                resources.train_runtime_min,
                resources.train_gpu_mem_mb,
            ),
            train_slot=1,
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
