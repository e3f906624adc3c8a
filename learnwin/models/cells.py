"""The five gated recurrent cells of docs/method.md §2 behind one public interface, and the model they make.

Interface (docs/method.md §2a; a user's cell that implements it can be trained, probed and
transported exactly, and registered to run through the workflow):

* ``hidden_size`` (int), ``input_size`` (int) and ``state_blocks`` (1, or 2 where the full state
  is (h, c): a cell transported along its cell state);
* training: ``forward(x, reference=False) -> (hidden, transported)``: states for inputs ``x`` of
  shape (B, T, D), each (B, T, H). ``transported`` is the state along which gradients are
  transported: the hidden state, or the cell state for the LSTM. :class:`GatedCell` provides it
  from ``step``; with grad mode on it calls ``fast_forward(x)`` (override it with a faster path
  of the same numbers; the built-in cells name their hand-written recurrence in ``scan()``, which
  ``fast_forward`` runs through :mod:`learnwin.models.bptt` and an ensemble through
  :mod:`learnwin.models.fused` with a member dimension);
* the diagonal probe: ``trace(x) -> Trace``: the same pass with the per-step diagonal Jacobian
  terms of docs/method.md §4 (leak, correction, receiving-end factor), the candidate and the
  pre-synaptic state; ``recurrent_weights() -> list[str]``: names of the H x H recurrent matrices
  whose adaptive rates make the base rate Lambda (docs/method.md §4);
* the exact transport (docs/method.md §4b): ``input_weights()`` / ``input_biases()`` (the blocks of
  one fused input projection xp = x W_in^T + b_in), ``recurrent()`` (the fused matrix U, hp =
  h_{t-1} U^T), ``step(xp, hp, state, trace) -> StepOut`` (named fields: ``state``, the cell's
  state tuple with ``state[0]`` = h_t; ``hidden``; ``transported``; with ``trace``, the
  :class:`Trace` fields of the step) and ``state_of(hidden, transported)``, the step state of a
  full state (the initial state is that of zeros); optionally ``step_jacobian(xp, z_prev)``, the
  one-step Jacobian of the full state in closed form (else autograd of ``step``);
* the layout of the full state z a probe asks of it (:mod:`learnwin.models.state`), which
  :class:`GatedCell` provides from the above.

Registry: the cells are registered in :mod:`learnwin.infra.registry` by their import path, with the
metadata the workflow reads without importing torch; :func:`build_model` loads the class.

Indexing: step t = 0..T-1 consumes x_t and produces h_t from h_{t-1} (h_{-1} = 0). The
one-step Jacobian diagonal of step t is ``leak[:, t] + correction[:, t]``.

Choices (docs/method.md §2 silent): LayerNorm has learnable affine parameters (nn.LayerNorm
defaults); gate layers not pinned by the spec (GRU reset, LSTM input and output gates) keep
PyTorch's default uniform(+-1/sqrt(fan_in)) weights with zero biases. ``gate_init`` (docs/method.md §2):
``paper`` is the above; ``official`` mirrors the official code's --orth_init cell by cell: GRU and
LSTM get orthogonal input and recurrent weights in every gate layer and nn.Linear-style
uniform(+-1/sqrt(D)) biases on every input projection, candidate included (the bias belongs to
the input projection, fan_in = D), with no update/forget-gate offset; Shared and Diag keep their
gate weights at zero with bias logit(const_s) (the official code skips them), so for const,
shared and diag the two inits are the same parameters. Speed: all input
projections are one matmul over the whole sequence, and the recurrent matmuls of a step are
fused into one. Training (grad mode on) runs through the hand-written BPTT of
:mod:`learnwin.models.bptt`, on CUDA through its fused twin (:mod:`learnwin.models.fused`, chosen per
device by ``fused.pick``); the step-by-step scan here is the reference path (see ``forward``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from learnwin.infra.registry import BLOCKS, CELLS, MODEL, block_name, load_cells
from learnwin.models import bptt, fused
from learnwin.models.families import gate, gru, lstm
from learnwin.models.recurrence import StepOut
from learnwin.models.stack import Stack
from learnwin.models.state import CellState
from learnwin.models.trace import Trace


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _orthogonal(rows: int, cols: int) -> nn.Parameter:
    w = torch.empty(rows, cols)
    nn.init.orthogonal_(w)
    return nn.Parameter(w)


def _uniform(rows: int, cols: int) -> nn.Parameter:
    bound = 1.0 / math.sqrt(cols)
    return nn.Parameter(torch.empty(rows, cols).uniform_(-bound, bound))


def _zeros(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape))


GATE_INITS = ("paper", "official")


def _linear_bias(rows: int, input_size: int) -> nn.Parameter:
    """nn.Linear's default bias: uniform(+-1/sqrt(input_size))."""
    bound = 1.0 / math.sqrt(input_size)
    return nn.Parameter(torch.empty(rows).uniform_(-bound, bound))


