"""The cost law behind the rules' run-time requests: its work terms, its fit, its requests."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from learnwin.infra import layout, resources
from learnwin.models.cells import CELLS, build_model

ROOT = Path(__file__).resolve().parents[1]


def _cost_law():
    spec = importlib.util.spec_from_file_location("cost_law", ROOT / "experiments" / "cost_law.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(T, H, n, epochs=2):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["task"].update(T=T, n_train=n, n_diag=n)
    cfg["model"]["hidden"] = H
    cfg["train"]["epochs"] = epochs
    return cfg


def test_gate_blocks_are_the_cells_recurrent_matrices():
    assert set(resources.GATES) == set(CELLS)
    for model, blocks in resources.GATES.items():
        cell = build_model(model, 3, 5).cell
        assert sum(tuple(p.shape) == (5, 5) for p in cell.parameters()) == blocks, model


def test_work_terms():
    cfg = _config(T=16, H=4, n=64)
    steps = 2 * (64 // cfg["train"]["batch_size"])
    B = cfg["train"]["batch_size"]
    assert resources.work("train_model", cfg, "gru").tolist() == [1, steps * 16, steps * 16 * B * 3 * 16]
    assert resources.work("take_snapshot", cfg, "lstm").tolist() == [1, 64 * 16, 64 * 16 * 4 * 16, 64 * 16 * 16 * 4]


def _write_rung(root: Path, cfg: dict, coef: dict, memory_share: float = 0.0) -> Path:
    """Benchmark TSVs whose cpu_time is exactly the law (a snapshot split into a snapshot job
    and an old-style memory-curve job when memory_share > 0)."""
    bench = layout.under(root, layout.BENCH)
    for rule, c in coef.items():
        for model in CELLS:
            cpu = float(resources.work(rule, cfg, model) @ np.asarray(c))
            parts = {rule: cpu}
            if rule == "take_snapshot" and memory_share:
                parts = {rule: cpu * (1 - memory_share), "memory_curve": cpu * memory_share}
            for name, value in parts.items():
                tsv = bench / name / "adamw" / model / "seed2.tsv"
                tsv.parent.mkdir(parents=True, exist_ok=True)
                pd.DataFrame({"s": [value], "cpu_time": [value]}).to_csv(tsv, sep="\t", index=False)
    return root


def test_cost_law_fit_recovers_the_law_it_was_drawn_from(tmp_path):
    law = _cost_law()
    coef = {"train_model": (2.0, 1e-4, 5e-10), "take_snapshot": (3.0, 2e-5, 1e-9, 4e-8)}
    rungs = [(_write_rung(tmp_path / f"r{i}", cfg, coef, memory_share=0.3 * (i == 1)), cfg)
             for i, cfg in enumerate([_config(32, 16, 256), _config(64, 32, 1024), _config(128, 64, 2048, 5)])]
    for rule, true in coef.items():
        fitted, per_rung = law.fit(rungs, rule)
        np.testing.assert_allclose(fitted, true, rtol=1e-6)
        np.testing.assert_allclose(per_rung["fitted"], per_rung["cpu"], rtol=1e-9)


def test_requests_follow_the_law(monkeypatch):
    monkeypatch.setattr(resources, "COEF", {"train_model": (60.0, 0.0, 0.0), "take_snapshot": (600.0, 0, 0, 0)})
    cfg = _config(T=16, H=4, n=64)
    cfg["snapshot"]["transport"] = "diagonal"
    assert resources.train_runtime_min(cfg, "gru") == resources.MIN_RUNTIME  # 2 x 1 min < 10 min
    assert resources.snapshot_runtime_min(cfg, "gru") == 20  # 2 x 10 min
    for both in ("exact", ["diagonal", "exact"], ["exact"]):  # exact computes the diagonal too
        cfg["snapshot"]["transport"] = both
        assert resources.snapshot_runtime_min(cfg, "gru") == 20 * (1 + resources.EXACT_FACTOR) == 70


@pytest.mark.parametrize("name", ["config.yaml", "medium.yaml", "paper.yaml"])
def test_the_fitted_law_is_filled_in_and_grows_with_the_work(name):
    cfg = _cost_law()._config(ROOT / "config" / name)  # on top of config.yaml, as --configfile
    costs = [resources.cpu_seconds(rule, cfg, m) for rule in resources.COEF for m in ("const", "lstm")]
    assert all(c > 0 for c in costs)
    assert costs[1] > costs[0] and costs[3] > costs[2]  # LSTM has four gate blocks to ConstGate's one
