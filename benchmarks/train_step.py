"""ms per training step (forward + backward + AdamW step) of the five cells and of torch.nn.LSTM/GRU.

Every model steps with the workflow's optimizer (learnwin.train.make_optimizer: multi-tensor AdamW).

Run: python benchmarks/train_step.py [--config config/config.yaml] [--repeats 10] [--rounds 5] [--sizes default,medium]
Two sizes: the default experiment's (T, D, H, batch from the config) and a medium one
(T 256, H 128, batch 64); 1 thread. Each cell runs twice in the same process: the training
fast path (hand-written BPTT, learnwin.bptt) and the step-by-step autograd reference path
(``reference=True``); every implementation is timed once per round, interleaved, and the
minimum over rounds is printed (the machine is shared). The ratio to nn.LSTM is what we
track (target <= 2.5x, fast path).
"""

import argparse
import time

import torch
import yaml

from learnwin.cells import MODELS, build_model
from learnwin.train import make_optimizer


class TorchRNN(torch.nn.Module):
    def __init__(self, kind, D, H):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(D, H, batch_first=True)
        self.out = torch.nn.Linear(H, 1)

    def forward(self, x):
        return self.out(self.rnn(x)[0]).squeeze(-1)


def stepper(model, x, y, **kw):
    opt = make_optimizer("adamw", model.parameters(), {"lr": 1e-3, "weight_decay": 1e-4})  # as training

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x, **kw), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    return step


def table(T, D, H, B, repeats, rounds):
    """ms per step, the minimum over ``rounds`` interleaved rounds (the machine is shared)."""
    torch.manual_seed(0)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    print(f"\nT={T} D={D} H={H} batch={B}, 1 thread, torch {torch.__version__}, "
          f"min over {rounds} rounds of {repeats} steps")
    steps = {"nn.LSTM": stepper(TorchRNN("LSTM", D, H), x, y),
             "nn.GRU": stepper(TorchRNN("GRU", D, H), x, y)}
    for m in MODELS:
        model = build_model(m, D, H)
        steps[m] = stepper(model, x, y)
        steps[m + " ref"] = stepper(model, x, y, reference=True)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(repeats):
                step()
            best[name] = min(best[name], 1e3 * (time.perf_counter() - t0) / repeats)
    ref = best["nn.LSTM"]
    print(f"{'cell':10s} {'fast ms':>9s} {'x nn.LSTM':>10s} {'ref ms':>9s} {'x nn.LSTM':>10s}")
    for name in ("nn.LSTM", "nn.GRU"):
        print(f"{name:10s} {best[name]:9.2f} {best[name] / ref:10.2f}")
    for m in MODELS:
        fast, slow = best[m], best[m + " ref"]
        print(f"{m:10s} {fast:9.2f} {fast / ref:10.2f} {slow:9.2f} {slow / ref:10.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="default,medium", help="comma-separated: default, medium")
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    torch.set_num_threads(1)
    D = cfg["task"]["D"]
    sizes = args.sizes.split(",")
    if "default" in sizes:
        table(cfg["task"]["T"], D, cfg["model"]["hidden"], cfg["train"]["batch_size"], args.repeats, args.rounds)
    if "medium" in sizes:
        table(256, D, 128, 64, max(args.repeats // 5, 1), args.rounds)


if __name__ == "__main__":
    main()
