"""Exact transport: Jacobian products of the recurrence instead of the diagonal Gamma (docs/method.md §4b).

The paper's Eq. 10 is exact: g_{t,l} = delta_t^T M_{t,l} B_l with M_{t,l} = d z_t / d z_{t-l}, z
the full state of the recurrence: z = h, or z = (h, c) for the LSTM (2H components). One
backward (adjoint) sweep through the recurrence gives, for every receiving time t at once,

    a_{t,k} = M_{t,t-k}^T src_t   for every k <= t   (a_{t,t} = src_t),

with one adjoint stack of shape (B, T_receiving, P, S H) multiplied by the exact one-step
Jacobian J_k = d z_k / d z_{k-1} at each step k = T-1..1. J_k comes from one batched backward
of the cell's own step (``cell._step``) over the S H basis rows, so every gate path and the
LayerNorm Jacobian are included. The sweep's loop over time steps is the only loop.

What is computed from the adjoints (the same Lambda, averages and directions as the diagonal
path of :mod:`learnwin.probing.envelope` and :mod:`learnwin.probing.detect`):

* psi (src_t = delta_t on the h block): psi_n(l) = mean over every t = l..T-1 of
  sum_q a_{t,t-l}^q Lambda^q(n, t-l) v_{t-l}^q, v the tangent of the full state z (mean over the
  K directions first, as in :func:`learnwin.probing.snapshot.probe`); lags 0..T-1 all come from one sweep.
  S_n = sum over l = 0..T-1 of psi_n(l) (docs/method.md §7b, the instantaneous term l = 0 included).
* the exact envelope (src_t = the H basis vectors e_q on the h block): the diagonal
  D^q_{t,l} = [d h_t / d z_{t-l}]_{q, q'} with q' = unit q's transported component (h^q, or c^q
  for the LSTM): the quantity the diagonal Gamma approximates. mu^q = Lambda^q(n, t-l) D^q,
  f_exact(l) = mean over sequences and receiving times of sum_q |mu^q|, per-unit means
  mean |mu^q(l)| -> tau_q by :func:`learnwin.probing.envelope.unit_timescales`.

Choices (docs/method.md §4b silent):
* LSTM: the adjoint and the tangent live on (h, c); unit q's base rate Lambda^q weights both of
  its components, h^q and c^q (the rate belongs to the recurrent rows of unit q, which feed both
  through the gates).
* The exact envelope needs H adjoints per receiving time: it uses the first
  ``snapshot.exact_sequences`` diag sequences and, per lag, the same ``snapshot.windows``
  receiving times as the diagonal envelope (:func:`learnwin.probing.envelope.receiving_times`). psi and
  S use every sequence and every receiving time.
* Work is in the model's dtype (float32 in the workflow, float64 in the tests); sums over
  sequences and times accumulate in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from learnwin.probing.detect import output_error, psi_frame, tangents
from learnwin.probing.envelope import base_rate, receiving_times, unit_timescales

_TINY = 1e-300


def state_blocks(cell: torch.nn.Module) -> int:
    """S: the full state is h (S = 1) or (h, c) for a cell transported along its cell state."""
    return 2 if getattr(cell, "transported_name", "hidden") == "cell" else 1


def full_state(cell: torch.nn.Module) -> Callable[[Tensor, Tensor], Tensor]:
    """Map the cell's outputs (hidden, transported) to the full state z (B, T, S H)."""
    if state_blocks(cell) == 2:
        return lambda hidden, moved: torch.cat([hidden, moved], -1)
    return lambda hidden, moved: hidden


def _step(cell, u_rec: Tensor, xp: Tensor, z: Tensor) -> Tensor:
    """z_{t-1} -> z_t through the cell's own step (``trace=False``)."""
    H = cell.hidden_size
    h = z[..., :H]
    if state_blocks(cell) == 2:  # LSTM state (h, c, e): e only feeds the trace
        new, _ = cell._step(xp, h @ u_rec.T, (h, z[..., H:], torch.zeros_like(h)), False)
        return torch.cat([new[0], new[1]], -1)
    return cell._step(xp, h @ u_rec.T, (h,), False)[0][0]


