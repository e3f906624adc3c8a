"""Training: loss goes down, resume is exact, divergence is named (docs/method.md §3)."""

import re

import pytest
import torch

from learnwin.infra import io
from learnwin.infra.optimizers import OPTIMIZERS
from learnwin.models import train
from learnwin.models.cells import build_model
from learnwin.tasks.splits import write_splits

TASK = dict(T=12, D=3, lags=[2], coefs=[1.0], noise_std=0.05, n_train=64, n_val=32, n_diag=8)
MODEL = dict(hidden=8, layer_norm=True, const_s=0.3, gru_init_update=0.3, lstm_init_forget=0.5, gate_init="paper")
TRAIN = dict(epochs=6, batch_size=16, grad_clip=1.0, r2_subset=32)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    write_splits(5, TASK, path)
    return path


def _run(data_dir, out_dir, model="gru", optimizer="adamw", lr=0.01, **over):
    return train.train_run(
        data_dir=data_dir, out_dir=out_dir, model=model, optimizer=optimizer, seed=5,
        model_config=MODEL, optim_config={"lr": lr, "weight_decay": 1e-4},
        train_config=dict(TRAIN, **over), snapshot_epochs=[0, 3, "best"])


@pytest.mark.parametrize("model", ["const", "gru"])
def test_training_lowers_loss_on_single_lag_task(data_dir, tmp_path, model):
    curve = _run(data_dir, tmp_path, model=model, lr=0.02, epochs=12)
    assert curve["val_mse"].iloc[-1] < 0.6 * curve["val_mse"].iloc[0]
    assert curve["val_r2"].iloc[-1] > 0.3
    assert io.read_notes(tmp_path / "curve.parquet") == {}  # converged: no divergence note
    assert list(curve.columns) == ["model", "optimizer", "seed", "epoch", "train_mse", "train_r2",
                                   "val_mse", "val_r2"]
    for name in ("epoch0.pt", "epoch3.pt", "best.pt", "final.pt", "curve.parquet"):
        assert (tmp_path / name).exists()
    assert not (tmp_path / ".resume").exists()
    best = io.load_checkpoint(tmp_path / "best.pt")
    assert best["val_mse"] == pytest.approx(curve["val_mse"].min(), rel=1e-6)
    assert io.load_checkpoint(tmp_path / "epoch3.pt")["epoch"] == 3


def test_kill_and_resume_gives_identical_weights(data_dir, tmp_path, monkeypatch):
    _run(data_dir, tmp_path / "straight")
    calls = {"n": 0}
    real = train.evaluate

    def dying(*args):
        calls["n"] += 1
        if calls["n"] == 9:  # during epoch 4's evaluation: epochs 1-3 are saved, 4 is lost
            raise KeyboardInterrupt("killed")
        return real(*args)

    monkeypatch.setattr(train, "evaluate", dying)
    with pytest.raises(KeyboardInterrupt):
        _run(data_dir, tmp_path / "killed")
    state = io.load_checkpoint(tmp_path / "killed" / ".resume" / "state.pt")
    assert state["epoch"] == 3
    assert not (tmp_path / "killed" / "final.pt").exists()
    monkeypatch.setattr(train, "evaluate", real)
    resumed = _run(data_dir, tmp_path / "killed")
    assert len(resumed) == TRAIN["epochs"] + 1
    for name in ("final.pt", "best.pt", "epoch3.pt"):
        a = io.load_checkpoint(tmp_path / "straight" / name)
        b = io.load_checkpoint(tmp_path / "killed" / name)
        for key, value in a["model"].items():
            assert torch.equal(value, b["model"][key]), (name, key)
        assert a["epoch"] == b["epoch"]


def test_stale_resume_state_is_ignored(data_dir, tmp_path):
    _run(data_dir, tmp_path / "a")
    (tmp_path / "b" / ".resume").mkdir(parents=True)
    io.save_checkpoint({"fingerprint": "other", "epoch": 5}, tmp_path / "b" / ".resume" / "state.pt")
    curve = _run(data_dir, tmp_path / "b")
    assert len(curve) == TRAIN["epochs"] + 1
    a, b = io.load_checkpoint(tmp_path / "a" / "final.pt"), io.load_checkpoint(tmp_path / "b" / "final.pt")
    assert all(torch.equal(v, b["model"][k]) for k, v in a["model"].items())


