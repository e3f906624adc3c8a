"""Hand-written backpropagation through time for the cells of docs/method.md §2 (training fast path).

The step-by-step scan of :mod:`learnwin.models.cells` lets autograd record every small op of every
step; at the default size most of a training step is that per-op overhead. Here one
``torch.autograd.Function``, :class:`Scan`, runs the whole sequence of any cell family
(:class:`learnwin.models.recurrence.Family`): the forward loop runs without autograd and keeps
the family's ``Saved`` record, the backward loop runs the family's backward step by hand (a
handful of fused ops per step), and the gradients of the recurrent matrices and of the LayerNorm
affine parameters are one batched op over all steps each. The input projection
``x W_in^T + b_in`` runs inside too, time-major, as one matmul over all steps, and so do its
weight, bias and input gradients. The per-step math is the family's; this module holds the loops
and their buffers, and hands the forward's buffers to the backward as one named record
(:class:`learnwin.models.recurrence.Kept`).

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
differentiable again (double backward raises). Each built-in cell's ``scan`` names its family and
the Function's inputs (:func:`projection`, :func:`layer_norm`), which ``fast_forward`` applies;
:meth:`learnwin.models.cells.GatedCell.forward` takes that path only when it is safe (see there).
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


class Scan(torch.autograd.Function):
    """Any family's sequence (:class:`learnwin.models.recurrence.Family`), inputs ``family, x, w_in,
    b_in, *mats, ln_w, ln_b, eps``: the family's recurrent matrices ``mats`` between the input
    projection's weight and bias and the LayerNorm's (None without LayerNorm); the family's states as
    outputs, (B, T, H) each (one: the tensor itself)."""

    @staticmethod
    def forward(ctx, family, x, w_in, b_in, *params):
        ctx.set_materialize_grads(False)
        *mats, ln_w, ln_b, eps = params
        G, H = w_in.shape[-2], mats[0].shape[-1]
        states = tuple(_states(x, w_in, H) for _ in range(family.states))  # the outputs: outside inference mode
        T = states[0].shape[0] - 1
        with torch.inference_mode():
            ctx.x, xproj = rec.project(x, w_in, b_in)
            w = family.weights(mats, rec.norm(ln_w, ln_b, eps), True)
            widths = family.widths(G, H)
            saved = type(widths)(*(_buffer(states[0], n) for n in widths))
            unbound = tuple(v.unbind(0) for v in states)
            rows = _rows(family.step(saved, tuple(v[1:] for v in unbound)), T)
            means, rstds = [], []
            step = family.forward_step
            for xs, prev, out in zip(zip(*(v.unbind(0) for v in family.split(xproj))), zip(*unbound), rows):
                mean, rstd = step(w, xs, prev, out)
                means.append(mean), rstds.append(rstd)
        ctx.family, ctx.kept, ctx.eps = family, rec.Kept(states, saved, means, rstds), eps
        ctx.save_for_backward(w_in, *mats, ln_w, ln_b)
        return _visible(states[0]) if len(states) == 1 else tuple(_visible(v) for v in states)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grad_states):
        w_in, *mats, ln_w, ln_b = ctx.saved_tensors
        da = _buffer(ctx.kept.states[0], w_in.shape[-2])  # the pre-activation gradient: outside inference mode
        with torch.inference_mode():
            w = ctx.family.weights(mats, rec.norm(ln_w, ln_b, ctx.eps))
            grads = _backward(ctx.family, w, da, grad_states, ctx.kept)
        return (None, *rec.project_grads(ctx.needs_input_grad[1:], da, ctx.x, w_in), *rec.normal(*grads), None)


def _backward(family, w, da: Tensor, grad_states: tuple, kept: rec.Kept) -> tuple:
    """The backward loop of :class:`Scan` into ``da``: the recurrent matrices' and LayerNorm affine gradients."""
    states, saved, means, rstds = kept
    T = states[0].shape[0] - 1
    a = family.ln_input(saved).contiguous()
    a_t, dys = a.unbind(0), torch.empty_like(a)  # dys: d LN-output of every step
    grads = family.grads(dys, da)
    rows = _rows(grads, T)
    ghs = [(None,) * T if g is None else _steps(g) for g in grad_states]
    carry = tuple(torch.zeros_like(a[0]) if g[-1] is None else g[-1] for g in ghs)
    prev_grads = list(zip(*ghs))
    prev = tuple(v[:-1] for v in states)
    step, out = family.backward_step, []
    for lo, hi in _blocks(T, saved[0][0].nbytes, saved[0].device):
        fs = _rows(family.factors(w, saved, prev, slice(lo, hi)), hi - lo)
        for t in range(hi - 1, lo - 1, -1):
            carry, k = step(w, fs[t - lo], carry, prev_grads[t - 1], a_t[t], means[t], rstds[t], rows[t], t > 0)
            out.append(k)
    _, mat_grads = family.finish(grads, out[::-1], saved, prev, da)
    return (*mat_grads, *rec.ln_param_grads(dys, a, means, rstds, w.norm))


def active() -> bool:
    """Whether the fast path may run: grad mode on, no torch.func transform, no dual tensors."""
    return (torch.is_grad_enabled() and torch._C._functorch.peek_interpreter_stack() is None
            and torch.autograd.forward_ad._current_level < 0)


def projection(cell: nn.Module) -> tuple[Tensor, Tensor]:
    """The inputs of :class:`Scan` after the family and x: the cell's fused input weight and bias."""
    return torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0)


def layer_norm(norm: nn.Module) -> tuple:
    """The last three inputs of :class:`Scan`: LayerNorm weight, bias, eps (None without LN)."""
    return (norm.weight, norm.bias, norm.eps) if isinstance(norm, nn.LayerNorm) else (None, None, None)