def step_jacobian(cell, u_rec: Tensor, xp: Tensor, z_prev: Tensor) -> Tensor:
    """Exact one-step Jacobians J[b, i, j] = d z_t[i] / d z_{t-1}[j], shape (B, S H, S H).

    One batched backward of the S H basis vectors (``is_grads_batched``: 1.8x faster than a
    vmapped ``torch.func.vjp`` on CPU for the LSTM at H = 32).
    """
    with torch.enable_grad():
        z = z_prev.detach().requires_grad_(True)
        out = _step(cell, u_rec, xp, z)
        n = z.shape[-1]
        basis = torch.eye(n, dtype=z.dtype, device=z.device)[:, None].expand(n, *z.shape)
        rows = torch.autograd.grad(out, z, basis, is_grads_batched=True)[0]  # rows[i, b] = J_b[i]
    return rows.transpose(0, 1)


def adjoint_sweep(cell: torch.nn.Module, x: Tensor, src: Tensor,
                  visit: Callable[[int, Tensor], None]) -> None:
    """Propagate the adjoints ``src`` (B, T, P, S H), injected at their receiving times, backward.

    At step k, ``visit(k, A)`` sees A (B, T - k, P, S H) with A[:, i] = a_{k+i,k} =
    M_{k+i,i}^T src_{k+i}: the adjoints of every receiving time t >= k at perturbation time k.
    """
    with torch.no_grad():
        z = full_state(cell)(*cell(x))
        z_prev = F.pad(z, (0, 0, 1, 0))[:, :-1]
        xp = F.linear(x, torch.cat(cell._input_weights(), 0), torch.cat(cell._input_biases(), 0))
        u_rec = cell._recurrent().detach()
    B, T, P, n = src.shape
    A = src.new_zeros(B, 0, P, n)
    for k in range(T - 1, -1, -1):
        A = torch.cat([src[:, k:k + 1], A], 1)  # a_{k,k} = src_k joins the stack
        visit(k, A)
        if k > 0:
            J = step_jacobian(cell, u_rec, xp[:, k].detach(), z_prev[:, k])
            A = torch.bmm(A.reshape(B, -1, n), J).view(A.shape)


def _h_block(values: Tensor, S: int) -> Tensor:
    """Put (..., H) values on the h block of the full state (..., S H)."""
    return F.pad(values, (0, values.shape[-1] * (S - 1)))


