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
every lag l = 0..T-1 in one pass; the diagnostic grid is a subset of those lags, and their sum
over l is the lag-independent total S_n of docs/method.md §7b (pooled noise). Summed over units,
psi_t at a (t, k) pair is bilinear in (delta_t, Lambda_k v_k) once Gamma is factorised through a
time between k and t: the short lags are summed directly, the long ones (O(T^2) pairs) by
batched matrix products of time tiles, which turns the cost from elementwise passes into GEMM.
"""

from __future__ import annotations

import math
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


#: Up to this T, :func:`psi_diagonal` sums every lag directly (the default and smoke configs keep
#: their numbers bit for bit); above it, lags from :func:`lag_block` on go through time tiles.
DIRECT_T = 64


def lag_block(T: int) -> int:
    """The time tile b of :func:`psi_diagonal` at sequence length T: T itself (every lag direct) up
    to :data:`DIRECT_T`, else the power of 2 nearest sqrt(T) / 2, at least 8: the direct lags cost
    T b and the tile pairs T^2 / b elementwise products per unit and sequence (on one CPU thread,
    the fastest or within 10 % of it among b = 8, 16, 32, 64 at T = 128, 256, 1024, 2048)."""
    return T if T <= DIRECT_T else max(8, 1 << round(math.log2(math.sqrt(T) / 2)))


def psi_diagonal(transport: DiagonalTransport, lam: Tensor, delta: Tensor, v: Tensor,
                 budget: int = CHUNK, block: int | None = None) -> Tensor:
    """psi_n(l) at every lag l = 0..T-1, each the mean over every t = l..T-1: (..., B, T) float64.

    ``lam`` (B, T, H) is Lambda at each perturbation time, ``delta`` (B, T, H) the output error
    and ``v`` (..., B, T, P) the tangents, all in the transport's dtype (docs/method.md §5); with
    P = H M transported components (docs/method.md §2b) psi is Re sum over components of
    Lambda delta Gamma v, Gamma including the receiving factor. Lag 0 is the instantaneous term
    mu_{t,0} = Lambda(n, t) e_t. Lags below ``block`` (None: :func:`lag_block`) are summed directly
    (:func:`_near_sums`), the others through matrix products of time tiles (:func:`_far_sums`);
    ``budget`` bounds the elements of one chunk's work arrays.
    """
    B, T, H = lam.shape
    block = lag_block(T) if block is None else block
    P = v.shape[-1]
    if P != H:  # unit q's Lambda and error reach each of its P / H transported components
        lam, delta = lam.repeat_interleave(P // H, -1), delta.repeat_interleave(P // H, -1)
    sent = delta * transport.receive  # delta_t e_t
    moved = lam * v  # Lambda_k v_k
    sums = _near_sums(transport, sent, moved, min(block, T), budget)
    if block < T:
        sums = torch.cat([sums, _far_sums(transport, sent, moved, block, budget)[..., block:T]], -1)
    return sums / torch.arange(T, 0, -1, dtype=torch.float64, device=sums.device)  # T - l valid t per lag


def _near_sums(transport: DiagonalTransport, sent: Tensor, moved: Tensor, lags: int, budget: int) -> Tensor:
    """Sums over t = l..T-1 of psi_t(l) for the lags l = 0..``lags``-1 (..., B, lags), directly.

    Lags come in chunks of contiguous lags [a, b) that share the receiving times t = a..T-1, sized
    by :func:`lag_chunks` so that one chunk's work arrays hold at most ``budget`` elements; when
    one lag of the whole batch is larger (long T), the sequences come in blocks too (every sum runs
    within one sequence). No time index is gathered: the receiving side is a slice t >= a of the
    error times e_t and of the prefix sums, and the perturbation side k = t - l of every lag of a
    chunk is one strided window of the prefix sums and of Lambda v, zero-padded at the front so
    that t < l reads Lambda v = 0 (benchmarks/psi_blocks.py: against the gathered whole-batch chunks).
    """
    B, T, P = sent.shape
    per_sequence = T * P * (moved.shape[0] if moved.dim() == 4 else 1)  # one lag's elements per sequence
    block = max(1, budget // per_sequence)
    chunks = lag_chunks(range(T), min(block, B) * per_sequence, budget)
    chunks = [c for c in (c[:max(0, lags - c[0])] for c in chunks) if c]
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
            out.append((total.real if total.is_complex() else total).double().sum(-1).flip(-1))  # (..., b, n)
        blocks.append(torch.cat(out, -1))
    return torch.cat(blocks, -2)


def _far_sums(transport: DiagonalTransport, sent: Tensor, moved: Tensor, b: int, budget: int) -> Tensor:
    """Sums over t of psi_t(l) (..., B, >= T) by lag l, exact for every l >= ``b`` (smaller lags:
    partial sums, left to :func:`_near_sums`), through matrix products of time tiles.

    Time is cut into tiles of b steps starting at s_J = J b. A pair (t, k) with t - k >= b has k in
    a tile I and t in a later tile J = I + d, and Gamma factorises through s_{I+1} <= s_J <= t:

        Gamma_{t,k} = E_t D_{IJ} F_k (1 + rho_t + Delta_{IJ} + sigma_k),
        E_t = exp(C_t - C_{s_J}),  D_{IJ} = exp(C_{s_J} - C_{s_{I+1}}),  F_k = exp(C_{s_{I+1}} - C_k)

    (C the prefix sum of log lambda; rho, Delta, sigma the same differences of the prefix sum of
    r / lambda; order 0: the bracket is 1), each exp at most 1, so nothing overflows. Summed over
    units, with delta_t e_t E_t on the left and Lambda_k v_k F_k D_{IJ} on the right, psi_t is a
    rank-2 bilinear form (rank 1 at order 0): for each tile offset d, one matrix product per
    sequence of (b, (n - d) 2P) by ((n - d) 2P, b) sums it over the b x b pairs of every tile pair
    (I, I + d), in the work dtype; the lag sums are the anti-diagonals of that b x b result (k
    reversed within a tile, :func:`_antidiagonal_lags`), in float64. The loop runs over the
    offsets d = 1..n-1 (b lags each); sequences come in blocks within ``budget``.
    """
    B, T, P = sent.shape
    n = -(-T // b)
    extra = n * b - T  # zero error and tangent after T; the prefix sums repeat their last value
    lead = moved.shape[:-3]
    tiled = lambda x, fill: torch.cat(  # noqa: E731
        [x, x[..., -1:, :].expand(*x.shape[:-2], extra, P) if fill else x.new_zeros(*x.shape[:-2], extra, P)],
        -2).unflatten(-2, (n, b))  # (..., B, n, b, P)
    per_sequence = n * b * 2 * P * (1 + math.prod(lead))  # the left and right matrices
    block = max(1, budget // per_sequence)
    sums = []
    for start in range(0, B, block):
        rows = slice(start, start + block)
        leak = [tiled(p[rows], True) for p in transport.log_leak]
        ratio = [tiled(p[rows], True) for p in transport.ratio or ()]
        left, right, pair = _factors(leak)
        x = tiled(sent[rows], False) * left  # delta e E (B, n, b, P)
        y = (tiled(moved[..., rows, :, :], False)[..., :-1, :, :] * right).flip(-2)  # Lambda v F, k reversed
        if ratio:
            rho, sigma, delta_ = _factors(ratio, exp=False)
            x = torch.cat([x * (1 + rho), x], -1)
            sigma = sigma.flip(-2)
        x = x.transpose(-3, -2).contiguous()  # (..., b, n, 2P): one matrix row per u, tiles J along it
        y = y.transpose(-3, -2).contiguous()
        sigma = sigma.transpose(-3, -2) if ratio else None
        acc = torch.zeros(*lead, x.shape[0], n - 1, b, b, dtype=torch.float64, device=x.device)
        for d in range(1, n):
            m = n - d  # tile pairs (I, I + d), I = 0..n-1-d
            y_d = y[..., :m, :] * pair(d)[..., None, :, :]
            if ratio:
                y_d = torch.cat([y_d, y_d * (sigma[..., :m, :] + delta_(d)[..., None, :, :])], -1)
            g = x[..., d:, :].flatten(-2) @ y_d.flatten(-2).transpose(-1, -2)  # (..., b, b), summed over I
            acc[..., d - 1, :, :] = g.real if g.is_complex() else g
        sums.append(_antidiagonal_lags(acc))
    return torch.cat(sums, -2)


def _factors(parts: list[Tensor], exp: bool = True):
    """From tiled prefix sums (B, n, b, P) (float32 head and remainder, or one float64 part):
    exp of (or, ``exp=False``, the differences) C_t - C_{s_J} within each tile J, C_{s_{I+1}} - C_k
    within each tile I < n - 1, and a function of d giving C_{s_{I+d}} - C_{s_{I+1}} (B, n - d, P)."""
    f = exp_flushed if exp else (lambda z: z)
    starts = [p[..., 0, :] for p in parts]  # C at s_J (B, n, P)
    left = f(sum(p - s[..., None, :] for p, s in zip(parts, starts)))
    right = f(sum(s[..., 1:, None, :] - p[..., :-1, :, :] for p, s in zip(parts, starts)))
    n = parts[0].shape[-3]
    return left, right, lambda d: f(sum(s[..., d:, :] - s[..., 1:n - d + 1, :] for s in starts))


def _antidiagonal_lags(acc: Tensor) -> Tensor:
    """Lag sums (..., (n + 1) b) from tile sums ``acc`` (..., n, b, b) of offset d = index + 1 with
    the k axis reversed: entry (u, w) is lag (d - 1) b + 1 + u + w."""
    *lead, n, b, _ = acc.shape
    skew = torch.nn.functional.pad(acc, (0, b)).flatten(-2)[..., :b * (2 * b - 1)]
    diag = skew.unflatten(-1, (b, 2 * b - 1)).sum(-2)  # (..., n, 2b - 1): row u shifted right by u
    out = acc.new_zeros(*lead, (n + 1) * b + 1)
    out[..., 1:n * b + 1] = diag[..., :b].flatten(-2)  # u + w < b: lags (d - 1) b + 1 .. d b
    out[..., b + 1:] += torch.nn.functional.pad(diag[..., b:], (0, 1)).flatten(-2)  # the rest: d b + 1 ..
    return out


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
