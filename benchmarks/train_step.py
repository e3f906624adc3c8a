"""ms per training step (forward + backward + AdamW step) of the cells and of torch.nn.LSTM/GRU.

Every model steps with the workflow's optimizer (learnwin.models.train.make_optimizer: multi-tensor AdamW).

Run: python benchmarks/train_step.py [--device cpu] [--config config/config.yaml] [--repeats 10] [--rounds 5]
                                     [--sizes ...] [--layers 2,4] [--models gru,lstm,const] [--before REV]
Sizes (``--sizes``, comma-separated): ``default``, the default experiment's (T, D, H, batch from the
config); ``medium`` (T 256, H 128, batch 64); ``replication``, the author's replication size (T 1024,
D 16, H 128, batch 512), each with every cell; ``long``, the paper's T = 1536 with H 64 and batch 32,
with the diagonal linear cells of docs/method.md §2b only (S6 with its default N = 16); and
``stacks`` (docs/method.md §2c) at the default size: L = 2 and 4 layers (``--layers``) of every cell,
in block ``stacked`` (layer i + 1 reads layer i's h, the shape of nn.LSTM(num_layers=L)) and in its
family's published block, as multiples of nn.LSTM(num_layers=L) in the same run (each layer's cell on
its own fast path over the whole sequence). Without ``--sizes``: default, medium, long and stacks on
the CPU (1 thread); default and replication on CUDA.

``--device`` (cpu or cuda) is where everything runs. Each gated cell runs three ways in the same
process: the training fast path (hand-written BPTT, learnwin.models.bptt; on CUDA without the fused
step: ``fast``), the fused step (learnwin.models.fused in its mode for the device, on the CPU the
compiled step functions: ``fused``) and, on the CPU, the step-by-step autograd reference path
(``reference=True``: ``ref``). The diagonal linear cells run their chunked parallel scan
(learnwin.models.scan) and reference. Before timing, each gated cell's fused step is checked against
its fast path at the size timed (loss and every gradient, max abs difference printed; 1e-5 in
float32, the run fails past it). Rows are printed as they are timed (the torch rows first, then each
cell's): within a row every implementation is timed once per round, interleaved, and the minimum over
rounds is printed (the machine is shared); on CUDA each timing ends with a synchronize. A path that
fails (a mode that cannot run on the device) prints ``error`` and its cause, and the table goes on;
where torch.compile fails the fused step falls back to its eager kernels (learnwin.models.fused), and
the row says so. The ratio to nn.LSTM is what we track. On CUDA each cell's row is followed by its peak
GPU memory (torch.cuda.max_memory_allocated over the row's paths, its fused graphs held).
Everything runs under the jobs' deterministic mode (learnwin.infra.runtime.deterministic).
After each cell's row, what the jobs run on the device (the fused column in the device's mode,
learnwin.models.fused.mode_for; bptt's fast path where none) is printed as a row of the GPU cost
table, ``gpu_cost step FAMILY T H BATCH MS_PER_STEP`` (read by ``python -m learnwin.infra.gpu_cost LOG``).

On CPU, nn.LSTM runs oneDNN's fused LSTM kernel (one call per layer, forward and backward); on CUDA,
cuDNN's, with TF32 off (``torch.backends.cudnn.rnn.fp32_precision = "ieee"``, the float32 the cells
compute in) as the baseline every ratio divides by, and torch's TF32 default beside it ("nn.LSTM TF32",
"nn.GRU TF32"). Each cell's CUDA graphs are released after its row (learnwin.models.fused.release). nn.GRU has no such kernel on CPU. The row "nn.LSTM no oneDNN" (CPU) or "nn.LSTM no cuDNN"
(CUDA) is the same module with that library switched off: torch's own step-by-step loop of ATen ops,
the kind of loop the cells run.

Before and after a change of the fast path, in one run: ``--before REV`` names a git revision whose
learnwin/models/bptt.py (on that revision's recurrence.py) is timed on the same cells (through their
``fast_forward``), interleaved with the others; the table gains its ms, the after / before ratio and
the run's noise, A/A: the before path timed twice in the same rounds, the second over the first; under
each table, the cells slower than before beyond the noise (after / before above 1 by more than the
table's largest A/A distance from 1).
"""

