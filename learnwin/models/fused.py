"""Fused training step of the five gated cells (docs/method.md §2): the BPTT of :mod:`learnwin.models.bptt`
with each time step's work in one function per direction, compiled, and on CUDA the sequence loop
launched once.

Three parts, each switchable (:class:`Mode`, :func:`use`), chosen per device by :data:`DEFAULT`:

* kernels (:func:`forward_kernel`, :func:`backward_kernel`): one time step of any cell family
  (:class:`learnwin.models.recurrence.Family`), its hand-written step on fresh tensors (its factors
  computed per step). ``torch.compile`` (fullgraph, static shapes) fuses the elementwise work of a
  step, LayerNorm included, into a few kernels beside its matmuls. Each kernel is compiled once
  per family and shape, never the unrolled loop (a loop of T ~ 1500 steps takes hours to compile).
* loops (:func:`forward_loop`, :func:`backward_loop`): the forward and backward loops over time,
  and the per-sequence sums after the backward one (recurrent matrices, LayerNorm affine); the
  forward's record (:class:`learnwin.models.recurrence.Kept`) is the backward's input.
* :class:`Graphed`: on CUDA, each loop captured as a CUDA graph once per input signature and
  replayed (inputs copied into the graph's static tensors, outputs copied out), so the T steps
  cost no Python and no launch overhead. Every capture of the process shares one memory pool
  (:func:`pool`), and :func:`release` drops every graph with it where a job's shapes change (an
  ensemble that loses a member, a benchmark's next cell).

:class:`Scan` takes the arguments of bptt's Scan; :func:`pick` returns the Function to run for an
input's device. Same numbers as the fast path up to rounding (tests/test_fused.py: 1e-10 in float64, 1e-5 in
float32, forward and every gradient). On the CPU the fused step does not win
(docs/performance.md, "Training step speed"), so it runs there only when asked for (:func:`use`).

Members: the same Function, loops and kernels train E networks of one shape at once
(:class:`learnwin.models.ensemble.Ensemble`) when given their inputs with a leading member
dimension (recurrence.py's convention: x (E, B, T, D) or shared (B, T, D), weights (E, rows, cols),
per-network vectors (E, 1, .)): each step's matmuls are batched over the members, and the outputs
are (E, B, T, H). They run in the mode of the device like one network's (on CUDA compiled and
graphed, a pair of graphs per shape); where the device has no fused mode (the CPU), :func:`pick`
gives bptt's Scan, which takes the member dimension too.
"""

from __future__ import annotations

import contextlib
import logging
import os
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils._pytree import tree_flatten, tree_unflatten

from learnwin.models import bptt
from learnwin.models import recurrence as rec

log = logging.getLogger(__name__)


class Mode(NamedTuple):
    """How the fused path runs: kernels compiled or eager; loops replayed from CUDA graphs."""

    compile: bool = True
    graph: bool = True


DEFAULT = {"cuda": Mode(compile=True, graph=True)}
"""The mode per device type where the fused path is the default; elsewhere bptt's path runs."""

_forced: list = []  # the stack of :func:`use`

ENV = "LEARNWIN_FUSED"
"""Environment switch of a whole run (a Snakemake job inherits it): ``auto`` (unset), :data:`DEFAULT`;
``eager``, :data:`DEFAULT` with eager kernels (no compilation: loops graphed where the default graphs
them); ``off``, bptt's path on every device (until the GPU check has measured the fused step on a device)."""


@contextlib.contextmanager
def use(mode: Mode | None):
    """Within the block, run the fused path in ``mode`` on every device (None: bptt's path)."""
    _forced.append(mode)
    try:
        yield
    finally:
        _forced.pop()


def mode_for(device: torch.device) -> Mode | None:
    """The fused mode for ``device`` (None: bptt's path), from :func:`use`, else :data:`ENV` and
    :data:`DEFAULT`."""
    if _forced:
        return _forced[-1]
    switch = os.environ.get(ENV, "auto")
    if switch not in ("auto", "eager", "off"):
        raise ValueError(f"{ENV}={switch!r}: expected 'auto', 'eager' or 'off'")
    mode = None if switch == "off" else DEFAULT.get(device.type)
    return mode._replace(compile=False) if mode is not None and switch == "eager" else mode


def pick(x: Tensor) -> type:
    """The Function to run on x's device: :class:`Scan` where the device has a fused mode, else bptt's."""
    return bptt.Scan if mode_for(x.device) is None else Scan


