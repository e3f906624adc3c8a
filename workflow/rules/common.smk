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


def optimizer_hparams(wildcards):
    return section("optim", wildcards.optimizer)


# ---- resources: functions of the config size (defaults for SLURM; override with set-resources) ----
def _mb(n_bytes, base=600):
    return int(base + n_bytes / 2**20)


def data_mem_mb():
    t = config["task"]
    largest = max(t["n_train"], t["n_val"], t["n_diag"])
    return _mb(3 * largest * t["T"] * (t["D"] + 1) * 4)


def train_mem_mb():
    """Train + val splits resident, plus autograd activations of one batch."""
    t, h, b = config["task"], config["model"]["hidden"], config["train"]["batch_size"]
    data = (t["n_train"] + t["n_val"]) * t["T"] * (t["D"] + 1) * 4
    activations = 40 * b * t["T"] * h * 4
    return _mb(data + activations, base=1200)


def train_runtime_min():
    """Rough wall time: 0.6 ms per time step of a batch (CPU, H=32, B=64), scaled by H*B."""
    t, tr, h = config["task"], config["train"], config["model"]["hidden"]
    steps = tr["epochs"] * max(1, t["n_train"] // tr["batch_size"])
    per_step_ms = 0.6 * t["T"] * max(1.0, (h * tr["batch_size"]) / (32 * 64)) ** 0.5
    return max(10, int(2 * steps * per_step_ms / 60000))


def snapshot_mem_mb():
    """One diag batch: K tangents plus a lag chunk of float64 (B, L, T, H) work arrays."""
    t, s, h = config["task"], config["snapshot"], config["model"]["hidden"]
    batch = min(s["batch_size"], t["n_diag"])
    tangents = (s["directions"] + 2) * batch * t["T"] * h * 4
    return _mb(tangents + 8 * 8 * (1 << 22), base=1200)