import argparse
import contextlib
import os
import subprocess
import sys
import time
import types
import warnings
from unittest import mock

import torch
import yaml

import learnwin.models
import learnwin.models.recurrence
from learnwin.infra import runtime
from learnwin.infra.registry import CELLS, MODELS
from learnwin.models import fused
from learnwin.models.cells import GatedCell, build_model
from learnwin.models.families import gate, gru, lstm
from learnwin.models.train import make_optimizer

REPLICATION = {"T": 1024, "D": 16, "H": 128, "B": 512}
"""The author's replication size (docs/performance.md, "Training step speed")."""

FUSED_TOLERANCE = 1e-5
"""Max abs difference of the fused step's loss and gradients from the fast path's (float32)."""


class TorchRNN(torch.nn.Module):
    def __init__(self, kind, D, H, layers=1):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(D, H, num_layers=layers, batch_first=True)
        self.out = torch.nn.Linear(H, 1)

    def forward(self, x):
        return self.out(self.rnn(x)[0]).squeeze(-1)


class Before(torch.nn.Module):
    """A cell's model whose training path runs the Functions of an earlier learnwin.models.bptt
    (``--before``): its generic ``Scan``, or, before there was one, its Function of the cell's family
    (:data:`FUNCTIONS`); the cells, their ``scan()`` inputs and the families stay the current ones."""

    FUNCTIONS = {gate.Gate: "GateScan", gru.GRU: "GRUScan", lstm.LSTM: "LSTMScan"}

    def __init__(self, model, before):
        super().__init__()
        self.model = model
        if hasattr(before, "Scan"):
            self.scan = before.Scan
        else:
            functions = {family: getattr(before, name) for family, name in self.FUNCTIONS.items()}
            self.scan = types.SimpleNamespace(apply=lambda family, x, *args: functions[family].apply(x, *args))

    def forward(self, x):
        with mock.patch.object(fused, "pick", lambda x: self.scan):
            return self.model(x)


def load_before(rev: str) -> types.ModuleType:
    """learnwin/models/bptt.py of the git revision ``rev``, run on that revision's
    learnwin/models/recurrence.py (the step math its Functions call) where it has one."""
    def module(path: str, name: str) -> types.ModuleType | None:
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
        if shown.returncode:
            return None
        out = types.ModuleType(name)
        sys.modules[name] = out  # NamedTuples look their module up
        exec(compile(shown.stdout, f"{rev}:{path}", "exec"), out.__dict__)
        return out

    rec = module("learnwin/models/recurrence.py", "recurrence_before") or learnwin.models.recurrence
    with mock.patch.dict(sys.modules, {"learnwin.models.recurrence": rec}), \
            mock.patch.object(learnwin.models, "recurrence", rec):
        before = module("learnwin/models/bptt.py", "bptt_before")
    if before is None:
        sys.exit(f"--before {rev}: git has no learnwin/models/bptt.py there")
    return before


@contextlib.contextmanager
def rnn_precision(value: str):
    """cuDNN's float32 RNN precision within the block (``torch.backends.cudnn.rnn.fp32_precision``):
    ``ieee`` (TF32 off, the baseline) or ``tf32`` (torch's default on CUDA)."""
    rnn = torch.backends.cudnn.rnn
    old, rnn.fp32_precision = rnn.fp32_precision, value
    try:
        yield
    finally:
        rnn.fp32_precision = old


def library_off(device):
    """The context that switches off nn.LSTM's fused kernel: oneDNN on the CPU, cuDNN on CUDA."""
    flags = torch.backends.cudnn.flags if device.type == "cuda" else torch.backends.mkldnn.flags
    return flags(enabled=False)


def stepper(model, x, y, context=contextlib.nullcontext, **kw):
    """One training step of ``model`` on (x, y) under ``context()`` (a fused mode, a library switch)."""
    opt = make_optimizer("adamw", model.parameters(), {"lr": 1e-3, "weight_decay": 1e-4})  # as training

    def step():
        with context():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x, **kw), y)
            loss.backward()
            opt.step()

    for _ in range(3):
        step()
    return step


