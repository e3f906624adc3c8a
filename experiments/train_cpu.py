"""Training CPU seconds of two runs, per model, from their benchmark TSVs (before and after a change).

Run: python experiments/train_cpu.py BEFORE_RESULTS AFTER_RESULTS
where each is the results folder of `snakemake --cores 2 train` (or of a whole run) of the same
config, from two commits. Prints CPU s per train_model job (mean over the optimizers and
seeds), the sum over all jobs, after / before, and how many final checkpoints of the two runs
hold bit-identical weights (a speed change should leave every one identical).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from cost_law import cpu_times

from learnwin.infra import layout
from learnwin.infra.registry import MODELS


def per_model(results: Path) -> pd.Series:
    """Mean CPU s per train_model job of each model (the job path is optimizer/model/seed)."""
    times = cpu_times(results, "train_model")
    if not times:
        raise SystemExit(f"{results}: no train_model benchmark TSVs")
    frame = pd.DataFrame([{"model": rel.parts[1], "cpu": cpu} for rel, cpu in times.items()])
    means = frame.groupby("model")["cpu"].mean().reindex([m for m in MODELS if m in set(frame["model"])])
    means["all jobs (sum)"] = frame["cpu"].sum()
    return means


def identical_checkpoints(before: Path, after: Path) -> tuple[int, int]:
    """(identical, compared): final.pt files present in both runs with equal model weights."""
    same = total = 0
    for path in layout.glob(before, layout.RUN + "/final.pt"):
        other = after / path.relative_to(before)
        if not other.exists():
            continue
        a, b = (torch.load(p, map_location="cpu", weights_only=True)["model"] for p in (path, other))
        total += 1
        same += a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return same, total


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
    same, total = identical_checkpoints(args.before, args.after)
    print(f"\nfinal checkpoints with bit-identical weights: {same} of {total}")


if __name__ == "__main__":
    main()
