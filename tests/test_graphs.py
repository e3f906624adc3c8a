"""CUDA graphs that fit (learnwin.models.fused): every capture of a process in one memory pool, the
graphs of one job shape at a time, and the evaluation graphs counted in the jobs' ``gpu_mem_mb``
(learnwin.infra.resources.eval_graph_bytes). On the pretend device (tests/pretend_cuda.py), whose
stand-in of CUDA graphs (:class:`pretend_cuda.Replay`) counts the graphs still held and the bytes of
their outputs in each pool; each check fails on a planted fault.
"""

import numpy as np
import pytest
import torch
from pretend_cuda import Replay, pretend_cuda

from learnwin.infra import resources
from learnwin.infra.registry import CELLS, MODEL
from learnwin.models import fused
from learnwin.models.cells import GatedCell, build_model
from learnwin.recovery import budget_job
from learnwin.recovery.task import initial

DEVICE = "meta"  # the pretend CUDA device
GRAPHED = fused.Mode(compile=False, graph=True)
T, D, H, B = 6, 2, 4, 4
OPTIM = dict(lr=0.01, weight_decay=1e-4)
FUSED_CELLS = [m for m in ("const", "shared", "diag", "gru", "lstm") if issubclass(CELLS[m].load(), GatedCell)]


@pytest.fixture
def graphs(monkeypatch):
    """The fused step graphed by :class:`Replay` on the pretend device, from no graph held."""
    monkeypatch.setattr(fused, "GRAPH_BACKEND", Replay)
    monkeypatch.setattr(fused, "_graphed", {})
    monkeypatch.setattr(fused, "_pools", {})
    monkeypatch.setattr(Replay, "held", [])
    with pretend_cuda(), fused.use(GRAPHED):
        yield


def _train_and_evaluate(model, batches=(B, 3)) -> None:
    """One training step's forward and backward at the first batch size, evaluations at the others."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batches[0], T, D, generator=gen).to(DEVICE)
    model(x).square().sum().backward()
    with torch.no_grad():
        for b in batches[1:]:
            model(torch.randn(b, T, D, generator=gen).to(DEVICE))


def _pool_faults(expected_graphs: int) -> list[str]:
    """What is wrong with the graphs held now: their count, or more than one pool."""
    held, pools = Replay.live()
    return ([f"{held} graphs held, expected {expected_graphs}"] * (held != expected_graphs)
            + [f"{len(pools)} pools hold graph outputs, expected one"] * (len(pools) > 1))


@pytest.mark.parametrize("fault", [None, "a pool per capture"])
def test_every_capture_shares_one_pool_until_release(graphs, fault, monkeypatch):
    """A training step (forward and backward loops) and an evaluation at another batch size: three
    graphs in one pool; :func:`fused.release` frees them all, and the next capture opens a new pool."""
    if fault:
        monkeypatch.setattr(fused, "pool", lambda backend: backend.pool())
    _train_and_evaluate(build_model("gru", D, H).to(DEVICE))
    faults = _pool_faults(3)
    if fault:
        assert faults == ["3 pools hold graph outputs, expected one"]
        return
    assert faults == []
    (first,) = Replay.live()[1]
    fused.release()
    assert Replay.live() == (0, {})
    _train_and_evaluate(build_model("gru", D, H).to(DEVICE), batches=(B,))
    held, pools = Replay.live()
    assert held == 2 and list(pools) != [first] and len(pools) == 1


def _budget_ensemble(members: list[int], leaves: dict[int, int]) -> dict[int, tuple]:
    """:func:`budget_job.online_ensemble` of GRU networks ``members`` (of four, each its own init and
    targets) to budgets B, 2B, 3B, member k leaving at budget ``leaves[k]``: the graphs held and the
    bytes in their pools at each budget's scoring."""
    gen = torch.Generator().manual_seed(1)
    x, x_test = torch.randn(3 * B, T, D, generator=gen), torch.randn(5, T, D, generator=gen).to(DEVICE)
    ys = [np.random.default_rng(k).standard_normal((3 * B, T)).astype(np.float32) for k in range(4)]
    pairs = [initial("gru", "adamw", D, init=k, model_config=dict(hidden=H), optim_config=OPTIM, device=DEVICE)
             for k in members]
    seen = {}

    def scored(k: int, N: int, pred: np.ndarray) -> bool:
        seen[N] = Replay.live()
        return leaves.get(members[k]) == N

    budget_job.online_ensemble([n for n, _ in pairs], [o for _, o in pairs], x, [ys[k] for k in members],
                               optimizer="adamw", optim_config=OPTIM, budgets=[B, 2 * B, 3 * B], batch_size=B,
                               grad_clip=1.0, run_names=[str(k) for k in members], lr_key="lr", x_test=x_test,
                               scored=scored, device=DEVICE)
    return seen


