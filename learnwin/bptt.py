"""Hand-written backpropagation through time for the cells of docs/method.md §2 (training fast path).

The step-by-step scan of :mod:`learnwin.cells` lets autograd record every small op of every
step; at the default size most of a training step is that per-op overhead. Here one
``torch.autograd.Function`` per cell family runs the whole sequence: the forward loop runs
without autograd and keeps the gate activations, the backward loop runs the recurrence by
hand (a handful of fused ops per step), and the gradients of the recurrent matrices and of
the LayerNorm affine parameters are one batched op over all steps each. The input
projection ``x W_in^T + b_in`` stays outside, under autograd, so its weight and bias
gradients are also one matmul over all steps.

Same numbers as the reference path (equal to rounding; tests/test_bptt.py checks losses and
every gradient to 1e-10 in float64). First-order only: the backward is not differentiable
again (double backward raises); :meth:`learnwin.cells.GatedCell.forward` uses this path only
when it is safe (see there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

_ln_backward = torch.ops.aten.native_layer_norm_backward.default


def _ln_forward(a: Tensor, ln: tuple | None):
    """LN(a) with its mean and rstd (None, None without LayerNorm)."""
    if ln is None:
        return a, None, None
    w, b, eps = ln
    return torch.native_layer_norm(a, a.shape[-1:], w, b, eps)


def _ln_input_grad(dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor, ln: tuple | None) -> Tensor:
    if ln is None:
        return dy
    w, b, _ = ln
    return _ln_backward(dy, a, a.shape[-1:], mean, rstd, w, b, [True, False, False])[0]


def _ln_param_grads(dys: list, a: Tensor, means: list, rstds: list, ln: tuple | None):
    """LayerNorm weight and bias gradients over all steps at once (None without LN)."""
    if ln is None:
        return None, None
    w, b, _ = ln
    H = a.shape[-1]
    _, gw, gb = _ln_backward(
        torch.stack(dys).reshape(-1, H), a.reshape(-1, H), [H], torch.stack(means).reshape(-1, 1),
        torch.stack(rstds).reshape(-1, 1), w, b, [False, w is not None, b is not None])
    return gw, gb


def _outer(da: Tensor, h: Tensor) -> Tensor:
    """sum over steps and sequences of da^T h: (T, B, G), (T, B, H) -> (G, H)."""
    return da.reshape(-1, da.shape[-1]).T @ h.reshape(-1, h.shape[-1])


def _ln_args(ln_w, ln_b, eps):
    return None if eps is None else (ln_w, ln_b, eps)


def _steps(v: Tensor) -> tuple:
    """(B, T, ...) -> T tensors (B, ...)."""
    return v.unbind(1)


class GateScan(torch.autograd.Function):
    """ConstGate, SharedGate and DiagGate: h_t = h_{t-1} + s_t (g_t - h_{t-1}).

    ``u`` is the fused recurrent matrix (H + gate width, H); a gate width of 0 means the fixed
    leak ``s`` (ConstGate), 1 a shared scalar gate, H one gate per unit.
    """

    @staticmethod
    def forward(ctx, xproj, u, s, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, G = xproj.shape
        H = u.shape[1]
        ln = _ln_args(ln_w, ln_b, eps)
        uT = u.T
        h = xproj.new_zeros(B, H)
        hs, pres, gs, gates, means, rstds = [h], [], [], [], [], []
        for xp in _steps(xproj):
            pre = torch.addmm(xp, h, uT)
            a, s_pre = pre.split(H, -1) if G > H else (pre, None)
            n, mean, rstd = _ln_forward(a, ln)
            g = torch.tanh(n)
            s_t = torch.sigmoid(s_pre) if G > H else s
            h = torch.lerp(h, g, s_t)
            hs.append(h), pres.append(pre), gs.append(g), gates.append(s_t)
            means.append(mean), rstds.append(rstd)
        ctx.lists = hs, pres, gs, gates, means, rstds
        ctx.save_for_backward(u, ln_w, ln_b)
        ctx.eps = eps
        return torch.stack(hs[1:], 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        u, ln_w, ln_b = ctx.saved_tensors
        ln = _ln_args(ln_w, ln_b, ctx.eps)
        hs, pres, gs, gates, means, rstds = ctx.lists
        H = u.shape[1]
        gated = u.shape[0] > H
        hp, pre, g = torch.stack(hs[:-1]), torch.stack(pres), torch.stack(gs)
        s = torch.stack(gates) if gated else gates[0]
        a = pre[..., :H]
        k = (s * (1 - g * g)).unbind(0)  # d LN-output / dh_t
        keep = (1 - s).unbind(0) if gated else [1 - s] * len(gs)
        if gated:
            kd = ((g - hp) * s * (1 - s)).unbind(0)  # d a_s / dh_t (summed over units if shared)
        a_t = a.unbind(0)
        ghs = _steps(grad_h)
        das, dys = [], []
        dh = ghs[-1]
        for t in range(len(gs) - 1, -1, -1):
            dy = dh * k[t]
            da = _ln_input_grad(dy, a_t[t], means[t], rstds[t], ln)
            if gated:
                ds = dh * kd[t]
                da = torch.cat([da, ds.sum(-1, keepdim=True) if u.shape[0] == H + 1 else ds], -1)
            if t:
                dh = torch.addmm(torch.addcmul(ghs[t - 1], dh, keep[t]), da, u)
            das.append(da), dys.append(dy)
        da, dys = torch.stack(das[::-1]), dys[::-1]
        gw, gb = _ln_param_grads(dys, a, means, rstds, ln)
        return da.transpose(0, 1), _outer(da, hp), None, gw, gb, None


class GRUScan(torch.autograd.Function):
    """GRU: z, r = sigmoid(.), g = tanh(LN(xp_h + (r h_{t-1}) U_h^T)), h = h_{t-1} + z (g - h_{t-1})."""

    @staticmethod
    def forward(ctx, xproj, u_zr, u_h, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, _ = xproj.shape
        H = u_h.shape[0]
        ln = _ln_args(ln_w, ln_b, eps)
        uzrT, uhT = u_zr.T, u_h.T
        h = xproj.new_zeros(B, H)
        hs, zrs, qs, ahs, gs, means, rstds = [h], [], [], [], [], [], []
        for xzr, xh in zip(_steps(xproj[..., :2 * H]), _steps(xproj[..., 2 * H:])):
            zr = torch.sigmoid(torch.addmm(xzr, h, uzrT))
            z, r = zr.split(H, -1)
            q = r * h
            ah = torch.addmm(xh, q, uhT)
            n, mean, rstd = _ln_forward(ah, ln)
            g = torch.tanh(n)
            h = torch.lerp(h, g, z)
            hs.append(h), zrs.append(zr), qs.append(q), ahs.append(ah), gs.append(g)
            means.append(mean), rstds.append(rstd)
        ctx.lists = hs, zrs, qs, ahs, gs, means, rstds
        ctx.save_for_backward(u_zr, u_h, ln_w, ln_b)
        ctx.eps = eps
        return torch.stack(hs[1:], 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        u_zr, u_h, ln_w, ln_b = ctx.saved_tensors
        ln = _ln_args(ln_w, ln_b, ctx.eps)
        hs, zrs, qs, ahs, gs, means, rstds = ctx.lists
        H = u_h.shape[0]
        hp, zr, g = torch.stack(hs[:-1]), torch.stack(zrs), torch.stack(gs)
        z, r = zr[..., :H], zr[..., H:]
        kg = (z * (1 - g * g)).unbind(0)  # d LN-output / dh_t
        kzr = (torch.cat([g - hp, hp], -1) * zr * (1 - zr)).unbind(0)  # d a_(z,r) / d(h_t, q_t)
        keep, r_t = (1 - z).unbind(0), r.unbind(0)
        ghs = _steps(grad_h)
        dzrs, dahs, dys = [], [], []
        dh = ghs[-1]
        for t in range(len(gs) - 1, -1, -1):
            dy = dh * kg[t]
            dah = _ln_input_grad(dy, ahs[t], means[t], rstds[t], ln)
            dq = dah @ u_h
            dzr = torch.cat([dh, dq], -1) * kzr[t]
            if t:
                dh = torch.addmm(torch.addcmul(torch.addcmul(ghs[t - 1], dh, keep[t]), dq, r_t[t]),
                                 dzr, u_zr)
            dzrs.append(dzr), dahs.append(dah), dys.append(dy)
        dzr, dah = torch.stack(dzrs[::-1]), torch.stack(dahs[::-1])
        gw, gb = _ln_param_grads(dys[::-1], torch.stack(ahs), means, rstds, ln)
        return (torch.cat([dzr, dah], -1).transpose(0, 1), _outer(dzr, hp),
                _outer(dah, torch.stack(qs)), gw, gb, None)


class LSTMScan(torch.autograd.Function):
    """LSTM: i, f, o = sigmoid(.), g = tanh(LN(.)), c = f c_{t-1} + i g, h = o tanh(c)."""

    @staticmethod
    def forward(ctx, xproj, u, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, _ = xproj.shape
        H = u.shape[1]
        ln = _ln_args(ln_w, ln_b, eps)
        uT = u.T
        h = c = xproj.new_zeros(B, H)
        hs, cs, ifos, ags, gs, tcs, means, rstds = [h], [c], [], [], [], [], [], []
        for xp in _steps(xproj):
            ifo_pre, ag = torch.addmm(xp, h, uT).split(3 * H, -1)
            ifo = torch.sigmoid(ifo_pre)
            i, f, o = ifo.split(H, -1)
            n, mean, rstd = _ln_forward(ag, ln)
            g = torch.tanh(n)
            c = torch.addcmul(f * c, i, g)
            tc = torch.tanh(c)
            h = o * tc
            hs.append(h), cs.append(c), ifos.append(ifo), ags.append(ag), gs.append(g)
            tcs.append(tc), means.append(mean), rstds.append(rstd)
        ctx.lists = hs, cs, ifos, ags, gs, tcs, means, rstds
        ctx.save_for_backward(u, ln_w, ln_b)
        ctx.eps = eps
        return torch.stack(hs[1:], 1), torch.stack(cs[1:], 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_c):
        u, ln_w, ln_b = ctx.saved_tensors
        ln = _ln_args(ln_w, ln_b, ctx.eps)
        hs, cs, ifos, ags, gs, tcs, means, rstds = ctx.lists
        H = u.shape[1]
        ifo, g, tc, c = torch.stack(ifos), torch.stack(gs), torch.stack(tcs), torch.stack(cs)
        i, f, o = ifo[..., :H], ifo[..., H:2 * H], ifo[..., 2 * H:]
        kifo = (torch.cat([g, c[:-1], tc], -1) * ifo * (1 - ifo)).unbind(0)  # d a_(i,f,o) / d(c, c, h)
        kg = (i * (1 - g * g)).unbind(0)  # d LN-output / dc_t
        kc = (o * (1 - tc * tc)).unbind(0)  # dc_t / dh_t
        f_t = f.unbind(0)
        T = len(gs)
        ghs = None if grad_h is None else _steps(grad_h)
        gcs = None if grad_c is None else _steps(grad_c)
        das, dys = [], []
        dh = torch.zeros_like(gs[0]) if ghs is None else ghs[-1]
        dc = torch.zeros_like(gs[0])
        for t in range(T - 1, -1, -1):
            if gcs is not None:
                dc = dc + gcs[t]
            dc = torch.addcmul(dc, dh, kc[t])
            dy = dc * kg[t]
            da = torch.cat([torch.cat([dc, dc, dh], -1) * kifo[t],
                            _ln_input_grad(dy, ags[t], means[t], rstds[t], ln)], -1)
            dc = dc * f_t[t]
            dh = da @ u if ghs is None or not t else torch.addmm(ghs[t - 1], da, u)
            das.append(da), dys.append(dy)
        da = torch.stack(das[::-1])
        gw, gb = _ln_param_grads(dys[::-1], torch.stack(ags), means, rstds, ln)
        return da.transpose(0, 1), _outer(da, torch.stack(hs[:-1])), gw, gb, None


def active() -> bool:
    """Whether the fast path may run: grad mode on, no torch.func transform, no dual tensors."""
    return (torch.is_grad_enabled() and torch._C._functorch.peek_interpreter_stack() is None
            and torch.autograd.forward_ad._current_level < 0)


def scan(cell: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """``cell.forward(x)`` through the family's Function (the cell's ``_bptt`` names it)."""
    xproj = F.linear(x, torch.cat(cell._input_weights(), 0), torch.cat(cell._input_biases(), 0))
    norm = cell.norm
    ln = (norm.weight, norm.bias, norm.eps) if isinstance(norm, nn.LayerNorm) else (None, None, None)
    if cell._bptt == "gate":
        hidden = GateScan.apply(xproj, cell._recurrent(), cell.s, *ln)
        return hidden, hidden
    if cell._bptt == "gru":
        hidden = GRUScan.apply(xproj, cell._recurrent(), cell.U_h, *ln)
        return hidden, hidden
    if cell._bptt == "lstm":
        return LSTMScan.apply(xproj, cell._recurrent(), *ln)
    raise ValueError(f"no fast scan for {type(cell).__name__} (_bptt = {cell._bptt!r})")
