"""The cost law behind the rules' run-time requests: its work terms, its fit, its requests."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_helpers import experiment_script

from learnwin.infra import layout, resources
from learnwin.infra.registry import CELLS
from learnwin.models.cells import build_model

ROOT = Path(__file__).resolve().parents[1]


def _cost_law():
    return experiment_script("cost_law")


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



def test_cost_law_of_one_cell_family_and_its_wall_minutes_at_other_T(tmp_path):
    """--models fits one family's law while another family's jobs follow a different one; the
    wall minutes at a new T are the chains of that law, ``cores`` at a time."""
    law = _cost_law()
    mine = {"train_model": (2.0, 1e-4, 0.0), "take_snapshot": (3.0, 2e-5, 0.0, 4e-8)}
    other = {rule: tuple(10 * c for c in coef) for rule, coef in mine.items()}
    cfgs = [_config(32, 16, 256), _config(64, 32, 1024), _config(128, 64, 2048, 5), _config(256, 32, 512, 3)]
    rungs = []
    for i, cfg in enumerate(cfgs):
        root = _write_rung(tmp_path / f"r{i}", cfg, other)
        mingru = tmp_path / "m" / f"r{i}"
        _write_rung(mingru, cfg, mine)
        for tsv in (layout.under(mingru, layout.BENCH)).rglob("mingru/*.tsv"):  # mingru follows `mine`
            dest = layout.under(root, layout.BENCH) / tsv.relative_to(layout.under(mingru, layout.BENCH))
            dest.write_bytes(tsv.read_bytes())
        rungs.append((root, cfg))
    coefs = {rule: law.fit(rungs, rule, ["mingru"])[0] for rule in mine}
    for rule, true in mine.items():
        np.testing.assert_allclose(coefs[rule], true, rtol=1e-6, atol=1e-12)
        assert not np.allclose(law.fit(rungs, rule)[0], true, rtol=0.1)  # the mixed fit is not mingru's
    target = {**_config(64, 32, 1024), "models": ["mingru"], "optimizers": ["adamw", "sgd"], "seeds": [2]}
    target["train"]["snapshot_epochs"] = ["best"]
    at = {**target, "task": {**target["task"], "T": 1000}}
    chain = (resources.work("train_model", at, "mingru") @ mine["train_model"]
             + resources.work("take_snapshot", at, "mingru") @ mine["take_snapshot"])
    assert law.wall_minutes(coefs, target, 1000, cores=2) == pytest.approx(chain / 60, rel=1e-6)  # 2 chains, 2 cores
    assert law.wall_minutes(coefs, target, 1000, cores=1) == pytest.approx(2 * chain / 60, rel=1e-6)

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


@pytest.mark.parametrize("hidden, state_size_n", [(5, 3), (8, 16)])
def test_registry_state_width_is_the_built_cells(fresh_registry, hidden, state_size_n):
    """The state width the resources read from the registry's metadata, without building a
    model, is the built cell's full state (its ``state_width``) for every
    registered cell, the user's toy (the default one component per unit) included."""
    fresh_registry.load_cells("toy_cell")
    model_cfg = dict(hidden=hidden, state_size=state_size_n)
    widths = {m: spec.state_width(model_cfg) for m, spec in fresh_registry.CELLS.items()}
    assert widths == {m: build_model(m, 3, **model_cfg).cell.state_width for m in fresh_registry.CELLS}
    assert (widths["lstm"], widths["lru"], widths["s6"], widths["toy"]) == (2 * hidden, 2 * hidden,
                                                                            hidden * state_size_n, hidden)


def test_registry_stored_rows_are_the_built_stacks_uncopied_rows(fresh_registry):
    """The rows of the one-step Jacobian the exact transport stores, from the registry without a
    model, are the built stack's n less its windows' copied rows (learnwin.models.stack.Stack.copied),
    in every published block, with and without a convolution."""
    model_cfg = dict(hidden=4, state_size=3, layers=2, block="published")
    for name, spec in fresh_registry.CELLS.items():
        stack = build_model(name, 3, **model_cfg).cell
        copied = sum(length for *_, length in stack.copied())
        assert spec.state_width(model_cfg) == stack.state_width
        assert spec.state_width(model_cfg, stored=True) == stack.state_width - copied, name
    assert copied > 0  # the last, S6 in the Mamba block, has a window


