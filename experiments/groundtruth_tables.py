"""Print the markdown tables of docs/results.md, "Does the theory predict the window?", from a
finished `snakemake recovery` run: the budget protocol (docs/method.md §10b, the default) per seed
set, or the dataset protocol (§10).

    python experiments/groundtruth_tables.py RESULTS_DIR --budget confirm      # snakemake recovery_confirm
    python experiments/groundtruth_tables.py RESULTS_DIR --budget exploration  # snakemake recovery
    python experiments/groundtruth_tables.py RESULTS_DIR [--threshold 0.2]     # the dataset protocol
    python experiments/groundtruth_tables.py RESULTS_DIR --steps   # before the aggregate exists
    python experiments/groundtruth_tables.py RESULTS_DIR --seed-level  # config/recovery-seedlevel.yaml

``--seed-level``: the pre-registered seed-level tests of docs/method.md §10b ("Pre-registered: the
seed as the unit", learnwin.stats.seedlevel) on a budget run's seed set (``--budget``, default
exploration), optimizer ``--optimizer`` (default adamw), threshold ``--threshold`` (0.2): claim (d)
on the truth (each seed's slope s of log N̂_emp on -log f, trained network, diagonal transport, d = s -
kappa and its t-interval per model, the verdicts) and the fixed- against learned-gate growth of claim
(b) (each seed's log-N slope b of H_emp, the model means and t-intervals, the group slopes, the
ordering and its exact permutation p, paired one-sided tests over seeds of the six pairs with
Holm's adjustment, the verdict), each seed's value printed.

``--growth``: the pre-registered growth-law run of docs/method.md §10c (config/recovery-growth.yaml)
on a budget run's seed set: H_emp (the learned prefix) and H_max per budget, the growth law per
model from each seed's Box-Cox exponent c, claim (d) per seed against the seed's own kappa with
its censored and uncensored lags counted, the prediction's Kendall tau with its exact p, and the
cost. ``--margin RESULTS_T64``: the margin check of §10c, the paired differences H_emp(T 64) -
H_emp(T 128) per budget on the common lags 4..32 and on the full grids (the runs' scores only).

The budget protocol's tables (learnwin.infra.layout.BUDGET): the confirmatory test (the
pre-registered variant first, then the secondary ones, each with p_holm, its p Holm-adjusted within
its family: the pre-registered row alone, the secondary rows together), H_emp(N) as mean ± sd over
seeds, claim (b) (growth fits per model; each seed's log-N slope, the model means and the
fixed- against learned-gate comparison with the seed as the unit), claim (d) (the slope of log
N̂_emp against -log f beside kappa), and the cost per rule.


The dataset protocol's, from the aggregate tables of learnwin.infra.layout.RECOVERY: the measured window H per
(model, N) as mean ± sd over seeds with its censored count, at the primary threshold; the growth
fits per (model, threshold) (each seed's Box-Cox exponent, its t-interval and verdict, and the
pooled censoring-aware rates); each seed's log-N slope and the model means; the monotonicity and steps checks; the eps-free
predicted growth against the measured one, the out-of-sample scores per prediction variant
(networks, transport, noise), and the cost per rule from the benchmark TSVs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from learnwin.infra import config as lwconfig
from learnwin.infra import io, layout
from learnwin.infra.registry import CELLS, Column
from learnwin.stats import budget, groundtruth, growth, growth_power, seedlevel
from learnwin.stats.claims import markdown, number
from learnwin.stats.intervals import t_interval
from learnwin.stats.prediction import holm

ROOT = Path(__file__).resolve().parents[1]


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


def cost(results: Path, cores: int = 2, rules=RULES, stems=None, parked: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rule of the ground truth, from its benchmark TSVs (those named in ``stems``, default
    all): jobs, total and largest wall seconds, the total over ``cores`` cores in minutes (every
    job is one thread; perfect packing), and the same of the CPU seconds (Snakemake's cpu_time),
    which a run beside other work does not inflate. train_budget's sums add ``parked``'s seconds
    (:func:`parked_segments`): a parked unit's TSV holds its last segment alone."""
    rows = []
    for rule in rules:
        files = sorted(f for f in (layout.under(results, layout.BENCH) / rule).rglob("*.tsv")
                       if stems is None or f.stem in stems)
        if files:
            tsv = pd.concat([pd.read_csv(f, sep="\t") for f in files])
            s, cpu = tsv["s"], pd.to_numeric(tsv["cpu_time"], errors="coerce")
            more = (parked[["wall", "cpu"]].sum() if parked is not None and rule == "train_budget"
                    else {"wall": 0.0, "cpu": 0.0})
            wall, cpu_s = s.sum() + more["wall"], cpu.sum() + more["cpu"]
            rows.append({"rule": rule, "jobs": len(s), "wall s (sum)": number(wall, 0),
                         "wall s (largest job)": number(s.max(), 0), f"sum / {cores} cores (min)": number(wall / cores / 60, 1),
                         "CPU s (sum)": number(cpu_s, 0), f"CPU / {cores} cores (min)": number(cpu_s / cores / 60, 1)})
    return pd.DataFrame(rows)


