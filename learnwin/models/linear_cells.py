"""Diagonal linear recurrences: minGRU, minLSTM, RG-LRU, LRU and S6 (docs/method.md §2b).

Each cell is h_t = a_t * h_{t-1} + b_t with a_t and b_t functions of x_t only, so the one-step
Jacobian of the transported state is exactly diag(a_t): the diagonal transport of docs/method.md §4
has no approximation (``Trace.correction`` = 0). Interface as :mod:`learnwin.models.cells`:
``forward(x) -> (hidden, transported)``, ``trace(x) -> Trace``, ``recurrent_weights()``, plus

* the transported state (B, T, P) is the whole recurrent state,
  and ``hidden`` (B, T, H) is a readout of it (``readout``); P = H ``components``, unit q owning
  components q*M..q*M+M-1 (M = 1, or the S6 state size N); complex for the LRU;
* ``coefficients(x) -> (a, b)`` over the whole sequence, ``_step(x_t, h_prev) -> h_t`` (the exact
  transport differentiates it), ``receive(x)``: the factor R_t with hidden_q = sum over unit q's
  components of Re(R_t h_t) + (terms without h);
* ``recurrent_weights()``: the input weights whose rates make the base rate Lambda; their
  pre-synaptic vector is x_t (``Trace.inputs``), docs/method.md §4.

Training runs the chunked parallel scan of :mod:`learnwin.models.scan` (autograd); ``reference=True``
runs the step-by-step loop. tau_init = -1/ln(1 - s) with s = ``model.const_s`` sets each cell's
decay at init (docs/method.md §2b); ``layer_norm`` and ``gate_init`` do not apply to these cells.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from learnwin.models.scan import linear_scan
from learnwin.models.state import CellState, complex_view, real_view
from learnwin.models.trace import Trace


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _normal(std: float, *shape: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape) * std)


def _uniform(bound: float, *shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


def _linear(rows: int, fan_in: int) -> nn.Parameter:
    """nn.Linear's default weight (or bias, rows only): uniform(+-1/sqrt(fan_in))."""
    return _uniform(fan_in ** -0.5, rows, fan_in)


def _full(value: float, *shape: int) -> nn.Parameter:
    return nn.Parameter(torch.full(shape, float(value)))


class DiagonalLinear(CellState, nn.Module):
    """Common pass of the diagonal linear recurrences (docs/method.md §2b)."""

    per_unit_state = True  # z is the real view of the state, unit q's components together
    components = 1  # transported components per hidden unit
    complex_state = False

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size

    def coefficients(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Decay a_t and input term b_t, each (B, T, P) or broadcastable to it."""
        raise NotImplementedError

    def readout(self, state: Tensor, x: Tensor) -> Tensor:
        """hidden (B, T, H) from the states (B, T, P) and the inputs."""
        return state

    def receive(self, x: Tensor) -> Tensor:
        """R_t (B, T, P) or broadcastable: d hidden_q / d h_p = Re(R_p .) for p in unit q."""
        return x.new_ones(1, 1, self.hidden_size * self.components)

    def recurrent_weights(self) -> list[str]:
        raise NotImplementedError

    def _step(self, x_t: Tensor, h_prev: Tensor) -> Tensor:
        """h_t = a_t h_{t-1} + b_t for one step x_t (B, D)."""
        a, b = self.coefficients(x_t[:, None])
        return a[:, 0] * h_prev + b[:, 0]

    def forward(self, x: Tensor, reference: bool = False) -> tuple[Tensor, Tensor]:
        """(hidden, transported): the parallel scan, or the step loop with ``reference=True``."""
        a, b = self.coefficients(x)
        if reference:
            h, states = torch.zeros_like(b[:, 0]), []
            for a_t, b_t in zip(a.expand_as(b).unbind(1), b.unbind(1)):
                h = a_t * h + b_t
                states.append(h)
            state = torch.stack(states, 1)
        else:
            state = linear_scan(a, b)
        return self.readout(state, x), state

    # -- the full state z = the real view of the state (docs/method.md §2b; learnwin.models.state)
    @property
    def state_width(self) -> int:
        """n: the real components of the transported state, H ``components`` (Re and Im if complex)."""
        return self.hidden_size * self.components * (2 if self.complex_state else 1)

    def full_state(self, hidden: Tensor, transported: Tensor) -> Tensor:
        """z from the outputs of :meth:`forward`: the real view of the transported state."""
        return real_view(transported)

    def transported(self, v: Tensor) -> Tensor:
        """The transported state's values (..., P) from full-state values (..., n)."""
        return complex_view(v) if self.complex_state else v

    def step_input(self, x: Tensor) -> Tensor:
        """x itself: :meth:`cell_step` takes the raw input."""
        return x

    def cell_step(self, xp: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """(hidden_t, z_t) from x_t and z_{t-1}, through :meth:`_step` and :meth:`readout`."""
        s = self._step(xp, self.transported(z))
        return self.readout(s, xp), real_view(s)

    def hidden_of(self, xp: Tensor, z: Tensor) -> Tensor:
        """hidden_t of z_t: the readout of the state."""
        return self.readout(self.transported(z), xp)

    @torch.no_grad()
    def trace(self, x: Tensor) -> Trace:
        a, b = self.coefficients(x)
        state = linear_scan(a, b)
        return Trace(self.readout(state, x), state, a.expand_as(b), x.new_zeros(b.shape),
                     self.receive(x).expand_as(b), b, inputs=x)


class MinGRU(DiagonalLinear):
    """minGRU (Feng et al. 2024, arXiv:2410.01201): z_t = sigma(W_z x_t + b_z),
    h_t = (1 - z_t) h_{t-1} + z_t (W_h x_t + b_h), the paper's vanilla (signed) candidate.

    nn.Linear's default init; b_z = logit(s), so a_t = 1 - s at zero input (docs/method.md §2b).
    """

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, **_):
        super().__init__(input_size, hidden_size)
        H, D = hidden_size, input_size
        self.W_z, self.b_z = _linear(H, D), _full(_logit(const_s), H)
        self.W_h, self.b_h = _linear(H, D), _uniform(D ** -0.5, H)

    def recurrent_weights(self):
        return ["W_h"]

    def coefficients(self, x):
        k = F.linear(x, self.W_z, self.b_z)
        return torch.sigmoid(-k), torch.sigmoid(k) * F.linear(x, self.W_h, self.b_h)


class MinLSTM(DiagonalLinear):
    """minLSTM (arXiv:2410.01201): f, i = sigma(W x_t + b), normalised f' = f / (f + i), i' = i / (f + i),
    h_t = f'_t h_{t-1} + i'_t (W_h x_t + b_h).

    b_f = logit(1 - s), b_i = logit(s): f' = 1 - s at zero input, the minGRU at init (§2b).
    """

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, **_):
        super().__init__(input_size, hidden_size)
        H, D = hidden_size, input_size
        self.W_f, self.b_f = _linear(H, D), _full(_logit(1 - const_s), H)
        self.W_i, self.b_i = _linear(H, D), _full(_logit(const_s), H)
        self.W_h, self.b_h = _linear(H, D), _uniform(D ** -0.5, H)

    def recurrent_weights(self):
        return ["W_h"]

    def coefficients(self, x):
        f = torch.sigmoid(F.linear(x, self.W_f, self.b_f))
        i = torch.sigmoid(F.linear(x, self.W_i, self.b_i))
        return f / (f + i), i / (f + i) * F.linear(x, self.W_h, self.b_h)


