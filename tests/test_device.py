"""Every stage runs on an accelerator: no tensor of a stage stays on the CPU where the model's live
on the device, proven without a GPU.

Each stage runs twice: on the CPU, and on a pretend CUDA device (tests/pretend_cuda.py: the
``meta`` device stands in for ``cuda``, whose device guards the CPU build of torch lacks; values
are computed by the CPU kernels and mixing a CPU tensor with a device one raises as on CUDA). The
device run must not raise and must give the CPU run's tables, bit for bit: training
(:func:`learnwin.models.train.train_run`), the snapshot under each transport, the memory curve and
the Lyapunov spectrum of every workflow's cells (default: the five gated cells; linear cells; the
stacks in their published blocks), and the budget and dataset recovery jobs with their snapshots.
The gated cells train on the fused step (learnwin.models.fused) as on CUDA: on the device its loops
graphed (by the stand-in of CUDA graphs, with eager kernels), on the CPU the same kernels eager.
"""

import contextlib
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import torch
from pretend_cuda import DeviceMismatch, Nondeterministic, Replay, pretend_cuda

from learnwin.infra import io, runtime
from learnwin.infra.registry import CELLS
from learnwin.models import fused
from learnwin.models.cells import GatedCell
from learnwin.models.ensemble import train_runs
from learnwin.models.train import train_run
from learnwin.probing.envelope import prefix_sum
from learnwin.probing.lyapunov import lyapunov_checkpoint
from learnwin.probing.memory import memory_checkpoint
from learnwin.probing.snapshot import snapshot_checkpoint
from learnwin.recovery.budget_job import budget_networks, budget_trainings
from learnwin.recovery.groundtruth_job import groundtruth_job, groundtruth_networks
from learnwin.recovery.task import groundtruth_snapshots
from learnwin.tasks.splits import write_splits

DEVICE = "meta"  # the pretend CUDA device of tests/pretend_cuda.py
TASK = dict(T=10, D=2, lags=[2, 4], coefs=[0.6, 0.4], noise_std=0.2, n_train=16, n_val=8, n_diag=8)
MODEL = dict(hidden=3, layer_norm=True, const_s=0.2, gru_init_update=0.2, lstm_init_forget=0.8,
             gate_init="official", state_size=2)
STACK = dict(layers=2, block="published")
TRAIN = dict(epochs=2, batch_size=8, grad_clip=1.0, r2_subset=8)
OPTIM = dict(lr=0.01, weight_decay=1e-4)
LAGS = [1, 3, 5]
SNAP = dict(lags=LAGS, order=1, times_per_lag=4, directions=2, batch_size=4, keep_directions=False, keys={"seed": 2},
            exact_sequences=4)
#: (cell, model config): the default workflow's gated cells, linear cells, stacks in published blocks
NETWORKS = [(m, {}) for m in ("const", "shared", "diag", "gru", "lstm", "lru", "s6")] + [
    (m, STACK) for m in ("lstm", "rglru", "s6")]


FUSED = {"cpu": fused.Mode(compile=False, graph=False), DEVICE: fused.Mode(compile=False, graph=True)}
"""The fused step's mode per device (learnwin.models.fused.DEFAULT): on the pretend device as on CUDA,
its loops graphed (by the stand-in :class:`pretend_cuda.Replay`), with eager kernels (inductor has
none for it); on the CPU eager (the same kernels: the same bits)."""


@contextlib.contextmanager
def on(device: str):
    """The pretend device for ``DEVICE``; on either device the fused step in its mode (:data:`FUSED`)
    and on no other, as learnwin.models.fused.DEFAULT makes it on CUDA."""
    with (pretend_cuda() if device == DEVICE else contextlib.nullcontext(),
          mock.patch.multiple(fused, DEFAULT={torch.device(device).type: FUSED[device]}, GRAPH_BACKEND=Replay,
                              _graphed={})):
        yield


