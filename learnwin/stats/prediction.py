"""The predicted window held against the measured one, out of sample (docs/method.md §10).

* **Eps-free.** eps only shifts log N, so the growth rate is eps-free: an exponential envelope
  f = A exp(-l / tau) predicts dH / d log N = tau / kappa, a power law f = A l^-beta predicts
  d log H / d log N = 1 / (kappa beta) (docs/method.md §8, 1 / kappa = 1 - 1 / alpha).
  :func:`predicted_growth` gives both from a decay row; the measured counterparts are the log
  law's slope b and the power law's exponent c of :mod:`learnwin.stats.growth`.
* **Levels.** :func:`calibrate_eps` picks the eps whose predicted windows match the measured
  seed means of the calibration points best (least squares over a log-spaced eps grid, every eps
  at once: :func:`predict_levels` gives a variant's windows on the whole grid);
  leave-one-model-out calibrates on the other models and predicts the held-out one.
* **Scores.** Within each N the models' ordering, within each model the growth over N:
  Kendall's tau-b (scipy.stats.kendalltau, variant b) per block, averaged, and Harrell's
  concordance, which treats a censored measurement (H >= c) as ordered only against measurements
  below c. Within N the p-value is the exact relabelling p of :func:`permutation_test` (the blocks
  share their models, so no combination of their p-values as if independent); :func:`holm`
  corrects it across variants.
* **Networks.** A variant is (networks, transport, noise). The networks are the ground truth's
  own, at init and trained (their snapshot statistics by :func:`network_stats`), or the main
  run's; the primary variants, named before looking, are :data:`PRIMARY` (docs/method.md §10) and,
  under a training budget, :data:`CONFIRMATORY` (§10b).
* **Confirmatory test** (§10b). :func:`permutation_test`: the mean Kendall tau-b within N and its
  exact one-sided p-value over every relabelling of the models, each applied to every N at once.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from learnwin.stats.alpha import fit_lags
from learnwin.stats.decay import fit_envelopes, predict_window, primary
from learnwin.stats.window import AGG_KEYS, PER_LAG, POOLED, RUN_KEYS, aggregate, seed_inputs, window_table

EPS_GRID = np.geomspace(1e-2, 1e4, 241)


def predicted_growth(decay_row, alpha: float) -> dict:
    """{"slope_log": dH/dlog N (exp laws), "exponent": dlog H/dlog N (power laws)}; NaN where the
    law does not give one."""
    law, scale = str(decay_row["law"]), float(decay_row["scale"])
    ik = max(1.0 - 1.0 / alpha, 0.0) if alpha > 0 else np.nan
    base = law.removesuffix("_floor")
    slope = scale * ik if base == "exp" else np.nan
    with np.errstate(divide="ignore"):
        expo = ik / scale if base in ("power", "tempered") and scale > 0 else np.nan
    return dict(slope_log=float(slope), exponent=float(expo))


def harrell_c(measured, censored, predicted) -> float:
    """Concordance over the comparable pairs: both uncensored and different, or one censored at c
    against an uncensored one below c; ties in the prediction count 1/2 (NaN without pairs)."""
    h, p = np.asarray(measured, float), np.asarray(predicted, float)
    c = np.asarray(censored, bool)
    lo = h[:, None] < h[None, :]  # i below j
    comparable = lo & ~c[:, None]  # the lower one must be observed
    ok = np.isfinite(p)
    comparable &= ok[:, None] & ok[None, :]
    if not comparable.any():
        return float("nan")
    conc = (p[:, None] < p[None, :]) + 0.5 * (p[:, None] == p[None, :])
    return float(conc[comparable].mean())


def _tau_blocks(table: pd.DataFrame, by: str) -> tuple[float, int]:
    """Mean Kendall tau-b over blocks of ``by`` (blocks with fewer than 3 points or ties only
    left out) and the blocks' number."""
    taus = []
    for _, g in table.groupby(by):
        ok = g[np.isfinite(g["measured"]) & np.isfinite(g["predicted"])]
        if len(ok) < 3 or ok["measured"].nunique() < 2 or ok["predicted"].nunique() < 2:
            continue
        taus.append(stats.kendalltau(ok["predicted"], ok["measured"], variant="b").statistic)
    return (float(np.mean(taus)) if taus else float("nan")), len(taus)


def score(table: pd.DataFrame) -> dict:
    """Scores of one prediction: ``table`` has model, N, measured (seed mean), censored (any seed
    censored) and predicted. p_within_N is :func:`permutation_test`'s exact relabelling p (the
    blocks share their models, so their p-values are not combined as if independent); within a
    model only tau and Harrell's C are given."""
    tau_n, k_n = _tau_blocks(table, "N")
    tau_m, k_m = _tau_blocks(table, "model")
    p_n = permutation_test(table)["p_perm"]
    c_n, c_m = (_mean_finite([harrell_c(g["measured"], g["censored"], g["predicted"])
                              for _, g in table.groupby(key)]) for key in ("N", "model"))
    return dict(tau_within_N=tau_n, p_within_N=p_n, blocks_N=k_n, c_within_N=float(c_n),
                tau_within_model=tau_m, blocks_model=k_m, c_within_model=float(c_m))


