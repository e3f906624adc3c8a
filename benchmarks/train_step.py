"""ms per training step (forward + backward + AdamW step) of the cells and of torch.nn.LSTM/GRU.

Every model steps with the workflow's optimizer (learnwin.models.train.make_optimizer: multi-tensor AdamW).

Run: python benchmarks/train_step.py [--config config/config.yaml] [--repeats 10] [--rounds 5]
                                     [--sizes default,medium,long,stacks] [--layers 2,4] [--before BPTT_FILE]
Three sizes: the default experiment's (T, D, H, batch from the config), a medium one
(T 256, H 128, batch 64), both with every cell, and a long one, the paper's T = 1536 with H 64 and
batch 32, with the diagonal linear cells of docs/method.md §2b only (S6 with its default N = 16);
1 thread; and stacks (docs/method.md §2c) at the default size: L = 2 and 4 layers (``--layers``) of
every cell, in block ``stacked`` (layer i + 1 reads layer i's h, the shape of nn.LSTM(num_layers=L))
and in its family's published block, as multiples of nn.LSTM(num_layers=L) in the same run
(each layer's cell on its own fast path over the whole sequence). Each cell runs twice in the same process: the training fast path (hand-written BPTT,
learnwin.models.bptt, for the gated cells; the chunked parallel scan, learnwin.models.scan, for
the diagonal linear cells) and the step-by-step autograd reference path
(``reference=True``); every implementation is timed once per round, interleaved, and the
minimum over rounds is printed (the machine is shared). The ratio to nn.LSTM is what we
track (target <= 2.5x, fast path).

On CPU, nn.LSTM runs oneDNN's fused LSTM kernel (one call per layer, forward and backward);
nn.GRU has no such kernel. The row "nn.LSTM no oneDNN" is the same module with oneDNN switched
off: torch's own step-by-step loop of ATen ops (in C++), the kind of loop the cells run.

Before and after a change of the fast path, in one run: ``--before`` names an earlier version of
learnwin/models/bptt.py (``git show REV:learnwin/models/bptt.py > before.py``), whose Functions are timed on the
same cells (through their ``fast_forward``), interleaved with the others; the table gains its ms and the after / before ratio.
"""

import argparse
import importlib.util
import time
import types
import warnings
from unittest import mock

import torch
import yaml

from learnwin.infra.registry import CELLS, MODELS
from learnwin.models import bptt, cells
from learnwin.models.cells import GatedCell, build_model
from learnwin.models.train import make_optimizer


class TorchRNN(torch.nn.Module):
    def __init__(self, kind, D, H, layers=1):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(D, H, num_layers=layers, batch_first=True)
        self.out = torch.nn.Linear(H, 1)

    def forward(self, x):
        return self.out(self.rnn(x)[0]).squeeze(-1)


class Before(torch.nn.Module):
    """A cell's model whose ``fast_forward`` applies the Functions of an earlier
    learnwin.models.bptt (``--before``; the helpers it calls them with stay the current ones)."""

    FUNCTIONS = ("GateScan", "GRUScan", "LSTMScan")

    def __init__(self, model, before):
        super().__init__()
        self.model = model
        self.bptt = types.SimpleNamespace(**{**vars(bptt), **{n: getattr(before, n) for n in self.FUNCTIONS}})

    def forward(self, x):
        with mock.patch.object(cells, "bptt", self.bptt):
            return self.model(x)


def load_module(path):
    spec = importlib.util.spec_from_file_location("bptt_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stepper(model, x, y, onednn=True, **kw):
    opt = make_optimizer("adamw", model.parameters(), {"lr": 1e-3, "weight_decay": 1e-4})  # as training

    def step():
        with torch.backends.mkldnn.flags(enabled=onednn):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x, **kw), y)
            loss.backward()
            opt.step()

    for _ in range(3):
        step()
    return step


def best_ms(steps, repeats, rounds):
    """ms per step of each stepper, the minimum over ``rounds`` interleaved rounds (the machine is shared)."""
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(repeats):
                step()
            best[name] = min(best[name], 1e3 * (time.perf_counter() - t0) / repeats)
    return best


LINEAR = [m for m in MODELS if not issubclass(CELLS[m].load(), GatedCell)]


