"""Fused training step of the five gated cells (docs/method.md §2): the BPTT of :mod:`learnwin.models.bptt`
with each time step's work in one function per direction, compiled, and on CUDA the sequence loop
launched once.

Three parts, each switchable (:class:`Mode`, :func:`use`), chosen per device by :data:`DEFAULT`:

* step functions (``*_forward_step``, ``*_backward_step``): one time step of a cell family as pure
  tensor code. ``torch.compile`` (fullgraph, static shapes) fuses the elementwise work of a step,
  LayerNorm included, into a few kernels beside its matmuls. Each step function is compiled once
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
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from learnwin.models import bptt


class Mode(NamedTuple):
    """How the fused path runs: step functions compiled or eager; loops replayed from CUDA graphs."""

    compile: bool = True
    graph: bool = True


DEFAULT = {"cuda": Mode(compile=True, graph=True)}
"""The mode per device type where the fused path is the default; elsewhere bptt's path runs."""

_forced: list = []  # the stack of :func:`use`

ENV = "LEARNWIN_FUSED"
"""Environment switch of a whole run (a Snakemake job inherits it): ``auto`` (unset), :data:`DEFAULT`;
``off``, bptt's path on every device (until the GPU check has measured the fused step on a device)."""


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
    if switch not in ("auto", "off"):
        raise ValueError(f"{ENV}={switch!r}: expected 'auto' or 'off'")
    return None if switch == "off" else DEFAULT.get(device.type)


def pick(function: type, x: Tensor) -> type:
    """The Function to run for bptt's ``function`` on x's device: its fused twin, or itself."""
    fused = FUSED.get(function)
    return function if fused is None or mode_for(x.device) is None else fused


# -- step functions: one time step, pure tensor code ------------------------------------------------

def gate_forward_step(xp, h, uT, s, ln_w, ln_b, eps):
    """ConstGate/SharedGate/DiagGate step (bptt.GateScan): h_t, LN input, gate (None: fixed s), g, LN stats."""
    H = h.shape[-1]
    pre = torch.addmm(xp, h, uT)
    a = pre[:, :H]
    gate = torch.sigmoid(pre[:, H:]) if pre.shape[-1] > H else None
    n, mean, rstd = bptt._ln_forward(a, bptt._ln_args(ln_w, ln_b, eps))
    g = torch.tanh(n)
    return torch.lerp(h, g, s if gate is None else gate), a, gate, g, mean, rstd


def gate_backward_step(dh, gh_prev, h_prev, a, gate, g, mean, rstd, u, s, ln_w, ln_b, eps):
    """d pre-activation, d LN output and d h_{t-1} of a GateScan step from d h_t (``dh``)."""
    ln = bptt._ln_args(ln_w, ln_b, eps)
    sg = s if gate is None else gate
    dy = dh * (sg * (1 - g * g))
    da = bptt._ln_input_grad(dy, a, mean, rstd, ln) if ln else dy
    if gate is not None:  # the shared gate's gradient sums over units
        ds = dh * ((g - h_prev) * sg * (1 - sg))
        da = torch.cat([da, ds.sum(-1, keepdim=True) if gate.shape[-1] == 1 else ds], -1)
    return da, dy, torch.addmm(torch.addcmul(gh_prev, dh, 1 - sg), da, u)


def gru_forward_step(xp, h, uzrT, uhT, ln_w, ln_b, eps):
    """GRU step (bptt.GRUScan): h_t, gates (z, r), LN input, r h_{t-1}, g, LN stats."""
    H = h.shape[-1]
    zr = torch.sigmoid(torch.addmm(xp[:, :2 * H], h, uzrT))
    q = zr[:, H:] * h
    ah = torch.addmm(xp[:, 2 * H:], q, uhT)
    n, mean, rstd = bptt._ln_forward(ah, bptt._ln_args(ln_w, ln_b, eps))
    g = torch.tanh(n)
    return torch.lerp(h, g, zr[:, :H]), zr, ah, q, g, mean, rstd


