"""ms per network per online step (docs/method.md §10b): the lags of one (model, seed) trained as one
ensemble against separate trainings: whether to batch the lags where it wins.

Separate: one network and one AdamW per lag, each stepped by learnwin.models.train.train_step (the
cells' fast path, hand-written BPTT). Ensemble: the same networks stacked along a leading dimension
(torch.func.stack_module_state), the forward vmapped over torch.func.functional_call (which runs the
cells' step-by-step autograd scan: no custom Function under vmap), one backward of the summed
losses, a per-network global-norm clip and one multi-tensor AdamW on the stacked parameters: the
same update per network. Both see the same inputs (the lags share them) and their own targets.

Run: python benchmarks/ensemble.py [--config config/config.yaml] [--networks 33] [--models gru,lstm,const]
                                   [--hidden 32] [--batch 32] [--steps 5] [--rounds 3]
The default size: T and D from the config's task, H 32, batch 32, 33 networks (32 lags and the
control); 1 CPU thread, and CUDA where present. Each implementation is timed once per round,
interleaved, and the minimum over rounds is printed (the machine is shared). Before timing, both
run 3 steps in float64 from the same init and the largest weight difference is printed.
"""

import argparse
import copy
import time

import torch
import yaml
from torch.func import functional_call, stack_module_state, vmap

from learnwin.models.cells import build_model
from learnwin.models.train import make_optimizer, train_step

OPTIM = {"lr": 0.005, "weight_decay": 1e-4}
CLIP = 1.0


def separate(nets, x, ys):
    """One step function for every network trained on its own."""
    opts = [make_optimizer("adamw", net.parameters(), OPTIM) for net in nets]

    def step():
        for net, opt, y in zip(nets, opts, ys):
            train_step(net, opt, x, y, grad_clip=CLIP, run_name="separate", lr_key="lr", where="benchmark")

    return step, lambda: [torch.cat([p.detach().flatten() for p in net.parameters()]) for net in nets]


def ensemble(nets, x, ys):
    """One step function for the networks stacked along a leading dimension (see the module docstring)."""
    params, buffers = stack_module_state(nets)
    base = copy.deepcopy(nets[0]).to("meta")
    opt = make_optimizer("adamw", params.values(), OPTIM)
    names = [name for name, _ in nets[0].named_parameters()]

    def loss(p, b, y):
        return torch.mean((functional_call(base, (p, b), (x,)) - y) ** 2)

    forward = vmap(loss, in_dims=(0, 0, 0))
    y_all = torch.stack(ys)

    def step():
        opt.zero_grad(set_to_none=True)
        forward(params, buffers, y_all).sum().backward()
        grads = [params[n].grad for n in names]
        norm = torch.stack([g.pow(2).flatten(1).sum(1) for g in grads]).sum(0).sqrt()
        scale = (CLIP / (norm + 1e-6)).clamp(max=1.0)  # torch.nn.utils.clip_grad_norm_, per network
        for g in grads:
            g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
        opt.step()

    return step, lambda: [torch.cat([params[n][i].detach().flatten() for n in names]) for i in range(len(nets))]



def networks(model, n, D, H, device, dtype):
    torch.manual_seed(0)
    return [build_model(model, D, H).to(device=device, dtype=dtype) for _ in range(n)]


def data(n, B, T, D, device, dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, D, generator=g, dtype=dtype).to(device)
    return x, [torch.randn(B, T, generator=g, dtype=dtype).to(device) for _ in range(n)]


def check(model, n, T, D, H, B, device):
    """Largest |weight difference| after 3 steps in float64, ensemble against separate."""
    x, ys = data(n, B, T, D, device, torch.float64)
    out = []
    for make in (separate, ensemble):
        step, weights = make(networks(model, n, D, H, device, torch.float64), x, ys)
        for _ in range(3):
            step()
        out.append(weights())
    return max((a - b).abs().max().item() for a, b in zip(*out))


def row(model, n, T, D, H, B, device, steps, rounds):
    diff = check(model, min(n, 4), T, D, H, B, device)
    x, ys = data(n, B, T, D, device, torch.float32)
    fns = {make.__name__: make(networks(model, n, D, H, device, torch.float32), x, ys)[0] for make in (separate, ensemble)}
    for fn in fns.values():
        fn()  # warm-up
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            if device == "cuda":
                torch.cuda.synchronize()
            best[name] = min(best[name], 1e3 * (time.perf_counter() - t0) / steps / n)
    ratio = best["separate"] / best["ensemble"]
    print(f"{device:5s} {model:6s} {best['separate']:12.3f} {best['ensemble']:12.3f} {ratio:9.2f} {diff:14.1e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--networks", type=int, default=33)
    ap.add_argument("--models", default="gru,lstm,const")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    task = yaml.safe_load(open(args.config))["task"]
    T, D, H, B, n = task["T"], task["D"], args.hidden, args.batch, args.networks
    torch.set_num_threads(1)
    print(f"T={T} D={D} H={H} batch={B}, {n} networks, torch {torch.__version__}, CPU 1 thread, "
          f"min over {args.rounds} rounds of {args.steps} steps; ms per network per step")
    print(f"{'dev':5s} {'model':6s} {'separate ms':>12s} {'ensemble ms':>12s} {'sep/ens':>9s} {'float64 diff':>14s}")
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        for model in args.models.split(","):
            row(model, n, T, D, H, B, device, args.steps, args.rounds)


if __name__ == "__main__":
    main()