class ExactAccumulator:
    """Streams batches into psi, S and the exact envelope (docs/method.md §4b)."""

    def __init__(self, lags: Sequence[int], T: int, hidden: int, windows: int):
        self.lags = np.asarray(lags, dtype=np.int64)
        self.T, self.H = T, hidden
        t, _, mask = receiving_times(torch.as_tensor(self.lags), T, windows)
        sel = torch.zeros(T, T, dtype=torch.float64)  # sel[t, l]: t is a receiving time of lag l
        sel[t[mask], torch.as_tensor(self.lags)[:, None].expand_as(t)[mask]] = 1.0
        self.sel = sel
        self.count = torch.zeros(T, dtype=torch.float64)
        self.f = torch.zeros(T, dtype=torch.float64)
        self.logf = torch.zeros(T, dtype=torch.float64)
        self.units = torch.zeros(T, hidden, dtype=torch.float64)

    def envelope_batch(self, cell, x: Tensor, lam: Tensor) -> None:
        """Add the exact envelope of sequences x (B, T, D); lam (B, T, H) = Lambda(n, k)."""
        B, T, _ = x.shape
        H, S = self.H, state_blocks(cell)
        basis = _h_block(torch.eye(H, dtype=x.dtype, device=x.device), S)  # (H, S H)
        src = basis.expand(B, T, H, S * H)
        col = (S - 1) * H  # unit q's transported component: h^q or c^q

        def visit(k: int, A: Tensor) -> None:
            diag = torch.diagonal(A[..., col:col + H], dim1=-2, dim2=-1)  # (B, T - k, H)
            mu = (lam[:, k, None, :] * diag.abs()).double()
            ts = torch.arange(k, T)
            w = self.sel[ts, ts - k]  # (T - k,) weight of lag t - k at receiving time t
            per = mu.sum(-1)  # (B, T - k)
            self.count[:T - k] += B * w
            self.f[:T - k] += (per * w).sum(0)
            self.logf[:T - k] += (torch.log(per.clamp_min(_TINY)) * w).sum(0)
            self.units[:T - k] += (mu * w[None, :, None]).sum(0)

        adjoint_sweep(cell, x, src, visit)

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(lag, f, f_geo) rows and (unit, lag, mu_abs, tau) rows on the lag grid."""
        idx = torch.as_tensor(self.lags)
        n = self.count[idx].clamp_min(1).numpy()
        env = pd.DataFrame({"lag": self.lags, "f": self.f[idx].numpy() / n,
                            "f_geo": np.exp(self.logf[idx].numpy() / n)})
        mu_abs = self.units[idx].numpy() / n[:, None]
        tau = unit_timescales(self.lags, mu_abs)
        L, H = mu_abs.shape
        units = pd.DataFrame({"unit": np.tile(np.arange(H), L), "lag": np.repeat(self.lags, H),
                              "mu_abs": mu_abs.ravel(), "tau": np.tile(tau, L)})
        return env, units


def psi_all_lags(cell, x: Tensor, delta: Tensor, lam: Tensor, v: Tensor) -> Tensor:
    """psi_n(l) for every lag l = 0..T-1, shape (..., B, T) (docs/method.md §4b, §5).

    ``delta`` (B, T, H) is the output error, ``lam`` (B, T, H) the base rate Lambda(n, k) and ``v``
    (..., B, T, S H) the tangent of the full state (a leading direction axis is kept).
    """
    B, T, H = delta.shape
    S = state_blocks(cell)
    weight = v * lam.repeat(1, 1, S)  # Lambda^q weights both components of unit q
    total = torch.zeros(*v.shape[:-2], T, dtype=torch.float64, device=v.device)  # (..., B, T)

    def visit(k: int, A: Tensor) -> None:
        contrib = (A[:, :, 0] * weight[..., k, None, :]).sum(-1)  # (..., B, T - k)
        total[..., :T - k] += contrib.double()

    adjoint_sweep(cell, x, _h_block(delta, S)[:, :, None], visit)
    return total / torch.arange(T, 0, -1, dtype=torch.float64, device=total.device)


def probe_exact(
    cell: torch.nn.Module,
    w_out: Tensor,
    batches: Iterable[tuple[Tensor, Tensor, Tensor]],
    lags: Sequence[int],
    *,
    lr: float,
    rates: Tensor | None = None,
    windows: int = 0,
    directions: dict[str, Tensor] | None = None,
    keep_directions: bool = False,
    exact_sequences: int = 64,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Exact envelope (lag, f, f_geo), units, psi and total (sequence, S) tables (docs/method.md §4b).

    Arguments as :func:`learnwin.probing.snapshot.probe`; the envelope and units use the first
    ``exact_sequences`` sequences, psi and S every sequence (``directions`` None: both empty).
    """
    if directions is not None and not keep_directions:  # tangents are linear in the direction
        directions = {n: d.mean(0, keepdim=True) for n, d in directions.items()}
    acc, psi_rows, total_rows, offset = None, [], [], 0
    lag_idx = torch.as_tensor(list(lags), dtype=torch.long)
    for x, y, y_hat in batches:
        B, T, _ = x.shape
        if acc is None:
            acc = ExactAccumulator(lags, T, cell.hidden_size, windows)
        with torch.no_grad():
            hidden, _ = cell(x)
        lam = base_rate(F.pad(hidden, (0, 0, 1, 0))[:, :-1], rates, lr).to(x.dtype)
        n_env = min(B, max(0, exact_sequences - offset))
        if n_env:
            acc.envelope_batch(cell, x[:n_env], lam[:n_env])
        if directions is not None:
            delta = output_error(y_hat, y, w_out).to(x.dtype)
            v = tangents(cell, x, directions, full_state(cell)).to(x.dtype)
            psi = psi_all_lags(cell, x, delta, lam, v if keep_directions else v[0])
            S = (psi.mean(0) if keep_directions else psi).sum(-1)  # direction mean, all lags
            psi_rows.append(psi_frame(psi[..., lag_idx].cpu().numpy(), lags, offset))
            total_rows.append(pd.DataFrame({"sequence": np.arange(B) + offset, "S": S.cpu().numpy()}))
        offset += B
    env, units = acc.tables()
    empty = pd.DataFrame({"lag": np.zeros(0, np.int64), "sequence": np.zeros(0, np.int64), "psi": []})
    psi_df = pd.concat(psi_rows, ignore_index=True) if psi_rows else empty
    total = pd.concat(total_rows, ignore_index=True) if total_rows else pd.DataFrame(
        {"sequence": np.zeros(0, np.int64), "S": []})
    return env, units, psi_df, total