def _shape_faults(seen: dict, alone: dict) -> list[str]:
    """Budgets where the job holds other graphs than an ensemble of its current members alone would
    (``alone``: :func:`_budget_ensemble` of the members left): a count or the pools' bytes differ."""
    return [f"N={N}: {seen[N][0]} graphs, {sum(seen[N][1].values())} bytes; alone {alone[N][0]}, "
            f"{sum(alone[N][1].values())}" for N in alone if (seen[N][0], sorted(seen[N][1].values()))
            != (alone[N][0], sorted(alone[N][1].values()))]


@pytest.mark.parametrize("fault", [None, "graphs kept after a member leaves"])
def test_a_smaller_ensemble_holds_only_its_own_graphs(graphs, fault, monkeypatch):
    """A budget job's ensemble of three from which one member leaves at the first budget: from the
    next budget on it holds the graphs (training forward and backward, the held-out evaluation) and
    pool bytes of an ensemble of the other two alone, not those of the three beside them."""
    release = fused.release
    if fault:
        monkeypatch.setattr(budget_job.fused, "release", lambda: None)
    seen = _budget_ensemble([0, 1, 2], {0: B})
    assert seen[B][0] == 3 and len(seen[B][1]) == 1
    release()
    alone = _budget_ensemble([1, 2], {})
    assert sum(alone[2 * B][1].values()) < sum(seen[B][1].values())  # the two's graphs are smaller
    faults = _shape_faults(seen, {N: alone[N] for N in (2 * B, 3 * B)})
    assert (faults != []) == bool(fault), faults


def _eval_arrays(cell: str) -> float:
    """Float32 (T, n) arrays per sequence that ``cell``'s evaluation graph holds (static inputs and
    outputs), from the difference of two batch sizes (what does not grow with the batch cancels)."""
    held = []
    for b in (3, 7):
        fused.release()
        model = build_model(cell, D, H).to(DEVICE)
        with torch.no_grad():
            model(torch.zeros(b, T, D).to(DEVICE))
        static = sum(a.numel() * a.element_size() for graphed in fused._graphed.values()
                     for kept in graphed.graphs.values() for a in kept[0] if isinstance(a, torch.Tensor))
        held.append(static + sum(Replay.live()[1].values()))
    n = CELLS[cell].state_width({**MODEL, "hidden": H})
    return (held[1] - held[0]) / (4 * T * n * 4)


def test_eval_graph_arrays_bound_each_family(graphs):
    """:data:`resources.EVAL_GRAPH_ARRAYS` bounds every fused family's evaluation graph per sequence,
    and the largest (the GRU's) holds more than one array less: the bound is tight."""
    arrays = {cell: _eval_arrays(cell) for cell in FUSED_CELLS}
    assert max(arrays.values()) <= resources.EVAL_GRAPH_ARRAYS, arrays
    assert max(arrays, key=arrays.get) == "gru" and arrays["gru"] > resources.EVAL_GRAPH_ARRAYS - 1, arrays


def test_gpu_mem_mb_counts_one_graph_per_evaluation_batch_shape():
    """A training evaluates its R^2 subset and its validation split in batches of 256: the shapes
    {256, remainder} of each, one graph each, counted per member in the jobs' device memory."""
    cfg = {"task": dict(T=8, D=2, n_train=2000, n_val=1000, n_diag=8), "model": dict(hidden=4),
           "train": dict(r2_subset=300, batch_size=16), "optimizers": ["adamw"], "seeds": [1, 2]}
    per = resources.EVAL_GRAPH_ARRAYS * 8 * 4 * 4  # one sequence's graph: arrays x T x n x float32
    assert resources.eval_graph_bytes(cfg, "gru", [300, 1000]) == (256 + 44 + 232) * per
    assert resources.eval_graph_bytes(cfg, "gru", [100]) == 100 * per
    assert resources.eval_graph_bytes(cfg, "gru", [512, 256], members=3) == 3 * 256 * per
    bare = {**cfg, "train": {**cfg["train"], "r2_subset": 0}, "task": {**cfg["task"], "n_val": 0}}
    assert resources.train_gpu_mem_mb(cfg, "gru") - resources.train_gpu_mem_mb(bare, "gru") == pytest.approx(
        (256 + 44 + 232) * per / 2**20 + 1000 * 8 * 3 * 4 / 2**20, abs=1)
    assert resources.ensemble_gpu_mem_mb(cfg, "gru") - resources.ensemble_gpu_mem_mb(bare, "gru") == pytest.approx(
        2 * (256 + 44 + 232) * per / 2**20 + 2 * 1000 * 8 * 3 * 4 / 2**20, abs=1)
