"""The gate cells' family (ConstGate, SharedGate, DiagGate; docs/method.md §2):
h_t = h_{t-1} + s_t (g_t - h_{t-1}), g_t = tanh(LN(a_t)), s_t fixed, one shared scalar gate or one per unit.

The records and steps of :class:`learnwin.models.recurrence.Family` (the interface is described there).
The gate width is told by the fused recurrent matrix U (H + gate width, H): 0 for the fixed leak
``s`` (ConstGate), 1 for a shared scalar gate, H for one gate per unit.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from learnwin.models import recurrence as rec


class Weights(NamedTuple):
    """``u``: the fused recurrent matrix; ``s``: the fixed leak; ``uT``: U^T, contiguous (the forward's)."""

    u: Tensor
    s: Tensor
    norm: rec.Norm | None
    uT: Tensor | None = None


class Saved(NamedTuple):
    """What the forward keeps of a step: ``pre`` the pre-activation (the gate columns hold s_t after the step), ``g`` g_t."""

    pre: Tensor
    g: Tensor


class Step(NamedTuple):
    """A step's tensors: ``pre``, whose columns are ``a`` (the LN input) and ``gate`` (None for the fixed leak), ``g``, ``h`` h_t."""

    pre: Tensor
    a: Tensor
    gate: Tensor | None
    g: Tensor
    h: Tensor | None


class Factors(NamedTuple):
    """``k`` = d LN-output / dh_t, ``keep`` = 1 - s_t, ``kd`` = d a_s / dh_t (None for the fixed leak)."""

    k: Tensor
    keep: Tensor
    kd: Tensor | None


class Grads(NamedTuple):
    """``dy`` = d LN-output, ``da`` = d pre-activation (None for the fixed leak: its pre-activation
    gradient is the LayerNorm's input gradient itself, kept by the driver, not copied)."""

    dy: Tensor
    da: Tensor | None


def reference(cell, xp: Tensor, hp: Tensor, state: tuple, trace: bool) -> rec.StepOut:
    """The definition of a step (the cell's ``step``: autograd, vmap and the exact transport run it),
    from the cell's parameters (``W_h``, ``s``, ``norm``; a gated cell's gate diagonal ``_gate_diag()``)."""
    H = cell.hidden_size
    h_prev = state[0]
    if xp.shape[-1] == H:  # the fixed leak
        g, s = torch.tanh(cell.norm(xp + hp)), cell.s
    else:
        g = torch.tanh(cell.norm(xp[:, :H] + hp[:, :H]))
        s = torch.sigmoid(xp[:, H:] + hp[:, H:])
    h = h_prev + s * (g - h_prev)
    if not trace:
        return rec.StepOut((h,), h, h)
    leak = (1 - s).expand_as(h)
    corr = s * (1 - g * g) * torch.diagonal(cell.W_h)
    if xp.shape[-1] > H:
        corr = (g - h_prev) * (s * (1 - s)) * cell._gate_diag() + corr
    return rec.StepOut((h,), h, h, leak, corr, torch.ones_like(h), g)


def _gate(pre: Tensor, H: int) -> Tensor | None:
    return None if pre.shape[-1] == H else pre[..., H:]


class Gate(rec.Family):
    """The gate cells; matrices (U, s)."""

    @staticmethod
    def weights(mats, norm, forward=False):
        u, s = mats
        return Weights(u, s, norm, u.mT.contiguous() if forward else None)

    @staticmethod
    def widths(G, H):
        return Saved(G, H)

    @staticmethod
    def step(saved, states):
        pre, g = saved
        H = g.shape[-1]
        return Step(pre, pre[..., :H] if pre.shape[-1] > H else pre, _gate(pre, H), g, states[0])

    @staticmethod
    def split(xp):
        return (xp,)

    @staticmethod
    def forward_step(w, xs, prev, out):
        h_prev = prev[0]
        rec.mm(xs[0], h_prev, w.uT, out=out.pre)
        if out.gate is not None:
            out.gate.sigmoid_()
        n, mean, rstd = rec.ln_forward(out.a, w.norm)
        torch.lerp(h_prev, torch.tanh(n, out=out.g), w.s if out.gate is None else out.gate, out=out.h)
        return mean, rstd

    @staticmethod
    def factors(w, saved, prev, at):
        g, h_prev = saved.g[at], prev[0][at]
        gate = _gate(saved.pre, g.shape[-1])
        if gate is None:
            return Factors(w.s * (1 - g * g), 1 - w.s, None)
        gate = gate[at]
        return Factors(gate * (1 - g * g), 1 - gate, (g - h_prev) * gate * (1 - gate))

    @staticmethod
    def ln_input(saved):
        H = saved.g.shape[-1]
        return saved.pre[..., :H] if saved.pre.shape[-1] > H else saved.pre

    @staticmethod
    def grads(dy, da):
        return Grads(dy, None if da.shape[-1] == dy.shape[-1] else da)

    @staticmethod
    def backward_step(w, f, carry, prev_grads, a, mean, rstd, out, more=True):
        dh = carry[0]
        dy = torch.mul(dh, f.k, out=out.dy)
        da = rec.ln_input_grad(dy, a, mean, rstd, w.norm)
        kept = da
        if f.kd is not None:  # the shared gate's a_s gradient sums over units
            kd = (dh * f.kd).sum(-1, keepdim=True) if w.u.shape[-2] == w.u.shape[-1] + 1 else dh * f.kd
            da, kept = torch.cat([da, kd], -1, out=out.da), None
        return (rec.mm(torch.addcmul(prev_grads[0], dh, f.keep), da, w.u),) if more else None, kept

    @staticmethod
    def finish(grads, kept, saved, prev, out=None):
        da = torch.stack(kept, out=out) if grads.da is None else grads.da
        return da, (rec.outer(da, prev[0]), None)  # None: s, a fixed leak or not an input
