"""Fused training step of the five gated cells (docs/method.md §2): the BPTT of :mod:`learnwin.models.bptt`
with each time step's work in one function per direction, compiled, and on CUDA the sequence loop
launched once.

Three parts, each switchable (:class:`Mode`, :func:`use`), chosen per device by :data:`DEFAULT`:

* kernels (``*_forward_kernel``, ``*_backward_kernel``): one time step of a cell family, the
  hand-written step of :mod:`learnwin.models.recurrence` on fresh tensors (its factors computed
  per step). ``torch.compile`` (fullgraph, static shapes) fuses the elementwise work of a step,
  LayerNorm included, into a few kernels beside its matmuls. Each kernel is compiled once
  per shape, never the unrolled loop (a loop of T ~ 1500 steps takes hours to compile).
* loops (``*_forward``, ``*_backward``): the forward and backward loops over time, and the
  per-sequence sums after the backward one (recurrent matrices, LayerNorm affine).
* :class:`Graphed`: on CUDA, each loop captured as a CUDA graph once per input signature and
  replayed (inputs copied into the graph's static tensors, outputs copied out), so the T steps
  cost no Python and no launch overhead.

:class:`FusedGateScan`, :class:`FusedGRUScan` and :class:`FusedLSTMScan` take the arguments of
bptt's GateScan, GRUScan and LSTMScan; :func:`pick` returns the one to run for an input's device.
Same numbers as the fast path up to rounding (tests/test_fused.py: 1e-10 in float64, 1e-5 in
float32, forward and every gradient). On the CPU the fused step does not win
(docs/performance.md, "Training step speed"), so it runs there only when asked for (:func:`use`).

Members: the same Functions, loops and kernels train E networks of one shape at once
(:class:`learnwin.models.ensemble.Ensemble`) when given their inputs with a leading member
dimension (recurrence.py's convention: x (E, B, T, D) or shared (B, T, D), weights (E, rows, cols),
per-network vectors (E, 1, .)): each step's matmuls are batched over the members, and the outputs
are (E, B, T, H). They run in the mode of the device like one network's (on CUDA compiled and
graphed, a pair of graphs per shape); where the device has no fused mode (the CPU), :func:`pick`
gives bptt's Functions, which take the member dimension too.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

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


def pick(function: type, x: Tensor) -> type:
    """The Function to run for bptt's ``function`` on x's device: its fused twin, or itself."""
    fused = FUSED.get(function)
    return function if fused is None or mode_for(x.device) is None else fused


def evaluates(x: Tensor) -> bool:
    """Whether a forward without autograd on x runs the fused forward: on a device with a fused mode
    (CUDA), outside torch.func transforms. Evaluation there costs a fused forward, not the
    step-by-step scan; elsewhere (the CPU) it stays the scan, whose bits the recorded runs hold."""
    return (not torch.is_grad_enabled() and torch._C._functorch.peek_interpreter_stack() is None
            and mode_for(x.device) is not None)


# -- kernels: one time step on fresh tensors, the unit compiled ----------------------------------------

def gate_forward_kernel(w: rec.GateWeights, xp, h):
    """:func:`recurrence.gate_forward_step` on fresh tensors: h_t, the pre-activation, g, LN stats."""
    out = rec.GateStep.of(torch.empty_like(xp), torch.empty_like(h), torch.empty_like(h))
    mean, rstd = rec.gate_forward_step(w, xp, h, out)
    return out.h, out.pre, out.g, mean, rstd


def gate_backward_kernel(w: rec.GateWeights, dh, gh_prev, h_prev, pre, g, mean, rstd):
    """:func:`recurrence.gate_backward_step` on fresh tensors: d pre-activation, d LN output, d h_{t-1}."""
    step = rec.GateStep.of(pre, g, None)
    out = rec.GateGrads(torch.empty_like(g), None if step.gate is None else torch.empty_like(pre))
    da, dh = rec.gate_backward_step(w, rec.gate_factors(w.s, step.gate, h_prev, g), dh, gh_prev, step.a, mean, rstd,
                                    out)
    return da, out.dy, dh


def gru_forward_kernel(w: rec.GRUWeights, xp, h):
    """:func:`recurrence.gru_forward_step` on fresh tensors: h_t, gates, LN input, r h_{t-1}, g, LN stats."""
    H = h.shape[-1]
    out = rec.GRUStep.of(h.new_empty(*h.shape[:-1], 2 * H), *(torch.empty_like(h) for _ in range(4)))
    mean, rstd = rec.gru_forward_step(w, xp[..., :2 * H], xp[..., 2 * H:], h, out)
    return out.h, out.zr, out.ah, out.q, out.g, mean, rstd


def gru_backward_kernel(w: rec.GRUWeights, dh, gh_prev, h_prev, zr, ah, g, mean, rstd):
    """:func:`recurrence.gru_backward_step` on fresh tensors: d gate and candidate pre-activations,
    d LN output, d h_{t-1}."""
    out = rec.GRUGrads(torch.empty_like(g), torch.empty_like(zr))
    dah, dh = rec.gru_backward_step(w, rec.gru_factors(zr, h_prev, g), dh, gh_prev, ah, mean, rstd, out)
    return out.dzr, dah, out.dy, dh


def lstm_forward_kernel(w: rec.LSTMWeights, xp, h, c):
    """:func:`recurrence.lstm_forward_step` on fresh tensors: h_t, c_t, pre-activation, g, tanh c_t, LN stats."""
    out = rec.LSTMStep.of(torch.empty_like(xp), *(torch.empty_like(h) for _ in range(4)))
    mean, rstd = rec.lstm_forward_step(w, xp, h, c, out)
    return out.h, out.c, out.pre, out.g, out.tc, mean, rstd


def lstm_backward_kernel(w: rec.LSTMWeights, dh, dc, gh_prev, gc, c_prev, pre, g, tc, mean, rstd):
    """:func:`recurrence.lstm_backward_step` on fresh tensors: d pre-activation, d LN output,
    d c_{t-1}, d h_{t-1}."""
    step, out = rec.LSTMStep.of(pre, g, tc, None, None), rec.LSTMGrads(torch.empty_like(g), torch.empty_like(pre))
    dc, dh = rec.lstm_backward_step(w, rec.lstm_factors(pre, c_prev, g, tc), dh, dc, gh_prev, gc, step.ag, mean,
                                    rstd, out)
    return out.da, out.dy, dc, dh


# -- loops over time -------------------------------------------------------------------------------

def _stack(steps: list) -> Tensor | None:
    return None if steps[0] is None else torch.stack(steps)


def _scan(step, w, xproj: Tensor, H: int, states: int = 1) -> tuple:
    """The forward ``step`` over time from zero states, ``step(w, xp_t, *states) -> (*states, *kept)``:
    each state stacked (T + 1, B, H), the zero initial state first, then each kept output
    stacked (None stays None)."""
    carry = tuple(xproj.new_zeros(*xproj.shape[1:-1], H) for _ in range(states))  # distinct: an alias recompiles
    path, kept = [carry], []
    for xp in xproj.unbind(0):
        out = step(w, xp, *carry)
        carry = out[:states]
        path.append(carry), kept.append(out[states:])
    return (*(torch.stack(v) for v in zip(*path)), *(_stack(list(v)) for v in zip(*kept)))


def gate_forward(step, xproj, u, s, ln_w, ln_b, eps):
    w = rec.GateWeights(u, s, rec.norm(ln_w, ln_b, eps), u.mT.contiguous())
    return _scan(step, w, xproj, u.shape[-1])


def gate_backward(step, grad_h, u, s, ln_w, ln_b, eps, hs, pre, g, mean, rstd):
    w, T = rec.GateWeights(u, s, rec.norm(ln_w, ln_b, eps)), pre.shape[0]
    dh, das, dys = grad_h[-1], [None] * T, [None] * T
    for t in range(T - 1, -1, -1):
        das[t], dys[t], dh = step(w, dh, grad_h[max(t - 1, 0)], hs[t], pre[t], g[t], _at(mean, t), _at(rstd, t))
    da, dy = torch.stack(das), torch.stack(dys)
    gw, gb = rec.ln_param_grads(dy, pre[..., :u.shape[-1]], *_steps(mean, rstd), w.norm)
    return da, rec.outer(da, hs[:-1]), None, gw, gb  # None: s, a fixed leak or not an input


def gru_forward(step, xproj, u_zr, u_h, ln_w, ln_b, eps):
    w = rec.GRUWeights(u_zr, u_h, rec.norm(ln_w, ln_b, eps), u_zr.mT.contiguous(), u_h.mT.contiguous())
    return _scan(step, w, xproj, u_h.shape[-1])


def gru_backward(step, grad_h, u_zr, u_h, ln_w, ln_b, eps, hs, zr, ah, q, g, mean, rstd):
    w, T = rec.GRUWeights(u_zr, u_h, rec.norm(ln_w, ln_b, eps)), zr.shape[0]
    dh, dzrs, dahs, dys = grad_h[-1], [None] * T, [None] * T, [None] * T
    for t in range(T - 1, -1, -1):
        dzrs[t], dahs[t], dys[t], dh = step(w, dh, grad_h[max(t - 1, 0)], hs[t], zr[t], ah[t], g[t], _at(mean, t),
                                            _at(rstd, t))
    dzr, dah, dy = torch.stack(dzrs), torch.stack(dahs), torch.stack(dys)
    return (torch.cat([dzr, dah], -1), rec.outer(dzr, hs[:-1]), rec.outer(dah, q),
            *rec.ln_param_grads(dy, ah, *_steps(mean, rstd), w.norm))


def lstm_forward(step, xproj, u, ln_w, ln_b, eps):
    w = rec.LSTMWeights(u, rec.norm(ln_w, ln_b, eps), u.mT.contiguous())
    return _scan(step, w, xproj, u.shape[-1], states=2)


def lstm_backward(step, grad_h, grad_c, u, ln_w, ln_b, eps, hs, cs, pre, g, tc, mean, rstd):
    w, T = rec.LSTMWeights(u, rec.norm(ln_w, ln_b, eps)), pre.shape[0]
    dh, dc, das, dys = grad_h[-1], torch.zeros_like(grad_c[0]), [None] * T, [None] * T
    for t in range(T - 1, -1, -1):
        das[t], dys[t], dc, dh = step(w, dh, dc, grad_h[max(t - 1, 0)], grad_c[t], cs[t], pre[t], g[t], tc[t],
                                      _at(mean, t), _at(rstd, t))
    da, dy = torch.stack(das), torch.stack(dys)
    return (da, rec.outer(da, hs[:-1]),
            *rec.ln_param_grads(dy, pre[..., 3 * u.shape[-1]:], *_steps(mean, rstd), w.norm))


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
    fault of the kernel itself raises from its eager rerun, as without compiling."""

    def __init__(self, step):
        self.step, self.fn = step, torch.compile(step, fullgraph=True, dynamic=False, backend=BACKEND)

    def __call__(self, *args):
        if _failed:
            return self.step(*args)
        try:
            return self.fn(*args)
        except Exception as error:  # whatever the compiler raised: the eager rerun judges
            out = self.step(*args)
            _failed.append(cause(error))
            log.warning("fused: torch.compile of %s failed (%s); the eager kernels run instead",
                        self.step.__name__, _failed[0])
            return out


