"""The GRU's family (docs/method.md §2): z, r = sigmoid(.), g = tanh(LN(xp_h + (r h_{t-1}) U_h^T)),
h_t = h_{t-1} + z (g - h_{t-1}). The records and steps of :class:`learnwin.models.recurrence.Family`."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from learnwin.models import recurrence as rec


def gates(cell, xp: Tensor, hp: Tensor, h_prev: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(z, r, a, g) of a step from the cell's parameters: the update and reset gates, the candidate's
    LN input a = xp_h + (r h_{t-1}) U_h^T and the candidate g = tanh(LN(a)); ``hp`` = h_{t-1} U_(z,r)^T.
    The reference step's and the closed-form one-step Jacobian's (learnwin.models.cells.GRU)."""
    H = cell.hidden_size
    z = torch.sigmoid(xp[:, :H] + hp[:, :H])
    r = torch.sigmoid(xp[:, H:2 * H] + hp[:, H:])
    a = xp[:, 2 * H:] + (r * h_prev) @ cell.U_h.T
    return z, r, a, torch.tanh(cell.norm(a))


def reference(cell, xp: Tensor, hp: Tensor, state: tuple, trace: bool) -> rec.StepOut:
    """The definition of a step (the cell's ``step``: autograd, vmap and the exact transport run it),
    from the cell's parameters (:func:`gates`)."""
    h_prev = state[0]
    z, r, _, g = gates(cell, xp, hp, h_prev)
    h = h_prev + z * (g - h_prev)
    if not trace:
        return rec.StepOut((h,), h, h)
    corr = (g - h_prev) * z * (1 - z) * torch.diagonal(cell.U_z) + z * (1 - g * g) * torch.diagonal(
        cell.U_h
    ) * (r + h_prev * r * (1 - r) * torch.diagonal(cell.U_r))
    return rec.StepOut((h,), h, h, 1 - z, corr, torch.ones_like(h), g)


class Weights(NamedTuple):
    """The fused gate matrix U_(z,r) (2H, H), the candidate's U_h (H, H), and their contiguous
    transposes (the forward's; None in the backward)."""

    u_zr: Tensor
    u_h: Tensor
    norm: rec.Norm | None
    uzrT: Tensor | None = None
    uhT: Tensor | None = None


class Saved(NamedTuple):
    """What the forward keeps of a step: the gates ``zr``, ``ah`` the LN input, ``q`` = r_t h_{t-1}, ``g`` the candidate."""

    zr: Tensor
    ah: Tensor
    q: Tensor
    g: Tensor


class Step(NamedTuple):
    """A step's tensors: :class:`Saved`'s, the gates' columns ``z`` and ``r``, and ``h`` h_t."""

    zr: Tensor
    z: Tensor
    r: Tensor
    ah: Tensor
    q: Tensor
    g: Tensor
    h: Tensor


class Factors(NamedTuple):
    """``kg`` = d LN-output / dh_t, ``kzr`` = d a_(z,r) / d(h_t, q_t), ``keep`` = 1 - z_t, ``r`` = r_t."""

    kg: Tensor
    kzr: Tensor
    keep: Tensor
    r: Tensor


class Grads(NamedTuple):
    """``dy`` = d LN-output, ``dzr`` = d gate pre-activations (the candidate's is kept by the driver)."""

    dy: Tensor
    dzr: Tensor


class GRU(rec.Family):
    """The GRU; matrices (U_(z,r), U_h)."""

    @staticmethod
    def weights(mats, norm, forward=False):
        u_zr, u_h = mats
        if forward:
            return Weights(u_zr, u_h, norm, u_zr.mT.contiguous(), u_h.mT.contiguous())
        return Weights(u_zr, u_h, norm)

    @staticmethod
    def widths(G, H):
        return Saved(2 * H, H, H, H)

    @staticmethod
    def step(saved, states):
        zr, ah, q, g = saved
        return Step(zr, *zr.split(g.shape[-1], -1), ah, q, g, states[0])

    @staticmethod
    def split(xp):
        H = xp.shape[-1] // 3
        return xp[..., :2 * H], xp[..., 2 * H:]

    @staticmethod
    def forward_step(w, xs, prev, out):
        h_prev = prev[0]
        rec.mm(xs[0], h_prev, w.uzrT, out=out.zr).sigmoid_()
        rec.mm(xs[1], torch.mul(out.r, h_prev, out=out.q), w.uhT, out=out.ah)
        n, mean, rstd = rec.ln_forward(out.ah, w.norm)
        torch.lerp(h_prev, torch.tanh(n, out=out.g), out.z, out=out.h)
        return mean, rstd

    @staticmethod
    def factors(w, saved, prev, at):
        zr, h_prev, g = saved.zr[at], prev[0][at], saved.g[at]
        H = g.shape[-1]
        z, r = zr[..., :H], zr[..., H:]
        kzr = torch.cat([g - h_prev, h_prev], -1) * zr * (1 - zr)
        return Factors(z * (1 - g * g), kzr, 1 - z, r)

    @staticmethod
    def ln_input(saved):
        return saved.ah

    @staticmethod
    def grads(dy, da):
        return Grads(dy, dy.new_empty(*dy.shape[:-1], 2 * dy.shape[-1]))

    @staticmethod
    def backward_step(w, f, carry, prev_grads, a, mean, rstd, out, more=True):
        dh = carry[0]
        dy = torch.mul(dh, f.kg, out=out.dy)
        dah = rec.ln_input_grad(dy, a, mean, rstd, w.norm)
        dq = dah @ w.u_h
        torch.cat([dh, dq], -1, out=out.dzr).mul_(f.kzr)
        if not more:
            return None, dah
        return (rec.mm(torch.addcmul(prev_grads[0], dh, f.keep).addcmul_(dq, f.r), out.dzr, w.u_zr),), dah

    @staticmethod
    def finish(grads, kept, saved, prev, out=None):
        dah = torch.stack(kept)
        return torch.cat([grads.dzr, dah], -1, out=out), (rec.outer(grads.dzr, prev[0]), rec.outer(dah, saved.q))
