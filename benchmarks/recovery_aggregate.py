"""The recovery aggregate (rule aggregate_recovery, docs/method.md §10) before and after a change, on
the same per-job tables in one run: both wall times, their ratio, and every output table compared.

Run: python benchmarks/recovery_aggregate.py RUN [--configfile config/smoke.yaml] [--before HEAD]
[--cores 2] [--rounds 1]

RUN is the folder of a finished `snakemake recovery` run of that config (its results folder holds
the per-job tables and the main run's statistics). 'before' is the revision ``--before`` checked out
in a temporary git worktree (removed at the end), 'after' the working tree. Each side runs in a
fresh folder: the checkout's workflow beside a hard-linked copy of RUN's results folder (less the
aggregate's log and benchmark, which Snakemake writes in place), where
`snakemake --cores C --forcerun aggregate_recovery --allowed-rules aggregate_recovery` runs the
aggregate alone (at the rule's threads of that checkout, capped at C) with the checkout first on
PYTHONPATH. The wall time is the job's benchmark TSV, the minimum over ``--rounds``. Fails unless
every output table of the two sides is identical (pyarrow ``Table.equals``).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from workflow_helpers import assert_same_tables, copy_workflow, snakemake, worktree  # noqa: E402

from learnwin.infra import layout  # noqa: E402


def aggregate(checkout: Path, run: Path, work: Path, configfile: str, cores: int) -> float:
    """Run the aggregate of ``checkout`` on ``run``'s tables in ``work``; its job wall seconds."""
    copy_workflow(work, root=checkout)
    subprocess.run(["cp", "-al", str(run / layout.ROOT), str(work / layout.ROOT)], check=True)
    for folder in (layout.LOGS, layout.BENCH):  # written in place: unlinked, RUN's copies stay as they are
        shutil.rmtree(work / folder / "aggregate_recovery", ignore_errors=True)
    snakemake(work, "--cores", str(cores), "--configfile", configfile, "--forcerun", "aggregate_recovery",
              "--allowed-rules", "aggregate_recovery", "--rerun-triggers", "mtime", "--",
              *layout.RECOVERY.values(), env={**os.environ, "PYTHONPATH": str(checkout)})
    tsv = work / layout.BENCH / "aggregate_recovery" / "aggregate_recovery.tsv"
    return float(pd.read_csv(tsv, sep="\t")["s"].iloc[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="folder of a finished `snakemake recovery` run")
    ap.add_argument("--configfile", default="config/smoke.yaml", help="the run's config")
    ap.add_argument("--before", default="HEAD", help="git revision of 'before' (default HEAD)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, worktree(args.before, Path(tmp) / "before") as before:
        sides = {"before": before, "after": ROOT}
        for r in range(args.rounds):
            for name, checkout in sides.items():
                s = aggregate(checkout, args.run.resolve(), Path(tmp) / f"{name}{r}", args.configfile, args.cores)
                seconds[name] = min(seconds.get(name, float("inf")), s)
        b, a = seconds["before"], seconds["after"]
        print(f"aggregate_recovery on {args.run} ({args.configfile}), --cores {args.cores}; before = {rev}, "
              f"after = the working tree; job wall s (benchmark TSV), min of {args.rounds} rounds")
        print(f"| before | after | before / after |\n|---|---|---|\n| {b:.1f} | {a:.1f} | {b / a:.1f} |")
        n = assert_same_tables(*(Path(tmp) / f"{name}0" / Path(layout.RECOVERY["scores"]).parent for name in sides))
        print(f"identical (pyarrow Table.equals): all {n} tables of the recovery folder, the aggregate's "
              f"{len(layout.RECOVERY)} outputs among them")


if __name__ == "__main__":
    main()