def _gate_layer(rows: int, input_size: int, hidden_size: int, gate_init: str, bias: float = 0.0,
                paper=_zeros) -> tuple[nn.Parameter, nn.Parameter, nn.Parameter]:
    """(W, U, b) of one GRU/LSTM gate layer: ``paper`` weights (zeros, or PyTorch's uniform) and a
    constant bias, or ``official`` orthogonal weights and a uniform(+-1/sqrt(input_size)) bias."""
    if gate_init == "official":
        return (_orthogonal(rows, input_size), _orthogonal(rows, hidden_size),
                _linear_bias(rows, input_size))
    return paper(rows, input_size), paper(rows, hidden_size), _full(bias, rows)


def _candidate_layer(hidden_size: int, input_size: int, gate_init: str
                     ) -> tuple[nn.Parameter, nn.Parameter, nn.Parameter]:
    """(W, U, b) of the GRU/LSTM candidate: orthogonal weights; bias 0 (``paper``) or
    uniform(+-1/sqrt(input_size)) (``official``, nn.Linear's default that --orth_init keeps)."""
    W, U = _orthogonal(hidden_size, input_size), _orthogonal(hidden_size, hidden_size)
    return W, U, _linear_bias(hidden_size, input_size) if gate_init == "official" else _zeros(hidden_size)


def _full(value: float, *shape: int) -> nn.Parameter:
    return nn.Parameter(torch.full(shape, value))