def gru_backward_step(dh, gh_prev, h_prev, zr, ah, g, mean, rstd, u_zr, u_h, ln_w, ln_b, eps):
    """d (z, r) pre-activation, d candidate pre-activation, d LN output and d h_{t-1} of a GRU step."""
    H = dh.shape[-1]
    ln = bptt._ln_args(ln_w, ln_b, eps)
    z, r = zr[:, :H], zr[:, H:]
    dy = dh * (z * (1 - g * g))
    dah = bptt._ln_input_grad(dy, ah, mean, rstd, ln) if ln else dy
    dq = dah @ u_h
    dzr = torch.cat([dh, dq], -1) * (torch.cat([g - h_prev, h_prev], -1) * zr * (1 - zr))
    return dzr, dah, dy, torch.addmm(torch.addcmul(gh_prev, dh, 1 - z).addcmul_(dq, r), dzr, u_zr)


def lstm_forward_step(xp, h, c, uT, ln_w, ln_b, eps):
    """LSTM step (bptt.LSTMScan): h_t, c_t, gates (i, f, o), LN input, g, tanh c_t, LN stats."""
    H = h.shape[-1]
    pre = torch.addmm(xp, h, uT)
    ifo, ag = torch.sigmoid(pre[:, :3 * H]), pre[:, 3 * H:]
    n, mean, rstd = bptt._ln_forward(ag, bptt._ln_args(ln_w, ln_b, eps))
    g = torch.tanh(n)
    c = torch.addcmul(ifo[:, H:2 * H] * c, ifo[:, :H], g)
    tc = torch.tanh(c)
    return ifo[:, 2 * H:] * tc, c, ifo, ag, g, tc, mean, rstd


def lstm_backward_step(dh, dc, gh_prev, gc, c_prev, ifo, ag, g, tc, mean, rstd, u, ln_w, ln_b, eps):
    """d pre-activation, d LN output, d c_{t-1} and d h_{t-1} of an LSTM step from d h_t and the
    carried d c_t (``gc``: the loss's own gradient of c_t)."""
    H = dh.shape[-1]
    ln = bptt._ln_args(ln_w, ln_b, eps)
    i, f, o = ifo[:, :H], ifo[:, H:2 * H], ifo[:, 2 * H:]
    dc = torch.addcmul(dc + gc, dh, o * (1 - tc * tc))
    dy = dc * (i * (1 - g * g))
    dx = bptt._ln_input_grad(dy, ag, mean, rstd, ln) if ln else dy
    da = torch.cat([dc * (g * i * (1 - i)), dc * (c_prev * f * (1 - f)), dh * (tc * o * (1 - o)), dx], -1)
    return da, dy, dc * f, torch.addmm(gh_prev, da, u)


# -- loops over time -------------------------------------------------------------------------------

def _stack(steps: list) -> Tensor | None:
    return None if steps[0] is None else torch.stack(steps)


def _scan(step, xproj: Tensor, H: int, fixed: tuple, states: int = 1) -> tuple:
    """The forward ``step`` over time from zero states, ``step(xp_t, *states, *fixed) -> (*states,
    *kept)``: each state stacked (T + 1, B, H), the zero initial state first, then each kept output
    stacked (None stays None)."""
    carry = (xproj.new_zeros(xproj.shape[1], H),) * states
    path, kept = [carry], []
    for xp in xproj.unbind(0):
        out = step(xp, *carry, *fixed)
        carry = out[:states]
        path.append(carry), kept.append(out[states:])
    return (*(torch.stack(v) for v in zip(*path)), *(_stack(list(v)) for v in zip(*kept)))


def gate_forward(step, xproj, uT, s, ln_w, ln_b, eps):
    return _scan(step, xproj, uT.shape[0], (uT, s, ln_w, ln_b, eps))


