"""Calibrate eps on one (model, N) of the direct measurement, predict the rest, per noise definition.

    python experiments/calibrate_eps.py RESULTS_DIR [--model gru] [--N 1024] [--optimizer adamw] [--epoch best]

RESULTS_DIR is the results folder after `snakemake --cores 2` and `snakemake recovery --cores 2`.
It reads every snapshot's window.parquet (snr per lag, N and noise) and the recovery stage's
recovery window table (H_N_emp per model, seed and N), calibrates eps per seed on the
chosen (model, N) (learnwin.stats.calibrate), and prints per noise definition the calibrated eps (median
and each seed's), Spearman's rho of predicted against measured windows over the held-out (model,
N) points with its p-value, and the model orderings (docs/method.md §7, §7b).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from learnwin.infra import io, layout
from learnwin.stats.calibrate import out_of_sample
from learnwin.stats.claims import markdown, number


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--model", default="gru")
    ap.add_argument("--N", type=int, default=1024)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--epoch", default="best")
    args = ap.parse_args(argv)
    results = Path(args.results)
    measured = io.read_table(layout.under(results, layout.RECOVERY["window"]), "recovery")
    measured = measured[measured["optimizer"] == args.optimizer]
    snaps = layout.glob(results, f"{layout.SNAP}/window.parquet", optimizer=args.optimizer, epoch=args.epoch)
    window = pd.concat([io.read_table(p, "window") for p in snaps])
    rows, tables = [], []
    for noise in sorted(window["noise"].unique()):
        r = out_of_sample(window, measured, model=args.model, N=args.N, noise=noise)
        rows.append({"noise": noise, "eps (median)": number(r["eps"], 3),
                     "eps per seed": ", ".join(number(e, 3) for e in r["eps_seeds"]),
                     "Spearman rho (p), held out": f"{number(r['spearman'])} ({number(r['p'], 3)})",
                     "points": r["n_points"], "order predicted": r["order_predicted"],
                     "order measured": r["order_measured"]})
        tables.append(r["table"].assign(noise=noise))
    print(f"## eps calibrated on {args.model}, N = {args.N} ({args.optimizer}, epoch {args.epoch})\n")
    print(markdown(pd.DataFrame(rows)) + "\n")
    both = pd.concat(tables).pivot_table(index=["model", "N"], columns="noise", values="predicted")
    both = both.join(tables[0].set_index(["model", "N"])["measured"]).reset_index()
    print("### Predicted (calibrated eps) and measured windows, seed means\n")
    print(markdown(both.round(1)))


if __name__ == "__main__":
    main()