def evaluates(x: Tensor) -> bool:
    """Whether a forward without autograd on x runs the fused forward: on a device with a fused mode
    (CUDA), outside torch.func transforms. Evaluation there costs a fused forward, not the
    step-by-step scan; elsewhere (the CPU) it stays the scan, whose bits the recorded runs hold."""
    return (not torch.is_grad_enabled() and torch._C._functorch.peek_interpreter_stack() is None
            and mode_for(x.device) is not None)


# -- kernels: one time step on fresh tensors, the unit compiled ----------------------------------------

def forward_kernel(family, w, xp: Tensor, prev: tuple) -> tuple:
    """The family's forward step on fresh tensors: the new states, the ``Saved`` record, the LN stats."""
    widths = family.widths(xp.shape[-1], prev[0].shape[-1])
    saved = type(widths)(*(xp.new_empty(*xp.shape[:-1], n) for n in widths))
    new = tuple(torch.empty_like(h) for h in prev)
    mean, rstd = family.forward_step(w, family.split(xp), prev, family.step(saved, new))
    return new, saved, mean, rstd


def backward_kernel(family, w, carry: tuple, prev_grads: tuple, saved, prev: tuple, mean, rstd, G: int) -> tuple:
    """The family's factors and backward step on fresh tensors (``G``: the pre-activation's width): the
    carried gradients of step t - 1, the ``Grads`` record, the kept tensor."""
    a = family.ln_input(saved)
    out = family.grads(torch.empty_like(a), a.new_empty(*a.shape[:-1], G))
    carry, kept = family.backward_step(w, family.factors(w, saved, prev, ...), carry, prev_grads, a, mean, rstd, out)
    return carry, out, kept


# -- loops over time -------------------------------------------------------------------------------

def _stack(steps: list) -> Tensor | None:
    return None if steps[0] is None else torch.stack(steps)


def _stack_records(rows: list) -> NamedTuple:
    """One record of time-major tensors from per-step records (a None field stays None)."""
    return type(rows[0])(*(_stack(list(v)) for v in zip(*rows)))


def forward_loop(step, family, xproj: Tensor, mats: tuple, ln: tuple) -> rec.Kept:
    """The forward ``step`` (:func:`forward_kernel`) over time from zero states, on the input
    projection ``xproj`` (T, B, G), the recurrent matrices and ``ln`` (LayerNorm weight, bias, eps).
    Each step's outputs are copied into time-major buffers made at the first step, so they are kept
    once (in a graph, each step's own tensors are freed for the next step's)."""
    w, T = family.weights(mats, rec.norm(*ln), True), xproj.shape[0]
    carry = tuple(xproj.new_zeros(*xproj.shape[1:-1], mats[0].shape[-1]) for _ in range(family.states))  # distinct: an alias recompiles
    kept = None
    for t, xp in enumerate(xproj.unbind(0)):
        carry, saved, mean, rstd = step(family, w, xp, carry)
        if kept is None:
            kept = rec.Kept(tuple(_buffer(h, T + 1) for h in carry), type(saved)(*(_buffer(v, T) for v in saved)),
                            _buffer(mean, T), _buffer(rstd, T))
            for buf in kept.states:
                buf[0].zero_()
        for buf, v in zip(kept.states, carry):
            buf[t + 1].copy_(v)
        for buf, v in zip((*kept.saved, kept.means, kept.rstds), (*saved, mean, rstd)):
            if buf is not None:
                buf[t].copy_(v)
    return kept


def _buffer(v: Tensor | None, T: int) -> Tensor | None:
    """A time-major buffer (T, *v.shape) for a step's output ``v`` (None for None)."""
    return None if v is None else v.new_empty(T, *v.shape)


def backward_loop(step, family, grads: tuple, mats: tuple, ln: tuple, kept: rec.Kept, G: int) -> tuple:
    """The backward ``step`` (:func:`backward_kernel`) over time on the outputs' time-major
    gradients ``grads`` and what the forward kept; returns the pre-activation gradient (T, B, G), the
    recurrent matrices' and the LayerNorm affine's gradients."""
    w = family.weights(mats, rec.norm(*ln))
    states, saved, mean, rstd = kept
    T = states[0].shape[0] - 1
    carry, rows, out = tuple(g[-1] for g in grads), [None] * T, [None] * T
    for t in range(T - 1, -1, -1):
        at = type(saved)(*(v[t] for v in saved))
        carry, rows[t], out[t] = step(family, w, carry, tuple(g[max(t - 1, 0)] for g in grads), at,
                                      tuple(v[t] for v in states), _at(mean, t), _at(rstd, t), G)
    grads = _stack_records(rows)
    da, mat_grads = family.finish(grads, out, saved, tuple(v[:-1] for v in states))
    return (da, *mat_grads, *rec.ln_param_grads(grads.dy, family.ln_input(saved), *_steps(mean, rstd), w.norm))


