"""A user's cell through the whole workflow, declared in one place (docs/method.md §2a).

tests/toy_cell.py defines the cell and registers it; the config names that module in
``model.cells_module`` and nothing else in the package or the workflow mentions the toy.
"""

import os

import numpy as np
import pytest
import torch
import yaml
from workflow_helpers import ROOT, copy_workflow, snakemake

from learnwin.infra import layout
from learnwin.infra.config import lag_grid
from learnwin.infra.io import load_checkpoint, read_table
from learnwin.stats import claims

pytestmark = pytest.mark.slow


def test_registered_toy_cell_runs_through_the_smoke_dag(tmp_path):
    work = copy_workflow(tmp_path)
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg.update(models=["toy", "gru"], optimizers=["sgd"])
    cfg["model"]["cells_module"] = "toy_cell"
    cfg["recovery"]["optimizer"] = "sgd"
    (work / "config" / "toy.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    snakemake(work, "--cores", "1", "--configfile", "config/toy.yaml", env=env)

    res = work / "results"
    lags = np.array(lag_grid(cfg["snapshot"]))
    H = cfg["model"]["hidden"]
    ckpt = load_checkpoint(res / "train/sgd/toy/seed2/best.pt")
    a = ckpt["model"]["cell.a"]  # the registered class was trained: its fixed leaks are in the checkpoint
    torch.testing.assert_close(a, torch.linspace(0.5, 0.9, H))
    # analytic oracle on the toy's real artifact: under SGD (Lambda = lr) its zero-order envelope
    # is lr * sum_q a_q^l whatever the trained weights (Gamma0 = a_q^l, receiving factor 1)
    snap = res / "snapshots/sgd/toy/seed2/epochbest"
    envelope = read_table(snap / "envelope.parquet", "envelope")
    envelope = envelope[envelope["transport"] == "diagonal"]  # f_order0 is the diagonal path's
    oracle = cfg_lr(work) * (a.double().numpy()[None, :] ** lags[:, None]).sum(1)
    np.testing.assert_allclose(envelope["f_order0"], oracle, rtol=1e-5)
    for name in ("units", "psi", "total", "memory", "alpha", "H_N", "window"):
        assert len(read_table(snap / f"{name}.parquet", name)), name
    agg = read_table(res / "stats/H_N_agg.parquet", "H_N")
    assert set(agg["model"]) == {"toy", "gru"}
    assert len(list((res / "figures").glob("*.png"))) >= 12
    # the claims rule reports the toy (no expectation in the paper) and scores only the GRU
    table = read_table(layout.under(res, layout.CLAIMS["parquet"]), "claims")
    toy = table[(table["model"] == "toy") & table["claim"].isin(["a", "b"])]
    assert len(toy) and (toy["expected"] == claims.NO_EXPECTATION).all() and not toy["holds"].any()
    # the smoke config runs both transports: the diagonal transport's gamma functional is one scope
    scored = table[(table["model"] == "gru") & (table["claim"] == "a") & (table["transport"] == "diagonal")]
    k, n = int(scored["holds"].sum()), len(scored)
    assert claims.claim_scores(table)["a:diagonal:gamma"] == f"{k}/{n}"
    findings = layout.under(res, layout.CLAIMS["findings"]).read_text()
    assert f"{k} of {n} (model, optimizer) rows hold (diagonal transport, gamma)" in findings

def cfg_lr(work):
    """SGD's learning rate as the run resolved it (config/config.yaml under the smoke file)."""
    return yaml.safe_load((work / "results" / "provenance.yaml").read_text())["config"]["optim"]["sgd"]["lr"]
