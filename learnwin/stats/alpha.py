"""Symmetric alpha-stable tail index of the detection statistic psi, per lag (docs/method.md §6).

Two estimators, one selection rule:

* ECF regression (primary, Koutrouvelis-type, exactly as docs/method.md §6): s = IQR / 1.349; 50 points
  t in [0.05/s, 3/s]; |phi(t)|^2 from the mean cos and sin; keep 0.01 < |phi|^2 < 0.95 (>= 5
  points), else 1e-4 < |phi|^2 < 0.999 (>= 3 points), else the fit fails; weighted least squares
  of log(-log|phi|^2) on log t with weights exp(-2 (log|phi|^2 + 0.7)^2); alpha = slope clipped
  to [1, 2]; sigma = (exp(intercept) / 2)^(1 / alpha). When the slope is clipped, the intercept
  is the weighted least-squares one at the clipped slope (ym - alpha xm); with the unclipped
  slope's intercept sigma would scale as c^(slope / alpha) when the data scale by c (found by
  the rate-scale invariance test of tests/test_window.py).
* McCulloch quantile ratio R = (q95 - q05) / (q75 - q25), inverted through the fine table
  ``learnwin/stats/tables/mcculloch_alpha.csv`` (201 alphas in [1, 2], built by
  ``tools/build_alpha_table.py`` from ``scipy.stats.levy_stable.ppf``; loaded once and cached);
  sigma = IQR / (2 q75(alpha)). Its bootstrap (median and 95 % percentile CI) is exact and
  vectorised: a resample's quantiles depend only on a handful of its order statistics, and the
  order statistics of n uniform draws of the indices 0..n-1 are floor(n U_(k)) with
  U_(k) = S_k / S_(n+1), S the partial sums of n + 1 standard exponentials (so the needed ones
  come from one (B, m) gamma draw of the spacings). This has the distribution of the (B, n)
  index-draw bootstrap at O(B) RAM and time instead of O(B n) (400 MB at n = 1e5, B = 500).

Selection (docs/method.md §6): ECF when it succeeded and the sample is reliable; else the McCulloch
bootstrap median when its CI width < ``ci_width_max``; else alpha = 2 (method ``default``,
sigma from the IQR at alpha = 2).

Choices where the spec is silent:

* Sample reliability (docs/method.md §6): n >= ``min_samples``, IQR >= 1e-10, sigma >= 1e-12. In addition
  any non-finite value in the input makes the row unreliable (the finite values are still fitted)
  and fewer than 10 finite values skip both fits (alpha = 2, method ``default``).
* The output column ``reliable`` is the sample reliability AND a non-default method AND a finite
  kappa bound: when the McCulloch 95 % CI (or, without it, the selected alpha) reaches alpha = 1,
  kappa is unbounded (the mean does not concentrate) and the row is flagged "kappa unbounded".
  This is what marks a pure Cauchy sample unreliable.
* ``flag`` joins every reason with "; " ("" when reliable).
* Above ``max_samples`` values a seeded subsample without replacement is fitted.
* Seeds: ``fit_lags`` derives its bootstrap seed from the run seed in the psi table's ``seed``
  column, run seed + ``SEED_OFFSET`` (a stream apart from the run's data, init and directions),
  and lag l's generator from (that seed, l); so a direct library call gives the workflow's numbers.
* ``fit_lags`` fits lags (and transports, column ``transport``, docs/method.md §4b) one by one (each lag is its own estimation problem with its own failure
  modes). With a ``direction`` column, psi is first averaged over directions per (lag, sequence),
  which is the per-sequence sample docs/method.md §5 defines; nothing per direction is returned.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

TABLE_PATH = Path(__file__).with_name("tables") / "mcculloch_alpha.csv"
ECF_POINTS = 50
IQR_MIN = 1e-10
SIGMA_MIN = 1e-12
MIN_FIT = 10
_P_QUANT = np.array([0.05, 0.25, 0.75, 0.95])
_RUN_KEYS = ("model", "optimizer", "seed", "epoch")
SEED_OFFSET = 6_000  # bootstrap seed of a run's tail fits = run seed + SEED_OFFSET


def kappa(alpha):
    """kappa(alpha) = alpha / (alpha - 1), ``inf`` for alpha <= 1 (docs/method.md §6); scalar or array."""
    a = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(a > 1.0, a / (a - 1.0), np.inf)
    return out if out.ndim else float(out)


@functools.cache
def mcculloch_table() -> pd.DataFrame:
    """The packaged table (alpha increasing; ratio and q75 strictly decreasing), read once."""
    return pd.read_csv(TABLE_PATH)


def _alpha_from_ratio(ratio) -> np.ndarray:
    tab = mcculloch_table()
    r, a = tab["ratio"].to_numpy()[::-1], tab["alpha"].to_numpy()[::-1]
    return np.interp(ratio, r, a)  # outside the table: clipped to 2 (small R) or 1 (large R)


def _q75_unit(alpha) -> np.ndarray:
    tab = mcculloch_table()
    return np.interp(alpha, tab["alpha"].to_numpy(), tab["q75"].to_numpy())


def ecf_fit(x: np.ndarray) -> tuple[float, float, bool]:
    """Symmetric ECF regression of docs/method.md §6 -> (alpha, sigma, clipped); NaNs when it fails."""
    q25, q75 = np.quantile(x, [0.25, 0.75])
    s = (q75 - q25) / 1.349
    if not s > 0:
        return np.nan, np.nan, False
    t = np.linspace(0.05 / s, 3.0 / s, ECF_POINTS)
    # e^{i t_k x} by the recurrence e^{i t_0 x} (e^{i dt x})^k: one cumprod instead of 2 x 50 trig.
    z = np.empty((ECF_POINTS, x.size), dtype=complex)
    z[0] = np.exp(1j * t[0] * x)
    z[1:] = np.exp(1j * (t[1] - t[0]) * x)
    phi = np.cumprod(z, axis=0).mean(axis=1)
    p2 = phi.real**2 + phi.imag**2
    keep = (p2 > 0.01) & (p2 < 0.95)
    if keep.sum() < 5:
        keep = (p2 > 1e-4) & (p2 < 0.999)
        if keep.sum() < 3:
            return np.nan, np.nan, False
    lp = np.log(p2[keep])
    X, y = np.log(t[keep]), np.log(-lp)
    w = np.exp(-2.0 * (lp + 0.7) ** 2)
    xm, ym = np.average(X, weights=w), np.average(y, weights=w)
    slope = np.sum(w * (X - xm) * (y - ym)) / np.sum(w * (X - xm) ** 2)
    alpha = float(np.clip(slope, 1.0, 2.0))
    intercept = ym - alpha * xm  # the WLS intercept at the slope used (clipped: keeps sigma scale-equivariant)
    return alpha, float((np.exp(intercept) / 2.0) ** (1.0 / alpha)), bool(alpha != slope)


def mcculloch_alpha(x: np.ndarray) -> float:
    """Point McCulloch estimate of alpha (fine-table inversion of the quantile ratio)."""
    q05, q25, q75, q95 = np.quantile(x, _P_QUANT)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(_alpha_from_ratio((q95 - q05) / (q75 - q25)))


def bootstrap_mcculloch(
    x: np.ndarray, n_boot: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """Bootstrap of the McCulloch alpha -> (median, 2.5 %, 97.5 %); vectorised, see module doc."""
    xs = np.sort(x)
    n = xs.size
    h = (n - 1) * _P_QUANT  # numpy's default 'linear' quantile: x_(j) + g (x_(j+1) - x_(j))
    j = np.floor(h).astype(int)
    g = h - j
    ranks = np.unique(np.concatenate([j, np.minimum(j + 1, n - 1)]))  # 0-based order statistics
    shapes = np.diff(np.concatenate([[0], ranks + 1, [n + 1]])).astype(float)
    spacings = rng.gamma(shapes, size=(n_boot, shapes.size))
    cums = np.cumsum(spacings, axis=1)
    u = cums[:, :-1] / cums[:, -1:]
    order_stats = xs[np.minimum((n * u).astype(np.int64), n - 1)]
    lo = order_stats[:, np.searchsorted(ranks, j)]
    hi = order_stats[:, np.searchsorted(ranks, np.minimum(j + 1, n - 1))]
    q = lo + g * (hi - lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        alphas = _alpha_from_ratio((q[:, 3] - q[:, 0]) / (q[:, 2] - q[:, 1]))
    med, lo95, hi95 = np.quantile(alphas, [0.5, 0.025, 0.975])
    return float(med), float(lo95), float(hi95)


@dataclass
class AlphaFit:
    """One row of alpha.parquet (without the run keys and lag)."""

    n: int
    alpha: float
    sigma: float
    method: str
    alpha_ecf: float
    sigma_ecf: float
    alpha_mcc: float
    alpha_mcc_lo: float
    alpha_mcc_hi: float
    sigma_mcc: float
    reliable: bool
    agree: bool
    kappa: float
    clipped: bool
    flag: str


def fit_sample(
    x,
    *,
    bootstrap: int,
    min_samples: int,
    max_samples: int,
    ci_width_max: float,
    seed=0,
) -> AlphaFit:
    """Fit one sample (docs/method.md §6): both estimators, selection, reliability. Never raises.

    The keywords but ``seed`` are the alpha config section (no defaults here: the schema holds them)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, dtype=float).ravel()
    reasons = []
    finite = np.isfinite(x)
    if not finite.all():
        reasons.append(f"{int((~finite).sum())} non-finite values dropped")
        x = x[finite]
    if x.size > max_samples:
        x = rng.choice(x, size=max_samples, replace=False)
    n = int(x.size)
    nan = float("nan")
    a_ecf = s_ecf = a_mcc = a_lo = a_hi = s_mcc = nan
    ecf_clipped = False
    iqr = float(np.subtract(*np.quantile(x, [0.75, 0.25]))) if n else 0.0
    if n < MIN_FIT:
        reasons.append(f"n = {n} < {MIN_FIT}: not fitted")
    elif iqr < IQR_MIN:
        reasons.append(f"IQR = {iqr:.3g} < {IQR_MIN:g}: not fitted")
    else:
        a_ecf, s_ecf, ecf_clipped = ecf_fit(x)
        a_mcc, a_lo, a_hi = bootstrap_mcculloch(x, bootstrap, rng)
        s_mcc = float(iqr / (2.0 * _q75_unit(a_mcc)))
        if not np.isfinite(a_ecf):
            reasons.append("ECF failed (too few |phi|^2 points in band)")
    if MIN_FIT <= n < min_samples:
        reasons.append(f"n = {n} < min_samples = {min_samples}")
    sample_ok = n >= min_samples and iqr >= IQR_MIN and finite.all()
    if sample_ok and np.isfinite(a_ecf) and s_ecf >= SIGMA_MIN:
        method, alpha, sigma, clipped = "ecf", a_ecf, s_ecf, ecf_clipped
    elif np.isfinite(a_mcc) and a_hi - a_lo < ci_width_max:
        method, alpha, sigma = "mcculloch", a_mcc, s_mcc
        clipped = a_mcc in (1.0, 2.0)
    else:
        method, alpha, sigma, clipped = "default", 2.0, iqr / (2.0 * _q75_unit(2.0)), False
        if np.isfinite(a_mcc):
            reasons.append(f"McCulloch CI width {a_hi - a_lo:.3f} >= {ci_width_max}")
    if not sigma >= SIGMA_MIN:
        reasons.append(f"sigma = {sigma:.3g} < {SIGMA_MIN:g}")
    unbounded = (a_lo if np.isfinite(a_lo) else alpha) <= 1.0
    if method != "default" and unbounded:
        reasons.append("alpha CI reaches 1: kappa unbounded")
    reliable = sample_ok and method != "default" and sigma >= SIGMA_MIN and not unbounded
    if not reliable and not reasons:
        reasons.append(f"method {method}")
    agree = bool(np.isfinite(a_ecf) and a_lo <= a_ecf <= a_hi)
    return AlphaFit(
        n=n,
        alpha=float(alpha),
        sigma=float(sigma),
        method=method,
        alpha_ecf=a_ecf,
        sigma_ecf=s_ecf,
        alpha_mcc=a_mcc,
        alpha_mcc_lo=a_lo,
        alpha_mcc_hi=a_hi,
        sigma_mcc=s_mcc,
        reliable=bool(reliable),
        agree=agree,
        kappa=kappa(alpha),
        clipped=bool(clipped),
        flag="" if reliable else "; ".join(reasons),
    )


