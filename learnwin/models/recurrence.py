"""The hand-written recurrence of the gated cells (docs/method.md §2): per family one forward and one
backward step, the only hand-written per-step math of training.

Three families: the gate cells (ConstGate, SharedGate, DiagGate: h_t = h_{t-1} + s_t (g_t - h_{t-1})),
the GRU and the LSTM. Each has

* ``*Weights``: the recurrent matrices (U, and U^T for the forward), the fixed leak, the LayerNorm;
* ``*Step``: one step's tensors, written by ``*_forward_step`` and read by the backward;
* ``*_factors``: the backward's elementwise factors (gate derivatives) of one step, or of a block
  of steps at once (any leading shape: elementwise, so the same bits either way);
* ``*Grads``: where ``*_backward_step`` writes a step's gradients; it returns the carried ones.

A step writes into the tensors it is given (``out=``, no allocation): the eager driver
(:mod:`learnwin.models.bptt`, the CPU) passes views of its time-major buffers, the compiled driver
(:mod:`learnwin.models.fused`, CUDA) fresh tensors inside the compiled step. A cell's ``step``
(:mod:`learnwin.models.cells`) stays the definition; tests/test_recurrence.py holds these steps to
it. The order of every sum and product is that of the recorded smoke digest
(tests/test_smoke_digest.py): a reordering moves its float32 bits.

The sequence-level parts both drivers share are here too: the input projection and its gradients,
the LayerNorm affine gradients and the recurrent matrices' gradients, each one op over all steps.

Members: every step and sequence-level part also runs E networks of one shape at once
(:mod:`learnwin.models.ensemble`) along a leading member dimension, told by the weights' shape:
recurrent matrices (E, rows, H), a step's tensors (E, B, .), time-major buffers (T, E, B, .), and
the per-network vectors (the fixed leak, the input bias, the LayerNorm affine) (E, 1, .), so they
broadcast against a step's. The matmuls of a step are then batched over the members (baddbmm);
without the member dimension every op is that of the recorded digest.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

_ln_backward = torch.ops.aten.native_layer_norm_backward.default


class Norm(NamedTuple):
    """The LayerNorm on the candidate's pre-activation (docs/method.md §2); ``members``: its affine is
    per member, (E, 1, H) (module docstring), said once here, not asked per step."""

    weight: Tensor | None
    bias: Tensor | None
    eps: float
    members: bool = False


def norm(weight: Tensor | None, bias: Tensor | None, eps: float | None) -> Norm | None:
    """The LayerNorm of a Function's last three inputs (None without LayerNorm: eps None)."""
    return None if eps is None else Norm(weight, bias, eps, weight is not None and weight.dim() > 1)


def ln_forward(a: Tensor, ln: Norm | None):
    """LN(a) with its mean and rstd (a, None, None without LayerNorm)."""
    if ln is None:
        return a, None, None
    if not ln.members:
        return torch.native_layer_norm(a, a.shape[-1:], ln.weight, ln.bias, ln.eps)
    n, mean, rstd = torch.native_layer_norm(a, a.shape[-1:], None, None, ln.eps)
    return n * ln.weight if ln.bias is None else torch.addcmul(ln.bias, n, ln.weight), mean, rstd


def _ln_input_grad(dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor, ln: Norm | None) -> Tensor:
    """d a from d LN(a) (dy itself without LayerNorm)."""
    if ln is None:
        return dy
    if ln.members:  # the affine's part here, the normalisation's in the ATen backward
        return _ln_backward(dy * ln.weight, a, a.shape[-1:], mean, rstd, None, None, [True, False, False])[0]
    return _ln_backward(dy, a, a.shape[-1:], mean, rstd, ln.weight, ln.bias, [True, False, False])[0]


