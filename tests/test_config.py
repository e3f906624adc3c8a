"""Bad configs fail before any job runs, naming the key and what is allowed."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from learnwin.infra import registry
from learnwin.infra.config import ConfigError, check, lag_grid, transports_of

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def resolve(cfg):
    """What the Snakefile does at parse time: schema (with defaults), then cross-field checks."""
    validate(cfg, str(SCHEMA), set_default=True)
    check(cfg)
    return cfg


def _set(path, value):
    def mutate(cfg):
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return mutate


BAD = {
    "unknown model": (_set(["models"], ["const", "rnn"]),
                      r"models \['rnn'\] are not registered cells; allowed: const, shared, diag, gru, lstm"),
    "unknown recovery model": (_set(["recovery", "models"], ["rnn"]), r"recovery.models \['rnn'\] are not registered"),
    "dataset protocol without the main run's model": (
        lambda cfg: cfg.update(models=["const"], recovery={**cfg["recovery"], "protocol": "dataset", "models": ["gru"]}),
        r"recovery.models \['gru'\] must be entries of models = \['const'\] \(recovery.protocol = 'dataset'"),
    "dataset protocol without the main run's optimizer": (
        lambda cfg: cfg.update(optimizers=["sgd_momentum"], recovery={**cfg["recovery"], "protocol": "dataset"}),
        r"recovery.optimizer = 'adamw' must be one of optimizers = \['sgd_momentum'\]"),
    "recovery model neither a cell nor a module": (
        lambda cfg: cfg["recovery"].update(models=["gru", "mine"], modules={"other": "pkg.mod:make"}),
        r"recovery.models \['mine'\] are not registered cells; .* recovery.models may also name recovery.modules "
        r"\['other'\]"),
    "module named as a cell": (_set(["recovery", "modules"], {"gru": "pkg.mod:make"}),
                               r"recovery.modules: 'gru' must match \[a-z\]\[a-z0-9_\]\* and not be a registered cell"),
    "module path without its function": (_set(["recovery", "modules"], {"mine": "pkg.mod"}),
                                         r"'pkg.mod' does not match"),
    "module in the main run": (lambda cfg: cfg.update(models=["gru", "mine"], recovery={**cfg["recovery"], "modules": {
        "mine": "pkg.mod:make"}}), r"models \['mine'\] are not registered cells"),
    "cells module missing": (_set(["model", "cells_module"], "no_such_cells"),
                             r"model.cells_module = 'no_such_cells' cannot be imported"),
    "unknown optimizer": (_set(["optimizers"], ["adamw", "lbfgs"]),
                          r"optimizers \['lbfgs'\] are not registered optimizers; allowed: adamw, adam, sgd"),
    "unknown recovery optimizer": (_set(["recovery", "optimizer"], "lbfgs"),
                                   r"recovery.optimizer \['lbfgs'\] are not registered optimizers"),
    "unknown optimizer setting": (_set(["optim", "adamw", "betas"], [0.9, 0.99]),
                                  r"optim.adamw: Additional properties are not allowed \('betas' was unexpected\)"),
    "optimizer setting out of range": (_set(["optim", "sgd_momentum", "momentum"], 1.0),
                                       r"optim.sgd_momentum.momentum: 1.0 is greater than or equal to the maximum of 1"),
    "unknown optim section": (_set(["optim", "lbfgs"], {"lr": 1}), r"optim: Additional properties are not allowed"),
    "unknown top-level key": (_set(["epochs"], 3), r"'epochs' was unexpected"),
    "unknown nested key": (_set(["task", "lag"], [3]), r"'lag' was unexpected"),
    "wrong type": (_set(["task", "T"], "long"), r"'long' is not of type 'integer'[\s\S]*\['task'\]\['T'\]"),
    "negative size": (_set(["model", "hidden"], -4), r"-4 is less than the minimum of 1[\s\S]*\['hidden'\]"),
    "zero size": (_set(["task", "n_diag"], 0), r"0 is less than the minimum of 1[\s\S]*\['n_diag'\]"),
    "task lag >= T": (_set(["task", "lags"], [4, 8, 16, 24, 200]), r"task.lags \[200\] must be < task.T = 64"),
    "lags vs coefs": (_set(["task", "coefs"], [0.5]), r"task.lags has 5 entries but task.coefs has 1"),
    "empty seeds": (_set(["seeds"], []), r"\[\] should be non-empty[\s\S]*\['seeds'\]"),
    "eps <= 0": (_set(["window", "eps"], 0), r"0 is less than or equal to the minimum of 0[\s\S]*\['eps'\]"),
    "unknown noise definition": (_set(["window", "noise"], ["per_lag", "global"]),
                                 r"'global' is not one of \['per_lag', 'pooled'\][\s\S]*\['noise'\]"),
    "no noise definition": (_set(["window", "noise"], []), r"\[\] should be non-empty[\s\S]*\['noise'\]"),
    "N grid not increasing": (_set(["window", "N_grid"], [64, 32, 128]), r"window.N_grid .* strictly increasing"),
    "snapshot epoch > epochs": (_set(["train", "snapshot_epochs"], [0, 99, "best"]),
                                r"train.snapshot_epochs \[99\] exceed train.epochs = 30"),
    "snapshot epoch name": (_set(["train", "snapshot_epochs"], [0, "last"]), r"'last' is not valid"),
    "batch > n_train": (_set(["train", "batch_size"], 4096), r"train.batch_size = 4096 must be <= task.n_train = 1024"),
    "K < 1": (_set(["snapshot", "directions"], 0), r"0 is less than the minimum of 1[\s\S]*\['directions'\]"),
    "diagnostic lag >= T": (_set(["snapshot", "lag_stop"], 128), r"snapshot.lag_stop = 128 must be < task.T"),
    "transport order": (_set(["snapshot", "order"], 2), r"2 is not one of \[0, 1\]"),
    "unknown transport": (_set(["snapshot", "transport"], "lyapunov"), r"'lyapunov' is not valid under any"),
    "unknown transport in a list": (_set(["snapshot", "transport"], ["exact", "fast"]),
                                    r"\['exact', 'fast'\] is not valid under any"),
    "empty transport list": (_set(["snapshot", "transport"], []), r"\[\] is not valid under any"),
    "bad device": (_set(["device"], "tpu"), r"'tpu' is not one of \['auto', 'cpu', 'cuda'\]"),
    "leak out of range": (_set(["model", "const_s"], 1.5), r"1.5 is greater than or equal to the maximum of 1"),
    "figure epoch not a snapshot": (_set(["figures", "epoch"], 5), r"figures.epoch = 5 must be one of"),
    "unknown recovery protocol": (_set(["recovery", "protocol"], "online"), r"'online' is not one of \['budget', 'dataset'\]"),
    "budget off the batch": (_set(["recovery", "budgets"], [64, 96, 100]),
                             r"recovery.budgets = \[64, 96, 100\] must be strictly increasing multiples of "
                             r"train.batch_size = 32"),
    "budgets not increasing": (_set(["recovery", "budgets"], [128, 64]), r"recovery.budgets = \[128, 64\] must be"),
    "one budget": (_set(["recovery", "budgets"], [64]), r"\[64\] is too short[\s\S]*\['budgets'\]"),
    "unknown block": (_set(["model", "block"], "transformer"),
                      r"model.block = 'transformer' is not a registered block; allowed: published, stacked, plain"),
    "no layers": (_set(["model", "layers"], 0), r"0 is less than the minimum of 1[\s\S]*\['layers'\]"),
    "exact beyond memory": (lambda cfg: cfg.update(models=["s6"], model={**cfg["model"], "layers": 2, "block": "published"}),
                            r"snapshot.transport lists exact, but s6's full state has n = 2560 components: one batch "
                            r"of snapshot.batch_size = 128 needs 170 GiB .* lower snapshot.batch_size to 6 or less"),
    "Lyapunov beyond memory": (lambda cfg: cfg.update(models=["s6"], model={**cfg["model"], "hidden": 128, "layers": 2,
                                                                              "block": "published"}),
                               r"s6's full state has n = 10240 components: the Lyapunov spectrum of every snapshot "
                               r"\(docs/method.md §4c\) needs 21 GiB of one-step Jacobians for one sequence of task.T = 64"),
    "confirm seeds reused": (_set(["recovery", "confirm_seeds"], [12, 1103]),
                             r"recovery.confirm_seeds \[12\] are also exploration seeds"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_is_rejected_with_the_key(case):
    mutate, message = BAD[case]
    cfg = copy.deepcopy(DEFAULT)
    mutate(cfg)
    with pytest.raises((WorkflowError, ConfigError), match=message):
        resolve(cfg)


def test_budget_protocol_needs_no_main_run_of_its_models():
    """Under the budget protocol (docs/method.md §10b) the ground truth reads nothing of the main run:
    a config that trains other models and optimizers than its recovery section names is valid (the
    depth sweeps of config/stacks.yaml override models and optimizers), and the dataset protocol's
    twin of it is not (BAD above)."""
    cfg = copy.deepcopy(DEFAULT)
    cfg.update(models=["mingru"], optimizers=["sgd_momentum"],
               recovery={**cfg["recovery"], "protocol": "budget", "models": ["gru", "lstm"]})
    assert resolve(cfg)["recovery"]["models"] == ["gru", "lstm"]
    cfg["recovery"].update(models=["gru", "mine"], modules={"mine": "pkg.mod:make"})  # a plain module (§10b)
    assert resolve(cfg)["recovery"]["modules"] == {"mine": "pkg.mod:make"}


def test_cuda_is_checked_where_the_job_runs_not_where_the_dag_is_built(monkeypatch):
    """A cluster's login node, without a GPU, accepts ``device: cuda``: the parse-time checks pass
    and import no torch; the job on a host without a CUDA device fails, naming the host and its
    SLURM job."""
    import socket

    from learnwin.infra.config import job_device

    code = ("import sys, yaml; from snakemake.utils import validate; from learnwin.infra.config import check; "
            "cfg = yaml.safe_load(open('config/config.yaml')); cfg['device'] = 'cuda'; "
            "validate(cfg, 'workflow/schemas/config.schema.yaml', set_default=True); check(cfg); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert job_device("auto") == job_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match=rf"no CUDA device is visible on the host running this job "
                                          rf"\({socket.gethostname()}, SLURM_JOB_ID=4242"):
        job_device("cuda")


@pytest.mark.parametrize("typed, value", [("true", True), ("True", True), ("yes", True), ("1", True), ("on", True),
                                          ("false", False), ("NO", False), ("0", False), ("off", False)])
def test_booleans_as_a_user_types_them(typed, value):
    """``--config ensemble=true``, as Snakemake parses it (the string 'true', the integer 1), and a
    nested boolean key: each a bool after the coercion, which the schema then accepts; auto stays."""
    from snakemake.cli import parse_config

    from learnwin.infra.config import coerce_strings

    cfg = parse_config([f"ensemble={typed}", f"model={{layer_norm: {typed}}}", f"snapshot={{keep_directions: {typed}}}"])
    coerce_strings(cfg, SCHEMA)
    assert (cfg["ensemble"], cfg["model"]["layer_norm"], cfg["snapshot"]["keep_directions"]) == (value,) * 3
    assert all(type(v) is bool for v in (cfg["ensemble"], cfg["model"]["layer_norm"], cfg["snapshot"]["keep_directions"]))
    assert resolve({**copy.deepcopy(DEFAULT), **cfg})["ensemble"] is value


def test_words_that_are_no_boolean_are_left_for_the_schema():
    from learnwin.infra.config import coerce_strings

    cfg = {"ensemble": "auto", "model": {"layer_norm": "maybe"}, "seeds": ["1"]}
    coerce_strings(cfg, SCHEMA)
    assert cfg == {"ensemble": "auto", "model": {"layer_norm": "maybe"}, "seeds": [1]}  # integers stay integers
    with pytest.raises(WorkflowError, match="'maybe' is not of type 'boolean'"):
        resolve({**copy.deepcopy(DEFAULT), **cfg})


def test_defaults_fill_missing_sections():
    cfg = resolve({"seeds": [1]})
    assert cfg["task"]["T"] == 64 and cfg["snapshot"]["directions"] == 8
    assert cfg["optim"]["adamw"]["lr"] == 0.005 and cfg["models"][-1] == "lstm"
    assert lag_grid(cfg["snapshot"]) == list(range(2, 61, 2))


@pytest.mark.parametrize("name", ["config.yaml", "smoke.yaml", "medium.yaml", "paper.yaml", "stacks.yaml",
                                  "stacks-s6.yaml"])
def test_shipped_configs_are_valid(name):
    resolve(yaml.safe_load((ROOT / "config" / name).read_text()))


def test_snakemake_rejects_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"task": {"lags": [8, 16], "coefs": [0.5]}}))
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(bad),
         "--directory", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "task.lags has 2 entries but task.coefs has 1" in out.stdout + out.stderr
    assert "Job stats" not in out.stdout + out.stderr
    assert not (tmp_path / "results").exists()


def test_config_strings_from_the_command_line_get_the_schema_types():
    from learnwin.infra.config import coerce_strings

    cfg = {"seeds": ["2", "12"], "task": {"T": "128", "lags": ["16", "32"], "noise_std": "0.5"},
           "train": {"snapshot_epochs": ["0", "best"]}, "recovery": {"models": "null"},
           "models": ["gru"], "window": {"eps": "x"}}
    coerce_strings(cfg, SCHEMA)
    assert cfg["seeds"] == [2, 12] and cfg["task"]["T"] == 128 and cfg["task"]["lags"] == [16, 32]
    assert cfg["task"]["noise_std"] == 0.5 and cfg["train"]["snapshot_epochs"] == [0, "best"]
    assert cfg["recovery"]["models"] is None and cfg["models"] == ["gru"]
    assert cfg["window"]["eps"] == "x"  # not a number: left for the schema to reject by name
    bad = {"seeds": ["[1, 2"]}  # not even YAML: kept as it is, and the schema names it
    coerce_strings(bad, SCHEMA)
    assert bad["seeds"] == ["[1, 2"]
    with pytest.raises(Exception, match="'x' is not of type 'number'"):
        resolve(cfg)


def test_the_readmes_config_override_example_runs():
    """The exact `--config` example the README shows parses, validates and narrows the DAG."""
    import re
    import shlex

    readme = (ROOT / "README.md").read_text()
    example = re.search(r"override single keys with\s+`--config`, e.g. `(--config [^`]+)`", readme).group(1)
    args = shlex.split(example)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "seed2" in proc.stdout + proc.stderr or "seed=2" in proc.stdout + proc.stderr
    assert "seed12" not in proc.stdout and "seed=12" not in proc.stdout


def test_config_override_works_from_another_working_directory(tmp_path):
    """As experiments/sweep.py runs it: -s the Snakefile, -d elsewhere (schema found by basedir)."""
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-s", str(ROOT / "Snakefile"),
                           "-d", str(tmp_path), "--configfile", str(ROOT / "config" / "config.yaml"),
                           "--config", "seeds=[3]"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "seed3" in proc.stdout + proc.stderr


def _enums(node, key: str) -> list[list[str] | None]:
    """The ``enum`` (None if none) of the items of every ``key`` array, anywhere in the schema."""
    found = []
    for name, spec in node.get("properties", {}).items():
        if name == key and "items" in spec:
            found.append(spec["items"].get("enum"))
        found += _enums(spec, key)
    return found


def test_model_and_optimizer_names_are_the_registries():
    """The schema leaves model and optimizer names to their registries (a user's cell or a new
    optimizer is not in any enum): the config check takes the registered ones and no other."""
    from learnwin.infra.optimizers import OPTIMIZERS
    from learnwin.infra.registry import CELLS

    schema = yaml.safe_load(SCHEMA.read_text())
    assert _enums(schema, "models") == [None, None]  # top level and recovery
    assert _enums(schema, "optimizers") == [None] and "enum" not in schema["properties"]["recovery"]["properties"]["optimizer"]
    assert "properties" not in schema["properties"]["optim"]  # the registry's settings
    cfg = copy.deepcopy(DEFAULT)
    cfg["models"], cfg["optimizers"] = list(CELLS), list(OPTIMIZERS)
    resolved = resolve(cfg)
    assert resolved["models"] == list(CELLS) and resolved["optimizers"] == list(OPTIMIZERS)
    assert list(resolved["optim"]) == ["adamw", "sgd", "sgd_momentum", "adam", "rmsprop"]  # config.yaml's, then the rest
    assert resolved["optim"]["rmsprop"] == {"lr": 0.001, "weight_decay": 0.0, "alpha": 0.99}


def test_cells_module_registers_a_users_cell(fresh_registry):
    """``model.cells_module`` is imported by the check; its cell is then a valid model."""
    cfg = copy.deepcopy(DEFAULT)
    cfg["models"] = ["toy", "gru"]
    with pytest.raises(ConfigError, match=r"models \['toy'\] are not registered.*set model.cells_module"):
        resolve(copy.deepcopy(cfg))
    cfg["model"]["cells_module"] = "toy_cell"
    assert resolve(cfg)["models"] == ["toy", "gru"]
    assert "toy" in fresh_registry.CELLS


@pytest.mark.parametrize("value, names", [("diagonal", ("diagonal",)), ("exact", ("exact",)),
                                          (["exact", "diagonal"], ("diagonal", "exact")), (["exact"], ("exact",))])
def test_snapshot_transport_takes_a_string_or_a_list(value, names):
    """snapshot.transport: a plain string still works, a list computes each (docs/method.md §4b);
    the default is both."""
    cfg = copy.deepcopy(DEFAULT)
    cfg["snapshot"]["transport"] = value
    assert transports_of(resolve(cfg)["snapshot"]["transport"]) == names
    cfg = copy.deepcopy(DEFAULT)
    del cfg["snapshot"]["transport"]
    assert resolve(cfg)["snapshot"]["transport"] == ["diagonal", "exact"] == DEFAULT["snapshot"]["transport"]


def test_old_snapshot_windows_key_reads_as_times_per_lag_with_a_message():
    from learnwin.infra.config import rename_deprecated

    new = copy.deepcopy(DEFAULT)
    new["snapshot"]["times_per_lag"] = 8
    old = copy.deepcopy(DEFAULT)
    del old["snapshot"]["times_per_lag"]
    old["snapshot"]["windows"] = 8
    assert rename_deprecated(old) == ["config key snapshot.windows is deprecated: use snapshot.times_per_lag "
                                      "(same meaning)"]
    assert resolve(old) == resolve(new) and "windows" not in old["snapshot"]
    assert rename_deprecated(new) == []
    # merged over config/config.yaml (which holds the new key) as Snakemake does: the user's old key wins
    merged = copy.deepcopy(DEFAULT)
    merged["snapshot"]["windows"] = 8
    assert "snapshot.times_per_lag" in rename_deprecated(merged, given={"snapshot": {"windows": 8}})[0]
    assert resolve(merged) == resolve(copy.deepcopy(new))


def test_old_and_new_snapshot_key_both_given_is_an_error():
    from learnwin.infra.config import rename_deprecated

    both = copy.deepcopy(DEFAULT)
    both["snapshot"]["windows"] = 8
    with pytest.raises(ConfigError, match=r"snapshot.windows and snapshot.times_per_lag are both given"):
        rename_deprecated(both)


def test_snakemake_reads_the_old_key_and_names_the_new_one(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({"seeds": [2], "models": ["gru"], "optimizers": ["adamw"],
                                   "snapshot": {"windows": 8}}))
    args = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(old),
            "--directory", str(tmp_path)]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "snapshot.windows is deprecated: use snapshot.times_per_lag" in out.stderr
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump({"snapshot": {"windows": 8, "times_per_lag": 8}}))
    out = subprocess.run([*args[:-4], "--configfile", str(both), "--directory", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "snapshot.windows and snapshot.times_per_lag are both given" in out.stdout + out.stderr


def _model_default_faults(properties: dict) -> list[str]:
    """The model keys whose default the schema's ``properties`` and learnwin.infra.registry.MODEL
    state differently, or one of them not at all."""
    schema = {key: spec.get("default", "none") for key, spec in properties.items()}
    return [f"model.{key}: schema {schema.get(key, 'no key')!r}, registry {registry.MODEL.get(key, 'no key')!r}"
            for key in sorted(schema.keys() | registry.MODEL.keys())
            if key not in schema or key not in registry.MODEL or schema[key] != registry.MODEL[key]]


def test_the_model_defaults_are_the_schemas():
    """The library's defaults of the model keys (learnwin.infra.registry.MODEL, which the cells'
    constructors take through build_model) are the schema's, which fills them in the workflow's
    config: every key, stated once on each side; a default changed on one side alone fails."""
    model = yaml.safe_load(SCHEMA.read_text())["properties"]["model"]["properties"]
    assert _model_default_faults(model) == []
    assert registry.MODEL["gate_init"] == "official" and registry.shape({}) == (1, "plain")
    planted = {**model, "hidden": {**model["hidden"], "default": 64}, "extra": {"type": "integer"}}
    assert _model_default_faults(planted) == ["model.extra: schema 'none', registry 'no key'",
                                              "model.hidden: schema 64, registry 32"]


@pytest.mark.parametrize("name", registry.MODELS)
def test_build_model_with_its_shape_alone_is_the_default_workflows_network(name):
    """build_model(cell, D) called as a library builds, draw for draw, the network the workflow
    trains from a config that leaves the model section to the schema (learnwin.models.train.Run
    passes that section; docs/method.md §2)."""
    import torch

    from learnwin.models.cells import build_model

    cfg = resolve({})
    torch.manual_seed(0)
    library = build_model(name, cfg["task"]["D"]).state_dict()
    torch.manual_seed(0)
    workflow = build_model(name, cfg["task"]["D"], **cfg["model"]).state_dict()
    assert list(library) == list(workflow)
    for key, value in workflow.items():
        assert torch.equal(library[key], value), key


def test_an_optimizer_without_a_rate_rule_is_refused_at_config_check(monkeypatch):
    """A new optimizer is one registry entry (learnwin.infra.optimizers); one whose entry lacks the
    envelope's rate rule (docs/method.md §4) would give a wrong Lambda, so the config check
    refuses it by name before any job, and the envelope refuses it too; with the rule it trains,
    its settings' defaults filled in and its torch class built from the entry."""
    import torch

    from learnwin.infra import optimizers
    from learnwin.models.train import make_optimizer
    from learnwin.probing.envelope import rate_matrix

    monkeypatch.setattr(optimizers, "OPTIMIZERS", dict(optimizers.OPTIMIZERS))
    settings = {"lr": {"type": "number", "exclusiveMinimum": 0, "default": 0.5},
                "lr_decay": {"type": "number", "minimum": 0, "default": 0.25}}
    optimizers.register_optimizer("adagrad", optimizers.OptimizerSpec("torch.optim:Adagrad", "Adagrad", None, settings))
    cfg = copy.deepcopy(DEFAULT)
    cfg["optimizers"] = ["adamw", "adagrad"]
    with pytest.raises(ConfigError, match=r"optimizers: optimizer 'adagrad' has no rate rule \(OptimizerSpec.rate\)"):
        resolve(copy.deepcopy(cfg))
    param = torch.nn.Parameter(torch.ones(2, 2))
    with pytest.raises(ValueError, match="optimizer 'adagrad' has no rate rule"):
        rate_matrix(torch.nn.Linear(2, 2), ["weight"], "adagrad", {"state": {}}, {"lr": 0.5})
    optimizers.OPTIMIZERS["adagrad"] = optimizers.OptimizerSpec("torch.optim:Adagrad", "Adagrad",
                                                                optimizers.RateRule("sum"), settings)
    resolved = resolve(cfg)
    assert resolved["optim"]["adagrad"] == {"lr": 0.5, "lr_decay": 0.25}
    opt = make_optimizer("adagrad", [param], {"lr": 0.1})
    assert type(opt) is torch.optim.Adagrad and opt.param_groups[0]["lr"] == 0.1
    assert opt.param_groups[0]["lr_decay"] == 0.25 and opt.param_groups[0]["foreach"] is True