def parked_segments(results: Path, stems=None) -> pd.DataFrame:
    """The segments of units parked at a sitting's end (the run's sittings record, layout.SITTINGS,
    experiments/seed_by_seed.py; units named in ``stems`` as seed<seed>, default all): model, seed,
    wall and CPU seconds, NaN for a unit parked from outside the driver, whose seconds nobody measured."""
    record = Path(results) / layout.SITTINGS
    entries = [e for e in (yaml.safe_load(record.read_text()) if record.is_file() else None) or []
               if "parked_trainings" in e and (stems is None or f"seed{e['seed']}" in stems)]
    return pd.DataFrame({"model": [e["model"] for e in entries], "seed": [e["seed"] for e in entries],
                         "wall": [e.get("parked_wall_s", np.nan) for e in entries],
                         "cpu": [e.get("parked_cpu_s", np.nan) for e in entries]})


def cost_lines(results: Path, rules, stems=None) -> list[str]:
    """The Cost section: :func:`cost`'s table, and what it holds of the parked segments."""
    parked = parked_segments(results, stems)
    n, missing = len(parked), int(parked["wall"].isna().sum())
    note = (f"train_budget's sums hold the seconds of the {n} parked segments ({layout.SITTINGS})"
            + (f", but for {missing} parked from outside the driver, which nobody measured." if missing else "."))
    return ["### Cost (benchmark TSVs)", "", markdown(cost(results, rules=rules, stems=stems, parked=parked)), "",
            *([note, ""] if n else [])]


#: The growth table's printed columns: the seeds' Box-Cox exponent c (mean, Student t-interval over
#: seeds, verdict), the log-N slope b, the points behind them, and the pooled fits' rates
#: (learnwin.stats.growth).
GROWTH_COLUMNS = ["model", "threshold", "n_seeds", "c_mean", "c_t_lo", "c_t_hi", "verdict", "cut_off", "b_mean",
                  "b_t_lo", "b_t_hi", "n_uncensored", "n_left", "n_censored", "log_b", "power_c"]


def tables(results: str | Path, threshold: float) -> str:
    results = Path(results)
    window = _read(results, "window")
    growth = _read(results, "growth")
    out = [f"## Ground truth of the window in {results}", "",
           f"### Measured H per (model, N), threshold {threshold} (mean ± sd over seeds)", "",
           markdown(window_means(window, threshold)), "",
           "### Growth of H with N (each seed's Box-Cox exponent c by the censored likelihood; seed mean, "
           "95 % Student t-interval over seeds, verdict of docs/method.md §10c)", "",
           markdown(_rounded(growth[[c for c in GROWTH_COLUMNS if c in growth]])), "",
           "### Each seed's log-N slope b (censoring-aware fit of H = a + b log N), per model", "",
           markdown(slope_means(io.read_table(layout.under(results, layout.RECOVERY["slopes"]), "seed_growth"))), ""]
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

    def path(name):
        return layout.under(results, layout.BUDGET[name].format(seed_set=seed_set))

    def read(name):
        return io.read_table(path(name), layout.budget_schema(name))

    confirm = with_holm(read("confirm")).sort_values(["pre_registered", "threshold", "networks", "transport", "noise"],
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
        "### Claim (b): growth of H_emp with N (each seed's Box-Cox exponent c by the censored likelihood: "
        "seed mean, 95 % Student t-interval over seeds, verdict of docs/method.md §10c)", "",
        markdown(_rounded(growth[[c for c in GROWTH_COLUMNS if c in growth]])), "",
        "### Claim (b): each seed's log-N slope b, per model, beside its group's slope (docs/method.md §10b)", "",
        markdown(slope_means(io.read_table(path("slopes"), "seed_growth"))), "",
        "### Claim (b): fixed- against learned-gate cells, the seed as the unit (docs/method.md §10b)", "",
        markdown(_rounded(io.read_table(path("groups"), "seed_growth"))), "",
        f"### Claim (d): slope of log N̂_emp(l) against -log f(l), threshold {threshold}, beside kappa "
        "(slope_t_lo, slope_t_hi: the 95 % Student t-interval over seeds)", "",
        markdown(_rounded(slope)), "",
        *cost_lines(results, BUDGET_RULES, stems)])


