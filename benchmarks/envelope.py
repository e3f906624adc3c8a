"""Vectorised envelope + psi (prefix sums, all lags at once) against naive loops, in one run.

Run: python benchmarks/envelope.py [--config config/config.yaml] [--model gru]
         [--T 512 --lag-stop 480 --lag-step 4] [--times-per-lag 0]

Size from the config (T, H, lag grid, times_per_lag, snapshot batch, K), 1 thread; --T, --lag-stop,
--lag-step and --times-per-lag override it, to show how the ratio grows with the lag range. The
trace and the tangents are computed once and shared, so only the envelope + psi computation
is timed. All implementations use the same receiving times (learnwin.probing.envelope.receiving_times)
for the envelope and psi: this compares the kernels. (The package's psi now averages over every t,
whatever the times_per_lag; benchmarks/snapshot.py times the whole snapshot and uses ``vectorised``
below as its "before".)
- naive: a Python loop over lags and receiving times t, each multiplying its l one-step
  factors (the direct transcription of docs/method.md §4-5; vectorised over sequences and units);
- per-lag: a Python loop over lags only, vectorised over t (a stronger baseline).
The loops do O(l) work per (lag, t) where the prefix sums do O(1) (about 25 elementwise passes
over gathered (B, L, W, H) arrays), so the ratio against the naive loop grows with the lag range.
Measured (GRU, H = 32, batch 128, times_per_lag 32, idle 2-core machine): 1.2-1.6x at the default grid
(lags 2..60), 9.6x at T = 512 (lags 2..478), 7.8x at the paper's T = 1536 (lags 2..766), where
the gathers from (B, T, H) arrays larger than the cache slow the vectorised path down.
The loops run in float64 (the reference); the package path keeps float64 prefix sums and does
the (B, L, W, H) work in float32 (see learnwin.probing.envelope.DiagonalTransport).
Prints seconds, the speed-up ratios (target >= 20x against naive), the largest relative
difference between the implementations, and peak memory.
"""

import argparse
import resource
import time

import torch
import yaml

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.models.state import output_error
from learnwin.probing.detect import random_directions, tangents
from learnwin.probing.envelope import (
    DiagonalTransport,
    EnvelopeAccumulator,
    base_rate,
    lag_chunks,
    receiving_times,
    take_times,
)


def psi_chunk(mu, delta, v, t, k, mask):
    """psi for one lag chunk by gathered times (the package's kernel before its strided windows):
    mu (B, L, W, H), delta (B, T, H), v (B, T, H) -> (B, L), the mean over valid receiving times."""
    total = (mu * take_times(delta, t) * take_times(v, k)).sum(-1).double().sum(-1)
    return total / mask.sum(-1).clamp_min(1)


def _factors(trace):
    """float64 one-step factors of the reference loops: leak, r / leak, receiving factor."""
    leak = trace.leak.double().clamp(1e-12, 1)
    return leak, trace.correction.double() / leak, trace.receive.double()


def naive(trace, lam, delta, v, lags, times_per_lag):
    """Loop over lags and receiving times; each Gamma re-multiplies its l one-step factors."""
    leak, ratio, receive = _factors(trace)
    t_all, _, mask = receiving_times(torch.as_tensor(lags), leak.shape[1], times_per_lag)
    f, psi = [], []
    for i, lag in enumerate(lags):
        times = t_all[i][mask[i]].tolist()
        f_l, psi_l = 0.0, 0.0
        for t in times:
            k = t - lag
            window = slice(k + 1, t + 1)
            gamma = leak[:, window].prod(1) * receive[:, t] * (1 + ratio[:, window].sum(1))
            mu = lam[:, k] * gamma
            f_l = f_l + mu.abs().sum(-1).mean()
            psi_l = psi_l + (mu * delta[:, t] * v[:, k]).sum(-1)
        f.append(f_l / len(times))
        psi.append(psi_l / len(times))
    return torch.stack(f), torch.stack(psi, 1)


def _at(x, idx):
    """x[:, idx] for a 1-D time index (index_select: faster than advanced indexing on CPU)."""
    return x.index_select(1, idx)