def _at(v: Tensor | None, t: int) -> Tensor | None:
    return None if v is None else v[t]


def _steps(*vs: Tensor | None) -> tuple:
    """Stacked per-step tensors as sequences over steps (what recurrence.ln_param_grads stacks)."""
    return tuple(None if v is None else v.unbind(0) for v in vs)


# -- compiled steps and graphed loops --------------------------------------------------------------

RECOMPILE_LIMIT = 64
"""Compilations per kernel (one per shape, dtype and gate variant; dynamo's default is 8)."""

BACKEND = "inductor"
"""torch.compile's backend for the kernels."""

_compiled: dict = {}

_failed: list = []  # the cause of this process's first failed compilation: from then on every kernel runs eager


def compiled(step):
    """``step`` under torch.compile (fullgraph, static shapes, inductor's deterministic mode where
    torch's is on), one :class:`Compiled` wrapper per kernel."""
    if step not in _compiled:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        if torch.are_deterministic_algorithms_enabled():  # no on-device benchmarking that picks the numerics
            from torch._inductor import config as inductor

            inductor.deterministic = True
        _compiled[step] = Compiled(step)
    return _compiled[step]


class Compiled:
    """A kernel compiled on its first call per shape, falling back to the eager kernel for the rest
    of the process where that fails (inductor's CUDA kernels need a C compiler and Python headers to
    build their launchers; a compile error can surface at compile time or at the first call): the
    call reruns eagerly, one warning names the cause, and every kernel runs eager from then on. A
    fault of the kernel itself raises from its eager rerun, as without compiling; running out of
    device memory raises as itself (``torch.OutOfMemoryError``), never taken for a failed compilation."""

    def __init__(self, step):
        self.step, self.fn = step, torch.compile(step, fullgraph=True, dynamic=False, backend=BACKEND)

    def __call__(self, *args):
        if _failed:
            return self.step(*args)
        try:
            return self.fn(*args)
        except Exception as error:  # whatever the compiler raised: the eager rerun judges
            if isinstance(innermost(error), torch.OutOfMemoryError):  # the device's memory, not the compiler
                raise innermost(error) from error
            out = self.step(*args)
            _failed.append(cause(error))
            log.warning("fused: torch.compile of %s failed (%s); the eager kernels run instead",
                        self.step.__name__, _failed[0])
            return out


def fallback() -> str | None:
    """The cause of this process's failed compilation (the kernels run eager since), None while none failed."""
    return _failed[0] if _failed else None


def innermost(error: BaseException) -> BaseException:
    """The innermost exception that ``error`` wraps (dynamo's and inductor's ``inner_exception``, a
    ``__cause__``)."""
    while (inner := getattr(error, "inner_exception", None) or error.__cause__) is not None:
        error = inner
    return error


def cause(error: BaseException) -> str:
    """:func:`innermost` of ``error``, as its type and first line."""
    error = innermost(error)
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


class CudaGraph:
    """Capture and replay on CUDA (torch.cuda.CUDAGraph), after warm-up runs on a side stream
    (compilation, autotuning and the allocator's first requests must not happen during capture),
    into the memory pool that ``pool()`` gives (:func:`pool`)."""

    WARMUP = 2

    @staticmethod
    def pool():
        """A new memory pool for captures."""
        return torch.cuda.graph_pool_handle()

    @staticmethod
    def capture(fn, args, pool):
        where = {a.device.type for a in args if isinstance(a, Tensor)}
        if where != {"cuda"}:
            raise ValueError(f"fused Mode(graph=True) needs CUDA tensors, got {sorted(where)}: use graph=False")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(CudaGraph.WARMUP):
                fn(*args)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool()):
            outs = fn(*args)
        return outs, graph.replay


class Graphed:
    """``fn(*args)`` replayed from a graph captured once per signature of ``args`` (their structure:
    nested tuples and records; the shapes, strides, dtypes and devices of the tensors, the other
    leaves' values). The capture's tensors are static: each call copies its tensors into them,
    replays, and returns copies of the outputs, in the outputs' structure (a later call overwrites
    them). ``backend.capture(fn, static_leaves, pool) -> (output leaves, replay)``, into the
    process's pool, ``pool()`` (:func:`pool`).

    Sharing one pool is safe here: replays run one at a time on one stream, and a graph's outputs
    are copied out right after its replay, so another graph's replay may reuse their memory (as
    its scratch) without harm; the static inputs are made outside any capture."""

    def __init__(self, fn, backend=CudaGraph):
        self.fn, self.backend, self.graphs = fn, backend, {}

    def __call__(self, *args):
        leaves, spec = tree_flatten(args)
        key = (spec, *((a.shape, a.stride(), a.dtype, a.device) if isinstance(a, Tensor) else a for a in leaves))
        if key not in self.graphs:
            static = [a.clone() if isinstance(a, Tensor) else a for a in leaves]
            fn, out_spec = self.fn, []  # not self: a graph's replay must not keep this object (a cycle)

            def flat(*leaves):
                outs, spec_out = tree_flatten(fn(*tree_unflatten(list(leaves), spec)))
                out_spec[:] = [spec_out]
                return outs

            self.graphs[key] = (static, *self.backend.capture(flat, static, partial(pool, self.backend)), out_spec)
        static, outs, replay, out_spec = self.graphs[key]
        for s, a in zip(static, leaves):
            if isinstance(a, Tensor):
                s.copy_(a)
        replay()
        return tree_unflatten([None if o is None else o.clone() for o in outs], out_spec[0])


