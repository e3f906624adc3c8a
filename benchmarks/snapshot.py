"""Cost of one snapshot batch: envelope + psi over every t + S_n, against the old windowed psi.

Run: python benchmarks/snapshot.py [--config config/config.yaml] [--model gru] [--repeat 3]

Two sizes in one run: the config's (T, H, lag grid, times_per_lag, snapshot batch, K) and T = 512 with
lags 2..478 step 4 (the long-sequence size of benchmarks/envelope.py). 1 thread, untrained model,
one diag batch; every variant computes its own trace, Lambda, output error and tangent, so the
timings are whole snapshot batches:
- before: the envelope and psi on the same ``times_per_lag`` receiving times per lag (the code before
  psi used every t: benchmarks/envelope.py's ``vectorised``);
- after: ``learnwin.probing.snapshot.probe``: the envelope on its subsampled receiving times, then psi_n(l) at every lag
  0..T-1 over every receiving time (the grid's psi and S_n = sum over l of psi_n(l));
- envelope only: ``probe`` without directions, to split the after cost into envelope and psi + S.
Prints the best of ``--repeat`` CPU times per variant (process_time, 1 thread: robust to other
jobs on a shared machine), the per-snapshot cost (n_diag / batch batches) and after / before.
"""

import argparse
import time

import torch
import yaml
from envelope import vectorised  # benchmarks/envelope.py: envelope + psi on shared receiving times

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.models.state import output_error
from learnwin.probing.detect import random_directions, tangents
from learnwin.probing.envelope import base_rate
from learnwin.probing.snapshot import probe

LR = 1e-3


def before(cell, w_out, x, y, y_hat, lags, times_per_lag, dirs):
    """Envelope and psi on the same subsampled receiving times (the old snapshot)."""
    trace = cell.trace(x)
    lam = base_rate(trace.presynaptic, None, LR)
    delta = output_error(y_hat, y, w_out)
    v = tangents(cell, x, dirs)[0]
    return vectorised(trace, lam, delta, v, lags, times_per_lag, LR)


def after(cell, w_out, x, y, y_hat, lags, times_per_lag, dirs):
    return probe(cell, w_out, [(x, y, y_hat)], lags, lr=LR, times_per_lag=times_per_lag, directions=dirs)


def envelope_only(cell, w_out, x, y, y_hat, lags, times_per_lag, dirs):
    return probe(cell, w_out, [(x, y, y_hat)], lags, lr=LR, times_per_lag=times_per_lag)


def _best(fn, args, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn(*args)
        times.append(time.process_time() - t0)
    return min(times)


def run(cfg, model_name, T, lags, repeat):
    D, H = cfg["task"]["D"], cfg["model"]["hidden"]
    snap = cfg["snapshot"]
    B, K, times_per_lag = snap["batch_size"], snap["directions"], snap["times_per_lag"]
    n_batches = -(-cfg["task"]["n_diag"] // B)
    torch.manual_seed(0)
    model = build_model(model_name, D, H)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    with torch.no_grad():
        y_hat = model(x)
    dirs = {n.removeprefix("cell."): d.mean(0, keepdim=True)
            for n, d in random_directions(model, K, 0).items() if n.startswith("cell.")}
    args = (model.cell, model.W_out.detach(), x, y, y_hat, lags, times_per_lag, dirs)
    print(f"model={model_name} T={T} H={H} batch={B} lags={len(lags)} ({lags[0]}..{lags[-1]}) "
          f"times_per_lag={times_per_lag} K={K}; {n_batches} batches per snapshot (n_diag {cfg['task']['n_diag']})")
    t_old = _best(before, args, repeat)
    t_new = _best(after, args, repeat)
    t_env = _best(envelope_only, args, repeat)
    for label, sec in [("before: envelope + psi on the subsampled times", t_old),
                       ("after: envelope + psi every t + S  ", t_new),
                       ("  of which envelope               ", t_env),
                       ("  of which psi + S (all lags)     ", t_new - t_env)]:
        print(f"  {label} {sec:8.3f} CPU s/batch  {sec * n_batches:8.2f} s/snapshot")
    print(f"  after / before: {t_new / t_old:.1f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="gru")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    torch.set_num_threads(1)
    run(cfg, args.model, cfg["task"]["T"], lag_grid(cfg["snapshot"]), args.repeat)
    long = lag_grid({**cfg["snapshot"], "lag_start": 2, "lag_stop": 478, "lag_step": 4})
    run(cfg, args.model, 512, long, max(1, args.repeat // 3))


if __name__ == "__main__":
    main()