def test_pretend_device_raises_where_cuda_does():
    """The guard itself: the mixes that crashed on the H200 raise, CUDA's allowed ones do not."""
    with pretend_cuda():
        a = torch.arange(12.0).reshape(3, 4).to(DEVICE)
        i = torch.tensor([0, 2])
        with pytest.raises(DeviceMismatch):
            a.index_select(1, i)  # ExactAccumulator.matrix_batch's row index, at 01aafdf
        with pytest.raises(DeviceMismatch):
            torch.zeros(4, dtype=torch.float64).index_add_(0, i.to(DEVICE), a[0, :2].double())  # its sums
        with pytest.raises(DeviceMismatch):
            a * torch.ones(3, 4)  # MemoryAccumulator.add's mask
        with pytest.raises(TypeError, match="numpy"):
            a.numpy()
        assert a.device.type == DEVICE and torch.arange(3, device=a.device).device == a.device
        assert torch.equal((a * torch.tensor(2.0)).cpu(), torch.arange(12.0).reshape(3, 4) * 2)  # CPU scalar: allowed
        assert torch.equal(a[:, i].cpu(), torch.tensor([[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]))  # CPU index: allowed
        assert a.sum().item() == 66.0 and a.tolist()[2] == [8.0, 9.0, 10.0, 11.0]
        for make in (torch.tensor, torch.as_tensor):  # data made on the device keeps its values
            t = make([3, 1, 2], device=a.device)
            assert t.device == a.device and t.tolist() == [3, 1, 2]


@pytest.fixture(scope="module", autouse=True)
def data_dir(tmp_path_factory):
    """The splits of TASK; the module's tests on one thread (the same kernels on both devices) and
    under the jobs' strict deterministic mode (learnwin.infra.runtime.deterministic)."""
    path, threads = tmp_path_factory.mktemp("data"), torch.get_num_threads()
    write_splits(2, TASK, path)
    torch.set_num_threads(1)
    runtime.deterministic()
    yield path
    torch._C._set_deterministic_algorithms(False)
    torch.set_num_threads(threads)


def test_prefix_sums_on_the_device_without_cuda_s_cumsum():
    """CUDA's float cumsum raises under the strict mode; envelope.prefix_sum gives the CPU's sums bit for bit."""
    gen = torch.Generator().manual_seed(0)
    for x in (torch.randn(3, 50, 4, dtype=torch.float64, generator=gen),
              torch.randn(3, 50, 4, dtype=torch.complex128, generator=gen)):
        with pretend_cuda():
            with pytest.raises(Nondeterministic, match="cumsum"):
                torch.cumsum(x.to(DEVICE), 1)
            sums = prefix_sum(x.to(DEVICE), 1)
            assert sums.device.type == DEVICE
        assert torch.equal(sums.cpu(), torch.cumsum(x, 1))


def train(data_dir, out_dir, model, config, device):
    with on(device):
        return train_run(data_dir=data_dir, out_dir=out_dir, model=model, optimizer="adamw", seed=3,
                         model_config={**MODEL, **config}, optim_config=OPTIM, train_config=TRAIN,
                         snapshot_epochs=["best"], device=device)


def probes(checkpoint, data_dir, device) -> list[pd.DataFrame]:
    """Snapshot tables under each transport alone and both, the memory curve and the Lyapunov spectrum."""
    tables = []
    with on(device):
        for transport in ("diagonal", "exact", ["diagonal", "exact"]):
            tables += snapshot_checkpoint(checkpoint=checkpoint, data_dir=data_dir, device=device, transport=transport,
                                          **SNAP)
        tables.append(memory_checkpoint(checkpoint=checkpoint, data_dir=data_dir, u=[0.6, 0.8], lags=LAGS,
                                        batch_size=4, sequences=8, keys={}, device=device))
        tables.append(lyapunov_checkpoint(checkpoint=checkpoint, data_dir=data_dir, sequences=4, batch_size=4, keys={},
                                          device=device))
    return tables


def assert_same_state(a, b):
    if isinstance(a, torch.Tensor):
        assert type(b) is torch.Tensor and b.device.type == "cpu" and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_state(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b) and all(assert_same_state(u, v) is None for u, v in zip(a, b))
    else:
        assert a == b or (a != a and b != b)  # NaN val_mse of none here; equal otherwise


@pytest.mark.parametrize("model,config", NETWORKS, ids=[f"{m}{'-stack' if c else ''}" for m, c in NETWORKS])
def test_every_stage_on_the_device_gives_the_cpu_tables(data_dir, tmp_path, model, config, monkeypatch):
    monkeypatch.setattr(Replay, "captures", 0)
    curves = {d: train(data_dir, tmp_path / d, model, config, d) for d in ("cpu", DEVICE)}
    assert (Replay.captures > 0) == issubclass(CELLS[model].load(), GatedCell)  # the gated cells: the fused step
    pd.testing.assert_frame_equal(curves[DEVICE], curves["cpu"], check_exact=True)
    for name in ("best.pt", "final.pt"):  # saved from the device: CPU tensors, the CPU run's bits
        assert_same_state(io.load_checkpoint(tmp_path / DEVICE / name), io.load_checkpoint(tmp_path / "cpu" / name))
    checkpoint = tmp_path / "cpu" / "best.pt"
    for dev_table, cpu_table in zip(probes(checkpoint, data_dir, DEVICE), probes(checkpoint, data_dir, "cpu"),
                                    strict=True):
        assert len(cpu_table) and np.isfinite(cpu_table.select_dtypes("number").to_numpy()).any()
        pd.testing.assert_frame_equal(dev_table, cpu_table, check_exact=True)


RECOVERY_TASK = dict(T=10, D=2, noise_std=0.2, n_diag=8)
GT = dict(coef=0.5, n_test=16, n_perm=10, null_quantile=0.99)
RECOVERY_SNAP = dict(lag_start=1, lag_stop=7, lag_step=2, order=1, times_per_lag=4, directions=2, batch_size=8,
                     keep_directions=False, transport=["diagonal", "exact"], exact_sequences=4)
JOB = dict(model="gru", optimizer="adamw", seed=3, lags=[1, 3, 5], task=RECOVERY_TASK, model_config=MODEL,
           optim_config=dict(lr=0.05, weight_decay=1e-4), gt=GT)


def recovery_tables(device: str) -> list[pd.DataFrame]:
    """The budget protocol's job, networks and their snapshots; the dataset protocol's likewise."""
    with on(device):
        scores = budget_trainings(thresholds=[0.1, 0.3], budgets=[8, 16], batch_size=8, frontier_stop=0,
                                  train_config=dict(grad_clip=1.0), device=device, **JOB)
        nets = budget_networks(budgets=[8, 16], train_config=dict(grad_clip=1.0, batch_size=8), recorded=scores,
                               device=device, **JOB)
        budget = [scores, *groundtruth_snapshots(nets, task=RECOVERY_TASK, gt=GT, snapshot=RECOVERY_SNAP, device=device)]
        run = dict(JOB, n_train=[16], steps=4, train_config=dict(batch_size=8, grad_clip=1.0))
        scores, window = groundtruth_job(thresholds=[0.2], arm="main", device=device, **run)
        nets = groundtruth_networks(recorded=scores, device=device, **run)
        dataset = [scores, window, *groundtruth_snapshots(nets, task=RECOVERY_TASK, gt=GT, snapshot=RECOVERY_SNAP,
                                                          device=device)]
    return budget + dataset


def test_budget_and_dataset_recovery_on_the_device_give_the_cpu_tables():
    for dev_table, cpu_table in zip(recovery_tables(DEVICE), recovery_tables("cpu"), strict=True):
        assert len(cpu_table)
        pd.testing.assert_frame_equal(dev_table.drop(columns="seconds", errors="ignore"),
                                      cpu_table.drop(columns="seconds", errors="ignore"), check_exact=True)


def test_ensembles_on_the_device_give_the_cpu_outputs(data_dir, tmp_path):
    """The networks that train together (docs/method.md §3, §10b): a model's (optimizer, seed) runs as
    one ensemble of two optimizers (train_runs), and a budget job's lags in chunks with the network
    it rebuilds, give on the device the CPU's outputs bit for bit."""
    runs = [("adamw", 3), ("sgd_momentum", 3), ("adamw", 4)]
    budget = dict(thresholds=[0.1, 0.3], budgets=[8, 16], ensemble=2)
    out = {}
    for d in ("cpu", DEVICE):
        with on(d):
            assert train_runs(data_dirs=[data_dir] * len(runs), out_dirs=[tmp_path / d / o / f"seed{s}" for o, s in runs],
                              model="gru", optimizers=[o for o, _ in runs], seeds=[s for _, s in runs], model_config=MODEL,
                              optim_configs={"adamw": OPTIM, "sgd_momentum": dict(lr=0.01, momentum=0.9)},
                              train_config=TRAIN, snapshot_epochs=["best"], device=d) == {}
            scores = budget_trainings(batch_size=8, frontier_stop=0, train_config=dict(grad_clip=1.0), device=d,
                                      **budget, **JOB)
            nets = budget_networks(train_config=dict(grad_clip=1.0, batch_size=8), recorded=scores, device=d, **budget,
                                   **JOB)
            out[d] = scores, {name: {k: t.cpu() for k, t in net["model"].items()} for name, net in nets.items()}
    for o, s in runs:
        run = {d: tmp_path / d / o / f"seed{s}" for d in ("cpu", DEVICE)}
        pd.testing.assert_frame_equal(*(io.read_table(run[d] / "curve.parquet", "curve") for d in (DEVICE, "cpu")),
                                      check_exact=True)
        for name in ("best.pt", "final.pt"):
            assert_same_state(io.load_checkpoint(run[DEVICE] / name), io.load_checkpoint(run["cpu"] / name))
    pd.testing.assert_frame_equal(out[DEVICE][0].drop(columns="seconds"), out["cpu"][0].drop(columns="seconds"),
                                  check_exact=True)
    assert_same_state(out[DEVICE][1], out["cpu"][1])
