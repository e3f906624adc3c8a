"""The paper's four claims as checks, each with its count over seeds (docs/method.md §8b; §4, §7, §8).

Per-seed measurements (:func:`measure`, one table per claim):

- (a) envelope class, :func:`envelope_weights`: from the per-seed decay fits (scope ``seed{S}`` of
  the decay table of each (optimizer, model, epoch)), ``w_power`` = the summed Akaike weight of the
  power and log classes (power, log, power_floor, log_floor) against the exponential family
  (exp, exp_floor, tempered). A seed is power-law-like when w_power > 0.5. Choice: the tempered
  law counts with the exponential family (its weight is also reported, ``w_tempered``).
  learnwin.stats.decay keeps its cut-off l_c inside the fit window, so beyond l_c it falls faster than
  any power law and, like an exponential, gives an H_N that grows only as a power of log N; a
  mixture of two exponentials selects it (tests/test_claims.py). A floor variant belongs to its
  base law's family.
- (b) growth of H_N in N, :func:`growth_law`: H = a + b log N against H = a N^c, both by least
  squares on H over the same points: the N with 0 < H_N < lag-grid maximum. H_N at the maximum
  is right-censored (the window cannot grow past the grid) and dropped; the run is marked
  ``censored``. Both laws have 2 parameters, so AIC = n log(SSE / n) + 4 ranks them as SSE does.
  Verdict: "logarithmic" or "power" (the smaller SSE; ties to logarithmic), "flat" when H_N is
  constant on the points, and with fewer than 3 points "censored" (when censoring removed
  points) or "too few points". Expected: logarithmic (saturating) for const and shared ("flat"
  does not count), power for diag, gru and lstm. The expectations of (a) and (b) are the cell
  registry's (:class:`learnwin.infra.registry.CellSpec`); a cell with none (a user's own) gets
  ``expected`` "none": its verdict is reported, never held, and :func:`claim_scores` leaves it out.
- (c) optimizer, AdamW against the run's first optimizer with a plain rate, Lambda = lr (the optimizer
  registry's order of the entries whose rate rule is :data:`learnwin.infra.optimizers.PLAIN`: plain
  ``sgd``, else ``sgd_momentum``; the row's optimizer names which) with paired seeds: the spread of log tau_q,
  :func:`log_tau_iqr` (IQR over units; tau = inf counts as the largest values, NaN is left out),
  and tau_env = -1 / the OLS slope of log f on l over the lag grid (:func:`decay_length`; the
  envelope's decay length, comparable across decay classes). The val R^2 of each optimizer is
  reported beside them, to show whether SGD reached a comparable fit.
- (d) master law: the per-seed slope and its 95 % CI (master.parquet). A seed is "within band" when
  its CI lies inside [1 - :data:`SLOPE_BAND`, 1 + :data:`SLOPE_BAND`] (the slope within half of
  the law's, as §10b's band is half of kappa), "excludes 1" when its CI excludes 1 and is not
  inside the band, "undecided" otherwise: an interval that merely covers 1 supports nothing.

H_N and the master law are measured per noise definition (column ``noise`` of H_N.parquet and
master.parquet, docs/method.md §7b; a table without it is an error). :func:`claim_table` gives one
verdict per (claim, check, model, optimizer, noise, transport, functional) from the files
:func:`inputs` lists (the claims rule reads exactly those). ``transport`` and ``functional`` name
the envelope measured (learnwin.stats.decay.FUNCTIONALS; docs/method.md §4b): (a) and (c)'s
tau_env per functional (diagonal: gamma; exact: signal, diag_entries, norm), (c)'s log tau_q IQR per
transport on its primary functional (tau from :data:`TAU_SOURCE`), (b) and (d) per transport on the
primary functional, whose f the window uses: ``k`` of
``n`` seeds agree with the expectation, and the claim holds for that row when k > n / 2
(choice). Seeds without a value (a diverged run, a CI that is NaN) are left out of n; ``seeds``
lists the n seeds and ``values`` the row's measure for each (w_power; the power exponent c, NaN
where no power law was fitted; AdamW's value; the slope), ``estimate`` and ``spread`` are their
mean and sd, ``detail`` spells out the numbers. :func:`to_markdown` renders it and
:func:`claim_scores` counts the rows that hold per claim. :func:`claim_words` gives a claim its
verdict word over one or several runs (docs/method.md §8b, "Verdict words"): the README's answer
table and each run's findings.md use it alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from learnwin.infra import io, layout
from learnwin.infra.optimizers import OPTIMIZERS, PLAIN
from learnwin.infra.registry import Column
from learnwin.stats.decay import FUNCTIONALS, PRIMARY, ols

POWER_FAMILY = ("power", "log", "power_floor", "log_floor")
#: The paper's expectations per model: live views of the registry (learnwin.infra.registry.CellSpec);
#: a cell without one is absent, and its rows of claims (a) and (b) are reported but not scored.
EXPECTED_CLASS = Column("expected_class")
EXPECTED_GROWTH = Column("expected_growth")
NO_EXPECTATION = "none"  # the ``expected`` of such a row; claim_scores leaves it out
MIN_GROWTH_POINTS = 3
NOISE_ANY = "-"  # noise column of claims (a) and (c), which do not depend on the noise definition
RUN = ["model", "optimizer", "seed"]
#: The artifact of each input table of :func:`measure` (learnwin.infra.io schema names).
INPUTS = {"decay": "decay", "envelope": "envelope", "units": "units", "lyapunov": "lyapunov", "H_N": "H_N",
          "master": "master", "summary": "summary"}
KEY = ["claim", "check", "model", "optimizer", "noise", "transport", "functional"]
SCOPE = ["transport", "functional"]  # the envelope a verdict is measured on (docs/method.md §8b)
COLUMNS = [*KEY, "expected", "verdict", "k", "n", "holds", "estimate", "spread", "seeds", "values", "detail"]


# -- per-seed measurements ------------------------------------------------------------------


def envelope_weights(decay: pd.DataFrame) -> pd.DataFrame:
    """(a) Per (model, optimizer, seed, transport, functional) of stacked decay tables: w_power,
    w_tempered, w_exp (Akaike weights summed by family), the selected law and the seed's class."""
    d = with_functional(decay, "decay table")
    d = d[d["scope"].str.fullmatch(r"seed\d+")]
    d = d.assign(seed=d["scope"].str.removeprefix("seed").astype("int64"),
                 family=np.where(d["law"].isin(POWER_FAMILY), "w_power",
                                 np.where(d["law"] == "tempered", "w_tempered", "w_exp")))
    w = d.pivot_table(index=[*RUN, *SCOPE], columns="family", values="weight", aggfunc="sum", fill_value=0.0)
    w = w.reindex(columns=["w_power", "w_tempered", "w_exp"], fill_value=0.0).astype(float)
    w.loc[w.sum(axis=1) == 0] = np.nan  # no law was fitted (window too short)
    law = d[d["selected"].astype(bool)].set_index([*RUN, *SCOPE])["law"].rename("law")
    out = w.join(law).reset_index()
    out["law"] = out["law"].fillna("none")
    out["class"] = np.where(out["w_power"].isna(), "no fit",
                            np.where(out["w_power"] > 0.5, "power-law-like", "exponential"))
    return out