def fallback() -> str | None:
    """The cause of this process's failed compilation (the kernels run eager since), None while none failed."""
    return _failed[0] if _failed else None


def cause(error: BaseException) -> str:
    """The innermost exception that ``error`` wraps (dynamo's and inductor's ``inner_exception``, a
    ``__cause__``), as its type and first line."""
    while (inner := getattr(error, "inner_exception", None) or error.__cause__) is not None:
        error = inner
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


class CudaGraph:
    """Capture and replay on CUDA (torch.cuda.CUDAGraph), after warm-up runs on a side stream
    (compilation, autotuning and the allocator's first requests must not happen during capture)."""

    WARMUP = 2

    @staticmethod
    def capture(fn, args):
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
        with torch.cuda.graph(graph):
            outs = fn(*args)
        return outs, graph.replay


class Graphed:
    """``fn(*args)`` replayed from a graph captured once per signature of ``args`` (shapes, strides,
    dtypes and devices of the tensors, the other arguments' values). The capture's tensors are
    static: each call copies its tensors into them, replays, and returns copies of the outputs
    (a later call overwrites them). ``backend.capture(fn, static_args) -> (outputs, replay)``."""

    def __init__(self, fn, backend=CudaGraph):
        self.fn, self.backend, self.graphs = fn, backend, {}

    def __call__(self, *args):
        key = tuple((a.shape, a.stride(), a.dtype, a.device) if isinstance(a, Tensor) else a for a in args)
        if key not in self.graphs:
            static = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
            self.graphs[key] = (static, *self.backend.capture(self.fn, static))
        static, outs, replay = self.graphs[key]
        for s, a in zip(static, args):
            if isinstance(a, Tensor):
                s.copy_(a)
        replay()
        return tuple(None if o is None else o.clone() for o in outs)


