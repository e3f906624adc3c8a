"""Snapshot cost of the two transports (docs/method.md §4 diagonal, §4b exact) and of the memory curve.

Run: python benchmarks/transport.py [--config config/config.yaml] [--models const shared diag gru lstm]
                                   [--rounds 3] [--before REV] [--layers 1] [--block plain] [--sequences N]

Size from the config (T, D, H, n_diag, lag grid, times_per_lag, snapshot batch, K, exact_sequences,
memory_sequences), 1 thread, untrained models on the seed-2 diag split. Times the snapshot probe
with psi for ``transport: diagonal``, ``exact`` (closed-form Jacobians, psi, S and the signal
envelope on every sequence, the secondary functionals on ``exact_sequences``) and both in one
probe (the default: one shared forward and tangent pass), then the memory curve on
``memory_sequences``. The machine is shared: every variant is timed once per round, interleaved,
and the minimum over ``--rounds`` rounds is printed, with the exact / diagonal ratio per cell.
``--layers`` and ``--block`` time stacks instead (docs/method.md §2c: autograd one-step Jacobians
of the whole stack); ``--sequences`` takes the first N diag sequences only.

Before and after a change of the exact path, in one run: ``--before REV`` names an earlier
commit; its learnwin/probing/exact_transport.py and learnwin/models/cells.py (``git show``) are
imported beside the current ones and its exact snapshot is timed in the same rounds, on a copy
of the same model; the table gains its seconds, its ratio to the diagonal and the largest
difference of the current exact tables from its (relative to each column's scale, in the model's
float32).
"""

import argparse
import importlib.util
import inspect
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch
import yaml

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.probing import snapshot
from learnwin.probing.detect import random_directions
from learnwin.probing.memory import MemoryAccumulator, input_sensitivity
from learnwin.probing.snapshot import probe
from learnwin.tasks.synthetic import make_split, task_vector


def load_before(rev: str):
    """(cells, exact_transport) modules of commit ``rev``."""
    mods = []
    tmp = Path(tempfile.mkdtemp())
    for name, path in (("cells", "learnwin/models/cells.py"), ("exact_transport", "learnwin/probing/exact_transport.py")):
        file = tmp / f"{name}_before.py"
        file.write_text(subprocess.run(["git", "show", f"{rev}:{path}"], check=True, capture_output=True,
                                       text=True).stdout)
        spec = importlib.util.spec_from_file_location(f"{name}_before", file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        mods.append(module)
    return tuple(mods)


def table_difference(tables, reference) -> float:
    """max over the float columns of the probe's tables of max |a - b| / max |b| (relative to the column's scale)."""
    worst = 0.0
    for a, b in zip(tables, reference):
        for col in a.columns:
            if a[col].dtype.kind == "f":
                x, y = a[col].to_numpy(), b[col].to_numpy()
                ok = np.isfinite(y)
                worst = max(worst, float(np.abs(x[ok] - y[ok]).max(initial=0) / max(np.abs(y[ok]).max(initial=0), 1e-300)))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--models", nargs="+", default=["const", "shared", "diag", "gru", "lstm"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="an earlier commit whose exact snapshot is timed beside the current one")
    parser.add_argument("--layers", type=int, default=1, help="layers of each network (docs/method.md §2c)")
    parser.add_argument("--block", default="plain", help="the block of the layers, or published")
    parser.add_argument("--sequences", type=int, help="the first N diag sequences (default: n_diag)")
    args = parser.parse_args()
    before = load_before(args.before) if args.before else None
    torch.set_num_threads(1)
    cfg = yaml.safe_load(open(args.config))
    task, snap, H = cfg["task"], cfg["snapshot"], cfg["model"]["hidden"]
    x_np, y_np = make_split(2, "diag", task["n_diag"], task["T"], task["D"], task["lags"],
                            task["coefs"], task["noise_std"])
    x_all, y_all = torch.from_numpy(x_np)[:args.sequences], torch.from_numpy(y_np)[:args.sequences]
    lags, bs = lag_grid(snap), snap["batch_size"]
    print(f"T {task['T']}, H {H}, layers {args.layers} ({args.block}), {x_all.shape[0]} sequences, {len(lags)} lags, times_per_lag {snap['times_per_lag']}, "
          f"K {snap['directions']}, exact_sequences {snap['exact_sequences']}, 1 thread, "
          f"min over {args.rounds} interleaved rounds")
    for name in args.models:
        torch.manual_seed(0)
        model = build_model(name, task["D"], H, layers=args.layers, block=args.block)
        dirs = {n.removeprefix("cell."): d for n, d in random_directions(model, snap["directions"], 2).items()
                if n.startswith("cell.")}
        w_out = model.W_out.detach()

        def batches(model=model):
            for i in range(0, x_all.shape[0], bs):
                x = x_all[i:i + bs]
                with torch.no_grad():
                    yield x, y_all[i:i + bs], model(x)

        common = dict(lr=0.005, times_per_lag=snap["times_per_lag"], directions=dirs,
                      exact_sequences=snap["exact_sequences"])
        variants = {t: (lambda t=t, cell=model.cell, w_out=w_out, common=common:
                        probe(cell, w_out, batches(), lags, transport=t, **common))
                    for t in ("diagonal", "exact", ("diagonal", "exact"))}
        if before is not None:
            cells_before, exact_before = before
            stack = {} if (args.layers, args.block) == (1, "plain") else dict(layers=args.layers, block=args.block)
            old = cells_before.build_model(name, task["D"], H, **stack)
            old.load_state_dict(model.state_dict())

            def add_batch_before(*args, exact_before=exact_before):
                """REV's add_batch, given only the leading arguments it takes (the trace's R_t came later)."""
                return exact_before.add_batch(*args[:len(inspect.signature(exact_before.add_batch).parameters)])

            def run_before(old=old, exact_before=exact_before, w_out=w_out, common=common, add=add_batch_before):
                with mock.patch.object(snapshot, "add_batch", add), \
                        mock.patch.object(snapshot, "ExactAccumulator", exact_before.ExactAccumulator):
                    return probe(old.cell, w_out, batches(), lags, transport="exact", **common)

            variants["before"] = run_before
        outputs = {key: run() for key, run in variants.items()}  # warm-up
        seconds = dict.fromkeys(variants, float("inf"))
        for _ in range(args.rounds):
            for key, run in variants.items():
                t0 = time.perf_counter()
                run()
                seconds[key] = min(seconds[key], time.perf_counter() - t0)
        t4 = time.perf_counter()
        u = torch.from_numpy(task_vector(2, task["D"]))
        acc = MemoryAccumulator(lags, task["T"])
        n_mem = snap["memory_sequences"]
        for i in range(0, n_mem, bs):
            acc.add(input_sensitivity(model, x_all[i:min(i + bs, n_mem)], u))
        t5 = time.perf_counter()
        diagonal, exact, both = seconds["diagonal"], seconds["exact"], seconds[("diagonal", "exact")]
        extra = (f"; before ({args.before}) exact {seconds['before']:.2f} s, exact / diagonal = "
                 f"{seconds['before'] / diagonal:.2f}x, tables differ by {table_difference(outputs['exact'], outputs['before']):.1e}"
                 if before is not None else "")
        print(f"{name}: diagonal {diagonal:.2f} s; exact {exact:.2f} s; exact / diagonal = "
              f"{exact / diagonal:.2f}x; both in one probe {both:.2f} s; memory curve ({n_mem} "
              f"sequences) {t5 - t4:.2f} s{extra}", flush=True)


if __name__ == "__main__":
    main()