def ln_param_grads(dy: Tensor, a: Tensor, means, rstds, ln: Norm | None):
    """LayerNorm weight and bias gradients over all steps at once, from the per-step means and rstds
    (None, None without LayerNorm); per member (E, 1, H) where the affine is."""
    if ln is None:
        return None, None
    w, b = ln.weight, ln.bias
    if ln.members:  # dy, a (T, E, B, H): sums over steps and sequences
        xhat = (a - torch.stack(means)) * torch.stack(rstds)
        return (dy * xhat).sum(0).sum(-2, keepdim=True), None if b is None else dy.sum(0).sum(-2, keepdim=True)
    H = a.shape[-1]
    _, gw, gb = _ln_backward(
        dy.reshape(-1, H), a.reshape(-1, H), [H], torch.stack(means).reshape(-1, 1),
        torch.stack(rstds).reshape(-1, 1), w, b, [False, w is not None, b is not None])
    return gw, gb


def _mm(bias: Tensor, a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """bias + a b (into ``out``): addmm, or baddbmm over the member dimension (b (E, ., .))."""
    return (torch.addmm if b.dim() == 2 else torch.baddbmm)(bias, a, b, out=out)


def outer(da: Tensor, h: Tensor) -> Tensor:
    """A recurrent matrix's gradient, the sum over steps and sequences of da^T h: (T, B, G), (T, B, H) -> (G, H);
    per member (T, E, B, .) -> (E, G, H)."""
    if da.dim() == 4:
        E = da.shape[1]
        return torch.bmm(da.transpose(0, 1).reshape(E, -1, da.shape[-1]).mT, h.transpose(0, 1).reshape(E, -1, h.shape[-1]))
    return da.reshape(-1, da.shape[-1]).T @ h.reshape(-1, h.shape[-1])


def project(x: Tensor, w_in: Tensor, b_in: Tensor) -> tuple[Tensor, Tensor]:
    """Time-major inputs (T, B, D) and their projection x W_in^T + b_in, (T, B, G), one matmul.
    Members (w_in (E, G, D), b_in (E, 1, G)): x (E, B, T, D) or shared (B, T, D), kept as
    (E, T, B, D) or (T, B, D); the projection (T, E, B, G), one batched matmul."""
    if w_in.dim() == 3:
        E, G, D = w_in.shape
        kept = x.transpose(-3, -2).contiguous()
        xp = torch.baddbmm(b_in, _member_inputs(kept, E), w_in.mT)
        return kept, xp.view(E, *kept.shape[-3:-1], G).transpose(0, 1).contiguous()
    x_tm = x.transpose(0, 1).contiguous()
    T, B, D = x_tm.shape
    return x_tm, torch.addmm(b_in, x_tm.view(-1, D), w_in.T).view(T, B, -1)


def _member_inputs(kept: Tensor, E: int) -> Tensor:
    """Kept inputs as (E, T B, D): the members' own, or the shared ones expanded."""
    D = kept.shape[-1]
    return kept.view(E, -1, D) if kept.dim() == 4 else kept.view(-1, D).expand(E, -1, -1)


def project_grads(needs: tuple, da: Tensor, x_tm: Tensor, w_in: Tensor) -> tuple:
    """Gradients of x, W_in and b_in (a Function's first three inputs, ``needs`` says which)
    from the pre-activation gradient da (T, B, G), each one op over all steps. W_in's is
    (x^T da)^T: autograd's da^T x has the small input size D as its output width, a slow matmul
    shape (docs/performance.md, "Training step speed"). Members: da (T, E, B, G), x_tm as
    :func:`project` keeps it; shared inputs' gradient sums over the members."""
    need_x, need_w, need_b = needs[:3]
    if w_in.dim() == 3:
        E, G, D = w_in.shape
        flat = da.transpose(0, 1).reshape(E, -1, G)
        dx = torch.bmm(flat, w_in).view(E, *x_tm.shape[-3:]) if need_x else None
        dx = None if dx is None else (dx if x_tm.dim() == 4 else dx.sum(0)).transpose(-3, -2)
        dw = torch.bmm(flat.mT, _member_inputs(x_tm, E)) if need_w else None
        return dx, dw, flat.sum(1, keepdim=True) if need_b else None
    flat = da.view(-1, da.shape[-1])
    dx = (flat @ w_in).view(x_tm.shape).transpose(0, 1) if need_x else None
    dw = (x_tm.view(-1, x_tm.shape[-1]).T @ flat).T.contiguous() if need_w else None
    return dx, dw, flat.sum(0) if need_b else None


def normal(*ts):
    """Copies of inference-mode results that autograd may hold (None passes through)."""
    return tuple(None if t is None else t.clone() for t in ts)


# -- gate cells: h_t = h_{t-1} + s_t (g_t - h_{t-1}) ----------------------------------------------------

class GateWeights(NamedTuple):
    """``u``: the fused recurrent matrix (H + gate width, H); a gate width of 0 means the fixed leak
    ``s`` (ConstGate), 1 a shared scalar gate, H one gate per unit. ``uT``: U^T, contiguous (the
    forward's; None in the backward)."""

    u: Tensor
    s: Tensor
    norm: Norm | None
    uT: Tensor | None = None


class GateStep(NamedTuple):
    """A gate step's tensors: ``pre`` the pre-activation, whose columns are ``a`` (the LN input)
    and ``gate`` (s_t after the step; None for the fixed leak), ``g`` the candidate, ``h`` h_t."""

    pre: Tensor
    a: Tensor
    gate: Tensor | None
    g: Tensor
    h: Tensor | None

    @staticmethod
    def of(pre: Tensor, g: Tensor, h: Tensor | None) -> GateStep:
        H = g.shape[-1]
        if pre.shape[-1] == H:  # the fixed leak: the pre-activation is the LN input
            return GateStep(pre, pre, None, g, h)
        return GateStep(pre, pre[..., :H], pre[..., H:], g, h)


class GateFactors(NamedTuple):
    """``k`` = d LN-output / dh_t, ``keep`` = 1 - s_t, ``kd`` = d a_s / dh_t (None for the fixed leak)."""

    k: Tensor
    keep: Tensor
    kd: Tensor | None


class GateGrads(NamedTuple):
    """``dy`` = d LN-output, ``da`` = d pre-activation (None for the fixed leak: its pre-activation
    gradient is the LayerNorm's input gradient itself, returned, not copied)."""

    dy: Tensor
    da: Tensor | None


def gate_forward_step(w: GateWeights, xp: Tensor, h_prev: Tensor, out: GateStep) -> tuple:
    """Step t into ``out`` from xp_t and h_{t-1}; returns the LayerNorm's mean and rstd."""
    _mm(xp, h_prev, w.uT, out=out.pre)
    if out.gate is not None:
        out.gate.sigmoid_()
    n, mean, rstd = ln_forward(out.a, w.norm)
    torch.lerp(h_prev, torch.tanh(n, out=out.g), w.s if out.gate is None else out.gate, out=out.h)
    return mean, rstd


def gate_factors(s: Tensor, gate: Tensor | None, h_prev: Tensor, g: Tensor) -> GateFactors:
    """The factors of a step or block from its gate (None: the fixed leak ``s``), h_{t-1} and g_t."""
    if gate is None:
        return GateFactors(s * (1 - g * g), 1 - s, None)
    return GateFactors(gate * (1 - g * g), 1 - gate, (g - h_prev) * gate * (1 - gate))


def gate_backward_step(w: GateWeights, f: GateFactors, dh: Tensor, gh_prev: Tensor, a: Tensor, mean, rstd,
                       out: GateGrads, carry: bool = True) -> tuple:
    """Step t's gradients from dh_t (``dh``): d LN-output into ``out.dy``, the pre-activation's
    into ``out.da`` (a gated cell's); returns the pre-activation gradient and dh_{t-1} (with the
    loss's own gradient of h_{t-1}, ``gh_prev``), None for it without ``carry`` (step 0)."""
    dy = torch.mul(dh, f.k, out=out.dy)
    da = _ln_input_grad(dy, a, mean, rstd, w.norm)
    if f.kd is not None:  # the shared gate's a_s gradient sums over units
        kd = (dh * f.kd).sum(-1, keepdim=True) if w.u.shape[-2] == w.u.shape[-1] + 1 else dh * f.kd
        da = torch.cat([da, kd], -1, out=out.da)
    return da, _mm(torch.addcmul(gh_prev, dh, f.keep), da, w.u) if carry else None


# -- GRU: z, r = sigmoid(.), g = tanh(LN(xp_h + (r h_{t-1}) U_h^T)), h_t = h_{t-1} + z (g - h_{t-1}) ----

class GRUWeights(NamedTuple):
    """The fused gate matrix U_(z,r) (2H, H), the candidate's U_h (H, H), and their contiguous
    transposes (the forward's; None in the backward)."""

    u_zr: Tensor
    u_h: Tensor
    norm: Norm | None
    uzrT: Tensor | None = None
    uhT: Tensor | None = None


class GRUStep(NamedTuple):
    """A GRU step's tensors: the gates ``zr`` (columns ``z``, ``r``), ``ah`` the LN input, ``q`` =
    r_t h_{t-1}, ``g`` the candidate, ``h`` h_t."""

    zr: Tensor
    z: Tensor
    r: Tensor
    ah: Tensor
    q: Tensor
    g: Tensor
    h: Tensor

    @staticmethod
    def of(zr: Tensor, ah: Tensor, q: Tensor, g: Tensor, h: Tensor) -> GRUStep:
        return GRUStep(zr, *zr.split(g.shape[-1], -1), ah, q, g, h)


class GRUFactors(NamedTuple):
    """``kg`` = d LN-output / dh_t, ``kzr`` = d a_(z,r) / d(h_t, q_t), ``keep`` = 1 - z_t, ``r`` = r_t."""

    kg: Tensor
    kzr: Tensor
    keep: Tensor
    r: Tensor


class GRUGrads(NamedTuple):
    """``dy`` = d LN-output, ``dzr`` = d gate pre-activations."""

    dy: Tensor
    dzr: Tensor


def gru_forward_step(w: GRUWeights, xzr: Tensor, xh: Tensor, h_prev: Tensor, out: GRUStep) -> tuple:
    """Step t into ``out`` from the gates' and the candidate's input projections and h_{t-1};
    returns the LayerNorm's mean and rstd."""
    _mm(xzr, h_prev, w.uzrT, out=out.zr).sigmoid_()
    _mm(xh, torch.mul(out.r, h_prev, out=out.q), w.uhT, out=out.ah)
    n, mean, rstd = ln_forward(out.ah, w.norm)
    torch.lerp(h_prev, torch.tanh(n, out=out.g), out.z, out=out.h)
    return mean, rstd


def gru_factors(zr: Tensor, h_prev: Tensor, g: Tensor) -> GRUFactors:
    """The factors of a step or block from its gates, h_{t-1} and g_t."""
    H = g.shape[-1]
    z, r = zr[..., :H], zr[..., H:]
    kzr = torch.cat([g - h_prev, h_prev], -1) * zr * (1 - zr)
    return GRUFactors(z * (1 - g * g), kzr, 1 - z, r)


def gru_backward_step(w: GRUWeights, f: GRUFactors, dh: Tensor, gh_prev: Tensor, ah: Tensor, mean, rstd,
                      out: GRUGrads, carry: bool = True) -> tuple:
    """Step t's gradients into ``out`` from dh_t; returns d ah_t (the candidate's pre-activation)
    and dh_{t-1} (with the loss's own gradient of h_{t-1}, ``gh_prev``; None without ``carry``)."""
    dy = torch.mul(dh, f.kg, out=out.dy)
    dah = _ln_input_grad(dy, ah, mean, rstd, w.norm)
    dq = dah @ w.u_h
    torch.cat([dh, dq], -1, out=out.dzr).mul_(f.kzr)
    if not carry:
        return dah, None
    return dah, _mm(torch.addcmul(gh_prev, dh, f.keep).addcmul_(dq, f.r), out.dzr, w.u_zr)


# -- LSTM: i, f, o = sigmoid(.), g = tanh(LN(.)), c_t = f c_{t-1} + i g, h_t = o tanh(c_t) -------------

class LSTMWeights(NamedTuple):
    """The fused recurrent matrix U (4H, H) and its contiguous transpose (the forward's; None in the backward)."""

    u: Tensor
    norm: Norm | None
    uT: Tensor | None = None


class LSTMStep(NamedTuple):
    """An LSTM step's tensors: ``pre`` the pre-activation, whose columns are ``ifo`` (the gates
    ``i``, ``f``, ``o`` after the step) and ``ag`` (the LN input); ``g`` the candidate, ``tc`` =
    tanh c_t, ``h`` h_t, ``c`` c_t."""

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

    @staticmethod
    def of(pre: Tensor, g: Tensor, tc: Tensor, h: Tensor, c: Tensor) -> LSTMStep:
        H = g.shape[-1]
        return LSTMStep(pre, pre[..., :3 * H], pre[..., :H], pre[..., H:2 * H], pre[..., 2 * H:3 * H],
                        pre[..., 3 * H:], g, tc, h, c)


class LSTMFactors(NamedTuple):
    """``k`` = d a / d(c, c, h, LN input), ``kg`` = d LN-output / dc_t, ``kc`` = dc_t / dh_t, ``f`` = f_t."""

    k: Tensor
    kg: Tensor
    kc: Tensor
    f: Tensor


class LSTMGrads(NamedTuple):
    """``dy`` = d LN-output, ``da`` = d pre-activation."""

    dy: Tensor
    da: Tensor


def lstm_forward_step(w: LSTMWeights, xp: Tensor, h_prev: Tensor, c_prev: Tensor, out: LSTMStep) -> tuple:
    """Step t into ``out`` from xp_t, h_{t-1} and c_{t-1}; returns the LayerNorm's mean and rstd."""
    _mm(xp, h_prev, w.uT, out=out.pre)
    out.ifo.sigmoid_()
    n, mean, rstd = ln_forward(out.ag, w.norm)
    c = torch.mul(out.f, c_prev, out=out.c).addcmul_(out.i, torch.tanh(n, out=out.g))
    torch.mul(out.o, torch.tanh(c, out=out.tc), out=out.h)
    return mean, rstd


def lstm_factors(pre: Tensor, c_prev: Tensor, g: Tensor, tc: Tensor) -> LSTMFactors:
    """The factors of a step or block from its pre-activation (gates in), c_{t-1}, g_t and tanh c_t."""
    H = g.shape[-1]
    ifo = pre[..., :3 * H]
    i, f, o = ifo[..., :H], ifo[..., H:2 * H], ifo[..., 2 * H:]
    kifo = torch.cat([g * i, c_prev * f, tc * o], -1).mul_(1 - ifo)  # (v sigma) (1 - sigma): the reference's rounding
    k = torch.cat([kifo, torch.ones_like(g)], -1)  # d a_(i,f,o) / d(c, c, h), and 1 for the LN input
    return LSTMFactors(k, i * (1 - g * g), o * (1 - tc * tc), f)


def lstm_backward_step(w: LSTMWeights, f: LSTMFactors, dh: Tensor, dc: Tensor, gh_prev: Tensor | None,
                       gc: Tensor | None, ag: Tensor, mean, rstd, out: LSTMGrads, carry: bool = True) -> tuple:
    """Step t's gradients into ``out`` from dh_t and the carried dc_t (``gc``: the loss's own
    gradient of c_t, None for none); returns dc_{t-1} and dh_{t-1} (with the loss's own gradient
    of h_{t-1}, ``gh_prev``, None for none), or (None, None) without ``carry`` (step 0)."""
    if gc is not None:
        dc = dc + gc
    dc = torch.addcmul(dc, dh, f.kc)
    dy = torch.mul(dc, f.kg, out=out.dy)
    dx = _ln_input_grad(dy, ag, mean, rstd, w.norm)
    torch.cat([dc, dc, dh, dx], -1, out=out.da).mul_(f.k)
    if not carry:
        return None, None
    return dc * f.f, out.da @ w.u if gh_prev is None else _mm(gh_prev, out.da, w.u)
