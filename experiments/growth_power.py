"""Power analysis of the growth-law rule (docs/method.md §10d), which chose the design of the
pre-registered T 256 run (config/recovery-growth-T256.yaml).

    python experiments/growth_power.py [--spread-from RUN] [--out data/power/growth_power.parquet]
    python experiments/growth_power.py --table [--out ...]     (the markdown of a committed table)

1. The target: the within-cell spread of the seeds' Box-Cox exponent c in a growth run (``--spread-from``,
   a results folder of the budget protocol: its recovery/budget/exploration/slopes.parquet; default
   the committed T 128 run, data/runs/growth-T128), or ``--spread`` given.
2. Calibration: the lag noise at which the simulated spread at the T 128 run's design (lags 4..64
   step 4, budgets 64 .. 65536) matches it (learnwin.stats.growth_power.calibrate), under the log-N
   scenario of the fast cells.
3. Power: per design at T 256 (lags 4..128 step 4, N_max 2^17 or 2^18) and scenario (log N, a power
   of N with c 0.18, both through the fast cells' anchors; a slow log-N cell), a pool of simulated
   seeds fitted by §10c's estimator, and per number of seeds the share of each verdict over groups
   drawn from the pool, at the calibrated noise and (the fast scenarios) at the largest cell's.
4. The expected CPU hours of each design on the run's four cells by the training cost law
   (learnwin.infra.resources.recovery_cpu_seconds) with each job's simulated training sequences.
The table is written to ``--out`` (Parquet) and printed as markdown; ``--table`` prints a written one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from learnwin.infra import io, layout, resources
from learnwin.stats import growth
from learnwin.stats.growth_power import (
    SIGMA_SEED,
    Design,
    Scenario,
    calibrate,
    calibrated_noise,
    design_power,
    pooled_spread,
    seed_pool,
    verdict_rates,
)

ROOT = Path(__file__).resolve().parents[1]
T128 = Design(lags=tuple(range(4, 65, 4)), n_max=2**16, frontier_stop=2)
LAGS_T256 = tuple(range(4, 129, 4))
N_MAX = (2**17, 2**18)
SEEDS = (5, 8, 10, 12, 15, 20)
# The fast cells' anchors at T 128 (seed means of H_emp of ConstGate, SharedGate and DiagGate:
# 3-5 lags at N 256, 49-54 at N 16384, docs/results-growth.md): every law passes through them.
FAST = dict(h_lo=4.0, h_hi=48.0)
SCENARIOS = (Scenario("log N", 0.0, **FAST), Scenario("power c 0.18", 0.18, **FAST),
             Scenario("slow log N", 0.0, h_lo=4.0, h_hi=14.0))
TRUE = {"log N": growth.LOG_N, "power c 0.18": growth.POWER, "slow log N": growth.LOG_N}
LAWS = (growth.LOG_N, growth.POWER, growth.SATURATING)
SIGMA_GRID = (0.25, 0.4, 0.6, 0.8)
RUN_CELLS = ("const", "shared", "diag", "lstm")


def spread_of(run: Path) -> tuple[float, float]:
    """(pooled, largest) within-cell sd of c in a growth run's seed table."""
    per_seed = io.read_table(layout.under(run, layout.BUDGET["slopes"], seed_set="exploration"), "seed_growth")
    per_seed = per_seed[np.isclose(per_seed["threshold"], 0.2)]
    return pooled_spread(per_seed), float(per_seed.groupby("model")["c"].std(ddof=1).max())


def simulate(target: float, worst: float, *, pool: int, groups: int, seed: int, map_fn=map) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spreads = []
    for sigma in SIGMA_GRID:  # common random numbers: the spread moves with the noise alone
        fits = seed_pool(np.random.default_rng(seed), SCENARIOS[0], T128, pool, sigma_lag=sigma,
                         sigma_seed=SIGMA_SEED, map_fn=map_fn)
        spreads.append(float(fits["c"].std(ddof=1)))
        print(f"calibration: sigma_lag {sigma:.2f} -> spread of c {spreads[-1]:.3f} at T 128", file=sys.stderr)
    noise = {"calibrated": calibrate(target, spreads, SIGMA_GRID), "largest cell": calibrate(worst, spreads, SIGMA_GRID)}
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["task"]["T"] = 256
    rows = []
    for level, sigma in noise.items():
        for n_max in N_MAX:
            design = Design(lags=LAGS_T256, n_max=n_max)
            for sc in SCENARIOS if level == "calibrated" else SCENARIOS[:2]:
                fits = seed_pool(rng, sc, design, pool, sigma_lag=sigma, sigma_seed=SIGMA_SEED, map_fn=map_fn)
                steps = float(fits["sequences"].mean()) / cfg["train"]["batch_size"]
                job_cpu_s = sum(resources.recovery_cpu_seconds(cfg, m, 1, steps) for m in RUN_CELLS)
                for n in SEEDS:
                    share = verdict_rates(fits, n, groups=groups, rng=rng)
                    right = float(share.get(TRUE[sc.name], 0.0))
                    wrong = float(sum(share.get(v, 0.0) for v in LAWS if v != TRUE[sc.name]))
                    rows.append(dict(noise=level, sigma_lag=sigma, n_max=n_max, scenario=sc.name, c_true=sc.c,
                                     seeds=n, p_true=right, p_wrong=wrong, p_cut_off=float(share.get("cut off", 0.0)),
                                     spread_c=float(fits["c"].std(ddof=1)),
                                     cpu_h=n * job_cpu_s / 3600))
                print(f"{level} N_max 2^{int(np.log2(n_max))} {sc.name}: done", file=sys.stderr)
    return pd.DataFrame(rows).assign(target_spread=target, largest_spread=worst)


