"""Networks per second (docs/method.md §3): an ensemble of E networks trained together
(learnwin.models.ensemble.Ensemble: stacked parameters, one vmapped forward and backward of the
cells' step-by-step scan, a per-network clip, one optimizer over the stack) against the same E
networks trained separately (learnwin.models.train.train_step: the hand-written BPTT), for
E = 1, 4, 16. Each network has its own init, inputs and targets, AdamW, clip 1.0.

Run: python benchmarks/ensemble.py [--device cpu|cuda] [--size default|replication|both]
                                   [--models gru,lstm,const,shared,diag] [--sizes 1,4,16] [--steps 3] [--rounds 3]
Sizes: default = T and D of config/config.yaml's task, its model.hidden and train.batch_size;
replication = T 1024, D 16, H 128, batch 512 (the official repository's replication command).
CPU: 1 thread. Each implementation is timed once per round, interleaved, and the best round is
printed (the machine may be shared): networks x steps / seconds. Before timing, both run 3 steps
in float64 (E = 4, the default size) and the largest weight difference is printed.
"""

import argparse
import copy
import time

import torch
import yaml

from learnwin.models.cells import build_model
from learnwin.models.ensemble import Ensemble
from learnwin.models.train import make_optimizer, train_step

OPTIM = {"lr": 0.005, "weight_decay": 1e-4}
CLIP = 1.0


def networks(model, E, D, H, device, dtype):
    out = []
    for seed in range(E):
        torch.manual_seed(seed)
        out.append(build_model(model, D, H).to(device=device, dtype=dtype))
    return out


def data(E, B, T, D, device, dtype):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(E, B, T, D, generator=g, dtype=dtype).to(device),
            torch.randn(E, B, T, generator=g, dtype=dtype).to(device))


def separate(nets, x, y):
    opts = [make_optimizer("adamw", net.parameters(), OPTIM) for net in nets]

    def step():
        for i, (net, opt) in enumerate(zip(nets, opts)):
            train_step(net, opt, x[i], y[i], grad_clip=CLIP, run_name="separate", lr_key="lr", where="benchmark")

    return step, nets


def ensemble(nets, x, y):
    ens = Ensemble(nets, [make_optimizer("adamw", net.parameters(), OPTIM) for net in nets], ["adamw"] * len(nets),
                   [OPTIM] * len(nets))

    def step():
        ens.step(x, y, CLIP)

    def synced():
        ens.sync()
        return ens.nets

    return step, synced


def check(model, T, D, H, B, device):
    """Largest |weight difference| after 3 steps in float64, ensemble against separate (E = 4)."""
    x, y = data(4, B, T, D, device, torch.float64)
    nets = networks(model, 4, D, H, device, torch.float64)
    step_sep, a = separate(copy.deepcopy(nets), x, y)
    step_ens, synced = ensemble(nets, x, y)
    for _ in range(3):
        step_sep()
        step_ens()
    b = synced()
    return max((p - q).abs().max().item() for u, v in zip(a, b) for p, q in zip(u.parameters(), v.parameters()))


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def row(model, E, T, D, H, B, device, steps, rounds):
    x, y = data(E, B, T, D, device, torch.float32)
    fns = {make.__name__: make(networks(model, E, D, H, device, torch.float32), x, y)[0] for make in (separate, ensemble)}
    for fn in fns.values():
        fn()  # warm-up
    best = dict.fromkeys(fns, 0.0)
    for _ in range(rounds):
        for name, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            sync(device)
            best[name] = max(best[name], E * steps / (time.perf_counter() - t0))
    print(f"{model:6s} {E:3d} {best['separate']:14.2f} {best['ensemble']:14.2f} {best['ensemble'] / best['separate']:8.2f}",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--size", default="default", choices=["default", "replication", "both"])
    ap.add_argument("--models", default="gru,lstm,const,shared,diag")
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    sizes = {"default": (cfg["task"]["T"], cfg["task"]["D"], cfg["model"]["hidden"], cfg["train"]["batch_size"]),
             "replication": (1024, 16, 128, 512)}
    if args.device == "cpu":
        torch.set_num_threads(1)
    models, ensembles = args.models.split(","), [int(e) for e in args.sizes.split(",")]
    T, D, H, B = sizes["default"]
    print(f"torch {torch.__version__}, {args.device}" + (" 1 thread" if args.device == "cpu" else
                                                          f" {torch.cuda.get_device_name()}"))
    print("float64 check (E 4, default size, 3 AdamW steps), max |ensemble - separate| weight:")
    for model in models:
        print(f"  {model:6s} {check(model, T, D, H, B, args.device):.1e}", flush=True)
    for size in (["default", "replication"] if args.size == "both" else [args.size]):
        T, D, H, B = sizes[size]
        print(f"\n{size}: T={T} D={D} H={H} batch={B}; networks x steps per second, best of {args.rounds} rounds "
              f"of {args.steps} steps")
        print(f"{'model':6s} {'E':>3s} {'separate':>14s} {'ensemble':>14s} {'ens/sep':>8s}")
        for model in models:
            for E in ensembles:
                row(model, E, T, D, H, B, args.device, args.steps, args.rounds)


if __name__ == "__main__":
    main()
