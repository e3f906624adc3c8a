"""The pre-registered seed draws of the default run (docs/method.md §8c), one after another: each
is ``snakemake --cores 2`` on config/config.yaml with only ``seeds`` replaced, in a folder of its
own (the repository's Snakefile, config and workflow linked in), and keeps of its results what the
band needs, the claims table and findings.md, under ``data/runs/default-draws/seeds<a>-<b>-<c>/``
(the results layout inside it), with its wall time in ``times.tsv`` beside them.

    nice -n 5 python experiments/default_draws.py WORKDIR     # the draws not yet kept
    python experiments/answer_table.py --write                 # the band from what is kept

A draw already kept is skipped; one whose Snakemake run fails is logged and left out.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from learnwin.infra import layout

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
        rc = subprocess.call(["snakemake", "--cores", "2", "--config", f"seeds={list(seeds)}"], cwd=folder,
                             stdout=log, stderr=subprocess.STDOUT)
    return rc, time.perf_counter() - start


def keep(seeds: list[int], workdir: Path) -> None:
    """Copy a finished draw's :data:`KEPT` tables into :data:`DRAWS`."""
    for path in KEPT:
        target = layout.under(DRAWS / name(seeds), path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(layout.under(workdir / name(seeds) / layout.ROOT, path), target)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", type=Path, help="where the draws run (a few hundred MB each)")
    args = ap.parse_args(argv)
    draws = yaml.safe_load((DRAWS / "seeds.yaml").read_text())["draws"]
    for seeds in draws:
        if layout.under(DRAWS / name(seeds), layout.CLAIMS["parquet"]).is_file():
            continue
        rc, wall = run(seeds, args.workdir.resolve())
        if not (DRAWS / "times.tsv").is_file():
            (DRAWS / "times.tsv").write_text("draw\trc\twall_s\n")
        with open(DRAWS / "times.tsv", "a") as f:
            f.write(f"{name(seeds)}\t{rc}\t{wall:.0f}\n")
        if rc == 0:
            keep(seeds, args.workdir.resolve())
        print(f"{name(seeds)}: rc {rc}, {wall:.0f} s", flush=True)


if __name__ == "__main__":
    main()
