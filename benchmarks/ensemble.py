"""Networks per second (docs/method.md §3, §10b): an ensemble of E networks trained together
(learnwin.models.ensemble.Ensemble: stacked parameters, a per-network clip, one optimizer per group
of members over their stack) three ways: the gated cells' hand-written recurrence with a member
dimension as Ensemble runs it ("member": fused.pick's Function, bptt's eager driver on the CPU,
the fused step on CUDA), the same through the fused step in eager mode ("fused eager", on the CPU
only: the driver CUDA compiles), and one vmapped forward and backward of the cells' step-by-step
scan (the fallback of the other cells: "vmap"), against the same E networks
trained separately (learnwin.models.train.train_step: the hand-written BPTT, "separate"), for
E = 1, 4, 16 (a cell without a hand-written recurrence, a linear cell, runs under vmap in both).
Each network has its own init, inputs and targets, clip 1.0; its optimizer is AdamW ("adamw"
rows) or, with --mixed, AdamW and SGD with momentum by turns ("mixed" rows: the (optimizer, seed)
runs of a model in one train_ensemble job).

With --budget E, the lags of a budget-protocol job (learnwin.recovery.budget_job.budget_trainings):
the control and E lags, each trained online to N_max (early stop and frontier off, so both do the
same work) and scored at every budget, as one ensemble on the shared inputs (``ensemble=E``)
against one at a time: seconds per job (the scoring, the same in both, included), their ratio and
the largest |r| difference of the two score tables (float32; their rows are checked equal).

Run: python benchmarks/ensemble.py [--device cpu|cuda] [--size default|replication|both]
                                   [--models gru,lstm,const,shared,diag] [--sizes 1,4,16] [--steps 3] [--rounds 3]
                                   [--mixed] [--budget E]
Sizes: default = T and D of config/config.yaml's task, its model.hidden and train.batch_size;
replication = T 1024, D 16, H 128, batch 512 (the official repository's replication command).
The budget job runs at the default size, budgets 2B, 4B, 8B and 16B (16 steps per network), the
config's recovery thresholds, n_test, n_perm, null_quantile and coef (config/config.yaml's where the
config has none).
CPU: 1 thread. Each implementation is timed once per round, interleaved, and the best round is
printed (the machine may be shared): networks x steps / seconds, and the ratios member / separate,
vmap / separate and member / vmap. Before timing, the member and vmap ensembles and the separate
trainings run 3 steps in float64 (E = 4, the default size) and the largest weight difference is printed.
"""

import argparse
import copy
import time

import numpy as np
import torch
import yaml

from learnwin.infra import runtime
from learnwin.models import fused
from learnwin.models.cells import build_model
from learnwin.models.ensemble import Ensemble
from learnwin.models.train import make_optimizer, train_step
from learnwin.recovery.budget_job import budget_trainings

OPTIM = {"adamw": {"lr": 0.005, "weight_decay": 1e-4}, "sgd_momentum": {"lr": 0.01, "momentum": 0.9}}
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


def optimizers(E, mixed):
    """Each member's optimizer: AdamW, or AdamW and SGD with momentum by turns."""
    return [("adamw", "sgd_momentum")[i % 2] if mixed else "adamw" for i in range(E)]


def separate(nets, x, y, names):
    opts = [make_optimizer(name, net.parameters(), OPTIM[name]) for net, name in zip(nets, names)]

    def step():
        for i, (net, opt) in enumerate(zip(nets, opts)):
            train_step(net, opt, x[i], y[i], grad_clip=CLIP, run_name="separate", lr_key="lr", where="benchmark")

    return step, nets


def ensemble(nets, x, y, names, member_step=True):
    ens = Ensemble(nets, [make_optimizer(name, net.parameters(), OPTIM[name]) for net, name in zip(nets, names)],
                   names, [OPTIM[name] for name in names], member_step=member_step)

    def step():
        ens.step(x, y, CLIP)

    def synced():
        ens.sync()
        return ens.nets

    return step, synced


def vmapped(nets, x, y, names):
    """The ensemble with every cell under vmap (the fallback)."""
    return ensemble(nets, x, y, names, member_step=False)


def fused_eager(nets, x, y, names):
    """The member ensemble through the fused step, eager."""
    step, synced = ensemble(nets, x, y, names)

    def eager():
        with fused.use(fused.Mode(compile=False, graph=False)):
            step()

    return eager, synced


def check(model, T, D, H, B, device, mixed):
    """Largest |weight difference| after 3 steps in float64 of the fused and the vmap ensemble
    against separate trainings (E = 4)."""
    x, y = data(4, B, T, D, device, torch.float64)
    nets, names = networks(model, 4, D, H, device, torch.float64), optimizers(4, mixed)
    step_sep, a = separate(copy.deepcopy(nets), x, y, names)
    ensembles = [make(copy.deepcopy(nets), x, y, names) for make in (ensemble, vmapped)]
    for _ in range(3):
        step_sep()
        for step, _ in ensembles:
            step()
    return [max((p - q).abs().max().item() for u, v in zip(a, synced()) for p, q in zip(u.parameters(), v.parameters()))
            for _, synced in ensembles]


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def row(model, E, T, D, H, B, device, steps, rounds, mixed):
    x, y = data(E, B, T, D, device, torch.float32)
    names = optimizers(E, mixed)
    fns = {make.__name__: make(networks(model, E, D, H, device, torch.float32), x, y, names)[0]
           for make in (separate, ensemble, vmapped, *([fused_eager] if device == "cpu" else []))}
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
    sep, mem, vm = best["separate"], best["ensemble"], best["vmapped"]
    print(f"{model:6s} {'mixed' if mixed else 'adamw':6s} {E:3d} {sep:9.2f} {vm:9.2f} {mem:9.2f} "
          f"{best.get('fused_eager', float('nan')):11.2f} {vm / sep:9.2f} {mem / sep:10.2f} {mem / vm:11.2f}", flush=True)


