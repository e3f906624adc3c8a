"""The pre-registered seed draws of the default run (docs/method.md §8c), one after another: each
is ``snakemake --cores 2`` on config/config.yaml with only ``seeds`` replaced, in a folder of its
own (the repository's Snakefile, config and workflow linked in), and keeps of its results what the
band needs, the claims table and findings.md, under ``data/runs/default-draws/seeds<a>-<b>-<c>/``
(the results layout inside it), with its wall time, commit and CPU in ``times.tsv`` beside them;
with ``--commit``, one git commit per finished draw (a run longer than one sitting goes on from them).

    nice -n 5 python experiments/default_draws.py WORKDIR [--commit]   # the draws not yet kept
    python experiments/answer_table.py --write                 # the band from what is kept

A draw already kept is skipped; one whose Snakemake run fails is logged and left out.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from learnwin.infra import layout
from learnwin.infra.provenance import commit_files, cpu_name, git_commit

ROOT = Path(__file__).resolve().parents[1]
DRAWS = ROOT / Path("data", "runs", "default-draws")
KEPT = (layout.CLAIMS["parquet"], layout.CLAIMS["findings"])
LINKED = ("Snakefile", "config", "workflow")


def name(seeds: list[int]) -> str:
    return "seeds" + "-".join(map(str, seeds))


def run(seeds: list[int], workdir: Path) -> tuple[int, float]:
    """One draw in ``workdir / name(seeds)``: the Snakemake exit status and wall seconds."""
    folder = workdir / name(seeds)
    folder.mkdir(parents=True, exist_ok=True)
    for link in LINKED:
        if not (folder / link).exists():
            (folder / link).symlink_to(ROOT / link)
    start = time.perf_counter()
    with open(folder / "snakemake.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "snakemake", "--cores", "2", "--config", f"seeds={list(seeds)}"], cwd=folder,
                             stdout=log, stderr=subprocess.STDOUT)
    return rc, time.perf_counter() - start


def keep(seeds: list[int], workdir: Path) -> list[Path]:
    """Copy a finished draw's :data:`KEPT` tables into :data:`DRAWS`; the copies."""
    targets = []
    for path in KEPT:
        target = layout.under(DRAWS / name(seeds), path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(layout.under(workdir / name(seeds) / layout.ROOT, path), target)
        targets.append(target)
    return targets


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", type=Path, help="where the draws run (a few hundred MB each)")
    ap.add_argument("--commit", action="store_true", help="one git commit per finished draw")
    args = ap.parse_args(argv)
    draws = yaml.safe_load((DRAWS / "seeds.yaml").read_text())["draws"]
    for seeds in draws:
        if layout.under(DRAWS / name(seeds), layout.CLAIMS["parquet"]).is_file():
            continue
        rc, wall = run(seeds, args.workdir.resolve())
        times = DRAWS / "times.tsv"
        if not times.is_file():
            times.write_text("draw\trc\twall_s\tcommit\tcpu\n")
        with open(times, "a") as f:
            f.write(f"{name(seeds)}\t{rc}\t{wall:.0f}\t{git_commit(ROOT)}\t{cpu_name()}\n")
        kept = keep(seeds, args.workdir.resolve()) if rc == 0 else []
        if args.commit:
            commit_files(ROOT, [*kept, times], f"default-draws: {name(seeds)} (rc {rc}, {cpu_name()})")
        print(f"{name(seeds)}: rc {rc}, {wall:.0f} s", flush=True)


if __name__ == "__main__":
    main()