class GatedCell(CellState, nn.Module):
    """Common scan: precomputed input projections, one fused recurrent matmul per step.

    A subclass implements the interface of the module docstring: ``input_weights``,
    ``input_biases``, ``recurrent``, ``step``, ``recurrent_weights`` and, where its state is more
    than h, ``state_of`` and ``state_blocks``; optionally ``fast_forward`` (the training path).
    """

    def __init__(self, input_size: int, hidden_size: int, layer_norm: bool):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.norm = nn.LayerNorm(hidden_size) if layer_norm else nn.Identity()

    # -- the interface (module docstring) --------------------------------------------------
    def input_weights(self) -> list[Tensor]:
        """Blocks (rows, D) of the fused input projection, in the order ``step`` reads them."""
        raise NotImplementedError

    def input_biases(self) -> list[Tensor]:
        """Biases of the blocks of :meth:`input_weights`."""
        raise NotImplementedError

    def recurrent(self) -> Tensor:
        """The fused (rows, H) matrix applied to h_{t-1} each step (``hp = h_{t-1} @ recurrent().T``)."""
        raise NotImplementedError

    def step(self, xp: Tensor, hp: Tensor, state: tuple, trace: bool) -> StepOut:
        """One step t: input projection ``xp`` of x_t, recurrent projection ``hp`` of h_{t-1}."""
        raise NotImplementedError

    def recurrent_weights(self) -> list[str]:
        """Names of the H x H recurrent matrices whose adaptive rates make Lambda (docs/method.md §4)."""
        raise NotImplementedError

    def state_of(self, hidden: Tensor, transported: Tensor) -> tuple:
        """The step state whose full state is (h, transported); the initial state is that of zeros."""
        return (hidden,)

    def scan(self) -> tuple[type, tuple] | None:
        """A cell with a hand-written recurrence: its family (:class:`learnwin.models.recurrence.Family`)
        and the inputs of the drivers' Function after x (fused input weight and bias, the family's
        recurrent matrices, LayerNorm weight, bias and eps); None for a cell without one."""
        return None

    def fast_forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Training path of :meth:`forward` (grad mode on): the cell's :meth:`scan` (its Function for
        x's device, ``fused.pick``), else the step-by-step autograd scan; a cell with another fast
        path (a parallel scan) overrides it."""
        scan = self.scan()
        if scan is None:
            return self.forward(x, reference=True)
        out = fused.pick(x).apply(scan[0], x, *scan[1])
        return out if isinstance(out, tuple) else (out, out)

    # -- the full state z = h or (h, c) (docs/method.md §4b; learnwin.models.state) --------------
    @property
    def state_width(self) -> int:
        """n = S H."""
        return self.state_blocks * self.hidden_size

    def full_state(self, hidden: Tensor, transported: Tensor) -> Tensor:
        """z from the outputs of :meth:`forward`: h, or (h, c)."""
        return hidden if self.state_blocks == 1 else torch.cat([hidden, transported], -1)

    def transported(self, v: Tensor) -> Tensor:
        """The transported state's part (..., H) of full-state values (..., S H): its last block."""
        return v[..., -self.hidden_size:]

    def step_input(self, x: Tensor) -> Tensor:
        """The fused input projection xp = x W_in^T + b_in that :meth:`cell_step` takes."""
        return F.linear(x, *bptt.projection(self))

    def cell_step(self, xp: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """(hidden_t, z_t) from the projected input ``xp`` and z_{t-1}, through :meth:`step`."""
        H = self.hidden_size
        h = z[..., :H]
        out = self.step(xp, h @ self.recurrent().T, self.state_of(h, z[..., (self.state_blocks - 1) * H:]), False)
        return out.hidden, self.full_state(out.hidden, out.transported)

    def hidden_of(self, xp: Tensor, z: Tensor) -> Tensor:
        """hidden_t of z_t: h_t, its first block."""
        return z[..., :self.hidden_size]

    def _norm_jacobian(self, pre: Tensor, W: Tensor, alpha: Tensor) -> Tensor:
        """diag(alpha) (d norm(pre) / d pre) @ W, (B, H, m), for pre, alpha (B, H), W (H, m) or (B, H, m).

        LayerNorm: diag(gamma / sigma) (I - 1 1^T / H - xhat xhat^T / H), applied as one scaled
        copy of W and one in-place rank-1 update, O(B H m) (docs/method.md §4b).
        """
        if isinstance(self.norm, nn.Identity):
            return alpha[:, :, None] * W
        H = pre.shape[-1]
        centred = pre - pre.mean(-1, keepdim=True)
        inv = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.norm.eps)
        xhat = centred * inv
        proj = (xhat @ W if W.dim() == 2 else torch.bmm(xhat[:, None, :], W)[:, 0]) / H  # (B, m)
        scale = alpha * inv if self.norm.weight is None else alpha * inv * self.norm.weight
        out = scale[:, :, None] * (W - W.mean(-2, keepdim=True))
        return out.baddbmm_((scale * xhat)[:, :, None], proj[:, None, :], alpha=-1)

    # -- scan ---------------------------------------------------------------------------
    def _scan(self, x: Tensor, trace: bool):
        xproj = F.linear(x, *bptt.projection(self)).unbind(1)  # T x (B, G*H)
        u_rec = self.recurrent()
        zero = x.new_zeros(x.shape[0], self.hidden_size)
        state = self.state_of(zero, zero)
        outs = []
        for xp in xproj:
            out = self.step(xp, state[0] @ u_rec.T, state, trace)
            state = out.state
            # (hidden, transported[, leak, correction, receive, candidate]); h once when it is both
            outs.append(out[1:] if trace else out[1:2] if out.transported is out.hidden else out[1:3])
        return [torch.stack(parts, 1) for parts in zip(*outs)]

    def forward(self, x: Tensor, reference: bool = False) -> tuple[Tensor, Tensor]:
        """(hidden, transported) for x (B, T, D).

        Training path: with grad mode on, outside torch.func transforms and forward-mode AD, the
        pass runs through :meth:`fast_forward` (the built-in cells: the hand-written BPTT of
        :mod:`learnwin.models.bptt`, same numbers, first-order only). Everywhere else, or with
        ``reference=True`` (needed for double backward or to differentiate through ``step``), it
        is the step-by-step autograd scan. Without autograd on a device with a fused mode (CUDA:
        evaluation), the fused forward (:func:`learnwin.models.fused.evaluates`).
        """
        if not reference and (bptt.active() or fused.evaluates(x)):
            return self.fast_forward(x)
        outs = self._scan(x, trace=False)
        return outs[0], outs[-1]

    @torch.no_grad()
    def trace(self, x: Tensor) -> Trace:
        return Trace(*self._scan(x, trace=True))