def budget_row(model, E, cfg, T, D, H, B, device, rounds):
    """Seconds of one budget job (control and E lags, each to N_max), one at a time and as one ensemble."""
    rec = {**yaml.safe_load(open("config/config.yaml"))["recovery"], **cfg.get("recovery", {})}
    kw = dict(model=model, optimizer="adamw", seed=2, lags=list(range(1, 2 * E, 2)), thresholds=rec["thresholds"],
              budgets=[2 * B, 4 * B, 8 * B, 16 * B], batch_size=B, frontier_stop=0, early_stop=False,
              task=dict(T=T, D=D, noise_std=cfg["task"]["noise_std"]), model_config=dict(hidden=H),
              optim_config=OPTIM["adamw"], train_config=dict(grad_clip=CLIP),
              gt={k: rec[k] for k in ("coef", "n_test", "n_perm", "null_quantile")}, device=device)
    best, tables = {0: float("inf"), E: float("inf")}, {}
    for _ in range(rounds):
        for e in best:
            sync(device)
            t0 = time.perf_counter()
            tables[e] = budget_trainings(ensemble=e, **kw)
            sync(device)
            best[e] = min(best[e], time.perf_counter() - t0)
    a, b = tables[0], tables[E]
    assert a[["target", "lag", "N"]].equals(b[["target", "lag", "N"]])
    print(f"{model:6s} {E:3d} {best[0]:10.2f} {best[E]:10.2f} {best[0] / best[E]:8.2f} "
          f"{np.abs(a['r'] - b['r']).max():9.1e}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--size", default="default", choices=["default", "replication", "both"])
    ap.add_argument("--models", default="gru,lstm,const,shared,diag")
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mixed", action="store_true", help="also ensembles of AdamW and SGD-momentum members")
    ap.add_argument("--budget", type=int, default=0, help="also a budget job's control and this many lags")
    args = ap.parse_args()
    runtime.deterministic()  # as the jobs run, before CUDA starts
    cfg = yaml.safe_load(open(args.config))
    sizes = {"default": (cfg["task"]["T"], cfg["task"]["D"], cfg["model"]["hidden"], cfg["train"]["batch_size"]),
             "replication": (1024, 16, 128, 512)}
    if args.device == "cpu":
        torch.set_num_threads(1)
    models, ensembles = args.models.split(","), [int(e) for e in args.sizes.split(",")]
    kinds = [False, True] if args.mixed else [False]
    T, D, H, B = sizes["default"]
    print(f"torch {torch.__version__}, {args.device}" + (" 1 thread" if args.device == "cpu" else
                                                          f" {torch.cuda.get_device_name()}"))
    print("float64 check (E 4, default size, 3 steps), max |ensemble - separate| weight, member and vmap:")
    for model in models:
        for mixed in kinds:
            mem, vm = check(model, T, D, H, B, args.device, mixed)
            print(f"  {model:6s} {'mixed' if mixed else 'adamw':6s} member {mem:.1e} vmap {vm:.1e}", flush=True)
    for size in (["default", "replication"] if args.size == "both" else [args.size]):
        T, D, H, B = sizes[size]
        print(f"\n{size}: T={T} D={D} H={H} batch={B}; networks x steps per second, best of {args.rounds} rounds "
              f"of {args.steps} steps")
        print(f"{'model':6s} {'optim':6s} {'E':>3s} {'separate':>9s} {'vmap':>9s} {'member':>9s} {'fused eager':>11s} "
              f"{'vmap/sep':>9s} {'member/sep':>10s} {'member/vmap':>11s}")
        for model in models:
            for mixed in kinds:
                for E in ensembles:
                    row(model, E, T, D, H, B, args.device, args.steps, args.rounds, mixed)
                    fused.release()  # this row's graphs: the next row's shapes differ
    if args.budget:
        T, D, H, B = sizes["default"]
        print(f"\nbudget job, default size (T={T} D={D} H={H} batch={B}): the control and {args.budget} lags, each "
              f"16 steps to N_max={16 * B} and scored at 4 budgets; seconds, best of {args.rounds} rounds")
        print(f"{'model':6s} {'E':>3s} {'one-by-one':>10s} {'ensemble':>10s} {'speed-up':>8s} {'max |dr|':>9s}")
        for model in models:
            budget_row(model, args.budget, cfg, T, D, H, B, args.device, args.rounds)


if __name__ == "__main__":
    main()
