"""Snapshot cost of the two transports (docs/method.md §4 diagonal, §4b exact) and of the memory curve.

Run: python benchmarks/transport.py [--config config/config.yaml] [--models const shared diag gru lstm]

Size from the config (T, D, H, n_diag, lag grid, windows, snapshot batch, K, exact_sequences,
memory_sequences), 1 thread, untrained models on the seed-2 diag split. Times the snapshot probe
with psi for ``transport: diagonal``, ``exact`` (closed-form Jacobians, psi, S and the signal
envelope on every sequence, the secondary functionals on ``exact_sequences``) and both in one
probe (the default: one shared forward and tangent pass), then the memory curve on
``memory_sequences``. Prints seconds and the exact / diagonal ratio per cell.
"""

import argparse
import time

import torch
import yaml

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.models.data import make_split, task_vector
from learnwin.probing.detect import random_directions
from learnwin.probing.memory import MemoryAccumulator, input_sensitivity
from learnwin.probing.snapshot import probe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--models", nargs="+", default=["const", "shared", "diag", "gru", "lstm"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = yaml.safe_load(open(args.config))
    task, snap, H = cfg["task"], cfg["snapshot"], cfg["model"]["hidden"]
    x_np, y_np = make_split(2, "diag", task["n_diag"], task["T"], task["D"], task["lags"],
                            task["coefs"], task["noise_std"])
    x_all, y_all = torch.from_numpy(x_np), torch.from_numpy(y_np)
    lags, bs = lag_grid(snap), snap["batch_size"]
    print(f"T {task['T']}, H {H}, n_diag {task['n_diag']}, {len(lags)} lags, windows {snap['windows']}, "
          f"K {snap['directions']}, exact_sequences {snap['exact_sequences']}, 1 thread")
    for name in args.models:
        torch.manual_seed(0)
        model = build_model(name, task["D"], H)
        dirs = {n.removeprefix("cell."): d for n, d in random_directions(model, snap["directions"], 2).items()
                if n.startswith("cell.")}
        w_out = model.W_out.detach()

        def batches(model=model):
            for i in range(0, x_all.shape[0], bs):
                x = x_all[i:i + bs]
                with torch.no_grad():
                    yield x, y_all[i:i + bs], model(x)

        common = dict(lr=0.005, windows=snap["windows"], directions=dirs,
                      exact_sequences=snap["exact_sequences"])
        probe(model.cell, w_out, batches(), lags, transport=["diagonal", "exact"], **common)  # warm-up
        seconds = {}
        for transport in ("diagonal", "exact", ("diagonal", "exact")):
            t0 = time.perf_counter()
            probe(model.cell, w_out, batches(), lags, transport=transport, **common)
            seconds[transport] = time.perf_counter() - t0
        t4 = time.perf_counter()
        u = torch.from_numpy(task_vector(2, task["D"]))
        acc = MemoryAccumulator(lags, task["T"])
        n_mem = snap["memory_sequences"]
        for i in range(0, n_mem, bs):
            acc.add(input_sensitivity(model, x_all[i:min(i + bs, n_mem)], u))
        t5 = time.perf_counter()
        diagonal, exact, both = seconds["diagonal"], seconds["exact"], seconds[("diagonal", "exact")]
        print(f"{name}: diagonal {diagonal:.2f} s; exact {exact:.2f} s; exact / diagonal = "
              f"{exact / diagonal:.2f}x; both in one probe {both:.2f} s; memory curve ({n_mem} "
              f"sequences) {t5 - t4:.2f} s")


if __name__ == "__main__":
    main()
