"""Stacks of any registered cell in the published block shapes (docs/method.md §2c).

A :class:`Stack` of L :class:`Block` layers is itself a cell of :class:`learnwin.models.cells.GatedRNN`:
the readout reads its output stream (width H, ``out_size``), and the probes see one cell whose
units are every layer's (``hidden_size`` = L W) and whose full state z is every layer's, layer
by layer: the cell's own full state (:mod:`learnwin.models.state`), then the last k inputs of
the block's convolution when it has one. One step z_{t-1} -> z_t (:meth:`Stack.state_step`) and
the readout of z_t (:meth:`Stack.output`) are pointwise in time, so the exact transport
differentiates a stack as it does a cell, cross-layer paths within a step included.

Training runs layer by layer over whole sequences, each cell on its own fast path (the
hand-written BPTT, or the parallel scan of the linear cells); the blocks' parts are pointwise
or, for the convolution, one product over the (B, T, k, W) windows. There is no loop over time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from learnwin.infra.blocks import BlockSpec
from learnwin.models.trace import Trace

_ACT = {"gelu": F.gelu, "silu": F.silu, None: lambda v: v}


class RMSNorm(nn.Module):
    """u / rms(u) times a learned gain (Zhang and Sennrich 2019), the norm of the Hawk and Mamba blocks."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, u: Tensor) -> Tensor:
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _norm(kind: str | None, width: int) -> nn.Module:
    return {"layer": nn.LayerNorm, "rms": RMSNorm}[kind](width) if kind else nn.Identity()


@dataclass
class StackTrace(Trace):
    """A stack's :class:`Trace` (docs/method.md §2c): every field is its layers' concatenated, units
    layer-major; ``transported`` is the full state z, and ``parts`` the layers' own traces, whose
    pre-synaptic vectors give each layer its base rate Lambda."""

    parts: tuple[Trace, ...] = ()

    @property
    def presynaptic(self) -> Tensor:
        raise AttributeError("a stack's pre-synaptic vectors are per layer: read StackTrace.parts")


