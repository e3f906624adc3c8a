"""Sample complexity, the learnability window H_N, the master law and its exponents
(docs/method.md §7, §7b).

Per snapshot, noise definition and lag l: m(l) = |mean_n psi_n(l)|, SNR(l, N) = m N^(1/kappa) /
sigma with 1/kappa = 1 - 1/alpha (0 at alpha = 1, so kappa = inf needs no special case),
N_hat(l) = the smallest N of the grid with SNR > eps (NaN when none), N*(l) = (eps sigma /
m)^kappa, H_N = max{l : N_hat(l) <= N} (0 when none), eps_th(l; N) = f(l) (N_hat(l) / N)^(1/kappa).

Two noise definitions (docs/method.md §7b, config ``window.noise``), each giving its own rows (column
``noise``):

* ``per_lag``: (alpha(l), sigma(l)) of psi_n(l) itself, from alpha.parquet (the official code's
  operational definition). psi is linear in the effective rate, so sigma(l) ~ f^a falls with the
  envelope as m(l) ~ f^b does, and the master-law slope measures b - a.
* ``pooled``: one (alpha_S, sigma_S) per snapshot from the alpha-stable fit
  (:func:`learnwin.stats.alpha.fit_sample`, the alpha config section, same selection and reliability
  rules) of S_n = sum over l = 0..T-1 of psi_n(l) (total.parquet, psi's units), used at every lag
  with the same m(l); ``reliable`` is the S fit's flag at every lag. sigma is then constant in l,
  so a = 0 and the master-law slope equals b by construction: the claim tested is b = 1.

Choices where docs/method.md is silent:

* All lags enter SNR, N_hat and H_N, reliable or not (``reliable`` is carried along); a lag whose
  sigma is not positive and finite gets snr = NaN and is never detected (it carries no scale).
  m = 0 gives snr = 0, N* = inf. N* = 0 when the signal beats eps already at N = 1 with
  kappa = inf, inf when it never does.
* Significance (column ``significant``): |mean_n psi_n(l)| > 2 standard errors, SE =
  std_n(psi_n(l), ddof = 1) / sqrt(n) over diag sequences. Only significant lags enter the
  master law and the exponents (a lag without a real mean has log m set by its noise).
* Master law: log N*(l) (the continuous sample complexity, not the grid-quantised N_hat) is
  regressed on x = -kappa(alpha(l)) log f(l). Lags enter when significant, alpha is reliable,
  kappa finite, f > 0 and 0 < N* < inf (``n_points``; ``n_significant`` counts the significant
  lags); fewer than 3 such lags (or constant x) give NaN statistics with a ``flag``.
* Exponents (exponents.parquet): b = OLS slope of log m on log f, a = OLS slope of log sigma on
  log f, on the master law's lags. With constant kappa the master slope is b - a exactly.
* CIs (slope, a, b): percentile 95 % intervals of a bootstrap over diag SEQUENCES (``bootstrap``
  resamples of the sequence ids, the same ones for psi and S and for both definitions; seeded).
  Per resample, m(l) is recomputed; alpha(l) (so kappa and x), the lag set and f are kept fixed;
  sigma is rescaled by the resample's IQR ratio, sigma_b = sigma IQR_b / IQR (per lag for
  per_lag, of S for pooled): the fitted sigma is ECF's, too slow to refit B x L times, and at a
  fixed alpha the stable scale is proportional to the IQR (McCulloch's sigma = IQR / (2
  q75(alpha))). Resamples whose y is not finite at every lag are dropped. Vectorised over
  resamples and lags (chunks of resamples bound the RAM).
* Transports (docs/method.md §4b): psi, alpha, envelope and total of both transports in one
  snapshot give each its own block of rows (column ``transport``, before ``noise``), with the same
  bootstrap seeds; a table without the column is one diagonal snapshot.
* Aggregation: H_N over seeds per transport and noise (mean, std with ddof = 1 so NaN for one seed, median,
  q25, q75). The predicted H_N uses the selected decay law of scope "mean" of the transport's primary
  functional (learnwin.stats.decay.PRIMARY: f, the functional the window's f is) and, per seed, the
  medians over reliable lags (with f > 0) of alpha, sigma and c(l) = m(l) / f(l); then the median
  over seeds (columns pred_alpha, pred_sigma, pred_c). Under pooled alpha and sigma are
  (alpha_S, sigma_S), so prediction and measurement share the noise definition. No reliable lag
  or no decay fit -> predicted NaN and law "none".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from learnwin.infra import io
from learnwin.stats.alpha import fit_sample, per_sequence
from learnwin.stats.alpha import kappa as kappa_of
from learnwin.stats.decay import ols, predict_window, primary

RUN_KEYS = ("model", "optimizer", "seed", "epoch")
AGG_KEYS = ["model", "optimizer", "epoch"]
PER_LAG, POOLED = "per_lag", "pooled"
#: The noise definitions of docs/method.md §7b (values of ``window.noise`` and of the ``noise`` columns).
NOISES = (PER_LAG, POOLED)
SIGNIFICANCE_SE = 2.0  # |mean| > 2 standard errors
CHUNK_ELEMENTS = 4_000_000  # resampled values held at once in the bootstrap
SEED_OFFSET = 7_000  # sequence-bootstrap seed of a snapshot = run seed + SEED_OFFSET


def bootstrap_seed(psi: pd.DataFrame) -> int:
    """The workflow's sequence-bootstrap seed of one snapshot (docs/method.md §7): its run seed
    (psi's ``seed`` column) + :data:`SEED_OFFSET`."""
    runs = psi["seed"].unique() if "seed" in psi.columns else []
    if len(runs) != 1:
        raise ValueError(f"window_table: psi holds run seeds {list(runs)}; give one run or pass seed=")
    return int(runs[0]) + SEED_OFFSET


def inv_kappa(alpha) -> np.ndarray:
    """1/kappa = 1 - 1/alpha, clipped at 0 (alpha <= 1 -> kappa = inf)."""
    a = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isnan(a), np.nan, np.clip(1.0 - 1.0 / a, 0.0, None))