def _fit_power(N: np.ndarray, H: np.ndarray) -> tuple[float, float]:
    """Least squares of H = a N^c on H -> (c, SSE): a is profiled out, c on a grid, then refined."""
    from scipy.optimize import minimize_scalar

    z = np.log(N) - np.log(N).mean()  # centred: a is then H near the geometric-mean N

    def sse(c):
        X = np.exp(np.multiply.outer(np.atleast_1d(c), z))
        a = X @ H / np.sum(X * X, axis=1)
        return np.sum((H - a[:, None] * X) ** 2, axis=1)

    grid = np.linspace(-2.0, 4.0, 1201)
    i = int(np.argmin(sse(grid)))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    c = minimize_scalar(lambda c: sse(c)[0], bounds=(lo, hi), method="bounded",
                        options={"xatol": 1e-10}).x
    return float(c), float(sse(c)[0])


def growth_law(N, H, lag_max: float) -> dict:
    """(b) Growth law of one H_N(N) curve (see the module docstring) -> dict of the fit."""
    N, H = np.asarray(N, dtype=float), np.asarray(H, dtype=float)
    censored = H >= lag_max
    keep = (H > 0) & ~censored
    n = int(keep.sum())
    nan = float("nan")
    out = dict(n_points=n, censored=bool(censored.any()), b_log=nan, c_power=nan,
               sse_log=nan, sse_power=nan, aic_log=nan, aic_power=nan)
    if n < MIN_GROWTH_POINTS:
        return {**out, "growth": "censored" if out["censored"] else "too few points"}
    N, H = N[keep], H[keep]
    if np.ptp(H) == 0:
        return {**out, "growth": "flat"}
    _, b, sse_log = ols(np.log(N), H)
    c, sse_power = _fit_power(N, H)
    aic_log, aic_power = (float(n * np.log(max(sse, 1e-300) / n) + 4) for sse in (sse_log, sse_power))
    return {**out, "b_log": float(b), "c_power": c, "sse_log": float(sse_log), "sse_power": sse_power,
            "aic_log": aic_log, "aic_power": aic_power,
            "growth": "logarithmic" if sse_log <= sse_power else "power"}


