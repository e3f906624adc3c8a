"""A plain module named by import path (``recovery.modules``, docs/method.md §10b "Any model") runs
through ``snakemake recovery`` beside a registered cell: its budget jobs' scores are
learnwin.measure_window's for the same seeds (one protocol), its learning budgets and window are
in the aggregate's tables, and its snapshot jobs and prediction are skipped with a message."""

import os

import pandas as pd
import plain_model
import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow, scheduled, snakemake

from learnwin import measure_window
from learnwin.infra import layout
from learnwin.infra.io import read_table

pytestmark = pytest.mark.slow

BUDGETS, LAGS = [16, 32, 64, 128], [1, 3, 5]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("plain") / "w")
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["recovery"].update(protocol="budget", budgets=BUDGETS, lags=LAGS, models=["const", "torch_gru"],
                           modules={"torch_gru": "plain_model:make"})
    (work / "config" / "plain.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = ("--configfile", "config/plain.yaml")
    jobs = scheduled(work, *args, "--", "recovery", env=env)
    proc = snakemake(work, "--cores", "2", *args, "--", "recovery", env=env)
    return work, cfg, jobs, proc


def test_the_plain_modules_budget_jobs_run_and_its_snapshots_are_skipped(run):
    work, cfg, jobs, proc = run
    seeds = len(cfg["recovery"]["seeds"])
    assert jobs["train_budget"] == 2 * seeds and jobs["snapshot_budget"] == seeds  # const's only
    assert "Note: torch_gru (recovery.modules) run the budget protocol's trainings only" in proc.stderr
    snaps = {p.parts[-3] for p in (work / "results").rglob("*.parquet") if "snapshot" in str(p.parent)}
    assert "torch_gru" not in snaps


def test_its_scores_are_measure_windows_and_its_window_is_in_the_tables(run):
    work, cfg, _, _ = run
    res = {name: read_table(work / path.format(seed_set="exploration"), layout.budget_schema(name))
           for name, path in layout.BUDGET.items()}
    scores = res["scores"][res["scores"]["model"] == "torch_gru"].reset_index(drop=True)
    rec = cfg["recovery"]
    lib = measure_window(plain_model.make, name="torch_gru", T=cfg["task"]["T"], D=cfg["task"]["D"],
                         noise_std=cfg["task"]["noise_std"], lags=LAGS, budgets=BUDGETS, seeds=rec["seeds"],
                         batch_size=cfg["train"]["batch_size"], optim_config=dict(lr=0.005, weight_decay=1e-4),
                         n_test=rec["n_test"], n_perm=rec["n_perm"], progress=False).scores
    lib = lib.astype({c: "float32" for c in ("r", "null")})  # as the tables store them
    pd.testing.assert_frame_equal(scores.drop(columns="seconds"), lib.drop(columns="seconds"), check_dtype=False)
    for name in ("learning_budget", "window", "H_emp", "slopes"):
        assert {"const", "torch_gru"} <= set(res[name]["model"]), name
    for name in ("prediction", "network_H_N", "learning_slope"):
        assert "torch_gru" not in set(res[name]["model"]) and "const" in set(res[name]["model"]), name