def with_holm(confirm: pd.DataFrame) -> pd.DataFrame:
    """The confirmatory table with p_holm: p_perm Holm-adjusted within its family (docs/method.md
    §10b: the pre-registered row alone; the secondary rows, every other (threshold, networks,
    transport, noise), together), the adjustment the quoted secondary rows carry."""
    return confirm.assign(p_holm=confirm.groupby("pre_registered")["p_perm"].transform(holm))


def _per_seed(g: pd.DataFrame, column: str, digits: int = 2) -> str:
    """"seed: value" of each seed of one model, in seed order."""
    return ", ".join(f"{int(r.seed)}: {number(getattr(r, column), digits)}" for r in g.sort_values("seed").itertuples())


def _interval(lo, hi, digits: int = 2) -> str:
    return f"[{number(lo, digits)}, {number(hi, digits)}]"


def _models(table: pd.DataFrame) -> pd.DataFrame:
    """``table``'s rows in registry order of its model column (an empty table as it is)."""
    if table.empty:
        return table
    order = {m: i for i, m in enumerate(CELLS)}
    return table.sort_values("model", key=lambda c: c.map(order), kind="stable")


def slope_means(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per (model, [optimizer,] threshold) of :func:`learnwin.stats.growth.seed_growth`'s table: each
    seed's log-N slope b, their mean and 95 % t-interval over the seeds, and the group slope (the
    mean of the group's model means) of the registry's expected growth (docs/method.md §10b)."""
    keys = [c for c in ("optimizer", "threshold") if c in per_seed]
    rows = []
    for key, block in per_seed.groupby(keys, sort=True):
        test = seedlevel.group_test(block, dict(Column("expected_growth")))
        slope = test["models"].set_index("model")["group_slope"]
        for model, g in block.groupby("model", sort=False):
            mean, lo, hi, n = t_interval(g["b"])
            rows.append({"model": model, **{k: number(v, 3) if k == "threshold" else v for k, v in zip(keys, key)},
                         "b per seed": _per_seed(g, "b"), "n": n,
                         "mean b": number(mean), "95 % t-interval": _interval(lo, hi),
                         "group slope": number(slope.get(model, np.nan))})
    return _models(pd.DataFrame(rows)) if rows else pd.DataFrame(rows)


def seed_level_tables(results: str | Path, seed_set: str = "exploration", threshold: float = 0.2,
                      optimizer: str = "adamw") -> str:
    """The pre-registered seed-level tests of docs/method.md §10b ("Pre-registered: the seed as the
    unit") on a budget run's seed set, from its window, learning_budget and network_H_N tables and
    its jobs' envelopes (a run aggregated by any version of the budget protocol)."""
    results = Path(results)

    def read(name):
        table = io.read_table(layout.under(results, layout.BUDGET[name].format(seed_set=seed_set)),
                              layout.budget_schema(name))
        table = table[table["optimizer"] == optimizer]
        if table.empty:
            raise SystemExit(f"{results}: no {optimizer} rows in the {seed_set} seed set's {name} table")
        return table[np.isclose(table["threshold"], threshold)] if "threshold" in table else table

    window, lb = read("window"), read("learning_budget")
    seeds = set(window["seed"])
    envelope = pd.concat([io.read_table(p, "envelope") for p in
                          layout.glob(results, layout.BUDGET_SNAPSHOT["envelope"], optimizer=optimizer)],
                         ignore_index=True)
    envelope = envelope[envelope["seed"].isin(seeds)]
    alphas = budget.kappa_inputs(read("network_H_N"))
    alphas = alphas[(alphas["epoch"] == "trained") & (alphas["transport"] == "diagonal")]
    kappa = dict(zip(alphas["model"], budget.kappa_of(alphas["alpha"])))
    s = budget.seed_slopes(lb, envelope)
    s = s[(s["epoch"] == "trained") & (s["transport"] == "diagonal")]
    d = seedlevel.kappa_test(s, kappa)
    d_rows = [{"model": r.model, "kappa": number(r.kappa),
               "s per seed": _per_seed(s[s["model"] == r.model], "slope"), "n": r.n_seeds, "mean s": number(r.s_mean),
               "mean d = s - kappa": number(r.d_mean), "95 % t-interval of d": _interval(r.d_lo, r.d_hi),
               "band ± kappa/2": f"± {number(r.band)}", "verdict": r.verdict} for r in d.itertuples()]
    b = growth.seed_growth(window.rename(columns={"H_emp": "H"}))
    test = seedlevel.group_test(b, dict(Column("expected_growth")))
    models = test["models"].set_index("model")
    label = {seedlevel.FIXED: "fixed gates", seedlevel.LEARNED: "learned gates"}
    b_rows = [{"model": m, "group": label[models.loc[m, "group"]], "b per seed": _per_seed(g, "b"),
               "n": int(models.loc[m, "n_seeds"]), "mean b": number(models.loc[m, "b_mean"]),
               "95 % t-interval": _interval(models.loc[m, "b_lo"], models.loc[m, "b_hi"]),
               "group slope": number(models.loc[m, "group_slope"])}
              for m, g in b[b["model"].isin(models.index)].groupby("model", sort=False)]
    pairs = test["pairs"].assign(**{c: ["< 0.0001" if v < 1e-4 else number(v, 4) for v in test["pairs"][c]]
                                    for c in ("p_fixed_above", "holm_fixed_above", "p_learned_above", "holm_learned_above")})
    sm = test["summary"]
    head = f"seed set {seed_set} ({', '.join(map(str, sorted(seeds)))}), {optimizer}, threshold {threshold:g}"
    return "\n".join([
        f"## Seed-level tests in {results}, {head} (docs/method.md §10b, \"Pre-registered: the seed as the unit\")", "",
        "Intervals: two-sided 95 % Student t-intervals over the seeds of a model (n - 1 degrees of freedom).", "",
        "### Claim (d) on the truth: each seed's slope s of log N̂_emp(l) on -log f(l) (trained network, diagonal "
        "transport), d = s - kappa", "",
        markdown(_models(pd.DataFrame(d_rows))), "",
        f"Claim (d) on the truth: **{seedlevel.kappa_overall(d['verdict'])}** (holds: every model consistent "
        "with kappa; fails: every model differs from it; mixed otherwise).", "",
        "### Claim (b), the groups: each seed's log-N slope b of H_emp(N) (censoring-aware fit of H = a + b ln N)", "",
        markdown(_models(pd.DataFrame(b_rows))), "",
        f"Group slopes: fixed gates ({sm['fixed']}) {number(sm['slope_fixed'])}, learned gates ({sm['learned']}) "
        f"{number(sm['slope_learned'])}.", "",
        "### Claim (b): paired one-sided t-tests over seeds of the (fixed, learned) pairs, Holm-adjusted over "
        "the pairs", "",
        markdown(_rounded(pairs)), "",
        f"(1) Ordering: {sm['ordering']} (exact permutation p over the {sm['n_assignments']} assignments: "
        f"{number(sm['p_perm_fixed_above'], 3)} fixed above, {number(sm['p_perm_learned_above'], 3)} learned above). "
        f"(2) Pairs at Holm-adjusted p < {seedlevel.P_PAIRS}: {sm['pairs_fixed_above']} of {sm['n_pairs']} fixed above, "
        f"{sm['pairs_learned_above']} of {sm['n_pairs']} learned above.", "",
        f"The lead (the fixed-gate cells gain more lags per e-fold of N than the learned-gate cells): **{sm['verdict']}**.", ""])


def _budget_reader(results: Path, seed_set: str, optimizer: str, threshold: float):
    """A reader of one budget aggregate table, at ``optimizer`` and ``threshold`` where it has them."""
    def read(name):
        table = io.read_table(layout.under(results, layout.BUDGET[name].format(seed_set=seed_set)),
                              layout.budget_schema(name))
        if "optimizer" in table:
            table = table[table["optimizer"] == optimizer]
        return table[np.isclose(table["threshold"], threshold)] if "threshold" in table else table
    return read


def _counts(g: pd.DataFrame, exact: str, left: str, right: str) -> str:
    """"seed: uncensored/left/right" of each seed of one model."""
    return ", ".join(f"{int(r.seed)}: {int(getattr(r, exact))}/{int(getattr(r, left))}/{int(getattr(r, right))}"
                     for r in g.sort_values("seed").itertuples())


#: A growth run's folder's table of the power its design had for each undecided cell (docs/method.md
#: §10d), written by ``--design-power`` (a few CPU minutes a cell), read by ``--growth``.
DESIGN_POWER = "design_power.parquet"


def _power_rows(window: pd.DataFrame, model: str, design, n_seeds: int, n_hi: float, pool: int) -> list[dict]:
    """growth_power.design_power through ``model``'s mean H_emp at N 256 and ``n_hi`` in ``window``,
    at the §10d table's calibrated noise: one row per law of growth_power.STATED."""
    noise = growth_power.calibrated_noise(io.read_table(ROOT / layout.GROWTH_POWER, "growth_power"))
    h = window[window["model"] == model].groupby("N")["H_emp"].mean()
    n_lo = 2.0**8
    power = growth_power.design_power(h[n_lo], h[n_hi], design, n_seeds, sigma_lag=noise, n_lo=n_lo, n_hi=n_hi,
                                      pool=pool)
    return [dict(model=model, law=law, c_true=c, p_true=power[law], h_lo=h[n_lo], h_hi=h[n_hi], n_hi=n_hi,
                 seeds=n_seeds, n_max=int(design.n_max), sigma_lag=noise, pool=pool) for law, c in growth_power.STATED]


POWER_COLUMNS = ["model", "law", "c_true", "p_true", "h_lo", "h_hi", "n_hi", "seeds", "n_max", "sigma_lag", "pool"]


def design_power_table(window: pd.DataFrame, shape: pd.DataFrame, lags: list, budgets: list,
                       pool: int = 2000) -> pd.DataFrame:
    """Per model whose verdict is undecided (not cut off) and law of growth_power.STATED, the power
    the run's design had (learnwin.stats.growth_power.design_power through the cell's mean H_emp at
    N 256 and at the last reported budget, as many seeds, the §10d table's calibrated noise)."""
    design = growth_power.Design(lags=tuple(lags), n_max=int(budgets[-1]), n_min=int(budgets[0]))
    rows = [row for r in shape.itertuples() if r.verdict == growth.UNDECIDED and not r.cut_off
            for row in _power_rows(window, r.model, design, int(r.n_seeds), float(budgets[-2]), pool)]
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def arm_power_table(window: pd.DataFrame, arm: dict, pool: int = 2000) -> pd.DataFrame:
    """The power of a new arm's design (config ``arm``: its recovery lags, budgets, seeds and models;
    docs/method.md §10e) for each of its models, anchored on this run's ``window``: the model's mean
    H_emp at N 256 and at the largest budget where none of its seeds is right-censored."""
    rec = arm["recovery"]
    design = growth_power.Design(lags=tuple(rec["lags"]), n_max=int(rec["budgets"][-1]), n_min=int(rec["budgets"][0]))
    rows = []
    for model in rec["models"]:
        w = window[window["model"] == model]
        n_hi = float(w.groupby("N")["censored"].any().loc[lambda c: ~c].index.max())
        rows += _power_rows(window, model, design, len(rec["seeds"]), n_hi, pool)
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def design_power_words(results: Path, shape: pd.DataFrame) -> dict[str, str] | None:
    """The committed :data:`DESIGN_POWER` table of ``results`` as each undecided cell's words, "log N:
    0.27, c 0.18: 0.35" (None without the table); an error naming the command where its cells are
    not the undecided ones."""
    path = results / DESIGN_POWER
    if not path.is_file():
        return None
    table = io.read_table(path, "design_power")
    undecided = {r.model for r in shape.itertuples() if r.verdict == growth.UNDECIDED and not r.cut_off}
    if set(table["model"]) != undecided:
        raise SystemExit(f"{path} holds {sorted(set(table['model']))}, the undecided cells are {sorted(undecided)}: "
                         f"python experiments/groundtruth_tables.py {results} --design-power")
    return {m: ", ".join(f"{'c ' + number(r.c_true) if r.c_true else r.law}: {r.p_true:.2f}" for r in g.itertuples())
            for m, g in table.groupby("model", sort=False)}


def growth_law_rows(slopes: pd.DataFrame, shape: pd.DataFrame, power: dict[str, str] | None = None) -> pd.DataFrame:
    """Per model: each seed's c, their mean and t-interval, the verdict of docs/method.md §10c
    (marked where the window is cut off), the mean b with its t-interval, the points per seed and,
    with ``power`` (:func:`design_power_words`), the power an undecided cell's design had."""
    s = shape.set_index("model")
    rows = [{"model": m, "c per seed": _per_seed(g, "c"), "n": int(s.loc[m, "n_seeds"]),
             "mean c": number(s.loc[m, "c_mean"]), "95 % t-interval of c": _interval(s.loc[m, "c_t_lo"], s.loc[m, "c_t_hi"]),
             "verdict": s.loc[m, "verdict"] + (f" ({growth.CUT_OFF})" if s.loc[m, "cut_off"] else ""),
             "mean b (lags per e-fold)": number(s.loc[m, "b_mean"]),
             "95 % t-interval of b": _interval(s.loc[m, "b_t_lo"], s.loc[m, "b_t_hi"]),
             "points per seed (uncensored/left/right)": _counts(g, "n_uncensored", "n_left", "n_censored"),
             **({growth_power.P_DECIDED: power.get(m, "—")} if power is not None else {})}
            for m, g in slopes.groupby("model", sort=False)]
    return _models(pd.DataFrame(rows))


#: A data folder's record of its run (data/runs/README.md): the (model, seed) jobs it should hold.
RUN_RECORD = "run.yaml"


def run_jobs(results: Path, optimizer: str) -> tuple[pd.DataFrame, list[str]]:
    """The per-job scores of a budget run's folder (a results folder or a data folder of the same
    layout) and the (model, seed) jobs its record (:data:`RUN_RECORD`: models, seeds) names but the
    folder lacks, as "model seed" (none without a record): a partial run is read as far as it goes."""
    paths = layout.glob(results, layout.BUDGET_RUN, optimizer=optimizer)
    if not paths:
        raise SystemExit(f"{results}: no {optimizer} job scores ({layout.BUDGET_RUN})")
    scores = pd.concat([io.read_table(p, "budget") for p in paths], ignore_index=True)
    record = results / RUN_RECORD
    if not record.is_file():
        return scores, []
    want = yaml.safe_load(record.read_text())
    have = set(zip(scores["model"], scores["seed"].astype(int)))
    return scores, [f"{m} {s}" for m in want["models"] for s in want["seeds"] if (m, int(s)) not in have]


def growth_inputs(results: Path, threshold: float, optimizer: str):
    """A growth run's (jobs it lacks, budgets, learning budgets, window per seed and budget, each seed's
    growth law, the law per model), from its per-job scores as the aggregate computes them."""
    scores, missing = run_jobs(results, optimizer)
    budgets = sorted(scores.loc[scores["target"] == "control", "N"].unique())
    lb = budget.learning_budget(scores, [threshold], budgets)
    window = budget.window_by_budget(lb, budgets)
    slopes = growth.seed_growth(window.rename(columns={"H_emp": "H"}))
    return missing, budgets, lb, window, slopes, growth.shape_table(slopes)


def growth_tables(results: str | Path, seed_set: str = "exploration", threshold: float = 0.2,
                  optimizer: str = "adamw") -> str:
    """The pre-registered growth-law run of docs/method.md §10c from its per-job scores (the window
    and the growth law, learnwin.stats.budget and .growth, as the aggregate computes them) and,
    where the aggregate's tables are there, claim (d) and the prediction (a partial run prints the
    jobs it lacks and what it can)."""
    results = Path(results)
    missing, budgets, lb, window, slopes, shape = growth_inputs(results, threshold, optimizer)
    seeds = sorted(set(window["seed"]))
    lags = sorted(lb["lag"].unique())
    power = design_power_words(results, shape)
    by_max = window.assign(H=window["H_max"], censored=window["H_max"] == lags[-1], left_censored=window["H_max"] == 0)
    h_max_slopes = growth.seed_growth(by_max)
    h_max = window.groupby(["model", "N"]).agg(mean=("H_max", "mean"), sd=("H_max", "std"), holes=("holes", "mean"))
    head = f"seed set {seed_set} ({', '.join(map(str, seeds))}), {optimizer}, threshold {threshold:g}"
    out = [
        f"## The growth law in {results}, {head} (docs/method.md §10c)", "",
        *([f"Partial run: {len(missing)} (model, seed) jobs not in {results}: {', '.join(missing)}.", ""]
          if missing else []),
        f"Lag grid {lags[0]}..{lags[-1]} ({len(lags)} lags); the window at every budget but the last, which only "
        "confirms. Intervals: two-sided 95 % Student t-intervals over the seeds of a model (n - 1 degrees of freedom).",
        "", "### H_emp(N): the learned prefix of the grid (mean ± sd over seeds, right-censored seeds)", "",
        markdown(budget_window_means(budget.window_over_seeds(window), threshold)), "",
        "### H_max(N): the largest learned grid lag (secondary; mean ± sd over seeds, mean holes below it)", "",
        markdown(_model_by_N_holes(h_max)), "",
        "### Claim (b), the growth law: each seed's Box-Cox exponent c of H_emp(N) (c = 0: log N; c > 0: a power of "
        "N), by the censored likelihood", "",
        markdown(growth_law_rows(slopes, shape, power)), "",
        *([f"{growth_power.P_DECIDED}: the power the run's design had for an undecided cell (docs/method.md §10d): the "
           "probability that the rule names log N, or a power of N with c 0.18, when that law is the truth through the "
           "cell's mean window at N 256 and the last reported budget, on as many seeds, at the power table's calibrated noise (`python "
           f"experiments/groundtruth_tables.py {results} --design-power` writes {DESIGN_POWER}).", ""] if power else []),
        "### The growth law under H_max, the largest learned lag (secondary: which verdicts the definition moves)",
        "", markdown(growth_law_rows(h_max_slopes, growth.shape_table(h_max_slopes))), ""]
    read = _budget_reader(results, seed_set, optimizer, threshold)
    aggregate = [layout.under(results, layout.BUDGET[n].format(seed_set=seed_set)) for n in ("network_alpha", "confirm")]
    if not all(p.is_file() for p in aggregate):
        return "\n".join([*out, f"Claim (d) and the prediction need the aggregate's network_alpha and confirm tables "
                                f"(`snakemake recovery`), not in {results}.", ""])
    # claim (d): each seed's censored slope against its own network's kappa
    envelope = pd.concat([io.read_table(p, "envelope") for p in
                          layout.glob(results, layout.BUDGET_SNAPSHOT["envelope"], optimizer=optimizer)],
                         ignore_index=True)
    s = budget.seed_slopes(lb, envelope[envelope["seed"].isin(seeds)])
    s = s[(s["epoch"] == "trained") & (s["transport"] == "diagonal")]
    alpha = read("network_alpha")
    alpha = alpha[(alpha["epoch"] == "trained") & (alpha["transport"] == "diagonal") & (alpha["noise"] == "per_lag")]
    s = s.merge(alpha[["model", "seed", "alpha"]], on=["model", "seed"], how="left")
    s = s.assign(kappa=budget.kappa_of(s["alpha"]), d=lambda x: x["slope"] - x["kappa"])
    d = seedlevel.kappa_test(s).set_index("model")
    d_rows = [{"model": m, "s per seed": _per_seed(g, "slope"), "kappa per seed": _per_seed(g, "kappa"),
               "d per seed": _per_seed(g, "d"), "n": int(d.loc[m, "n_seeds"]), "mean d": number(d.loc[m, "d_mean"]),
               "95 % t-interval of d": _interval(d.loc[m, "d_lo"], d.loc[m, "d_hi"]),
               "band ± kappa/2": f"± {number(d.loc[m, 'band'])}", "verdict": d.loc[m, "verdict"],
               "lags per seed (uncensored/left/right)": _counts(g, "n_lags", "n_left", "n_right")}
              for m, g in s.groupby("model", sort=False)]
    confirm = read("confirm")
    pre = confirm[(confirm["networks"] == "init") & (confirm["transport"] == "diagonal") & (confirm["noise"] == "per_lag")]
    prediction = (["### The prediction from the init networks (diagonal transport, per_lag noise): mean Kendall tau-b "
                   "within N, exact relabelling p", "",
                   markdown(_rounded(pre[["threshold", "n_models", "n_blocks", "tau_mean", "p_perm", "n_perms"]]))]
                  if len(d) > 1 else
                  [f"No prediction from the init networks: it orders cells, and this run is an arm of one cell, "
                   f"{d.index[0]} (docs/method.md §10e)."])
    return "\n".join([
        *out,
        "### Claim (d) on the truth: each seed's censored slope s of log N̂_emp(l) on -log f(l) (trained network, "
        "diagonal transport) against its own kappa, d = s - kappa", "",
        markdown(_models(pd.DataFrame(d_rows))), "",
        f"Claim (d) on the truth: **{seedlevel.kappa_overall(d['verdict'])}**.", "",
        *prediction, "",
        *cost_lines(results, BUDGET_RULES, {seed_set, *(f"seed{x}" for x in seeds)})])


def _model_by_N_holes(h_max: pd.DataFrame) -> pd.DataFrame:
    """H_max mean ± sd per (model, N) with the mean holes below it."""
    text = {key: f"{number(r['mean'], 1)} ± {number(r['sd'], 1)} ({number(r['holes'], 1)} holes)"
            for key, r in h_max.iterrows()}
    Ns = sorted({n for _, n in text})
    models = [m for m in CELLS if any(k[0] == m for k in text)]
    return pd.DataFrame([{"model": m, **{f"N = {n}": text.get((m, n), "–") for n in Ns}} for m in models])


def run_windows(results: Path, threshold: float, max_lag: int | None = None) -> pd.DataFrame:
    """H_emp per (model, seed, N) from a budget run's per-job scores (docs/method.md §10b), on its
    grid lags up to ``max_lag``; the budgets are the control's."""
    scores = pd.concat([io.read_table(p, "budget") for p in layout.glob(results, layout.BUDGET_RUN)],
                       ignore_index=True)
    if max_lag is not None:
        scores = scores[scores["lag"] <= max_lag]
    budgets = sorted(scores.loc[scores["target"] == "control", "N"].unique())
    return budget.window_by_budget(budget.learning_budget(scores, [threshold], budgets), budgets)


#: The margin check's common lags and its tolerance: one grid step (docs/method.md §10c).
MARGIN_LAG, MARGIN_STEP = 32, 4


def margin_tables(results_long: str | Path, results_short: str | Path, threshold: float = 0.2) -> str:
    """The margin check of docs/method.md §10c: per model and budget N up to the short run's last
    reported one, the paired difference D = H_emp(short) - H_emp(long) over seeds with its
    t-interval, on the common lags up to 32 (D_32) and on each run's full grid (D_full), and the
    rule's two verdicts at the largest such N."""
    long_, short = Path(results_long), Path(results_short)
    keys = ["model", "seed", "N"]
    parts = {}
    for name, cut in (("D_32", MARGIN_LAG), ("D_full", None)):
        a = run_windows(short, threshold, cut).set_index(keys)["H_emp"]
        b = run_windows(long_, threshold, cut).set_index(keys)["H_emp"]
        parts[name] = (a - b).dropna().rename(name)
        parts[f"short_{name}"] = a
    d = pd.concat([parts["D_32"], parts["D_full"]], axis=1).reset_index()
    n_top = d["N"].max()
    rows, verdict = [], {}
    for (m, N), g in d.groupby(["model", "N"], sort=True):
        row = {"model": m, "N": int(N)}
        for name in ("D_32", "D_full"):
            mean, lo, hi, n = t_interval(g[name])
            row[f"mean {name}"] = number(mean, 1)
            row[f"95 % t-interval of {name}"] = _interval(lo, hi, 1)
            if N == n_top:
                verdict[(m, name)] = (lo, hi)
        rows.append(row)
    short_full = parts["short_D_full"].reset_index()
    passes_32 = {m: (lo <= 0 <= hi) or (-MARGIN_STEP <= lo and hi <= MARGIN_STEP)
                 for (m, name), (lo, hi) in verdict.items() if name == "D_32"}
    past = short_full[short_full["N"] == n_top].groupby("model")["H_emp"].max() > MARGIN_LAG
    shown = {m: verdict[(m, "D_full")][0] > MARGIN_STEP for m in past.index if past[m]}
    lines = [f"## The margin check of docs/method.md §10c: {short} (T 64) against {long_} (T 128), "
             f"threshold {threshold:g}", "",
             "D = H_emp(T 64) - H_emp(T 128) per seed, paired; D_32 on the common lags up to 32, D_full on each run's "
             "whole grid. Intervals: two-sided 95 % Student t-intervals over the seeds.", "",
             markdown(_models(pd.DataFrame(rows))), "",
             f"At N = {int(n_top)}: the margin T/2 is **{'supported' if all(passes_32.values()) else 'not supported'}** "
             f"(D_32's interval covers 0 or lies within ±{MARGIN_STEP} lags: "
             f"{', '.join(f'{m} {chr(10003) if ok else chr(10007)}' for m, ok in passes_32.items())}); "
             "the boundary effect is shown for "
             f"{', '.join(m for m, ok in shown.items() if ok) or 'no model'} "
             f"(D_full's interval above {MARGIN_STEP} lags, of the models whose T 64 window passes {MARGIN_LAG}: "
             f"{', '.join(shown) or 'none'}).", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a results folder after `snakemake recovery`")
    ap.add_argument("--threshold", type=float, default=0.2, help="effect threshold of the H table")
    ap.add_argument("--steps", action="store_true", help="only the convergence check, from the per-job windows")
    ap.add_argument("--budget", choices=("exploration", "confirm"),
                    help="the budget protocol's tables of this seed set (docs/method.md §10b)")
    ap.add_argument("--seed-level", action="store_true",
                    help="the pre-registered seed-level tests of docs/method.md §10b on the --budget seed set "
                         "(default exploration)")
    ap.add_argument("--optimizer", default="adamw", help="the optimizer of the --seed-level and --growth tables")
    ap.add_argument("--growth", action="store_true",
                    help="the pre-registered growth-law run of docs/method.md §10c on the --budget seed set")
    ap.add_argument("--design-power", action="store_true",
                    help=f"write the growth run's {DESIGN_POWER}: the power its design had for each undecided cell")
    ap.add_argument("--arm-power", metavar="CONFIG", type=Path,
                    help="the power of a new arm's design (docs/method.md §10e) anchored on this growth run's windows")
    ap.add_argument("--margin", metavar="RESULTS_T64",
                    help="the margin check of docs/method.md §10c against this T 64 run's results folder")
    args = ap.parse_args(argv)
    if args.design_power:
        results = Path(args.results)
        _, budgets, lb, window, _, shape = growth_inputs(results, args.threshold, args.optimizer)
        table = design_power_table(window, shape, sorted(lb["lag"].unique()), budgets)
        io.write_table(table, results / DESIGN_POWER, "design_power")
        print(markdown(_rounded(table)))
    elif args.arm_power:
        window = growth_inputs(Path(args.results), args.threshold, args.optimizer)[3]
        print(markdown(_rounded(arm_power_table(window, lwconfig.load(ROOT, args.arm_power)))))
    elif args.margin:
        print(margin_tables(args.results, args.margin, args.threshold))
    elif args.growth:
        print(growth_tables(args.results, args.budget or "exploration", args.threshold, args.optimizer))
    elif args.seed_level:
        print(seed_level_tables(args.results, args.budget or "exploration", args.threshold, args.optimizer))
    elif args.budget:
        print(budget_tables(args.results, args.budget, args.threshold))
    else:
        print(steps_table(args.results) if args.steps else tables(args.results, args.threshold))


if __name__ == "__main__":
    main()
