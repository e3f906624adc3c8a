"""Time and peak device memory of one snapshot batch at a config's size (docs/method.md §4-5).

Run: python benchmarks/snapshot_batch.py [--config config/paper.yaml] [--device cuda] [--models gru,lstm]
                                         [--batch N] [--T N] [--hidden N] [--directions K]

One batch of ``snapshot.batch_size`` diag sequences through the workflow's snapshot stage
(learnwin.probing.snapshot.snapshot_state) of a network at init after one AdamW step (so the rates are
AdamW's), with the config's lag grid, ``times_per_lag``, K directions and transport; the config is
read on top of config/config.yaml, as ``--configfile`` reads it. Prints per model the seconds of the
batch (after a warm-up batch of 2 sequences), the peak GPU memory (torch.cuda.max_memory_allocated;
CPU: none), and the seconds of a whole checkpoint at that rate (n_diag / batch batches). On CUDA each
model also prints its row of the GPU cost table (``gpu_cost snapshot FAMILY T H SEQUENCES SECONDS
PEAK_GIB``, read by ``python -m learnwin.infra.gpu_cost LOG``). The
overrides shrink the size for a CPU check of the script.
"""

import argparse
import time
from pathlib import Path

import torch
import yaml

from learnwin.infra import runtime
from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.models.train import checkpoint, checkpoint_meta, make_optimizer
from learnwin.tasks.synthetic import make_split

ROOT = Path(__file__).resolve().parents[1]


def merged(path: str) -> dict:
    """``path`` on top of config/config.yaml, section by section."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for key, value in yaml.safe_load(Path(path).read_text()).items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


def state_of(model: str, cfg: dict, device: str) -> dict:
    """A checkpoint of ``model`` at init after one AdamW step on random data."""
    task, D = cfg["task"], cfg["task"]["D"]
    torch.manual_seed(0)
    net = build_model(model, D, **cfg["model"]).to(device)
    opt = make_optimizer("adamw", net.parameters(), cfg["optim"]["adamw"])
    x = torch.randn(2, task["T"], D, device=device)
    torch.mean(net(x) ** 2).backward()
    opt.step()
    meta = checkpoint_meta(model, "adamw", 0, input_size=D, model_config=cfg["model"], optim_config=cfg["optim"]["adamw"])
    return checkpoint(net, opt, 0, meta, float("nan"))


def run(model: str, cfg: dict, device: str) -> None:
    from learnwin.probing.snapshot import snapshot_state

    task, snap = cfg["task"], cfg["snapshot"]
    B = snap["batch_size"]
    x, y = make_split(0, "diag", B, task["T"], task["D"], task["lags"], task["coefs"], task["noise_std"])
    state = state_of(model, cfg, device)
    kw = dict(lags=lag_grid(snap), order=snap["order"], times_per_lag=snap["times_per_lag"],
              directions=snap["directions"], batch_size=B, keep_directions=snap["keep_directions"],
              keys={"seed": 0}, device=device, transport=snap["transport"], exact_sequences=snap["exact_sequences"])
    snapshot_state(state, x[:2], y[:2], **kw)  # warm-up
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    env = snapshot_state(state, x, y, **kw)[0]
    if cuda:
        torch.cuda.synchronize()
    sec = time.perf_counter() - t0
    peak = f"{torch.cuda.max_memory_allocated() / 2**30:10.2f}" if cuda else f"{'-':>10s}"
    per_ckpt = sec * task["n_diag"] / B
    print(f"{model:8s} {B:6d} {sec:10.2f} {peak} {per_ckpt:14.0f} {len(env):6d}", flush=True)
    if cuda:  # a row of the GPU cost table (learnwin.infra.gpu_cost)
        print(f"gpu_cost snapshot {model} {task['T']} {cfg['model']['hidden']} {B} {sec:.3f} "
              f"{torch.cuda.max_memory_allocated() / 2**30:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/paper.yaml")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="gru")
    ap.add_argument("--batch", type=int, help="override snapshot.batch_size")
    ap.add_argument("--T", type=int, help="override task.T (the lag grid is cut to T - 1)")
    ap.add_argument("--hidden", type=int, help="override model.hidden")
    ap.add_argument("--directions", type=int, help="override snapshot.directions")
    args = ap.parse_args()
    runtime.deterministic()  # as the jobs run, before CUDA starts
    cfg = merged(args.config)
    task, snap = cfg["task"], cfg["snapshot"]
    if args.batch:
        snap["batch_size"] = args.batch
    if args.T:
        task["T"] = args.T
        task["lags"], task["coefs"] = ([lag for lag in task["lags"] if lag < args.T] or [1])[:1], task["coefs"][:1]
        snap["lag_stop"] = min(snap["lag_stop"], args.T - 1)
    if args.hidden:
        cfg["model"]["hidden"] = args.hidden
    if args.directions:
        snap["directions"] = args.directions
    torch.set_num_threads(1)
    dev = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU, 1 thread"
    print(f"snapshot batch: {args.config}: T={task['T']} D={task['D']} H={cfg['model']['hidden']} "
          f"lags {len(lag_grid(snap))} ({snap['lag_start']}..{snap['lag_stop']} step {snap['lag_step']}), "
          f"K={snap['directions']}, times_per_lag {snap['times_per_lag']}, transport {snap['transport']}, "
          f"n_diag {task['n_diag']}; {dev}, torch {torch.__version__}")
    print(f"{'model':8s} {'batch':>6s} {'seconds':>10s} {'peak GiB':>10s} {'s/checkpoint':>14s} {'lags':>6s}", flush=True)
    for model in args.models.split(","):
        run(model, cfg, args.device)


if __name__ == "__main__":
    main()
