"""The LSTM's family (docs/method.md §2): i, f, o = sigmoid(.), g = tanh(LN(.)), c_t = f c_{t-1} + i g,
h_t = o tanh(c_t); two states, h and c. The records and steps of :class:`learnwin.models.recurrence.Family`."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from learnwin.models import recurrence as rec


def gates(cell, pre: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(i, f, o, g) of a step from its pre-activation ``pre`` = xp + h_{t-1} U^T (B, 4H): the input,
    forget and output gates and the candidate g = tanh(LN(.)). The reference step's and the
    closed-form one-step Jacobian's (learnwin.models.cells.LSTM)."""
    H = cell.hidden_size
    i = torch.sigmoid(pre[:, :H])
    f = torch.sigmoid(pre[:, H:2 * H])
    o = torch.sigmoid(pre[:, 2 * H:3 * H])
    return i, f, o, torch.tanh(cell.norm(pre[:, 3 * H:]))


def reference(cell, xp: Tensor, hp: Tensor, state: tuple, trace: bool) -> rec.StepOut:
    """The definition of a step (the cell's ``step``: autograd, vmap and the exact transport run it),
    from the cell's parameters (:func:`gates`)."""
    _, c_prev, e_prev = state
    i, f, o, g = gates(cell, xp + hp)
    c = f * c_prev + i * g
    tc = torch.tanh(c)
    h = o * tc
    if not trace:
        return rec.StepOut((h, c, e_prev), h, c)
    e = o * (1 - tc * tc)
    corr = (
        c_prev * f * (1 - f) * torch.diagonal(cell.U_f)
        + i * (1 - g * g) * torch.diagonal(cell.U_g)
        + g * i * (1 - i) * torch.diagonal(cell.U_i)
    ) * e_prev
    return rec.StepOut((h, c, e), h, c, f, corr, e, g)


class Weights(NamedTuple):
    """The fused recurrent matrix U (4H, H) and its contiguous transpose (the forward's; None in the backward)."""

    u: Tensor
    norm: rec.Norm | None
    uT: Tensor | None = None


class Saved(NamedTuple):
    """What the forward keeps of a step: ``pre`` the pre-activation (its i, f, o columns hold the
    gates after the step), ``g`` the candidate, ``tc`` = tanh c_t."""

    pre: Tensor
    g: Tensor
    tc: Tensor


class Step(NamedTuple):
    """A step's tensors: ``pre``, whose columns are ``ifo`` (``i``, ``f``, ``o``) and ``ag`` (the LN
    input); ``g``, ``tc``, ``h`` h_t, ``c`` c_t."""

    pre: Tensor
    ifo: Tensor
    i: Tensor
    f: Tensor
    o: Tensor
    ag: Tensor
    g: Tensor
    tc: Tensor
    h: Tensor
    c: Tensor


class Factors(NamedTuple):
    """``k`` = d a / d(c, c, h, LN input), ``kg`` = d LN-output / dc_t, ``kc`` = dc_t / dh_t, ``f`` = f_t."""

    k: Tensor
    kg: Tensor
    kc: Tensor
    f: Tensor


class Grads(NamedTuple):
    """``dy`` = d LN-output, ``da`` = d pre-activation."""

    dy: Tensor
    da: Tensor


class LSTM(rec.Family):
    """The LSTM; matrices (U,); states (h, c), carried gradients (dh, dc)."""

    states = 2

    @staticmethod
    def weights(mats, norm, forward=False):
        u, = mats
        return Weights(u, norm, u.mT.contiguous() if forward else None)

    @staticmethod
    def widths(G, H):
        return Saved(G, H, H)

    @staticmethod
    def step(saved, states):
        pre, g, tc = saved
        H = g.shape[-1]
        return Step(pre, pre[..., :3 * H], pre[..., :H], pre[..., H:2 * H], pre[..., 2 * H:3 * H], pre[..., 3 * H:],
                    g, tc, *states)

    @staticmethod
    def split(xp):
        return (xp,)

    @staticmethod
    def forward_step(w, xs, prev, out):
        rec.mm(xs[0], prev[0], w.uT, out=out.pre)
        out.ifo.sigmoid_()
        n, mean, rstd = rec.ln_forward(out.ag, w.norm)
        c = torch.mul(out.f, prev[1], out=out.c).addcmul_(out.i, torch.tanh(n, out=out.g))
        torch.mul(out.o, torch.tanh(c, out=out.tc), out=out.h)
        return mean, rstd

    @staticmethod
    def factors(w, saved, prev, at):
        pre, c_prev, g, tc = saved.pre[at], prev[1][at], saved.g[at], saved.tc[at]
        H = g.shape[-1]
        ifo = pre[..., :3 * H]
        i, f, o = ifo[..., :H], ifo[..., H:2 * H], ifo[..., 2 * H:]
        kifo = torch.cat([g * i, c_prev * f, tc * o], -1).mul_(1 - ifo)  # (v sigma) (1 - sigma): the reference's rounding
        k = torch.cat([kifo, torch.ones_like(g)], -1)  # d a_(i,f,o) / d(c, c, h), and 1 for the LN input
        return Factors(k, i * (1 - g * g), o * (1 - tc * tc), f)

    @staticmethod
    def ln_input(saved):
        return saved.pre[..., 3 * saved.g.shape[-1]:]

    @staticmethod
    def grads(dy, da):
        return Grads(dy, da)

    @staticmethod
    def backward_step(w, f, carry, prev_grads, a, mean, rstd, out, more=True):
        dh, dc = carry
        dc = torch.addcmul(dc, dh, f.kc)
        dy = torch.mul(dc, f.kg, out=out.dy)
        dx = rec.ln_input_grad(dy, a, mean, rstd, w.norm)
        torch.cat([dc, dc, dh, dx], -1, out=out.da).mul_(f.k)
        if not more:
            return None, None
        gh, gc = prev_grads
        dc = dc * f.f
        return (out.da @ w.u if gh is None else rec.mm(gh, out.da, w.u), dc if gc is None else dc + gc), None

    @staticmethod
    def finish(grads, kept, saved, prev, out=None):
        return grads.da, (rec.outer(grads.da, prev[0]),)
