"""Hand-written backpropagation through time for the cells of METHOD §2 (training fast path).

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

aten = torch.ops.aten


def _ln_forward(a: Tensor, ln: tuple | None):
    """LN(a) with its mean and rstd (None, None without LayerNorm)."""
    if ln is None:
        return a, None, None
    w, b, eps = ln
    return aten.native_layer_norm(a, a.shape[-1:], w, b, eps)


def _ln_input_grad(dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor, ln: tuple) -> Tensor:
    w, b, _ = ln
    return aten.native_layer_norm_backward(dy, a, a.shape[-1:], mean, rstd, w, b,
                                           [True, False, False])[0]


def _ln_param_grads(dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor, ln: tuple | None):
    """LayerNorm weight and bias gradients over all steps at once (None without LN)."""
    if ln is None:
        return None, None
    w, b, _ = ln
    H = a.shape[-1]
    _, gw, gb = aten.native_layer_norm_backward(
        dy.reshape(-1, H), a.reshape(-1, H), [H], mean.reshape(-1, 1), rstd.reshape(-1, 1), w, b,
        [False, w is not None, b is not None])
    return gw, gb


def _outer(da: Tensor, h: Tensor) -> Tensor:
    """sum over steps and sequences of da^T h: (T, B, G), (T, B, H) -> (G, H)."""
    return da.reshape(-1, da.shape[-1]).T @ h.reshape(-1, h.shape[-1])


def _ln_args(ln_w, ln_b, eps):
    return None if eps is None else (ln_w, ln_b, eps)


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
        xp, uT = xproj.transpose(0, 1), u.T
        h = xproj.new_zeros(B, H)
        hs, pres, gs, gates, means, rstds = [h], [], [], [], [], []
        for t in range(T):
            pre = torch.addmm(xp[t], h, uT)
            n, mean, rstd = _ln_forward(pre[:, :H], ln)
            g = torch.tanh(n)
            s_t = torch.sigmoid(pre[:, H:]) if G > H else s
            h = h + s_t * (g - h)
            hs.append(h), pres.append(pre), gs.append(g), gates.append(s_t)
            means.append(mean), rstds.append(rstd)
        ctx.hs, ctx.pre, ctx.g = torch.stack(hs), torch.stack(pres), torch.stack(gs)
        ctx.s = torch.stack(gates) if G > H else s
        if ln is not None:
            ctx.mean, ctx.rstd = torch.stack(means), torch.stack(rstds)
        ctx.save_for_backward(u, ln_w, ln_b)
        ctx.eps = eps
        return torch.stack(hs[1:], 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        u, ln_w, ln_b = ctx.saved_tensors
        ln = _ln_args(ln_w, ln_b, ctx.eps)
        hs, pre, g, s = ctx.hs, ctx.pre, ctx.g, ctx.s
        T, B, G = pre.shape
        H = u.shape[1]
        gh = grad_h.transpose(0, 1)
        hp = hs[:-1]
        k = s * (1 - g * g)  # dLN-output / dh_t
        keep = (1 - s).expand(T, 1, 1) if s.dim() == 0 else 1 - s
        if G > H:
            sd = s * (1 - s)
            diff = g - hp
        da = pre.new_empty(T, B, G)
        dy = pre.new_empty(T, B, H)
        dh = torch.zeros_like(gh[0])
        for t in range(T - 1, -1, -1):
            dh = dh + gh[t]
            torch.mul(dh, k[t], out=dy[t])
            if ln is None:
                da[t, :, :H] = dy[t]
            else:
                da[t, :, :H] = _ln_input_grad(dy[t], pre[t, :, :H], ctx.mean[t], ctx.rstd[t], ln)
            if G > H:
                ds = dh * diff[t]
                if G == H + 1:
                    ds = ds.sum(-1, keepdim=True)
                torch.mul(ds, sd[t], out=da[t, :, H:])
            dh = torch.addmm(dh * keep[t], da[t], u)
        gw, gb = _ln_param_grads(dy, pre[..., :H], getattr(ctx, "mean", None),
                                 getattr(ctx, "rstd", None), ln)
        return da.transpose(0, 1), _outer(da, hp), None, gw, gb, None


class GRUScan(torch.autograd.Function):
    """GRU: z, r = sigmoid(.), g = tanh(LN(xp_h + (r h_{t-1}) U_h^T)), h = h_{t-1} + z (g - h_{t-1})."""

    @staticmethod
    def forward(ctx, xproj, u_zr, u_h, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, _ = xproj.shape
        H = u_h.shape[0]
        ln = _ln_args(ln_w, ln_b, eps)
        xp, uzrT, uhT = xproj.transpose(0, 1), u_zr.T, u_h.T
        h = xproj.new_zeros(B, H)
        hs, zrs, qs, ahs, gs, means, rstds = [h], [], [], [], [], [], []
        for t in range(T):
            zr = torch.sigmoid(torch.addmm(xp[t, :, :2 * H], h, uzrT))
            q = zr[:, H:] * h
            ah = torch.addmm(xp[t, :, 2 * H:], q, uhT)
            n, mean, rstd = _ln_forward(ah, ln)
            g = torch.tanh(n)
            h = h + zr[:, :H] * (g - h)
            hs.append(h), zrs.append(zr), qs.append(q), ahs.append(ah), gs.append(g)
            means.append(mean), rstds.append(rstd)
        ctx.hs, ctx.zr, ctx.q = torch.stack(hs), torch.stack(zrs), torch.stack(qs)
        ctx.ah, ctx.g = torch.stack(ahs), torch.stack(gs)
        if ln is not None:
            ctx.mean, ctx.rstd = torch.stack(means), torch.stack(rstds)
        ctx.save_for_backward(u_zr, u_h, ln_w, ln_b)
        ctx.eps = eps
        return torch.stack(hs[1:], 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        u_zr, u_h, ln_w, ln_b = ctx.saved_tensors
        ln = _ln_args(ln_w, ln_b, ctx.eps)
        hs, zr, ah, g = ctx.hs, ctx.zr, ctx.ah, ctx.g
        T, B, H = g.shape
        gh = grad_h.transpose(0, 1)
        hp = hs[:-1]
        z, r = zr[..., :H], zr[..., H:]
        kz = (g - hp) * z * (1 - z)  # d a_z / dh_t
        kg = z * (1 - g * g)  # d LN-output / dh_t
        kr = hp * r * (1 - r)  # d a_r / dq
        keep = 1 - z
        da = ah.new_empty(T, B, 3 * H)
        dy = ah.new_empty(T, B, H)
        dh = torch.zeros_like(gh[0])
        for t in range(T - 1, -1, -1):
            dh = dh + gh[t]
            torch.mul(dh, kz[t], out=da[t, :, :H])
            torch.mul(dh, kg[t], out=dy[t])
            if ln is None:
                da[t, :, 2 * H:] = dy[t]
            else:
                da[t, :, 2 * H:] = _ln_input_grad(dy[t], ah[t], ctx.mean[t], ctx.rstd[t], ln)
            dq = da[t, :, 2 * H:] @ u_h
            torch.mul(dq, kr[t], out=da[t, :, H:2 * H])
            dh = torch.addmm(torch.addcmul(dh * keep[t], dq, r[t]), da[t, :, :2 * H], u_zr)
        gw, gb = _ln_param_grads(dy, ah, getattr(ctx, "mean", None), getattr(ctx, "rstd", None), ln)
        return (da.transpose(0, 1), _outer(da[..., :2 * H], hp), _outer(da[..., 2 * H:], ctx.q),
                gw, gb, None)


class LSTMScan(torch.autograd.Function):
    """LSTM: i, f, o = sigmoid(.), g = tanh(LN(.)), c = f c_{t-1} + i g, h = o tanh(c)."""

    @staticmethod
    def forward(ctx, xproj, u, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, _ = xproj.shape
        H = u.shape[1]
        ln = _ln_args(ln_w, ln_b, eps)
        xp, uT = xproj.transpose(0, 1), u.T
        h = c = xproj.new_zeros(B, H)
        hs, cs, pres, ifos, gs, tcs, means, rstds = [h], [c], [], [], [], [], [], []
        for t in range(T):
            pre = torch.addmm(xp[t], h, uT)
            ifo = torch.sigmoid(pre[:, :3 * H])
            n, mean, rstd = _ln_forward(pre[:, 3 * H:], ln)
            g = torch.tanh(n)
            c = ifo[:, H:2 * H] * c + ifo[:, :H] * g
            tc = torch.tanh(c)
            h = ifo[:, 2 * H:] * tc
            hs.append(h), cs.append(c), pres.append(pre), ifos.append(ifo), gs.append(g)
            tcs.append(tc), means.append(mean), rstds.append(rstd)
        ctx.hs, ctx.cs, ctx.pre = torch.stack(hs), torch.stack(cs), torch.stack(pres)
        ctx.ifo, ctx.g, ctx.tc = torch.stack(ifos), torch.stack(gs), torch.stack(tcs)
        if ln is not None:
            ctx.mean, ctx.rstd = torch.stack(means), torch.stack(rstds)
        ctx.save_for_backward(u, ln_w, ln_b)
        ctx.eps = eps
        return torch.stack(hs[1:], 1), torch.stack(cs[1:], 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_c):
        u, ln_w, ln_b = ctx.saved_tensors
        ln = _ln_args(ln_w, ln_b, ctx.eps)
        pre, ifo, g, tc, cs = ctx.pre, ctx.ifo, ctx.g, ctx.tc, ctx.cs
        T, B, G = pre.shape
        H = G // 4
        i, f, o = ifo[..., :H], ifo[..., H:2 * H], ifo[..., 2 * H:]
        ki = g * i * (1 - i)  # d a_i / dc_t
        kf = cs[:-1] * f * (1 - f)  # d a_f / dc_t
        ko = tc * o * (1 - o)  # d a_o / dh_t
        kg = i * (1 - g * g)  # d LN-output / dc_t
        kc = o * (1 - tc * tc)  # dc_t / dh_t
        zero = pre.new_zeros(B, T, H)
        gh = (zero if grad_h is None else grad_h).transpose(0, 1)
        gc = (zero if grad_c is None else grad_c).transpose(0, 1)
        da = pre.new_empty(T, B, G)
        dy = pre.new_empty(T, B, H)
        dh = dc = pre.new_zeros(B, H)
        for t in range(T - 1, -1, -1):
            dh = dh + gh[t]
            dc = torch.addcmul(dc + gc[t], dh, kc[t])
            torch.mul(dc, ki[t], out=da[t, :, :H])
            torch.mul(dc, kf[t], out=da[t, :, H:2 * H])
            torch.mul(dh, ko[t], out=da[t, :, 2 * H:3 * H])
            torch.mul(dc, kg[t], out=dy[t])
            if ln is None:
                da[t, :, 3 * H:] = dy[t]
            else:
                da[t, :, 3 * H:] = _ln_input_grad(dy[t], pre[t, :, 3 * H:], ctx.mean[t], ctx.rstd[t], ln)
            dc = dc * f[t]
            dh = da[t] @ u
        gw, gb = _ln_param_grads(dy, pre[..., 3 * H:], getattr(ctx, "mean", None),
                                 getattr(ctx, "rstd", None), ln)
        return da.transpose(0, 1), _outer(da, ctx.hs[:-1]), gw, gb, None


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