def best_ms(steps, repeats, rounds, device, errors):
    """ms per step of each stepper, the minimum over ``rounds`` interleaved rounds (the machine is shared);
    a stepper that raises leaves the rounds, its error in ``errors``."""
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, step in steps.items():
            if name in errors:
                continue
            try:
                sync()
                t0 = time.perf_counter()
                for _ in range(repeats):
                    step()
                sync()
            except Exception as error:  # a mode that fails is a row's entry, not the end of the table
                errors[name] = error
                continue
            best[name] = min(best[name], 1e3 * (time.perf_counter() - t0) / repeats)
    return {name: ms for name, ms in best.items() if name not in errors}


FUSED_MODES = {"cuda": {"fused": fused.DEFAULT["cuda"], "graph only": fused.Mode(compile=False, graph=True)},
               "cpu": {"fused": fused.Mode(compile=True, graph=False)}}
"""The fused step's columns per device type: its mode there (the CPU: compiled steps, no graphs) and,
on CUDA, the CUDA graphs of uncompiled steps (what the compilation adds). Under ``LEARNWIN_FUSED=eager``
(learnwin.models.fused.ENV) every column's kernels run eager."""


def fused_difference(model, x, y, mode) -> float:
    """Max abs difference of the loss and every gradient (parameters and x) between the fused step
    in ``mode`` and the fast path (learnwin.models.bptt)."""
    out = []
    for m in (mode, None):
        with fused.use(m):
            model.zero_grad(set_to_none=True)
            xr = x.clone().requires_grad_()
            loss = torch.nn.functional.mse_loss(model(xr), y)
            loss.backward()
        out.append([loss.detach(), xr.grad, *(p.grad for p in model.parameters())])
    model.zero_grad(set_to_none=True)
    return max((a - b).abs().max().item() for a, b in zip(*out))


LINEAR = [m for m in MODELS if not issubclass(CELLS[m].load(), GatedCell)]
GATED = [m for m in MODELS if m not in LINEAR]