class ConstGate(GatedCell):
    """h_t = (1 - s) h_{t-1} + s tanh(LN(W_x x_t + b_x + W_h h_{t-1})), s fixed (docs/method.md §2)."""

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, **_):
        super().__init__(input_size, hidden_size, layer_norm)
        self.register_buffer("s", torch.tensor(float(const_s)))
        self.W_x = _orthogonal(hidden_size, input_size)
        self.b_x = _zeros(hidden_size)
        self.W_h = _orthogonal(hidden_size, hidden_size)

    def scan(self):
        return gate.Gate, (*bptt.projection(self), self.recurrent(), self.s, *bptt.layer_norm(self.norm))

    def input_weights(self):
        return [self.W_x]

    def input_biases(self):
        return [self.b_x]

    def recurrent(self):
        return self.W_h

    def recurrent_weights(self):
        return ["W_h"]

    def step_jacobian(self, xp: Tensor, z: Tensor) -> Tensor:
        """d h_t / d h_{t-1} in closed form, (B, H, H), for xp (B, G H) and h_{t-1} = z (B, H)."""
        pre = xp + z @ self.W_h.T
        g = self._candidate(pre)
        J = self._norm_jacobian(pre, self.W_h, self.s * (1 - g * g))
        J.diagonal(dim1=-2, dim2=-1).add_(1 - self.s)
        return J

    def _candidate(self, pre: Tensor) -> Tensor:
        return torch.tanh(self.norm(pre))

    def step(self, xp, hp, state, trace):
        return gate.reference(self, xp, hp, state, trace)


class SharedGate(ConstGate):
    """ConstGate with one learned scalar gate per step, s_t = sigmoid(w_s.x_t + b_s + u_s.h)."""

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, **_):
        super().__init__(input_size, hidden_size, layer_norm, const_s=const_s)
        # zero weights and bias logit(const_s) under both gate inits (the official code's
        # --orth_init skips this layer)
        self.w_s, self.b_s, self.u_s = _zeros(1, input_size), _full(_logit(const_s), 1), _zeros(1, hidden_size)

    def input_weights(self):
        return [self.W_x, self.w_s]

    def input_biases(self):
        return [self.b_x, self.b_s]

    def recurrent(self):
        return torch.cat([self.W_h, self.u_s], 0)

    def _gate_diag(self) -> Tensor:
        return self.u_s[0]

    def step_jacobian(self, xp: Tensor, z: Tensor) -> Tensor:
        """d h_t / d h_{t-1} in closed form, (B, H, H); the gate rows are u_s (Shared) or U_s (Diag)."""
        H = self.hidden_size
        hp = z @ self.recurrent().T
        pre = xp[:, :H] + hp[:, :H]
        g = self._candidate(pre)
        s = torch.sigmoid(xp[:, H:] + hp[:, H:])  # (B, 1) or (B, H)
        gate_rows = self.recurrent()[H:]  # (1, H) or (H, H)
        J = self._norm_jacobian(pre, self.W_h, s * (1 - g * g))
        J.addcmul_(((g - z) * s * (1 - s))[:, :, None], gate_rows)
        J.diagonal(dim1=-2, dim2=-1).add_(1 - s)
        return J



