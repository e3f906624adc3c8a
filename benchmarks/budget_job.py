"""One budget-protocol job at T 256 (docs/method.md §10b, §10d), three ways, in one run: today's
settings (thresholds 0.1, 0.2, 0.3: early stop at the 0.3 pair, the frontier under 0.1 after 2
lags; config/recovery-budget-T256.yaml's), §10d's (the decision threshold 0.2 alone: early stop at
its pair, the frontier under it after 1 lag) and §10d's with the lags in ensembles of 8 (the member
step on the CPU). Per way: CPU seconds (this process's), training steps, and whether the learned
verdicts at 0.2 equal today's: N̂_emp(l) of every lag both ran and H_emp(N) at every reported budget.

    python benchmarks/budget_job.py [--models const,lstm] [--n-max 16384] [--seed 99991] [--no-ensemble]

The job is the §10d run's but for N_max (smaller, to time it: the budgets 64 .. --n-max) and the
seed (one that no run uses): T 256, lags 4..128 step 4, the default size otherwise. One thread.
"""

import argparse
import time
from pathlib import Path

import numpy as np
import yaml

from learnwin.infra import runtime
from learnwin.recovery.budget_job import budget_trainings
from learnwin.stats.budget import learning_budget, window_by_budget

ROOT = Path(__file__).resolve().parents[1]
WAYS = {"today": dict(thresholds=[0.1, 0.2, 0.3], frontier_stop=2, ensemble=0),
        "§10d": dict(thresholds=[0.2], frontier_stop=1, ensemble=0),
        "§10d, ensembles of 8": dict(thresholds=[0.2], frontier_stop=1, ensemble=8)}


def verdicts(scores, budgets):
    """(N̂_emp per lag run, H_emp per budget) at threshold 0.2."""
    nhat = learning_budget(scores, [0.2], budgets)
    window = window_by_budget(nhat, budgets)
    return nhat[nhat["run"]].set_index("lag")["N_hat"], window.set_index("N")["H_emp"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="const,lstm")
    ap.add_argument("--n-max", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=99991)
    ap.add_argument("--no-ensemble", action="store_true")
    args = ap.parse_args()
    runtime.set_torch_threads(1)
    runtime.deterministic()
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    rec, batch = cfg["recovery"], cfg["train"]["batch_size"]
    budgets = [64 * 2**k for k in range(32) if 64 * 2**k <= args.n_max]
    common = dict(optimizer="adamw", seed=args.seed, lags=list(range(4, 129, 4)), budgets=budgets, batch_size=batch,
                  task=dict(T=256, D=cfg["task"]["D"], noise_std=cfg["task"]["noise_std"]),
                  model_config=cfg["model"], optim_config=cfg["optim"]["adamw"], train_config=cfg["train"],
                  gt={k: rec[k] for k in ("coef", "n_test", "n_perm", "null_quantile")})
    ways = {k: v for k, v in WAYS.items() if not (args.no_ensemble and v["ensemble"])}
    print(f"T 256, lags 4..128 step 4, budgets 64..{args.n_max}, seed {args.seed}, one thread")
    print("| model | way | CPU s | steps | lags run | CPU / today | N̂ at 0.2 as today | H_emp at 0.2 as today |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        base = None
        for way, kw in ways.items():
            t0 = time.process_time()
            scores = budget_trainings(model=model, **common, **kw)
            cpu = time.process_time() - t0
            task = scores[scores["target"] == "task"]
            steps = (budgets[-1] + task.groupby("lag")["N"].max().sum()) // batch
            nhat, window = verdicts(scores, budgets)
            if base is None:
                base = (cpu, nhat, window)
            both = nhat.index.intersection(base[1].index)
            same_nhat = bool(np.array_equal(nhat[both].to_numpy(), base[1][both].to_numpy()))
            same_h = bool(np.array_equal(window.to_numpy(), base[2].to_numpy()))
            print(f"| {model} | {way} | {cpu:.1f} | {steps} | {task['lag'].nunique()} | {cpu / base[0]:.2f} | "
                  f"{'yes' if same_nhat else 'NO'} ({both.size} lags) | {'yes' if same_h else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