def window_growth(H_N: pd.DataFrame, lag_max: float) -> pd.DataFrame:
    """(b) :func:`growth_law` per (model, optimizer, seed, noise, transport, functional) of an
    H_N.parquet table."""
    H_N = with_functional(io.require_columns(H_N, "H_N table", ["noise"]), "H_N table")
    keys = [*RUN, "noise", *SCOPE]
    rows = [{**dict(zip(keys, key)), **growth_law(g["N"], g["H_N"], lag_max)}
            for key, g in H_N.sort_values("N").groupby(keys)]
    return pd.DataFrame(rows)


def log_tau_iqr(tau) -> float:
    """(c) IQR of log tau over units, tau = inf ranked as the largest values, NaN left out.

    Quantiles interpolate linearly between order statistics; one with an infinite neighbour above
    it is inf. NaN when no unit has a tau, or when both quartiles are inf (over 3/4 never decay).
    """
    t = np.asarray(tau, dtype=float)
    x = np.sort(np.log(t[~np.isnan(t)]))
    if x.size == 0:
        return float("nan")
    h = (x.size - 1) * np.array([0.25, 0.75])
    lo, hi = x[np.floor(h).astype(int)], x[np.ceil(h).astype(int)]
    with np.errstate(invalid="ignore"):
        q = np.where(hi == lo, lo, lo + (h - np.floor(h)) * (hi - lo))
        return float(q[1] - q[0])


def decay_length(lag, f) -> float:
    """tau_env = -1 / OLS slope of log f on l over the finite positive f (inf when the slope
    is >= 0, NaN with fewer than 3 points)."""
    lag, f = np.asarray(lag, dtype=float), np.asarray(f, dtype=float)
    ok = np.isfinite(f) & (f > 0)
    if ok.sum() < 3:
        return float("nan")
    slope = float(ols(lag[ok], np.log(f[ok]))[1])
    return -1.0 / slope if slope < 0 else float("inf")


def with_functional(table: pd.DataFrame, name: str) -> pd.DataFrame:
    """The table (``name`` in errors; it must have a ``transport`` column) with a ``functional``
    column: a window-stage table (H_N, master) has none, since its f is the transport's primary
    functional (learnwin.stats.decay.PRIMARY, docs/method.md §4b)."""
    io.require_columns(table, name, ["transport"])
    return table if "functional" in table.columns else table.assign(functional=table["transport"].map(PRIMARY))


def unit_taus(tables: Mapping[str, pd.DataFrame], transport: str) -> pd.Series:
    """(c) tau_q per (model, optimizer, seed, unit) from the units rows of ``transport``."""
    units = io.require_columns(tables["units"], "units table", ["transport"])
    units = units[units["transport"] == transport]
    return units.groupby([*RUN, "unit"], sort=False)["tau"].first()


def lyapunov_taus(tables: Mapping[str, pd.DataFrame], transport: str) -> pd.Series:
    """(c) under the exact transport: tau_q per (model, optimizer, seed, mode) of the H leading
    Lyapunov modes of lyapunov.parquet (docs/method.md §4c; ``transport`` is "exact")."""
    lyap = tables["lyapunov"]
    lead = lyap[lyap["leading"].astype(bool)]
    return lead.groupby([*RUN, "mode"], sort=False)["tau"].first()


#: Where claim (c) takes each transport's tau_q (docs/method.md §8b): a function of :func:`measure`'s
#: tables and the transport, giving tau per (model, optimizer, seed, unit or mode): the per-unit
#: tau of units.parquet (docs/method.md §4) for the diagonal transport, the H leading Lyapunov
#: time scales of the Jacobian product (docs/method.md §4c) for the exact one.
TAU_SOURCE = {"diagonal": unit_taus, "exact": lyapunov_taus}


