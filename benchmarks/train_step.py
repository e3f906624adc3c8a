"""ms per training step (forward + backward + AdamW step) of the five cells and of torch.nn.LSTM/GRU.

Run: python benchmarks/train_step.py [--config config/config.yaml] [--repeats 20]
Size and batch come from the config (default experiment); 1 thread. The ratio to nn.LSTM is
what we track (target <= 5x).
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


def ms_per_step(model, x, y, repeats):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    return 1e3 * (time.perf_counter() - t0) / repeats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    T, D = cfg["task"]["T"], cfg["task"]["D"]
    H, B = cfg["model"]["hidden"], cfg["train"]["batch_size"]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    print(f"T={T} D={D} H={H} batch={B}, 1 thread, torch {torch.__version__}")
    ref = ms_per_step(TorchRNN("LSTM", D, H), x, y, args.repeats)
    rows = [("nn.LSTM", ref), ("nn.GRU", ms_per_step(TorchRNN("GRU", D, H), x, y, args.repeats))]
    rows += [(m, ms_per_step(build_model(m, D, H), x, y, args.repeats)) for m in MODELS]
    print(f"{'cell':10s} {'ms/step':>9s} {'x nn.LSTM':>10s}")
    for name, ms in rows:
        print(f"{name:10s} {ms:9.2f} {ms / ref:10.2f}")


if __name__ == "__main__":
    main()
