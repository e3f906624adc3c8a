"""Hand-written backpropagation through time for the cells of docs/method.md §2 (training fast path).

The step-by-step scan of :mod:`learnwin.models.cells` lets autograd record every small op of every
step; at the default size most of a training step is that per-op overhead. Here one
``torch.autograd.Function`` per cell family runs the whole sequence: the forward loop runs
without autograd and keeps the gate activations, the backward loop runs the recurrence by
hand (a handful of fused ops per step), and the gradients of the recurrent matrices and of
the LayerNorm affine parameters are one batched op over all steps each. The input
projection ``x W_in^T + b_in`` runs inside too, time-major, as one matmul over all steps, and
so do its weight, bias and input gradients. The per-step math is the eager driving of
:mod:`learnwin.models.recurrence`'s steps; this module holds the loops and their buffers.

Speed (benchmarks/train_step.py): at the default size the cost is the number of ATen calls
per step (each op about 1-5 us, each view about 0.5 us), so states, activations and gradients
live in preallocated time-major (T, B, .) buffers: the loops write each step into views made
once per sequence by ``unbind`` (no list + ``torch.stack`` copies, no ``split`` per step), and
a step's recurrent input gradient is one ``cat`` into its row of the buffer, scaled in place.
Both loops run in ``torch.inference_mode`` (no view tracking or version counters, which cost a
noticeable share of each small op); the tensors autograd keeps (outputs, input gradient) are
allocated before it, the small parameter gradients copied after it. The backward computes its
per-step factors block by block of time steps, in cache where the loop reads them (:func:`_blocks`).

Same numbers as the reference path (equal to rounding; tests/test_bptt.py checks losses and
every gradient to 1e-10 in float64). The float32 rounding is that of the recorded smoke digest
(tests/test_smoke_digest.py); it last changed when the input projection moved inside, which
changed the order of the input weight and bias gradients' sums. First-order only: the backward is not
differentiable again (double backward raises). Each built-in cell's ``scan`` names its family's
Function and its inputs (:func:`projection`, :func:`layer_norm`), which ``fast_forward`` applies; :meth:`learnwin.models.cells.GatedCell.forward`
takes that path only when it is safe (see there).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from learnwin.models import recurrence as rec

BLOCK_BYTES = 256 << 10
"""Bytes per row buffer of one block of time steps in the backward on the CPU (see :func:`_blocks`)."""
DEVICE_BLOCK_BYTES = 64 << 20
"""The same on an accelerator, which has no core cache to fit: a block is sized for its kernel
launches (each block's factors are a few kernels), as the envelope's chunks are (64 MiB)."""


def _blocks(T: int, row_bytes: int, device: torch.device | str = "cpu"):
    """Blocks (lo, hi) of time steps, last first, for the backward's per-step factors.

    The factors (gate derivatives) are elementwise products over (T, B, .) buffers, memory-bound
    once those outgrow the cache; computed whole, they made the fast path slower than the
    reference at T 256, H 128 (docs/performance.md, "Training step speed"). Computed block by block,
    right before the loop consumes them, they stay in cache. A block holds about BLOCK_BYTES of
    the widest buffer (``row_bytes`` per step), a fraction of a core's L2 cache; on an accelerator
    (``device``) :data:`DEVICE_BLOCK_BYTES`, 256 steps a block at the paper's size where the CPU's
    budget would make every step its own block. Elementwise products do not depend on the
    blocking: any block size gives the same bits.
    """
    n = max(1, (BLOCK_BYTES if torch.device(device).type == "cpu" else DEVICE_BLOCK_BYTES) // row_bytes)
    for hi in range(T, 0, -n):
        yield max(hi - n, 0), hi


def _rows(block, n: int) -> list:
    """The n per-step structs of a struct of time-major tensors (n, B, .) (members: (n, E, B, .)),
    views made once: each field unbound (a field that is another's tensor shares its views, a tuple
    is taken as already unbound: each view costs about 1 us), a field without the time axis (fewer
    dimensions than the widest field: a fixed leak) shared by every step, None kept."""
    dim = max(v.dim() for v in block if isinstance(v, Tensor))
    views = {}
    for v in block:
        if isinstance(v, Tensor) and v.dim() == dim and id(v) not in views:
            views[id(v)] = v.unbind(0)
    cols = [views[id(v)] if id(v) in views else v if isinstance(v, tuple) else (v,) * n for v in block]
    return [tuple.__new__(type(block), row) for row in zip(*cols)]  # NamedTuple._make without its Python frame


def _steps(v: Tensor) -> tuple:
    """(B, T, H) -> T tensors (B, H) (members: (E, B, T, H) -> (E, B, H))."""
    return v.unbind(-2)


def _states(x: Tensor, w_in: Tensor, H: int) -> Tensor:
    """(T + 1, B, H) buffer of states for inputs x (B, T, D), entry 0 the zero initial state;
    members (w_in (E, G, D), x (E, B, T, D) or shared): (T + 1, E, B, H)."""
    v = x.new_empty(x.shape[-2] + 1, *w_in.shape[:-2], x.shape[-3], H)
    v[0].zero_()
    return v


def _buffer(hs: Tensor, width: int) -> Tensor:
    """A (T, B, width) buffer (members: (T, E, B, width)) for the state buffer hs."""
    return hs.new_empty(hs.shape[0] - 1, *hs.shape[1:-1], width)


def _visible(states: Tensor) -> Tensor:
    """A time-major state buffer's steps as a Function's output, (B, T, H) (members: (E, B, T, H))."""
    return states[1:].movedim(0, -2)


class GateScan(torch.autograd.Function):
    """ConstGate, SharedGate and DiagGate (:class:`learnwin.models.recurrence.GateWeights`)."""

    @staticmethod
    def forward(ctx, x, w_in, b_in, u, s, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        G, H = w_in.shape[-2], u.shape[-1]
        hs = _states(x, w_in, H)  # the output: allocated outside inference mode
        T = hs.shape[0] - 1
        with torch.inference_mode():
            ctx.x, xproj = rec.project(x, w_in, b_in)
            w = rec.GateWeights(u, s, rec.norm(ln_w, ln_b, eps), u.mT.contiguous())
            pre, gs = _buffer(hs, G), _buffer(hs, H)  # pre: the gate columns become the gate
            means, rstds = [], []
            h_t = hs.unbind(0)
            for xp, h, out in zip(xproj.unbind(0), h_t, _rows(rec.GateStep.of(pre, gs, h_t[1:]), T)):
                mean, rstd = rec.gate_forward_step(w, xp, h, out)
                means.append(mean), rstds.append(rstd)
        ctx.buffers = pre, hs, gs, means, rstds
        ctx.save_for_backward(w_in, u, s, ln_w, ln_b)
        ctx.eps = eps
        return _visible(hs)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        w_in, u, s, ln_w, ln_b = ctx.saved_tensors
        da = torch.empty_like(ctx.buffers[0])  # the pre-activation gradient: outside inference mode
        with torch.inference_mode():
            grads = GateScan._backward(da, grad_h, rec.GateWeights(u, s, rec.norm(ln_w, ln_b, ctx.eps)), *ctx.buffers)
        return (*rec.project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *rec.normal(*grads))

    @staticmethod
    def _backward(da, grad_h, w, pre, hs, g, means, rstds):
        T = pre.shape[0]
        hp, step = hs[:-1], rec.GateStep.of(pre, g, None)
        a = step.a.contiguous()
        a_t, ghs = a.unbind(0), _steps(grad_h)
        dys = torch.empty_like(g)  # d LN-output of every step
        grads = _rows(rec.GateGrads(dys, None if step.gate is None else da), T)
        das, dh = [], ghs[-1]  # das: the fixed leak's pre-activation gradients, stacked into da after
        for lo, hi in _blocks(T, pre[0].nbytes, pre[0].device):
            gate = None if step.gate is None else step.gate[lo:hi]
            fs = _rows(rec.gate_factors(w.s, gate, hp[lo:hi], g[lo:hi]), hi - lo)
            for t in range(hi - 1, lo - 1, -1):
                da_t, dh = rec.gate_backward_step(w, fs[t - lo], dh, ghs[t - 1], a_t[t], means[t], rstds[t], grads[t],
                                                  carry=t > 0)
                das.append(da_t)
        if step.gate is None:
            torch.stack(das[::-1], out=da)
        gw, gb = rec.ln_param_grads(dys, a, means, rstds, w.norm)
        return rec.outer(da, hp), None, gw, gb, None


class GRUScan(torch.autograd.Function):
    """GRU (:class:`learnwin.models.recurrence.GRUWeights`)."""

    @staticmethod
    def forward(ctx, x, w_in, b_in, u_zr, u_h, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        H = u_h.shape[-1]
        hs = _states(x, w_in, H)  # the output: allocated outside inference mode
        T = hs.shape[0] - 1
        with torch.inference_mode():
            ctx.x, xproj = rec.project(x, w_in, b_in)
            w = rec.GRUWeights(u_zr, u_h, rec.norm(ln_w, ln_b, eps), u_zr.mT.contiguous(), u_h.mT.contiguous())
            zr, ah = _buffer(hs, 2 * H), _buffer(hs, H)  # zr: gates, ah: LN input
            qs, gs = _buffer(hs, H), _buffer(hs, H)
            xzr, xh = xproj[..., :2 * H].unbind(0), xproj[..., 2 * H:].unbind(0)
            means, rstds = [], []
            h_t = hs.unbind(0)
            for xz, xc, h, out in zip(xzr, xh, h_t, _rows(rec.GRUStep.of(zr, ah, qs, gs, h_t[1:]), T)):
                mean, rstd = rec.gru_forward_step(w, xz, xc, h, out)
                means.append(mean), rstds.append(rstd)
        ctx.buffers = zr, ah, hs, qs, gs, means, rstds
        ctx.save_for_backward(w_in, u_zr, u_h, ln_w, ln_b)
        ctx.eps = eps
        return _visible(hs)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        w_in, u_zr, u_h, ln_w, ln_b = ctx.saved_tensors
        zr = ctx.buffers[0]
        da = zr.new_empty(*zr.shape[:-1], 3 * u_h.shape[-1])  # pre-activation gradient, outside inference mode
        with torch.inference_mode():
            w = rec.GRUWeights(u_zr, u_h, rec.norm(ln_w, ln_b, ctx.eps))
            grads = GRUScan._backward(da, grad_h, w, *ctx.buffers)
        return (*rec.project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *rec.normal(*grads))

    @staticmethod
    def _backward(da, grad_h, w, zr, ah, hs, qs, g, means, rstds):
        T = g.shape[0]
        hp = hs[:-1]
        dzr = torch.empty_like(zr)
        ah_t, ghs = ah.unbind(0), _steps(grad_h)
        dahs, dys = [], torch.empty_like(g)  # dys: d LN-output of every step
        grads = _rows(rec.GRUGrads(dys, dzr), T)
        dh = ghs[-1]
        for lo, hi in _blocks(T, zr[0].nbytes, zr[0].device):
            fs = _rows(rec.gru_factors(zr[lo:hi], hp[lo:hi], g[lo:hi]), hi - lo)
            for t in range(hi - 1, lo - 1, -1):
                dah, dh = rec.gru_backward_step(w, fs[t - lo], dh, ghs[t - 1], ah_t[t], means[t], rstds[t], grads[t],
                                                carry=t > 0)
                dahs.append(dah)
        dah = torch.stack(dahs[::-1])
        torch.cat([dzr, dah], -1, out=da)
        gw, gb = rec.ln_param_grads(dys, ah, means, rstds, w.norm)
        return rec.outer(dzr, hp), rec.outer(dah, qs), gw, gb, None


class LSTMScan(torch.autograd.Function):
    """LSTM (:class:`learnwin.models.recurrence.LSTMWeights`); outputs h and c."""

    @staticmethod
    def forward(ctx, x, w_in, b_in, u, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        H = u.shape[-1]
        hs, cs = _states(x, w_in, H), _states(x, w_in, H)  # the outputs: outside inference mode
        T = hs.shape[0] - 1
        with torch.inference_mode():
            ctx.x, xproj = rec.project(x, w_in, b_in)
            w = rec.LSTMWeights(u, rec.norm(ln_w, ln_b, eps), u.mT.contiguous())
            pre = _buffer(hs, 4 * H)  # pre-activations; the i, f, o columns become the gates
            gs, tcs = _buffer(hs, H), _buffer(hs, H)
            h_t, c_t = hs.unbind(0), cs.unbind(0)
            steps = _rows(rec.LSTMStep.of(pre, gs, tcs, h_t[1:], c_t[1:]), T)
            means, rstds = [], []
            for xp, h, c, out in zip(xproj.unbind(0), h_t, c_t, steps):
                mean, rstd = rec.lstm_forward_step(w, xp, h, c, out)
                means.append(mean), rstds.append(rstd)
        ctx.buffers = pre, hs, cs, gs, tcs, means, rstds
        ctx.save_for_backward(w_in, u, ln_w, ln_b)
        ctx.eps = eps
        return _visible(hs), _visible(cs)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_c):
        w_in, u, ln_w, ln_b = ctx.saved_tensors
        da = torch.empty_like(ctx.buffers[0])  # the pre-activation gradient: outside inference mode
        with torch.inference_mode():
            w = rec.LSTMWeights(u, rec.norm(ln_w, ln_b, ctx.eps))
            grads = LSTMScan._backward(da, grad_h, grad_c, w, *ctx.buffers)
        return (*rec.project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *rec.normal(*grads))

    @staticmethod
    def _backward(da, grad_h, grad_c, w, pre, hs, cs, g, tc, means, rstds):
        T, H = g.shape[0], g.shape[-1]
        ag = pre[..., 3 * H:].contiguous()
        ghs = (None,) * T if grad_h is None else _steps(grad_h)
        gcs = (None,) * T if grad_c is None else _steps(grad_c)
        ag_t = ag.unbind(0)
        dys = torch.empty_like(g)  # d LN-output of every step
        grads = _rows(rec.LSTMGrads(dys, da), T)
        dh = torch.zeros_like(g[0]) if grad_h is None else ghs[-1]
        dc = torch.zeros_like(g[0])
        for lo, hi in _blocks(T, pre[0].nbytes, pre[0].device):
            fs = _rows(rec.lstm_factors(pre[lo:hi], cs[lo:hi], g[lo:hi], tc[lo:hi]), hi - lo)
            for t in range(hi - 1, lo - 1, -1):
                dc, dh = rec.lstm_backward_step(w, fs[t - lo], dh, dc, ghs[t - 1], gcs[t], ag_t[t], means[t], rstds[t],
                                                grads[t], carry=t > 0)
        gw, gb = rec.ln_param_grads(dys, ag, means, rstds, w.norm)
        return rec.outer(da, hs[:-1]), gw, gb, None


def active() -> bool:
    """Whether the fast path may run: grad mode on, no torch.func transform, no dual tensors."""
    return (torch.is_grad_enabled() and torch._C._functorch.peek_interpreter_stack() is None
            and torch.autograd.forward_ad._current_level < 0)


def projection(cell: nn.Module) -> tuple[Tensor, Tensor]:
    """The second and third inputs of every Function here (after x): the cell's fused input weight and bias."""
    return torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0)


def layer_norm(norm: nn.Module) -> tuple:
    """The last three inputs of every Function here: LayerNorm weight, bias, eps (None without LN)."""
    return (norm.weight, norm.bias, norm.eps) if isinstance(norm, nn.LayerNorm) else (None, None, None)
