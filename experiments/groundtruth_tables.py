"""Print the markdown tables of docs/results.md, "Does the theory predict the window?", from a
finished `snakemake recovery` run: the budget protocol (docs/method.md §10b, the default) per seed
set, or the dataset protocol (§10).

    python experiments/groundtruth_tables.py RESULTS_DIR --budget confirm      # snakemake recovery_confirm
    python experiments/groundtruth_tables.py RESULTS_DIR --budget exploration  # snakemake recovery
    python experiments/groundtruth_tables.py RESULTS_DIR [--threshold 0.2]     # the dataset protocol
    python experiments/groundtruth_tables.py RESULTS_DIR --steps   # before the aggregate exists

The budget protocol's tables (learnwin.infra.layout.BUDGET): the confirmatory test (the
pre-registered variant first, then the secondary ones), H_emp(N) as mean ± sd over seeds, claim
(b) (growth fits per model, the learned-gate against the fixed-gate group test), claim (d) (the
slope of log N̂_emp against -log f beside kappa), and the cost per rule.


The dataset protocol's, from the aggregate tables of learnwin.infra.layout.RECOVERY: the measured window H per
(model, N) as mean ± sd over seeds with its censored count, at the primary threshold; the growth
fits per (model, threshold) (H = a + b log N against H = a N^c, censoring-aware, Akaike weights,
curvature in log N); the test of one common slope; the monotonicity and steps checks; the eps-free
predicted growth against the measured one, the out-of-sample scores per prediction variant
(networks, transport, noise), and the cost per rule from the benchmark TSVs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from learnwin.infra import io, layout
from learnwin.infra.registry import CELLS
from learnwin.stats import groundtruth
from learnwin.stats.claims import markdown, number


def _read(results: Path, name: str) -> pd.DataFrame:
    return io.read_table(layout.under(results, layout.RECOVERY[name]), "recovery")


def _rounded(df: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = [number(v, digits) for v in out[col]]
    return out


def window_means(window: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """H mean ± sd over seeds per (model, N) of the main arm at ``threshold``, and the number of
    right-censored seeds (H at the largest grid lag)."""
    main = window[(window["arm"] == "main") & np.isclose(window["threshold"], threshold)]
    return _model_by_N({(model, N): (g["H"].mean(), g["H"].std(ddof=1), int(g["censored"].sum()))
                        for (model, N), g in main.groupby(["model", "N"], sort=True)})


def _model_by_N(cells: dict) -> pd.DataFrame:
    """One row per model (registry order), one column per N: "mean ± sd (k cens.)" of the cells
    {(model, N): (mean, sd, censored seeds)}."""
    text = {key: f"{number(mean, 1)} ± {number(sd, 1)}" + (f" ({int(cen)} cens.)" if cen else "")
            for key, (mean, sd, cen) in cells.items()}
    Ns = sorted({n for _, n in text})
    models = [m for m in CELLS if any(k[0] == m for k in text)]
    return pd.DataFrame([{"model": m, **{f"N = {n}": text.get((m, n), "–") for n in Ns}} for m in models])


def steps_table(results: str | Path) -> str:
    """The convergence check straight from the per-job windows (``--steps``): H with twice the
    steps against the main budget per (model, threshold), the seeds' values and the mean change.
    For a run that stopped after its trainings (`snakemake recovery --until train_recovery`)."""
    paths = layout.glob(results, layout.RECOVERY_RUN["window"])
    window = pd.concat([io.read_table(p, "recovery") for p in paths], ignore_index=True)
    check = groundtruth.steps_check(window)
    rows = []
    for (model, thr), g in check.groupby(["model", "threshold"], sort=False):
        g = g.sort_values("seed")
        steps = f"{int(g['steps_main'].iloc[0])} -> {int(g['steps_double'].iloc[0])}"
        rows.append({"model": model, "threshold": f"{round(float(thr), 3):g}", "N": int(g["N"].iloc[0]), "steps": steps,
                     "H main": ", ".join(number(v, 1) for v in g["H_main"]),
                     "H double": ", ".join(number(v, 1) for v in g["H_double"]),
                     "mean dH": number(g["dH"].mean(), 1), "max |dH|": number(g["dH"].abs().max(), 1)})
    order = {m: i for i, m in enumerate(CELLS)}
    table = pd.DataFrame(rows).sort_values(["threshold", "model"], key=lambda c: c.map(order) if c.name == "model" else c)
    return "\n".join([f"### Convergence: H at twice the steps, largest N ({len(paths)} jobs in {results})", "",
                      markdown(table), ""])


RULES = ("train_recovery", "snapshot_recovery", "aggregate_recovery", "plot_recovery")
BUDGET_RULES = ("train_budget", "snapshot_budget", "aggregate_budget", "plot_budget")


def cost(results: Path, cores: int = 2, rules=RULES, stems=None) -> pd.DataFrame:
    """Per rule of the ground truth, from its benchmark TSVs (those named in ``stems``, default
    all): jobs, total and largest wall seconds, the total over ``cores`` cores in minutes (every
    job is one thread; perfect packing), and the same of the CPU seconds (Snakemake's cpu_time),
    which a run beside other work does not inflate."""
    rows = []
    for rule in rules:
        files = sorted(f for f in (layout.under(results, layout.BENCH) / rule).rglob("*.tsv")
                       if stems is None or f.stem in stems)
        if files:
            tsv = pd.concat([pd.read_csv(f, sep="\t") for f in files])
            s, cpu = tsv["s"], pd.to_numeric(tsv["cpu_time"], errors="coerce")
            rows.append({"rule": rule, "jobs": len(s), "wall s (sum)": number(s.sum(), 0),
                         "wall s (largest job)": number(s.max(), 0), f"sum / {cores} cores (min)": number(s.sum() / cores / 60, 1),
                         "CPU s (sum)": number(cpu.sum(), 0), f"CPU / {cores} cores (min)": number(cpu.sum() / cores / 60, 1)})
    return pd.DataFrame(rows)


#: The growth table's printed columns: the laws, their weights and verdict, and the curvature's mean
#: over seeds with its Student t-interval (learnwin.stats.growth).
GROWTH_COLUMNS = ["model", "threshold", "n_points", "n_censored", "log_b", "power_c", "weight_log", "weight_power",
                  "verdict", "curvature", "curvature_t_lo", "curvature_t_hi", "curvature_seeds", "n_convex"]


def tables(results: str | Path, threshold: float) -> str:
    results = Path(results)
    window = _read(results, "window")
    growth = _read(results, "growth")
    out = [f"## Ground truth of the window in {results}", "",
           f"### Measured H per (model, N), threshold {threshold} (mean ± sd over seeds)", "",
           markdown(window_means(window, threshold)), "",
           "### Growth of H with N (censoring-aware fits, Akaike weights, curvature in log N: seed mean, "
           "95 % Student t-interval over seeds)", "",
           markdown(_rounded(growth[[c for c in GROWTH_COLUMNS if c in growth]])), "",
           "### One common log-N slope across models (likelihood-ratio test)", "",
           markdown(_rounded(_read(results, "slopes"))), ""]
    mono = _read(results, "monotonicity")
    if len(mono):
        out += ["### Monotonicity: the full lag grid against bisection (holes below the largest learned lag)", "",
                markdown(_rounded(mono)), ""]
    steps = _read(results, "steps_check")
    if len(steps):
        out += ["### Convergence: H at twice the steps, largest N", "", markdown(_rounded(steps)), ""]
    out += ["### Eps-free: predicted against measured growth", "",
            markdown(_rounded(_read(results, "growth_prediction"))), "",
            "### Levels out of sample: scores per prediction variant", "",
            markdown(_rounded(_read(results, "prediction_scores"))), "",
            "### Cost (benchmark TSVs)", "", markdown(cost(results)), ""]
    return "\n".join(out)


def budget_window_means(h_emp: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """H_emp mean ± sd over seeds per (model, N) at ``threshold``, with the censored seeds' count."""
    rows = h_emp[np.isclose(h_emp["threshold"], threshold)]
    return _model_by_N({(r.model, r.N): (r.H_mean, r.H_sd, r.n_censored) for r in rows.itertuples()})


def budget_tables(results: str | Path, seed_set: str, threshold: float) -> str:
    """The budget protocol's tables of one seed set (docs/method.md §10b)."""
    results = Path(results)

    def read(name):
        return io.read_table(layout.under(results, layout.BUDGET[name].format(seed_set=seed_set)), "budget")

    confirm = read("confirm").sort_values(["pre_registered", "threshold", "networks", "transport", "noise"],
                                          ascending=[False, True, True, True, True])
    growth = read("growth")
    stems = {seed_set, *(f"seed{s}" for s in read("scores")["seed"].unique())}  # this seed set's jobs
    slope = read("learning_slope")
    slope = slope[np.isclose(slope["threshold"], threshold)]
    return "\n".join([
        f"## The window under a training budget in {results}, seed set {seed_set}", "",
        "### The confirmatory test (pre-registered row first; mean Kendall tau-b within N, exact permutation p)", "",
        markdown(_rounded(confirm)), "",
        f"### H_emp(N), threshold {threshold} (mean ± sd over seeds)", "",
        markdown(budget_window_means(read("H_emp"), threshold)), "",
        "### Claim (b): growth of H_emp with N (censoring-aware fits, Akaike weights, curvature in log N: "
        "seed mean, 95 % Student t-interval over seeds)", "",
        markdown(_rounded(growth[[c for c in GROWTH_COLUMNS if c in growth]])), "",
        "### Claim (b): learned-gate against fixed-gate cells (one log-N slope per group against one for all)", "",
        markdown(_rounded(read("groups"))), "",
        "### One common log-N slope across models (likelihood-ratio test)", "",
        markdown(_rounded(read("slopes"))), "",
        f"### Claim (d): slope of log N̂_emp(l) against -log f(l), threshold {threshold}, beside kappa "
        "(slope_t_lo, slope_t_hi: the 95 % Student t-interval over seeds)", "",
        markdown(_rounded(slope)), "",
        "### Cost (benchmark TSVs)", "", markdown(cost(results, rules=BUDGET_RULES, stems=stems)), ""])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a results folder after `snakemake recovery`")
    ap.add_argument("--threshold", type=float, default=0.2, help="effect threshold of the H table")
    ap.add_argument("--steps", action="store_true", help="only the convergence check, from the per-job windows")
    ap.add_argument("--budget", choices=("exploration", "confirm"),
                    help="the budget protocol's tables of this seed set (docs/method.md §10b)")
    args = ap.parse_args(argv)
    if args.budget:
        print(budget_tables(args.results, args.budget, args.threshold))
    else:
        print(steps_table(args.results) if args.steps else tables(args.results, args.threshold))


if __name__ == "__main__":
    main()
