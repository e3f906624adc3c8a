"""ms per training step (forward + backward + AdamW step) of the five cells and of torch.nn.LSTM/GRU.

Run: python benchmarks/train_step.py [--config config/config.yaml] [--repeats 20]
Two sizes: the default experiment's (T, D, H, batch from the config) and a medium one
(T 256, H 128, batch 64); 1 thread. Each cell runs twice in the same process: the training
fast path (hand-written BPTT, learnwin.bptt) and the step-by-step autograd reference path
(``reference=True``). The ratio to nn.LSTM is what we track (target <= 2.5x, fast path).
"""

import argparse
import time

import torch
import yaml

from learnwin.cells import MODELS, build_model


class TorchRNN(torch.nn.Module):
    def __init__(self, kind, D, H):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(D, H, batch_first=True)
        self.out = torch.nn.Linear(H, 1)

    def forward(self, x):
        return self.out(self.rnn(x)[0]).squeeze(-1)


def ms_per_step(model, x, y, repeats, **kw):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x, **kw), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    return 1e3 * (time.perf_counter() - t0) / repeats


def table(T, D, H, B, repeats):
    torch.manual_seed(0)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    print(f"\nT={T} D={D} H={H} batch={B}, 1 thread, torch {torch.__version__}, {repeats} steps")
    ref = ms_per_step(TorchRNN("LSTM", D, H), x, y, repeats)
    gru = ms_per_step(TorchRNN("GRU", D, H), x, y, repeats)
    print(f"{'cell':10s} {'fast ms':>9s} {'x nn.LSTM':>10s} {'ref ms':>9s} {'x nn.LSTM':>10s}")
    print(f"{'nn.LSTM':10s} {ref:9.2f} {1:10.2f}")
    print(f"{'nn.GRU':10s} {gru:9.2f} {gru / ref:10.2f}")
    for m in MODELS:
        model = build_model(m, D, H)
        fast = ms_per_step(model, x, y, repeats)
        slow = ms_per_step(model, x, y, repeats, reference=True)
        print(f"{m:10s} {fast:9.2f} {fast / ref:10.2f} {slow:9.2f} {slow / ref:10.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    torch.set_num_threads(1)
    D = cfg["task"]["D"]
    table(cfg["task"]["T"], D, cfg["model"]["hidden"], cfg["train"]["batch_size"], args.repeats)
    table(256, D, 128, 64, max(args.repeats // 4, 3))


if __name__ == "__main__":
    main()
