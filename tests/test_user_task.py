"""A user's task, declared in one place (docs/architecture.md, "Where a change goes"; docs/method.md
§1): tests/toy_task.py draws it and registers it; the config names that module in ``task.module``
and the task in ``task.kind``, and nothing else in the package or the workflow mentions it."""

import json
import os

import numpy as np
import pytest
import yaml
from snakemake.utils import validate
from workflow_helpers import ROOT, copy_workflow, schema_defaults, snakemake

from learnwin.infra import config, io
from learnwin.infra.config import ConfigError
from learnwin.infra.io import read_table
from learnwin.tasks.splits import write_splits

TASK = dict(schema_defaults("task"), T=12, D=3, lags=[2, 5], coefs=[0.6, -0.4], noise_std=0.0,
            n_train=4, n_val=2, n_diag=3)


def tanh_targets(x, u, lags, coefs):
    """The toy task's noise-free targets, written out from its docstring."""
    y = np.zeros(x.shape[:2])
    for lag, coef in zip(lags, coefs):
        y[:, lag:] += coef * np.tanh(2 * (x[:, :-lag].astype(np.float64) @ u))
    return y


def test_the_task_kind_chooses_what_the_data_job_draws(tmp_path):
    """task.kind = tanh from task.module = toy_task: the splits hold its targets (not the synthetic
    task's), and task.json names the task; the default kind writes the synthetic targets."""
    write_splits(2, dict(TASK, kind="tanh", module="toy_task"), tmp_path / "tanh")
    write_splits(2, TASK, tmp_path / "synthetic")
    meta = json.loads((tmp_path / "tanh" / "task.json").read_text())
    assert meta["task"]["kind"] == "tanh"
    u = np.asarray(meta["u"], np.float32)
    for split, n in (("train", 4), ("val", 2), ("diag", 3)):
        x, y = io.load_split(tmp_path / "tanh", split)
        assert x.shape == (n, 12, 3)
        np.testing.assert_allclose(y, tanh_targets(x, u, [2, 5], [0.6, -0.4]), rtol=1e-5, atol=1e-6)
        x0, y0 = io.load_split(tmp_path / "synthetic", split)
        np.testing.assert_array_equal(x0, x)  # the same inputs: only the targets are the task's
        assert np.abs(y0 - y).max() > 0.05


def test_the_config_check_refuses_an_unregistered_task():
    """An unknown task.kind or an unimportable task.module stops the parse, naming the key."""
    full = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    validate(full, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    full["task"].update(kind="no_such_task")
    with pytest.raises(ConfigError, match=r"task.kind = 'no_such_task' is not a registered task; allowed: .*synthetic"
                                          r".*set task.module"):
        config.check(full)
    full["task"].update(module="no_such_tasks")
    with pytest.raises(ConfigError, match=r"task.module = 'no_such_tasks' cannot be imported"):
        config.check(full)
    full["task"].update(kind="tanh", module="toy_task")
    config.check(full)


@pytest.mark.slow
def test_a_registered_task_runs_through_the_smoke_dag(tmp_path):
    """The smoke DAG on the toy task: its data job draws the toy's targets and every stage after
    it runs on them, down to the window and the claims."""
    work = copy_workflow(tmp_path)
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg.update(models=["gru"], optimizers=["sgd"])
    cfg["task"].update(kind="tanh", module="toy_task")
    cfg["recovery"]["optimizer"] = "sgd"
    (work / "config" / "tanh.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    snakemake(work, "--cores", "1", "--configfile", "config/tanh.yaml", env=env)

    res = work / "results"
    data = next(res.glob("data/seed*"))
    meta = json.loads((data / "task.json").read_text())
    assert meta["task"]["kind"] == "tanh"
    x, y = io.load_split(data, "train")
    task = meta["task"]
    y_clean = tanh_targets(x, np.asarray(meta["u"], np.float32), task["lags"], task["coefs"])
    assert np.std(y - y_clean) < 1.5 * task["noise_std"]  # the toy's targets plus its noise
    snap = res / "snapshots/sgd/gru" / data.name / "epochbest"
    for name in ("envelope", "psi", "window"):
        assert len(read_table(snap / f"{name}.parquet", name)), name
    assert len(read_table(res / "stats/H_N_agg.parquet", "H_N"))