GRAPH_BACKEND = CudaGraph
"""What captures and replays the loops' graphs (:class:`Graphed`)."""

_graphed: dict = {}


def run(loop, mode: Mode | None, *args):
    """``loop(step, *args)`` with its kernel (:data:`STEPS`) in ``mode`` (None: eager, no graph)."""
    mode = mode or Mode(compile=False, graph=False)
    step = compiled(STEPS[loop]) if mode.compile else STEPS[loop]
    if not mode.graph:
        return loop(step, *args)
    if loop not in _graphed:
        _graphed[loop] = Graphed(loop, GRAPH_BACKEND)
    return _graphed[loop](step, *args)


# -- the Functions: bptt's interface -----------------------------------------------------------------

def _forward(ctx, loop, x, w_in, b_in, params: tuple, eps, states: int = 1) -> tuple:
    """A fused Function's forward: the input projection (recurrence.project), ``loop`` over time on
    the other inputs ``params`` and ``eps``, in the mode of x's device (kept for the backward);
    returns the ``states`` first outputs of the loop, (B, T, H)."""
    ctx.set_materialize_grads(False)
    ctx.mode = mode_for(x.device)
    with torch.inference_mode():
        ctx.x, xproj = rec.project(x, w_in, b_in)
        out = run(loop, ctx.mode, xproj, *params, eps)
    ctx.states, ctx.buffers, ctx.eps = out[:states], out[states:], eps
    ctx.save_for_backward(w_in, *params)
    return _visible(*(v[1:] for v in ctx.states))