def per_lag(trace, lam, delta, v, lags, times_per_lag):
    """Loop over lags only, vectorised over the receiving times of each lag."""
    leak, ratio, receive = _factors(trace)
    t_all, _, mask = receiving_times(torch.as_tensor(lags), leak.shape[1], times_per_lag)
    f, psi = [], []
    for i, lag in enumerate(lags):
        t = t_all[i][mask[i]]
        k = t - lag
        g0 = torch.ones(leak.shape[0], len(k), leak.shape[2], dtype=leak.dtype)
        corr = torch.ones_like(g0)
        for j in range(1, lag + 1):  # step k + j of every perturbation time k
            g0 = g0 * _at(leak, k + j)
            corr = corr + _at(ratio, k + j)
        mu = _at(lam, k) * g0 * corr * _at(receive, t)
        f.append(mu.abs().sum(-1).mean())
        psi.append((mu * _at(delta, t) * _at(v, k)).sum(-1).mean(-1))
    return torch.stack(f), torch.stack(psi, 1)


def vectorised(trace, lam, delta, v, lags, times_per_lag, lr):
    """The package's prefix-sum kernel: all lags gathered at once (in cache-sized lag chunks)."""
    lag_t = torch.as_tensor(lags)
    lam, delta, v = lam.float(), delta.float(), v.float()
    transport = DiagonalTransport(trace, order=1)
    acc = EnvelopeAccumulator(lags, lam.shape[-1], lr)
    t_all, k_all, mask_all = receiving_times(lag_t, lam.shape[1], times_per_lag)
    psi, start = [], 0
    for chunk in lag_chunks(lags, lam.shape[0] * t_all.shape[1] * lam.shape[-1]):
        idx = slice(start, start + len(chunk))
        start += len(chunk)
        t, k, mask = t_all[idx], k_all[idx], mask_all[idx]
        g0, g = transport.gamma(t, k, mask)
        psi.append(psi_chunk(acc.add(idx, g0, g, take_times(lam, k), mask, 1), delta, v, t, k, mask))
    env, _ = acc.tables(order=1)
    return torch.tensor(env["f"].to_numpy()), torch.cat(psi, -1)


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="gru")
    ap.add_argument("--T", type=int, help="sequence length (default: the config's)")
    ap.add_argument("--lag-stop", type=int, help="last lag of the grid (default: the config's)")
    ap.add_argument("--lag-step", type=int, help="lag step (default: the config's)")
    ap.add_argument("--times-per-lag", type=int, help="receiving times per lag, 0 = all (default: the config's)")
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    T, D, H = args.T or cfg["task"]["T"], cfg["task"]["D"], cfg["model"]["hidden"]
    snap = cfg["snapshot"]
    B, K = snap["batch_size"], snap["directions"]
    times_per_lag = snap["times_per_lag"] if args.times_per_lag is None else args.times_per_lag
    lags = lag_grid({**snap, "lag_stop": args.lag_stop or snap["lag_stop"],
                     "lag_step": args.lag_step or snap["lag_step"]})
    model = build_model(args.model, D, H)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    with torch.no_grad():
        y_hat = model(x)
    dirs = {n.removeprefix("cell."): d.mean(0, keepdim=True)
            for n, d in random_directions(model, K, 0).items() if n.startswith("cell.")}
    print(f"model={args.model} T={T} H={H} batch={B} lags={len(lags)} ({lags[0]}..{lags[-1]}) "
          f"times_per_lag={times_per_lag} K={K}, 1 thread")
    lr = 1e-3
    trace = model.cell.trace(x)
    lam = base_rate(trace.presynaptic, None, lr)
    v = tangents(model.cell, x, dirs)[0].double()
    delta = output_error(y_hat - y, model.W_out.detach()).double()

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t_vec, (f_vec, psi_vec) = _timed(vectorised, trace, lam, delta, v, lags, times_per_lag, lr)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t_lag, (f_lag, psi_lag) = _timed(per_lag, trace, lam, delta, v, lags, times_per_lag)
    t_naive, (f_naive, psi_naive) = _timed(naive, trace, lam, delta, v, lags, times_per_lag)

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())

    print(f"vectorised (prefix sums):   {t_vec:8.3f} s")
    print(f"per-lag loop (over lags):   {t_lag:8.3f} s   ratio {t_lag / t_vec:6.1f}x")
    print(f"naive loop (lags x times):  {t_naive:8.3f} s   ratio {t_naive / t_vec:6.1f}x   (target >= 20x)")
    print(f"max relative difference vs naive: f {rel(f_vec, f_naive):.1e}, psi {rel(psi_vec, psi_naive):.1e}; "
          f"per-lag: f {rel(f_lag, f_naive):.1e}, psi {rel(psi_lag, psi_naive):.1e}")
    print(f"peak RSS {rss1 / 1024:.0f} MB (grew {(rss1 - rss0) / 1024:.0f} MB in the vectorised pass)")


if __name__ == "__main__":
    main()
