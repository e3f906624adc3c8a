"""Start-up of the workflow before and after a change: the parse of `snakemake -n`, one small job
end to end, and whether the parse imports torch (docs/method.md §2a: the registry's metadata is all
a parse reads).

Run: python benchmarks/startup.py [--before HEAD] [--rounds 3]

'before' is the revision ``--before`` checked out in a temporary git worktree (removed at the end),
'after' the working tree. Each command runs in a fresh copy of that checkout's workflow (Snakefile,
workflow/, config/, profiles/), with the checkout first on PYTHONPATH, alternating between the
two; the minimum wall time over ``--rounds`` is printed:

- `snakemake -n --cores 1` of config/config.yaml and of config/smoke.yaml: the parse, the config
  check, the DAG and the resource requests of every job, what each cluster job pays again;
- `snakemake --cores 1` of the smoke config's make_data job (the parse plus the job), and the
  job's own wall seconds from its benchmark TSV;
- then, once per checkout, `python -X importtime -m snakemake -n` of the smoke config: whether
  torch was imported, and its import time.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from workflow_helpers import copy_workflow, snakemake  # noqa: E402

from learnwin.infra import layout  # noqa: E402

SMOKE = "config/smoke.yaml"
#: The torch line of `-X importtime` (stderr): "import time: self [us] | cumulative [us] |   torch",
#: the name indented by its import depth.
TORCH_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \|\s+torch$", re.M)


def timed(checkout: Path, scratch: Path, *args: str) -> float:
    """Wall seconds of one Snakemake command in a fresh copy of ``checkout``'s workflow."""
    work = copy_workflow(Path(tempfile.mkdtemp(dir=scratch)), root=checkout)
    t0 = time.perf_counter()
    snakemake(work, *args, env=_env(checkout))
    return time.perf_counter() - t0


def data_job(checkout: Path, scratch: Path, seed: int) -> tuple[float, float]:
    """Wall seconds of `snakemake --cores 1` of the smoke config's make_data job, and the job's
    own seconds (its benchmark TSV)."""
    work = copy_workflow(Path(tempfile.mkdtemp(dir=scratch)), root=checkout)
    target = layout.under(layout.ROOT, layout.DATA, seed=seed) / "task.json"
    t0 = time.perf_counter()
    snakemake(work, str(target), "--cores", "1", "--configfile", SMOKE, env=_env(checkout))
    wall = time.perf_counter() - t0
    tsv = layout.under(work / layout.ROOT, layout.BENCH) / "make_data" / f"seed{seed}.tsv"
    return wall, float(pd.read_csv(tsv, sep="\t")["s"].iloc[0])


def torch_import_seconds(checkout: Path, scratch: Path) -> float | None:
    """Seconds spent importing torch during `snakemake -n` of the smoke config, None if it was not."""
    work = copy_workflow(Path(tempfile.mkdtemp(dir=scratch)), root=checkout)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "snakemake", "-n", "--cores", "1",
                           "--configfile", SMOKE], cwd=work, env=_env(checkout), capture_output=True,
                          text=True, check=True)
    found = TORCH_IMPORT.search(proc.stderr)
    return int(found[1]) / 1e6 if found else None


def _env(checkout: Path) -> dict:
    """This environment with ``checkout`` first on PYTHONPATH: its learnwin is the one imported."""
    return {**os.environ, "PYTHONPATH": str(checkout)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="HEAD", help="git revision of 'before' (default HEAD)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    seed = yaml.safe_load((ROOT / SMOKE).read_text())["seeds"][0]
    rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    smoke_job = f"make_data job of {SMOKE} (snakemake --cores 1)"
    best: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scratch, before = Path(tmp), Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT,
                       capture_output=True, check=True)
        try:
            sides = {"before": before, "after": ROOT}
            for _ in range(args.rounds):
                for name, checkout in sides.items():
                    wall, job = data_job(checkout, scratch, seed)
                    seconds = {"snakemake -n, config/config.yaml": timed(checkout, scratch, "-n", "--cores", "1"),
                               f"snakemake -n, {SMOKE}": timed(checkout, scratch, "-n", "--cores", "1",
                                                               "--configfile", SMOKE),
                               smoke_job: wall, "  of which the job itself (benchmark TSV)": job}
                    for key, value in seconds.items():
                        best[key, name] = min(best.get((key, name), float("inf")), value)
            torch_s = {name: torch_import_seconds(checkout, scratch) for name, checkout in sides.items()}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=True)
    print(f"start-up, before = {rev}, after = the working tree; wall s, min of {args.rounds} rounds")
    print("| command | before | after | before / after |")
    print("|---|---|---|---|")
    for key in dict.fromkeys(k for k, _ in best):
        b, a = best[key, "before"], best[key, "after"]
        print(f"| {key} | {b:.2f} | {a:.2f} | {b / a:.2f} |")
    said = {name: "no" if s is None else f"yes ({s:.2f} s)" for name, s in torch_s.items()}
    print(f"| torch imported by snakemake -n, {SMOKE} | {said['before']} | {said['after']} | |")


if __name__ == "__main__":
    main()
