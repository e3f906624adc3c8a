"""An ensemble of networks trained together equals separate trainings (learnwin.models.ensemble,
docs/method.md §3): steps to 1e-10 in float64 for every cell, and per-run outputs of train_runs."""

import copy

import numpy as np
import pytest
import torch

from learnwin.infra import io
from learnwin.infra.registry import MODELS
from learnwin.models import ensemble, train
from learnwin.models.cells import build_model
from learnwin.models.data import write_splits

GATED = ["const", "shared", "diag", "gru", "lstm"]
TASK = dict(T=10, D=3, lags=[2], coefs=[1.0], noise_std=0.05, n_train=48, n_val=16, n_diag=8)
MODEL = dict(hidden=6, layer_norm=True, const_s=0.3, gru_init_update=0.3, lstm_init_forget=0.5)
TRAIN = dict(epochs=3, batch_size=16, grad_clip=0.5, r2_subset=32)
OPTIM = {"lr": 0.02, "weight_decay": 1e-2}
SEEDS = [5, 6, 7]


def _nets(name, E=3, D=3, H=5, **model):
    out = []
    for seed in range(E):
        torch.manual_seed(seed)
        out.append(build_model(name, D, H, const_s=0.3, **model).double())
    return out


def _flat(net, opt):
    state = [t for entry in opt.state_dict()["state"].values() for t in entry.values() if t is not None]
    return torch.cat([t.detach().flatten().double() for t in [*net.parameters(), *state]])


@pytest.mark.parametrize("optimizer", ["adamw", "sgd_momentum", "rmsprop"])
@pytest.mark.parametrize("shared_x", [False, True])
@pytest.mark.parametrize("name,layers", [(m, 1) for m in MODELS] + [("gru", 2), ("lru", 2)])
def test_steps_equal_separate_trainings(name, layers, shared_x, optimizer):
    """Four joint steps (clip active) against four train_step calls per network: weights and
    optimizer states to 1e-10, inputs per member (the seeds) or shared (the lags of a budget job)."""
    nets = _nets(name, layers=layers, block="stacked")
    cfg = {"lr": 0.05, "weight_decay": 1e-2}
    sep = copy.deepcopy(nets)
    ens = ensemble.Ensemble(nets, [train.make_optimizer(optimizer, n.parameters(), cfg) for n in nets], optimizer, cfg)
    opts = [train.make_optimizer(optimizer, n.parameters(), cfg) for n in sep]
    before = [torch.cat([p.detach().flatten() for p in net.parameters()]) for net in sep]
    gen = torch.Generator().manual_seed(5)
    for _ in range(4):
        x = torch.randn(3, 4, 9, 3, generator=gen, dtype=torch.float64)
        x = x[0] if shared_x else x
        y = torch.randn(3, 4, 9, generator=gen, dtype=torch.float64)
        ens.step(x, y, grad_clip=0.5)
        for i, (net, opt) in enumerate(zip(sep, opts)):
            train.train_step(net, opt, x if shared_x else x[i], y[i], grad_clip=0.5, run_name="", lr_key="", where="")
    ens.sync()
    for i in range(3):
        a, b = _flat(ens.nets[i], ens.opts[i]), _flat(sep[i], opts[i])
        assert a.shape == b.shape
        assert (b[:before[i].numel()] - before[i]).abs().max() > 1e-3  # the networks moved
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_member_state_is_a_copy():
    """What sync gives the members shares no storage with the stack: a later joint step leaves
    a kept checkpoint unchanged, and a saved tensor holds its own numbers only."""
    nets = _nets("gru")
    ens = ensemble.Ensemble(nets, [train.make_optimizer("adamw", n.parameters(), OPTIM) for n in nets], "adamw", OPTIM)
    gen = torch.Generator().manual_seed(1)
    step = lambda: ens.step(torch.randn(3, 4, 9, 3, generator=gen, dtype=torch.float64),  # noqa: E731
                            torch.randn(3, 4, 9, generator=gen, dtype=torch.float64), grad_clip=1.0)
    step()
    ens.sync()
    kept = train.checkpoint(ens.nets[1], ens.opts[1], 1, {}, 0.0)
    frozen = copy.deepcopy(kept)
    stacked = {t.untyped_storage().data_ptr() for t in ens.params.values()}
    for state in (kept["model"], *kept["optimizer"]["state"].values(), ens.nets[1].state_dict(),
                  *ens.opts[1].state_dict()["state"].values()):
        for t in state.values():
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size()  # not a view into a stack
            assert t.untyped_storage().data_ptr() not in stacked
    step()
    ens.sync()
    for a, b in zip(kept["model"].values(), frozen["model"].values()):
        assert torch.equal(a, b)
    assert not torch.equal(ens.nets[1].cell.U_h, kept["model"]["cell.U_h"])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Each seed's splits, in float64, so both trainings run in float64."""
    path = tmp_path_factory.mktemp("data")
    for seed in SEEDS:
        write_splits(seed, TASK, path / f"seed{seed}")
        for f in (path / f"seed{seed}").glob("*.npy"):
            np.save(f, np.load(f).astype(np.float64))
    return path


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def _separate(data_dir, out, model, seed):
    return train.train_run(data_dir=data_dir / f"seed{seed}", out_dir=out / f"seed{seed}", model=model, optimizer="adamw", seed=seed,
                           model_config=MODEL, optim_config=OPTIM, train_config=TRAIN, snapshot_epochs=[0, 2, "best"])


def _together(data_dir, out, model):
    return ensemble.train_runs(data_dirs=[data_dir / f"seed{s}" for s in SEEDS], out_dirs=[out / f"seed{s}" for s in SEEDS], model=model,
                               optimizer="adamw", seeds=SEEDS, model_config=MODEL, optim_config=OPTIM,
                               train_config=TRAIN, snapshot_epochs=[0, 2, "best"])


