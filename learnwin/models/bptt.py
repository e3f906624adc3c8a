"""Hand-written backpropagation through time for the cells of docs/method.md §2 (training fast path).

The step-by-step scan of :mod:`learnwin.models.cells` lets autograd record every small op of every
step; at the default size most of a training step is that per-op overhead. Here one
``torch.autograd.Function`` per cell family runs the whole sequence: the forward loop runs
without autograd and keeps the gate activations, the backward loop runs the recurrence by
hand (a handful of fused ops per step), and the gradients of the recurrent matrices and of
the LayerNorm affine parameters are one batched op over all steps each. The input
projection ``x W_in^T + b_in`` runs inside too, time-major, as one matmul over all steps, and
so do its weight, bias and input gradients (:func:`_project_grads`).

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
differentiable again (double backward raises). Each cell's ``fast_forward`` applies its family's
Function to :func:`projection` and :func:`layer_norm`; :meth:`learnwin.models.cells.GatedCell.forward`
takes that path only when it is safe (see there).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

_ln_backward = torch.ops.aten.native_layer_norm_backward.default


def _ln_forward(a: Tensor, ln: tuple | None):
    """LN(a) with its mean and rstd (None, None without LayerNorm)."""
    if ln is None:
        return a, None, None
    w, b, eps = ln
    return torch.native_layer_norm(a, a.shape[-1:], w, b, eps)


def _ln_input_grad(dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor, ln: tuple) -> Tensor:
    w, b, _ = ln
    return _ln_backward(dy, a, a.shape[-1:], mean, rstd, w, b, [True, False, False])[0]


def _ln_param_grads(dy: Tensor, a: Tensor, means: list, rstds: list, ln: tuple | None):
    """LayerNorm weight and bias gradients over all steps at once (None without LN)."""
    if ln is None:
        return None, None
    w, b, _ = ln
    H = a.shape[-1]
    _, gw, gb = _ln_backward(
        dy.reshape(-1, H), a.reshape(-1, H), [H], torch.stack(means).reshape(-1, 1),
        torch.stack(rstds).reshape(-1, 1), w, b, [False, w is not None, b is not None])
    return gw, gb


def _outer(da: Tensor, h: Tensor) -> Tensor:
    """sum over steps and sequences of da^T h: (T, B, G), (T, B, H) -> (G, H)."""
    return da.reshape(-1, da.shape[-1]).T @ h.reshape(-1, h.shape[-1])


def _ln_args(ln_w, ln_b, eps):
    return None if eps is None else (ln_w, ln_b, eps)


def _project(x: Tensor, w_in: Tensor, b_in: Tensor) -> tuple[Tensor, Tensor]:
    """Time-major inputs (T, B, D) and their projection x W_in^T + b_in, (T, B, G), one matmul."""
    x_tm = x.transpose(0, 1).contiguous()
    T, B, D = x_tm.shape
    return x_tm, torch.addmm(b_in, x_tm.view(-1, D), w_in.T).view(T, B, -1)


def _project_grads(needs: tuple, da: Tensor, x_tm: Tensor, w_in: Tensor) -> tuple:
    """Gradients of x, W_in and b_in (the Function's first three inputs, ``needs`` says which)
    from the pre-activation gradient da (T, B, G), each one op over all steps. W_in's is
    (x^T da)^T: autograd's da^T x has the small input size D as its output width, a slow matmul
    shape (docs/performance.md, "Training step speed")."""
    need_x, need_w, need_b = needs[:3]
    flat = da.view(-1, da.shape[-1])
    dx = (flat @ w_in).view(x_tm.shape).transpose(0, 1) if need_x else None
    dw = (x_tm.view(-1, x_tm.shape[-1]).T @ flat).T.contiguous() if need_w else None
    return dx, dw, flat.sum(0) if need_b else None


def _normal(*ts):
    """Copies of inference-mode results that autograd may hold (None passes through)."""
    return tuple(None if t is None else t.clone() for t in ts)


BLOCK_BYTES = 256 << 10
"""Bytes per row buffer of one block of time steps in the backward (see :func:`_blocks`)."""


def _blocks(T: int, row_bytes: int):
    """Blocks (lo, hi) of time steps, last first, for the backward's per-step factors.

    The factors (gate derivatives) are elementwise products over (T, B, .) buffers, memory-bound
    once those outgrow the cache; computed whole, they made the fast path slower than the
    reference at T 256, H 128 (docs/performance.md, "Training step speed"). Computed block by block,
    right before the loop consumes them, they stay in cache. A block holds about BLOCK_BYTES of
    the widest buffer (``row_bytes`` per step), a fraction of a core's L2 cache. Elementwise
    products do not depend on the blocking: any block size gives the same bits.
    """
    n = max(1, BLOCK_BYTES // row_bytes)
    for hi in range(T, 0, -n):
        yield max(hi - n, 0), hi


def _steps(v: Tensor) -> tuple:
    """(B, T, ...) -> T tensors (B, ...)."""
    return v.unbind(1)


def _cols(v: Tensor, start: int, stop: int) -> tuple:
    """Columns start:stop of a (T, B, G) buffer, as T views (B, stop - start) to write into."""
    return v[..., start:stop].unbind(0)


def _states(like: Tensor, T: int, H: int) -> Tensor:
    """(T + 1, B, H) buffer of states, entry 0 the zero initial state."""
    v = like.new_empty(T + 1, like.shape[0], H)
    v[0].zero_()
    return v


class GateScan(torch.autograd.Function):
    """ConstGate, SharedGate and DiagGate: h_t = h_{t-1} + s_t (g_t - h_{t-1}).

    ``u`` is the fused recurrent matrix (H + gate width, H); a gate width of 0 means the fixed
    leak ``s`` (ConstGate), 1 a shared scalar gate, H one gate per unit.
    """

    @staticmethod
    def forward(ctx, x, w_in, b_in, u, s, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, _ = x.shape
        G, H = w_in.shape[0], u.shape[1]
        ln = _ln_args(ln_w, ln_b, eps)
        hs = _states(x, T, H)  # the output: allocated outside inference mode
        with torch.inference_mode():
            ctx.x, xproj = _project(x, w_in, b_in)
            uT = u.T.contiguous()
            pre = x.new_empty(T, B, G)  # pre-activations; the gate columns become the gate
            gs = x.new_empty(T, B, H)
            pre_t, a_t, h_t, g_t = pre.unbind(0), _cols(pre, 0, H), hs.unbind(0), gs.unbind(0)
            s_t = _cols(pre, H, G) if G > H else (s,) * T
            means, rstds = [], []
            for t, xp in enumerate(xproj.unbind(0)):
                torch.addmm(xp, h_t[t], uT, out=pre_t[t])
                if G > H:
                    s_t[t].sigmoid_()
                n, mean, rstd = _ln_forward(a_t[t], ln)
                torch.lerp(h_t[t], torch.tanh(n, out=g_t[t]), s_t[t], out=h_t[t + 1])
                means.append(mean), rstds.append(rstd)
        ctx.buffers = pre, hs, gs, means, rstds
        ctx.save_for_backward(w_in, u, s, ln_w, ln_b)
        ctx.eps = eps
        return hs[1:].transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        w_in, u, s, ln_w, ln_b = ctx.saved_tensors
        da = torch.empty_like(ctx.buffers[0])  # the pre-activation gradient: outside inference mode
        with torch.inference_mode():
            grads = GateScan._backward(da, grad_h, u, s, _ln_args(ln_w, ln_b, ctx.eps), *ctx.buffers)
        return (*_project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *_normal(*grads))

    @staticmethod
    def _backward(da, grad_h, u, s, ln, pre, hs, g, means, rstds):
        T, _, G = pre.shape
        H = u.shape[1]
        hp, a = hs[:-1], pre[..., :H].contiguous()
        da_t, a_t, ghs = da.unbind(0), a.unbind(0), _steps(grad_h)
        dys = torch.empty_like(g)  # d LN-output of every step
        dy_t = dys.unbind(0)
        dh = ghs[-1]
        for lo, hi in _blocks(T, pre[0].nbytes):
            k, keep, kd = GateScan._factors(s, pre[lo:hi], hp[lo:hi], g[lo:hi])
            for t in range(hi - 1, lo - 1, -1):
                j = t - lo
                dy = torch.mul(dh, k[j], out=dy_t[t])
                parts = [_ln_input_grad(dy, a_t[t], means[t], rstds[t], ln) if ln else dy]
                if G > H:  # the shared gate's a_s gradient sums over units
                    parts.append((dh * kd[j]).sum(-1, keepdim=True) if G == H + 1 else dh * kd[j])
                torch.cat(parts, -1, out=da_t[t])
                if t:
                    dh = torch.addmm(torch.addcmul(ghs[t - 1], dh, keep[j]), da_t[t], u)
        gw, gb = _ln_param_grads(dys, a, means, rstds, ln)
        return _outer(da, hp), None, gw, gb, None

    @staticmethod
    def _factors(s, pre, hp, g):
        """Per-step d LN-output / dh_t, 1 - s_t and d a_s / dh_t (None for ConstGate) of a block."""
        H = g.shape[-1]
        n = g.shape[0]
        if pre.shape[-1] == H:  # ConstGate: the fixed leak
            return (s * (1 - g * g)).unbind(0), (1 - s,) * n, None
        s = pre[..., H:]
        return (s * (1 - g * g)).unbind(0), (1 - s).unbind(0), ((g - hp) * s * (1 - s)).unbind(0)


class GRUScan(torch.autograd.Function):
    """GRU: z, r = sigmoid(.), g = tanh(LN(xp_h + (r h_{t-1}) U_h^T)), h = h_{t-1} + z (g - h_{t-1})."""

    @staticmethod
    def forward(ctx, x, w_in, b_in, u_zr, u_h, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, _ = x.shape
        H = u_h.shape[0]
        ln = _ln_args(ln_w, ln_b, eps)
        hs = _states(x, T, H)  # the output: allocated outside inference mode
        with torch.inference_mode():
            ctx.x, xproj = _project(x, w_in, b_in)
            uzrT, uhT = u_zr.T.contiguous(), u_h.T.contiguous()
            zr, ah = x.new_empty(T, B, 2 * H), x.new_empty(T, B, H)  # zr: gates, ah: LN input
            qs, gs = x.new_empty(T, B, H), x.new_empty(T, B, H)
            zr_t, z_t, r_t, ah_t = zr.unbind(0), _cols(zr, 0, H), _cols(zr, H, 2 * H), ah.unbind(0)
            h_t, q_t, g_t = hs.unbind(0), qs.unbind(0), gs.unbind(0)
            xzr, xh = _cols(xproj, 0, 2 * H), _cols(xproj, 2 * H, 3 * H)
            means, rstds = [], []
            for t in range(T):
                torch.addmm(xzr[t], h_t[t], uzrT, out=zr_t[t]).sigmoid_()
                torch.addmm(xh[t], torch.mul(r_t[t], h_t[t], out=q_t[t]), uhT, out=ah_t[t])
                n, mean, rstd = _ln_forward(ah_t[t], ln)
                torch.lerp(h_t[t], torch.tanh(n, out=g_t[t]), z_t[t], out=h_t[t + 1])
                means.append(mean), rstds.append(rstd)
        ctx.buffers = zr, ah, hs, qs, gs, means, rstds
        ctx.save_for_backward(w_in, u_zr, u_h, ln_w, ln_b)
        ctx.eps = eps
        return hs[1:].transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        w_in, u_zr, u_h, ln_w, ln_b = ctx.saved_tensors
        zr = ctx.buffers[0]
        da = zr.new_empty(*zr.shape[:2], 3 * u_h.shape[0])  # pre-activation gradient, outside inference mode
        with torch.inference_mode():
            grads = GRUScan._backward(da, grad_h, u_zr, u_h, _ln_args(ln_w, ln_b, ctx.eps), *ctx.buffers)
        return (*_project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *_normal(*grads))

    @staticmethod
    def _backward(da, grad_h, u_zr, u_h, ln, zr, ah, hs, qs, g, means, rstds):
        T, _, H = g.shape
        hp = hs[:-1]
        dzr = torch.empty_like(zr)
        dzr_t, ah_t, ghs = dzr.unbind(0), ah.unbind(0), _steps(grad_h)
        dahs, dys = [], torch.empty_like(g)  # dys: d LN-output of every step
        dy_t = dys.unbind(0)
        dh = ghs[-1]
        for lo, hi in _blocks(T, zr[0].nbytes):
            kg, kzr, keep, r_t = GRUScan._factors(zr[lo:hi], hp[lo:hi], g[lo:hi])
            for t in range(hi - 1, lo - 1, -1):
                j = t - lo
                dy = torch.mul(dh, kg[j], out=dy_t[t])
                dah = _ln_input_grad(dy, ah_t[t], means[t], rstds[t], ln) if ln else dy
                dq = dah @ u_h
                torch.cat([dh, dq], -1, out=dzr_t[t]).mul_(kzr[j])
                if t:
                    dh = torch.addmm(torch.addcmul(ghs[t - 1], dh, keep[j]).addcmul_(dq, r_t[j]), dzr_t[t], u_zr)
                dahs.append(dah)
        dah = torch.stack(dahs[::-1])
        torch.cat([dzr, dah], -1, out=da)
        gw, gb = _ln_param_grads(dys, ah, means, rstds, ln)
        return _outer(dzr, hp), _outer(dah, qs), gw, gb, None

    @staticmethod
    def _factors(zr, hp, g):
        """Per-step d LN-output / dh_t, d a_(z,r) / d(h_t, q_t), 1 - z_t and r_t of a block."""
        H = g.shape[-1]
        z, r = zr[..., :H], zr[..., H:]
        kzr = torch.cat([g - hp, hp], -1) * zr * (1 - zr)
        return (z * (1 - g * g)).unbind(0), kzr.unbind(0), (1 - z).unbind(0), r.unbind(0)


class LSTMScan(torch.autograd.Function):
    """LSTM: i, f, o = sigmoid(.), g = tanh(LN(.)), c = f c_{t-1} + i g, h = o tanh(c)."""

    @staticmethod
    def forward(ctx, x, w_in, b_in, u, ln_w, ln_b, eps):
        ctx.set_materialize_grads(False)
        B, T, _ = x.shape
        H = u.shape[1]
        ln = _ln_args(ln_w, ln_b, eps)
        hs, cs = _states(x, T, H), _states(x, T, H)  # the outputs: outside inference mode
        with torch.inference_mode():
            ctx.x, xproj = _project(x, w_in, b_in)
            uT = u.T.contiguous()
            pre = x.new_empty(T, B, 4 * H)  # pre-activations; the i, f, o columns become the gates
            gs, tcs = x.new_empty(T, B, H), x.new_empty(T, B, H)
            pre_t, ifo_t, ag_t = pre.unbind(0), _cols(pre, 0, 3 * H), _cols(pre, 3 * H, 4 * H)
            i_t, f_t, o_t = _cols(pre, 0, H), _cols(pre, H, 2 * H), _cols(pre, 2 * H, 3 * H)
            h_t, c_t, g_t, tc_t = hs.unbind(0), cs.unbind(0), gs.unbind(0), tcs.unbind(0)
            means, rstds = [], []
            for t, xp in enumerate(xproj.unbind(0)):
                torch.addmm(xp, h_t[t], uT, out=pre_t[t])
                ifo_t[t].sigmoid_()
                n, mean, rstd = _ln_forward(ag_t[t], ln)
                c = torch.mul(f_t[t], c_t[t], out=c_t[t + 1]).addcmul_(i_t[t], torch.tanh(n, out=g_t[t]))
                torch.mul(o_t[t], torch.tanh(c, out=tc_t[t]), out=h_t[t + 1])
                means.append(mean), rstds.append(rstd)
        ctx.buffers = pre, hs, cs, gs, tcs, means, rstds
        ctx.save_for_backward(w_in, u, ln_w, ln_b)
        ctx.eps = eps
        return hs[1:].transpose(0, 1), cs[1:].transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_c):
        w_in, u, ln_w, ln_b = ctx.saved_tensors
        da = torch.empty_like(ctx.buffers[0])  # the pre-activation gradient: outside inference mode
        with torch.inference_mode():
            grads = LSTMScan._backward(da, grad_h, grad_c, u, _ln_args(ln_w, ln_b, ctx.eps), *ctx.buffers)
        return (*_project_grads(ctx.needs_input_grad, da, ctx.x, w_in), *_normal(*grads))

    @staticmethod
    def _backward(da, grad_h, grad_c, u, ln, pre, hs, cs, g, tc, means, rstds):
        T, _, H = g.shape
        ag = pre[..., 3 * H:].contiguous()
        ghs = None if grad_h is None else _steps(grad_h)
        gcs = None if grad_c is None else _steps(grad_c)
        da_t, ag_t = da.unbind(0), ag.unbind(0)
        dys = torch.empty_like(g)  # d LN-output of every step
        dy_t = dys.unbind(0)
        dh = torch.zeros_like(g[0]) if ghs is None else ghs[-1]
        dc = torch.zeros_like(g[0])
        for lo, hi in _blocks(T, pre[0].nbytes):
            k, kg, kc, f_t = LSTMScan._factors(pre[lo:hi], cs[lo:hi], g[lo:hi], tc[lo:hi])
            for t in range(hi - 1, lo - 1, -1):
                j = t - lo
                if gcs is not None:
                    dc = dc + gcs[t]
                dc = torch.addcmul(dc, dh, kc[j])
                dy = torch.mul(dc, kg[j], out=dy_t[t])
                dx = _ln_input_grad(dy, ag_t[t], means[t], rstds[t], ln) if ln else dy
                torch.cat([dc, dc, dh, dx], -1, out=da_t[t]).mul_(k[j])
                if t:
                    dc = dc * f_t[j]
                    dh = da_t[t] @ u if ghs is None else torch.addmm(ghs[t - 1], da_t[t], u)
        gw, gb = _ln_param_grads(dys, ag, means, rstds, ln)
        return _outer(da, hs[:-1]), gw, gb, None

    @staticmethod
    def _factors(pre, c_prev, g, tc):
        """Per-step d a / d(c, c, h, LN input), d LN-output / dc_t, dc_t / dh_t and f_t of a block."""
        H = g.shape[-1]
        ifo = pre[..., :3 * H]
        k = torch.empty_like(pre)  # d a_(i,f,o) / d(c, c, h), and 1 for the LN input
        for j, v in enumerate((g, c_prev, tc)):  # (v sigma) (1 - sigma): the reference's rounding
            torch.mul(v, ifo[..., j * H:(j + 1) * H], out=k[..., j * H:(j + 1) * H])
        k[..., :3 * H].mul_(1 - ifo)
        k[..., 3 * H:].fill_(1)
        kg = ifo[..., :H] * (1 - g * g)
        kc = ifo[..., 2 * H:] * (1 - tc * tc)
        return k.unbind(0), kg.unbind(0), kc.unbind(0), ifo[..., H:2 * H].unbind(0)


def active() -> bool:
    """Whether the fast path may run: grad mode on, no torch.func transform, no dual tensors."""
    return (torch.is_grad_enabled() and torch._C._functorch.peek_interpreter_stack() is None
            and torch.autograd.forward_ad._current_level < 0)


def projection(cell: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The first three inputs of every Function here: x and the cell's fused input weight and bias."""
    return x, torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0)


def layer_norm(norm: nn.Module) -> tuple:
    """The last three inputs of every Function here: LayerNorm weight, bias, eps (None without LN)."""
    return (norm.weight, norm.bias, norm.eps) if isinstance(norm, nn.LayerNorm) else (None, None, None)