def n_star(m, sigma, alpha, eps: float) -> np.ndarray:
    """Continuous sample complexity N* = (eps sigma / m)^kappa, with the edge cases above
    (broadcasts: m and sigma may carry a leading resample axis)."""
    m, sigma = np.asarray(m, dtype=float), np.asarray(sigma, dtype=float)
    ik = inv_kappa(alpha)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_r = np.log(eps * sigma) - np.log(m)  # m = 0 -> +inf
        out = np.where(ik > 0, np.exp(log_r / ik), np.where(log_r < 0, 0.0, np.inf))
    return np.where(np.isnan(log_r) | np.isnan(ik), np.nan, out)


def sample_complexity(f, m, sigma, alpha, *, eps: float, N_grid) -> dict[str, np.ndarray]:
    """SNR, detection, N_hat, N*, eps_th on the (lag, N) grid, vectorised over lags."""
    N = np.asarray(N_grid, dtype=float)
    f, m, sigma = (np.asarray(v, dtype=float) for v in (f, m, sigma))
    ik = inv_kappa(alpha)[:, None]
    scale_ok = (np.isfinite(sigma) & (sigma > 0))[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        snr = np.where(scale_ok, m[:, None] * N[None, :] ** ik / sigma[:, None], np.nan)
    detected = snr > eps
    any_det = detected.any(axis=1)
    N_hat = np.where(any_det, N[np.argmax(detected, axis=1)], np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eps_th = f[:, None] * (N_hat[:, None] / N[None, :]) ** ik
    return dict(snr=snr, detected=detected, N_hat=N_hat, N_star=n_star(m, sigma, alpha, eps), eps_th=eps_th)


def learnability_window(lag, N_hat, N_grid) -> np.ndarray:
    """H_N = max{l : N_hat(l) <= N} for every N of the grid (0 when no lag qualifies)."""
    N = np.asarray(N_grid, dtype=float)
    ok = np.asarray(N_hat, dtype=float)[:, None] <= N[None, :]  # NaN -> False
    return np.max(np.where(ok, np.asarray(lag)[:, None], 0), axis=0, initial=0).astype(np.int64)


def significant(P: np.ndarray) -> np.ndarray:
    """Per row of P (lags x sequences): |mean| > 2 standard errors of the mean (see above)."""
    n = P.shape[1]
    se = P.std(axis=1, ddof=1) / np.sqrt(n) if n > 1 else np.full(P.shape[0], np.inf)
    return np.abs(P.mean(axis=1)) > SIGNIFICANCE_SE * se


def bootstrap_sequences(X: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Resample the columns (sequences) of X (rows x n) ``n_boot`` times with replacement ->
    (means, iqr_ratio), each (n_boot, rows): the resample's row means and IQR_b / IQR."""
    n = X.shape[1]
    idx = rng.integers(0, n, size=(n_boot, n))
    q75, q25 = np.quantile(X, [0.75, 0.25], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_iqr = 1.0 / (q75 - q25)
    chunk = max(1, CHUNK_ELEMENTS // max(X.size, 1))
    means, ratios = [], []
    for start in range(0, n_boot, chunk):
        Xb = X[:, idx[start:start + chunk]]  # (rows, chunk, n)
        means.append(Xb.mean(axis=-1).T)
        b75, b25 = np.quantile(Xb, [0.75, 0.25], axis=-1)
        with np.errstate(invalid="ignore"):  # IQR = 0: NaN ratio, the lag has no scale
            ratios.append(((b75 - b25) * inv_iqr[:, None]).T)
    return np.concatenate(means), np.concatenate(ratios)


def _slopes(x: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """OLS slope of every row of Y (B, k) on x; NaN for rows with a non-finite value."""
    ok = np.isfinite(Y).all(axis=1)
    out = np.full(Y.shape[0], np.nan)
    if ok.any():
        out[ok] = ols(x, Y[ok].T)[1]
    return out


def _ci(samples: np.ndarray) -> tuple[float, float]:
    s = samples[np.isfinite(samples)]
    return tuple(np.quantile(s, [0.025, 0.975]).tolist()) if s.size else (np.nan, np.nan)


def master_points(f, kappa, N_star, *, significant, reliable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The master law's points per lag (docs/method.md §7): x = -kappa log f, y = log N* and
    whether the lag enters the fit (significant, reliable alpha, finite x and y; see above).
    The master fit of :func:`window_table` and figures 5 and 9 both take their points here."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = -np.asarray(kappa, dtype=float) * np.log(np.asarray(f, dtype=float))
        y = np.log(np.asarray(N_star, dtype=float))
    included = np.asarray(significant, bool) & np.asarray(reliable, bool) & np.isfinite(x) & np.isfinite(y)
    return x, y, included


def master_law(x, y, *, boot_y=None) -> dict:
    """OLS of y = log N* on x = -kappa log f (valid lags only) with the bootstrap 95 % CI of the
    slope from ``boot_y`` (resamples x lags); docs/method.md §7."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    nan = float("nan")
    out = dict(slope=nan, intercept=nan, r2=nan, slope_lo=nan, slope_hi=nan, n_points=int(x.size))
    if x.size < 3 or np.ptp(x) == 0:
        out["flag"] = f"{x.size} valid lags (need >= 3 with distinct x)"
        return out
    intercept, slope, rss = ols(x, y)
    syy = np.sum((y - y.mean()) ** 2)
    lo, hi = _ci(_slopes(x, boot_y)) if boot_y is not None else (nan, nan)
    out.update(slope=float(slope), intercept=float(intercept),
               r2=float(1 - rss / syy) if syy > 0 else 1.0, slope_lo=lo, slope_hi=hi, flag="")
    return out


def exponents(log_f, log_m, log_sigma, *, boot_log_m, boot_log_sigma) -> dict:
    """b = slope of log m on log f and a = slope of log sigma on log f (docs/method.md §7b), with
    bootstrap 95 % CIs from the resampled (B, lags) arrays."""
    nan = float("nan")
    out = dict(b=nan, b_lo=nan, b_hi=nan, a=nan, a_lo=nan, a_hi=nan, n_points=int(np.size(log_f)))
    if np.size(log_f) < 3 or np.ptp(log_f) == 0:
        out["flag"] = f"{np.size(log_f)} valid lags (need >= 3 with distinct f)"
        return out
    b_lo, b_hi = _ci(_slopes(log_f, boot_log_m))
    a_lo, a_hi = _ci(_slopes(log_f, boot_log_sigma))
    out.update(b=float(ols(log_f, log_m)[1]), b_lo=b_lo, b_hi=b_hi,
               a=float(ols(log_f, log_sigma)[1]), a_lo=a_lo, a_hi=a_hi, flag="")
    return out


def check_noise(noise: Sequence[str], total, alpha_fit) -> None:
    """Reject an unknown or empty ``window.noise``, and pooled without its inputs (docs/method.md §7b)."""
    bad = sorted(set(noise) - set(NOISES))
    if bad or not len(noise):
        raise ValueError(f"window.noise = {list(noise)}: allowed values {list(NOISES)}, at least one")
    if POOLED in noise and (total is None or alpha_fit is None):
        raise ValueError(f"window.noise has {POOLED!r} but no total.parquet (S_n) or no alpha section was given")


def lag_inputs(psi: pd.DataFrame, alpha: pd.DataFrame, envelope: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per lag (sorted): sigma, alpha, reliable (alpha.parquet), f (envelope), m = |mean_n psi_n(l)|
    and ``significant``; and psi as a (lag x sequence) frame in that lag order (docs/method.md §7)."""
    wide = per_sequence(psi).pivot(index="lag", columns="sequence", values="psi").sort_index()
    P = wide.to_numpy(float)  # (lags, sequences)
    lags = (
        alpha[["lag", "sigma", "alpha", "reliable"]]
        .merge(envelope[["lag", "f"]], on="lag")
        .merge(pd.DataFrame({"lag": wide.index, "m": np.abs(P.mean(axis=1)),
                             "significant": significant(P)}), on="lag")
        .sort_values("lag", ignore_index=True)
    )
    return lags, wide.loc[lags["lag"]]


def resample(P: np.ndarray, S: np.ndarray | None, bootstrap: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The sequence bootstrap of docs/method.md §7 (choices above): |m| per (resample, lag) and the
    IQR ratios per (resample, lag [, S]), one draw of sequence ids for psi and S, from
    ``default_rng([seed, 0])``."""
    X = P if S is None else np.vstack([P, S[None, :]])
    boot_m, ratio = bootstrap_sequences(X, int(bootstrap), np.random.default_rng([int(seed), 0]))
    return np.abs(boot_m[:, : len(P)]), ratio


def _noise_inputs(noise, lags, S, alpha_fit, seed, ratio, L):
    """(sigma, alpha, reliable) per lag and sigma per (resample, lag) of one noise definition
    (docs/method.md §7b)."""
    if noise == PER_LAG:
        sigma = lags["sigma"].to_numpy(float)
        return sigma, lags["alpha"].to_numpy(float), lags["reliable"].to_numpy(bool), sigma * ratio[:, :L]
    fit = fit_sample(S, **alpha_fit, seed=[int(seed), 1])
    sigma = np.full(L, fit.sigma)
    return sigma, np.full(L, fit.alpha), np.full(L, fit.reliable), fit.sigma * ratio[:, L:L + 1] * np.ones(L)


def noise_tables(name: str, lags: pd.DataFrame, inputs: tuple, boot_m: np.ndarray, *, eps: float,
                 N: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict]:
    """window rows, H_N rows, the master-law row and the exponents row of one noise definition
    (docs/method.md §7, §7b); ``inputs`` = (sigma, alpha, reliable, boot_sigma) of :func:`_noise_inputs`."""
    sigma, a, reliable, boot_sigma = inputs
    L, G = len(lags), N.size
    f, m, sig_lag = (lags[c].to_numpy(t) for c, t in (("f", float), ("m", float), ("significant", bool)))
    kap = kappa_of(a)
    sc = sample_complexity(f, m, sigma, a, eps=eps, N_grid=N)
    window = pd.DataFrame(
        {
            "noise": name,
            "lag": np.repeat(lags["lag"].to_numpy(), G),
            "N": np.tile(N, L),
            **{k: np.repeat(v, G) for k, v in dict(
                f=f, m=m, sigma=sigma, alpha=a, kappa=kap, reliable=reliable, significant=sig_lag).items()},
            "snr": sc["snr"].ravel(),
            "N_hat": np.repeat(sc["N_hat"], G),
            "N_star": np.repeat(sc["N_star"], G),
            "detected": sc["detected"].ravel(),
            "eps_th": sc["eps_th"].ravel(),
        }
    )
    h_n = pd.DataFrame({"noise": name, "N": N, "H_N": learnability_window(lags["lag"], sc["N_hat"], N)})
    x, y, ok = master_points(f, kap, sc["N_star"], significant=sig_lag, reliable=reliable)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot_y = np.log(n_star(boot_m, boot_sigma, a, eps))
        log_f, boot_log_m, boot_log_s = np.log(f[ok]), np.log(boot_m[:, ok]), np.log(boot_sigma[:, ok])
        log_m, log_s = np.log(m[ok]), np.log(sigma[ok])
    counts = dict(n_significant=int(sig_lag.sum()))
    master = {"noise": name, **master_law(x[ok], y[ok], boot_y=boot_y[:, ok]), **counts}
    expo = {"noise": name, **exponents(log_f, log_m, log_s, boot_log_m=boot_log_m, boot_log_sigma=boot_log_s),
            **counts}
    return window, h_n, master, expo


def window_table(
    psi: pd.DataFrame,
    alpha: pd.DataFrame,
    envelope: pd.DataFrame,
    total: pd.DataFrame | None = None,
    *,
    eps: float,
    N_grid,
    noise: Sequence[str],
    bootstrap: int,
    seed: int | None = None,
    alpha_fit: Mapping | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """window, H_N, master and exponents rows of one snapshot, one block per transport (the tables'
    ``transport`` column, docs/method.md §4b) and noise definition (docs/method.md §7, §7b). ``eps``, ``N_grid``, ``noise`` and ``bootstrap`` are the window config section. ``total``
    (total.parquet) and ``alpha_fit`` (the alpha config section, keywords of
    :func:`learnwin.stats.alpha.fit_sample`, for the S fit) are needed for ``pooled``. The sequence
    bootstrap draws from ``default_rng([seed, 0])``, the S fit is seeded [seed, 1], under every
    transport; ``seed`` None (the workflow's call) = :func:`bootstrap_seed` of psi."""
    check_noise(noise, total, alpha_fit)
    if seed is None:
        seed = bootstrap_seed(psi)
    kw = dict(eps=eps, N_grid=N_grid, noise=noise, bootstrap=bootstrap, seed=seed, alpha_fit=alpha_fit)
    for name, table in (("psi", psi), ("alpha", alpha), ("envelope", envelope), ("total", total)):
        if table is not None:
            io.require_columns(table, f"{name} table", ["transport"])
    blocks = []
    for name in pd.unique(psi["transport"]):
        tables = [None if t is None else t[t["transport"] == name].drop(columns="transport")
                  for t in (psi, alpha, envelope, total)]
        blocks.append([_with_transport(df, name) for df in _window_one(*tables, **kw)])
    return tuple(pd.concat(parts, ignore_index=True) for parts in zip(*blocks))


def _with_transport(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """``df`` with a ``transport`` column just before ``noise``."""
    df.insert(df.columns.get_loc("noise"), "transport", name)
    return df


def _window_one(psi, alpha, envelope, total, *, eps, N_grid, noise, bootstrap, seed, alpha_fit):
    """:func:`window_table` of one transport's rows: its steps in order."""
    keys = {c: psi[c].iloc[0] for c in RUN_KEYS if c in psi.columns and len(psi)}
    lags, wide = lag_inputs(psi, alpha, envelope)
    S = total.set_index("sequence")["S"].reindex(wide.columns).to_numpy(float) if POOLED in noise else None
    boot_m, ratio = resample(wide.to_numpy(float), S, bootstrap, seed)
    N = np.asarray(N_grid, dtype=np.int64)
    blocks = [noise_tables(name, lags, _noise_inputs(name, lags, S, alpha_fit, seed, ratio, len(lags)), boot_m,
                           eps=eps, N=N) for name in noise]
    return _snapshot_frames(*(list(b) for b in zip(*blocks)), keys)


def _snapshot_frames(windows, h_ns, masters, exps, keys: dict):
    """The four tables of one snapshot: run-key columns first, fixed column order and dtypes
    (docs/artifacts.md)."""
    frames = []
    for df in (pd.concat(windows, ignore_index=True), pd.concat(h_ns, ignore_index=True),
               pd.DataFrame(masters), pd.DataFrame(exps)):
        for col, val in reversed(keys.items()):
            df.insert(0, col, val)
        frames.append(df)
    window, h_n, master, expo = frames
    master = master[[*keys, "noise", "slope", "intercept", "r2", "slope_lo", "slope_hi", "n_points",
                     "n_significant", "flag"]]
    expo = expo[[*keys, "noise", "b", "b_lo", "b_hi", "a", "a_lo", "a_hi", "n_points", "n_significant", "flag"]]
    ints = {"n_points": "int64", "n_significant": "int64"}
    return (
        window.astype({"lag": "int64", "N": "int64", "reliable": bool, "significant": bool, "detected": bool}),
        h_n,
        master.astype(ints),
        expo.astype(ints),
    )


def seed_inputs(window: pd.DataFrame) -> pd.DataFrame:
    """Per (model, optimizer, epoch, transport, noise, seed): the medians over reliable lags (f > 0)
    of alpha, sigma and c = m / f."""
    lags = window.drop_duplicates([*RUN_KEYS, "transport", "noise", "lag"])
    lags = lags[lags["reliable"] & (lags["f"] > 0)].assign(c=lambda d: d["m"] / d["f"])
    return lags.groupby([*AGG_KEYS, "transport", "noise", "seed"])[["alpha", "sigma", "c"]].median().reset_index()


def predicted_inputs(window: pd.DataFrame) -> pd.DataFrame:
    """Per (model, optimizer, epoch, transport, noise): medians over seeds of :func:`seed_inputs`
    (the inputs of the predicted H_N)."""
    per_seed = seed_inputs(window).drop(columns="seed")
    return per_seed.groupby([*AGG_KEYS, "transport", "noise"]).median().add_prefix("pred_").reset_index()


def aggregate(
    h_n_frames, window_frames, master_frames, exponent_frames, decay_frames, *, eps: float, N_grid
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The aggregated H_N, H_N_agg, master and exponents tables (docs/artifacts.md) from the
    per-snapshot and decay tables, per transport and noise definition.

    Snapshots whose envelope is NaN at every lag (a diverged run's tombstones) are left out.
    """
    windows = pd.concat(list(window_frames), ignore_index=True)
    finite = np.isfinite(windows["f"].astype(float))
    alive = windows.loc[finite, list(RUN_KEYS)].drop_duplicates()
    h_n = pd.concat(list(h_n_frames), ignore_index=True).merge(alive, on=list(RUN_KEYS))
    group = [*AGG_KEYS, "transport", "noise"]
    grouped = h_n.groupby([*group, "N"])["H_N"]
    agg = grouped.agg(n_seeds="count", mean="mean", std="std", median="median").reset_index()
    agg["q25"] = grouped.quantile(0.25).to_numpy()
    agg["q75"] = grouped.quantile(0.75).to_numpy()
    agg = agg.astype({"n_seeds": "int64"})
    inputs = predicted_inputs(windows).set_index(group)
    decay = primary(pd.concat(list(decay_frames), ignore_index=True))
    chosen = decay[(decay["scope"] == "mean") & decay["selected"]].set_index([*AGG_KEYS, "transport"])
    pred = []
    for key, block in agg.groupby(group, sort=False):
        row_in = inputs.reindex([key])
        law_row = chosen.reindex([key[:-1]])
        a, s, c = (float(row_in[f"pred_{v}"].iloc[0]) for v in ("alpha", "sigma", "c"))
        if law_row["law"].isna().iloc[0] or not np.isfinite([a, s, c]).all():
            values, law = np.full(len(block), np.nan), "none"
        else:
            law = law_row["law"].iloc[0]
            curve = predict_window(law_row.iloc[0], a, s, c, eps, N_grid)
            values = block["N"].map(dict(zip(np.asarray(N_grid).tolist(), curve))).to_numpy(float)
        pred.append(block.assign(predicted=values, law=law, pred_alpha=a, pred_sigma=s, pred_c=c))
    agg = pd.concat(pred).sort_index() if pred else agg.assign(  # every run diverged
        predicted=np.nan, law="none", pred_alpha=np.nan, pred_sigma=np.nan, pred_c=np.nan)
    master = pd.concat(list(master_frames), ignore_index=True)
    return h_n, agg, master, pd.concat(list(exponent_frames), ignore_index=True)
