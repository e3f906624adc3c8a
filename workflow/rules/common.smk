# Helpers shared by the stage files: cross-field config checks, wildcard constraints, the
# paths (from learnwin.infra.layout), per-stage config scoping and the figure table. Defines no jobs.
import learnwin.infra.config as lwconfig
from learnwin.infra import layout, resources

lwconfig.check(config)

SEEDS = config["seeds"]
MODELS = config["models"]
OPTIMIZERS = config["optimizers"]
SNAPSHOT_EPOCHS = [str(e) for e in config["train"]["snapshot_epochs"]]
INT_EPOCHS = [e for e in SNAPSHOT_EPOCHS if e.isdigit()]


wildcard_constraints:
    seed=r"\d+",
    model="|".join(MODELS),
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


def sized(mem_mb, runtime):
    """A job's mem_mb and runtime requests from learnwin.infra.resources functions of the config
    and of the job's model."""
    return dict(
        mem_mb=lambda wc: mem_mb(config, wc.model),
        runtime=lambda wc: runtime(config, wc.model),
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
# name: (inputs by artifact, params beyond the shared ones, report category, report label).
# The figure behind each claim goes to the report's "Claims" category, beside the verdict table
# (rule claims); the report lists categories alphabetically, so "Claims" comes first.
FIGURES = {
    "H_N": (
        {"H_N_agg": STATS["H_N_agg"]},
        {"epoch": FIG_EPOCH},
        "Claims",
        "b · H_N vs N (claim b)",
    ),
    "envelope": (
        {"envelope": fig_runs("envelope"), "decay": FIG_DECAY},
        {},
        "Envelope",
        "2 · envelope f(l)",
    ),
    "envelope_decomposition": (
        {"envelope": fig_runs("envelope")},
        {},
        "Envelope",
        "3 · f vs f_gates",
    ),
    "tau_spectra": ({"units": fig_runs("units")}, {}, "Envelope", "4 · tau_q spectra"),
    "N_hat_vs_f": (
        {"window": fig_runs("window"), "master": STATS["master"]},
        {"epoch": FIG_EPOCH},
        "Learnability window",
        "5 · log N_hat vs -log f",
    ),
    "alpha": ({"alpha": fig_runs("alpha")}, {}, "Tail index", "6 · tail index alpha"),
    "eps_th": (
        {"window": fig_runs("window")},
        {"budgets": config["figures"]["budgets"]},
        "Learnability window",
        "7 · f and eps_th",
    ),
    "learning_curves": (
        {"curve": CURVES},
        {},
        "Data & training",
        "8 · learning curves",
    ),
    "master_law": (
        {"window": fig_runs("window"), "master": STATS["master"]},
        {"epoch": FIG_EPOCH},
        "Claims",
        "d · master law (claim d)",
    ),
    "optimizers": (
        {"envelope": fig_runs("envelope"), "units": fig_runs("units")},
        {},
        "Claims",
        "c · optimizer comparison (claim c)",
    ),
    "decay_table": (
        {"decay": FIG_DECAY},
        {},
        "Claims",
        "a · decay-class table (claim a)",
    ),
    "epochs": (
        {
            "envelope": snapshots("envelope.parquet"),
            "alpha": snapshots("alpha.parquet"),
        },
        {"epochs": SNAPSHOT_EPOCHS},
        "Envelope",
        "12 · envelope and tails over training",
    ),
    "exponents": (
        {"exponents": STATS["exponents"]},
        {"epoch": FIG_EPOCH},
        "Learnability window",
        "13 · exponents a and b",
    ),
    "memory": (
        {"envelope": fig_runs("envelope"), "memory": fig_runs("memory")},
        {},
        "Envelope",
        "14 · envelopes vs memory curve",
    ),
}
FIGURE_TARGETS = expand(layout.FIGURE, name=FIGURES, ext=["png", "pdf"])


def budget_runs(path):
    """``path`` (a pattern of one (optimizer, model, seed)) of every job of a budget-protocol seed
    set (``BUDGET_SEEDS``, workflow/rules/budget.smk)."""
    return lambda wc: expand(
        path, optimizer=REC_OPT, model=REC_MODELS, seed=BUDGET_SEEDS[wc.seed_set]
    )
