"""Exact transport: Jacobian products of the recurrence instead of the diagonal Gamma (docs/method.md §4b).

The paper's Eq. 10 is exact: g_{t,l} = delta_t^T M_{t,l} B_l with M_{t,l} = d z_t / d z_{t-l}, z
the full state of the recurrence: z = h, or z = (h, c) for the LSTM (2H components). One
backward (adjoint) sweep through the recurrence gives, for every receiving time t at once,

    a_{t,k} = M_{t,t-k}^T src_t   for every k <= t   (a_{t,t} = src_t),

with one adjoint stack per block of the state (the whole state, or h and c for the LSTM), each
(B, T, P, n_s), multiplied by the exact one-step Jacobian J_k = d z_k / d z_{k-1} at each step
k = T-1..1 (rows t >= k only; in place, or two stacks allocated once take turns). The J_k of all steps come at
once (vectorised over sequences and time) from the cell's closed-form ``step_jacobian`` (every gate
path and the LayerNorm Jacobian; tested against autograd), or, for a cell without one, from one
batched autograd backward of its ``step`` over the S H basis rows (docs/method.md §2a; a stack's
copied window rows are set, not differentiated, §2c). A cell with
``step_jacobian_blocks`` (the LSTM) is swept in that block form: its c-block is diagonal, so only
d c_t / d h_{t-1} is stored per step (:class:`CellStateJacobians`). The sweep's loop over time
steps is the only loop; the forward pass (the trace) is shared with the diagonal path.

What is computed from the adjoints (the same Lambda, averages and directions as the diagonal
path of :mod:`learnwin.probing.envelope` and :mod:`learnwin.probing.detect`):

* psi (src_t = delta_t on the h block): psi_n(l) = mean over every t = l..T-1 of
  sum_q a_{t,t-l}^q Lambda^q(n, t-l) v_{t-l}^q, v the tangent of the full state z (mean over the
  K directions first, as in :func:`learnwin.probing.snapshot.probe`); lags 0..T-1 all come from one sweep.
  S_n = sum over l = 0..T-1 of psi_n(l) (docs/method.md §7b, the instantaneous term l = 0 included).
* the signal envelope f (primary, from the same sweep): with a^q the component of a_{t,t-l} on
  unit q's transported state (h^q, or c^q for the LSTM),
  f(l) = mean_{n,t} sum_q Lambda^q(n, t-l) |a^q_{t,t-l}| / dbar(l),
  dbar(l) = mean_{n,t} (1/H) sum_q |delta^q_t| over the same (n, t): every sequence and every
  receiving time t = l..T-1, as psi. f_geo is exp(mean_{n,t} log sum_q Lambda^q |a^q|) / dbar(l);
  the per-unit means mean Lambda^q |a^q| / dbar give tau_q (:func:`learnwin.probing.envelope.unit_timescales`).
* the secondary functionals (src_t = the H basis vectors e_p on the h block, so the adjoints are
  the rows of d h_t / d z_{t-l}; its H x H block on the transported components is called M):
  f_diag_entries(l) = mean sum_q Lambda^q |M_qq| (the quantity the diagonal Gamma approximates)
  and f_norm(l) = mean sqrt(H) ||M diag(Lambda)||_F, on the first ``snapshot.exact_sequences``
  diag sequences and, per lag, the ``snapshot.times_per_lag`` receiving times of the diagonal envelope
  (:func:`learnwin.probing.envelope.receiving_times`).

Choices (docs/method.md §4b silent):
* LSTM: the adjoint and the tangent live on (h, c); unit q's base rate Lambda^q weights both of
  its components, h^q and c^q in psi (the rate belongs to the recurrent rows of unit q, which feed
  both through the gates); the envelopes read the transported component c^q.
* Work is in the model's dtype (float32 in the workflow, float64 in the tests); sums over
  sequences and times accumulate in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from learnwin.models.state import real_view
from learnwin.probing.envelope import prefix_sum, receiving_times, unit_timescales

_TINY = 1e-300


#: Elements of one chunk of :func:`autograd_jacobian`'s batched backward: rows x n basis x n.
JACOBIAN_CHUNK = 1 << 24


def autograd_jacobian(step: Callable[[Tensor, Tensor], Tensor], xp: Tensor, z_prev: Tensor,
                      rows: Tensor | None = None) -> Tensor:
    """J[b, i, j] = d z_t[rows[i]] / d z_{t-1}[j] (B, r, n) of the map ``step(xp, z_{t-1}) -> z_t``:
    the rows ``rows`` of the one-step Jacobian (default all n), by one batched backward of their
    basis vectors per chunk of rows (:data:`JACOBIAN_CHUNK` bounds its work), into one J."""
    R, n = z_prev.shape
    rows = torch.arange(n, device=z_prev.device) if rows is None else rows
    chunk = max(1, JACOBIAN_CHUNK // (len(rows) * n))
    basis = torch.eye(n, dtype=z_prev.dtype, device=z_prev.device)[rows, None]
    J = z_prev.new_empty(R, len(rows), n)
    with torch.enable_grad():
        for i in range(0, R, chunk):
            z = z_prev[i:i + chunk].detach().requires_grad_(True)
            out = step(xp[i:i + chunk], z)
            grads = torch.autograd.grad(out, z, basis.expand(len(rows), *z.shape), is_grads_batched=True)[0]
            J[i:i + chunk] = grads.transpose(0, 1)  # grads[r, b] = J_b[rows[r]]
    return J


def _scratch(buffer: Tensor, a: Tensor, k: int, T: int, width: int) -> tuple[Tensor, Tensor]:
    """(buffer, a contiguous (B, R, width) view of it) for row adjoints ``a`` (B, R, n) at step k of
    a sweep over T steps: the buffer grows, at the sweep's first step, to the rows of every step."""
    B, R, _ = a.shape
    if buffer.numel() < B * R * width:
        buffer = a.new_empty(B * (R // (T - k)) * T * width)
    return buffer, buffer[:B * R * width].view(B, R, width)


def _kept(copied: Sequence[tuple[int, int, int]], n: int) -> list[tuple[int, int]]:
    """(start, length) ranges of [0, n) outside the ``copied`` rows, in order."""
    kept, start = [], 0
    for row, _, length in sorted(copied):
        if row > start:
            kept.append((start, row - start))
        start = row + length
    return kept + ([(start, n - start)] if start < n else [])


class DenseJacobians:
    """One-step Jacobians stored densely by rows (docs/method.md §4b, §2c): ``rows`` (B, T, r, n)
    holds, in the order of z, every row of J_k outside ``copied``, the (row, column, length) ranges
    that a stack's step copies (z_t[row + i] = z_{t-1}[column + i], unit rows:
    :meth:`learnwin.models.stack.Stack.copied`); without copies it is J itself."""

    in_place = False  # a product cannot overwrite its input: the sweep gives it a second stack

    def __init__(self, rows: Tensor, copied: Sequence[tuple[int, int, int]] = ()):
        self.rows, self.copied = rows, tuple(copied)
        self.widths = (rows.shape[-1],)  # the stack's blocks: the whole state
        self.kept = _kept(self.copied, rows.shape[-1])
        self._scratch = rows.new_empty(0)  # the adjoints' kept columns, one contiguous block

    def head(self, n: int) -> DenseJacobians:
        """The first ``n`` sequences."""
        return DenseJacobians(self.rows[:n], self.copied)

    def left(self, A: Sequence[Tensor], out: Sequence[Tensor], k: int) -> None:
        """out <- A J_k for row adjoints A[0] (B, R, n), written into ``out[0]`` of the same shape:
        with copies, the adjoints' columns of the stored rows gathered into one block and one
        product with them, then each copied range added to the columns it copies."""
        a, o, J = A[0], out[0], self.rows[:, k]
        if not self.copied:
            torch.bmm(a, J, out=o)
            return
        self._scratch, gathered = _scratch(self._scratch, a, k, self.rows.shape[1], J.shape[1])
        torch.cat([a.narrow(-1, start, length) for start, length in self.kept], -1, out=gathered)
        torch.bmm(gathered, J, out=o)
        for row, column, length in self.copied:
            o.narrow(-1, column, length).add_(a.narrow(-1, row, length))

    def dense(self) -> Tensor:
        """J (B, T, n, n) with the copied rows filled in."""
        return self._filled(self.rows)

    def step(self, k: int) -> Tensor:
        """J_k (B, n, n) with the copied rows filled in: one step's, without the whole dense J."""
        return self._filled(self.rows[:, k])

    def _filled(self, rows: Tensor) -> Tensor:
        """J (..., n, n) from stored rows (..., r, n)."""
        if not self.copied:
            return rows
        n = rows.shape[-1]
        J = rows.new_zeros(*rows.shape[:-2], n, n)
        offset = 0
        for start, length in self.kept:
            J[..., start:start + length, :] = rows[..., offset:offset + length, :]
            offset += length
        for row, column, length in self.copied:
            J[..., row:row + length, column:column + length].diagonal(dim1=-2, dim2=-1).fill_(1)
        return J


def dense_jacobians(cell: torch.nn.Module, x: Tensor, z: Tensor) -> DenseJacobians:
    """The one-step Jacobians J[:, k] = d z_k / d z_{k-1} of every step at once, by rows.

    ``z`` (B, T, n) is the full state of the forward pass (from the trace). The cell's
    closed-form ``step_jacobian(xp, z_prev)`` when it has one, else :func:`autograd_jacobian` of
    its ``state_step`` (learnwin.models.state; a stack's includes every cross-layer path within the
    step, §2c; the rows its step copies, its ``copied()``, are not differentiated).
    """
    B, T, n = z.shape
    with torch.no_grad():
        xp = cell.step_input(x)
        z_prev = F.pad(z, (0, 0, 1, 0))[:, :-1]
        args = (xp.reshape(B * T, -1), z_prev.reshape(B * T, n))
        step = getattr(cell, "step_jacobian", None)
        if step is not None:
            return DenseJacobians(step(*args).reshape(B, T, n, n))
        copied = cell.copied()
        rows = torch.cat([torch.arange(start, start + length) for start, length in _kept(copied, n)])
        J = autograd_jacobian(cell.state_step, *args, rows.to(z.device))
    return DenseJacobians(J.reshape(B, T, len(rows), n), copied)


def jacobians(cell: torch.nn.Module, x: Tensor, z: Tensor) -> Tensor:
    """One-step Jacobians J[:, k] = d z_k / d z_{k-1} (B, T, n, n) of every step at once
    (:func:`dense_jacobians`, filled in)."""
    return dense_jacobians(cell, x, z).dense()


class CellStateJacobians:
    """One-step Jacobians of an (h, c) state in the block form of ``step_jacobian_blocks``
    (docs/method.md §4b): J = [[diag(p) W + diag(e) C, diag(e f)], [C, diag(f)]], C (B, T, H, H)
    dense, p, e, f (B, T, H) and W (H, H) shared. A J costs one H x H product per row with C and
    one with the shared W: half the work of the dense 2H x 2H product, a quarter of its storage.
    """

    in_place = True  # out may be A itself: the sweep updates one stack (less memory traffic)

    def __init__(self, C: Tensor, p: Tensor, e: Tensor, f: Tensor, W: Tensor):
        self.C, self.p, self.e, self.f, self.W = C, p, e, f, W
        self.widths = (W.shape[0], W.shape[0])  # the stack's blocks: h and c
        self._scratch = C.new_empty(0)  # the new a_h, contiguous (a product into strided rows is slower)

    def head(self, n: int) -> CellStateJacobians:
        """The first ``n`` sequences."""
        return CellStateJacobians(self.C[:n], self.p[:n], self.e[:n], self.f[:n], self.W)

    def left(self, A: Sequence[Tensor], out: Sequence[Tensor], k: int) -> None:
        """out <- ((a_h p) W + u C, u f), u = a_h e + a_c, for row adjoints (a_h, a_c) = A (B, R, H)
        into ``out`` of the same shapes, which may be A itself; a_h is scaled in place."""
        (a_h, a_c), (o_h, o_c) = A, out
        B, R, H = a_h.shape
        torch.addcmul(a_c, a_h, self.e[:, k, None], out=o_c)  # u
        a_h.mul_(self.p[:, k, None])
        self._scratch, new_h = _scratch(self._scratch, a_h, k, self.C.shape[1], H)
        o_h.copy_(torch.bmm(a_h, self.W.expand(B, H, H), out=new_h).baddbmm_(o_c, self.C[:, k]))
        o_c.mul_(self.f[:, k, None])


StepJacobians = DenseJacobians | CellStateJacobians


def step_jacobians(cell: torch.nn.Module, x: Tensor, z: Tensor) -> StepJacobians:
    """The one-step Jacobians of every step as the sweep uses them (docs/method.md §4b).

    The block form of the cell's ``step_jacobian_blocks`` when it has one (the LSTM), else
    :func:`dense_jacobians`.
    """
    blocks = getattr(cell, "step_jacobian_blocks", None)
    if blocks is None:
        return dense_jacobians(cell, x, z)
    B, T, n = z.shape
    with torch.no_grad():
        xp = cell.step_input(x)
        z_prev = F.pad(z, (0, 0, 1, 0))[:, :-1]
        C, p, e, f, W = blocks(xp.reshape(B * T, -1), z_prev.reshape(B * T, n))
    H = n // 2
    return CellStateJacobians(C.view(B, T, H, H), p.view(B, T, H), e.view(B, T, H), f.view(B, T, H),
                              W.detach())


def adjoint_sweep(J: StepJacobians, src: Tensor, visit: Callable[[int, tuple[Tensor, ...]], None]) -> None:
    """Propagate the adjoints ``src`` (B, T, P, n), injected at their receiving times, backward.

    ``J`` holds the one-step Jacobians (:func:`step_jacobians`). At step k, ``visit(k, A)`` sees the
    stack: one buffer A[s] (B, T, P, n_s) per block of the state in ``J.widths`` (the whole state, or
    h and c for the LSTM; the last block holds the transported components), whose rows t >= k hold
    the adjoints of every receiving time t at perturbation time k, A[s][:, t] = block s of
    a_{t,k} = M_{t,k}^T src_t (rows t < k hold src_t). Unless the product works in place
    (``J.in_place``), two such stacks are allocated once and take turns: the step's product is
    written from one into the other, rows t >= k only, so a row t < k of either still holds its
    source when its turn comes. Read A only within the call.
    """
    B, T, P, n = src.shape
    stack = tuple(block.clone() for block in src.split(J.widths, -1))
    spare = stack if J.in_place else tuple(block.clone() for block in stack)
    rows = lambda blocks, k: [s[:, k:].view(B, -1, s.shape[-1]) for s in blocks]  # noqa: E731
    for k in range(T - 1, -1, -1):
        visit(k, stack)
        if k > 0:  # a_{t,k-1} = a_{t,k} J_k on the rows t >= k
            J.left(rows(stack, k), rows(spare, k), k)
            stack, spare = spare, stack


def _h_block(values: Tensor, S: int) -> Tensor:
    """Put (..., H) values on the h block of the full state (..., S H)."""
    return F.pad(values, (0, values.shape[-1] * (S - 1)))


class StateLayout:
    """Where hidden units sit in the full state z (n components), docs/method.md §4b and §2b.

    Gated cells: unit q's transported component is z[col + q] (col = 0, or H for the LSTM's c),
    sources go on the h block and Lambda^q weights each block. Diagonal linear cells: unit q owns
    the m = n / H components z[q m:(q + 1) m] (its P / H states, Re and Im for a complex one),
    and the source of per-unit values d is the real view of conj(R_t) d (R_t = ``receive``).
    In every cell the transported components are the last H m of z, so they are also the last
    H m of the sweep's last block (:func:`adjoint_sweep`).
    """

    def __init__(self, cell: torch.nn.Module, n: int, receive: Tensor | None = None):
        H = cell.hidden_size
        self.H, self.linear, self.S = H, cell.per_unit_state, cell.state_blocks
        self.m = n // H if self.linear else 1
        self.receive = receive

    def source(self, values: Tensor) -> Tensor:
        """Sources (B, T, [P,] n) of per-unit values (B, T, H), or of basis rows (R, H)."""
        if not self.linear:
            return _h_block(values, self.S)
        R = self.receive.conj()
        if values.dim() == 2:  # basis rows: (B, T, R, P)
            R = R[:, :, None]
        return real_view(R * values.repeat_interleave(R.shape[-1] // self.H, -1))

    def lam_components(self, lam: Tensor) -> Tensor:
        """Lambda^q on every component of the full state (B, T, n)."""
        return lam.repeat_interleave(self.m, -1) if self.linear else lam.repeat(1, 1, self.S)

    def transported(self, A: Tensor) -> Tensor:
        """The transported components (..., H m) of values on the full state or its last block."""
        return A[..., -self.H * self.m:]

    def unit_norm(self, block: Tensor) -> Tensor:
        """|a^q| (..., H) from transported components (..., H m): the norm over unit q's."""
        return block.abs() if self.m == 1 else torch.linalg.vector_norm(block.unflatten(-1, (self.H, self.m)), dim=-1)

    def per_unit(self, A: Tensor) -> Tensor:
        """|a^q| (..., H) from adjoints (..., n) or their last block."""
        return self.unit_norm(self.transported(A))

    def diagonal_norm(self, M: Tensor) -> Tensor:
        """|M_qq| (..., H) of H rows (..., H, H m) on the transported components: the norm of row q
        over unit q's components (:meth:`unit_norm` of the diagonal only)."""
        if self.m == 1:
            return torch.diagonal(M, dim1=-2, dim2=-1).abs()
        return torch.linalg.vector_norm(torch.diagonal(M.unflatten(-1, (self.H, self.m)), dim1=-3, dim2=-2), dim=-2)


class StackLayout(StateLayout):
    """Where a stack's units sit in its full state z (docs/method.md §2c): each layer's cell state
    is laid out as a cell's (:class:`StateLayout`) at the layer's offset, units layer-major; the
    convolution window that follows it owns no transported component, and its channel c carries
    the Lambda of unit c of the layer (the channel it feeds)."""

    def __init__(self, layers: Sequence[tuple[torch.nn.Module, slice, int]], receive: Tensor | None = None):
        self.parts, self.moved, start = [], [], 0
        for cell, sl, window in layers:
            layout = StateLayout(cell, sl.stop - sl.start)
            P = layout.H * layout.m // (2 if getattr(cell, "complex_state", False) else 1)
            layout.receive = None if receive is None else receive[..., start:start + P]
            start += P
            self.parts.append((layout, window))
            begin, length = sl.stop - layout.H * layout.m, layout.H * layout.m
            if self.moved and sum(self.moved[-1]) == begin:  # adjacent to the layer below's: one range
                begin, length = self.moved[-1][0], self.moved.pop()[1] + length
            self.moved.append((begin, length))  # (start, length) of transported components in z
        self.H, self.m = sum(layout.H for layout, _ in self.parts), self.parts[0][0].m

    def _layers(self, values: Tensor) -> list[Tensor]:
        return values.split([layout.H for layout, _ in self.parts], -1)

    def source(self, values: Tensor) -> Tensor:
        return torch.cat([F.pad(layout.source(v), (0, window))
                          for (layout, window), v in zip(self.parts, self._layers(values))], -1)

    def lam_components(self, lam: Tensor) -> Tensor:
        return torch.cat([torch.cat([layout.lam_components(v), v.repeat(1, 1, window // layout.H)], -1)
                          for (layout, window), v in zip(self.parts, self._layers(lam))], -1)

    def transported(self, A: Tensor) -> Tensor:
        parts = [A.narrow(-1, start, length) for start, length in self.moved]
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)


def layout_of(cell: torch.nn.Module, n: int, receive: Tensor | None = None) -> StateLayout:
    """The layout of a full state of ``n`` components from its layers
    (:func:`learnwin.models.state.layer_states`): the :class:`StateLayout` of one layer's cell
    without a window after it, else a :class:`StackLayout` (docs/method.md §2c)."""
    layers = cell.layer_states()
    inner, _, window = layers[0]
    if len(layers) == 1 and not window:
        return StateLayout(inner, n, receive)
    return StackLayout(layers, receive)


class ExactAccumulator:
    """Streams batches into the signal envelope and the secondary functionals (docs/method.md §4b)."""

    def __init__(self, lags: Sequence[int], T: int, hidden: int, times_per_lag: int,
                 device: torch.device | str = "cpu"):
        self.lags = np.asarray(lags, dtype=np.int64)
        self.T, self.H = T, hidden
        t, _, mask = receiving_times(torch.as_tensor(self.lags), T, times_per_lag)
        sel = torch.zeros(T, T, dtype=torch.float64)  # sel[t, l]: t is a receiving time of lag l
        sel[t[mask], torch.as_tensor(self.lags)[:, None].expand_as(t)[mask]] = 1.0
        # rows[k]: the lags l of the grid whose receiving times include t = k + l; the index and
        # the sums live on the batches' device (``device``), read back by :meth:`tables`
        self.rows = [sel.diagonal(-k).nonzero()[:, 0].to(device) for k in range(T)]
        z = lambda *s: torch.zeros(*s, dtype=torch.float64, device=device)  # noqa: E731
        self.count, self.signal, self.logsignal, self.dbar = z(T), z(T), z(T), z(T)
        self.units = z(T, hidden)
        self.count_m, self.diag, self.norm = z(T), z(T), z(T)

    def signal_visit(self, lam: Tensor, delta: Tensor, layout: StateLayout) -> Callable[[int, tuple[Tensor, ...]], None]:
        """A visitor of the delta sweep adding Lambda^q |a^q| at every (n, t) to the signal envelope."""
        B, T, H = delta.shape
        dmean = delta.abs().double().mean(-1)  # (B, T)
        # dbar numerator per lag l: sum over n and t >= l of mean_q |delta^q_t|
        self.dbar += prefix_sum(dmean.sum(0).flip(0), 0).flip(0)

        def visit(k: int, A: tuple[Tensor, ...]) -> None:
            mu = (lam[:, k, None, :] * layout.per_unit(A[-1][:, k:, 0])).double()  # (B, T - k, H)
            per = mu.sum(-1)
            self.count[:T - k] += B
            self.signal[:T - k] += per.sum(0)
            self.logsignal[:T - k] += torch.log(per.clamp_min(_TINY)).sum(0)
            self.units[:T - k] += mu.sum(0)

        return visit

    def matrix_batch(self, J: StepJacobians, lam: Tensor, layout: StateLayout) -> None:
        """Add f_diag_entries and f_norm from the H basis adjoints; lam (B, T, H) = Lambda(n, k).

        At perturbation time k only the receiving times t of the lag grid with lag t - k are read.
        M_qq of a diagonal linear cell is the norm over unit q's components (docs/method.md §2b).
        """
        B, T, H = lam.shape
        basis = layout.source(torch.eye(H, dtype=lam.dtype, device=lam.device))
        n = basis.shape[-1]
        lam_c = layout.transported(layout.lam_components(lam))  # on the transported components

        def visit(k: int, A: tuple[Tensor, ...]) -> None:
            i = self.rows[k]  # the lags i (receiving times k + i) read at k
            if not len(i):
                return
            M = layout.transported(A[-1][:, k:]).index_select(1, i) * lam_c[:, k, None, None, :]  # rows of M diag(Lambda)
            diag = layout.diagonal_norm(M).double().sum(-1)  # (B, len(i))
            frob = M.pow(2).sum((-2, -1)).double().sqrt() * H ** 0.5
            self.count_m.index_add_(0, i, torch.full((len(i),), float(B), dtype=torch.float64, device=i.device))
            self.diag.index_add_(0, i, diag.sum(0))
            self.norm.index_add_(0, i, frob.sum(0))

        adjoint_sweep(J, basis.expand(B, T, H, n), visit)

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(lag, f, f_geo, f_diag_entries, f_norm) rows and (unit, lag, mu_abs, tau) rows on the lag grid."""
        idx = torch.as_tensor(self.lags)
        at = lambda sums: sums.cpu()[idx].numpy()  # noqa: E731  (the lags' rows, on the host)
        n = at(self.count)
        with np.errstate(divide="ignore", invalid="ignore"):
            dbar = np.where(n > 0, at(self.dbar) / n, np.nan)
            scale = np.where(dbar > 0, 1.0 / dbar, np.nan) / np.maximum(n, 1)
            m = at(self.count_m)
            env = pd.DataFrame({
                "lag": self.lags, "f": at(self.signal) * scale,
                "f_geo": np.exp(at(self.logsignal) / np.maximum(n, 1)) / dbar,
                "f_diag_entries": np.where(m > 0, at(self.diag) / np.maximum(m, 1), np.nan),
                "f_norm": np.where(m > 0, at(self.norm) / np.maximum(m, 1), np.nan),
            })
        mu_abs = at(self.units) * scale[:, None]
        tau = unit_timescales(self.lags, mu_abs)
        L, H = mu_abs.shape
        units = pd.DataFrame({"unit": np.tile(np.arange(H), L), "lag": np.repeat(self.lags, H),
                              "mu_abs": mu_abs.ravel(), "tau": np.tile(tau, L)})
        return env, units


def psi_exact(J: StepJacobians, delta: Tensor, lam: Tensor, v: Tensor,
              visit_signal: Callable[[int, tuple[Tensor, ...]], None] | None = None,
              layout: StateLayout | None = None, src: Tensor | None = None) -> Tensor:
    """psi_n(l) for every lag l = 0..T-1, shape (..., B, T) (docs/method.md §4b, §5).

    ``J`` are the one-step Jacobians (:func:`step_jacobians`), ``delta`` (B, T, H) the
    output error, ``lam`` (B, T, H) the base rate Lambda(n, k) and ``v`` (..., B, T, S H) the tangent
    of the full state (a leading direction axis is kept). ``visit_signal``
    (:meth:`ExactAccumulator.signal_visit`) reads the same adjoints for the signal envelope.
    ``layout`` (:class:`StateLayout`; None: h, or (h, c)) places sources and Lambda on the state;
    ``src`` (B, T, n), when given, is the source itself (a stack's, docs/method.md §2c).
    """
    B, T, H = delta.shape
    S = v.shape[-1] // H
    if src is None:
        src = _h_block(delta, S) if layout is None else layout.source(delta)
    lam_c = lam.repeat(1, 1, S) if layout is None else layout.lam_components(lam)
    weight = (v * lam_c).split(J.widths, -1)  # Lambda^q weights every component of unit q
    total = torch.zeros(*v.shape[:-2], T, dtype=torch.float64, device=v.device)  # (..., B, T)

    def visit(k: int, A: tuple[Tensor, ...]) -> None:
        prod = A[0][:, k:, 0] * weight[0][..., k, None, :]  # (..., B, T - k, n_0)
        for a, w in zip(A[1:], weight[1:]):  # the c block of the LSTM
            prod.addcmul_(a[:, k:, 0], w[..., k, None, :])
        total[..., :T - k] += prod.sum(-1).double()
        if visit_signal is not None:
            visit_signal(k, A)

    adjoint_sweep(J, src[:, :, None], visit)
    return total / torch.arange(T, 0, -1, dtype=torch.float64, device=total.device)


def add_batch(acc: ExactAccumulator, cell: torch.nn.Module, x: Tensor, z: Tensor, lam: Tensor,
              delta: Tensor, v: Tensor | None, n_matrix: int, receive: Tensor | None = None,
              src: Tensor | None = None) -> Tensor | None:
    """One batch of the exact path; psi (..., B, T) when the tangents ``v`` are given, else None.

    ``z`` (B, T, n) is the full state of the shared forward pass, ``lam`` and ``delta`` (B, T, H) in
    x's dtype; the secondary functionals use the first ``n_matrix`` sequences. ``receive`` is the
    trace's R_t, needed by a diagonal linear cell (docs/method.md §2b); ``src`` (B, T, n) the
    source on z, given for a stack (docs/method.md §2c; else that of ``delta``).
    """
    J = step_jacobians(cell, x, z)
    layout = layout_of(cell, z.shape[-1], receive)
    if n_matrix:
        sub = layout_of(cell, z.shape[-1], None if receive is None else receive[:n_matrix])
        acc.matrix_batch(J.head(n_matrix), lam[:n_matrix], sub)
    visit = acc.signal_visit(lam, delta, layout)
    if src is None:
        src = layout.source(delta)
    if v is None:
        adjoint_sweep(J, src[:, :, None], visit)
        return None
    return psi_exact(J, delta, lam, v, visit, layout, src)