def at_epoch(table: pd.DataFrame, epoch) -> pd.DataFrame:
    """The rows of snapshot ``epoch`` (compared as strings)."""
    return table[table["epoch"].astype(str) == str(epoch)]


def inputs(results: str | Path, models, optimizers, seeds, epoch) -> dict[str, list[str]]:
    """The files the claims read for the runs (``models`` x ``optimizers`` x ``seeds``) at snapshot
    ``epoch`` of the results folder ``results``, by table of :func:`measure`: the claims rule's
    declared inputs (workflow/rules/claims.smk, with ``results`` = learnwin.infra.layout.ROOT)."""
    runs = [dict(optimizer=o, model=m, seed=s) for o in optimizers for m in models for s in seeds]

    def snap(name):
        return [str(layout.under(results, layout.SNAP, epoch=epoch, **r) / f"{name}.parquet") for r in runs]

    return dict(decay=[str(layout.under(results, layout.DECAY, optimizer=o, model=m, epoch=epoch))
                       for o in optimizers for m in models],
                envelope=snap("envelope"), units=snap("units"), lyapunov=snap("lyapunov"),
                H_N=[str(layout.under(results, layout.STATS["H_N"]))],
                master=[str(layout.under(results, layout.STATS["master"]))],
                summary=[str(layout.under(results, layout.SUMMARY["parquet"]))])


def read_inputs(files: Mapping[str, str | Sequence[str]]) -> dict[str, pd.DataFrame]:
    """The tables of :func:`measure` from their files (:func:`inputs`; a Snakemake input of those
    names), each read and checked by learnwin.infra.io, a table's files stacked."""
    out = {}
    for name, artifact in INPUTS.items():
        paths = [files[name]] if isinstance(files[name], str | Path) else list(files[name])
        if not paths:
            raise ValueError(f"claims: no {name} file given")
        out[name] = pd.concat([io.read_table(p, artifact) for p in paths], ignore_index=True)
    return out


def measure(tables: Mapping[str, pd.DataFrame], epoch="best") -> dict[str, pd.DataFrame]:
    """Per-seed tables "a", "b", "c", "d" at snapshot ``epoch`` from the stacked input tables of
    :func:`read_inputs`; the runs are those of the envelope table. Every table has ``transport``
    and ``functional`` columns: (a) and (c)'s tau_env one row per functional of
    learnwin.stats.decay.FUNCTIONALS whose envelope column is present, (c)'s log tau_q IQR on the
    transport's primary functional (from :data:`TAU_SOURCE`), (b) and (d) on the primary one (the
    window's f)."""
    env = io.require_columns(tables["envelope"], "envelope table", ["transport"])
    runs = env[RUN].drop_duplicates(ignore_index=True)
    val_r2 = tables["summary"].drop_duplicates(RUN).set_index(RUN)["val_r2"]
    rows = []
    for transport, e in env.groupby("transport", sort=False):
        tau = TAU_SOURCE[transport](tables, transport).groupby(RUN, sort=False).agg(log_tau_iqr)
        for functional, column in FUNCTIONALS[transport].items():
            if column not in e.columns:
                continue
            is_primary = functional == PRIMARY[transport]
            rows += [dict(model=m, optimizer=o, seed=s, transport=transport, functional=functional,
                          log_tau_iqr=float(tau.get((m, o, s), np.nan)) if is_primary else np.nan,
                          tau_env=decay_length(g["lag"], g[column]), val_r2=float(val_r2.get((m, o, s), np.nan)))
                     for (m, o, s), g in e.groupby(RUN, sort=False)]
    H_N = at_epoch(tables["H_N"], epoch).merge(runs)
    master = with_functional(io.require_columns(at_epoch(tables["master"], epoch).merge(runs), "master table",
                                                ["noise"]), "master table")
    return dict(a=envelope_weights(tables["decay"]), b=window_growth(H_N, float(env["lag"].max())),
                c=pd.DataFrame(rows, columns=[*RUN, *SCOPE, "log_tau_iqr", "tau_env", "val_r2"]),
                d=master[[*RUN, "noise", *SCOPE, "slope", "slope_lo", "slope_hi"]].reset_index(drop=True))


# -- verdicts -------------------------------------------------------------------------------