class RGLRU(DiagonalLinear):
    """Real-Gated Linear Recurrent Unit (De et al. 2024, arXiv:2402.19427) on u_t = W_u x_t + b_u:
    r_t = sigma(W_a u_t + b_a), i_t = sigma(W_x u_t + b_x), a_t = sigma(Lambda)^(c r_t) with c = 8,
    h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t u_t).

    Gate weights N(0, 1/H) and zero biases (the reference code); Lambda = logit((1 - s)^(2/c)), so
    a_t = 1 - s at the typical gate value r_t = 1/2 (docs/method.md §2b).
    """

    c = 8.0

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, **_):
        super().__init__(input_size, hidden_size)
        H, D = hidden_size, input_size
        self.W_u, self.b_u = _linear(H, D), _uniform(D ** -0.5, H)
        self.W_a, self.b_a = _normal(H ** -0.5, H, H), _full(0.0, H)
        self.W_x, self.b_x = _normal(H ** -0.5, H, H), _full(0.0, H)
        self.Lambda = _full(_logit((1 - const_s) ** (2 / self.c)), H)

    def recurrent_weights(self):
        return ["W_u"]

    def coefficients(self, x):
        u = F.linear(x, self.W_u, self.b_u)
        r = torch.sigmoid(F.linear(u, self.W_a, self.b_a))
        i = torch.sigmoid(F.linear(u, self.W_x, self.b_x))
        a = torch.exp(-self.c * r * F.softplus(-self.Lambda))
        return a, BoundedSqrt.apply(1 - a * a) * (i * u)


class BoundedSqrt(torch.autograd.Function):
    """sqrt(y) whose derivative is capped at :attr:`MAX_GRAD`, as in the RG-LRU reference code: the
    input normaliser sqrt(1 - a_t^2) has an infinite slope as a_t -> 1 (gate r_t -> 0), which
    turned a training's loss to NaN (docs/method.md §2b). Backward, forward-mode and vmap (the
    snapshot's tangents) all take the capped slope."""

    MAX_GRAD = 1000.0
    generate_vmap_rule = True

    @staticmethod
    def forward(y: Tensor) -> Tensor:
        return torch.sqrt(y)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def slope(y: Tensor) -> Tensor:
        return 1 / torch.sqrt(torch.clamp(4 * y, min=1 / BoundedSqrt.MAX_GRAD ** 2))

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad * BoundedSqrt.slope(ctx.saved_tensors[0])

    @staticmethod
    def jvp(ctx, tangent: Tensor) -> Tensor:
        return tangent * BoundedSqrt.slope(ctx.saved_tensors[0])


