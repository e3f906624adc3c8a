# Helpers shared by the rule files: cross-field config checks, wildcard constraints,
# path builders, per-rule config scoping and target lists. No rules here.
import learnwin.config as lwconfig

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


# ---- path builders (one place that knows the results/ layout; see docs/artifacts.md) ----
DATA = "results/data/seed{seed}"
RUN = "results/train/{optimizer}/{model}/seed{seed}"
SNAP = "results/snapshots/{optimizer}/{model}/seed{seed}/epoch{epoch}"
LOGS = "results/logs"
BENCH = "results/benchmarks"


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
    """A copy of one config section: a rule's params see only what it depends on."""
    node = config
    for key in keys:
        node = node[key]
    return dict(node) if isinstance(node, dict) else node


def optimizer_hparams(wildcards):
    return section("optim", wildcards.optimizer)
