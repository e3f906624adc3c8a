"""Cost of the Lyapunov spectrum of the exact transport (docs/method.md §4c) against the diagonal snapshot.

Run: python benchmarks/lyapunov.py [--config config/config.yaml] [--models const shared diag gru lstm]

Size from the config (T, D, H, n_diag, lag grid, times_per_lag, snapshot batch, K, exact_sequences),
1 thread, untrained models (the config's model section) on the seed-2 diag split. Times, per
cell: the one-step Jacobians of the first ``exact_sequences`` sequences (closed form, as the
snapshot job computes them), the batched QR sweep over them, and the diagonal probe with psi on
every diag sequence (the snapshot job of ``transport: diagonal``); prints seconds and the
Lyapunov / diagonal-snapshot ratio.
"""

import argparse
import time

import torch
import yaml

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.probing.detect import random_directions
from learnwin.probing.exact_transport import jacobians
from learnwin.probing.lyapunov import qr_exponents
from learnwin.probing.snapshot import probe
from learnwin.tasks.synthetic import make_split


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--models", nargs="+", default=["const", "shared", "diag", "gru", "lstm"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = yaml.safe_load(open(args.config))
    task, snap, model_cfg = cfg["task"], cfg["snapshot"], cfg["model"]
    x_np, y_np = make_split(2, "diag", task["n_diag"], task["T"], task["D"], task["lags"],
                            task["coefs"], task["noise_std"])
    x_all, y_all = torch.from_numpy(x_np), torch.from_numpy(y_np)
    lags, bs, n_seq = lag_grid(snap), snap["batch_size"], snap["exact_sequences"]
    print(f"T {task['T']}, H {model_cfg['hidden']}, n_diag {task['n_diag']}, exact_sequences {n_seq}, "
          f"gate_init {model_cfg['gate_init']}, 1 thread")
    for name in args.models:
        torch.manual_seed(0)
        model = build_model(name, task["D"], **model_cfg)
        dirs = {n.removeprefix("cell."): d for n, d in random_directions(model, snap["directions"], 2).items()
                if n.startswith("cell.")}

        def batches(model=model):
            for i in range(0, x_all.shape[0], bs):
                x = x_all[i:i + bs]
                with torch.no_grad():
                    yield x, y_all[i:i + bs], model(x)

        common = dict(lr=0.005, times_per_lag=snap["times_per_lag"], directions=dirs)
        probe(model.cell, model.W_out.detach(), batches(), lags, **common)  # warm-up (vmap, jvp)
        t0 = time.perf_counter()
        probe(model.cell, model.W_out.detach(), batches(), lags, **common)
        t1 = time.perf_counter()
        jac = []
        for i in range(0, n_seq, bs):
            x = x_all[i:min(i + bs, n_seq)]
            with torch.no_grad():
                jac.append(jacobians(model.cell, x, model.cell.full_state(*model.cell(x))))
        t2 = time.perf_counter()
        lam = [qr_exponents(J[:, k] for k in range(1, J.shape[1])) for J in jac]
        t3 = time.perf_counter()
        diagonal, lyap = t1 - t0, t3 - t1
        print(f"{name}: {lam[0].shape[-1]} modes; Jacobians {t2 - t1:.3f} s + QR sweep {t3 - t2:.3f} s "
              f"= {lyap:.3f} s; diagonal snapshot {diagonal:.2f} s; Lyapunov / diagonal = {lyap / diagonal:.2f}x")


if __name__ == "__main__":
    main()
