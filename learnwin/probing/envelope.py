"""Effective learning rates and the envelope f(l) (docs/method.md §4).

For unit q, the one-step Jacobian diagonal of step j is leak + correction, lambda_j + r_j.
The transport factor over the steps j = k+1..k+l is

    Gamma_{k,l} = Gamma0 (1 + sum_j r_j / lambda_j),   Gamma0 = e_{k+l} prod_j lambda_j

(order 0: Gamma0 alone; e = 1 except for the LSTM's receiving end). Every lag comes from
one pass: prefix sums over time of log lambda (float64, lambda clamped to [1e-12, 1]) and of
r / lambda, so Gamma_{t-l,l} for all lags is a difference of two gathered prefix sums. Lags are
processed in chunks only to bound RAM; there is no loop over single lags or time steps.

Rejected alternative (measured, benchmarks/envelope.py): Gamma0 factorises through a reference
time, so sums over units of a_t Gamma c_k are bilinear and one matrix product per time block
gives them at every (t, k) pair; |mu| then needs a direct pass over the (sequence, unit) pairs
whose first-order factor changes sign (41 % of them in a trained LSTM). With every receiving
time it ran 4.8x faster than this path on an untrained GRU, but with the default 32 receiving times per lag the
snapshot jobs got slower (DiagGate 1.37 s vs 1.02 s), and at the paper's size it would compute
T^2 = 2.4M pairs per sequence where the grid needs 192 lags x 32 receiving times (384x fewer).

The adaptive base rate Lambda^(q)(n, k) is the Rayleigh quotient of the per-parameter rate
matrix (averaged over the cell's H x H recurrent matrices) at the pre-synaptic state h_{k-1};
Lambda = lr for SGD. Choice (docs/method.md silent): a snapshot taken before the first optimizer step
(epoch 0) has no second-moment state, so Lambda = lr there for every optimizer.

mu_{t,l} = Lambda(n, t-l) Gamma_{t-l,l}; f(l) = mean over sequences and receiving times
t = l..T-1 of sum_q |mu|. The geometric envelope is exp(mean log sum_q |mu|) over the same
(n, t) pairs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from learnwin.infra.optimizers import rate_rule
from learnwin.models.trace import Trace

LEAK_FLOOR = 1e-12
_TINY = 1e-300


def rate_matrix(model: torch.nn.Module, recurrent: Sequence[str], optimizer: str,
                optimizer_state: dict, hparams: dict) -> Tensor | None:
    """Per-parameter rates lr / (sqrt(v_hat) + 1e-8) averaged over the recurrent matrices.

    ``recurrent`` names parameters of ``model`` (as in ``named_parameters``); returns an H x H
    float64 matrix, or None when Lambda is the plain lr (SGD, or no optimizer state yet). The
    optimizer's entry gives the rule (:func:`learnwin.infra.optimizers.rate_rule`: the state key
    of v, Adam's bias correction); an optimizer without one is a :class:`ValueError`.
    """
    rule = rate_rule(optimizer)
    key = rule.moment
    if key is None:
        return None
    names = [name for name, _ in model.named_parameters()]
    state = optimizer_state.get("state", {})
    lr = hparams["lr"]
    rates = []
    for name in recurrent:
        entry = state.get(names.index(name))
        if not entry or key not in entry:
            return None
        v = entry[key].double()
        if rule.bias_corrected:
            beta2 = optimizer_state["param_groups"][0]["betas"][1]
            v = v / (1 - beta2 ** float(entry["step"]))
        rates.append(lr / (v.sqrt() + 1e-8))
    return torch.stack(rates).mean(0)


def base_rate(presynaptic: Tensor, rates: Tensor | None, lr: float, units: int | None = None) -> Tensor:
    """Lambda^(q)(n, k) (B, T, H): Rayleigh quotient of ``rates`` (H x D_pre) at the pre-synaptic
    vector of step k, h_{k-1} or x_k (docs/method.md §4); ``units`` = H when the rates are None."""
    if rates is None:
        shape = (*presynaptic.shape[:-1], units or presynaptic.shape[-1])
        return torch.full(shape, lr, dtype=torch.float64, device=presynaptic.device)
    h2 = presynaptic.double() ** 2
    norm = h2.sum(-1, keepdim=True)
    quotient = (h2 @ rates.T) / norm.clamp_min(_TINY)
    return torch.where(norm > 0, quotient, rates.mean(1).expand_as(quotient))


def trace_rate(trace: Trace, rates: Tensor | Sequence[Tensor] | None, lr: float, units: int) -> Tensor:
    """Lambda (B, T, units) of one trace: :func:`base_rate` at its pre-synaptic vectors, or for a
    stack's trace (its ``parts``) each layer's at its own, concatenated layer-major (docs/method.md
    §2c); ``rates``: None, one matrix, or one per layer."""
    parts = getattr(trace, "parts", None)
    layers = 1 if parts is None else len(parts)
    per_layer = [rates] * layers if rates is None else [rates] if isinstance(rates, Tensor) else list(rates)
    if len(per_layer) != layers:
        raise ValueError(f"trace_rate: {len(per_layer)} rate matrices for a trace of {layers} layer(s)")
    if parts is None:
        return base_rate(trace.presynaptic, per_layer[0], lr, units)
    return torch.cat([base_rate(p.presynaptic, r, lr, units // len(parts)) for p, r in zip(parts, per_layer)], -1)


class DiagonalTransport:
    """The diagonal transport (docs/method.md §4): prefix sums of one trace, from which Gamma at
    any set of lags is gathered (the exact one is learnwin.probing.exact_transport, §4b).

    The prefix sums are float64. With ``dtype=float32`` (the snapshot path) each prefix sum is
    split into a float32 head and the float32 remainder, and the lag differences are taken on
    both parts: this keeps the difference of two large sums accurate to float32 of the
    *difference*, while the (B, L, W, H) work arrays are float32, which on CPU gathers and
    multiplies 10-50x faster than float64. ``dtype=float64`` gathers the sums directly.
    A complex leak (the LRU, docs/method.md §2b) has its modulus clamped and its phase summed, and
    Gamma is complex (dtype's complex counterpart).
    """

    def __init__(self, trace: Trace, order: int = 1, dtype: torch.dtype = torch.float32):
        if trace.leak.is_complex():
            leak = trace.leak.to(torch.complex128)
            log_leak = torch.complex(torch.log(leak.abs().clamp(LEAK_FLOOR, 1.0)), leak.angle())
            dtype = torch.complex64 if dtype == torch.float32 else torch.complex128
        else:
            leak = trace.leak.double().clamp(LEAK_FLOOR, 1.0)
            log_leak = torch.log(leak)
        self.dtype = dtype
        self.log_leak = self._split(prefix_sum(log_leak, 1))  # (B, T, P) parts
        # a zero correction (the diagonal linear cells) makes first order equal order 0 exactly
        first = order >= 1 and bool(trace.correction.any())
        self.ratio = self._split(prefix_sum(trace.correction.double() / leak, 1)) if first else None
        self.receive = trace.receive.to(dtype)

    def _split(self, prefix: Tensor) -> tuple[Tensor, ...]:
        if self.dtype in (torch.float64, torch.complex128):
            return (prefix,)
        head = prefix.to(self.dtype)
        return head, (prefix - head.to(prefix.dtype)).to(self.dtype)

    def _diff(self, parts: tuple[Tensor, ...], t: Tensor, k: Tensor) -> Tensor:
        return sum(take_times(p, t) - take_times(p, k) for p in parts)

    def gamma(self, t: Tensor, k: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Gamma0 and Gamma (order 0 or 1) at receiving times ``t`` and perturbation times ``k``.

        ``t``, ``k`` and ``mask`` are (L, W) index tensors from :func:`receiving_times`;
        results are (B, L, W, P) and zero where ``mask`` is False.
        """
        g0 = torch.exp(self._diff(self.log_leak, t, k)) * take_times(self.receive, t)
        g0 = g0 * mask[None, :, :, None]
        if self.ratio is None:
            return g0, g0
        return g0, g0 * (1 + self._diff(self.ratio, t, k))


def unit_magnitude(gamma: Tensor, units: int) -> Tensor:
    """|Gamma| per hidden unit (..., H) from (..., P): the Euclidean norm over the unit's P / H
    transported components (the modulus of a complex one), docs/method.md §2b. With one real
    component per unit it is the identity (Gamma keeps its sign)."""
    if gamma.shape[-1] == units and not gamma.is_complex():
        return gamma
    return torch.linalg.vector_norm(gamma.unflatten(-1, (units, -1)), dim=-1)


def prefix_sum(x: Tensor, dim: int) -> Tensor:
    """``torch.cumsum(x, dim)`` with the CPU's bits on every device: CUDA's cumsum of floats has no
    deterministic kernel (torch's deterministic mode raises, learnwin.infra.runtime.deterministic), so
    a device tensor's sums are taken by the host's sequential kernel and copied back. The sums are
    over the time axis of one streamed batch, small beside the transport's gathers."""
    if x.device.type == "cpu":
        return torch.cumsum(x, dim)
    return torch.cumsum(x.cpu(), dim).to(x.device)


def take_times(x: Tensor, idx: Tensor) -> Tensor:
    """x[..., idx, :] for x (..., T, H) and an (L, W) time index: (..., L, W, H).

    One ``index_select`` on the time axis, much faster on CPU than advanced indexing.
    """
    out = x.index_select(-2, idx.reshape(-1))
    return out.view(*x.shape[:-2], *idx.shape, x.shape[-1])


def receiving_times(lags: Tensor, T: int, times_per_lag: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Receiving times t, perturbation times k = t - l and a validity mask, each (L, W).

    ``times_per_lag = 0`` uses every t = l..T-1 (W = T). Otherwise each lag uses
    ``min(times_per_lag, T - l)`` evenly spaced receiving times in [l, T-1] (W = times_per_lag,
    config ``snapshot.times_per_lag``, docs/method.md §4), which bound the cost of the envelope at long sequences (psi always uses every t, docs/method.md §5).
    """
    lags = lags.long()
    n_valid = T - lags  # receiving times available per lag
    if times_per_lag <= 0:
        t = torch.arange(T, device=lags.device)[None, :].expand(len(lags), T)
        mask = t >= lags[:, None]
    else:
        n = torch.clamp(n_valid, max=times_per_lag)
        i = torch.arange(times_per_lag, device=lags.device)[None, :]
        t = lags[:, None] + torch.div(i * n_valid[:, None], n[:, None], rounding_mode="floor")
        mask = i < n[:, None]
    t = torch.where(mask, t, lags[:, None])  # masked slots point at a valid index
    return t, t - lags[:, None], mask


CHUNK = 1 << 19  # elements of one chunk's work arrays
#: On an accelerator a chunk is sized for its kernel launches, not for a cache: 64 MiB of float32,
#: which a GPU streams in tens of microseconds, longer than the launch of the kernel.
DEVICE_CHUNK = 1 << 24


def chunk_budget(device: torch.device | str) -> int:
    """Elements of one chunk's work arrays on ``device``: :data:`CHUNK` on the CPU, else
    :data:`DEVICE_CHUNK` (with 2^19, a GPU spends its time launching kernels of a few MB)."""
    return CHUNK if torch.device(device).type == "cpu" else DEVICE_CHUNK


def lag_chunks(lags: Sequence[int], per_lag: int, budget: int = CHUNK) -> list[list[int]]:
    """Split the lag grid so one chunk holds at most ``budget`` float64 elements.

    Small chunks keep the (B, L, W, H) work arrays in cache: 2^19 elements (4 MB) ran 7x
    faster than 2^22 at the default size (benchmarks/envelope.py).
    """
    size = max(1, budget // max(1, per_lag))
    lags = list(lags)
    return [lags[i:i + size] for i in range(0, len(lags), size)]


class EnvelopeAccumulator:
    """Streams batches of diag sequences into the per-lag envelope and per-unit sums."""

    def __init__(self, lags: Sequence[int], hidden: int, lr: float):
        self.lags = np.asarray(lags, dtype=np.int64)
        self.lr = lr
        L = len(self.lags)
        z = lambda *s: np.zeros(s, dtype=np.float64)  # noqa: E731
        self.count = z(L)
        self.f0, self.f1, self.logf, self.gates = z(L), z(L), z(L), z(L)
        self.lam, self.lam2, self.lam_n = z(L), z(L), z(L)
        self.units = z(L, hidden)

    def add(self, idx: slice, g0: Tensor, g: Tensor, lam_k: Tensor, mask: Tensor, order: int) -> Tensor:
        """Accumulate one lag chunk of one batch; return mu (B, L, W, H) of the chosen order.

        Gamma0 >= 0 and Lambda > 0, so |mu0| = mu0 and |Gamma0| = Gamma0. Reductions over
        sequences and times accumulate in float64.
        """
        f64 = torch.float64
        mu0 = lam_k * g0
        mu = lam_k * g if order >= 1 else mu0
        absmu = mu.abs()
        per_t = absmu.sum(-1).to(f64)  # (B, L, W): short float32 sums over units, then float64
        m = mask[None].to(f64)
        n_valid = m.sum((0, 2)).cpu().numpy() * per_t.shape[0]
        self.count[idx] += n_valid
        self.f1[idx] += per_t.sum((0, 2)).cpu().numpy()
        self.f0[idx] += mu0.sum(-1).to(f64).sum((0, 2)).cpu().numpy()
        self.logf[idx] += (torch.log(per_t.clamp_min(_TINY)) * m).sum((0, 2)).cpu().numpy()
        self.gates[idx] += self.lr * g0.sum(-1).to(f64).sum((0, 2)).cpu().numpy()
        self.units[idx] += absmu.sum(2).to(f64).sum(0).cpu().numpy()
        self.lam[idx] += (lam_k.sum(-1).to(f64) * m).sum((0, 2)).cpu().numpy()
        self.lam2[idx] += ((lam_k * lam_k).sum(-1).to(f64) * m).sum((0, 2)).cpu().numpy()
        self.lam_n[idx] += n_valid * lam_k.shape[-1]
        return mu

    def tables(self, order: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(envelope rows per lag, unit rows per (unit, lag)) without run keys."""
        n = np.maximum(self.count, 1)
        f0, f1 = self.f0 / n, self.f1 / n
        f = f1 if order >= 1 else f0
        gates = self.gates / n
        lam_mean = self.lam / np.maximum(self.lam_n, 1)
        lam_var = np.maximum(self.lam2 / np.maximum(self.lam_n, 1) - lam_mean ** 2, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(gates > 0, f / gates, np.nan)
        env = pd.DataFrame({
            "lag": self.lags, "f": f, "f_geo": np.exp(self.logf / n), "f_gates": gates,
            "f_order0": f0, "f_order1": f1 if order >= 1 else np.full_like(f0, np.nan),
            "ratio": ratio, "lambda_mean": lam_mean, "lambda_std": np.sqrt(lam_var),
        })
        mu_abs = self.units / n[:, None]  # (L, H)
        tau = unit_timescales(self.lags, mu_abs)
        L, H = mu_abs.shape
        units = pd.DataFrame({
            "unit": np.tile(np.arange(H), L), "lag": np.repeat(self.lags, H),
            "mu_abs": mu_abs.ravel(), "tau": np.tile(tau, L),
        })
        return env, units


def unit_timescales(lags: np.ndarray, mu_abs: np.ndarray, min_points: int = 5) -> np.ndarray:
    """tau_q = -1 / slope of the OLS of log mean|mu^(q)(l)| on l (docs/method.md §4); inf if slope >= 0.

    Vectorised over units; lags with non-positive or non-finite values are left out per unit,
    and a unit with fewer than ``min_points`` usable lags gets NaN.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(mu_abs)
    ok = np.isfinite(y)
    x = np.broadcast_to(np.asarray(lags, dtype=np.float64)[:, None], y.shape)
    n = ok.sum(0)
    xs, ys = np.where(ok, x, 0.0), np.where(ok, y, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        xm, ym = xs.sum(0) / n, ys.sum(0) / n
        sxx = (np.where(ok, (x - xm) ** 2, 0.0)).sum(0)
        sxy = (np.where(ok, (x - xm) * (y - ym), 0.0)).sum(0)
        slope = sxy / sxx
        tau = np.where(slope < 0, -1.0 / slope, np.inf)
    return np.where((n >= min_points) & (sxx > 0), tau, np.nan)
