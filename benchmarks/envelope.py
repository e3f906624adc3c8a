"""Vectorised envelope + psi (prefix sums, all lags at once) against naive loops, in one run.

Run: python benchmarks/envelope.py [--config config/config.yaml] [--model gru]

Size from the config (T, H, lag grid, snapshot batch, K), 1 thread. The trace and the
tangents are computed once and shared, so only the envelope + psi computation is timed.
Every receiving time (windows = 0) in all implementations, so they do the same work:
- naive: a Python loop over lags and receiving times t, each multiplying its l one-step
  factors (the direct transcription of METHOD §4-5; vectorised over sequences and units);
- per-lag: a Python loop over lags only, vectorised over t (a stronger baseline).
The loops run in float64 (the reference); the package path keeps float64 prefix sums and does
the (B, L, W, H) work in float32 (see learnwin.envelope.Transport).
Prints seconds, the speed-up ratios (target >= 20x against naive), the largest relative
difference between the implementations, and peak memory.
"""

import argparse
import resource
import time

import torch
import yaml

from learnwin.cells import build_model
from learnwin.config import lag_grid
from learnwin.detect import output_error, psi_chunk, random_directions, tangents
from learnwin.envelope import (
    EnvelopeAccumulator, Transport, base_rate, lag_chunks, receiving_times, take_times)


def _factors(trace):
    """float64 one-step factors of the reference loops: leak, r / leak, receiving factor, T."""
    leak = trace.leak.double().clamp(1e-12, 1)
    return leak, trace.correction.double() / leak, trace.receive.double(), leak.shape[1]


def naive(trace, lam, delta, v, lags):
    """Loop over lags and receiving times; each Gamma re-multiplies its l one-step factors."""
    leak, ratio, receive, T = _factors(trace)
    f, psi = [], []
    for lag in lags:
        f_l, psi_l = 0.0, 0.0
        for t in range(lag, T):
            k = t - lag
            window = slice(k + 1, t + 1)
            gamma = leak[:, window].prod(1) * receive[:, t] * (1 + ratio[:, window].sum(1))
            mu = lam[:, k] * gamma
            f_l = f_l + mu.abs().sum(-1).mean()
            psi_l = psi_l + (mu * delta[:, t] * v[:, k]).sum(-1)
        f.append(f_l / (T - lag))
        psi.append(psi_l / (T - lag))
    return torch.stack(f), torch.stack(psi, 1)


def per_lag(trace, lam, delta, v, lags):
    """Loop over lags only: shifted slices give every receiving time of one lag at once."""
    leak, ratio, receive, T = _factors(trace)
    f, psi = [], []
    for lag in lags:
        g0 = torch.ones_like(leak[:, lag:])
        corr = torch.ones_like(g0)
        for j in range(1, lag + 1):  # step k + j for every perturbation time k = t - l
            g0 = g0 * leak[:, j:T - lag + j]
            corr = corr + ratio[:, j:T - lag + j]
        mu = lam[:, :T - lag] * g0 * corr * receive[:, lag:]
        f.append(mu.abs().sum(-1).mean())
        psi.append((mu * delta[:, lag:] * v[:, :T - lag]).sum(-1).mean(-1))
    return torch.stack(f), torch.stack(psi, 1)


def vectorised(trace, lam, delta, v, lags, lr):
    """The package path: prefix sums, all lags gathered at once (in cache-sized lag chunks)."""
    lag_t = torch.as_tensor(lags)
    lam, delta, v = lam.float(), delta.float(), v.float()
    transport = Transport(trace, order=1)
    acc = EnvelopeAccumulator(lags, lam.shape[-1], lr)
    t_all, k_all, mask_all = receiving_times(lag_t, lam.shape[1])
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
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    T, D, H = cfg["task"]["T"], cfg["task"]["D"], cfg["model"]["hidden"]
    B, K = cfg["snapshot"]["batch_size"], cfg["snapshot"]["directions"]
    snap = {"lag_start": 4, "lag_stop": 64, "lag_step": 4, **cfg.get("snapshot", {})}
    lags = lag_grid(snap)
    model = build_model(args.model, D, H)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    with torch.no_grad():
        y_hat = model(x)
    dirs = {n.removeprefix("cell."): d.mean(0, keepdim=True)
            for n, d in random_directions(model, K, 0).items() if n.startswith("cell.")}
    print(f"model={args.model} T={T} H={H} batch={B} lags={len(lags)} K={K}, 1 thread")
    lr = 1e-3
    trace = model.cell.trace(x)
    lam = base_rate(trace.presynaptic, None, lr)
    v = tangents(model.cell, x, dirs)[0].double()
    delta = output_error(y_hat, y, model.W_out.detach()).double()

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t_vec, (f_vec, psi_vec) = _timed(vectorised, trace, lam, delta, v, lags, lr)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t_lag, (f_lag, psi_lag) = _timed(per_lag, trace, lam, delta, v, lags)
    t_naive, (f_naive, psi_naive) = _timed(naive, trace, lam, delta, v, lags)

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
