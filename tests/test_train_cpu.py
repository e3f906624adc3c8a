"""experiments/train_cpu.py: training CPU seconds of two runs and their checkpoints' identity."""

import importlib
from pathlib import Path

import pytest
import torch

from learnwin.infra import layout

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def train_cpu(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    return importlib.import_module("train_cpu")


def _run(results: Path, cpu: dict, weights: dict):
    """A results folder with train_model TSVs and final checkpoints, keyed by (optimizer, model, seed)."""
    for (opt, model, seed), seconds in cpu.items():
        run = layout.under(results, layout.RUN, optimizer=opt, model=model, seed=seed)
        tsv = layout.under(results, layout.BENCH) / "train_model" / opt / model / f"seed{seed}.tsv"
        tsv.parent.mkdir(parents=True, exist_ok=True)
        tsv.write_text(f"s\tcpu_time\n{seconds + 1}\t{seconds}\n")
        run.mkdir(parents=True, exist_ok=True)
        torch.save({"model": {"w": torch.tensor(weights[(opt, model, seed)])}}, run / "final.pt")


def test_means_sums_and_identity(train_cpu, tmp_path):
    keys = [("adamw", "gru", 1), ("adamw", "gru", 2), ("sgd", "lstm", 1)]
    _run(tmp_path / "a", dict(zip(keys, [10.0, 14.0, 20.0])), dict(zip(keys, [1.0, 2.0, 3.0])))
    _run(tmp_path / "b", dict(zip(keys, [9.0, 11.0, 15.0])), dict(zip(keys, [1.0, 2.0, 3.5])))
    before = train_cpu.per_model(tmp_path / "a")
    assert list(before.index) == ["gru", "lstm", "all jobs (sum)"]  # the canonical model order
    assert before["gru"] == 12.0 and before["lstm"] == 20.0 and before["all jobs (sum)"] == 44.0
    assert train_cpu.per_model(tmp_path / "b")["gru"] == 10.0
    assert train_cpu.identical_checkpoints(tmp_path / "a", tmp_path / "b") == (2, 3)


def test_a_folder_without_training_benchmarks_is_an_error(train_cpu, tmp_path):
    with pytest.raises(SystemExit, match="no train_model benchmark TSVs"):
        train_cpu.per_model(tmp_path)