GRAPH_BACKEND = CudaGraph
"""What captures and replays the loops' graphs (:class:`Graphed`)."""

_graphed: dict = {}

_pools: dict = {}  # each graph backend's pool, shared by its captures until release()


def pool(backend) -> object:
    """The memory pool that every capture of ``backend`` (:data:`GRAPH_BACKEND`) shares in this
    process, made at the first capture after :func:`release`. One pool: the memory a graph frees
    at the end of its capture (its scratch) serves the next capture, where a pool per capture
    would keep each graph's scratch for the graph's life."""
    if backend not in _pools:
        _pools[backend] = backend.pool()
    return _pools[backend]


def release() -> None:
    """Drop every captured graph, with its static tensors, outputs and pool (their memory goes back
    to torch's allocator, which frees a pool once no graph uses it; the next capture opens a new
    one rather than capture into a freed pool): where a job's shapes change (an ensemble that loses
    a member: its smaller ensemble captures anew), or between a benchmark's cells."""
    _graphed.clear()
    _pools.clear()


def run(loop, mode: Mode | None, *args):
    """``loop(step, *args)`` with its kernel (:data:`STEPS`) in ``mode`` (None: eager, no graph)."""
    mode = mode or Mode(compile=False, graph=False)
    step = compiled(STEPS[loop]) if mode.compile else STEPS[loop]
    if not mode.graph:
        return loop(step, *args)
    if loop not in _graphed:
        _graphed[loop] = Graphed(loop, GRAPH_BACKEND)
    return _graphed[loop](step, *args)


# -- the Function: bptt's interface -------------------------------------------------------------------

class Scan(torch.autograd.Function):
    """bptt.Scan through :func:`forward_loop` and :func:`backward_loop`, in the mode of x's device
    (kept for the backward): the same inputs and outputs."""

    @staticmethod
    def forward(ctx, family, x, w_in, b_in, *params):
        ctx.set_materialize_grads(False)
        *mats, ln_w, ln_b, eps = params
        ctx.mode = mode_for(x.device)
        with torch.inference_mode():
            ctx.x, xproj = rec.project(x, w_in, b_in)
            ctx.kept = run(forward_loop, ctx.mode, family, xproj, tuple(mats), (ln_w, ln_b, eps))
        ctx.family, ctx.eps = family, eps
        ctx.save_for_backward(w_in, *mats, ln_w, ln_b)
        out = _visible(*(v[1:] for v in ctx.kept.states))
        return out[0] if len(out) == 1 else out

    @staticmethod
    @once_differentiable
    def backward(ctx, *grad_states):
        like = ctx.kept.states[0][1:]
        w_in, *mats, ln_w, ln_b = ctx.saved_tensors
        with torch.inference_mode():
            da, *out = run(backward_loop, ctx.mode, ctx.family, tuple(_time_major(g, like) for g in grad_states),
                           tuple(mats), (ln_w, ln_b, ctx.eps), ctx.kept, w_in.shape[-2])
        return (None, *rec.project_grads(ctx.needs_input_grad[1:], da, ctx.x, w_in), *rec.normal(*out), None)


def _visible(*states: Tensor) -> tuple:
    """Time-major inference-mode states as the Function's outputs, (B, T, H) (members: (E, B, T, H)),
    ordinary tensors."""
    return tuple(v.movedim(0, -2) for v in rec.normal(*states))


def _time_major(grad: Tensor | None, like: Tensor) -> Tensor:
    """An output's gradient (B, T, H) (members: (E, B, T, H)) as a contiguous time-major tensor;
    zeros (like ``like``) for None."""
    return torch.zeros_like(like) if grad is None else grad.movedim(-2, 0).contiguous()


STEPS = {forward_loop: forward_kernel, backward_loop: backward_kernel}
"""Each loop's kernel."""
