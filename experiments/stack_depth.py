"""Print the val R^2 of the stacks per family, block and depth (docs/results-stack-blocks.md, "How far back can a stack learn").

    python experiments/stack_depth.py L=RESULTS_DIR [L=RESULTS_DIR ...] [--block published]
    python experiments/stack_depth.py --conv-test hawk=RESULTS_DIR hawk_noconv=RESULTS_DIR
    python experiments/stack_depth.py --slope-test RESULTS_DIR

Each RESULTS_DIR is the results folder of `snakemake train --configfile config/stacks.yaml
--config 'model={layers: L}'` (its trainings suffice). Per (model, optimizer) and depth: the
validation R^2 of each seed's best-validation epoch (the `best` checkpoint, docs/method.md §3),
mean ± sd over seeds, and the block the cell was stacked in (docs/method.md §2c). With
``--conv-test``, the pre-registered convolution test of docs/method.md §2c on the two runs of
config/stacks-conv.yaml: per cell, each seed's val R^2 with and without the convolution, the
verdict of the three criteria and, deciding nothing, whether the mean with it reaches the
learning threshold of docs/method.md §3 (``LEARNS_R2``). With ``--slope-test``, the pre-registered test of the LRU stack's
learning budget (docs/method.md §2c) on the `snakemake recovery` run of config/stacks-slope.yaml:
per transport, each seed's slope of log N̂_emp on -log f, their mean with its 95 % Student
t-interval over seeds (docs/method.md §10, "Intervals over seeds"), kappa and the verdict of the
three criteria (the diagonal row decides).
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

import pandas as pd

from learnwin.infra import io, layout
from learnwin.infra.registry import CELLS, block_name
from learnwin.stats.budget import seed_slopes
from learnwin.stats.claims import markdown, mean_sd
from learnwin.tasks.synthetic import LEARNS_R2


def best_r2(results: Path) -> pd.DataFrame:
    """(model, optimizer, seed, val_r2) of every training under ``results``, at its best-validation epoch."""
    rows = []
    pattern = layout.under(results, layout.RUN, optimizer="*", model="*", seed="*") / "curve.parquet"
    for curve in sorted(Path(p) for p in glob.glob(str(pattern))):
        c = io.read_table(curve, "curve")
        optimizer, model, seed = curve.parts[-4], curve.parts[-3], int(curve.parts[-2].removeprefix("seed"))
        rows.append({"model": model, "optimizer": optimizer, "seed": seed,
                     "val_r2": float(c.loc[c["val_mse"].idxmin(), "val_r2"])})
    return pd.DataFrame(rows)


def depth_table(runs: dict[int, Path], block: str) -> pd.DataFrame:
    """One row per (model, optimizer): the block and val R^2 (mean ± sd over seeds) at each depth."""
    parts = [best_r2(path).assign(layers=L) for L, path in sorted(runs.items())]
    df = pd.concat(parts, ignore_index=True)
    order = {m: i for i, m in enumerate(CELLS)}
    rows = []
    for (m, o), g in sorted(df.groupby(["model", "optimizer"]), key=lambda kv: order.get(kv[0][0], 99)):
        row = {"model": m, "optimizer": o, "block": block_name({"block": block}, CELLS[m]),
               "seeds": g["seed"].nunique()}
        for L, d in g.groupby("layers"):
            mean, sd = mean_sd(d["val_r2"])
            row[f"val R², L = {L}"] = f"{mean:.2f} ± {sd:.2f}"
        rows.append(row)
    return pd.DataFrame(rows)


#: The pre-registered criteria (docs/method.md §2c): mean val R^2 with the convolution, without it.
CONV_AT_LEAST, NOCONV_AT_MOST = 0.30, 0.20


def conv_test(with_conv: Path, without: Path) -> pd.DataFrame:
    """Per cell: the seeds' val R^2 in both blocks and whether each criterion of §2c holds."""
    a, b = best_r2(with_conv), best_r2(without)
    rows = []
    for model in a["model"].unique():
        x, y = a[a["model"] == model]["val_r2"], b[b["model"] == model]["val_r2"]
        crit = {"mean with ≥ 0.30": x.mean() >= CONV_AT_LEAST, "mean without ≤ 0.20": y.mean() <= NOCONV_AT_MOST,
                "every seed with > every seed without": x.min() > y.max()}
        rows.append({"model": model, "val R², with conv": " ".join(f"{v:.2f}" for v in sorted(x)),
                     "val R², without": " ".join(f"{v:.2f}" for v in sorted(y)),
                     **{k: "yes" if v else "no" for k, v in crit.items()},
                     "holds": "yes" if all(crit.values()) else "no",
                     f"learns with conv (mean ≥ {LEARNS_R2})": "yes" if x.mean() >= LEARNS_R2 else "no"})
    return pd.DataFrame(rows)