def number(x, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals; "inf" and "nan" spelled out (an infinite spread is a result)."""
    return "nan" if pd.isna(x) else "inf" if np.isinf(x) else f"{x:.{digits}f}"


def mean_sd(v: pd.Series) -> tuple[float, float]:
    """Mean and sd (ddof = 1; NaN for one value) of the non-NaN values."""
    v = v.dropna().astype(float)
    if v.empty:
        return float("nan"), float("nan")
    with np.errstate(invalid="ignore"):  # inf values: the mean is inf, the sd NaN
        return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan")


#: Claim (d)'s equivalence band around the master law's slope 1 (docs/method.md §8b).
SLOPE_BAND = 0.5
WITHIN_BAND, EXCLUDES_ONE, UNDECIDED = "within band", "excludes 1", "undecided"


def master_label(lo, hi) -> pd.Series:
    """Each seed's label of claim (d) from its slope CI [lo, hi] (docs/method.md §8b): within band,
    excludes 1, or undecided."""
    lo, hi = pd.Series(lo, dtype=float).reset_index(drop=True), pd.Series(hi, dtype=float).reset_index(drop=True)
    inside = (lo >= 1 - SLOPE_BAND) & (hi <= 1 + SLOPE_BAND)
    excludes = (hi < 1) | (lo > 1)
    return pd.Series(np.where(inside, WITHIN_BAND, np.where(excludes, EXCLUDES_ONE, UNDECIDED)), dtype=object)


def _majority(values: pd.Series, tie: str) -> str:
    counts = values.value_counts()
    if counts.empty:
        return "no data"
    return counts.index[0] if len(counts) == 1 or counts.iloc[0] > counts.iloc[1] else tie


def _row(claim, check, scope, expected, verdict, agree, seeds, values, detail):
    """One verdict row; ``agree`` says per seed whether it agrees with the expectation, k counts
    them; n = the seeds with a value, estimate and spread their mean and sd."""
    seeds, values, agree = [int(x) for x in seeds], [float(x) for x in values], [bool(x) for x in agree]
    mean, sd = mean_sd(pd.Series(values, dtype=float))
    k = sum(agree)
    return dict(claim=claim, check=check, **dict(zip(KEY[2:], scope)), expected=expected, verdict=verdict, k=k, n=len(seeds),
                holds=bool(seeds and k > len(seeds) / 2), estimate=mean, spread=sd, seeds=seeds,
                values=values, detail=detail, agree=agree)


def verdicts(per_seed: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The tidy verdict table (COLUMNS) from :func:`measure`'s per-seed tables: one row per
    (claim, check, model, optimizer, noise, transport, functional) (docs/method.md §4b, §8b)."""
    return pd.DataFrame(_verdict_rows(per_seed), columns=COLUMNS)


def seed_agreement(per_seed: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Whether each seed of each verdict row agrees with the expectation: KEY, ``seed``, ``agree``,
    the flags :func:`verdicts` counts as k (docs/method.md §8c: the seed-resampled band)."""
    rows = pd.DataFrame(_verdict_rows(per_seed), columns=[*COLUMNS, "agree"])[[*KEY, "seeds", "agree"]]
    rows = rows[rows["seeds"].map(len) > 0].explode(["seeds", "agree"], ignore_index=True)
    return rows.rename(columns={"seeds": "seed"}).astype({"seed": "int64", "agree": bool})


def _verdict_rows(per_seed: dict[str, pd.DataFrame]) -> list[dict]:
    """:func:`verdicts`'s rows, each with its seeds' ``agree`` flags."""
    out = []
    for (m, o, t, fn), g in per_seed["a"].groupby(["model", "optimizer", *SCOPE], sort=False):
        g = g[g["class"] != "no fit"]
        exp = EXPECTED_CLASS.get(m, NO_EXPECTATION)
        mean, sd = mean_sd(g["w_power"])
        n_pow = int((g["class"] == "power-law-like").sum())
        out.append(_row("a", "envelope class", (m, o, NOISE_ANY, t, fn), exp, _majority(g["class"], "split"),
                        g["class"] == exp, g["seed"], g["w_power"],
                        f"{n_pow} of {len(g)} seeds power-law-like; w_power {number(mean)} ± {number(sd)}, "
                        f"w_tempered {number(g['w_tempered'].mean())}"))
    for (m, o, noise, t, fn), g in per_seed["b"].groupby(["model", "optimizer", "noise", *SCOPE], sort=False):
        exp = EXPECTED_GROWTH.get(m, NO_EXPECTATION)
        mean, sd = mean_sd(g["c_power"])
        counts = ", ".join(f"{v} {c}" for v, c in g["growth"].value_counts().items())
        out.append(_row("b", "H_N growth", (m, o, noise, t, fn), exp, _majority(g["growth"], "mixed"),
                        g["growth"] == exp, g["seed"], g["c_power"],
                        f"{counts} of {len(g)} seeds ({int(g['censored'].sum())} censored)"
                        + (f"; power exponent c {number(mean)} ± {number(sd)}" if np.isfinite(mean) else "")))
    c = per_seed["c"]
    plain = next((o for o, spec in OPTIMIZERS.items() if spec.rate == PLAIN and o in set(c["optimizer"])), None)
    if "adamw" in set(c["optimizer"]) and plain is not None:
        pair = c[c["optimizer"] == "adamw"].merge(c[c["optimizer"] == plain], on=["model", "seed", *SCOPE],
                                                  suffixes=("_adamw", "_sgd"))
        for (m, t, fn), g in pair.groupby(["model", *SCOPE], sort=False):
            r2 = f"val R² AdamW {number(g['val_r2_adamw'].mean())} vs {plain} {number(g['val_r2_sgd'].mean())}"
            for col, check, word in (("log_tau_iqr", "log tau_q IQR", "broader"),
                                     ("tau_env", "tau_env", "slower")):
                a, s = g[f"{col}_adamw"], g[f"{col}_sgd"]
                both = a.notna() & s.notna()
                if col == "log_tau_iqr" and fn != PRIMARY.get(t):
                    continue  # tau_q comes with the primary functional only (TAU_SOURCE)
                agree = a[both] > s[both]
                k, n = int(agree.sum()), int(both.sum())
                (ma, sa), (ms, ss) = mean_sd(a[both]), mean_sd(s[both])
                out.append(_row("c", check, (m, f"adamw vs {plain}", NOISE_ANY, t, fn), f"adamw {word}",
                                f"adamw {word}" if n and k > n / 2 else f"adamw not {word}", agree,
                                g["seed"][both], a[both], f"{k} of {n} seeds; AdamW {number(ma)} ± {number(sa)} "
                                f"vs {plain} {number(ms)} ± {number(ss)}; {r2}"))
    for (m, o, noise, t, fn), g in per_seed["d"].groupby(["model", "optimizer", "noise", *SCOPE], sort=False):
        g = g[np.isfinite(g[["slope_lo", "slope_hi"]].astype(float)).all(axis=1)]
        label = master_label(g["slope_lo"], g["slope_hi"])
        k = int((label == WITHIN_BAND).sum())
        cis = "; ".join(f"{number(r.slope)} [{number(r.slope_lo)}, {number(r.slope_hi)}]" for r in g.itertuples())
        out.append(_row("d", "master slope CI", (m, o, noise, t, fn), WITHIN_BAND, _majority(label, "split"),
                        label == WITHIN_BAND, g["seed"], g["slope"], f"{k} of {len(g)} seeds within 1 ± {SLOPE_BAND:g}: {cis}"))
    return out


def claim_table(files: Mapping[str, str | Sequence[str]], epoch) -> pd.DataFrame:
    """One verdict per (claim, check, model, optimizer, noise, transport, functional) from the files
    of :func:`inputs` (the claims rule's inputs) at snapshot ``epoch``."""
    return verdicts(measure(read_inputs(files), epoch))


def claim_scores(table: pd.DataFrame) -> dict[str, str]:
    """"holds/of" per claim, split by noise definition where it applies and by transport and
    functional when the table has more than one (keys "a", "b:per_lag", "a:exact:norm" ...); rows
    without an expectation (a cell the paper says nothing of) are not scored."""
    out, split = {}, table[SCOPE].drop_duplicates().shape[0] > 1
    scored = table[table["expected"] != NO_EXPECTATION]
    for (claim, noise, t, fn), g in scored.groupby(["claim", "noise", *SCOPE], sort=True):
        key = ":".join([claim, *([] if noise == NOISE_ANY else [noise]), *([t, fn] if split else [])])
        out[key] = f"{int(g['holds'].sum())}/{len(g)}"
    return out


def markdown(df: pd.DataFrame) -> str:
    """A pipe table of ``df`` (values as they print; NaN as "–")."""
    cells = [[("–" if pd.isna(v) else str(v)) if not isinstance(v, str) else v for v in row]
             for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])


def holds_words(table: pd.DataFrame, yes: str = "yes", no: str = "no") -> np.ndarray:
    """The holds column in words; "not scored" where the cell has no expectation."""
    return np.where(table["expected"] == NO_EXPECTATION, "not scored", np.where(table["holds"], yes, no))


def to_markdown(table: pd.DataFrame) -> str:
    """Compact rendering of :func:`claim_table`: one line per verdict."""
    t = table.assign(**{"k/n": table["k"].astype(str) + "/" + table["n"].astype(str),
                        "holds": holds_words(table)})
    return markdown(t[[*KEY, "expected", "verdict", "k/n", "holds", "detail"]])


#: The verdict words of docs/method.md §8b ("Verdict words").
HOLDS, HOLDS_IN_PART, DOES_NOT_HOLD = "holds", "holds in part", "does not hold"
#: Claim (d)'s verdict on the ground truth (§10b: holds, fails, mixed) in the words of §8b.
TRUTH_WORDS = {"holds": HOLDS, "fails": DOES_NOT_HOLD, "mixed": HOLDS_IN_PART}
#: The envelope class the paper expects of learned gates; claims (a) and (b) are about those cells.
SLOW_CLASS = "power-law-like"
#: The column a claim gets one verdict word per level of (docs/method.md §8b): (c) one per transport.
WORD_PER = {"c": "transport"}


def learned_gates(models) -> list[str]:
    """Of ``models``, the cells the paper expects a power-law-like envelope of (the registry's
    ``expected_class``): the learned gates claims (a) and (b) speak of."""
    return [m for m in models if EXPECTED_CLASS.get(m) == SLOW_CLASS]


def counted_rows(table: pd.DataFrame, claim: str, **scope) -> pd.DataFrame:
    """The rows of ``claim`` (with ``column=value`` for each of ``scope``) its verdict word counts
    (docs/method.md §8b, "Verdict words"): each transport's primary functional (where the table has
    a ``functional`` column), and of claims (a) and (b) the learned gates' rows only."""
    rows = table[table["claim"] == claim]
    if "functional" in rows:
        rows = rows[rows["functional"] == rows["transport"].map(PRIMARY)]
    if claim in ("a", "b"):
        rows = rows[rows["model"].isin(learned_gates(pd.unique(rows["model"])))]
    for key, value in scope.items():
        rows = rows[rows[key] == value]
    return rows


def held_counts(tables: Sequence[pd.DataFrame], claim: str, **scope) -> tuple[list[int], int]:
    """Per verdict table (one per machine's run; columns claim, model, transport, holds and those of
    ``scope``), the :func:`counted_rows` that hold; and their number, which every table must share."""
    rows = [counted_rows(t, claim, **scope) for t in tables]
    sizes = sorted({len(r) for r in rows})
    if len(sizes) != 1:
        raise ValueError(f"claim ({claim}) {scope}: the runs count {sizes} rows; the verdict words need the "
                         "same rows on every machine")
    return [int(r["holds"].sum()) for r in rows], sizes[0]


def verdict_word(ks: Sequence[int], n: int) -> str:
    """docs/method.md §8b, "Verdict words", on the rows that hold on each machine (``ks``, of ``n``):
    holds when all do on every machine, does not hold when at most a quarter do on every one, holds
    in part otherwise."""
    if n < 1:
        raise ValueError("a verdict word needs at least one counted row")
    if all(k == n for k in ks):
        return HOLDS
    if all(k <= n / 4 for k in ks):
        return DOES_NOT_HOLD
    return HOLDS_IN_PART


class Word(NamedTuple):
    """A claim's verdict word (:func:`verdict_word`) and its counts: rows that hold per run, of n."""

    word: str
    ks: list[int]
    n: int


def claim_words(tables: Sequence[pd.DataFrame], claim: str) -> dict[str, Word]:
    """The verdict words of ``claim`` over the runs' verdict tables: one per level of its
    :data:`WORD_PER` column (keyed by the level, in the first table's order), else one keyed "";
    none where no row is counted."""
    split = WORD_PER.get(claim)
    levels = pd.unique(counted_rows(tables[0], claim)[split]) if split else [""]
    out = {}
    for level in levels:
        ks, n = held_counts(tables, claim, **({split: level} if split else {}))
        if n:
            out[str(level)] = Word(verdict_word(ks, n), ks, n)
    return out
