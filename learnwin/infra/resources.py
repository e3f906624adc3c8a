"""RAM (``mem_mb``), GPU memory (``gpu_mem_mb``) and wall-time requests of the workflow's jobs, as
functions of the config size.

Snakemake passes ``mem_mb`` and ``runtime`` (minutes) to SLURM; a local run ignores them, and
``gpu_mem_mb`` is a scheduling token that profiles/gpu limits to one device's memory. Each takes the
resolved config (schema defaults applied). A job that asks a GPU (``gpu=True``: the profile's
``gpu`` resource, workflow/rules/common.smk) is timed by the GPU cost table
(:mod:`learnwin.infra.gpu_cost`), a CPU job by the CPU cost law (:data:`COEF`); a resumable job's
request (the trainings, the ground-truth and budget-protocol jobs) stops at :data:`MAX_RUNTIME`, and
a job killed there resumes from its ``.resume/`` state when re-submitted (:func:`resume_retries`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from learnwin.infra import gpu_cost, registry
from learnwin.infra.config import EXACT_JACOBIAN_BYTES, exact_jacobian_bytes, recovery_lags, transports_of
from learnwin.infra.registry import CELLS, Column

#: Gate blocks of each cell's recurrent matrix (its rows / H): the arithmetic per step scales with it.
#: A live view of the registry's ``gate_blocks`` (:class:`learnwin.infra.registry.CellSpec`).
GATES = Column("gate_blocks")
#: CPU seconds per unit of each work term of :func:`work`, fitted over the smoke (diagonal transport),
#: default and medium rungs by `python experiments/cost_law.py` (docs/results.md, "The scale ladder").
COEF = {"train_model": (6.49, 6.72e-05, 5.2e-10), "take_snapshot": (4.83, 7.46e-05, 2.63e-09, 2.46e-09)}
#: A request is this many times the cost law's CPU seconds (jobs share nodes; the fit is an average) ...
MARGIN = 2.0
#: ... and at least this many minutes.
MIN_RUNTIME = 10
#: Longest wall-time request in minutes (23 h: below the 24 h limit of most clusters' GPU partitions).
#: A resumable job that needs longer asks this much and resumes from its ``.resume/`` state when
#: re-submitted (:func:`resume_retries`): train_model and train_ensemble after each epoch
#: (learnwin.models.train), train_recovery and train_budget after each training or lag chunk
#: (learnwin.infra.resume). The other jobs cannot resume.
MAX_RUNTIME = 23 * 60
#: Seconds of a GPU job's start: torch and CUDA start-up, the fused step's compiles from cold and its
#: graph captures (benchmarks/gpu_check.sh allows 75 s for eleven step functions: eight times that).
GPU_START_S = 600
#: Cost of evaluating one sequence (forward only, no_grad) over training on it, per step: a forward
#: pass is about a third of a step; a half covers evaluation on the slower unfused path.
EVAL_SHARE = 0.5
#: Host memory of a GPU job beside its data: the CUDA context, torch's CUDA libraries, the compiler.
GPU_HOST_MB = 4000
#: Device memory of any CUDA job beside its arrays: the context and the caching allocator's slack.
GPU_CONTEXT_MB = 1000
#: Device memory an ensemble plans on: an 80 GB H100's, less its context and the allocator's share
#: (profiles/gpu lets its CUDA jobs hold 75000 MB at once). A budget job's lag chunks are cut to fit
#: it (:func:`lag_ensemble`); ``ensemble: auto`` trains a model's runs one per job where their
#: ensemble would not fit it (:func:`train_together`).
GPU_MEMORY_MB = 76_000
#: Sequences per evaluation forward: a training's curve rows (learnwin.models.train.evaluate, the
#: ensemble's), the ground-truth jobs' held-out scores (learnwin.recovery.task.PREDICT_BATCH). It
#: bounds RAM (evaluation alone runs 3x faster than at batch 32; whole epochs of the default run did
#: not change measurably); on CUDA each batch shape is an evaluation graph (:func:`eval_graph_bytes`).
EVAL_BATCH = 256
#: Float32 (T, n) arrays per sequence that an evaluation graph holds for a job's life (n the state
#: width, :func:`state_width`): the fused forward's record (states, saved gates, LayerNorm
#: statistics) in the process's graph pool and the static copy of the input projection; the GRU's
#: is the largest, 9 + 2 / H + 1 / T (tests/test_graphs.py measures each family's on the pretend device).
EVAL_GRAPH_ARRAYS = 10
#: Bound on the memory curve's batched-backward work arrays (learnwin.probing.memory chunks its receiving
#: times to stay within it): 16 arrays within 256 MB keep each below glibc's largest heap block (32 MB),
#: which runtime.keep_freed_memory then reuses instead of faulting in fresh pages (benchmarks/malloc.py).
MEMORY_CURVE_BYTES = 2**28
#: The same bound on an accelerator, where a chunk is sized for its launches, not for a heap: 8 GiB,
#: eight receiving times per batched backward at the paper's size (B 128, T 1024, H 128) instead of one.
DEVICE_MEMORY_CURVE_BYTES = 2**33
#: Cost of the exact transport's part of a snapshot over the diagonal snapshot: the largest
#: exact / diagonal ratio `python benchmarks/transport.py` measured with the closed-form one-step
#: Jacobians and the shared forward pass (1.5-2.3x over the five cells, commit f0058a1), rounded up.
EXACT_FACTOR = 2.5
#: Memory of the exact transport over its dense one-step Jacobians (B, T, n, n): S6's snapshot at the
#: default size peaked at 9.8 GB, 1.8 GB above its 8 GB of Jacobians (the adjoints and their products).
EXACT_MEM_FACTOR = 1.25


def work(rule: str, cfg: Mapping, model: str) -> np.ndarray:
    """The work terms of one job of ``rule`` (a leading 1 for the fixed start-up cost).

    train_model: steps T and steps T B G H^2 (per-step loop overhead and arithmetic);
    take_snapshot: n T, n T G H^2 and n T^2 H (trace and tangent passes; psi and S at every lag,
    T^2/2 pairs per sequence) over the n diag sequences.
    """
    t, T, H, G = cfg["task"], cfg["task"]["T"], cfg["model"]["hidden"], mixing(cfg, model)
    if rule == "train_model":
        tr = cfg["train"]
        steps = tr["epochs"] * max(1, t["n_train"] // tr["batch_size"])
        return np.array([1.0, steps * T, steps * T * tr["batch_size"] * G * H * H])
    n = t["n_diag"]
    return np.array([1.0, n * T, n * T * G * H * H, n * T * T * H])


def mixing(cfg: Mapping, model: str) -> float:
    """G of the cost law: matrix products per step in units of H^2, the cell's gate blocks
    (:data:`GATES`) for one layer, a stack's from its block (docs/method.md §2c,
    :meth:`learnwin.infra.blocks.BlockSpec.mixing`)."""
    m = cfg["model"]
    return registry.block_of(m, CELLS[model]).mixing(GATES[model], registry.shape(m)[0])


def cpu_seconds(rule: str, cfg: Mapping, model: str) -> float:
    """CPU seconds of one job by the fitted cost law."""
    return float(work(rule, cfg, model) @ np.asarray(COEF[rule]))


def _minutes(cpu_s: float, cap: bool = False) -> int:
    """:data:`MARGIN` times ``cpu_s`` in minutes, at least :data:`MIN_RUNTIME`; at most
    :data:`MAX_RUNTIME` where ``cap`` (the request of a job that resumes)."""
    minutes = max(MIN_RUNTIME, math.ceil(MARGIN * cpu_s / 60))
    return min(minutes, MAX_RUNTIME) if cap else minutes


def resume_retries(minutes: float) -> int | None:
    """Re-submissions a resumable job of ``minutes`` (uncapped: its runtime function with
    ``cap=False``) needs past the first at :data:`MAX_RUNTIME` each, plus one for a node failure;
    None (the profile's ``retries``) when one request holds it."""
    return math.ceil(minutes / MAX_RUNTIME) if minutes > MAX_RUNTIME else None


def gpu_step_ms(cfg: Mapping, model: str) -> float:
    """ms per training step of ``model`` at the config's size on one GPU (:func:`learnwin.infra.gpu_cost.ms_per_step`)."""
    m = cfg["model"]
    return gpu_cost.ms_per_step(model, cfg["task"]["T"], m["hidden"], cfg["train"]["batch_size"],
                                mixing(cfg, model), layers=registry.shape(m)[0])


def gpu_train_seconds(cfg: Mapping, model: str, trainings: int, steps: int, evaluated: int = 0) -> float:
    """GPU seconds of a job of ``trainings`` trainings of ``steps`` steps, each evaluating
    ``evaluated`` sequences (:data:`EVAL_SHARE` of a step per batch): one start and the steps by the
    GPU cost table."""
    batches = steps + EVAL_SHARE * evaluated / cfg["train"]["batch_size"]
    return GPU_START_S + trainings * batches * gpu_step_ms(cfg, model) / 1000


def _train_model_seconds(cfg: Mapping, model: str, gpu: bool) -> float:
    """One train_model job: the CPU cost law, or on a GPU its steps and every epoch's evaluation of
    the validation split and the train R^2 subset (learnwin.models.train)."""
    if not gpu:
        return cpu_seconds("train_model", cfg, model)
    t, tr = cfg["task"], cfg["train"]
    steps = tr["epochs"] * max(1, t["n_train"] // tr["batch_size"])
    evaluated = (tr["epochs"] + 1) * (t["n_val"] + min(tr["r2_subset"], t["n_train"]))
    return gpu_train_seconds(cfg, model, 1, steps, evaluated)


def _mb(n_bytes: float, base: int = 600) -> int:
    return int(base + n_bytes / 2**20)


def _sample_bytes(task: Mapping) -> int:
    """One float32 sequence of inputs and targets."""
    return task["T"] * (task["D"] + 1) * 4


def data_mem_mb(cfg: Mapping) -> int:
    """The largest split, three times over (generation, targets, the written copy)."""
    t = cfg["task"]
    return _mb(3 * max(t["n_train"], t["n_val"], t["n_diag"]) * _sample_bytes(t))


def _activation_bytes(cfg: Mapping, model: str) -> int:
    """Autograd activations of one training batch: about 40 float32 (B, T, n) arrays, n the
    model's state width (:func:`state_width`)."""
    t, b = cfg["task"], cfg["train"]["batch_size"]
    return 40 * b * t["T"] * state_width(cfg, model) * 4


def train_mem_mb(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """Train + val splits resident, plus autograd activations of one batch (on the GPU, not the
    host, for a GPU job: :func:`train_gpu_mem_mb`)."""
    t = cfg["task"]
    data = (t["n_train"] + t["n_val"]) * _sample_bytes(t)
    return _mb(data, base=GPU_HOST_MB) if gpu else _mb(data + _activation_bytes(cfg, model), base=1200)


def train_gpu_mem_mb(cfg: Mapping, model: str) -> int:
    """Device memory of one training job: the splits (moved to the device), one batch's activations,
    which the fused step's CUDA graphs keep in the process's graph pool for the job's life, and its
    evaluation graphs (:func:`eval_graph_bytes`)."""
    t = cfg["task"]
    return _mb((t["n_train"] + t["n_val"]) * _sample_bytes(t) + _activation_bytes(cfg, model)
               + eval_graph_bytes(cfg, model, _evaluated(cfg)), base=GPU_CONTEXT_MB)


def _evaluated(cfg: Mapping) -> tuple[int, int]:
    """The sequences a training evaluates after each epoch: its train R^2 subset and the validation split."""
    t = cfg["task"]
    return min(cfg["train"]["r2_subset"], t["n_train"]), t["n_val"]


def eval_graph_bytes(cfg: Mapping, model: str, sizes, members: int = 1) -> int:
    """Device memory of the evaluation graphs a CUDA job holds for its life: the fused forward
    captures one graph per batch shape (learnwin.models.fused), here the shapes of evaluating each
    of ``sizes`` sequences in batches of :data:`EVAL_BATCH`, each :data:`EVAL_GRAPH_ARRAYS` float32
    (T, n) arrays per sequence of each of ``members`` networks (an upper bound for a model without
    a fused step, which captures none)."""
    shapes = {b for n in sizes for b in (min(n, EVAL_BATCH), n % EVAL_BATCH) if b}
    return members * sum(shapes) * EVAL_GRAPH_ARRAYS * cfg["task"]["T"] * state_width(cfg, model) * 4


def train_runtime_min(cfg: Mapping, model: str, gpu: bool = False, cap: bool = True) -> int:
    """Wall-time request of one training job: :data:`MARGIN` times the CPU cost law or the GPU cost
    table, at most :data:`MAX_RUNTIME` (it resumes) unless ``cap`` is False."""
    return _minutes(_train_model_seconds(cfg, model, gpu), cap)


def ensemble_runs(cfg: Mapping) -> int:
    """The (optimizer, seed) runs of one model, which one train_ensemble job trains together."""
    return len(cfg["optimizers"]) * len(cfg["seeds"])


def ensemble_mem_mb(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """One train_ensemble job: every seed's train + val splits resident, plus autograd activations
    of one batch of each run (on the device for a GPU job: :func:`ensemble_gpu_mem_mb`)."""
    t = cfg["task"]
    data = len(cfg["seeds"]) * (t["n_train"] + t["n_val"]) * _sample_bytes(t)
    return _mb(data, base=GPU_HOST_MB) if gpu else _mb(data + ensemble_runs(cfg) * _activation_bytes(cfg, model), base=1200)


def ensemble_gpu_mem_mb(cfg: Mapping, model: str) -> int:
    """Device memory of one train_ensemble job: every seed's splits, each run's batch of activations
    and its share of the evaluation graphs (:func:`eval_graph_bytes`)."""
    t, runs = cfg["task"], ensemble_runs(cfg)
    data = len(cfg["seeds"]) * (t["n_train"] + t["n_val"]) * _sample_bytes(t)
    return _mb(data + runs * _activation_bytes(cfg, model) + eval_graph_bytes(cfg, model, _evaluated(cfg), runs),
               base=GPU_CONTEXT_MB)


def ensemble_runtime_min(cfg: Mapping, model: str, gpu: bool = False, cap: bool = True) -> int:
    """Wall-time request of one train_ensemble job: its runs' separate trainings by the CPU cost law
    or the GPU cost table, an upper bound where an ensemble wins, at most :data:`MAX_RUNTIME` (it
    resumes) unless ``cap`` is False."""
    return _minutes(ensemble_runs(cfg) * _train_model_seconds(cfg, model, gpu), cap)


def snapshot_runtime_min(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """Wall-time request of one snapshot job (envelope, psi, S and the memory curve); the law is
    the diagonal transport's, times 1 + :data:`EXACT_FACTOR` when ``snapshot.transport`` lists
    exact (the job then computes both transports, docs/method.md §4b); on a GPU scaled by the GPU
    cost table (:func:`_snapshot_seconds`)."""
    return _minutes(_snapshot_seconds(cfg, model, gpu))


def _snapshot_cpu_seconds(cfg: Mapping, model: str) -> float:
    factor = 1.0 + EXACT_FACTOR if "exact" in transports_of(cfg["snapshot"]["transport"]) else 1.0
    return factor * cpu_seconds("take_snapshot", cfg, model)


def _snapshot_seconds(cfg: Mapping, model: str, gpu: bool) -> float:
    """A snapshot's seconds: the CPU law, or on a GPU a start plus the CPU law times the table's
    measured GPU / CPU-law ratio of a snapshot batch (:func:`learnwin.infra.gpu_cost.snapshot_ratio`)."""
    cpu = _snapshot_cpu_seconds(cfg, model)
    if not gpu:
        return cpu

    def cpu_at(family, T, H, sequences):
        at = {**cfg, "task": {**cfg["task"], "T": T, "n_diag": sequences},
              "model": {**cfg["model"], "hidden": H, "layers": 1}}
        return cpu_seconds("take_snapshot", at, family)

    return GPU_START_S + cpu * gpu_cost.snapshot_ratio(cpu_at)


def memory_curve_bytes(batch: int, T: int, hidden: int, times: int) -> int:
    """Work arrays of the memory curve's batched backward over ``times`` receiving times: about
    16 float32 (batch, T, hidden) arrays per receiving time."""
    return 16 * batch * T * hidden * 4 * times


def state_width(cfg: Mapping, model: str) -> int:
    """Width n of the model's full state, the side of its one-step Jacobian (docs/method.md §4b):
    H, 2H for the LSTM, H N for S6, 2H for the LRU's complex state, every layer's and the
    convolution windows' for a stack (docs/method.md §2c); from the registry's metadata
    (:meth:`learnwin.infra.registry.CellSpec.state_width`), without building the model."""
    return CELLS[model].state_width(cfg["model"])


def snapshot_mem_mb(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """The larger of the snapshot pass (one diag batch: K tangents plus a lag chunk of float64
    (B, L, T, H) work arrays) and the memory curve (:func:`memory_curve_bytes`; peak RSS 1.3 GB
    at T 64, H 32 and, before its chunking, 7.2 GB at T 128, H 64, with B 128), at most
    :data:`MEMORY_CURVE_BYTES` or one receiving time's; plus, with the exact transport, the batch's float32 one-step
    Jacobians (B, T, n, n) (:func:`learnwin.infra.config.exact_jacobian_bytes`; S6 at the default size, n = 512: peak RSS 9.8 GB),
    times :data:`EXACT_MEM_FACTOR`; or, if larger, the Lyapunov spectrum's Jacobians that follow
    under either transport (``snapshot.exact_sequences`` of them at a time, fewer where they would
    pass :data:`learnwin.infra.config.EXACT_JACOBIAN_BYTES`: learnwin.probing.lyapunov), times the same.
    A GPU job holds those on the device (:func:`snapshot_gpu_mem_mb`) and the diag split on the host."""
    t, s = cfg["task"], cfg["snapshot"]
    if gpu:
        return _mb(t["n_diag"] * _sample_bytes(t), base=GPU_HOST_MB)
    h = registry.units(cfg["model"], CELLS[model])
    batch = min(s["batch_size"], t["n_diag"])
    tangents = (s["directions"] + 2) * batch * t["T"] * h * 4
    curve_batch = min(batch, s["memory_sequences"])
    curve = min(memory_curve_bytes(curve_batch, t["T"], h, t["T"]),
                max(MEMORY_CURVE_BYTES, memory_curve_bytes(curve_batch, t["T"], h, 1)))  # >= one receiving time
    curve += curve_batch * t["T"] ** 2 * 4  # its output u . d y_hat_t / d x_k, (B, T, T) float32
    jacobians = exact_jacobian_bytes(cfg, model)
    exact = EXACT_MEM_FACTOR * jacobians if "exact" in transports_of(s["transport"]) else 0
    one = exact_jacobian_bytes(cfg, model, batch=1)
    lyapunov = EXACT_MEM_FACTOR * one * max(1, min(batch, s["exact_sequences"], EXACT_JACOBIAN_BYTES // one))
    return _mb(max(max(tangents + 8 * 8 * (1 << 22), curve) + exact, lyapunov), base=1200)


def recovery_arms(cfg: Mapping) -> dict[str, dict]:
    """The ground-truth jobs' arms (docs/method.md §10): per arm the seeds, N values and steps.
    main: every seed and N; full_grid: the first seed at ``validate_n_train``; double_steps: the
    first ``steps_check_seeds`` seeds at the largest N with 2 x steps."""
    rec = cfg["recovery"]
    seeds = rec["seeds"] or cfg["seeds"]
    return {
        "main": dict(seeds=list(seeds), n_train=list(rec["n_train"]), steps=rec["steps"]),
        "full_grid": dict(seeds=list(seeds[:1]) if rec["validate_n_train"] else [],
                          n_train=list(rec["validate_n_train"]), steps=rec["steps"]),
        "double_steps": dict(seeds=list(seeds[:rec["steps_check_seeds"]]), n_train=list(rec["n_train"][-1:]),
                             steps=2 * rec["steps"]),
    }


def recovery_trainings(cfg: Mapping, n_values: int, full_grid: bool = False) -> int:
    """Upper bound on the trainings of one ground-truth job over ``n_values`` N: per N, one
    control and, per threshold, the bisection's ceil(log2(L - 1)) midpoints after the two ends
    (shared), or every lag of the grid L in the full-grid arm."""
    L = len(recovery_lags(cfg))
    k = len(cfg["recovery"]["thresholds"])
    per_n = L if full_grid else min(L, 2 + k * math.ceil(math.log2(max(L - 1, 1))))
    return n_values * (1 + per_n)


def recovery_cpu_seconds(cfg: Mapping, model: str, trainings: int, steps: int) -> float:
    """CPU seconds of one ground-truth job: one start-up and ``trainings`` trainings of ``steps``
    steps, by the training cost law."""
    per = work("train_model", {**cfg, "train": {**cfg["train"], "epochs": 1},
                               "task": {**cfg["task"], "n_train": steps * cfg["train"]["batch_size"]}}, model)
    return float(COEF["train_model"][0] + trainings * (per[1:] @ np.asarray(COEF["train_model"][1:])))


def training_seconds(cfg: Mapping, model: str, trainings: int, steps: int, gpu: bool) -> float:
    """A job's ``trainings`` trainings of ``steps`` steps: :func:`recovery_cpu_seconds` or, on a
    GPU, :func:`gpu_train_seconds`."""
    return (gpu_train_seconds if gpu else recovery_cpu_seconds)(cfg, model, trainings, steps)


def recovery_runtime_min(cfg: Mapping, model: str, arm: str, gpu: bool = False, cap: bool = True) -> int:
    """Wall-time request of one ground-truth job of ``arm``: :data:`MARGIN` times the cost law
    with the bound on its trainings, at most :data:`MAX_RUNTIME` (it resumes after each training)
    unless ``cap`` is False."""
    spec = recovery_arms(cfg)[arm]
    n = recovery_trainings(cfg, len(spec["n_train"]), full_grid=arm == "full_grid")
    return _minutes(training_seconds(cfg, model, n, spec["steps"], gpu), cap)


def recovery_longest_runtime_min(cfg: Mapping, model: str, gpu: bool = False, cap: bool = True) -> int:
    """:func:`recovery_runtime_min` of ``model``'s longest arm that has jobs: what the rule's
    retries are sized by (:func:`resume_retries`)."""
    return max(recovery_runtime_min(cfg, model, arm, gpu, cap) for arm, spec in recovery_arms(cfg).items()
               if spec["seeds"])


def recovery_mem_mb(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """Largest training set plus the held-out set, one batch of activations and the score's
    (lags, n_test, n_test) cross products; on a GPU job both on the host and on the device
    (:data:`GPU_HOST_MB` and :data:`GPU_CONTEXT_MB` more)."""
    return _scored_training_mem_mb(cfg, model, cfg["recovery"]["n_train"][-1]) + _gpu_extra(gpu)


def _gpu_extra(gpu: bool) -> int:
    """Host memory a GPU job needs beside its arrays (:data:`GPU_HOST_MB`), or none."""
    return GPU_HOST_MB if gpu else 0


def _scored_training_mem_mb(cfg: Mapping, model: str, sequences: int, networks: int = 1) -> int:
    """``sequences`` training sequences plus the held-out set, a batch of activations of each of
    ``networks`` and the score's cross products (:func:`_score_bytes`)."""
    data = (sequences + cfg["recovery"]["n_test"]) * _sample_bytes(cfg["task"])
    return _mb(data + networks * _activation_bytes(cfg, model) + _score_bytes(cfg), base=1200)


def _score_bytes(cfg: Mapping) -> int:
    """The held-out score's float64 arrays (learnwin.stats.groundtruth.lag_scores) at every grid lag
    at once (a control is scored at all of them): per lag C (n_test, n_test), the permutation
    gather (n_perm, n_test) and 4 (n_test, T) arrays."""
    rec = cfg["recovery"]
    n, T = rec["n_test"], cfg["task"]["T"]
    return 8 * len(recovery_lags(cfg)) * n * (n + rec["n_perm"] + 4 * T)


def budget_cpu_seconds(cfg: Mapping, model: str) -> float:
    """CPU seconds of one budget-protocol job (docs/method.md §10b) at worst: the control and every
    grid lag trained to N_max (no early stop, no frontier), (1 + lags) x N_max / B steps, by the
    training cost law."""
    steps = cfg["recovery"]["budgets"][-1] // cfg["train"]["batch_size"]
    return recovery_cpu_seconds(cfg, model, 1 + len(recovery_lags(cfg)), steps)


def budget_runtime_min(cfg: Mapping, model: str, gpu: bool = False, cap: bool = True) -> int:
    """Wall-time request of one budget-protocol job: :data:`MARGIN` times its worst-case cost law;
    on a GPU, its trainings by the GPU cost table, one at a time (an upper bound under a lag
    ensemble); at most :data:`MAX_RUNTIME` (it resumes after each training or lag chunk) unless
    ``cap`` is False."""
    if not gpu:
        return _minutes(budget_cpu_seconds(cfg, model), cap)
    steps = cfg["recovery"]["budgets"][-1] // cfg["train"]["batch_size"]
    return _minutes(gpu_train_seconds(cfg, model, 1 + len(recovery_lags(cfg)), steps), cap)


def budget_mem_mb(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """Host memory of one budget-protocol job (learnwin.recovery.budget_job): the N_max stream in
    float32 (inputs and noise; drawn a block at a time, learnwin.tasks.synthetic.make_split, a
    transient below what follows), its components u . x_t, the targets of the E lags of a lag
    ensemble (:func:`lag_ensemble`; 0 one training at a time) and of the control, with the
    control's unpermuted targets while they are permuted (E + 2), the held-out set and the score's
    cross products; on the CPU a batch's activations of each of the E + 1 networks trained at once
    (one at a time: 1), on a GPU :data:`GPU_HOST_MB` instead (the activations are on the device, to
    which each batch of the stream moves as it is used: :func:`scored_gpu_mem_mb`)."""
    n_max, E = cfg["recovery"]["budgets"][-1], lag_ensemble(cfg)
    series = (1 + E + 2) * n_max * cfg["task"]["T"] * 4  # (n_max, T) float32: the components, E + 2 targets
    networks = 0 if gpu else E + 1
    return _scored_training_mem_mb(cfg, model, n_max, networks) + _mb(series, base=0) + _gpu_extra(gpu)


def lag_ensemble(cfg: Mapping) -> int:
    """Lags per ensemble chunk of a budget-protocol job (docs/method.md §10b):
    ``recovery.ensemble_lags`` (at most the grid's) where :func:`ensemble_training` says so for a
    chunk and the control, else 0 (one training at a time)."""
    E = min(cfg["recovery"]["ensemble_lags"], len(recovery_lags(cfg)))
    if not ensemble_training(cfg, E + 1):
        return 0
    fit = min(_members_that_fit(cfg, m) for m in cfg["recovery"]["models"] or cfg["models"]) - 1  # the control
    return min(E, fit) if fit > 0 else 0


def _members_that_fit(cfg: Mapping, model: str) -> int:
    """Networks of ``model`` a scored training holds in :data:`GPU_MEMORY_MB` (:func:`scored_gpu_mem_mb`)."""
    free = GPU_MEMORY_MB - scored_gpu_mem_mb(cfg, model, 0)
    return int(free * 2**20 // max(_member_bytes(cfg, model), 1))


def _member_bytes(cfg: Mapping, model: str) -> int:
    """Device memory of one network of a scored training: a batch of activations and its share of
    the held-out set's evaluation graphs (:func:`eval_graph_bytes`)."""
    return _activation_bytes(cfg, model) + eval_graph_bytes(cfg, model, [cfg["recovery"]["n_test"]])


def recovery_snapshot_cpu_seconds(cfg: Mapping, model: str, steps: int | None = None, trainings: int = 1,
                                  gpu: bool = False) -> float:
    """CPU seconds (GPU seconds where ``gpu``) of one same-network snapshot job (docs/method.md §10):
    ``trainings`` trainings of ``steps`` (default ``recovery.steps``) and two snapshots (init,
    trained) by the snapshot law, which also counts the memory curve this job skips."""
    train = training_seconds(cfg, model, trainings, cfg["recovery"]["steps"] if steps is None else steps, gpu)
    return train + 2 * _snapshot_seconds(cfg, model, gpu)


def recovery_snapshot_runtime_min(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """Wall-time request of one same-network snapshot job: :data:`MARGIN` times its cost law."""
    return _minutes(recovery_snapshot_cpu_seconds(cfg, model, gpu=gpu))


def recovery_snapshot_mem_mb(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """The larger of a ground-truth training's and a snapshot's memory."""
    return max(recovery_mem_mb(cfg, model, gpu), snapshot_mem_mb(cfg, model, gpu))


def budget_snapshot_runtime_min(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """Wall-time request of one same-network snapshot job of the budget protocol (docs/method.md
    §10b): the first grid lag's training at worst to N_max (N_max / B steps), with the first chunk's
    other members under a lag ensemble (:func:`lag_ensemble`; the CPU law, an upper bound), and two
    snapshots."""
    steps = cfg["recovery"]["budgets"][-1] // cfg["train"]["batch_size"]
    return _minutes(recovery_snapshot_cpu_seconds(cfg, model, steps, lag_ensemble(cfg) + 1, gpu))


def budget_snapshot_mem_mb(cfg: Mapping, model: str, gpu: bool = False) -> int:
    """The larger of a budget-protocol training's and a snapshot's memory."""
    return max(budget_mem_mb(cfg, model, gpu), snapshot_mem_mb(cfg, model, gpu))


def scored_gpu_mem_mb(cfg: Mapping, model: str, members: int = 1) -> int:
    """Device memory of a ground-truth or budget-protocol training: ``members`` networks' batch of
    activations and evaluation graphs (a lag ensemble's chunk and its control, :func:`lag_ensemble`;
    :func:`_member_bytes`), the held-out set and the score's cross products (:func:`_score_bytes`).
    A budget job's stream stays on the host, one batch at a time on the device
    (learnwin.recovery.budget_job.online); its graphs are those of one member count at a time
    (learnwin.models.fused.release where a member leaves)."""
    held_out = cfg["recovery"]["n_test"] * _sample_bytes(cfg["task"])
    return _mb(members * _member_bytes(cfg, model) + held_out + _score_bytes(cfg), base=GPU_CONTEXT_MB)


def snapshot_gpu_mem_mb(cfg: Mapping, model: str) -> int:
    """Device memory of a snapshot job: its arrays as :func:`snapshot_mem_mb` counts them, on the
    device, the memory curve's work arrays within :data:`DEVICE_MEMORY_CURVE_BYTES`, or the GPU cost
    table's measured peak of a snapshot batch scaled to the config's
    (:func:`learnwin.infra.gpu_cost.snapshot_peak_mb`), whichever is largest."""
    t = cfg["task"]
    batch, h = min(cfg["snapshot"]["batch_size"], t["n_diag"]), registry.units(cfg["model"], CELLS[model])
    peak = gpu_cost.snapshot_peak_mb(batch, t["T"], h)
    curve_batch = min(batch, cfg["snapshot"]["memory_sequences"])
    curve = min(memory_curve_bytes(curve_batch, t["T"], h, t["T"]),  # the memory curve at the device's budget
                max(DEVICE_MEMORY_CURVE_BYTES, memory_curve_bytes(curve_batch, t["T"], h, 1))) / 2**20
    return max(snapshot_mem_mb(cfg, model) - 1200, math.ceil(peak), math.ceil(curve)) + GPU_CONTEXT_MB


def train_together(cfg: Mapping) -> bool:
    """Whether one train_ensemble job per model trains its (optimizer, seed) runs together:
    :func:`ensemble_training` says so and, under ``ensemble: auto``, every model's ensemble fits
    :data:`GPU_MEMORY_MB` (:func:`ensemble_gpu_mem_mb`); else one train_model job per run."""
    if not ensemble_training(cfg, ensemble_runs(cfg)):
        return False
    return cfg.get("ensemble", "auto") != "auto" or all(
        ensemble_gpu_mem_mb(cfg, m) <= GPU_MEMORY_MB for m in cfg["models"])


def ensemble_training(cfg: Mapping, members: int) -> bool:
    """Whether networks of one shape, ``members`` of them, train together along a leading ensemble
    dimension (:mod:`learnwin.models.ensemble`, docs/method.md §3): the (optimizer, seed) runs of
    each model in one job (rule train_ensemble instead of one train_model job per run), and the
    lags of a budget-protocol job in chunks (:func:`learnwin.recovery.budget_job.budget_trainings`).

    Config key ``ensemble``: true, false, or auto (the default): on CUDA only, with more than one
    member. On the CPU the gated cells' member step (one thread) trains 1.2-2.1x the networks per
    second of separate trainings at 4 networks, 1.5-2.5x at 16 and 0.86-0.97x at 1
    (benchmarks/ensemble.py, docs/performance.md "Ensembles"): less than the 6 cores that a model's
    6 separate jobs of the default config spread over, and separate trainings keep the recorded
    bits, so auto keeps one network per job there. On a GPU one network's step is bound by issuing
    small kernels, so E networks at once should cost far less than E times one (to be measured:
    ``benchmarks/ensemble.py --device cuda``, part 3 of benchmarks/gpu_check.sh). ``device: auto`` is
    resolved on the host that builds the DAG (set ``ensemble: true`` where the jobs run on GPU nodes
    and that host has none); torch is imported only where an NVIDIA driver is loaded.
    """
    choice = cfg.get("ensemble", "auto")
    if choice != "auto":
        return bool(choice)
    if members < 2 or cfg["device"] == "cpu":
        return False
    if cfg["device"] == "cuda":
        return True
    if not Path("/proc/driver/nvidia/gpus").is_dir():
        return False
    import torch

    return torch.cuda.is_available()
