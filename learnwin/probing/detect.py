"""Detection statistic psi_n(l) (docs/method.md §5).

delta_t = (y_hat_t - y_t) W_out^T is the output error seen by the hidden units. For K seeded
random directions w_k (unit norm jointly over all parameters of the model), the tangent
v_k = d(state)/d(theta)[w_k] comes from forward-mode AD (``torch.func.jvp``; the LSTM's
transported state is its cell state), all K directions in one vmapped pass. The tangent is
linear in the direction, so when only the mean over directions is kept, one JVP along the
mean direction gives it exactly (K times cheaper). Then

    psi_t(l) = sum_q mu_{t,l}^(q) delta_t^(q) v_{t-l}^(q),   t = l..T-1,

averaged over EVERY receiving time t = l..T-1 (no subsampling: the spread of this mean sets
sigma) and over the K directions (psi is linear in v, so the direction mean is taken on v
first) gives one sample psi_n(l) per diag sequence and lag. :func:`psi_diagonal` computes it at
every lag l = 0..T-1 in one pass over lag chunks; the diagnostic grid is a subset of those lags,
and their sum over l is the lag-independent total S_n of docs/method.md §7b (pooled noise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch.func import functional_call, jvp, vmap

from learnwin.probing.envelope import CHUNK, DiagonalTransport, lag_chunks


def random_directions(model: torch.nn.Module, K: int, seed: int) -> dict[str, Tensor]:
    """K directions over all parameters of ``model``, unit norm jointly: name -> (K, *shape)."""
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    draws = {n: torch.randn((K, *p.shape), generator=gen, dtype=torch.float32) for n, p in params.items()}
    norm = torch.sqrt(sum(d.flatten(1).pow(2).sum(1) for d in draws.values()))
    return {n: (d / norm.view(-1, *[1] * (d.dim() - 1))).to(params[n].device) for n, d in draws.items()}


def tangents(cell: torch.nn.Module, x: Tensor, directions: dict[str, Tensor],
             state: Callable[[Tensor, Tensor], Tensor] | None = None) -> Tensor:
    """(K, B, T, H) tangents of the transported state along each direction.

    ``directions`` maps the cell's parameter names to (K, *shape) tensors; parameters of the
    cell that have no entry get a zero tangent. ``state`` maps the cell's outputs (hidden,
    transported) to the state whose tangent is taken (default: transported).
    """
    params = {n: p.detach() for n, p in cell.named_parameters()}
    K = next(iter(directions.values())).shape[0]
    dirs = {n: directions.get(n, torch.zeros((K, *p.shape), dtype=p.dtype, device=p.device))
            for n, p in params.items()}

    def transported(p):
        hidden, moved = functional_call(cell, p, (x,))
        return moved if state is None else state(hidden, moved)

    def along(d):
        return jvp(transported, (params,), (d,))[1]

    if K == 1:  # plain jvp: vmap adds a one-off warm-up of about 2 s per process
        return along({n: d[0] for n, d in dirs.items()})[None]
    return vmap(along)(dirs)


def psi_diagonal(transport: DiagonalTransport, lam: Tensor, delta: Tensor, v: Tensor,
                 budget: int = CHUNK) -> Tensor:
    """psi_n(l) at every lag l = 0..T-1, each the mean over every t = l..T-1: (..., B, T) float64.

    ``lam`` (B, T, H) is Lambda at each perturbation time, ``delta`` (B, T, H) the output error
    and ``v`` (..., B, T, P) the tangents, all in the transport's dtype (docs/method.md §5); with
    P = H M transported components (docs/method.md §2b) psi is Re sum over components of
    Lambda delta Gamma v, Gamma including the receiving factor. Lag 0 is the instantaneous term
    mu_{t,0} = Lambda(n, t) e_t. Lags come in chunks of contiguous lags [a, b) that share the
    receiving times t = a..T-1, sized by :func:`lag_chunks` so that one chunk's work arrays hold
    at most ``budget`` elements; when one lag of the whole batch is larger (long T), the
    sequences come in blocks too (every sum runs within one sequence).

    No time index is gathered: the receiving side is a slice t >= a of the error times e_t and of
    the prefix sums, and the perturbation side k = t - l of every lag of a chunk is one strided
    window of the prefix sums and of Lambda v, zero-padded at the front so that t < l reads
    Lambda v = 0 (benchmarks/psi_blocks.py: against the gathered whole-batch chunks).
    """
    B, T, H = lam.shape
    P = v.shape[-1]
    if P != H:  # unit q's Lambda and error reach each of its P / H transported components
        lam, delta = lam.repeat_interleave(P // H, -1), delta.repeat_interleave(P // H, -1)
    sent = delta * transport.receive  # delta_t e_t
    moved = lam * v  # Lambda_k v_k
    per_sequence = T * P * (v.shape[0] if v.dim() == 4 else 1)  # one lag's elements per sequence
    block = max(1, budget // per_sequence)
    chunks = lag_chunks(range(T), min(block, B) * per_sequence, budget)
    pad = max(len(c) for c in chunks) - 1
    leaks, ratios = len(transport.log_leak), len(transport.ratio or ())
    blocks = []
    for start in range(0, B, block):
        rows = slice(start, start + block)
        prefix = [p[rows] for p in (*transport.log_leak, *(transport.ratio or ()))]
        padded = [torch.nn.functional.pad(x, (0, 0, pad, 0)) for x in (*prefix, moved[..., rows, :, :])]
        out = []
        for chunk in chunks:
            a, n = chunk[0], len(chunk)
            late = [x[..., a:, :].unsqueeze(-3) for x in (*prefix, sent[rows])]  # (..., 1, W, P) at t
            early = [_lagged(x, a, n, pad) for x in padded]  # (..., n, W, P) at k = t - l, l descending
            gamma = exp_flushed(sum(late[i] - early[i] for i in range(leaks)))
            if ratios:
                gamma = gamma * (1 + sum(late[i] - early[i] for i in range(leaks, leaks + ratios)))
            total = (gamma * late[-1] * early[-1]).sum(-1)
            total = (total.real if total.is_complex() else total).double().sum(-1)  # (..., b, n)
            count = torch.arange(T - a - n + 1, T - a + 1, dtype=torch.float64, device=total.device)
            out.append((total / count).flip(-1))  # valid t per lag: T - l, l descending
        blocks.append(torch.cat(out, -1))
    return torch.cat(blocks, -2)


#: Below this argument exp is subnormal or 0 in float32 (float64 arguments are never clamped here).
EXP_FLOOR = -87.0


def exp_flushed(x: Tensor) -> Tensor:
    """exp(x), flushed to 0 where the real part of x is below :data:`EXP_FLOOR` (a subnormal or
    zero float32). torch's vectorised float32 exp takes a slow path for arguments below about
    -88 (benchmarks/psi_blocks.py: 24-29 ns per element against 0.7 ns), and at long T most
    long-lag Gamma are there (docs/results.md, "A long-T rung")."""
    real = x.real if x.is_complex() else x
    if x.dtype not in (torch.float32, torch.complex64) or not x.numel() or real.min() >= EXP_FLOOR:
        return torch.exp(x)  # the flush costs three passes: only where something underflows
    under = real < EXP_FLOOR
    clamped = real.clamp_min(EXP_FLOOR)
    out = torch.exp(torch.complex(clamped, x.imag) if x.is_complex() else clamped)
    return out.masked_fill_(under, 0)


def _lagged(padded: Tensor, first: int, count: int, pad: int) -> Tensor:
    """x[..., t - l, :] for t = first..T-1 and l = first + count - 1 down to first, from x
    zero-padded at the front by ``pad`` >= count - 1 steps: a (..., count, T - first, P) view."""
    width = padded.shape[-2] - pad - first  # T - first receiving times
    windows = padded.unfold(-2, width, 1)  # (..., starts, P, width): start s reads x[s - pad + w]
    return windows[..., pad - count + 1:pad + 1, :, :].transpose(-1, -2)


def psi_frame(psi: np.ndarray, lags: Sequence[int], offset: int) -> pd.DataFrame:
    """Long rows (lag, sequence[, direction], psi) from a (B, L) or (K, B, L) array."""
    lags = np.asarray(lags, dtype=np.int64)
    if psi.ndim == 2:
        B, L = psi.shape
        return pd.DataFrame({"lag": np.tile(lags, B), "sequence": np.repeat(np.arange(B) + offset, L),
                             "psi": psi.ravel()})
    K, B, L = psi.shape
    return pd.DataFrame({
        "lag": np.tile(lags, K * B),
        "sequence": np.tile(np.repeat(np.arange(B) + offset, L), K),
        "direction": np.repeat(np.arange(K), B * L),
        "psi": psi.ravel(),
    })
