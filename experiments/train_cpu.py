"""Training CPU seconds of two runs, per model, from their benchmark TSVs (before and after a change).

Run: python experiments/train_cpu.py BEFORE_RESULTS AFTER_RESULTS
where each is the results folder of `snakemake --cores 2 train` (or of a whole run) of the same
config, from two commits. Prints CPU s per train_model job (mean over the optimizers and
seeds), the sum over all jobs, and after / before.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from cost_law import cpu_times

from learnwin.cells import MODELS


def per_model(results: Path) -> pd.Series:
    """Mean CPU s per train_model job of each model (the job path is optimizer/model/seed)."""
    times = cpu_times(results, "train_model")
    if not times:
        raise SystemExit(f"{results}: no train_model benchmark TSVs")
    frame = pd.DataFrame([{"model": rel.parts[1], "cpu": cpu} for rel, cpu in times.items()])
    means = frame.groupby("model")["cpu"].mean().reindex([m for m in MODELS if m in set(frame["model"])])
    means["all jobs (sum)"] = frame["cpu"].sum()
    return means


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args()
    before, after = per_model(args.before), per_model(args.after)
    print("| model | before CPU s | after CPU s | after / before |")
    print("|---|---|---|---|")
    for name in before.index:
        print(f"| {name} | {before[name]:.1f} | {after[name]:.1f} | {after[name] / before[name]:.2f} |")


if __name__ == "__main__":
    main()