class DiagGate(SharedGate):
    """One gate per unit: s_t = sigmoid(W_s x_t + b_s + U_s h_{t-1}) in R^H (docs/method.md §2)."""

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, **_):
        ConstGate.__init__(self, input_size, hidden_size, layer_norm, const_s=const_s)
        H = hidden_size  # as SharedGate: the same zero/logit init under both gate inits
        self.W_s, self.b_s, self.U_s = _zeros(H, input_size), _full(_logit(const_s), H), _zeros(H, H)

    def input_weights(self):
        return [self.W_x, self.W_s]

    def recurrent(self):
        return torch.cat([self.W_h, self.U_s], 0)

    def recurrent_weights(self):
        return ["W_h", "U_s"]

    def _gate_diag(self) -> Tensor:
        return torch.diagonal(self.U_s)


class GRU(GatedCell):
    """GRU cell with LN on the candidate; update gate z starts at gru_init_update (docs/method.md §2)."""

    def __init__(self, input_size, hidden_size, layer_norm, *, gru_init_update, gate_init, **_):
        super().__init__(input_size, hidden_size, layer_norm)
        H, D = hidden_size, input_size
        self.W_z, self.U_z, self.b_z = _gate_layer(H, D, H, gate_init, _logit(gru_init_update))
        self.W_r, self.U_r, self.b_r = _gate_layer(H, D, H, gate_init, paper=_uniform)
        self.W_h, self.U_h, self.b_h = _candidate_layer(H, D, gate_init)

    def input_weights(self):
        return [self.W_z, self.W_r, self.W_h]

    def input_biases(self):
        return [self.b_z, self.b_r, self.b_h]

    def recurrent(self):
        return torch.cat([self.U_z, self.U_r], 0)

    def recurrent_weights(self):
        return ["U_z", "U_r", "U_h"]

    def step_jacobian(self, xp: Tensor, z: Tensor) -> Tensor:
        """d h_t / d h_{t-1} in closed form, (B, H, H) (docs/method.md §4b).

        d pre / d h = U_h N, N = diag(r) + diag(w) U_r, w = h r (1 - r); through the LayerNorm
        (:meth:`_norm_jacobian`), diag(scale) (V N - xhat (xhat^T U_h N / H)^T), V = (I - 1 1^T / H) U_h.
        The batch-dependent V diag(w) U_r is one GEMM w @ K, K[k, (i, j)] = V[i, k] U_r[k, j], written
        into J; the other terms are added in place (no (B, H, H) temporaries).
        """
        H = self.hidden_size
        u, r, pre, g = gru.gates(self, xp, z @ self.recurrent().T, z)  # u the update gate (z is h_{t-1})
        w = z * r * (1 - r)
        scale = u * (1 - g * g)
        V = self.U_h
        if not isinstance(self.norm, nn.Identity):
            centred = pre - pre.mean(-1, keepdim=True)
            inv = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.norm.eps)
            xhat = centred * inv
            scale = scale * inv if self.norm.weight is None else scale * inv * self.norm.weight
            V = V - V.mean(0)
        K = (V.T[:, :, None] * self.U_r[:, None, :]).reshape(H, H * H)
        J = torch.mm(w, K).view(-1, H, H)  # V diag(w) U_r
        J.addcmul_(V, r[:, None, :])  # + V diag(r)
        if not isinstance(self.norm, nn.Identity):
            q = xhat @ self.U_h / H  # xhat^T U_h N / H = q r + (q w) U_r
            J.baddbmm_(xhat[:, :, None], torch.addmm(q * r, q * w, self.U_r)[:, None, :], alpha=-1)
        J.mul_(scale[:, :, None])
        J.addcmul_(((g - z) * u * (1 - u))[:, :, None], self.U_z)
        J.diagonal(dim1=-2, dim2=-1).add_(1 - u)
        return J

    def scan(self):
        return gru.GRU, (*bptt.projection(self), self.recurrent(), self.U_h, *bptt.layer_norm(self.norm))

    def step(self, xp, hp, state, trace):
        return gru.reference(self, xp, hp, state, trace)


