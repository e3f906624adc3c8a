"""Cost of the ground truth of the window (`snakemake recovery`) from the training cost law: the
budget protocol (docs/method.md §10b) or the dataset protocol's grid (§10), as the config's
recovery.protocol says.

    python experiments/recovery_cost.py CONFIG[,OVERLAY...] [CONFIG[,OVERLAY...] ...] [--cores 2] [--measure]

Each argument is a config file (comma-separated overlays read on top of it, in order, one level
deep, as repeated `--configfile` does), itself read on top of config/config.yaml. The budget
protocol: per seed set (exploration, confirm) its jobs and their worst-case CPU time (every lag
trained to N_max; early stop and the frontier make a run cheaper), and the same-network snapshots.
The dataset protocol: per arm (main,
full_grid, double_steps) it prints the jobs, an upper bound on their trainings
(learnwin.infra.resources.recovery_trainings: per N one control and, per threshold, the
bisection's midpoints after the two shared ends) and their CPU time by the training cost law
(learnwin.infra.resources.recovery_cpu_seconds: one start-up per job, then the trainings), and
the total as CPU hours and as wall minutes on ``--cores`` cores (CPU / cores: every job is one
thread). The row ``snapshots`` is rule snapshot_recovery (one training and two snapshots per
main-arm job, learnwin.infra.resources.recovery_snapshot_cpu_seconds). ``--measure`` also trains
one network per model at the first config's size (recovery.steps steps on its largest N) and
prints the measured CPU seconds against the law's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from learnwin.infra import config as lwconfig
from learnwin.infra import resources

ROOT = Path(__file__).resolve().parents[1]


def load(spec: str) -> dict:
    """config/config.yaml, then each comma-separated file on top, one level deep."""
    return lwconfig.load(ROOT, *spec.split(","))


def grid_cost(cfg: dict) -> list[dict]:
    rows = []
    models = cfg["recovery"]["models"] or cfg["models"]
    for arm, spec in resources.recovery_arms(cfg).items():
        seeds, n_train, steps = spec["seeds"], spec["n_train"], spec["steps"]
        n = resources.recovery_trainings(cfg, len(n_train), full_grid=arm == "full_grid")
        cpu = sum(resources.recovery_cpu_seconds(cfg, m, n, steps) for m in models) * len(seeds)
        rows.append(dict(arm=arm, jobs=len(models) * len(seeds), trainings=n * len(models) * len(seeds),
                         cpu_s=cpu))
    seeds = resources.recovery_arms(cfg)["main"]["seeds"]
    rows.append(dict(arm="snapshots", jobs=len(models) * len(seeds), trainings=len(models) * len(seeds),
                     cpu_s=sum(resources.recovery_snapshot_cpu_seconds(cfg, m) for m in models) * len(seeds)))
    return rows


def budget_cost(cfg: dict) -> list[dict]:
    """The budget protocol (docs/method.md §10b) per seed set, at worst (every grid lag and the
    control trained to N_max: learnwin.infra.resources.budget_cpu_seconds), and its same-network
    snapshots (the first lag to N_max at worst and two snapshots)."""
    rec, rows = cfg["recovery"], []
    models = rec["models"] or cfg["models"]
    lags = len(resources.recovery_lags(cfg))
    steps = rec["budgets"][-1] // cfg["train"]["batch_size"]
    for seed_set, seeds in (("exploration", rec["seeds"] or cfg["seeds"]), ("confirm", rec["confirm_seeds"])):
        jobs = len(models) * len(seeds)
        rows.append(dict(arm=f"budget {seed_set}", jobs=jobs, trainings=(1 + lags) * jobs,
                         cpu_s=sum(resources.budget_cpu_seconds(cfg, m) for m in models) * len(seeds)))
        rows.append(dict(arm=f"snapshots {seed_set}", jobs=jobs, trainings=jobs,
                         cpu_s=sum(resources.recovery_snapshot_cpu_seconds(cfg, m, steps) for m in models) * len(seeds)))
    return rows


def measure(cfg: dict) -> None:
    """One training per model at the config's size, CPU seconds against the cost law's."""
    import torch

    from learnwin.infra import runtime
    from learnwin.recovery.groundtruth_job import train
    from learnwin.tasks.synthetic import make_split

    runtime.set_torch_threads(1)
    runtime.deterministic()
    t, rec = cfg["task"], cfg["recovery"]
    x, y = make_split(2, "train", rec["n_train"][-1], t["T"], t["D"], [t["T"] // 4], [rec["coef"]], t["noise_std"])
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    print(f"one training: {rec['steps']} steps, T {t['T']}, H {cfg['model']['hidden']}, "
          f"B {cfg['train']['batch_size']}")
    for model in rec["models"] or cfg["models"]:
        c0 = time.process_time()
        train(model, rec["optimizer"], x, y, init=1, steps=rec["steps"], model_config=cfg["model"],
              optim_config=cfg["optim"][rec["optimizer"]],
              train_config={k: cfg["train"][k] for k in ("batch_size", "grad_clip")}, run_name=model)
        cpu = time.process_time() - c0
        law = resources.recovery_cpu_seconds(cfg, model, 1, rec["steps"]) - resources.COEF["train_model"][0]
        print(f"  {model:7s} measured {cpu:6.2f} CPU s, cost law {law:6.2f} s, ratio {cpu / law:.2f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--measure", action="store_true")
    args = ap.parse_args(argv)
    for spec in args.configs:
        cfg = load(spec)
        rows = budget_cost(cfg) if cfg["recovery"]["protocol"] == "budget" else grid_cost(cfg)
        total = sum(r["cpu_s"] for r in rows)
        print(f"## {spec}")
        for r in rows:
            print(f"  {r['arm']:21s} jobs {r['jobs']:4d}  trainings <= {r['trainings']:6d}  "
                  f"CPU {r['cpu_s'] / 3600:7.2f} h")
        print(f"  total CPU {total / 3600:.2f} h; wall on {args.cores} cores {total / args.cores / 60:.1f} min")
    if args.measure:
        measure(load(args.configs[0]))


if __name__ == "__main__":
    main()