def table(T, D, H, B, repeats, rounds, before=None, models=MODELS):
    """ms per step, the minimum over ``rounds`` interleaved rounds (the machine is shared)."""
    torch.manual_seed(0)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    print(f"\nT={T} D={D} H={H} batch={B}, 1 thread, torch {torch.__version__}, "
          f"min over {rounds} rounds of {repeats} steps")
    lstm = TorchRNN("LSTM", D, H)
    steps = {"nn.LSTM": stepper(lstm, x, y), "nn.LSTM no oneDNN": stepper(lstm, x, y, onednn=False),
             "nn.GRU": stepper(TorchRNN("GRU", D, H), x, y)}
    for m in models:
        model = build_model(m, D, H)
        steps[m] = stepper(model, x, y)
        steps[m + " ref"] = stepper(model, x, y, reference=True)
        if before is not None and m not in LINEAR:
            steps[m + " before"] = stepper(Before(model, before), x, y)
    best = best_ms(steps, repeats, rounds)
    ref = best["nn.LSTM"]
    extra = f" {'before ms':>10s} {'after/before':>13s}" if before is not None else ""
    print(f"{'cell':17s} {'fast ms':>9s} {'x nn.LSTM':>10s} {'ref ms':>9s} {'x nn.LSTM':>10s}{extra}")
    for name in ("nn.LSTM", "nn.LSTM no oneDNN", "nn.GRU"):
        print(f"{name:17s} {best[name]:9.2f} {best[name] / ref:10.2f}")
    for m in models:
        fast, slow = best[m], best[m + " ref"]
        extra = ""
        if before is not None and m not in LINEAR:
            extra = f" {best[m + ' before']:10.2f} {fast / best[m + ' before']:13.2f}"
        print(f"{m:17s} {fast:9.2f} {fast / ref:10.2f} {slow:9.2f} {slow / ref:10.2f}{extra}")


def stack_table(T, D, H, B, layers, repeats, rounds):
    """ms per step of L-layer stacks against nn.LSTM(num_layers=L), minimum over interleaved rounds."""
    torch.manual_seed(0)
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    print(f"\nstacks: T={T} D={D} H={H} batch={B}, 1 thread, torch {torch.__version__}, "
          f"min over {rounds} rounds of {repeats} steps")
    blocks = {m: list(dict.fromkeys(["stacked", CELLS[m].block])) for m in MODELS}  # published: the second
    steps = {}
    for L in layers:
        steps[f"nn.LSTM L={L}"] = stepper(TorchRNN("LSTM", D, H, L), x, y)
        for m in MODELS:
            for block in blocks[m]:
                steps[f"{m} L={L} {block}"] = stepper(build_model(m, D, H, layers=L, block=block), x, y)
    best = best_ms(steps, repeats, rounds)
    print(f"{'network':28s} {'block':8s} {'ms':>9s} {'x nn.LSTM(L)':>13s}")
    for L in layers:
        ref = best[f"nn.LSTM L={L}"]
        print(f"{f'nn.LSTM L={L}':28s} {'':8s} {ref:9.2f} {1.0:13.2f}")
        for m in MODELS:
            for block in blocks[m]:
                ms = best[f"{m} L={L} {block}"]
                print(f"{f'{m} L={L}':28s} {block:8s} {ms:9.2f} {ms / ref:13.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="default,medium,long,stacks",
                    help="comma-separated: default, medium, long, stacks")
    ap.add_argument("--layers", default="2,4", help="comma-separated layer counts of the stacks table")
    ap.add_argument("--before", help="an earlier learnwin/models/bptt.py to time beside the current one")
    args = ap.parse_args()
    before = load_module(args.before) if args.before else None
    cfg = yaml.safe_load(open(args.config))
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")  # printed by the flag switch
    D = cfg["task"]["D"]
    sizes = args.sizes.split(",")
    if "default" in sizes:
        table(cfg["task"]["T"], D, cfg["model"]["hidden"], cfg["train"]["batch_size"], args.repeats, args.rounds,
              before)
    if "medium" in sizes:
        table(256, D, 128, 64, max(args.repeats // 5, 1), args.rounds, before)
    if "long" in sizes:
        table(1536, D, 64, 32, max(args.repeats // 10, 1), args.rounds, models=LINEAR)
    if "stacks" in sizes:
        stack_table(cfg["task"]["T"], D, cfg["model"]["hidden"], cfg["train"]["batch_size"],
                    [int(n) for n in args.layers.split(",")], max(args.repeats // 2, 1), args.rounds)


if __name__ == "__main__":
    main()