class LSTM(GatedCell):
    """LSTM cell with LN on the candidate; forget gate starts at lstm_init_forget (docs/method.md §2).

    Gradients are transported along the cell state c (docs/method.md §4, LSTM row).
    """

    state_blocks = 2  # z = (h, c)

    def __init__(self, input_size, hidden_size, layer_norm, *, lstm_init_forget, gate_init, **_):
        super().__init__(input_size, hidden_size, layer_norm)
        H, D = hidden_size, input_size
        self.W_i, self.U_i, self.b_i = _gate_layer(H, D, H, gate_init, paper=_uniform)
        self.W_f, self.U_f, self.b_f = _gate_layer(H, D, H, gate_init, _logit(lstm_init_forget))
        self.W_o, self.U_o, self.b_o = _gate_layer(H, D, H, gate_init, paper=_uniform)
        self.W_g, self.U_g, self.b_g = _candidate_layer(H, D, gate_init)

    def input_weights(self):
        return [self.W_i, self.W_f, self.W_o, self.W_g]

    def input_biases(self):
        return [self.b_i, self.b_f, self.b_o, self.b_g]

    def recurrent(self):
        return torch.cat([self.U_i, self.U_f, self.U_o, self.U_g], 0)

    def recurrent_weights(self):
        return ["U_i", "U_f", "U_o", "U_g"]

    def step_jacobian_blocks(self, xp: Tensor, z: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(C, p, e, f, U_o) of the one-step Jacobian in block form (docs/method.md §4b):

        d (h_t, c_t) / d (h_{t-1}, c_{t-1}) = [[diag(p) U_o + diag(e) C, diag(e f)], [C, diag(f)]],
        C = d c_t / d h_{t-1} (B, H, H), p = tanh(c_t) o (1 - o), e = d h_t / d c_t, f the forget gate.
        """
        H = self.hidden_size
        h_prev, c_prev = z[:, :H], z[:, H:]
        pre = xp + h_prev @ self.recurrent().T
        i, f, o, g = lstm.gates(self, pre)
        tc = torch.tanh(f * c_prev + i * g)
        C = self._norm_jacobian(pre[:, 3 * H:], self.U_g, i * (1 - g * g))
        C.addcmul_((c_prev * f * (1 - f))[:, :, None], self.U_f)
        C.addcmul_((g * i * (1 - i))[:, :, None], self.U_i)
        return C, tc * o * (1 - o), o * (1 - tc * tc), f, self.U_o

    def step_jacobian(self, xp: Tensor, z: Tensor) -> Tensor:
        """d (h_t, c_t) / d (h_{t-1}, c_{t-1}) in closed form, (B, 2H, 2H), from :meth:`step_jacobian_blocks`."""
        H = self.hidden_size
        C, p, e, f, U_o = self.step_jacobian_blocks(xp, z)
        J = z.new_zeros(z.shape[0], 2 * H, 2 * H)
        J[:, H:, :H] = C
        J[:, :H, :H] = C * e[:, :, None] + p[:, :, None] * U_o
        J[:, :H, H:].diagonal(dim1=-2, dim2=-1).copy_(e * f)
        J[:, H:, H:].diagonal(dim1=-2, dim2=-1).copy_(f)
        return J

    def scan(self):
        return lstm.LSTM, (*bptt.projection(self), self.recurrent(), *bptt.layer_norm(self.norm))

    def state_of(self, hidden, transported):
        return (hidden, transported, torch.zeros_like(hidden))  # h, c, e = o (1 - tanh^2 c): trace only

    def step(self, xp, hp, state, trace):
        return lstm.reference(self, xp, hp, state, trace)


class GatedRNN(nn.Module):
    """A cell plus the scalar readout y_hat_t = W_out h_t + b_out (docs/method.md §2); for a stack
    (docs/method.md §2c), of its output stream (``out_size`` wide)."""

    def __init__(self, cell: nn.Module):
        super().__init__()
        self.cell = cell
        self.W_out = _orthogonal(1, getattr(cell, "out_size", cell.hidden_size))
        self.b_out = _zeros(1)

    def forward(self, x: Tensor, reference: bool = False) -> Tensor:
        """Readout at every step; ``reference`` selects the cell's step-by-step path."""
        return self.readout(self.cell(x, reference=reference)[0])

    def readout(self, hidden: Tensor) -> Tensor:
        """y_hat (B, T) of the hidden states (B, T, H)."""
        return (hidden @ self.W_out.T + self.b_out).squeeze(-1)


def build_model(cell: str, input_size: int, hidden: int = MODEL["hidden"], **model) -> GatedRNN:
    """Build a :class:`GatedRNN` from the ``model`` config section and the cell name (a registered
    one, after importing ``model.cells_module``: see :func:`learnwin.infra.registry.load_cells`); the
    registry entry's class is imported here. A key the section lacks takes its default,
    :data:`learnwin.infra.registry.MODEL` (the schema's, docs/method.md §2): the shape alone builds
    the network the workflow trains. ``layers`` cells in ``block`` (docs/method.md §2c) make a
    :class:`learnwin.models.stack.Stack`; one layer in a block without an embedding (``stacked``,
    ``plain``) is the bare cell. The cell's constructor gets the other keys (``const_s``,
    ``gate_init``, ...) as keywords."""
    gates = {**MODEL, "hidden": hidden, **model}
    layer_norm, layers, block = gates.pop("layer_norm"), gates.pop("layers"), gates.pop("block")
    del gates["hidden"]
    load_cells(gates.pop("cells_module"))
    if cell not in CELLS:
        raise ValueError(f"unknown model {cell!r}; allowed: {', '.join(CELLS)}")
    if gates["gate_init"] not in GATE_INITS:
        raise ValueError(f"model.gate_init = {gates['gate_init']!r}; allowed: {', '.join(GATE_INITS)}")
    cls = CELLS[cell].load()
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"cell {cell!r}: {CELLS[cell].cls} must be an nn.Module subclass")
    name = block_name({"block": block}, CELLS[cell])
    if name not in BLOCKS:
        raise ValueError(f"model.block = {block!r}; allowed: published, {', '.join(BLOCKS)}")
    spec = BLOCKS[name]
    if spec.bare(layers):
        return GatedRNN(cls(input_size, hidden, layer_norm, **gates))
    return GatedRNN(Stack(cls, input_size, hidden, layers, spec, layer_norm, **gates))


def checkpoint_model(state: dict, device: str = "cpu") -> GatedRNN:
    """The model of a loaded checkpoint ``state`` on ``device`` in eval mode, with its trained
    weights unless the checkpoint is a diverged run's tombstone (then as built; docs/method.md §3)."""
    model = build_model(state["cell"], **state["model_config"]).to(device)
    if not state.get("diverged"):
        model.load_state_dict(state["model"])
    return model.eval()