def gate_backward(step, grad_h, u, s, ln_w, ln_b, eps, hs, a, gate, g, mean, rstd):
    T = a.shape[0]
    dh, das, dys = grad_h[-1], [None] * T, [None] * T
    for t in range(T - 1, -1, -1):
        das[t], dys[t], dh = step(dh, grad_h[max(t - 1, 0)], hs[t], a[t], None if gate is None else gate[t],
                                  g[t], _at(mean, t), _at(rstd, t), u, s, ln_w, ln_b, eps)
    da, dy = torch.stack(das), torch.stack(dys)
    gw, gb = bptt._ln_param_grads(dy, a, *_steps(mean, rstd), bptt._ln_args(ln_w, ln_b, eps))
    return da, bptt._outer(da, hs[:-1]), None, gw, gb  # None: s, a fixed leak or not an input


def gru_forward(step, xproj, uzrT, uhT, ln_w, ln_b, eps):
    return _scan(step, xproj, uhT.shape[0], (uzrT, uhT, ln_w, ln_b, eps))


def gru_backward(step, grad_h, u_zr, u_h, ln_w, ln_b, eps, hs, zr, ah, q, g, mean, rstd):
    T = zr.shape[0]
    dh, dzrs, dahs, dys = grad_h[-1], [None] * T, [None] * T, [None] * T
    for t in range(T - 1, -1, -1):
        dzrs[t], dahs[t], dys[t], dh = step(dh, grad_h[max(t - 1, 0)], hs[t], zr[t], ah[t], g[t], _at(mean, t),
                                            _at(rstd, t), u_zr, u_h, ln_w, ln_b, eps)
    dzr, dah, dy = torch.stack(dzrs), torch.stack(dahs), torch.stack(dys)
    return (torch.cat([dzr, dah], -1), bptt._outer(dzr, hs[:-1]), bptt._outer(dah, q),
            *bptt._ln_param_grads(dy, ah, *_steps(mean, rstd), bptt._ln_args(ln_w, ln_b, eps)))


def lstm_forward(step, xproj, uT, ln_w, ln_b, eps):
    return _scan(step, xproj, uT.shape[0], (uT, ln_w, ln_b, eps), states=2)


def lstm_backward(step, grad_h, grad_c, u, ln_w, ln_b, eps, hs, cs, ifo, ag, g, tc, mean, rstd):
    T = ifo.shape[0]
    dh, dc, das, dys = grad_h[-1], torch.zeros_like(grad_c[0]), [None] * T, [None] * T
    for t in range(T - 1, -1, -1):
        das[t], dys[t], dc, dh = step(dh, dc, grad_h[max(t - 1, 0)], grad_c[t], cs[t], ifo[t], ag[t], g[t], tc[t],
                                      _at(mean, t), _at(rstd, t), u, ln_w, ln_b, eps)
    da, dy = torch.stack(das), torch.stack(dys)
    return (da, bptt._outer(da, hs[:-1]),
            *bptt._ln_param_grads(dy, ag, *_steps(mean, rstd), bptt._ln_args(ln_w, ln_b, eps)))


def _at(v: Tensor | None, t: int) -> Tensor | None:
    return None if v is None else v[t]


def _steps(*vs: Tensor | None) -> tuple:
    """Stacked per-step tensors as sequences over steps (what bptt._ln_param_grads stacks)."""
    return tuple(None if v is None else v.unbind(0) for v in vs)


# -- compiled steps and graphed loops --------------------------------------------------------------

RECOMPILE_LIMIT = 64
"""Compilations per step function (one per shape, dtype and gate variant; dynamo's default is 8)."""

_compiled: dict = {}


def compiled(step):
    """``step`` under torch.compile (fullgraph, static shapes), one wrapper per step function."""
    if step not in _compiled:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        _compiled[step] = torch.compile(step, fullgraph=True, dynamic=False)
    return _compiled[step]


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
    """``loop(step, *args)`` with its step function (:data:`STEPS`) in ``mode`` (None: eager, no graph)."""
    mode = mode or Mode(compile=False, graph=False)
    step = compiled(STEPS[loop]) if mode.compile else STEPS[loop]
    if not mode.graph:
        return loop(step, *args)
    if loop not in _graphed:
        _graphed[loop] = Graphed(loop, GRAPH_BACKEND)
    return _graphed[loop](step, *args)