def test_divergence_names_the_run(data_dir, tmp_path):
    with pytest.raises(train.DivergenceError,
                       match=r"model=const optimizer=sgd seed=5: training loss became (nan|inf) at epoch \d"):
        _run(data_dir, tmp_path, model="const", optimizer="sgd", lr=1e30, grad_clip=0.0)
    # the curve carries the message for rule check_training, which reads only the file metadata
    notes = io.read_notes(tmp_path / "curve.parquet")
    assert re.match(r"model=const optimizer=sgd seed=5: training loss became (nan|inf)", notes["diverged"])


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizers(name):
    opt = train.make_optimizer(name, [torch.nn.Parameter(torch.zeros(2))],
                               {"lr": 0.1, "weight_decay": 0.0, "momentum": 0.9, "alpha": 0.99})
    assert opt.param_groups[0]["lr"] == 0.1
    if name == "sgd_momentum":
        assert opt.param_groups[0]["momentum"] == 0.9


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_multi_tensor_update_gives_the_single_tensor_numbers(name):
    """make_optimizer's foreach update equals torch's one-parameter-at-a-time loop bit for bit,
    over 20 steps of an LSTM with LayerNorm (its 14 parameter tensors of four shapes)."""
    hp = {"lr": 0.01, "weight_decay": 1e-3, "momentum": 0.9, "alpha": 0.99}
    weights = []
    for foreach in (True, False):
        torch.manual_seed(0)
        net = build_model("lstm", 3, 8)
        opt = train.make_optimizer(name, net.parameters(), hp)
        if not foreach:
            for group in opt.param_groups:
                group["foreach"] = False
        x = torch.randn(4, 12, 3, generator=torch.Generator().manual_seed(1))
        for _ in range(20):
            opt.zero_grad()
            net(x)[0].pow(2).mean().backward()
            opt.step()
        weights.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
    assert opt.param_groups[0]["foreach"] is False
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], torch.cat([p.detach().flatten() for p in build_model("lstm", 3, 8).parameters()]))


def _weights_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_best_checkpoint_holds_the_best_epochs_weights(data_dir, tmp_path):
    """At lr 0.1 the best validation epoch (5) comes before the last (6): best.pt must hold the
    epoch-5 weights (a copy, not a view of the live tensors that later steps overwrite)."""
    curve = _run(data_dir, tmp_path, lr=0.1)
    best_epoch = int(curve["epoch"][curve["val_mse"].idxmin()])
    assert best_epoch < TRAIN["epochs"]
    best, final = io.load_checkpoint(tmp_path / "best.pt"), io.load_checkpoint(tmp_path / "final.pt")
    assert best["epoch"] == best_epoch
    assert not _weights_equal(best["model"], final["model"])
    assert not _weights_equal(best["optimizer"]["state"][0], final["optimizer"]["state"][0])
    x, y = (torch.from_numpy(a.copy()) for a in io.load_split(data_dir, "val"))
    for ckpt in (best, final):
        net = build_model(ckpt["cell"], **ckpt["model_config"])
        net.load_state_dict(ckpt["model"])
        assert train.evaluate(net.eval(), x, y) == pytest.approx(ckpt["val_mse"], rel=1e-6)
    assert best["val_mse"] == pytest.approx(curve["val_mse"].min(), rel=1e-6)
    assert best["val_mse"] < final["val_mse"]


def test_kill_after_the_best_epoch_resumes_to_the_same_best(data_dir, tmp_path, monkeypatch):
    _run(data_dir, tmp_path / "straight", lr=0.1)
    calls = {"n": 0}
    real = train.evaluate

    def dying(*args):
        calls["n"] += 1
        if calls["n"] == 13:  # during epoch 6's evaluation: epochs 1-5 (5 = best) are saved
            raise KeyboardInterrupt("killed")
        return real(*args)

    monkeypatch.setattr(train, "evaluate", dying)
    with pytest.raises(KeyboardInterrupt):
        _run(data_dir, tmp_path / "killed", lr=0.1)
    monkeypatch.setattr(train, "evaluate", real)
    _run(data_dir, tmp_path / "killed", lr=0.1)
    for name in ("best.pt", "final.pt"):
        a = io.load_checkpoint(tmp_path / "straight" / name)
        b = io.load_checkpoint(tmp_path / "killed" / name)
        assert a["epoch"] == b["epoch"] and a["val_mse"] == b["val_mse"]
        assert _weights_equal(a["model"], b["model"]), name
        assert _weights_equal(a["optimizer"]["state"][0], b["optimizer"]["state"][0]), name