class LRU(DiagonalLinear):
    """Linear Recurrent Unit (Orvieto et al. 2023, arXiv:2303.06349), complex diagonal:
    lambda = exp(-exp(nu_log) + i exp(theta_log)), h_t = lambda h_{t-1} + gamma (B x_t),
    hidden = Re(c h_t) + D x_t with gamma = exp(gamma_log), B = B_re + i B_im (H x D).

    The paper's C (H x N) is diagonal here (c in C^H): the readout W_out after it is a scalar row,
    so W_out C is any complex row either way. Init: |lambda| = 1 - s on every unit (the ring
    r_min = r_max = 1 - s), phases theta = 2 pi U[0, 1) (the paper's max_phase), gamma_log =
    ln sqrt(1 - |lambda|^2), B parts N(0, 1/(2D)), c parts N(0, 1) (E|c|^2 = 2, as a row of the
    paper's C), D N(0, 1/D). The transported state is complex; psi and the tangents treat it
    as (Re h, Im h) (docs/method.md §2b).
    """

    complex_state = True

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, **_):
        super().__init__(input_size, hidden_size)
        H, D = hidden_size, input_size
        radius = 1 - const_s
        self.nu_log = _full(math.log(-math.log(radius)), H)
        theta = 2 * math.pi * torch.rand(H).clamp_min(1e-6)
        self.theta_log = nn.Parameter(torch.log(theta))
        self.gamma_log = _full(0.5 * math.log(1 - radius ** 2), H)
        self.B_re, self.B_im = _normal((2 * D) ** -0.5, H, D), _normal((2 * D) ** -0.5, H, D)
        self.c_re, self.c_im = _normal(1.0, H), _normal(1.0, H)
        self.D = _normal(D ** -0.5, H, D)

    def recurrent_weights(self):
        return ["B_re", "B_im"]

    def eigenvalues(self) -> Tensor:
        """lambda (H,), complex."""
        return torch.exp(torch.complex(-torch.exp(self.nu_log), torch.exp(self.theta_log)))

    def coefficients(self, x):
        bx = torch.complex(F.linear(x, self.B_re), F.linear(x, self.B_im))
        return self.eigenvalues()[None, None], torch.exp(self.gamma_log) * bx

    def readout(self, state, x):
        return self.c_re * state.real - self.c_im * state.imag + F.linear(x, self.D)

    def receive(self, x):
        return torch.complex(self.c_re, self.c_im)[None, None]


class S6(DiagonalLinear):
    """Selective state-space layer of Mamba (Gu and Dao 2023, arXiv:2312.00752) on u_t = W_in x_t:
    Delta_t = softplus(W_dt W_xdt u_t + b_dt) (H), B_t = W_B u_t, C_t = W_C u_t (N),
    h_{t,d,n} = exp(Delta_{t,d} A_{d,n}) h_{t-1,d,n} + Delta_{t,d} B_{t,n} u_{t,d} (the reference
    code's Euler input term), hidden_{t,d} = sum_n C_{t,n} h_{t,d,n} + D_d u_{t,d}.

    N = ``model.state_size``, rank R = ceil(H / 16). Init as the reference code (A = -(1..N)
    S4D-real, D = 1, W_dt uniform(+-R^-1/2), nn.Linear's default for W_in, W_xdt, W_B, W_C) except
    b_dt = softplus^-1(-ln(1 - s)) = logit(s): state n = 1 decays by 1 - s per step at zero input,
    state n by (1 - s)^n (docs/method.md §2b). Transported: the H N states, unit d owning its N.
    """

    def __init__(self, input_size, hidden_size, layer_norm, *, const_s, state_size, **_):
        super().__init__(input_size, hidden_size)
        H, D, N = hidden_size, input_size, int(state_size)
        R = math.ceil(H / 16)
        self.components = N
        self.W_in = _linear(H, D)
        self.W_xdt, self.W_B, self.W_C = _linear(R, H), _linear(N, H), _linear(N, H)
        self.W_dt = _uniform(R ** -0.5, H, R)
        self.b_dt = _full(_logit(const_s), H)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(H, 1))
        self.D = _full(1.0, H)

    def recurrent_weights(self):
        return ["W_in"]

    def _project(self, x):
        u = F.linear(x, self.W_in)
        delta = F.softplus(F.linear(F.linear(u, self.W_xdt), self.W_dt, self.b_dt))
        return u, delta, F.linear(u, self.W_B), F.linear(u, self.W_C)

    def coefficients(self, x):
        u, delta, Bt, _ = self._project(x)
        a = torch.exp(-delta[..., None] * torch.exp(self.A_log))  # (B, T, H, N)
        b = (delta * u)[..., None] * Bt[..., None, :]
        return a.flatten(-2), b.flatten(-2)

    def readout(self, state, x):
        u, _, _, Ct = self._project(x)
        h = state.unflatten(-1, (self.hidden_size, self.components))
        return (h * Ct[..., None, :]).sum(-1) + self.D * u

    def receive(self, x):
        Ct = self._project(x)[3]
        return Ct[..., None, :].expand(*Ct.shape[:-1], self.hidden_size, self.components).flatten(-2)