def table(T, D, H, B, repeats, rounds, device, before=None, models=MODELS):
    """ms per step, each row printed as it is timed: the torch rows, then per cell its paths, the
    minimum over ``rounds`` rounds interleaved within the row (the machine is shared). A path that
    fails (building, checking or timing) prints ``error`` and its cause. Returns the largest
    difference of a fused step from its fast path."""
    torch.manual_seed(0)
    x, y = torch.randn(B, T, D, device=device), torch.randn(B, T, device=device)
    threads = f"{torch.get_num_threads()} thread" if device.type == "cpu" else torch.cuda.get_device_name(device)
    print(f"\nT={T} D={D} H={H} batch={B}, {device.type}, {threads}, torch {torch.__version__}, "
          f"min over {rounds} rounds of {repeats} steps", flush=True)
    print(f"gpu_cost device {threads if device.type == 'cuda' else 'CPU, ' + threads}", flush=True)
    lstm = TorchRNN("LSTM", D, H).to(device)
    off = "nn.LSTM no cuDNN" if device.type == "cuda" else "nn.LSTM no oneDNN"
    modes, ref, worst, ratios = FUSED_MODES[device.type], device.type == "cpu", 0.0, {}
    if os.environ.get(fused.ENV) == "eager":  # the switch's no compilation, in every fused column
        modes = {col: mode._replace(compile=False) for col, mode in modes.items()}
    jobs = next((f" {col}" for col, mode in modes.items() if mode == fused.mode_for(device)), "")  # the jobs' path
    cols = [("fast ms", "")] + [(f"{c} ms", f" {c}") for c in modes] + ([("ref ms", " ref")] if ref else [])
    width = [max(9, len(c)) for c, _ in cols]
    errors = {}
    gru, ieee = TorchRNN("GRU", D, H).to(device), lambda: rnn_precision("ieee")
    torch_rows = {"nn.LSTM": stepper(lstm, x, y, ieee), off: stepper(lstm, x, y, lambda: library_off(device)),
                  "nn.GRU": stepper(gru, x, y, ieee)}
    if device.type == "cuda":  # cuDNN's TF32 default beside the baseline
        torch_rows.update({"nn.LSTM TF32": stepper(lstm, x, y, lambda: rnn_precision("tf32")),
                           "nn.GRU TF32": stepper(gru, x, y, lambda: rnn_precision("tf32"))})
    best = best_ms(torch_rows, repeats, rounds, device, errors)
    base = best["nn.LSTM"]
    extra = f" {'before ms':>10s} {'after/before':>13s} {'A/A':>6s}" if before is not None else ""
    print(f"{'cell':17s}" + "".join(f" {c:>{w}s} {'x nn.LSTM':>10s}" for (c, _), w in zip(cols, width)) + extra)
    for name in torch_rows:
        print(f"{name:17s} {best[name]:9.2f} {best[name] / base:10.2f}", flush=True)
    for m in models:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        model, steps = build_model(m, D, H).to(device), {}
        failed = fused.fallback()
        steps[m] = stepper(model, x, y, lambda: fused.use(None))
        for col, mode in modes.items() if m in GATED else ():
            try:
                diff = fused_difference(model, x, y, mode)
                steps[f"{m} {col}"] = stepper(model, x, y, lambda mode=mode: fused.use(mode))
            except Exception as error:  # the row goes on without this path
                errors[f"{m} {col}"] = error
                continue
            worst = max(worst, diff)
            print(f"{m}: {col} {mode} - fast path, max abs difference {diff:.2e}", flush=True)
        if ref:
            steps[m + " ref"] = stepper(model, x, y, reference=True)
        if before is not None and m in GATED:  # the before path twice: their ratio (A/A) is the run's noise
            for name in (" before", " before again"):
                steps[m + name] = stepper(Before(model, before), x, y, lambda: fused.use(None))
        best.update(best_ms(steps, repeats, rounds, device, errors))
        row = ""
        for (_, suffix), w in zip(cols, width):
            ms = best.get(m + suffix)
            cell = "error" if m + suffix in errors else "-" if ms is None else None
            row += f" {cell:>{w}s} {'-':>10s}" if cell else f" {ms:{w}.2f} {ms / base:10.2f}"
        if before is not None and m in GATED:
            ratios[m] = (best[m] / best[m + " before"], best[m + " before again"] / best[m + " before"])
            row += f" {best[m + ' before']:10.2f} {ratios[m][0]:13.2f} {ratios[m][1]:6.2f}"
        print(f"{m:17s}{row}", flush=True)
        ms = best.get(m + (jobs if m in GATED else ""))
        if ms is not None:  # what the jobs run on the device: a row of the GPU cost table
            print(f"gpu_cost step {m} {T} {H} {B} {ms:.3f}", flush=True)
        for name in [n for n in errors if n.startswith(m + " ") or n == m]:
            print(f"  {name}: error: {fused.cause(errors[name])}", flush=True)
        if fused.fallback() != failed:
            print(f"  torch.compile failed ({fused.fallback()}): from here on the fused columns time the eager "
                  "kernels", flush=True)
        if device.type == "cuda":  # every path of the row, the graphs of its fused columns held
            print(f"  {m}: peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB", flush=True)
        fused.release()  # this cell's graphs: the next cell's may need their memory
    if ratios:  # the run's stated noise: the largest A/A distance from 1 of this table
        noise = max(abs(aa - 1) for _, aa in ratios.values())
        slower = [m for m, (ab, _) in ratios.items() if ab > 1 + noise]
        print(f"noise (largest |A/A - 1|): {noise:.2f}; slower than before beyond it: {', '.join(slower) or 'none'}",
              flush=True)
    return worst


