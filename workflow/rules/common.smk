# Helpers shared by the stage files: cross-field config checks, wildcard constraints, the
# paths (from learnwin.infra.layout), per-stage config scoping and the figures' inputs. Defines no jobs.
import learnwin.infra.config as lwconfig
import learnwin.infra.figures as lwfigures
from learnwin.infra import layout, resources

lwconfig.check(config)

SEEDS = config["seeds"]
MODELS = config["models"]
OPTIMIZERS = config["optimizers"]
SNAPSHOT_EPOCHS = [str(e) for e in config["train"]["snapshot_epochs"]]
INT_EPOCHS = [e for e in SNAPSHOT_EPOCHS if e.isdigit()]


wildcard_constraints:
    seed=r"\d+",
    model="|".join(dict.fromkeys([*MODELS, *(config["recovery"]["models"] or [])])),
    optimizer="|".join(OPTIMIZERS),
    epoch=r"\d+|best|final",
    split="train|val|diag",


# ---- paths: the layout is learnwin.infra.layout's (docs/artifacts.md) ----
DATA, RUN, SNAP, DECAY = layout.DATA, layout.RUN, layout.SNAP, layout.DECAY
STATS, LOGS, BENCH = layout.STATS, layout.LOGS, layout.BENCH
ENV = "../envs/learnwin.yaml"  # every rule's software, for --sdm conda (relative to the rule files)


def checkpoint_name(epoch):
    """File name of the checkpoint that holds a snapshot epoch."""
    return f"{epoch}.pt" if epoch in ("best", "final") else f"epoch{epoch}.pt"


def snapshot_checkpoint(wildcards):
    return f"{RUN}/{checkpoint_name(wildcards.epoch)}".format(**wildcards)


def runs(pattern, **fixed):
    """Expand a path pattern over every configured (optimizer, model, seed)."""
    grid = dict(optimizer=OPTIMIZERS, model=MODELS, seed=SEEDS)
    grid.update({k: [v] for k, v in fixed.items()})
    return expand(pattern, **grid)


# The (optimizer, seed) runs of a model, which one train_ensemble job trains together (train.smk).
ENSEMBLE_RUNS = dict(
    optimizer=[o for o in OPTIMIZERS for s in SEEDS],
    seed=[s for o in OPTIMIZERS for s in SEEDS],
)


def ensemble_outputs(name):
    """The file ``name`` of every (optimizer, seed) run of a model, in ENSEMBLE_RUNS's order."""
    return expand(f"{RUN}/{name}", zip, **ENSEMBLE_RUNS, allow_missing=True)


def snapshots(name):
    """All per-snapshot files ``name`` over runs and snapshot epochs."""
    return expand(
        f"{SNAP}/{name}",
        optimizer=OPTIMIZERS,
        model=MODELS,
        seed=SEEDS,
        epoch=SNAPSHOT_EPOCHS,
    )


def section(*keys):
    """A copy of one config section, keys sorted: a rule's params see only what it depends on,
    and the same values compare equal whatever the key order of the YAML file."""
    node = config
    for key in keys:
        node = node[key]
    return _canonical(node)


def _canonical(node):
    if isinstance(node, dict):
        return {k: _canonical(node[k]) for k in sorted(node)}
    return node


def asks_gpu(rule):
    """Whether the jobs of ``rule`` ask a GPU: a positive ``gpu`` in the profile's (profiles/slurm)
    or the command line's set-resources; the rules themselves declare gpu=0 (a portable default).
    """
    asked = workflow.resource_settings.overwrite_resources.get(rule) or {}
    gpu = asked["gpu"] if "gpu" in asked else 0
    return int(getattr(gpu, "value", gpu) or 0) > 0


def sized(rule, mem_mb, runtime, gpu_mem_mb):
    """The requests of a job of ``rule`` that may run on CUDA, from learnwin.infra.resources
    functions of the config and of the job's model: mem_mb and runtime for a GPU where the rule asks
    one (asks_gpu), else for the CPU; gpu_mem_mb, its device memory, the token profiles/gpu limits
    to one device's memory; gpu, what the profile asks (0 here)."""
    gpu = asks_gpu(rule)
    return dict(
        mem_mb=lambda wc: mem_mb(config, wc.model, gpu),
        runtime=lambda wc: runtime(config, wc.model, gpu),
        gpu_mem_mb=lambda wc: gpu_mem_mb(config, wc.model),
        gpu=0,
    )


def resume_retries(rule, runtime, models=None):
    """Re-submissions of a resumable rule whose jobs need longer than one request
    (learnwin.infra.resources.MAX_RUNTIME); each resumes from its .resume/ state. ``runtime``:
    the rule's learnwin.infra.resources function of (config, model, gpu, cap), its longest job
    over ``models`` (default: the top-level models) before the cap. None: the profile's retries.
    """
    gpu = asks_gpu(rule)
    return resources.resume_retries(
        max(runtime(config, m, gpu, cap=False) for m in models or MODELS)
    )


def optimizer_hparams(wildcards):
    return section("optim", wildcards.optimizer)


# ---- figures (docs/method.md §9): the table figures.smk turns into one plot_<name> job each ----
FIG_EPOCH = str(config["figures"]["epoch"])
FIG_DECAY = expand(DECAY, optimizer=OPTIMIZERS, model=MODELS, epoch=FIG_EPOCH)


def fig_runs(artifact):
    """One artifact of every run at the figures' epoch."""
    return runs(f"{SNAP}/{artifact}.parquet", epoch=FIG_EPOCH)


CURVES = runs(f"{RUN}/curve.parquet")
# The figure table is learnwin.infra.figures.FIGURES; here its sources and settings become this
# run's paths and values (figures.smk makes one plot_<name> job of each entry).
FIG_SOURCES = {
    "run": fig_runs,
    "epochs": lambda artifact: snapshots(f"{artifact}.parquet"),
    "stat": lambda artifact: STATS[artifact],
    "decay": lambda artifact: FIG_DECAY,
    "curve": lambda artifact: CURVES,
}
FIG_SETTINGS = {
    "epoch": FIG_EPOCH,
    "budgets": config["figures"]["budgets"],
    "epochs": SNAPSHOT_EPOCHS,
}


def figure_inputs(spec):
    """A figure's inputs by argument: the files of each of its sources."""
    return {
        arg: FIG_SOURCES[kind](artifact)
        for arg, (kind, _, artifact) in (
            (arg, source.partition(":")) for arg, source in spec.inputs.items()
        )
    }


FIGURE_TARGETS = expand(layout.FIGURE, name=lwfigures.FIGURES, ext=["png", "pdf"])


def budget_runs(path, models=None):
    """``path`` (a pattern of one (optimizer, model, seed)) of every job of a budget-protocol seed
    set (``BUDGET_SEEDS``, workflow/rules/budget.smk), of ``models`` (default: the recovery's).
    """
    return lambda wc: expand(
        path,
        optimizer=REC_OPT,
        model=models or REC_MODELS,
        seed=BUDGET_SEEDS[wc.seed_set],
    )


def costed(size):
    """``size`` (a learnwin.infra.resources function of (config, model, ...)) with a plain module
    (REC_MODULES) sized as the LSTM, the costliest registered cell: its cost law is unknown.
    """
    return lambda cfg, model, *args, **kw: size(
        cfg, "lstm" if model in REC_MODULES else model, *args, **kw
    )


def budget_model_config(wildcards):
    """The model section a budget job builds its network from: a plain module's import path."""
    if wildcards.model in REC_MODULES:
        return {"module": REC_MODULES[wildcards.model]}
    return section("model")