def test_memory_requests_follow_the_state_width():
    """The exact transport holds a batch's dense one-step Jacobians (B, T, n, n): n = H for the
    GRU, 2H for the LSTM, H N for S6 (the default's S6 snapshot peaked at 9.8 GB); under either
    transport the Lyapunov spectrum then holds exact_sequences = 64 sequences' of them, which for S6
    outweighs the diagonal snapshot pass, and for a stack whose one sequence is 1/6 of the 8 GiB
    bound, six sequences'."""
    cfg = _config(T=64, H=32, n=1024)
    cfg["model"]["state_size"] = 16
    assert [resources.state_width(cfg, m) for m in ("gru", "lstm", "mingru", "lru", "s6")] == [32, 64, 32, 64, 512]
    batch = min(cfg["snapshot"]["batch_size"], 1024)
    cfg["snapshot"]["transport"] = ["diagonal", "exact"]
    gru, s6 = (resources.snapshot_mem_mb(cfg, m) for m in ("gru", "s6"))
    jac_mb = batch * 64 * 4 * (512 ** 2 - 32 ** 2) / 2 ** 20
    assert s6 - gru == pytest.approx(resources.EXACT_MEM_FACTOR * jac_mb, abs=1)
    assert s6 > 9.8 * 1024
    cfg["snapshot"]["transport"] = "diagonal"
    assert resources.snapshot_mem_mb(cfg, "s6") == int(1200 + resources.EXACT_MEM_FACTOR * 64 * 64 * 512 ** 2 * 4 / 2 ** 20)
    assert resources.snapshot_mem_mb(cfg, "gru") < gru  # its exact batch gone, its Lyapunov's 16 MB below the pass
    act_mb = 40 * cfg["train"]["batch_size"] * 64 * 4 * (512 - 32) / 2 ** 20
    assert resources.train_mem_mb(cfg, "s6") - resources.train_mem_mb(cfg, "gru") == pytest.approx(act_mb, abs=1)
    cfg["model"].update(layers=2, block="published")  # S6 in the Mamba block: n = 2560, r = 2176 rows stored
    assert resources.snapshot_mem_mb(cfg, "s6") == int(1200 + resources.EXACT_MEM_FACTOR * 6 * 64 * 2176 * 2560 * 4 / 2 ** 20)


def test_budget_requests_follow_the_worst_case_steps(monkeypatch):
    """A budget-protocol job (docs/method.md §10b) is sized at worst: the control and every grid lag
    trained to N_max, (1 + lags) x N_max / B steps; its memory holds the N_max stream in float32 (inputs
    and noise) and three (N_max, T) float32 series (the components, the control's targets and their
    permuted copy)."""
    monkeypatch.setattr(resources, "COEF", {"train_model": (10.0, 1e-3, 0.0), "take_snapshot": (0, 0, 0, 0)})
    cfg = _config(T=16, H=4, n=64)
    cfg["recovery"] = {**cfg["recovery"], "budgets": [64, 128, 256], "lags": [1, 3, 5], "n_test": 32, "n_perm": 20}
    steps = 256 // cfg["train"]["batch_size"]
    assert resources.budget_cpu_seconds(cfg, "gru") == pytest.approx(10.0 + 4 * steps * 16 * 1e-3)
    assert resources.budget_runtime_min(cfg, "gru") == resources.MIN_RUNTIME
    longer = {**cfg, "recovery": {**cfg["recovery"], "budgets": [64, 2**20]}}
    per_step = [resources.budget_cpu_seconds(c, "gru") - 10.0 for c in (cfg, longer)]
    assert per_step[1] / per_step[0] == pytest.approx(2**20 / 256)  # the steps grow with N_max only
    assert resources.budget_mem_mb(longer, "gru") - resources.budget_mem_mb(cfg, "gru") == pytest.approx(
        (2**20 - 256) * 16 * (cfg["task"]["D"] + 1 + 3) * 4 / 2**20, abs=1)


def test_budget_snapshot_requests_train_the_first_lag_to_n_max_at_worst(monkeypatch):
    """The same-network snapshot job of the budget protocol: one training of N_max / B steps and two
    snapshots by the cost laws; its memory the larger of the N_max stream's and a snapshot's."""
    monkeypatch.setattr(resources, "COEF", {"train_model": (10.0, 1e-3, 0.0), "take_snapshot": (0, 0, 0, 0)})
    cfg = _config(T=16, H=4, n=64)
    cfg["recovery"] = {**cfg["recovery"], "budgets": [64, 128, 2**20], "lags": [1, 3, 5], "n_test": 32, "n_perm": 20}
    steps = 2**20 // cfg["train"]["batch_size"]
    train = resources.recovery_cpu_seconds(cfg, "gru", 1, steps)
    assert train == pytest.approx(10.0 + steps * 16 * 1e-3)
    assert resources.recovery_snapshot_cpu_seconds(cfg, "gru", steps) == pytest.approx(
        train + 2 * resources._snapshot_cpu_seconds(cfg, "gru"))
    assert resources.budget_snapshot_runtime_min(cfg, "gru") == resources._minutes(
        resources.recovery_snapshot_cpu_seconds(cfg, "gru", steps)) > resources.MIN_RUNTIME
    assert resources.budget_snapshot_mem_mb(cfg, "gru") == max(resources.budget_mem_mb(cfg, "gru"),
                                                               resources.snapshot_mem_mb(cfg, "gru"))


