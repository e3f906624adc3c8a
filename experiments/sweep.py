"""Run the config sweep (experiments/sweep.yaml) and tabulate the claims of each variant.

Each variant runs the workflow's `claims` rule (training, snapshots, statistics, the verdicts of
learnwin.stats.claims; no figures) in experiments/runs/<variant>/ with its merged config, and its
claims.parquet is scored. The
wall time of each variant is measured here. Output: experiments/runs/sweep.csv (one row per
variant: wall time, "holds/of" per claim and noise definition, mean val R^2) and
experiments/runs/<variant>/claims.csv (the per-(claim, model, optimizer, noise) verdicts).
"""

import argparse
import copy
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

from learnwin.infra import io, layout
from learnwin.stats.claims import claim_scores

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "experiments" / "runs"


def merged(base: dict, *overrides: dict) -> dict:
    """Nested dicts merged key by key; any other value replaces."""
    out = copy.deepcopy(base)
    for over in overrides:
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def run_variant(name: str, config: dict, cores: int) -> float:
    """Run the variant's `summary` target in experiments/runs/<name>/; return the wall time."""
    work = RUNS / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    t0 = time.perf_counter()
    with open(work / "snakemake.log", "w") as log:
        subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work),
                        "--configfile", str(work / "config.yaml"), "--cores", str(cores), "claims"],
                       cwd=ROOT, check=True, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - t0


def score(name: str) -> dict:
    """The variant's claim scores (its claims.parquet, learnwin.stats.claims) as one row; verdicts
    to <name>/claims.csv."""
    results = RUNS / name / layout.ROOT
    table = io.read_table(layout.under(results, layout.CLAIMS["parquet"]), "claims")
    table.to_csv(RUNS / name / "claims.csv", index=False)
    summary = io.read_table(layout.under(results, layout.SUMMARY["parquet"]), "summary")
    row = {"variant": name, "val_r2": round(summary["val_r2"].mean(), 3)}
    row.update({f"claim_{key}": score for key, score in claim_scores(table).items()})
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*", help="names from sweep.yaml (default: all not yet in sweep.csv)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--rescore", action="store_true", help="re-score the variants already run: only their claims job, if outdated, runs again")
    args = ap.parse_args()
    spec = yaml.safe_load((ROOT / "experiments" / "sweep.yaml").read_text())
    base = yaml.safe_load((ROOT / spec["base"]).read_text())
    table = RUNS / "sweep.csv"
    done = pd.read_csv(table) if table.exists() else pd.DataFrame(columns=["variant", "wall_s"])
    if args.rescore:
        names = args.variants or list(done["variant"])
    else:
        names = args.variants or [v for v in spec["variants"] if v not in set(done["variant"])]
    for name in names:
        config = merged(base, spec["reduced"], spec["variants"][name])
        wall = round(run_variant(name, config, args.cores))
        if args.rescore:
            wall = done.loc[done["variant"] == name, "wall_s"].iloc[0]
        row = {"wall_s": wall, **score(name)}
        done = pd.concat([done[done["variant"] != name], pd.DataFrame([row])], ignore_index=True)
        done.to_csv(table, index=False)
        print(pd.DataFrame([row]).to_string(index=False), flush=True)


if __name__ == "__main__":
    main()