#: The pre-registered criteria (docs/method.md §2c): the mean slope, every seed's slope.
SLOPE_MEAN, SLOPE_SEED = (0.85, 1.15), (0.7, 1.3)


def slope_test(results: Path, model: str = "lru", threshold: float = 0.2) -> pd.DataFrame:
    """Per transport: the trained network's slope of log N̂_emp on -log f per seed and over seeds
    (``learning_slope`` of the exploration seed set, its seeds by :func:`seed_slopes`), kappa, and
    whether each criterion of §2c holds."""
    tables = {name: io.read_table(layout.under(results, layout.BUDGET[name], seed_set="exploration"),
                                  layout.budget_schema(name))
              for name in ("learning_budget", "learning_slope")}
    envelope = pd.concat([io.read_table(p, "envelope") for p in
                          layout.glob(results, layout.BUDGET_SNAPSHOT["envelope"], model=model)], ignore_index=True)
    per_seed = seed_slopes(tables["learning_budget"], envelope)
    pick = lambda d: d[(d["model"] == model) & (d["epoch"] == "trained") & (d["threshold"] == threshold)]  # noqa: E731
    seeds, rows = pick(per_seed), []
    for _, r in pick(tables["learning_slope"]).sort_values("transport").iterrows():
        v = seeds[seeds["transport"] == r["transport"]]["slope"].to_numpy(float)
        crit = {"mean in [0.85, 1.15]": SLOPE_MEAN[0] <= r["slope"] <= SLOPE_MEAN[1],
                "every seed in [0.7, 1.3]": bool(v.size) and bool(((v >= SLOPE_SEED[0]) & (v <= SLOPE_SEED[1])).all()),
                "interval below kappa": r["slope_t_hi"] < r["kappa"]}
        rows.append({"transport": r["transport"], "decides": "yes" if r["transport"] == "diagonal" else "no",
                     "slope per seed": " ".join(f"{x:.2f}" for x in v), "slope": f"{r['slope']:.2f}",
                     "95 % t-interval": f"[{r['slope_t_lo']:.2f}, {r['slope_t_hi']:.2f}]", "kappa": f"{r['kappa']:.2f}",
                     **{k: "yes" if c else "no" for k, c in crit.items()}, "holds": "yes" if all(crit.values()) else "no"})
    return pd.DataFrame(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="L=RESULTS_DIR, one per depth")
    ap.add_argument("--block", default="published", help="the config's model.block")
    ap.add_argument("--conv-test", action="store_true", help="runs are hawk=DIR hawk_noconv=DIR")
    ap.add_argument("--slope-test", action="store_true", help="the one run is the recovery of config/stacks-slope.yaml")
    args = ap.parse_args(argv)
    if args.slope_test:
        table = slope_test(Path(args.runs[0]))
        print(markdown(table))
        print(f"\nThe lead holds: {'yes' if (table[table['decides'] == 'yes']['holds'] == 'yes').all() else 'no'}")
        return
    runs = dict(r.split("=", 1) for r in args.runs)
    for path in runs.values():
        if not Path(path).is_dir():
            raise SystemExit(f"{path}: not a results folder")
    if args.conv_test:
        table = conv_test(Path(runs["hawk"]), Path(runs["hawk_noconv"]))
        print(markdown(table))
        print(f"\nThe lead holds: {'yes' if (table['holds'] == 'yes').all() else 'no'}")
    else:
        print(markdown(depth_table({int(k): Path(v) for k, v in runs.items()}, args.block)))


if __name__ == "__main__":
    main()
