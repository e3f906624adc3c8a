"""The hand-written recurrence of the gated cells (docs/method.md §2): what a cell family is, and the
sequence-level parts every family's drivers share.

A family (:class:`Family`) is one module under :mod:`learnwin.models.families`: its records and its
forward and backward steps, the only hand-written per-step math of training. The gate cells
(ConstGate, SharedGate, DiagGate), the GRU and the LSTM are the built-in ones; a cell names its
family and that family's inputs in ``scan()`` (:mod:`learnwin.models.cells`). Two generic drivers run
any family: :mod:`learnwin.models.bptt` eagerly over time-major buffers (the CPU),
:mod:`learnwin.models.fused` compiled per step and graphed (CUDA). Between a driver's forward and
backward travels one named record, :class:`Kept`.

A step writes into the tensors it is given (``out=``, no allocation): the eager driver passes views
of its time-major buffers, the compiled driver fresh tensors inside the compiled step. A cell's
``step`` stays the definition; tests/test_recurrence.py holds every family's steps to it. The order
of every sum and product is that of the recorded smoke digest (tests/test_smoke_digest.py): a
reordering moves its float32 bits.

The sequence-level parts here: the input projection and its gradients, the LayerNorm affine
gradients and the recurrent matrices' gradients, each one op over all steps.

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


def ln_input_grad(dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor, ln: Norm | None) -> Tensor:
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


def mm(bias: Tensor, a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
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


class StepOut(NamedTuple):
    """What a cell's ``step`` (:meth:`learnwin.models.cells.GatedCell.step`, a family's ``reference``)
    returns for one time step, each (B, H) (docs/method.md §2, §4).

    ``state`` is the cell's own state tuple, passed back to the next step (``state[0]`` is h_t);
    ``hidden`` is h_t and ``transported`` the state gradients are transported along (h_t, or c_t
    for the LSTM). With ``trace=True`` the step also gives the
    :class:`learnwin.models.trace.Trace` fields of step t:
    ``leak`` lambda_t, ``correction`` r_t, ``receive`` (e_t for the LSTM, else 1) and
    ``candidate`` g~_t; with ``trace=False`` they are None.
    """

    state: tuple
    hidden: Tensor
    transported: Tensor
    leak: Tensor | None = None
    correction: Tensor | None = None
    receive: Tensor | None = None
    candidate: Tensor | None = None


class Kept(NamedTuple):
    """What a driver's forward keeps for its backward: ``states`` the state buffers (T + 1, B, H)
    (the zero initial state first; h, and c for the LSTM), ``saved`` the family's ``Saved`` record of
    time-major tensors (T, B, .), and the LayerNorm's per-step ``means`` and ``rstds`` (a list or a
    stacked tensor; None entries without LayerNorm)."""

    states: tuple
    saved: NamedTuple
    means: object
    rstds: object


class Family:
    """A cell family's hand-written recurrence (docs/method.md §2), run by the generic drivers of
    :mod:`learnwin.models.bptt` and :mod:`learnwin.models.fused`. A family is a class of static
    methods over its named records, in one module (tests/test_families.py adds one in a test):

    * ``Weights``: the recurrent matrices (the Function's inputs between the input bias and the
      LayerNorm, ``mats``), the LayerNorm (:class:`Norm`), and the forward's transposes;
    * ``Saved``: what the forward keeps of a step, and ``Step``: a step's tensors (views of the
      saved ones, the new states);
    * ``Factors``: the backward's elementwise factors of a step, or of a block of steps at once
      (any leading shape: elementwise, so the same bits either way);
    * ``Grads``: where a backward step writes its gradients.

    Every step also runs the member dimension (module docstring).
    """

    states = 1
    """The state tensors a step carries and the Function outputs, each (B, T, H): h, or h and c."""

    @staticmethod
    def weights(mats: tuple, norm: Norm | None, forward: bool = False) -> NamedTuple:
        """The ``Weights`` record of the recurrent matrices ``mats``; the forward's has the transposes too."""
        raise NotImplementedError

    @staticmethod
    def widths(G: int, H: int) -> NamedTuple:
        """The ``Saved`` record's widths (last dimension) for an input projection G wide, H units."""
        raise NotImplementedError

    @staticmethod
    def step(saved: NamedTuple, states: tuple) -> NamedTuple:
        """The ``Step`` record of ``saved`` and the new states (one step's, or a sequence's)."""
        raise NotImplementedError

    @staticmethod
    def split(xp: Tensor) -> tuple:
        """The input projection of a step (or all steps) as the parts :meth:`forward_step` reads."""
        raise NotImplementedError

    @staticmethod
    def forward_step(w: NamedTuple, xs: tuple, prev: tuple, out: NamedTuple) -> tuple:
        """Step t into ``out`` (a ``Step``) from the input parts ``xs`` and the states ``prev`` of
        t - 1; returns the LayerNorm's mean and rstd."""
        raise NotImplementedError

    @staticmethod
    def factors(w: NamedTuple, saved: NamedTuple, prev: tuple, at) -> NamedTuple:
        """The ``Factors`` of the steps ``at`` (an index: a block of steps, or ``...``) of ``saved``
        and of the states ``prev`` before them."""
        raise NotImplementedError

    @staticmethod
    def ln_input(saved: NamedTuple) -> Tensor:
        """The LayerNorm's input among ``saved``."""
        raise NotImplementedError

    @staticmethod
    def grads(dy: Tensor, da: Tensor) -> NamedTuple:
        """The ``Grads`` record over the LN-output gradient ``dy`` and the pre-activation gradient ``da``."""
        raise NotImplementedError

    @staticmethod
    def backward_step(w: NamedTuple, f: NamedTuple, carry: tuple, prev_grads: tuple, a: Tensor, mean, rstd,
                      out: NamedTuple, more: bool = True) -> tuple:
        """Step t's gradients into ``out`` from the carried state gradients ``carry`` (dh_t, ...),
        ``a`` the LN input; returns the carried gradients of step t - 1 (with the loss's own,
        ``prev_grads``, None where it has none; None without ``more``, at step 0) and a tensor the
        driver keeps in step order for :meth:`finish` (None for none)."""
        raise NotImplementedError

    @staticmethod
    def finish(grads: NamedTuple, kept: list, saved: NamedTuple, prev: tuple, out: Tensor | None = None) -> tuple:
        """The pre-activation gradient of all steps (into ``out``, where given) and the recurrent
        matrices' gradients (None for an input without one), from the time-major ``grads``, the
        kept tensors of every step, ``saved`` and the states ``prev`` (T, B, H) before each step."""
        raise NotImplementedError