# -- the Functions: bptt's interface -----------------------------------------------------------------

def _forward(ctx, loop, x, w_in, b_in, mats: tuple, rest: tuple, states: int = 1) -> tuple:
    """A fused Function's forward: the input projection (bptt._project), ``loop`` over time on the
    transposed recurrent matrices ``mats`` and ``rest`` (the other inputs, eps last), in the mode of
    x's device (kept for the backward); returns the ``states`` first outputs of the loop, (B, T, H)."""
    ctx.set_materialize_grads(False)
    ctx.mode = mode_for(x.device)
    with torch.inference_mode():
        ctx.x, xproj = bptt._project(x, w_in, b_in)
        out = run(loop, ctx.mode, xproj, *(m.T.contiguous() for m in mats), *rest)
    ctx.states, ctx.buffers, ctx.eps = out[:states], out[states:], rest[-1]
    ctx.save_for_backward(w_in, *mats, *rest[:-1])
    return _visible(*(v[1:] for v in ctx.states))


def _backward(ctx, loop, *grads: Tensor) -> tuple:
    """A fused Function's backward: ``loop`` on the outputs' time-major gradients ``grads``, the
    saved inputs, eps, states and buffers; the input projection's gradients (bptt._project_grads)."""
    w_in, *params = ctx.saved_tensors
    with torch.inference_mode():
        da, *out = run(loop, ctx.mode, *grads, *params, ctx.eps, *ctx.states, *ctx.buffers)
    return (*bptt._project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *bptt._normal(*out), None)


def _function(name: str, forward_loop, backward_loop, mats: int, states: int = 1) -> type:
    """A fused Function with bptt's arguments: x, w_in, b_in, ``mats`` recurrent matrices, the rest
    (eps last); ``states`` outputs (B, T, H)."""

    def forward(ctx, x, w_in, b_in, *rest):
        out = _forward(ctx, forward_loop, x, w_in, b_in, rest[:mats], rest[mats:], states)
        return out if states > 1 else out[0]

    def backward(ctx, *grads):
        like = ctx.states[0][1:]
        return _backward(ctx, backward_loop, *(_time_major(g, like) for g in grads))

    doc = f"bptt.{name} through :func:`{forward_loop.__name__}` and :func:`{backward_loop.__name__}`."
    return type("Fused" + name, (torch.autograd.Function,),
                {"__doc__": doc, "forward": staticmethod(forward), "backward": staticmethod(once_differentiable(backward))})


FusedGateScan = _function("GateScan", gate_forward, gate_backward, mats=1)
FusedGRUScan = _function("GRUScan", gru_forward, gru_backward, mats=2)
FusedLSTMScan = _function("LSTMScan", lstm_forward, lstm_backward, mats=1, states=2)


def _visible(*states: Tensor) -> tuple:
    """Time-major inference-mode states as the Function's outputs, (B, T, H), ordinary tensors."""
    return tuple(v.transpose(0, 1) for v in bptt._normal(*states))


def _time_major(grad: Tensor | None, like: Tensor) -> Tensor:
    """An output's gradient (B, T, H) as a contiguous (T, B, H) tensor; zeros (like ``like``) for None."""
    return torch.zeros_like(like) if grad is None else grad.transpose(0, 1).contiguous()


STEPS = {gate_forward: gate_forward_step, gate_backward: gate_backward_step, gru_forward: gru_forward_step,
         gru_backward: gru_backward_step, lstm_forward: lstm_forward_step, lstm_backward: lstm_backward_step}
"""Each loop's step function."""

FUSED = {bptt.GateScan: FusedGateScan, bptt.GRUScan: FusedGRUScan, bptt.LSTMScan: FusedLSTMScan}
"""bptt's Functions and their fused twins (:func:`pick`)."""
