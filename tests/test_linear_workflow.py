"""End to end: the diagonal linear cells (docs/method.md §2b) through every stage of the DAG at
smoke size (config/linear-smoke.yaml): every table of `all`; the figures, drawn from tables whose
columns do not depend on the cell, are held by the smoke run and tests/test_plots.py."""

import math

import numpy as np
import pytest
import yaml
from snakemake.utils import update_config, validate
from workflow_helpers import TABLE_TARGETS, copy_workflow, snakemake

from learnwin.infra import layout
from learnwin.infra.config import lag_grid
from learnwin.infra.io import read_table

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("linear"))
    snakemake(work, "--cores", "2", "--configfile", "config/linear-smoke.yaml", "--", *TABLE_TARGETS)
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((work / "config" / "linear-smoke.yaml").read_text()))
    validate(cfg, str(work / "workflow/schemas/config.schema.yaml"), set_default=True)
    return work, cfg


def test_every_stage_runs_the_linear_cells(linear_run):
    work, cfg = linear_run
    assert set(cfg["models"]) == {"mingru", "minlstm", "rglru", "lru", "s6"}
    lags = lag_grid(cfg["snapshot"])
    for opt in cfg["optimizers"]:
        for model in cfg["models"]:
            for epoch in cfg["train"]["snapshot_epochs"]:
                snap = work / layout.SNAP.format(optimizer=opt, model=model, seed=2, epoch=epoch)
                envelope = read_table(snap / "envelope.parquet", "envelope")
                assert set(envelope["transport"]) == {"diagonal", "exact"}
                for _, env in envelope.groupby("transport"):
                    assert list(env["lag"]) == lags and (env["f"] > 0).all() and np.isfinite(env["f"]).all()
                total = read_table(snap / "total.parquet", "total")
                sizes = total.groupby("transport").size()  # every diag sequence under each transport
                assert np.isfinite(total["S"]).all() and sizes.to_dict() == {"diagonal": 64, "exact": 64}
                assert cfg["task"]["n_diag"] == 64
            assert (work / layout.DECAY.format(optimizer=opt, model=model, epoch="best")).stat().st_size > 0
    agg = read_table(work / layout.STATS["H_N_agg"], "H_N")
    assert set(agg["model"]) == set(cfg["models"])
    assert (work / layout.SUMMARY["parquet"]).stat().st_size > 0


def test_lru_at_init_decays_at_tau_init_in_the_artifacts(linear_run):
    """Every LRU unit starts at |lambda| = 1 - s, so under SGD (Lambda = lr) its diagonal envelope
    at epoch 0 is lr sum_q |c_q| (1 - s)^l: log f falls by -ln(1 - s) per lag, for any c."""
    work, cfg = linear_run
    s = cfg["model"]["const_s"]
    snap = work / layout.SNAP.format(optimizer="sgd", model="lru", seed=2, epoch=0)
    env = read_table(snap / "envelope.parquet", "envelope")
    env = env[env["transport"] == "diagonal"]
    slope = np.diff(np.log(env["f"])) / np.diff(env["lag"])
    np.testing.assert_allclose(slope, math.log(1 - s), rtol=1e-4)