def per_sequence(psi: pd.DataFrame) -> pd.DataFrame:
    """psi with one row per (lag, sequence): averaged over ``direction`` when that column exists."""
    if "direction" not in psi.columns:
        return psi
    keys = [c for c in (*_RUN_KEYS, "transport", "lag", "sequence") if c in psi.columns]
    return psi.groupby(keys, as_index=False, sort=True)["psi"].mean()


def fit_lags(
    psi: pd.DataFrame,
    *,
    bootstrap: int,
    min_samples: int,
    max_samples: int,
    ci_width_max: float,
    seed: int | None = None,
) -> pd.DataFrame:
    """alpha.parquet rows (one per lag, and per transport when psi has that column) from a psi
    table; lag l's generator is seeded by (seed, l) under every transport.
    The keywords but ``seed`` are the alpha config section (its defaults live in the schema only).

    ``seed`` None (the workflow's call) = the run seed of psi's ``seed`` column + SEED_OFFSET.
    """
    if seed is None:
        runs = psi["seed"].unique() if "seed" in psi.columns else []
        if len(runs) != 1:
            raise ValueError(f"fit_lags: psi holds run seeds {list(runs)}; give one run or pass seed=")
        seed = int(runs[0]) + SEED_OFFSET
    psi = per_sequence(psi)
    keys = {c: psi[c].iloc[0] for c in _RUN_KEYS if c in psi.columns and len(psi)}
    by = [c for c in ("transport", "lag") if c in psi.columns]
    rows = []
    for key, group in psi.groupby(by, sort=True):
        fit = fit_sample(
            group["psi"].to_numpy(),
            bootstrap=bootstrap,
            min_samples=min_samples,
            max_samples=max_samples,
            ci_width_max=ci_width_max,
            seed=[int(seed), int(key[-1])],
        )
        rows.append({**keys, **dict(zip(by, key)), **asdict(fit)})
    columns = [*keys, *by, *AlphaFit.__dataclass_fields__]
    out = pd.DataFrame(rows, columns=columns)
    return out.astype({"lag": "int64", "n": "int64", "reliable": bool, "agree": bool, "clipped": bool})