def markdown(table: pd.DataFrame) -> str:
    """Per noise level and scenario, P(true law) / P(wrong law) by seeds (columns) and N_max (rows)."""
    out = []
    for (level, sc), g in table.groupby(["noise", "scenario"], sort=False):
        out += [f"**{sc}, noise {level}** (lag noise {g['sigma_lag'].iloc[0]:.2f} e-folds): "
                "P(true law) / P(a wrong law) by seeds", "",
                "| N_max | " + " | ".join(f"{n} seeds" for n in SEEDS) + " |",
                "|---|" + "---|" * len(SEEDS)]
        for n_max, h in g.groupby("n_max"):
            cells = [f"{r.p_true:.2f} / {r.p_wrong:.2f}" for r in h.sort_values("seeds").itertuples()]
            out.append(f"| 2^{int(np.log2(n_max))} | " + " | ".join(cells) + " |")
        out.append("")
    cost = table[(table["noise"] == "calibrated") & (table["scenario"] == SCENARIOS[0].name)]
    out += ["**Expected CPU hours** of the four cells' jobs (log-N scenario's training, cost law)", "",
            "| N_max | " + " | ".join(f"{n} seeds" for n in SEEDS) + " |", "|---|" + "---|" * len(SEEDS)]
    for n_max, h in cost.groupby("n_max"):
        out.append(f"| 2^{int(np.log2(n_max))} | " + " | ".join(f"{v:.1f}" for v in h.sort_values("seeds")["cpu_h"]) + " |")
    return "\n".join(out)


def choose(table: pd.DataFrame, power: float = 0.8, wrong: float = 0.05) -> pd.Series:
    """The cheapest (N_max, seeds) at which, at the calibrated noise, both fast scenarios reach
    ``power`` and no scenario's wrong-law share exceeds ``wrong``."""
    cal = table[table["noise"] == "calibrated"]
    fast = cal[cal["scenario"].isin([SCENARIOS[0].name, SCENARIOS[1].name])]
    ok = (fast.groupby(["n_max", "seeds"])["p_true"].min() >= power) & (
        cal.groupby(["n_max", "seeds"])["p_wrong"].max() <= wrong)
    cost = cal[cal["scenario"] == SCENARIOS[0].name].set_index(["n_max", "seeds"])["cpu_h"]
    if not ok.any():
        raise SystemExit("no design of the grid reaches the power: widen it")
    return cost[ok[ok].index].sort_values().head(1).reset_index().iloc[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spread-from", type=Path, default=ROOT / layout.KEPT_RUNS / "growth-T128")
    ap.add_argument("--spread", type=float, nargs=2, metavar=("POOLED", "LARGEST"))
    ap.add_argument("--out", type=Path, default=ROOT / layout.GROWTH_POWER)
    ap.add_argument("--pool", type=int, default=2000, help="simulated seeds per (scenario, design); a pool's mean c "
                    "moves the power: 120 leaves it some 0.1 off (docs/method.md §10d)")
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--jobs", type=int, default=2, help="processes for the fits")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--pool-spread", type=int, metavar="K", help="only the spread a pool's own error gives: the "
                    "power for c 0.18 of the first design (2^18, 8 seeds) at the calibrated noise on K pools of --pool "
                    "seeds, one per rng seed 0 .. K-1 (docs/method.md §10d, amendment)")
    args = ap.parse_args()
    if args.pool_spread:
        sigma = calibrated_noise(io.read_table(args.out, "growth_power"))
        for k in range(args.pool_spread):
            power = design_power(FAST["h_lo"], FAST["h_hi"], Design(lags=LAGS_T256, n_max=2**18), 8, sigma_lag=sigma,
                                 pool=args.pool, seed=k)
            print(f"pool of {args.pool}, rng seed {k}: P(power | c 0.18) {power[growth.POWER]:.2f}")
        return
    if not args.table:
        target, worst = args.spread or spread_of(args.spread_from)
        print(f"target spread of c: pooled {target:.3f}, largest cell {worst:.3f}", file=sys.stderr)
        with multiprocessing.Pool(args.jobs) as procs:
            table = simulate(target, worst, pool=args.pool, groups=args.groups, seed=args.seed,
                             map_fn=lambda f, xs: procs.map(f, list(xs), chunksize=8))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        io.write_table(table, args.out, "growth_power")
    table = io.read_table(args.out, "growth_power")
    print(markdown(table))
    best = choose(table)
    print(f"\nChosen: N_max 2^{int(np.log2(best['n_max']))}, {int(best['seeds'])} seeds "
          f"({best['cpu_h']:.1f} CPU h expected)")


if __name__ == "__main__":
    main()
