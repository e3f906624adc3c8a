"""A user's cell through the whole workflow, declared in one place (docs/method.md §2a), in a
two-layer stack (docs/method.md §2c).

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
from learnwin.report.formatting import table_after
from learnwin.stats import claims
from learnwin.stats.layers import layer_envelopes

pytestmark = pytest.mark.slow


def test_registered_toy_cell_runs_through_the_smoke_dag_in_a_two_layer_stack(tmp_path):
    work = copy_workflow(tmp_path)
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg.update(models=["toy", "gru"], optimizers=["sgd"])
    cfg["model"].update(cells_module="toy_cell", layers=2, block="mlp")
    cfg["recovery"]["optimizer"] = "sgd"
    (work / "config" / "toy.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    snakemake(work, "--cores", "1", "--configfile", "config/toy.yaml", env=env)

    res = work / "results"
    lags = np.array(lag_grid(cfg["snapshot"]))
    H = cfg["model"]["hidden"]
    ckpt = load_checkpoint(res / "train/sgd/toy/seed2/best.pt")
    # the registered class was trained in both layers: its fixed leaks are in the checkpoint
    a = ckpt["model"]["cell.layers.0.cell.a"]
    torch.testing.assert_close(a, torch.linspace(0.5, 0.9, H))
    torch.testing.assert_close(ckpt["model"]["cell.layers.1.cell.a"], a)
    # analytic oracle on the toy's real artifact: under SGD (Lambda = lr) its zero-order envelope
    # is lr * sum over both layers' units of a_q^l whatever the trained weights (Gamma0 = a_q^l,
    # receiving factor 1); the layers' envelopes (the units table summed over each layer's units)
    # add up to the stack's under both transports
    snap = res / "snapshots/sgd/toy/seed2/epochbest"
    envelope = read_table(snap / "envelope.parquet", "envelope")
    envelope = envelope[envelope["transport"] == "diagonal"]  # f_order0 is the diagonal path's
    oracle = cfg_lr(work) * (a.double().numpy()[None, :] ** lags[:, None]).sum(1)
    np.testing.assert_allclose(envelope["f_order0"], 2 * oracle, rtol=1e-5)
    units = read_table(snap / "units.parquet", "units")
    per_layer = layer_envelopes(units, layers=2)
    for transport, env in read_table(snap / "envelope.parquet", "envelope").groupby("transport"):
        f = per_layer[per_layer["transport"] == transport].groupby("lag")["f"].sum()
        np.testing.assert_allclose(f.to_numpy(), env.sort_values("lag")["f"].to_numpy(), rtol=1e-6)
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
    a = table_after(findings, "**(a) Envelope class**").set_index("model")
    assert a.loc["rows held", "diagonal"] == f"{k}/{n}" and a.loc["toy", "diagonal"].startswith("*")

def cfg_lr(work):
    """SGD's learning rate as the run resolved it (config/config.yaml under the smoke file)."""
    return yaml.safe_load((work / "results" / "provenance.yaml").read_text())["config"]["optim"]["sgd"]["lr"]
