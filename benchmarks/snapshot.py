"""One snapshot batch, old against new: time per batch and peak memory (docs/method.md §4-5).

Run: python benchmarks/snapshot.py [--size default|scaled|replication] [--device cpu|cuda]
         [--model gru] [--batch 128 ...] [--repeat 2] [--variants old new] [--config config/config.yaml]

Sizes (``--batch`` overrides the sequences per batch):
- default: the config's (T, D, H, lag grid, times_per_lag, K, snapshot batch, n_diag);
- scaled: T 256, D 16, H 64, lags 4..66 step 2 (32), K 16, batches 32 and 128, n_diag 8000;
- replication: the author's replication (T 1024, D 16, H 128, lags 4..256 step 2, K 50,
  32 receiving times per lag, batch 128, n_diag 8000 diagnostic sequences).

Each variant runs ``learnwin.probing.snapshot.probe`` on one batch of an untrained model, the
whole snapshot batch (trace, Lambda, error, the tangent along the mean of K directions, envelope,
psi at every lag and S), diagonal transport:
- old: the probe before the time tiles: psi summed directly at every lag, and 2^19-element chunks
  on every device (``psi_diagonal(block=T)`` and ``CHUNK``: the same code, kept as its short-lag path);
- new: ``probe`` as it is (psi's long lags through time tiles, device-sized chunks).
Prints per variant the best of ``--repeat`` times per batch (CPU: process time of 1 thread, and
wall; CUDA: wall after synchronising), the projected time per snapshot (n_diag / batch batches),
the peak memory (CUDA: torch.cuda.max_memory_allocated; CPU: the peak RSS of a forked child that
runs the variant, above the RSS it starts with), then old / new and the largest difference of
psi (relative to its lag's largest |psi|) and of S between the two.
"""

import argparse
import functools
import multiprocessing
import resource
import time

import numpy as np
import torch
import yaml

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.probing import snapshot
from learnwin.probing.detect import psi_diagonal, random_directions
from learnwin.probing.envelope import CHUNK

LR = 1e-3
SIZES = {
    "scaled": dict(T=256, D=16, H=64, lags=(4, 66, 2), K=16, times_per_lag=32, batches=[32, 128], n_diag=8000),
    "replication": dict(T=1024, D=16, H=128, lags=(4, 256, 2), K=50, times_per_lag=32, batches=[128],
                        n_diag=8000),
}


def size_of(name: str, config: str) -> dict:
    if name != "default":
        start, stop, step = SIZES[name]["lags"]
        return {**SIZES[name], "lags": lag_grid({"lag_start": start, "lag_stop": stop, "lag_step": step})}
    cfg = yaml.safe_load(open(config))
    snap = cfg["snapshot"]
    return dict(T=cfg["task"]["T"], D=cfg["task"]["D"], H=cfg["model"]["hidden"], lags=lag_grid(snap),
                K=snap["directions"], times_per_lag=snap["times_per_lag"], batches=[snap["batch_size"]],
                n_diag=cfg["task"]["n_diag"])