def _mean_finite(values) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


@dataclass(frozen=True)
class Levels:
    """Predicted windows of one variant at every eps of :data:`EPS_GRID`: ``keys`` (model, N) and
    ``values`` (row of ``keys``, eps)."""

    keys: pd.DataFrame
    values: np.ndarray

    def at(self, j: int) -> pd.DataFrame:
        """(model, N, predicted) at the eps ``EPS_GRID[j]``."""
        return self.keys.assign(predicted=self.values[:, j])


def _mean_square_finite(d: np.ndarray) -> np.ndarray:
    """Per column of ``d`` (point, eps): the mean square of its finite entries, inf where none.
    Columns with the same finite points are averaged together, each summed as ``np.mean`` sums
    one column alone (so the result equals the per-eps mean bit for bit)."""
    ok = np.isfinite(d.T)
    out = np.full(ok.shape[0], np.inf)
    patterns, which = np.unique(ok, axis=0, return_inverse=True)
    for k, keep in enumerate(patterns):
        cols = np.flatnonzero(which.ravel() == k)
        if keep.any():
            out[cols] = np.mean(np.ascontiguousarray(d[np.ix_(keep, cols)].T) ** 2, axis=1)
    return out


def calibrate_eps(measured: pd.DataFrame, levels: Levels) -> int:
    """Index into :data:`EPS_GRID` of the eps minimising the squared error between the predicted
    ``levels`` and ``measured`` (model, N, measured), on their common points (finite only)."""
    both = measured.merge(levels.keys.assign(row=np.arange(len(levels.keys))), on=["model", "N"])
    d = levels.values[both["row"].to_numpy()] - both["measured"].to_numpy(float)[:, None]
    return int(np.argmin(_mean_square_finite(d)))


def leave_one_model_out(measured: pd.DataFrame, levels: Levels) -> pd.DataFrame:
    """Per model: eps calibrated on the other models, and that model's predicted windows."""
    out = []
    for model in sorted(measured["model"].unique()):
        j = calibrate_eps(measured[measured["model"] != model], levels)
        out.append(measured[measured["model"] == model].merge(levels.at(j), on=["model", "N"])
                   .assign(eps=float(EPS_GRID[j])))
    return pd.concat(out, ignore_index=True)


def holm(p) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN)."""
    p = np.asarray(p, dtype=float)
    ok = np.flatnonzero(np.isfinite(p))
    out = np.full_like(p, np.nan)
    order = ok[np.argsort(p[ok])]
    m = order.size
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adj, 1.0)
    return out


#: The ground truth's own networks the prediction is taken from (docs/method.md §10, §10b): each
#: (model, seed)'s init, and its training on the first grid lag.
NETWORKS = ("init", "trained")
#: The variants (networks, transport, noise) named primary before the comparison (docs/method.md §10).
PRIMARY = (("trained", "diagonal", PER_LAG), ("trained", "exact", POOLED))
#: The confirmatory test's variant and threshold, written before any budget run (docs/method.md §10b).
CONFIRMATORY = dict(networks="init", transport="diagonal", noise=PER_LAG, threshold=0.2)
#: Its pass criterion: mean tau-b within N above 0 at a one-sided p below this.
CONFIRM_ALPHA = 0.05


def variant_inputs(h_n_agg: pd.DataFrame, decay: pd.DataFrame, *, optimizer: str, epoch: str) -> pd.DataFrame:
    """Per (model, transport, noise): the selected decay law of scope "mean" of the transport's
    primary functional and the predicted window's inputs pred_alpha, pred_sigma, pred_c
    (docs/method.md §8) of the snapshot epoch."""
    agg = h_n_agg[(h_n_agg["optimizer"] == optimizer) & (h_n_agg["epoch"].astype(str) == str(epoch))]
    keys = ["model", "transport", "noise"]
    inputs = agg.drop_duplicates(keys)[[*keys, "pred_alpha", "pred_sigma", "pred_c"]]
    d = primary(decay)
    d = d[(d["optimizer"] == optimizer) & (d["epoch"].astype(str) == str(epoch))
          & (d["scope"] == "mean") & d["selected"]]
    return inputs.merge(d.drop(columns=["optimizer", "epoch", "scope"]), on=["model", "transport"], how="inner")


def network_stats(envelope: pd.DataFrame, psi: pd.DataFrame, total: pd.DataFrame, *, alpha_cfg: Mapping,
                  window_cfg: Mapping, decay_cfg: Mapping,
                  map_fn: Callable = map) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(H_N_agg, decay, seed_inputs) of a set of snapshots (run keys model, optimizer, seed, epoch),
    by the main run's chain (docs/method.md §6-8): alpha fits and window per snapshot, decay law per
    (model, optimizer, epoch) over its seeds, their aggregate, and each snapshot's medians of alpha,
    sigma and c (:func:`learnwin.stats.window.seed_inputs`: the per-seed kappa of §10c); ``*_cfg``
    are the config sections.
    ``map_fn`` maps over the snapshots and the decay groups (an executor's map runs them in parallel)."""
    keys = list(RUN_KEYS)
    parts = {k: dict(iter(g.groupby(keys, sort=True))) for k, g in
             (("envelope", envelope), ("psi", psi), ("total", total))}
    runs = list(parts["psi"])
    per_run = map_fn(functools.partial(_snapshot_tables, alpha_cfg=alpha_cfg, window_cfg=window_cfg),
                     [parts["psi"][k] for k in runs], [parts["envelope"][k] for k in runs],
                     [parts["total"].get(k) for k in runs])
    decays = map_fn(functools.partial(fit_envelopes, **decay_cfg), [g for _, g in envelope.groupby(AGG_KEYS, sort=True)])
    win, h_n, master, expo = (list(t) for t in zip(*per_run))
    decays = list(decays)
    _, agg, _, _ = aggregate(h_n, win, master, expo, decays, eps=window_cfg["eps"], N_grid=window_cfg["N_grid"])
    return agg, pd.concat(decays, ignore_index=True), seed_inputs(pd.concat(win, ignore_index=True))