def stack_table(T, D, H, B, layers, repeats, rounds, device):
    """ms per step of L-layer stacks against nn.LSTM(num_layers=L), minimum over interleaved rounds."""
    torch.manual_seed(0)
    x, y = torch.randn(B, T, D, device=device), torch.randn(B, T, device=device)
    print(f"\nstacks: T={T} D={D} H={H} batch={B}, {device.type}, torch {torch.__version__}, "
          f"min over {rounds} rounds of {repeats} steps")
    blocks = {m: list(dict.fromkeys(["stacked", CELLS[m].block])) for m in MODELS}  # published: the second
    steps = {}
    for L in layers:
        steps[f"nn.LSTM L={L}"] = stepper(TorchRNN("LSTM", D, H, L).to(device), x, y)
        for m in MODELS:
            for block in blocks[m]:
                model = build_model(m, D, H, layers=L, block=block).to(device)
                steps[f"{m} L={L} {block}"] = stepper(model, x, y)
    best = best_ms(steps, repeats, rounds, device, {})
    print(f"{'network':28s} {'block':8s} {'ms':>9s} {'x nn.LSTM(L)':>13s}")
    for L in layers:
        ref = best[f"nn.LSTM L={L}"]
        print(f"{f'nn.LSTM L={L}':28s} {'':8s} {ref:9.2f} {1.0:13.2f}")
        for m in MODELS:
            for block in blocks[m]:
                ms = best[f"{m} L={L} {block}"]
                print(f"{f'{m} L={L}':28s} {block:8s} {ms:9.2f} {ms / ref:13.2f}")


SIZES = {"cpu": "default,medium,long,stacks", "cuda": "default,replication"}
"""The sizes timed without ``--sizes``, per device type."""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=sorted(SIZES), help="where the models run")
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", help="comma-separated, timed in that order: default, medium, replication, long, "
                                    f"stacks (without it: {SIZES})")
    ap.add_argument("--layers", default="2,4", help="comma-separated layer counts of the stacks table")
    ap.add_argument("--models", help="comma-separated cells of the default, medium and replication tables "
                                     "(default: every cell, the gated ones at the replication size)")
    ap.add_argument("--before", help="a git revision whose learnwin/models/bptt.py is timed beside the current one")
    args = ap.parse_args()
    runtime.deterministic()  # as the jobs run, before CUDA starts
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    before = load_before(args.before) if args.before else None
    cfg = yaml.safe_load(open(args.config))
    if device.type == "cpu":
        torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")  # printed by the flag switch
    D, r = cfg["task"]["D"], REPLICATION
    asked = args.models.split(",") if args.models else None
    unknown = [m for m in asked or () if m not in MODELS]
    if unknown:
        sys.exit(f"--models: unknown {unknown}; known: {', '.join(MODELS)}")
    tables = {  # each size's table (returning the largest fused difference), timed in the order asked
        "default": lambda: table(cfg["task"]["T"], D, cfg["model"]["hidden"], cfg["train"]["batch_size"],
                                 args.repeats, args.rounds, device, before, asked or MODELS),
        "medium": lambda: table(256, D, 128, 64, max(args.repeats // 5, 1), args.rounds, device, before,
                                asked or MODELS),
        # the gated cells only (the diagonal linear cells: size long)
        "replication": lambda: table(r["T"], r["D"], r["H"], r["B"], args.repeats if device.type == "cuda" else
                                     max(args.repeats // 10, 1), args.rounds, device, before, asked or GATED),
        "long": lambda: table(1536, D, 64, 32, max(args.repeats // 10, 1), args.rounds, device, models=LINEAR),
        "stacks": lambda: stack_table(cfg["task"]["T"], D, cfg["model"]["hidden"], cfg["train"]["batch_size"],
                                      [int(n) for n in args.layers.split(",")], max(args.repeats // 2, 1),
                                      args.rounds, device) or 0,
    }
    sizes = (args.sizes or SIZES[device.type]).split(",")
    unknown = [s for s in sizes if s not in tables]
    if unknown:
        sys.exit(f"--sizes: unknown {unknown}; known: {', '.join(tables)}")
    worst = max(tables[s]() for s in sizes)
    if worst > FUSED_TOLERANCE:
        sys.exit(f"the fused step differs from the fast path by {worst:.2e} > {FUSED_TOLERANCE:g}")


if __name__ == "__main__":
    main()
