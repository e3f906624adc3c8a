"""The scale ladder: each claim's verdict per rung, and what each rung cost.

    python experiments/ladder.py NAME=RESULTS_DIR [NAME=RESULTS_DIR ...]

One column per rung (a finished run's results folder). Rows: the claim checks of the rung's
claims.parquet (the claims rule, docs/method.md §8b), per claim and noise definition, as "k/n" verdict rows that hold with the
rows that hold (model, optimizer); then the rung's cost: the wall time from the first to the last
file the run wrote (modification times, so a run extended later reads longer), the number of
jobs, and the mean CPU seconds per job of training and of snapshots (Snakemake benchmark TSVs,
including an older run's separate memory-curve jobs in the snapshot cost).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from cost_law import cpu_times

from learnwin.infra import io, layout
from learnwin.stats.claims import NOISE_ANY, markdown, number


def verdict_cells(results: Path) -> dict[str, str]:
    """"k/n: rows that hold" per claim (and noise definition where it applies), from the rung's
    claims.parquet."""
    table = io.read_table(layout.under(results, layout.CLAIMS["parquet"]), "claims")
    out = {}
    for (claim, check, noise), g in table.groupby(["claim", "check", "noise"], sort=True):
        held = [f"{r.model} {r.optimizer}" for r in g.itertuples() if r.holds]
        key = f"{claim}: {check}" + ("" if noise == NOISE_ANY else f" ({noise})")
        out[key] = f"{len(held)}/{len(g)}" + (f": {', '.join(held)}" if held else "")
    return out


def cost_cells(results: Path) -> dict[str, str]:
    """Wall time, job count and CPU seconds per training and snapshot job of one rung."""
    mtimes = [p.stat().st_mtime for p in Path(results).rglob("*") if p.is_file()]

    def mean(rule):
        values = list(cpu_times(results, rule).values())
        return number(sum(values) / len(values), 1) if values else "–"

    minutes, seconds = divmod(round(max(mtimes) - min(mtimes)), 60)
    return {"wall time (first to last file)": f"{minutes} min {seconds} s",
            "jobs": str(sum(1 for _ in layout.under(results, layout.BENCH).rglob("*.tsv"))),
            "CPU s per train job": mean("train_model"),
            "CPU s per snapshot job": mean("take_snapshot")}


def ladder(rungs: dict[str, Path]) -> pd.DataFrame:
    """One row per claim check and cost figure, one column per rung."""
    columns = {name: {**verdict_cells(path), **cost_cells(path)} for name, path in rungs.items()}
    rows = list(dict.fromkeys(key for cells in columns.values() for key in cells))
    return pd.DataFrame([{"": row, **{name: cells.get(row, "–") for name, cells in columns.items()}}
                         for row in rows])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rungs", nargs="+", help="NAME=RESULTS_DIR pairs, in ladder order")
    args = ap.parse_args(argv)
    rungs = {name: Path(path) for name, path in (a.split("=", 1) for a in args.rungs)}
    print(markdown(ladder(rungs)))


if __name__ == "__main__":
    main()