def run_probe(variant, cell, w_out, x, y, y_hat, lags, times_per_lag, dirs):
    """The probe's tables on one batch; ``old`` with the direct psi and the CPU chunk everywhere."""
    old = {"psi_diagonal": functools.partial(psi_diagonal, block=x.shape[1]), "chunk_budget": lambda _: CHUNK}
    saved = {name: getattr(snapshot, name) for name in old}
    if variant == "old":
        for name, fn in old.items():
            setattr(snapshot, name, fn)
    try:
        return snapshot.probe(cell, w_out, [(x, y, y_hat)], lags, lr=LR, times_per_lag=times_per_lag, directions=dirs)
    finally:
        for name, fn in saved.items():
            setattr(snapshot, name, fn)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(variant, device, repeat, args):
    """(CPU s, wall s) of the best of ``repeat`` runs after a warm-up, peak bytes, (psi, S) of the last run."""
    best = (np.inf, np.inf)
    rss0 = _rss_bytes()
    run_probe(variant, *args)  # warm-up (vmap, kernels, the allocator): its peak counts on the CPU
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(repeat):
        _sync(device)
        c0, w0 = time.process_time(), time.perf_counter()
        _, _, psi, total = run_probe(variant, *args)
        _sync(device)
        best = min(best, (time.process_time() - c0, time.perf_counter() - w0), key=lambda t: t[1])
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    return best, peak, psi[["lag", "sequence", "psi"]].to_numpy(), total["S"].to_numpy()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _in_child(variant, device, repeat, args):
    """:func:`measure` in a forked child, so that its peak RSS is its own (CPU only)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=lambda: child.send(measure(variant, device, repeat, args)))
    proc.start()
    out = parent.recv()
    proc.join()
    return out


def run(size, model_name, device, batch, repeat, variants):
    torch.manual_seed(0)
    T, D, H, lags = size["T"], size["D"], size["H"], size["lags"]
    model = build_model(model_name, D, H).to(device)
    x, y = torch.randn(batch, T, D, device=device), torch.randn(batch, T, device=device)
    with torch.no_grad():
        y_hat = model(x)
    dirs = {n.removeprefix("cell."): d.mean(0, keepdim=True)
            for n, d in random_directions(model, size["K"], 0).items() if n.startswith("cell.")}
    args = (model.cell, model.W_out.detach(), x, y, y_hat, lags, size["times_per_lag"], dirs)
    n_batches = -(-size["n_diag"] // batch)
    print(f"model={model_name} device={device} T={T} D={D} H={H} lags={len(lags)} ({lags[0]}..{lags[-1]}) "
          f"K={size['K']} times_per_lag={size['times_per_lag']} batch={batch}; {n_batches} batches per snapshot "
          f"(n_diag {size['n_diag']}), threads {torch.get_num_threads()}", flush=True)
    results = {}
    for variant in variants:
        results[variant] = (_in_child if device.type == "cpu" else measure)(variant, device, repeat, args)
        (cpu, wall), peak, _, _ = results[variant]
        per = wall if device.type == "cuda" else cpu
        print(f"  {variant}: {per:8.3f} s/batch ({'wall' if device.type == 'cuda' else 'CPU'}; wall {wall:.3f} s)"
              f"  {per * n_batches:9.1f} s/snapshot  peak {'allocated' if device.type == 'cuda' else 'RSS'} "
              f"{peak / 2**30:6.2f} GiB", flush=True)
    if {"old", "new"} <= set(results):
        (c_old, w_old), _, psi_old, s_old = results["old"]
        (c_new, w_new), _, psi_new, s_new = results["new"]
        ratio = w_old / w_new if device.type == "cuda" else c_old / c_new
        scale = np.zeros(len(psi_old))
        lag = psi_old[:, 0].astype(np.int64)
        for value in np.unique(lag):
            scale[lag == value] = np.abs(psi_old[lag == value, 2]).max()
        worst = np.max(np.abs(psi_new[:, 2] - psi_old[:, 2]) / np.where(scale > 0, scale, 1))
        s_diff = np.max(np.abs(s_new - s_old)) / np.abs(s_old).max()
        print(f"  old / new: {ratio:.1f}x; psi differs by at most {worst:.1e} of its lag's largest |psi|, "
              f"S by {s_diff:.1e} of the largest |S|", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["default", *SIZES], default="default")
    ap.add_argument("--config", default="config/config.yaml", help="the size of --size default")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="gru")
    ap.add_argument("--batch", type=int, nargs="+", help="sequences per batch (default: the size's)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--variants", nargs="+", choices=["old", "new"], default=["old", "new"])
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    size = size_of(args.size, args.config)
    for batch in args.batch or size["batches"]:
        run(size, args.model, device, batch, args.repeat, args.variants)


if __name__ == "__main__":
    main()
