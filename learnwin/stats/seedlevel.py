"""The seed as the unit of replication (docs/method.md §10b, "Pre-registered: the seed as the
unit"): one estimate per (model, seed), then intervals and tests across the seeds of a model.

* **Intervals.** :func:`learnwin.stats.intervals.t_interval`: the two-sided 95 % Student
  t-interval of a mean over n seeds (n - 1 degrees of freedom).
* **Claim (d) on the truth.** :func:`kappa_test`: per model, d = s - kappa of each seed's slope s
  (:func:`learnwin.stats.budget.seed_slopes`); its t-interval against the band [-kappa/2, kappa/2]:
  consistent with kappa (inside the band), differs (excludes 0, not inside; below or above kappa),
  undecided, too few seeds (< 3 finite slopes). :func:`kappa_overall`: holds (every model
  consistent), fails (every model differs), mixed.
* **Claim (b), the groups.** :func:`group_test` on each seed's log-N slope b
  (:func:`learnwin.stats.growth.seed_growth`): per model the mean of b and its t-interval, the group
  slope (mean of its models' means), the ordering (every fixed-gate model's mean above every
  learned-gate model's) with its exact permutation p over the assignments of the models to the
  groups, and the paired one-sided t-test over seeds of every (fixed, learned) pair of models (a
  seed fixes every model's data; it replaces the registered Welch test, §10b), Holm-adjusted over
  the pairs. Holds: the ordering and every pair at adjusted p < 0.05; reversed: both the other way
  round; else not supported; "no groups" without a model of each group (the linear cells).
  :func:`groups_table` runs it per (optimizer, threshold).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from learnwin.stats.intervals import t_interval
from learnwin.stats.prediction import holm

MIN_SEEDS = 3  # (d): fewer seeds with a finite slope are "too few seeds"
P_PAIRS = 0.05  # (b): every pair's Holm-adjusted p below this
#: The registry's expected growth (``expected_growth``) of the fixed-gate and the learned-gate cells.
FIXED, LEARNED = "logarithmic", "power"
CONSISTENT, BELOW, ABOVE = "consistent with kappa", "differs from kappa (below)", "differs from kappa (above)"
UNDECIDED, TOO_FEW, NO_KAPPA = "undecided", "too few seeds", "no kappa (alpha <= 1)"
HOLDS, REVERSED, NOT_SUPPORTED = "holds", "reversed", "not supported"
NO_GROUPS = "no groups (needs a fixed- and a learned-gate cell)"  # cells without the expectation
#: :func:`group_test`'s summary, one row per block in :func:`groups_table`.
SUMMARY = ("fixed", "learned", "slope_fixed", "slope_learned", "ordering", "p_perm_fixed_above",
           "p_perm_learned_above", "n_assignments", "pairs_fixed_above", "pairs_learned_above", "n_pairs", "verdict")


def kappa_test(per_seed: pd.DataFrame, kappa: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Claim (d) on the truth per model of ``per_seed`` (model, seed, slope; one block: optimizer,
    transport, threshold chosen) against each seed's own kappa (a column ``kappa``, docs/method.md
    §10c) or else the model's ``kappa`` (model -> kappa, §10b): kappa (the seeds' mean), n_seeds
    (finite slopes), s_mean, d_mean, d_lo, d_hi (t-interval of d = s - kappa), band (kappa / 2) and
    verdict."""
    rows = []
    for model, g in per_seed.groupby("model", sort=False):
        ks = (g["kappa"].to_numpy(float) if "kappa" in g
              else np.full(len(g), float((kappa or {}).get(model, np.nan))))
        k = t_interval(ks)[0]
        d_mean, lo, hi, n = t_interval(g["slope"].to_numpy(float) - ks)
        s_mean = t_interval(g["slope"])[0]
        band = k / 2
        if not np.isfinite(k):
            verdict = NO_KAPPA
        elif n < MIN_SEEDS:
            verdict = TOO_FEW
        elif lo >= -band and hi <= band:
            verdict = CONSISTENT
        elif hi < 0:
            verdict = BELOW
        elif lo > 0:
            verdict = ABOVE
        else:
            verdict = UNDECIDED
        rows.append(dict(model=model, kappa=k, n_seeds=int(sum(np.isfinite(g["slope"]))), s_mean=s_mean,
                         d_mean=d_mean, d_lo=lo, d_hi=hi, band=band, verdict=verdict))
    return pd.DataFrame(rows, columns=["model", "kappa", "n_seeds", "s_mean", "d_mean", "d_lo", "d_hi", "band",
                                       "verdict"])


def kappa_overall(verdicts) -> str:
    """Claim (d) on the truth over the models: holds when every model is consistent with kappa,
    fails when every model differs from it, mixed otherwise (and with no model)."""
    v = list(verdicts)
    if v and all(x == CONSISTENT for x in v):
        return "holds"
    if v and all(x in (BELOW, ABOVE) for x in v):
        return "fails"
    return "mixed"


