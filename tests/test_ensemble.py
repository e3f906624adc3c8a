"""An ensemble of networks trained together equals separate trainings (learnwin.models.ensemble,
docs/method.md §3): steps to 1e-10 in float64 for every cell, members of one optimizer or of
several, and per-run outputs of train_runs, a member's checkpoint files its separate run's; the
gated cells' fused step with a member dimension (learnwin.models.fused) equals each network's."""

import copy

import numpy as np
import pytest
import torch

from learnwin.infra import io
from learnwin.infra.registry import MODELS
from learnwin.models import bptt, ensemble, fused, recurrence, train
from learnwin.models.cells import build_model
from learnwin.models.ensemble import Ensemble
from learnwin.tasks.splits import write_splits

GATED = ["const", "shared", "diag", "gru", "lstm"]
TASK = dict(T=10, D=3, lags=[2], coefs=[1.0], noise_std=0.05, n_train=48, n_val=16, n_diag=8)
MODEL = dict(hidden=6, layer_norm=True, const_s=0.3, gru_init_update=0.3, lstm_init_forget=0.5, gate_init="paper")
TRAIN = dict(epochs=3, batch_size=16, grad_clip=0.5, r2_subset=32)
OPTIM = {"adamw": {"lr": 0.02, "weight_decay": 1e-2}, "sgd_momentum": {"lr": 0.05, "momentum": 0.9}}
SEEDS = [5, 6, 7]
RUNS = [("adamw", 5), ("adamw", 6), ("adamw", 7), ("sgd_momentum", 5), ("sgd_momentum", 7)]  # (optimizer, seed)
#: Each optimizer's config in the step tests (lr large enough that the networks move).
STEP_OPTIM = {"adamw": {"lr": 0.05, "weight_decay": 1e-2}, "sgd_momentum": {"lr": 0.1, "momentum": 0.9},
              "rmsprop": {"lr": 0.01, "weight_decay": 1e-2}}


def _nets(name, E=3, D=3, H=5, **model):
    out = []
    for seed in range(E):
        torch.manual_seed(seed)
        out.append(build_model(name, D, H, const_s=0.3, **model).double())
    return out


def _flat(net, opt):
    state = [t for entry in opt.state_dict()["state"].values() for t in entry.values() if t is not None]
    return torch.cat([t.detach().flatten().double() for t in [*net.parameters(), *state]])


@pytest.mark.parametrize("optimizers", [("adamw",) * 3, ("sgd_momentum",) * 3, ("rmsprop",) * 3,
                                        ("adamw", "sgd_momentum", "adamw"), ("rmsprop", "sgd_momentum", "adamw")])
@pytest.mark.parametrize("shared_x", [False, True])
@pytest.mark.parametrize("name,layers", [(m, 1) for m in MODELS] + [("gru", 2), ("lru", 2)])
def test_steps_equal_separate_trainings(name, layers, shared_x, optimizers):
    """Four joint steps (clip active) against four train_step calls per network: weights and
    optimizer states to 1e-10, inputs per member (the seeds) or shared (the lags of a budget job),
    one optimizer for all members or several (each group of members its own stacked leaves and
    optimizer, interleaved in member order)."""
    nets = _nets(name, layers=layers, block="stacked")
    cfgs = [STEP_OPTIM[o] for o in optimizers]
    sep = copy.deepcopy(nets)
    ens = ensemble.Ensemble(nets, [train.make_optimizer(o, n.parameters(), c) for o, n, c in zip(optimizers, nets, cfgs)],
                            optimizers, cfgs)
    assert len(ens.group_opts) == len(set(optimizers))
    opts = [train.make_optimizer(o, n.parameters(), c) for o, n, c in zip(optimizers, sep, cfgs)]
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


EAGER = fused.Mode(compile=False, graph=False)