def _snapshot_tables(psi: pd.DataFrame, envelope: pd.DataFrame, total: pd.DataFrame | None, *, alpha_cfg: Mapping,
                     window_cfg: Mapping) -> tuple:
    """One snapshot's alpha fits (docs/method.md §6) and its window tables (§7, :func:`window_table`)."""
    fits = fit_lags(psi, **alpha_cfg)
    return window_table(psi, fits, envelope, total, eps=window_cfg["eps"], N_grid=window_cfg["N_grid"],
                        noise=window_cfg["noise"], bootstrap=window_cfg["bootstrap"], alpha_fit=alpha_cfg)


def predict_levels(inputs: pd.DataFrame, N) -> Levels:
    """Predicted H_N(N) (docs/method.md §8) of every model of one variant's ``inputs`` at every eps
    of :data:`EPS_GRID`."""
    rows = [row._asdict() for row in inputs.itertuples(index=False)]
    keys = pd.DataFrame(dict(model=[r["model"] for r in rows for _ in N], N=[int(n) for _ in rows for n in N]),
                         columns=["model", "N"])
    curves = [predict_window(r, r["pred_alpha"], r["pred_sigma"], r["pred_c"], EPS_GRID, N).T for r in rows]
    return Levels(keys, np.concatenate(curves) if curves else np.empty((0, EPS_GRID.size)))


def measured_means(window: pd.DataFrame) -> pd.DataFrame:
    """Seed means of the measured H per (threshold, model, N) of a window table (threshold, model,
    seed, N, H, censored: the dataset protocol's main arm, or the budget protocol's H_emp);
    censored = any seed censored."""
    g = window.groupby(["threshold", "model", "N"])
    return g.agg(measured=("H", "mean"), measured_std=("H", "std"), censored=("censored", "any"),
                 n_seeds=("H", "count")).reset_index()


def prediction_tables(meas: pd.DataFrame, growth: pd.DataFrame, sources: Mapping[str, tuple], *,
                      optimizer: str, primary=PRIMARY, map_fn: Callable = map):
    """(growth_prediction, prediction, prediction_scores) of every (networks, transport, noise)
    variant against the measured seed means ``meas`` (threshold, model, N, measured, censored:
    :func:`measured_means`): the eps-free growth per model, the leave-one-model-out levels, and
    their scores with Holm-adjusted p-values within the primary and the secondary family.
    ``sources`` maps a name of the networks the prediction is taken from to their (H_N_agg,
    decay, epoch) tables; ``primary``: the (networks, transport, noise) named primary; ``map_fn``
    maps over the variants (an executor's map runs them in parallel)."""
    variants = []
    for networks, (h_n_agg, decay, epoch) in sources.items():
        inputs = variant_inputs(h_n_agg, decay, optimizer=optimizer, epoch=epoch)
        variants += [(dict(networks=networks, transport=transport, noise=noise,
                           primary=(networks, transport, noise) in primary), inp)
                     for (transport, noise), inp in inputs.groupby(["transport", "noise"], sort=True)]
    parts = list(map_fn(functools.partial(_variant_tables, meas=meas), variants))
    gp, levels, scores = ([x for part in parts for x in part[i]] for i in range(3))
    growth_pred = pd.DataFrame(gp)
    if len(growth_pred):
        growth_pred = growth_pred.merge(growth[["model", "threshold", "log_b", "power_c", "verdict"]],
                                        on="model", how="left")
    sc = pd.DataFrame(scores)
    if len(sc):
        sc["p_within_N_holm"] = sc.groupby(["threshold", "primary"])["p_within_N"].transform(holm)
    return growth_pred, (pd.concat(levels, ignore_index=True) if levels else pd.DataFrame()), sc