def _backward(ctx, loop, *grads: Tensor | None) -> tuple:
    """A fused Function's backward: ``loop`` on the outputs' time-major gradients ``grads``, the
    saved inputs, eps, states and buffers; the input projection's gradients (recurrence.project_grads)."""
    like = ctx.states[0][1:]
    w_in, *params = ctx.saved_tensors
    with torch.inference_mode():
        da, *out = run(loop, ctx.mode, *(_time_major(g, like) for g in grads), *params, ctx.eps, *ctx.states,
                       *ctx.buffers)
    return (*rec.project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *rec.normal(*out), None)


def _backward_of(loop):
    """A fused Function's backward through ``loop``."""
    return staticmethod(once_differentiable(lambda ctx, *grads: _backward(ctx, loop, *grads)))


class FusedGateScan(torch.autograd.Function):
    """bptt.GateScan through :func:`gate_forward` and :func:`gate_backward`."""

    backward = _backward_of(gate_backward)

    @staticmethod
    def forward(ctx, x, w_in, b_in, u, s, ln_w, ln_b, eps):
        return _forward(ctx, gate_forward, x, w_in, b_in, (u, s, ln_w, ln_b), eps)[0]


class FusedGRUScan(torch.autograd.Function):
    """bptt.GRUScan through :func:`gru_forward` and :func:`gru_backward`."""

    backward = _backward_of(gru_backward)

    @staticmethod
    def forward(ctx, x, w_in, b_in, u_zr, u_h, ln_w, ln_b, eps):
        return _forward(ctx, gru_forward, x, w_in, b_in, (u_zr, u_h, ln_w, ln_b), eps)[0]


class FusedLSTMScan(torch.autograd.Function):
    """bptt.LSTMScan through :func:`lstm_forward` and :func:`lstm_backward`; outputs h and c."""

    backward = _backward_of(lstm_backward)

    @staticmethod
    def forward(ctx, x, w_in, b_in, u, ln_w, ln_b, eps):
        return _forward(ctx, lstm_forward, x, w_in, b_in, (u, ln_w, ln_b), eps, states=2)


def _visible(*states: Tensor) -> tuple:
    """Time-major inference-mode states as the Function's outputs, (B, T, H) (members: (E, B, T, H)),
    ordinary tensors."""
    return tuple(v.movedim(0, -2) for v in rec.normal(*states))


def _time_major(grad: Tensor | None, like: Tensor) -> Tensor:
    """An output's gradient (B, T, H) (members: (E, B, T, H)) as a contiguous time-major tensor;
    zeros (like ``like``) for None."""
    return torch.zeros_like(like) if grad is None else grad.movedim(-2, 0).contiguous()


STEPS = {gate_forward: gate_forward_kernel, gate_backward: gate_backward_kernel, gru_forward: gru_forward_kernel,
         gru_backward: gru_backward_kernel, lstm_forward: lstm_forward_kernel, lstm_backward: lstm_backward_kernel}
"""Each loop's kernel."""

FUSED = {bptt.GateScan: FusedGateScan, bptt.GRUScan: FusedGRUScan, bptt.LSTMScan: FusedLSTMScan}
"""bptt's Functions and their fused twins (:func:`pick`)."""
