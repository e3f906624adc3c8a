"""The pre-registered seed draws of the default run (docs/method.md §8c), one after another: each
is ``snakemake --cores 2`` on config/config.yaml with only ``seeds`` replaced, in a folder of its
own (the repository's Snakefile, config and workflow linked in), and keeps of its results what the
band needs, the claims table, findings.md and each seed's agreement flags (``agreement.parquet``,
learnwin.stats.claims.seed_agreement), under ``SET/seeds<a>-<b>-<c>/`` (the results layout inside
it), with its wall time, commit and CPU in ``SET/times.tsv``; with ``--commit``, one git commit per
finished draw (a run longer than one sitting goes on from them). ``SET`` is a folder of
``data/runs`` whose ``seeds.yaml`` lists the draws: ``default-draws`` (the band's), ``default-pool``
(its seeds re-run for the resampled band), ``default-fresh`` (the resampled band's test) or
``default-fresh2`` (the test of the band resampled from the pool's and the fresh runs' seeds).

    nice -n 5 python experiments/default_draws.py WORKDIR [--set data/runs/default-pool] [--commit]
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

import pandas as pd
import yaml

from learnwin.infra import io, layout
from learnwin.infra.provenance import commit_files, cpu_name, git_commit
from learnwin.stats import band, claims

ROOT = Path(__file__).resolve().parents[1]
DRAWS = ROOT / Path("data", "runs", "default-draws")
KEPT = (layout.CLAIMS["parquet"], layout.CLAIMS["findings"])
LINKED = ("Snakefile", "config", "workflow")


def run(seeds: list[int], workdir: Path) -> tuple[int, float]:
    """One draw in ``workdir / band.draw_name(seeds)``: the Snakemake exit status and wall seconds."""
    folder = workdir / band.draw_name(seeds)
    folder.mkdir(parents=True, exist_ok=True)
    for link in LINKED:
        if not (folder / link).exists():
            (folder / link).symlink_to(ROOT / link)
    start = time.perf_counter()
    with open(folder / "snakemake.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "snakemake", "--cores", "2", "--config", f"seeds={list(seeds)}"], cwd=folder,
                             stdout=log, stderr=subprocess.STDOUT)
    return rc, time.perf_counter() - start


def agreement(results: Path, seeds: list[int]) -> pd.DataFrame:
    """The per-seed agreement flags of a finished default run's claims (its results folder), read
    from the claims rule's own inputs (learnwin.stats.claims.inputs) at the figure epoch."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    epoch = str(config["figures"]["epoch"])
    files = claims.inputs(results, config["models"], config["optimizers"], seeds, epoch)
    return claims.seed_agreement(claims.measure(claims.read_inputs(files), epoch))


def keep(seeds: list[int], workdir: Path, draws: Path = DRAWS) -> list[Path]:
    """Copy a finished draw's :data:`KEPT` tables into ``draws`` and write its agreement flags
    there (learnwin.stats.band.AGREEMENT); the files."""
    targets, results = [], workdir / band.draw_name(seeds) / layout.ROOT
    for path in KEPT:
        target = layout.under(draws / band.draw_name(seeds), path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(layout.under(results, path), target)
        targets.append(target)
    flags = draws / band.draw_name(seeds) / band.AGREEMENT
    io.write_table(agreement(results, seeds), flags, "agreement")
    return [*targets, flags]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", type=Path, help="where the draws run (a few hundred MB each)")
    ap.add_argument("--set", type=Path, default=DRAWS, help="the draws' folder, with its seeds.yaml")
    ap.add_argument("--commit", action="store_true", help="one git commit per finished draw")
    args = ap.parse_args(argv)
    folder = args.set.resolve()
    if not (folder / "seeds.yaml").is_file():
        raise SystemExit(f"{folder / 'seeds.yaml'}: no such file; a draw set lists its draws there")
    draws = yaml.safe_load((folder / "seeds.yaml").read_text())["draws"]
    for seeds in draws:
        if layout.under(folder / band.draw_name(seeds), layout.CLAIMS["parquet"]).is_file():
            continue
        rc, wall = run(seeds, args.workdir.resolve())
        times = folder / "times.tsv"
        if not times.is_file():
            times.write_text("draw\trc\twall_s\tcommit\tcpu\n")
        with open(times, "a") as f:
            f.write(f"{band.draw_name(seeds)}\t{rc}\t{wall:.0f}\t{git_commit(ROOT)}\t{cpu_name()}\n")
        kept = keep(seeds, args.workdir.resolve(), folder) if rc == 0 else []
        if args.commit:
            commit_files(ROOT, [*kept, times], f"{folder.name}: {band.draw_name(seeds)} (rc {rc}, {cpu_name()})")
        print(f"{band.draw_name(seeds)}: rc {rc}, {wall:.0f} s", flush=True)


if __name__ == "__main__":
    main()
