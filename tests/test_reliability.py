"""Kill -9 during training and during a snapshot, then resume: same artifacts as a clean run.

A one-run slice of the smoke config (gru, adamw) with enough epochs that the kill lands in the
middle of training. Marked slow; CI runs it.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from workflow_helpers import ROOT, SNAKEMAKE, TABLE_TARGETS, assert_same_tables, copy_workflow, snakemake

from learnwin.infra import layout
from learnwin.infra.io import load_checkpoint

pytestmark = pytest.mark.slow

RUN = layout.RUN.format(optimizer="adamw", model="gru", seed=2)
SLICE = {"models": ["gru"], "optimizers": ["adamw"],
         "train": {"epochs": 150, "batch_size": 16, "r2_subset": 16, "snapshot_epochs": [0, "best"]}}


def _config(work: Path) -> str:
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg.update(SLICE)
    (work / "config" / "kill.yaml").write_text(yaml.safe_dump(cfg))
    return "config/kill.yaml"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("clean"))
    snakemake(work, "--cores", "2", "--configfile", _config(work), "--", *TABLE_TARGETS)
    return work


def _kill_when(work: Path, ready, timeout: float = 600) -> None:
    """Start the workflow, wait until ``ready()``, then SIGKILL Snakemake and all its jobs."""
    proc = subprocess.Popen([*SNAKEMAKE, "--cores", "2", "--configfile", _config(work), "--", *TABLE_TARGETS], cwd=work,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert proc.poll() is None, "the workflow finished before the kill point"
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _resume_state_epoch(work: Path) -> int:
    path = work / RUN / ".resume" / "state.pt"
    try:
        return int(load_checkpoint(path)["epoch"]) if path.exists() else 0
    except Exception:  # being replaced right now
        return 0


def _same_as_reference(work: Path, reference: Path) -> None:
    """Re-run as a user would after a hard kill (unlock, then the same command) and compare."""
    snakemake(work, "--unlock", "--configfile", _config(work))
    snakemake(work, "--cores", "2", "--configfile", _config(work), "--", *TABLE_TARGETS)
    assert assert_same_tables(reference / "results", work / "results") > 10
    for name in ("final.pt", "best.pt", "epoch0.pt"):
        a, b = load_checkpoint(reference / RUN / name), load_checkpoint(work / RUN / name)
        assert a["epoch"] == b["epoch"]
        for key, value in a["model"].items():
            assert torch.equal(value, b["model"][key]), (name, key)


def test_kill_during_training_resumes_from_checkpoint(reference, tmp_path):
    work = copy_workflow(tmp_path / "killed")
    _kill_when(work, lambda: _resume_state_epoch(work) >= 20)
    killed_at = _resume_state_epoch(work)
    assert 20 <= killed_at < SLICE["train"]["epochs"]
    assert not (work / RUN / "final.pt").exists()
    _same_as_reference(work, reference)
    log = (work / layout.LOGS / "train_model/adamw/gru/seed2.log").read_text()
    assert f"resuming after epoch {killed_at} " in log
    assert "epoch 1/150 " not in log.split("resuming after epoch")[1]  # not restarted from 0


def test_kill_during_snapshot_job(reference, tmp_path):
    work = copy_workflow(tmp_path / "killed")
    logs = work / layout.LOGS / "take_snapshot"
    _kill_when(work, lambda: logs.exists() and any(logs.rglob("*.log")))
    snaps = list((work / layout.ROOT).rglob("*.parquet"))
    assert all(not p.name.startswith(".") for p in snaps)  # temp files are hidden, never final
    _same_as_reference(work, reference)


def test_divergence_with_keep_going_draws_figures_from_the_runs_that_exist(tmp_path):
    """SGD with a huge lr diverges: its check fails, naming the run, and with --keep-going
    everything else finishes, figures included, with the diverged runs named in the report."""
    work = copy_workflow(tmp_path / "diverge")
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg.update(models=["const", "gru"], optimizers=["adamw", "sgd"])
    cfg["optim"] = {"sgd": {"lr": 1e30}}
    (work / "config" / "diverge.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake(work, "--cores", "2", "--keep-going", "--configfile", "config/diverge.yaml",
                    check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert re.search(r"training diverged: model=gru optimizer=sgd seed=2: training loss became "
                     r"(nan|inf) at epoch 1", text)
    res = work / "results"
    assert len(list((res / "figures").glob("*.png"))) >= 12
    summary = pd.read_csv(res / "summary.csv")
    status = dict(zip(summary["optimizer"] + "/" + summary["model"], summary["status"]))
    assert status["adamw/gru"] == "ok" and status["sgd/gru"].startswith("diverged after epoch")
    reading = (res / "reading.rst").read_text()
    assert "Missing runs" in reading and "gru/sgd/seed2" in reading and "const/sgd/seed2" in reading
    agg = pd.read_parquet(res / "stats/H_N_agg.parquet")
    assert set(agg["optimizer"]) == {"adamw"}  # the diverged runs are left out of every aggregate
    assert not (res / "train/sgd/gru/seed2/converged.txt").exists()
    assert (res / "train/adamw/gru/seed2/converged.txt").exists()