def _recurrence_inputs(name, E, layer_norm):
    """E networks' ``scan`` inputs (float64, every parameter moved off its init), stacked in the
    member convention, and each network's own; the positions of the cell's buffers among them (the
    fixed leak s: no gradient)."""
    nets = _nets(name, E=E, layer_norm=layer_norm)
    gen = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for net in nets:
            for p in net.parameters():
                p.add_(0.4 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    scans = [net.cell.scan() for net in nets]
    own = [[t.detach().clone().requires_grad_() if isinstance(t, torch.Tensor) else t for t in s[1]] for s in scans]
    stacked = [torch.stack([o[k] for o in own]).detach().requires_grad_() if isinstance(t, torch.Tensor) else t
               for k, t in enumerate(own[0])]
    buffers = {k for k, t in enumerate(scans[0][1]) if any(t is b for b in nets[0].cell.buffers())}
    return scans[0][0], own, stacked, buffers


@pytest.mark.parametrize("shared_x", [False, True])
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("name", GATED)
@pytest.mark.parametrize("driver", ["bptt", "fused"])
def test_member_dimension_equals_each_network(name, layer_norm, shared_x, driver):
    """bptt's Function (the CPU's) and the fused one (eager) on E networks along a member dimension,
    against each network through the fused Function and through bptt's: both states and the
    gradients of a loss on them w.r.t. x and every input, 1e-10 in float64."""
    E, B, T, D = 3, 4, 7, 3
    family, own, stacked, buffers = _recurrence_inputs(name, E, layer_norm)
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(E, B, T, D, generator=gen, dtype=torch.float64)
    x = (x[0] if shared_x else x).requires_grad_()
    wh, wc = torch.randn(2, E, B, T, 5, generator=gen, dtype=torch.float64)
    members = [ensemble._per_member(t) if isinstance(t, torch.Tensor) else t for t in stacked]
    with fused.use(EAGER):
        h, c = _states((bptt.Scan if driver == "bptt" else fused.Scan).apply(family, x, *members))
    assert h.shape == (E, B, T, 5)
    ((h * wh).sum() + (c.sin() * wc).sum()).backward()
    tensors = [k for k, t in enumerate(stacked) if isinstance(t, torch.Tensor) and k not in buffers]
    for impl in (fused.Scan, bptt.Scan):
        dx = torch.zeros_like(x)
        for i in range(E):
            xi = (x if shared_x else x[i]).detach().requires_grad_()
            with fused.use(EAGER if impl is fused.Scan else None):
                hi, ci = _states(impl.apply(family, xi, *own[i]))
            ((hi * wh[i]).sum() + (ci.sin() * wc[i]).sum()).backward()
            torch.testing.assert_close(h[i], hi, rtol=0, atol=1e-10)
            torch.testing.assert_close(c[i], ci, rtol=0, atol=1e-10)
            dx += xi.grad if shared_x else torch.zeros_like(x).index_copy_(0, torch.tensor([i]), xi.grad[None])
            for k in tensors:
                assert own[i][k].grad.abs().max() > 1e-3, k  # not a comparison of zeros
                torch.testing.assert_close(stacked[k].grad[i], own[i][k].grad, rtol=0, atol=1e-10, msg=str(k))
                own[i][k].grad = None
        torch.testing.assert_close(x.grad, dx, rtol=0, atol=1e-10)


def _states(out):
    """(h, c) of a Function's output: the LSTM's two states, the others' hidden state twice."""
    return out if isinstance(out, tuple) else (out, out)


@pytest.mark.parametrize("shared_x", [False, True])
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("name", GATED)
def test_gated_ensembles_step_through_the_member_dimension(name, layer_norm, shared_x, monkeypatch):
    """The gated cells' ensemble steps run the recurrence once per step on all members (not vmap:
    one input projection with the member dimension), and four steps with mixed optimizers equal
    four separate train_step calls per network on the fused step (eager) and on bptt's: weights
    and optimizer states to 1e-10 in float64; the outputs equal each network's."""
    optimizers = ("adamw", "sgd_momentum", "rmsprop")
    nets = _nets(name, layer_norm=layer_norm)
    cfgs = [STEP_OPTIM[o] for o in optimizers]
    seps = {mode: copy.deepcopy(nets) for mode in (EAGER, None)}
    opts = {mode: [train.make_optimizer(o, n.parameters(), c) for o, n, c in zip(optimizers, sep, cfgs)]
            for mode, sep in seps.items()}
    ens = ensemble.Ensemble(nets, [train.make_optimizer(o, n.parameters(), c) for o, n, c in zip(optimizers, nets, cfgs)],
                            optimizers, cfgs)
    projections = []
    real = recurrence.project
    monkeypatch.setattr(recurrence, "project", lambda x, w, b: projections.append(w.shape) or real(x, w, b))
    before = torch.cat([p.detach().flatten() for p in nets[0].parameters()])
    gen = torch.Generator().manual_seed(5)
    for _ in range(4):
        x = torch.randn(3, 4, 9, 3, generator=gen, dtype=torch.float64)
        x = x[0] if shared_x else x
        y = torch.randn(3, 4, 9, generator=gen, dtype=torch.float64)
        projections.clear()
        ens.step(x, y, grad_clip=0.5)
        assert len(projections) == 1 and projections[0][0] == 3  # the three members at once
        for mode, sep in seps.items():
            with fused.use(mode):
                for i, (net, opt) in enumerate(zip(sep, opts[mode])):
                    train.train_step(net, opt, x if shared_x else x[i], y[i], grad_clip=0.5, run_name="", lr_key="",
                                     where="")
    ens.sync()
    assert (torch.cat([p.detach().flatten() for p in ens.nets[0].parameters()]) - before).abs().max() > 1e-3
    for mode, sep in seps.items():
        for i in range(3):
            torch.testing.assert_close(_flat(ens.nets[i], ens.opts[i]), _flat(sep[i], opts[mode][i]), rtol=0, atol=1e-10)
    with torch.no_grad():
        ref = torch.stack([net(x if shared_x else x[i]) for i, net in enumerate(seps[None])])
    torch.testing.assert_close(ens.outputs(x), ref, rtol=0, atol=1e-10)


def test_member_state_is_a_copy():
    """What sync gives the members shares no storage with the stack: a later joint step leaves
    a kept checkpoint unchanged, and a saved tensor holds its own numbers only."""
    nets = _nets("gru")
    cfg = OPTIM["adamw"]
    ens = ensemble.Ensemble(nets, [train.make_optimizer("adamw", n.parameters(), cfg) for n in nets], ["adamw"] * 3,
                            [cfg] * 3)
    gen = torch.Generator().manual_seed(1)
    step = lambda: ens.step(torch.randn(3, 4, 9, 3, generator=gen, dtype=torch.float64),  # noqa: E731
                            torch.randn(3, 4, 9, generator=gen, dtype=torch.float64), grad_clip=1.0)
    step()
    ens.sync()
    kept = train.checkpoint(ens.nets[1], ens.opts[1], 1, {}, 0.0)
    frozen = copy.deepcopy(kept)
    stacked = {t.untyped_storage().data_ptr() for leaves in ens.leaves for t in leaves.values()}
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


SNAPSHOTS = [0, 1, 2, "best", "final"]


def _separate(data_dir, out, model, optimizer, seed):
    return train.train_run(data_dir=data_dir / f"seed{seed}", out_dir=out / optimizer / f"seed{seed}", model=model,
                           optimizer=optimizer, seed=seed, model_config=MODEL, optim_config=OPTIM[optimizer],
                           train_config=TRAIN, snapshot_epochs=SNAPSHOTS)


def _together(data_dir, out, model, runs=RUNS):
    return ensemble.train_runs(data_dirs=[data_dir / f"seed{s}" for _, s in runs],
                               out_dirs=[out / o / f"seed{s}" for o, s in runs], model=model,
                               optimizers=[o for o, _ in runs], seeds=[s for _, s in runs], model_config=MODEL,
                               optim_configs=OPTIM, train_config=TRAIN, snapshot_epochs=SNAPSHOTS)


def _same_checkpoint(a, b, tol):
    """The same checkpoint file in content: the same keys and metadata (val_mse to 1e-10: the
    ensemble evaluates its members batched), the same model keys, the same optimizer param_groups
    and state structure (parameter ids, each one's state keys) with the same step counts; every
    tensor of the same layout and storage size, equal within ``tol`` (0: bit for bit)."""
    assert a.keys() == b.keys()
    for key in a:
        if key in ("model", "optimizer"):
            continue
        assert a[key] == pytest.approx(b[key], rel=1e-10, abs=0) if key == "val_mse" else a[key] == b[key], key
    assert list(a["model"]) == list(b["model"])
    assert a["optimizer"].keys() == b["optimizer"].keys() == {"state", "param_groups"}
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert list(sa) == list(sb) and all(list(sa[k]) == list(sb[k]) for k in sa)
    assert [int(e["step"]) for e in sa.values() if "step" in e] == [int(e["step"]) for e in sb.values() if "step" in e]
    pairs = [(k, a["model"][k], b["model"][k]) for k in a["model"]]
    pairs += [(f"optimizer {i} {k}", sa[i][k], sb[i][k]) for i in sa for k in sa[i] if sa[i][k] is not None]
    for key, x, y in pairs:
        assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride(), key
        assert x.untyped_storage().nbytes() == y.untyped_storage().nbytes(), key
        torch.testing.assert_close(x, y, rtol=0, atol=tol, msg=key)


def _same_run(ens_dir, sep_dir, same_size=True):
    """One run's outputs of an ensemble training are its separate run's (the model and optimizer
    states along the way, and so its checkpoints, differ in the last bits: under vmap the cells run
    their step-by-step reference scan, the separate run the hand-written BPTT): the same files;
    every checkpoint (each snapshot epoch, best, final) the same in content
    (:func:`_same_checkpoint`): the init's tensors bit for bit, the trained ones' to 1e-10, and of
    the same size on disk (no stacked storage saved) unless not ``same_size``; the curve table
    (float32) to its rounding."""
    assert sorted(p.name for p in ens_dir.iterdir()) == sorted(p.name for p in sep_dir.iterdir())
    curve, ref_curve = (io.read_table(d / "curve.parquet", "curve") for d in (ens_dir, sep_dir))
    assert list(curve.columns) == list(ref_curve.columns)
    assert (curve.iloc[:, :4] == ref_curve.iloc[:, :4]).all().all()
    np.testing.assert_allclose(curve.iloc[:, 4:], ref_curve.iloc[:, 4:], rtol=1e-7, atol=0)  # float32 table
    for name in sorted(p.name for p in sep_dir.glob("*.pt")):
        _same_checkpoint(*(io.load_checkpoint(d / name) for d in (ens_dir, sep_dir)), 0 if name == "epoch0.pt" else 1e-10)
        assert not same_size or (ens_dir / name).stat().st_size == (sep_dir / name).stat().st_size, name


@pytest.mark.parametrize("model", GATED)
def test_train_runs_equal_separate_runs(data_dir, tmp_path, float64, model):
    """Every (optimizer, seed) run of one ensemble training of a model (two optimizers, the
    seeds of each) has its separate run's outputs (:func:`_same_run`); the runs trained, AdamW's
    state counts its steps."""
    assert _together(data_dir, tmp_path / "ens", model) == {}
    for optimizer, seed in RUNS:
        ref = _separate(data_dir, tmp_path / "sep", model, optimizer, seed)
        sep_dir = tmp_path / "sep" / optimizer / f"seed{seed}"
        moved = [(a - b).abs().max() for a, b in zip(*(io.load_checkpoint(sep_dir / n)["model"].values()
                                                       for n in ("epoch0.pt", "final.pt")))]
        assert max(moved) > 1e-2 and ref["val_mse"].iloc[-1] < ref["val_mse"].iloc[0]  # the runs trained
        if optimizer == "adamw":
            steps = TRAIN["epochs"] * (TASK["n_train"] // TRAIN["batch_size"])
            assert {int(e["step"]) for e in io.load_checkpoint(sep_dir / "final.pt")["optimizer"]["state"].values()} == {steps}
        _same_run(tmp_path / "ens" / optimizer / f"seed{seed}", sep_dir)
        assert not (tmp_path / "ens" / optimizer / f"seed{seed}" / ".resume").exists()


def test_a_resumed_run_joins(data_dir, tmp_path, float64, monkeypatch):
    """A run killed after its first epoch resumes from its state while the others start fresh:
    they train epoch 1 without it, it joins them (its optimizer's group) from epoch 2, and every
    run's outputs are its uninterrupted separate run's in content. (Not in size: the optimizer
    state of a resumed run, a separate one's too, is unpickled, and its key strings are no longer
    the config's, which an uninterrupted run's checkpoint pickles once; its group shares them.)"""
    real, resumed = train.Run.end_epoch, RUNS[3]

    def killed(self, row, seconds):
        real(self, row, seconds)
        raise KeyboardInterrupt  # after the resume state of epoch 1 is written

    monkeypatch.setattr(train.Run, "end_epoch", killed)
    with pytest.raises(KeyboardInterrupt):
        _separate(data_dir, tmp_path / "ens", "const", *resumed)
    monkeypatch.setattr(train.Run, "end_epoch", real)
    state = tmp_path / "ens" / resumed[0] / f"seed{resumed[1]}" / ".resume" / "state.pt"
    assert io.load_checkpoint(state)["epoch"] == 1
    joined = []
    monkeypatch.setattr(ensemble, "Ensemble", lambda nets, *a: joined.append(len(nets)) or Ensemble(nets, *a))
    assert _together(data_dir, tmp_path / "ens", "const") == {}
    assert joined == [len(RUNS) - 1, len(RUNS) - 1, len(RUNS)]  # epoch-0 rows, epoch 1, epochs 2-3
    for optimizer, seed in RUNS:
        _separate(data_dir, tmp_path / "sep", "const", optimizer, seed)
        _same_run(*(tmp_path / d / optimizer / f"seed{seed}" for d in ("ens", "sep")), same_size=False)


def test_one_member_diverges_the_others_go_on(data_dir, tmp_path, float64, monkeypatch):
    """A run whose loss is not finite gets tombstones and the note a separate run writes; the
    other runs, of its optimizer and of the other, train on, as they would alone."""
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
        _separate(data_dir, tmp_path / "sep", "gru", "adamw", 6)
    assert diverged == {("adamw", 6): str(err.value)}
    assert "seed=6: training loss became nan at epoch 1" in diverged[("adamw", 6)]
    ens_dir = tmp_path / "ens" / "adamw" / "seed6"
    assert io.read_notes(ens_dir / "curve.parquet") == {"diverged": str(err.value)}
    assert io.load_checkpoint(ens_dir / "best.pt")["diverged"] == str(err.value)
    for optimizer, seed in RUNS:
        if seed != 6:
            _separate(data_dir, tmp_path / "sep", "gru", optimizer, seed)
            _same_run(*(tmp_path / d / optimizer / f"seed{seed}" for d in ("ens", "sep")))


@pytest.mark.parametrize("choice,expect", [("True", "train_ensemble"), ("False", "train_model"), ("auto", None)])
def test_workflow_trains_a_models_runs_together_on_request(tmp_path, choice, expect):
    """config ensemble: one train_ensemble job per model writing every (optimizer, seed) run's files,
    whose consumers (check_training, per run) are unchanged; auto on a CPU host: one job per run."""
    import yaml
    from workflow_helpers import copy_workflow, scheduled

    from learnwin.infra import resources

    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((work / "config" / "config.yaml").read_text())
    runs = len(cfg["models"]) * len(cfg["optimizers"]) * len(cfg["seeds"])
    assert len(cfg["optimizers"]) > 1 and len(cfg["seeds"]) > 1  # the job holds both
    jobs = scheduled(work, "--config", f"ensemble={choice}", "device=cpu" if choice == "auto" else "ensemble=" + choice)
    assert jobs["check_training"] == runs
    if expect is None:
        assert resources.ensemble_training({**cfg, "device": "cpu"}, resources.ensemble_runs(cfg)) is False
        assert resources.ensemble_training({**cfg, "device": "cuda"}, resources.ensemble_runs(cfg)) is True
        assert resources.ensemble_training({**cfg, "device": "cuda"}, 1) is False
        expect = "train_model"
    other = {"train_ensemble", "train_model"} - {expect}
    assert jobs[expect] == (len(cfg["models"]) if expect == "train_ensemble" else runs)
    assert not other & jobs.keys()