def test_ensemble_requests(monkeypatch):
    """Where networks train together (config ensemble; docs/method.md §3, §10b): a train_ensemble job
    holds every seed's splits and one batch of activations per (optimizer, seed) run and asks for
    their separate trainings' time; a budget job under a lag ensemble holds the chunk's other
    members' targets and activations, and its snapshot job trains the first chunk (E + 1 networks)
    again. On the CPU (ensemble auto) nothing changes."""
    monkeypatch.setattr(resources, "COEF", {"train_model": (10.0, 1e-3, 0.0), "take_snapshot": (0, 0, 0, 0)})
    cfg = _config(T=16, H=4, n=64)
    cfg["recovery"] = {**cfg["recovery"], "budgets": [64, 128, 2**20], "lags": [1, 3, 5], "n_test": 32, "n_perm": 20}
    runs = len(cfg["optimizers"]) * len(cfg["seeds"])
    assert resources.ensemble_runs(cfg) == runs > 1
    t, act = cfg["task"], resources._activation_bytes(cfg, "gru")
    data = len(cfg["seeds"]) * (t["n_train"] + t["n_val"]) * 16 * (t["D"] + 1) * 4
    assert resources.ensemble_mem_mb(cfg, "gru") == int(1200 + (data + runs * act) / 2**20)
    assert resources.ensemble_runtime_min(cfg, "gru") == resources._minutes(runs * resources.cpu_seconds("train_model", cfg, "gru"))
    cpu, cuda = {**cfg, "device": "cpu", "ensemble": "auto"}, {**cfg, "device": "cuda", "ensemble": "auto"}
    assert resources.lag_ensemble(cpu) == 0 and resources.lag_ensemble(cuda) == 3  # at most the grid's 3 lags
    assert resources.lag_ensemble({**cuda, "recovery": {**cfg["recovery"], "ensemble_lags": 2}}) == 2
    assert resources.budget_mem_mb(cuda, "gru") - resources.budget_mem_mb(cpu, "gru") == pytest.approx(
        3 * (2**20 * 16 * 4 + act) / 2**20, abs=1)
    steps = 2**20 // cfg["train"]["batch_size"]
    assert resources.budget_snapshot_runtime_min(cuda, "gru") == resources._minutes(
        resources.recovery_snapshot_cpu_seconds(cfg, "gru", steps, 4)) > resources.budget_snapshot_runtime_min(cpu, "gru")


def test_ensembles_are_cut_to_the_device_memory():
    """On the paper's size (T 1024, H 128, batch 512) an LSTM's batch of activations is ~20 GB: a
    budget job's lag chunk holds as many lags as fit :data:`resources.GPU_MEMORY_MB` beside its
    control (the largest such chunk, checked one network past it), and ``ensemble: auto`` trains a
    model's 5 runs one per job where their ensemble would not fit; ``ensemble: true`` still
    trains them together."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    for key, value in paper.items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and isinstance(cfg.get(key), dict) else value
    cuda = {**cfg, "device": "cuda", "ensemble": True}
    models = cuda["recovery"]["models"] or cuda["models"]
    E = resources.lag_ensemble(cuda)
    assert 0 < E < min(cuda["recovery"]["ensemble_lags"], len(resources.recovery_lags(cuda)))
    assert max(resources.scored_gpu_mem_mb(cuda, m, E + 1) for m in models) <= resources.GPU_MEMORY_MB
    assert max(resources.scored_gpu_mem_mb(cuda, m, E + 2) for m in models) > resources.GPU_MEMORY_MB
    assert resources.train_together(cuda)
    auto = {**cuda, "ensemble": "auto"}
    assert resources.ensemble_gpu_mem_mb(auto, "lstm") > resources.GPU_MEMORY_MB and not resources.train_together(auto)
    small = {**auto, "task": {**auto["task"], "T": 64}}  # the same runs at T 64 fit: together
    assert resources.train_together(small) and resources.lag_ensemble(small) == min(
        small["recovery"]["ensemble_lags"], len(resources.recovery_lags(small)))