def _variant_tables(variant: tuple[dict, pd.DataFrame], meas: pd.DataFrame) -> tuple[list, list, list]:
    """One variant's (keys, inputs) growth rows, leave-one-model-out level tables and score rows,
    one of each per threshold of the seed means ``meas``."""
    keys, inp = variant
    gp = [dict(model=r["model"], **keys, law=r["law"], pred_alpha=r["pred_alpha"],
               **predicted_growth(r, r["pred_alpha"])) for r in (row._asdict() for row in inp.itertuples(index=False))]
    pred = predict_levels(inp, np.sort(meas["N"].unique()))
    levels, scores = [], []
    for thr, m in meas.groupby("threshold", sort=True):
        loo = leave_one_model_out(m[["model", "N", "measured", "censored"]], pred)
        levels.append(loo.assign(threshold=thr, **keys))
        scores.append(dict(threshold=thr, **keys, n_models=int(loo["model"].nunique()), **score(loo)))
    return gp, levels, scores


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between ``x`` (..., M, K) and ``y`` (M, K) along the M axis, per column K
    and leading index: the sum of sign products over pairs over the root of the untied pairs'
    counts (scipy.stats.kendalltau's variant b); NaN where either has a single value."""
    sx = np.sign(x[..., :, None, :] - x[..., None, :, :])
    sy = np.sign(y[:, None, :] - y[None, :, :])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (sx * sy).sum(axis=(-3, -2)) / np.sqrt(np.abs(sx).sum(axis=(-3, -2)) * np.abs(sy).sum(axis=(0, 1)))


def permutation_test(table: pd.DataFrame) -> dict:
    """The confirmatory statistic of docs/method.md §10b on one variant's leave-one-model-out
    levels (model, N, measured, predicted): the mean over N of Kendall's tau-b between predicted
    and measured across models (N where it is undefined left out), and its exact one-sided
    p-value, the share of the M! relabellings of the models' predictions (each applied to every N
    at once) whose mean is at least the observed one. Models without a finite prediction and
    measurement at every N are left out."""
    meas, pred = (table.pivot(index="model", columns="N", values=c) for c in ("measured", "predicted"))
    pred = pred.reindex(index=meas.index, columns=meas.columns)
    keep = np.isfinite(meas.to_numpy()).all(axis=1) & np.isfinite(pred.to_numpy()).all(axis=1)
    m, p = meas.to_numpy()[keep], pred.to_numpy()[keep]
    out = dict(n_models=int(keep.sum()), n_blocks=0, tau_mean=np.nan, p_perm=np.nan, n_perms=0)
    if m.shape[0] < 2:
        return out
    perms = np.array(list(itertools.permutations(range(m.shape[0]))))
    taus = kendall_tau_b(p[perms], m)  # (relabelling, N); the identity first
    blocks = np.isfinite(taus[0])
    if not blocks.any():
        return out
    means = taus[:, blocks].mean(axis=1)
    return dict(out, n_blocks=int(blocks.sum()), tau_mean=float(means[0]),
                p_perm=float(np.mean(means >= means[0] - 1e-12)), n_perms=len(perms))


def confirmatory_table(levels: pd.DataFrame) -> pd.DataFrame:
    """:func:`permutation_test` per (threshold, networks, transport, noise) of
    :func:`prediction_tables`' levels; ``pre_registered`` marks :data:`CONFIRMATORY`'s row, and
    ``passes`` is its criterion (tau_mean > 0 at p_perm < :data:`CONFIRM_ALPHA`), on every row."""
    keys = ["threshold", "networks", "transport", "noise"]
    rows = [dict(zip(keys, k), **permutation_test(g)) for k, g in levels.groupby(keys, sort=True)]
    out = pd.DataFrame(rows, columns=[*keys, "n_models", "n_blocks", "tau_mean", "p_perm", "n_perms"])
    out["passes"] = (out["tau_mean"] > 0) & (out["p_perm"] < CONFIRM_ALPHA)
    pre = pd.Series(True, index=out.index)
    for key, value in CONFIRMATORY.items():
        pre &= np.isclose(out[key], value) if key == "threshold" else out[key] == value
    out.insert(len(keys), "pre_registered", pre)
    return out