class Block(nn.Module):
    """One layer: the cell in the parts of a :class:`learnwin.infra.blocks.BlockSpec` (docs/method.md §2c),
    whose arithmetic (the state the layer holds, its copied rows, its cost) is the spec's.

    mixer: a = norm(u); v = W_in a (or a); c = act(conv_k(v)) (or v); the cell on c gives hidden;
    o = hidden * act(W_g a) (gate branch); o = GLU(GELU(o)) (post) or W_out o (or o);
    u' = u + o (residual; or o); then u' = u' + MLP(norm(u')) (mlp). ``first`` marks the first
    layer of a block without an embedding: it reads x itself and has no residual.
    """

    def __init__(self, spec: BlockSpec, cell: nn.Module, width: int, first: bool):
        super().__init__()
        self.spec, self.cell, self.first = spec, cell, first
        W, k = cell.hidden_size, spec.conv
        self.norm = _norm(spec.norm, width) if not first else nn.Identity()
        self.in_proj = nn.Linear(width, W) if spec.projected and spec.in_proj else None
        self.gate = nn.Linear(width, W) if spec.gate else None
        if k:  # depthwise causal convolution, nn.Conv1d's default init
            bound = 1 / math.sqrt(k)
            self.conv_w = nn.Parameter(torch.empty(k, W).uniform_(-bound, bound))
            self.conv_b = nn.Parameter(torch.empty(W).uniform_(-bound, bound))
        if spec.post == "glu":
            self.glu = nn.Linear(W, 2 * width)
        elif spec.projected:
            self.out_proj = nn.Linear(W, width)
        if spec.mlp:
            inner = spec.mlp_expand * width
            self.mlp_norm = _norm(spec.norm, width)
            self.mlp_in = nn.Linear(width, inner * (2 if spec.mlp == "geglu" else 1))
            self.mlp_out = nn.Linear(inner, width)
        self.cell_width = cell.state_width  # the cell's own full state, first in the layer's z
        self.width = spec.layer_state(self.cell_width, W)

    # -- pointwise parts -------------------------------------------------------------------
    def mix_in(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """(a, v): the normed stream and the cell-side input before the convolution."""
        a = self.norm(u)
        return a, (a if self.in_proj is None else self.in_proj(a))

    def cell_input(self, window: Tensor) -> Tensor:
        """The cell's input from the convolution window (..., k, W) of the last k values of v."""
        return _ACT[self.spec.conv_act]((window * self.conv_w).sum(-2) + self.conv_b)

    def mix_out(self, u: Tensor, a: Tensor, hidden: Tensor) -> Tensor:
        """u' from the block input u, its normed a and the cell's hidden output."""
        o = hidden
        if self.gate is not None:
            o = o * _ACT[self.spec.gate](self.gate(a))
        if self.spec.post == "glu":
            o, g = self.glu(F.gelu(o)).chunk(2, -1)
            o = o * torch.sigmoid(g)
        elif self.spec.projected:
            o = self.out_proj(o)
        out = o if self.first or not self.spec.residual else u + o
        if self.spec.mlp:
            m = self.mlp_in(self.mlp_norm(out))
            if self.spec.mlp == "geglu":
                m, g = m.chunk(2, -1)
                m = m * F.gelu(g)
            else:
                m = F.gelu(m)
            out = out + self.mlp_out(m)
        return out

    def windows(self, v: Tensor) -> Tensor:
        """(B, T, k, W): at each t the last k values v_{t-k+1..t} (zeros before the start)."""
        k = self.spec.conv
        return F.pad(v, (0, 0, k - 1, 0)).unfold(1, k, 1).transpose(-1, -2)

    def window_of(self, z: Tensor) -> Tensor:
        """The convolution window (..., k, W) held in this layer's full state z_i."""
        return z[..., self.cell_width:].unflatten(-1, (self.spec.conv, -1))

    # -- whole sequences, one step, the readout of a state --------------------------------------
    def seq(self, u: Tensor, reference: bool = False, trace: bool = False):
        """(u', z_i, trace_i) over a sequence u (B, T, width): the layer's output stream, its full
        state (B, T, width of z_i) and, with ``trace``, its cell's :class:`Trace` (else None)."""
        a, c = self.mix_in(u)
        window = None
        if self.spec.conv:
            window = self.windows(c)
            c = self.cell_input(window)
        if trace:
            part = self.cell.trace(c)
            hidden, moved = part.hidden, part.transported
        else:
            part = None
            hidden, moved = self.cell(c, reference=reference)
        z = self.cell.full_state(hidden, moved)
        if window is not None:
            z = torch.cat([z, window.flatten(-2)], -1)
        return self.mix_out(u, a, hidden), z, part

    def step(self, u: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """(u'_t, z_{i,t}) from u_t (R, width) and this layer's z_{i,t-1} (R, width of z_i)."""
        a, c = self.mix_in(u)
        zc = z[..., :self.cell_width]
        window = None
        if self.spec.conv:
            window = torch.cat([self.window_of(z)[..., 1:, :], c[..., None, :]], -2)
            c = self.cell_input(window)
        hidden, zc = self.cell.cell_step(self.cell.step_input(c), zc)
        z = zc if window is None else torch.cat([zc, window.flatten(-2)], -1)
        return self.mix_out(u, a, hidden), z

    def output(self, u: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """(u'_t, hidden_t) from u_t and this layer's z_{i,t}: the layer's part of the readout of z_t."""
        a, c = self.mix_in(u)
        if self.spec.conv:
            c = self.cell_input(self.window_of(z))
        hidden = self.cell.hidden_of(self.cell.step_input(c), z[..., :self.cell_width])
        return self.mix_out(u, a, hidden), hidden


class Stack(nn.Module):
    """L blocks of one cell class, the cell of a :class:`learnwin.models.cells.GatedRNN` (docs/method.md §2c).

    ``out_size`` is the stream width H the readout reads; ``hidden_size`` = L W counts the units
    the probes measure, layer-major; ``state_width`` is n, the side of the one-step Jacobian.
    """

    def __init__(self, cell_class: type, input_size: int, hidden: int, layers: int, spec: BlockSpec,
                 layer_norm: bool, **cell_kw):
        super().__init__()
        self.input_size, self.out_size = input_size, hidden
        self.embed = nn.Linear(input_size, hidden) if spec.embed else None
        W = hidden * spec.expand
        blocks = []
        for i in range(layers):
            first = i == 0 and not spec.embed
            cell_in = input_size if first else (W if spec.projected and spec.in_proj else hidden)
            blocks.append(Block(spec, cell_class(cell_in, W, layer_norm, **cell_kw), hidden, first))
        self.layers = nn.ModuleList(blocks)
        self.norm = _norm(spec.norm, hidden)
        self.width = W
        self.hidden_size = layers * W
        self.state_width = sum(b.width for b in blocks)

    def _slices(self):
        start = 0
        for block in self.layers:
            yield block, slice(start, start + block.width)
            start += block.width

    def _embedded(self, x: Tensor) -> Tensor:
        """The first layer's input stream: the embedding of x, or x itself."""
        return x if self.embed is None else self.embed(x)

    def _sequence(self, x: Tensor, reference: bool = False, trace: bool = False):
        """(the last block's stream, z (B, T, n), the layers' traces or Nones) over x (B, T, D)."""
        u, zs, parts = self._embedded(x), [], []
        for block in self.layers:
            u, z, part = block.seq(u, reference, trace)
            zs.append(z)
            parts.append(part)
        return u, torch.cat(zs, -1), parts

    def forward(self, x: Tensor, reference: bool = False) -> tuple[Tensor, Tensor]:
        """(output stream (B, T, H), full state z (B, T, n)) for x (B, T, D)."""
        u, z, _ = self._sequence(x, reference)
        return self.norm(u), z

    @torch.no_grad()
    def trace(self, x: Tensor) -> StackTrace:
        _, z, parts = self._sequence(x, trace=True)
        cat = lambda name: torch.cat([getattr(p, name).expand_as(p.leak) for p in parts], -1)  # noqa: E731
        hidden = torch.cat([p.hidden for p in parts], -1)
        candidate = torch.cat([p.candidate for p in parts], -1)
        return StackTrace(hidden, z, cat("leak"), cat("correction"), cat("receive"),
                          candidate, parts=tuple(parts))

    def full_state(self, hidden: Tensor, z: Tensor) -> Tensor:
        """z from the outputs of :meth:`forward`: z itself."""
        return z

    def step_input(self, x: Tensor) -> Tensor:
        """x itself: :meth:`state_step` takes the raw x_t and embeds it."""
        return x

    def state_step(self, x: Tensor, z: Tensor) -> Tensor:
        """z_t from x_t (R, D) and z_{t-1} (R, n): one step of every layer, bottom to top."""
        u = self._embedded(x)
        out = []
        for block, sl in self._slices():
            u, zi = block.step(u, z[..., sl])
            out.append(zi)
        return torch.cat(out, -1)

    def output(self, x: Tensor, z: Tensor) -> tuple[Tensor, list[Tensor]]:
        """(the readout's input at t, every layer's hidden_t) from x_t and z_t, any leading shape."""
        u = self._embedded(x)
        hidden = []
        for block, sl in self._slices():
            u, h = block.output(u, z[..., sl])
            hidden.append(h)
        return self.norm(u), hidden

    def output_sources(self, x: Tensor, z: Tensor, error: Tensor, w_out: Tensor) -> tuple[Tensor, Tensor]:
        """(delta (B, T, L W), src (B, T, n)) of the error ``error`` = y_hat - y (B, T): the
        readout's gradient on every layer's hidden output and on z_t, each with the rest of z_t
        held (docs/method.md §2c); at one ``stacked`` layer, delta = (y_hat - y) W_out as for a cell."""
        with torch.enable_grad():
            zg = z.detach().requires_grad_(True)
            out, hidden = self.output(x, zg)
            y = (out @ w_out.reshape(-1, 1)).squeeze(-1)
            grads = torch.autograd.grad((y * error).sum(), [zg, *hidden], allow_unused=True)
        # a layer whose hidden output reaches the readout only through the states above it (no
        # residual: ``stacked``) has no error with z_t held
        delta = [torch.zeros_like(h) if g is None else g for g, h in zip(grads[1:], hidden)]
        return torch.cat(delta, -1).detach(), grads[0].detach()

    def transported(self, z: Tensor) -> Tensor:
        """The transported components (..., P) of full-state-shaped values, layer-major (complex for
        a complex cell): what the diagonal transport moves (docs/method.md §2c)."""
        return torch.cat([block.cell.transported(z[..., sl][..., :block.cell_width])
                          for block, sl in self._slices()], -1)

    def rate_groups(self) -> list[list[str]]:
        """Per layer, the names (in this module) of the weights whose rates make its Lambda (§4, §2c)."""
        return [[f"layers.{i}.cell.{n}" for n in block.cell.recurrent_weights()]
                for i, block in enumerate(self.layers)]

    def copied(self) -> list[tuple[int, int, int]]:
        """(row, column, length) ranges of z that one step copies, z_t[row + i] = z_{t-1}[column + i]:
        each convolution window's k - 1 older inputs moving one slot (docs/method.md §2c). Their rows
        of the one-step Jacobian are unit rows."""
        return [(sl.start + row, sl.start + column, length) for block, sl in self._slices()
                for row, column, length in block.spec.copied(block.cell_width, block.cell.hidden_size)]

    def top_down(self) -> Tensor:
        """Indices of z with the layers top to bottom (each layer's own order kept): the order in
        which the one-step Jacobian is block upper-triangular (docs/method.md §2c, §4c)."""
        return torch.cat([torch.arange(sl.start, sl.stop) for _, sl in reversed(list(self._slices()))])

    def layer_states(self) -> list[tuple[nn.Module, slice, int]]:
        """(cell, its full state's slice of z, its cell-state width) per layer, bottom to top."""
        return [(block.cell, slice(sl.start, sl.start + block.cell_width), block.width - block.cell_width)
                for block, sl in self._slices()]


