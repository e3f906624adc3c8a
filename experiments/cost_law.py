"""The cost law: per-job CPU seconds of training and snapshots against their work, across rungs.

    python experiments/cost_law.py RESULTS_DIR[:CONFIG] [RESULTS_DIR[:CONFIG] ...] [--predict config/paper.yaml]
        [--models M ...] [--T 512 1024 ...] [--wall]

Each argument pairs a finished run's results folder with the config it ran (without one, the
resolved config the run wrote to its provenance.yaml). From the
Snakemake benchmark TSVs (``cpu_time``, or with ``--wall`` the wall seconds ``s``, of every
train_model and take_snapshot job) it fits, by
non-negative least squares over all jobs of all rungs,

    train_model:   cpu = a + steps * T * (c0 + c1 * B * G * H^2)
    take_snapshot: cpu = a + n_diag * T * (c0 + c1 * G * H^2 + c2 * T * H)

steps = epochs * (n_train // batch); G = the cell's gate blocks (const 1, shared 1, diag 2, gru 3,
lstm 4). In training, c0 is the per-time-step overhead of the Python loop and c1 the
arithmetic. In a snapshot, the G H^2 term is the trace and tangent passes over every time step,
and the T H term is psi and S at every lag l = 0..T-1 (T^2/2 pairs per sequence, docs/method.md
§5, §7b). It prints the fit, each rung's measured against fitted cost, and the predicted CPU
cost per job and in all for ``--predict`` (jobs = models x optimizers x seeds x snapshot epochs).
``--models`` fits and predicts on those cells' jobs only (a cell family whose cost differs, such as
the scan-trained cells of docs/method.md §2b). ``--T`` also prints the predicted wall minutes of the
``--predict`` config with its sequence length set to each value (one job per model, optimizer and
seed: the train job, then its snapshots one after another; jobs run ``--cores`` at a time).
The work terms are learnwin.infra.resources.work; the printed coefficients go into
learnwin.infra.resources.COEF, from which the rules request their run time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import nnls

from learnwin.infra import layout, resources


def _config(path: str | Path) -> dict:
    """A config file read on top of config/config.yaml, one level deep, as `--configfile` does."""
    base = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    for key, value in yaml.safe_load(Path(path).read_text()).items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


def _rung(arg: str) -> tuple[Path, dict]:
    """RESULTS[:CONFIG] -> (RESULTS, CONFIG's config, or the resolved config in RESULTS/provenance.yaml)."""
    results, _, config = arg.partition(":")
    if config:
        return Path(results), _config(config)
    return Path(results), yaml.safe_load(layout.under(results, layout.PROVENANCE).read_text())["config"]


def cpu_times(results: Path, rule: str, column: str = "cpu_time") -> dict[Path, float]:
    """CPU seconds of every job of ``rule`` (its benchmark TSV path under the rule's folder). A
    snapshot job's cost includes the run's separate memory-curve job where an older run had one."""
    bench = layout.under(results, layout.BENCH)
    out = {}
    for tsv in sorted((bench / rule).rglob("*.tsv")):
        rel = tsv.relative_to(bench / rule)
        parts = [tsv] + ([bench / "memory_curve" / rel] if rule == "take_snapshot" else [])
        out[rel] = sum(float(pd.read_csv(p, sep="\t")[column].iloc[0]) for p in parts if p.exists())
    return out


def jobs(results: Path, cfg: dict, rule: str, models=None, column: str = "cpu_time") -> pd.DataFrame:
    """One row per job of ``rule`` (of ``models`` only, when given): model, seconds and the work terms."""
    return pd.DataFrame([{"model": rel.parts[1], "cpu": cpu, "x": resources.work(rule, cfg, rel.parts[1])}
                         for rel, cpu in cpu_times(results, rule, column).items()
                         if models is None or rel.parts[1] in models])


def fit(rungs: list[tuple[Path, dict]], rule: str, models=None, column: str = "cpu_time") -> tuple[np.ndarray, pd.DataFrame]:
    """NNLS coefficients over every job (of ``models``) of every rung, and the per-rung mean measured
    and fitted."""
    tables = [jobs(r, c, rule, models, column).assign(rung=str(r)) for r, c in rungs]
    data = pd.concat(tables, ignore_index=True)
    X = np.stack(data["x"].to_numpy())
    scale = np.where(X.max(0) > 0, X.max(0), 1.0)  # columns of very different size: solve on unit columns
    coef = nnls(X / scale, data["cpu"].to_numpy())[0] / scale
    data["fitted"] = X @ coef
    return coef, data.groupby("rung", sort=False)[["cpu", "fitted"]].mean()


def predict(coef: np.ndarray, rule: str, cfg: dict) -> pd.Series:
    """Fitted CPU seconds of one job per model of ``cfg``."""
    return pd.Series({m: float(resources.work(rule, cfg, m) @ coef) for m in cfg["models"]})


def wall_minutes(coefs: dict, cfg: dict, T: int, cores: int) -> float:
    """Predicted wall minutes of ``cfg`` at sequence length ``T``: per (model, optimizer, seed) the
    train job and its snapshot jobs in a row, ``cores`` such chains at a time."""
    at = {**cfg, "task": {**cfg["task"], "T": T}}
    n_snap = len(at["train"]["snapshot_epochs"])
    chains = [float(resources.work("train_model", at, m) @ coefs["train_model"])
              + n_snap * float(resources.work("take_snapshot", at, m) @ coefs["take_snapshot"])
              for m in at["models"]] * (len(at["optimizers"]) * len(at["seeds"]))
    return sum(chains) / min(cores, len(chains)) / 60


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rungs", nargs="+", help="RESULTS_DIR:CONFIG pairs")
    ap.add_argument("--predict", default="config/paper.yaml")
    ap.add_argument("--models", nargs="+", default=None, help="fit and predict these cells only")
    ap.add_argument("--T", nargs="+", type=int, default=[], help="sequence lengths to predict --predict at")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--wall", action="store_true", help="fit wall seconds (s) instead of cpu_time")
    args = ap.parse_args(argv)
    rungs = [_rung(a) for a in args.rungs]
    kind = "wall" if args.wall else "CPU"
    target = _config(args.predict)
    if args.models:
        target["models"] = [m for m in target["models"] if m in args.models]
    n_runs = len(target["models"]) * len(target["optimizers"]) * len(target["seeds"])
    n_snaps = n_runs * len(target["train"]["snapshot_epochs"])
    coefs = {}
    for rule, count in (("train_model", n_runs), ("take_snapshot", n_snaps)):
        coef, per_rung = fit(rungs, rule, args.models, "s" if args.wall else "cpu_time")
        coefs[rule] = coef
        print(f"## {rule}\n\ncoefficients (s): ({', '.join(f'{c:.3g}' for c in coef)})\n")
        print(f"| rung | measured {kind} s per job | fitted |\n|---|---|---|")
        for rung, row in per_rung.iterrows():
            print(f"| {rung} | {row['cpu']:.1f} | {row['fitted']:.1f} |")
        per_job = predict(coef, rule, target)
        total_h = per_job.mean() * count / 3600
        print(f"\n{args.predict}: {kind} hours per job " + ", ".join(f"{m} {s / 3600:.2f}" for m, s in per_job.items())
              + f"; {count} jobs, {total_h:.1f} {kind} hours in all\n")
    if args.T:
        print(f"| T | {args.predict}: predicted wall minutes on {args.cores} cores |\n|---|---|")
        for T in args.T:
            print(f"| {T} | {wall_minutes(coefs, target, T, args.cores):.1f} |")


if __name__ == "__main__":
    main()