def _same_checkpoint(a, b, tol):
    """Same keys and metadata (val_mse to 1e-10: the ensemble evaluates its members batched); tensors
    of the same layout, equal within ``tol`` (0: bit for bit)."""
    assert a.keys() == b.keys()
    for key in a:
        if key in ("model", "optimizer"):
            continue
        assert a[key] == pytest.approx(b[key], rel=1e-10, abs=0) if key == "val_mse" else a[key] == b[key], key
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    pairs = list(zip(a["model"].items(), b["model"].items()))
    pairs += [((k, x), (k, y)) for s, t in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values())
              for (k, x), (_, y) in zip(s.items(), t.items())]
    for (ka, x), (kb, y) in pairs:
        assert ka == kb and x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride(), ka
        assert x.untyped_storage().nbytes() == y.untyped_storage().nbytes(), ka
        torch.testing.assert_close(x, y, rtol=0, atol=tol, msg=ka)


@pytest.mark.parametrize("model", GATED)
def test_train_runs_equal_separate_runs(data_dir, tmp_path, float64, model):
    """Every seed's outputs of one ensemble training are its separate run's: the init checkpoint's
    tensors and metadata bit for bit, every trained checkpoint's tensors and val_mse to 1e-10, its
    other metadata bit for bit, the files the same size (no stacked storage saved), the curve
    table (float32) to its rounding."""
    assert _together(data_dir, tmp_path / "ens", model) == {}
    for seed in SEEDS:
        ref = _separate(data_dir, tmp_path / "sep", model, seed)
        ens_dir, sep_dir = tmp_path / "ens" / f"seed{seed}", tmp_path / "sep" / f"seed{seed}"
        curve, ref_curve = (io.read_table(d / "curve.parquet", "curve") for d in (ens_dir, sep_dir))
        assert list(curve.columns) == list(ref_curve.columns)
        assert (curve.iloc[:, :4] == ref_curve.iloc[:, :4]).all().all()
        np.testing.assert_allclose(curve.iloc[:, 4:], ref_curve.iloc[:, 4:], rtol=1e-7, atol=0)  # float32 table
        moved = [(a - b).abs().max() for a, b in zip(*(io.load_checkpoint(sep_dir / n)["model"].values()
                                                       for n in ("epoch0.pt", "final.pt")))]
        assert max(moved) > 1e-2 and ref["val_mse"].iloc[-1] < ref["val_mse"].iloc[0]  # the runs trained
        for name, tol in (("epoch0.pt", 0), ("epoch2.pt", 1e-10), ("best.pt", 1e-10), ("final.pt", 1e-10)):
            a, b = io.load_checkpoint(ens_dir / name), io.load_checkpoint(sep_dir / name)
            _same_checkpoint(a, b, tol)
            assert (ens_dir / name).stat().st_size == (sep_dir / name).stat().st_size, name
        assert not (ens_dir / ".resume").exists()


def test_one_member_diverges_the_others_go_on(data_dir, tmp_path, float64, monkeypatch):
    """A seed whose loss is not finite gets tombstones and the note a separate run writes; the
    other seeds train on, as they would alone."""
    real = train.build_model

    def poisoned(*args, **kw):
        net = real(*args, **kw)
        if torch.initial_seed() == 6:
            with torch.no_grad():
                net.W_out.fill_(float("nan"))
        return net

    monkeypatch.setattr(train, "build_model", poisoned)
    diverged = _together(data_dir, tmp_path / "ens", "gru")
    with pytest.raises(train.DivergenceError) as err:
        _separate(data_dir, tmp_path / "sep", "gru", 6)
    assert diverged == {6: str(err.value)}
    assert "seed=6: training loss became nan at epoch 1" in diverged[6]
    assert io.read_notes(tmp_path / "ens" / "seed6" / "curve.parquet") == {"diverged": diverged[6]}
    assert io.load_checkpoint(tmp_path / "ens" / "seed6" / "best.pt")["diverged"] == diverged[6]
    for seed in (5, 7):
        _separate(data_dir, tmp_path / "sep", "gru", seed)
        for name in ("best.pt", "final.pt"):
            _same_checkpoint(*(io.load_checkpoint(tmp_path / d / f"seed{seed}" / name) for d in ("ens", "sep")), 1e-10)


@pytest.mark.parametrize("choice,expect", [("True", "train_ensemble"), ("False", "train_model"), ("auto", None)])
def test_workflow_trains_the_seeds_together_on_request(tmp_path, choice, expect):
    """config ensemble: one train_ensemble job per (model, optimizer) writing every seed's files,
    whose consumers (check_training, per seed) are unchanged; auto on a CPU host: one job per seed."""
    import yaml
    from workflow_helpers import copy_workflow, scheduled

    from learnwin.infra import resources

    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    runs = len(cfg["models"]) * len(cfg["optimizers"])
    jobs = scheduled(work, "--config", f"ensemble={choice}", "device=cpu" if choice == "auto" else "ensemble=" + choice)
    assert jobs["check_training"] == runs * len(cfg["seeds"])
    if expect is None:
        assert resources.ensemble_seeds({**cfg, "device": "cpu"}) is False
        assert resources.ensemble_seeds({**cfg, "device": "cuda"}) is True
        assert resources.ensemble_seeds({**cfg, "device": "cuda", "seeds": [2]}) is False
        expect = "train_model"
    other = {"train_ensemble", "train_model"} - {expect}
    assert jobs[expect] == (runs if expect == "train_ensemble" else runs * len(cfg["seeds"]))
    assert not other & jobs.keys()
