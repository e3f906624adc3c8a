"""Cross-field config checks that a JSON schema cannot express.

The schema (``workflow/schemas/config.schema.yaml``) checks keys, types, enums and ranges and
fills in defaults; :func:`check` then checks the model names against the cell registry, the
task against the task table (:mod:`learnwin.infra.tasks`), the
optimizers and their ``optim`` sections against the optimizer registry (which fills their
defaults, :mod:`learnwin.infra.optimizers`) and how keys relate (docs/method.md §1, §2a, §3-§7). Both run when
the Snakefile is parsed, so a bad config fails before any job starts; neither imports torch, and
the one check that needs the job's host, a visible CUDA device, runs in the job (:func:`job_device`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from learnwin.infra import optimizers, registry, tasks

#: Renamed keys still read under their old name: (section, old key, new key).
RENAMED = (("snapshot", "windows", "times_per_lag"),)


class ConfigError(ValueError):
    """A config value is invalid; the message names the key and what is allowed."""


#: How a user types a boolean on the command line (``--config ensemble=yes``), any letter case.
BOOLEAN_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def _allowed_types(node: Mapping) -> set[str]:
    kinds = node.get("type", [])
    kinds = {kinds} if isinstance(kinds, str) else set(kinds)
    if any(isinstance(v, bool) for v in node.get("enum", ())):  # e.g. ensemble: [auto, true, false]
        kinds.add("boolean")
    for option in node.get("anyOf", []):
        kinds |= _allowed_types(option)
    return kinds


def _boolean(value: Any) -> Any:
    """``value`` as a bool where it is one of :data:`BOOLEAN_WORDS` (or the integer 0 or 1, which
    ``--config key=1`` gives), else unchanged."""
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return BOOLEAN_WORDS.get(value.strip().lower(), value)
    return value


def _coerce(value: Any, node: Mapping) -> Any:
    kinds = _allowed_types(node)
    if "boolean" in kinds and not kinds & {"integer", "number"}:
        value = _boolean(value)
    if isinstance(value, str) and kinds & {"integer", "number", "boolean", "array", "null"}:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:  # not YAML: left for the schema to reject by name
            parsed = value
        matches = {"integer": int, "number": (int, float), "boolean": bool, "array": list,
                   "null": type(None)}
        if any(isinstance(parsed, matches[k]) for k in kinds & matches.keys()) and not (
                isinstance(parsed, bool) and "boolean" not in kinds):
            value = parsed
    if isinstance(value, list) and "items" in node:
        return [_coerce(v, node["items"]) for v in value]
    if isinstance(value, dict):
        props = node.get("properties", {})
        return {k: _coerce(v, props[k]) if k in props else v for k, v in value.items()}
    return value


def coerce_strings(config: dict, schema: str | Path) -> None:
    """Turn the strings that ``snakemake --config`` leaves into the types the schema asks for.

    ``--config seeds='[2]'`` arrives as ``['2']``; each string whose key or list item the schema
    types as integer, number, boolean, array or null is parsed as YAML and kept when the parsed
    value has an allowed type. A key that may be a boolean (``type: boolean``, or true and false
    in its ``enum``) and not a number takes the words of :data:`BOOLEAN_WORDS` and 0 or 1 as a
    user types them (``--config ensemble=true``, ``model.layer_norm=no``). Other strings are left
    for the schema to reject with its usual message. Runs before validation.
    """
    props = {**yaml.safe_load(Path(schema).read_text())["properties"], "optim": optimizers.schema()}
    for key in list(config):
        if key in props:
            config[key] = _coerce(config[key], props[key])


#: The transports of docs/method.md §4 (diagonal) and §4b (exact), in the order tables list them.
TRANSPORTS = ("diagonal", "exact")


def transports_of(transport: str | Sequence[str]) -> tuple[str, ...]:
    """The transports to compute, in :data:`TRANSPORTS` order, from ``snapshot.transport``:
    ``diagonal``, ``exact`` or a list of them (docs/method.md §4b)."""
    names = (transport,) if isinstance(transport, str) else tuple(transport)
    bad = [n for n in names if n not in TRANSPORTS]
    if not names or bad:
        raise ConfigError(f"snapshot.transport = {transport!r}; allowed: {', '.join(TRANSPORTS)} or a list of them")
    return tuple(n for n in TRANSPORTS if n in names)


def rename_deprecated(config: dict, given: Mapping | None = None) -> list[str]:
    """Move each renamed key of :data:`RENAMED` found in ``config`` to its new name and return
    one deprecation message per key moved, naming the new key (the Snakefile prints them:
    Snakemake does not show Python warnings raised while it parses). Runs before validation.

    ``given`` is the part of ``config`` the user gave (the Snakefile passes the ``--configfile``
    and ``--config`` values, which Snakemake merges over config/config.yaml, where the new key
    always stands); the old key given there replaces the new key's value, and both given there
    raise :class:`ConfigError`. ``given`` None: ``config`` itself.
    """
    given = config if given is None else given
    messages = []
    for section, old, new in RENAMED:
        node, user = config.get(section), given.get(section)
        if not isinstance(node, dict) or old not in node:
            continue
        if isinstance(user, Mapping) and old in user and new in user:
            raise ConfigError(f"{section}.{old} and {section}.{new} are both given: {section}.{old} is "
                              f"the deprecated name of {section}.{new}; keep only {section}.{new}")
        messages.append(f"config key {section}.{old} is deprecated: use {section}.{new} (same meaning)")
        node[new] = node.pop(old)
    return messages


def lag_grid(snapshot: Mapping) -> list[int]:
    """Diagnostic lags ``lag_start..lag_stop`` (inclusive) in steps of ``lag_step`` (docs/method.md §4)."""
    return list(range(snapshot["lag_start"], snapshot["lag_stop"] + 1, snapshot["lag_step"]))


def load(root: str | Path, *overlays: str | Path) -> dict:
    """``config/config.yaml`` of the checkout ``root`` with each overlay file read on top, in
    order, nested sections merged one level deep (as Snakemake's repeated ``--configfile``); no
    schema defaults, no checks: for readers outside the workflow (experiments/)."""
    config = yaml.safe_load((Path(root) / "config" / "config.yaml").read_text())
    for path in overlays:
        for key, value in (yaml.safe_load(Path(path).read_text()) or {}).items():
            config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) else value
    return config


def check_models(config: Mapping) -> None:
    """``models`` and ``recovery.models`` name registered cells, after importing
    ``model.cells_module`` (docs/method.md §2a), and ``model.block`` a registered block (§2c). The registry, not a schema enum, is the list: a
    user's cell registers itself where the schema cannot see it. Reads only the registry's
    metadata: it imports no cell class."""
    module = config["model"].get("cells_module")
    try:
        registry.load_cells(module)
    except ImportError as err:
        raise ConfigError(f"model.cells_module = {module!r} cannot be imported: {err}") from err
    modules = config["recovery"].get("modules") or {}
    for key, names, plain in (("models", config["models"], {}),
                              ("recovery.models", config["recovery"]["models"] or [], modules)):
        unknown = [m for m in names if m not in registry.CELLS and m not in plain]
        if unknown:
            raise ConfigError(f"{key} {unknown} are not registered cells; allowed: {', '.join(registry.CELLS)}"
                              + ("" if module else " (a cell of your own: set model.cells_module)")
                              + (f"; recovery.models may also name recovery.modules {sorted(modules)}" if modules else ""))
    for name in modules:
        if name in registry.CELLS or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise ConfigError(f"recovery.modules: {name!r} must match [a-z][a-z0-9_]* and not be a registered cell")
    block = registry.shape(config["model"])[1]
    if block != "published" and block not in registry.BLOCKS:
        raise ConfigError(f"model.block = {block!r} is not a registered block; allowed: published, "
                          f"{', '.join(registry.BLOCKS)} (docs/method.md §2c)")


def check_optimizers(config: dict) -> None:
    """``optimizers`` and ``recovery.optimizer`` name registered optimizers whose entries have the
    envelope's rate rule (docs/method.md §3-4), and the ``optim`` section holds their settings only,
    within their schemas: validated against :func:`learnwin.infra.optimizers.schema`, which fills the
    defaults of every registered optimizer here as the JSON schema fills the other sections'."""
    for key, names in (("optimizers", config["optimizers"]), ("recovery.optimizer", [config["recovery"]["optimizer"]])):
        unknown = [name for name in names if name not in optimizers.OPTIMIZERS]
        if unknown:
            raise ConfigError(f"{key} {unknown} are not registered optimizers; allowed: "
                              f"{', '.join(optimizers.OPTIMIZERS)} (learnwin.infra.optimizers)")
        for name in names:
            try:
                optimizers.rate_rule(name)
            except ValueError as err:
                raise ConfigError(f"{key}: {err}") from err
    optim = config.setdefault("optim", {})
    for name, spec in optimizers.OPTIMIZERS.items():
        section = optim.setdefault(name, {})
        if isinstance(section, dict):
            for setting, node in spec.settings.items():
                section.setdefault(setting, node["default"])
    try:
        jsonschema.validate(optim, optimizers.schema())
    except jsonschema.ValidationError as err:
        where = ".".join(["optim", *map(str, err.absolute_path)])
        raise ConfigError(f"{where}: {err.message}") from err


def check(config: Mapping) -> None:
    """Raise :class:`ConfigError` on the first cross-field violation."""
    check_models(config)
    check_optimizers(config)
    try:
        tasks.spec_of(config["task"])
    except ValueError as err:
        raise ConfigError(str(err)) from err
    task, train, snap = config["task"], config["train"], config["snapshot"]
    T = task["T"]
    if len(task["lags"]) != len(task["coefs"]):
        raise ConfigError(
            f"task.lags has {len(task['lags'])} entries but task.coefs has "
            f"{len(task['coefs'])}: give one coefficient per task lag"
        )
    bad = [lag for lag in task["lags"] if lag >= T]
    if bad:
        raise ConfigError(f"task.lags {bad} must be < task.T = {T}")
    if train["batch_size"] > task["n_train"]:
        raise ConfigError(
            f"train.batch_size = {train['batch_size']} must be <= task.n_train = {task['n_train']}"
        )
    late = [e for e in train["snapshot_epochs"] if isinstance(e, int) and e > train["epochs"]]
    if late:
        raise ConfigError(
            f"train.snapshot_epochs {late} exceed train.epochs = {train['epochs']}; allowed: "
            f"integers 0..{train['epochs']}, 'best', 'final'"
        )
    if snap["lag_start"] > snap["lag_stop"]:
        raise ConfigError(
            f"snapshot.lag_start = {snap['lag_start']} must be <= snapshot.lag_stop = "
            f"{snap['lag_stop']}"
        )
    if snap["lag_stop"] >= T:
        raise ConfigError(f"snapshot.lag_stop = {snap['lag_stop']} must be < task.T = {T}")
    grid = config["window"]["N_grid"]
    if any(b <= a for a, b in zip(grid, grid[1:])):
        raise ConfigError(f"window.N_grid = {grid} must be strictly increasing")
    fig_epoch = config["figures"]["epoch"]
    if fig_epoch not in train["snapshot_epochs"]:
        raise ConfigError(
            f"figures.epoch = {fig_epoch!r} must be one of train.snapshot_epochs = "
            f"{train['snapshot_epochs']}"
        )
    check_exact_size(config)
    check_recovery(config)
    check_budget(config)


def job_device(device: str) -> str:
    """The torch device of a job for config key ``device``, resolved on the host where the job runs
    (:func:`learnwin.infra.runtime.resolve_device`): a cluster builds the DAG on a login node that
    has no GPU, so ``device: cuda`` is checked here, not by :func:`check`. No CUDA device visible
    under ``cuda``: a :class:`ConfigError` naming the host (and its SLURM job and
    ``CUDA_VISIBLE_DEVICES``)."""
    import os
    import socket

    from learnwin.infra import runtime

    try:
        return runtime.resolve_device(device)
    except RuntimeError as err:
        env = {k: os.environ[k] for k in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES") if k in os.environ}
        where = socket.gethostname() + "".join(f", {k}={v}" for k, v in env.items())
        raise ConfigError(f"device = 'cuda' but no CUDA device is visible on the host running this job ({where}); "
                          "run it on a GPU node (profiles/slurm asks SLURM for one) or set device: auto or cpu") from err


#: The largest batch of float32 one-step Jacobians (B, T, n, n) the exact transport may hold (docs/method.md §2c).
EXACT_JACOBIAN_BYTES = 8 * 2**30


def exact_jacobian_bytes(config: Mapping, model: str, batch: int | None = None) -> int:
    """Bytes of one snapshot batch's float32 one-step Jacobians (B, T, r, n) of ``model`` (docs/method.md
    §4b, §2c): n and the r rows stored (the convolution windows' copied rows are not) from the
    registry's metadata; B = ``batch``, or the snapshot's batch."""
    snap, task = config["snapshot"], config["task"]
    if batch is None:
        batch = min(snap["batch_size"], task["n_diag"])
    spec = registry.CELLS[model]
    return batch * task["T"] * spec.state_width(config["model"], stored=True) * spec.state_width(config["model"]) * 4


def check_exact_size(config: Mapping) -> None:
    """One sequence's one-step Jacobians fit in :data:`EXACT_JACOBIAN_BYTES` for every model, as
    the Lyapunov spectrum of every snapshot needs (docs/method.md §4c); with the exact transport,
    one snapshot batch's do (docs/method.md §2c): the stacks' n grows with the layers and the
    convolution windows."""
    snap, task = config["snapshot"], config["task"]
    for name in config["models"]:
        one = exact_jacobian_bytes(config, name, batch=1)
        if one > EXACT_JACOBIAN_BYTES:
            n = registry.CELLS[name].state_width(config["model"])
            raise ConfigError(
                f"{name}'s full state has n = {n} components: the Lyapunov spectrum of every snapshot "
                f"(docs/method.md §4c) needs {one / 2**30:.0f} GiB of one-step Jacobians for one sequence of "
                f"task.T = {task['T']} (limit {EXACT_JACOBIAN_BYTES // 2**30} GiB); lower task.T, model.hidden "
                "or model.layers")
    if "exact" not in transports_of(snap["transport"]):
        return
    batch = min(snap["batch_size"], task["n_diag"])
    for name in config["models"]:
        size = exact_jacobian_bytes(config, name)
        if size > EXACT_JACOBIAN_BYTES:
            n = registry.CELLS[name].state_width(config["model"])
            fits = EXACT_JACOBIAN_BYTES // exact_jacobian_bytes(config, name, batch=1)
            raise ConfigError(
                f"snapshot.transport lists exact, but {name}'s full state has n = {n} components: one batch "
                f"of snapshot.batch_size = {batch} needs {size / 2**30:.0f} GiB of one-step Jacobians "
                f"(limit {EXACT_JACOBIAN_BYTES // 2**30} GiB); lower snapshot.batch_size to "
                f"{fits}" + (" or less" if fits else " (no batch fits)") + ", or drop exact")


def check_recovery(config: Mapping) -> None:
    """Cross-field checks of the ``recovery`` section (ground truth of the window, docs/method.md §10)."""
    rec, bs, T = config["recovery"], config["train"]["batch_size"], config["task"]["T"]
    n_train = rec["n_train"]
    if any(b <= a for a, b in zip(n_train, n_train[1:])):
        raise ConfigError(f"recovery.n_train = {n_train} must be strictly increasing")
    if bs > n_train[0]:
        raise ConfigError(f"train.batch_size = {bs} must be <= min(recovery.n_train) = {n_train[0]}")
    if rec["steps"] * bs < n_train[-1]:
        raise ConfigError(
            f"recovery.steps * train.batch_size = {rec['steps'] * bs} must be >= "
            f"max(recovery.n_train) = {n_train[-1]} so that every run sees all its sequences")
    lags = recovery_lags(config)
    if any(b <= a for a, b in zip(lags, lags[1:])) or lags[-1] >= T:
        raise ConfigError(f"recovery.lags = {lags} must be strictly increasing and < task.T = {T}")
    extra = sorted(set(rec["validate_n_train"]) - set(n_train))
    if extra:
        raise ConfigError(f"recovery.validate_n_train {extra} must be entries of recovery.n_train")
    seeds = rec["seeds"] or config["seeds"]
    if rec["steps_check_seeds"] > len(seeds):
        raise ConfigError(f"recovery.steps_check_seeds = {rec['steps_check_seeds']} exceeds the "
                          f"{len(seeds)} recovery seeds")
    off_grid = sorted(set(n_train) - set(config["window"]["N_grid"]))
    if off_grid:
        raise ConfigError(f"recovery.n_train {off_grid} must be entries of window.N_grid "
                          "(the predicted H_N exists only there)")
    if rec["protocol"] != "dataset":  # the budget protocol reads nothing of the main run
        return
    # the dataset protocol's aggregate reads the main run's snapshots of these models (§10)
    extra = sorted(set(rec["models"] or []) - set(config["models"]))
    if extra:
        raise ConfigError(f"recovery.models {extra} must be entries of models = {config['models']} "
                          "(recovery.protocol = 'dataset' compares with the main run's snapshots)")
    if rec["optimizer"] not in config["optimizers"]:
        raise ConfigError(f"recovery.optimizer = {rec['optimizer']!r} must be one of "
                          f"optimizers = {config['optimizers']} (recovery.protocol = 'dataset')")
    if rec["epoch"] not in config["train"]["snapshot_epochs"]:
        raise ConfigError(f"recovery.epoch = {rec['epoch']!r} must be one of "
                          f"train.snapshot_epochs = {config['train']['snapshot_epochs']} (recovery.protocol = 'dataset')")


def check_budget(config: Mapping) -> None:
    """Cross-field checks of the budget protocol's keys (docs/method.md §10b): ``recovery.budgets``
    strictly increasing multiples of ``train.batch_size``; ``recovery.confirm_seeds`` disjoint from
    the exploration seeds."""
    rec, bs = config["recovery"], config["train"]["batch_size"]
    budgets = rec["budgets"]
    if any(b <= a for a, b in zip(budgets, budgets[1:])) or any(b % bs for b in budgets):
        raise ConfigError(f"recovery.budgets = {budgets} must be strictly increasing multiples of "
                          f"train.batch_size = {bs} (each budget ends on a full step)")
    shared = sorted(set(rec["confirm_seeds"]) & set(rec["seeds"] or config["seeds"]))
    if shared:
        raise ConfigError(f"recovery.confirm_seeds {shared} are also exploration seeds (recovery.seeds); "
                          "the confirmatory seeds must be seeds no other run has used")


def recovery_lags(config: Mapping) -> list[int]:
    """The bisection lag grid: ``recovery.lags``, or the snapshot grid when null."""
    if config["recovery"]["lags"]:
        return [int(v) for v in config["recovery"]["lags"]]
    s = config["snapshot"]
    return list(range(s["lag_start"], s["lag_stop"] + 1, s["lag_step"]))