def group_test(per_seed: pd.DataFrame, groups: Mapping[str, str]) -> dict:
    """Claim (b), the groups, on one block of ``per_seed`` (model, seed, b), the models of ``groups``
    (model -> :data:`FIXED` or :data:`LEARNED`; other models and groups left out). Returns ``models`` (model, group,
    n_seeds, b_mean, b_lo, b_hi, group_slope), ``pairs`` (fixed, learned, t, df, p_fixed_above,
    p_learned_above and their Holm adjustments over the pairs, holm_fixed_above, holm_learned_above)
    and ``summary`` (the block's verdict row: models of each group, slope_fixed, slope_learned,
    ordering, p_perm_fixed_above, p_perm_learned_above, n_assignments, pairs_fixed_above,
    pairs_learned_above (pairs at adjusted p < 0.05), n_pairs, verdict)."""
    d = per_seed[per_seed["model"].isin([m for m, g in groups.items() if g in (FIXED, LEARNED)])]
    seeds = {m: g.set_index("seed")["b"].astype(float) for m, g in d.groupby("model", sort=True)}
    fixed = [m for m in seeds if groups[m] == FIXED]
    learned = [m for m in seeds if groups[m] == LEARNED]
    models = pd.DataFrame([dict(zip(("b_mean", "b_lo", "b_hi", "n_seeds"), t_interval(v)), model=m, group=groups[m])
                           for m, v in seeds.items()],
                          columns=["model", "group", "n_seeds", "b_mean", "b_lo", "b_hi"])
    means = models.set_index("model")["b_mean"]
    slope = {k: float(means[ms].mean()) if ms else np.nan for k, ms in ((FIXED, fixed), (LEARNED, learned))}
    models["group_slope"] = models["group"].map(slope)
    pairs = pd.DataFrame([_paired(seeds[f], seeds[lr]) | dict(fixed=f, learned=lr)
                          for f, lr in itertools.product(fixed, learned)],
                         columns=["fixed", "learned", "t", "df", "p_fixed_above", "p_learned_above"])
    pairs["holm_fixed_above"] = holm(pairs["p_fixed_above"])
    pairs["holm_learned_above"] = holm(pairs["p_learned_above"])
    both = bool(fixed) and bool(learned) and bool(np.isfinite(means).all())
    above = both and means[fixed].min() > means[learned].max()
    below = both and means[fixed].max() < means[learned].min()
    p_above, p_below, n_assign = _permutation_p(means, fixed) if both else (np.nan, np.nan, 0)
    n_pairs = len(pairs)
    k_above = int((pairs["holm_fixed_above"] < P_PAIRS).sum())
    k_below = int((pairs["holm_learned_above"] < P_PAIRS).sum())
    verdict = (NO_GROUPS if not (fixed and learned)
               else HOLDS if above and n_pairs and k_above == n_pairs
               else REVERSED if below and n_pairs and k_below == n_pairs else NOT_SUPPORTED)
    summary = dict(zip(SUMMARY, (", ".join(fixed), ", ".join(learned), slope[FIXED], slope[LEARNED],
                                 "fixed above" if above else "learned above" if below else "neither",
                                 p_above, p_below, n_assign, k_above, k_below, n_pairs, verdict)))
    return dict(models=models, pairs=pairs, summary=summary)


def _paired(a: pd.Series, b: pd.Series) -> dict:
    """The paired t-test of two models' seed values (indexed by seed) over their common finite
    seeds, one-sided both ways (NaN below 2 pairs): a seed fixes the data stream of every model
    (docs/method.md §10b), so the design is paired."""
    both = pd.concat([a, b], axis=1, join="inner").dropna()
    if len(both) < 2:
        return dict(t=np.nan, df=np.nan, p_fixed_above=np.nan, p_learned_above=np.nan)
    x, y = both.iloc[:, 0].to_numpy(float), both.iloc[:, 1].to_numpy(float)
    res = stats.ttest_rel(x, y, alternative="greater")
    return dict(t=float(res.statistic), df=float(len(both) - 1), p_fixed_above=float(res.pvalue),
                p_learned_above=float(stats.ttest_rel(x, y, alternative="less").pvalue))


def _permutation_p(means: pd.Series, fixed: list[str]) -> tuple[float, float, int]:
    """Exact permutation p of the group-slope difference (fixed minus learned) over every assignment
    of len(fixed) of the models to the fixed group: the shares of assignments whose difference is at
    least (p_fixed_above) and at most (p_learned_above) the observed one, and their number."""
    v = means.to_numpy(float)
    k = len(fixed)
    combos = np.array(list(itertools.combinations(range(v.size), k)))
    member = np.zeros((len(combos), v.size), bool)
    np.put_along_axis(member, combos, True, axis=1)
    diff = (member @ v) / k - (~member @ v) / (v.size - k)
    obs = v[means.index.isin(fixed)].mean() - v[~means.index.isin(fixed)].mean()
    tol = 1e-12 * max(1.0, abs(obs))
    return float(np.mean(diff >= obs - tol)), float(np.mean(diff <= obs + tol)), len(combos)


def groups_table(per_seed: pd.DataFrame, groups: Mapping[str, str]) -> pd.DataFrame:
    """:func:`group_test`'s summary per (optimizer, threshold) of ``per_seed`` (model, optimizer,
    threshold, seed, b): one row each."""
    keys = [c for c in ("optimizer", "threshold") if c in per_seed]
    rows = [dict(zip(keys, key), **group_test(g, groups)["summary"]) for key, g in per_seed.groupby(keys, sort=True)]
    return pd.DataFrame(rows, columns=[*keys, *SUMMARY])
