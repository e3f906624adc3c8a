"""How the measured window grows with N (docs/method.md §10): censoring-aware fits of H(N) as
a + b log N against a N^c, Akaike weights, the curvature against log N, and each seed's log-N
slope.

* **Likelihood (Tobit).** Gaussian residuals of common sigma around mu(N); a right-censored
  point (H >= c, the largest grid lag was learned) contributes log(1 - Phi((c - mu) / sigma)).
  Maximum likelihood with scipy.optimize.minimize (Nelder-Mead, then BFGS; log sigma as the
  parameter), from least-squares starts.
* **Laws.** "log N": mu = a + b log N; "power": mu = a N^c. Both have 3 parameters, so the
  Akaike weights are the likelihood ratio's. Verdict: the law whose weight is > 0.9
  (:data:`DECISIVE_WEIGHT`), else "undecided".
* **Curvature.** mu = a + b x + q x^2 with x = log N (the log law is q = 0, a power law is
  convex: q > 0), fitted to each seed's own N ladder (the runs of a seed are paired across N, so
  the seed is the unit); reported: the mean q over seeds, its Student t-interval over seeds
  (:func:`learnwin.stats.intervals.t_interval`, docs/method.md §10 "Intervals over seeds"), the
  seeds with a q and those with q > 0.
* **Per seed.** :func:`seed_growth`: the log law's slope b of each (model, threshold, seed), the
  unit the architectures are compared on (:mod:`learnwin.stats.seedlevel`; docs/method.md §10b).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import optimize, stats

from learnwin.stats.intervals import t_interval

LAWS = ("log", "power")
DECISIVE_WEIGHT = 0.9
SIGMA_FLOOR = 1e-6  # a law that fits every point exactly (H constant, say) keeps a finite likelihood


def design(law: str, N) -> np.ndarray:
    """Columns of the linear laws in log N: log (1, x), quadratic (1, x, x^2)."""
    x = np.log(np.asarray(N, dtype=float))
    cols = {"log": [np.ones_like(x), x], "quadratic": [np.ones_like(x), x, x ** 2]}[law]
    return np.stack(cols, axis=1)


def mean_curve(law: str, theta: np.ndarray, N) -> np.ndarray:
    """mu(N) of a law's parameters (without log sigma)."""
    if law == "power":
        a, c = theta
        return a * np.asarray(N, dtype=float) ** c
    return design(law, N) @ theta


def tobit_loglik(H, censored, mu, sigma: float) -> float:
    """Gaussian log-likelihood with right-censored points (H = the censoring lag)."""
    H, mu = np.asarray(H, dtype=float), np.asarray(mu, dtype=float)
    cens = np.asarray(censored, dtype=bool)
    z = (H - mu) / sigma
    return float(np.sum(np.where(cens, stats.norm.logsf(z), stats.norm.logpdf(z) - np.log(sigma))))


def _start(law: str, N, H) -> np.ndarray:
    N, H = np.asarray(N, dtype=float), np.asarray(H, dtype=float)
    if law == "power":
        ok = H > 0
        if ok.sum() >= 2 and np.ptp(np.log(N[ok])) > 0:
            c, log_a = np.polyfit(np.log(N[ok]), np.log(H[ok]), 1)
            return np.array([np.exp(log_a), c])
        return np.array([max(H.mean(), 1e-3), 0.1])
    X = design(law, N)
    return np.linalg.lstsq(X, H, rcond=None)[0]


def fit_law(law: str, N, H, censored) -> dict:
    """Maximum-likelihood fit of one law: parameters, sigma, log-likelihood, AIC, n. A law linear
    in its parameters on uncensored points is least squares, in closed form (sigma^2 = RSS / n,
    floored at :data:`SIGMA_FLOOR`); with censored points BFGS with the exact gradient from the
    least-squares start; the power law by Nelder-Mead, then BFGS."""
    N, H = np.asarray(N, dtype=float), np.asarray(H, dtype=float)
    cens = np.asarray(censored, dtype=bool)
    if law != "power" and not cens.any():
        theta = _start(law, N, H)
        mu = mean_curve(law, theta, N)
        sigma = max(float(np.sqrt(np.mean((H - mu) ** 2))), SIGMA_FLOOR)
        ll = tobit_loglik(H, cens, mu, sigma)
        return dict(law=law, params=theta, sigma=sigma, loglik=ll, aic=2 * (theta.size + 1) - 2 * ll, n=int(H.size))
    theta0 = _start(law, N, H)
    resid = H - mean_curve(law, theta0, N)
    p0 = np.append(theta0, np.log(max(resid.std(), 1e-2 * max(H.std(), 1e-3), 1e-6)))

    def nll(p):
        with np.errstate(over="ignore", invalid="ignore"):
            mu = mean_curve(law, p[:-1], N)
        if not np.all(np.isfinite(mu)):
            return np.inf
        return -tobit_loglik(H, cens, mu, np.exp(p[-1]))

    if law == "power":
        best = optimize.minimize(nll, p0, method="Nelder-Mead",
                                 options=dict(maxiter=4000, xatol=1e-8, fatol=1e-10))
        polished = optimize.minimize(nll, best.x, method="BFGS")
        p = polished.x if polished.fun < best.fun else best.x
    else:  # linear in theta: BFGS with the exact gradient
        p = optimize.minimize(nll, p0, jac=functools.partial(_linear_nll_grad, design(law, N), H, cens),
                              method="BFGS", options=dict(gtol=1e-9)).x
    ll = -nll(p)
    k = p.size
    return dict(law=law, params=p[:-1], sigma=float(np.exp(p[-1])), loglik=ll, aic=2 * k - 2 * ll,
                n=int(H.size))


def _linear_nll_grad(X: np.ndarray, H: np.ndarray, cens: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Gradient of the censored negative log-likelihood of mu = X theta in (theta, log sigma)."""
    sigma = np.exp(p[-1])
    z = (H - X @ p[:-1]) / sigma
    mills = np.exp(stats.norm.logpdf(z) - stats.norm.logsf(z))  # -d logsf / dz
    d_mu = np.where(cens, mills, z) / sigma  # d loglik / d mu
    d_s = np.where(cens, mills * z, z ** 2 - 1.0)  # d loglik / d log sigma
    return -np.append(X.T @ d_mu, d_s.sum())


def akaike_weights(aic) -> np.ndarray:
    """exp(-AIC / 2), normalised."""
    a = np.asarray(aic, dtype=float)
    w = np.exp(-(a - np.nanmin(a)) / 2)
    return w / np.nansum(w)


def curvature(N, H, censored, seed_ids) -> dict:
    """q of the quadratic in log N per seed, their mean with its Student t-interval over seeds
    (curvature, curvature_t_lo, curvature_t_hi), curvature_seeds (the seeds with a q: three
    distinct N among their uncensored points) and n_convex (those with q > 0)."""
    N, H, cens = np.asarray(N, float), np.asarray(H, float), np.asarray(censored, bool)
    seed_ids = np.asarray(seed_ids)
    q = [fit_law("quadratic", N[m], H[m], cens[m])["params"][2] if np.unique(N[m & ~cens]).size >= 3 else np.nan
         for m in (seed_ids == s for s in np.unique(seed_ids))]
    mean, lo, hi, n = t_interval(q)
    return dict(curvature=mean, curvature_t_lo=lo, curvature_t_hi=hi, curvature_seeds=n,
                n_convex=int(np.sum(np.asarray(q) > 0)))


def growth_fit(N, H, censored, seed_ids) -> dict:
    """Both laws, their Akaike weights, the verdict and the curvature for one model (NaN and
    "undecided" with fewer than 4 points or 2 distinct N)."""
    if np.size(H) < 4 or np.unique(N).size < 2:
        return dict(n_points=int(np.size(H)), n_censored=int(np.sum(censored)), verdict="undecided",
                    weight_log=np.nan, weight_power=np.nan)
    fits = {law: fit_law(law, N, H, censored) for law in LAWS}
    w = akaike_weights([fits[law]["aic"] for law in LAWS])
    weights = dict(zip(LAWS, w))
    best = max(weights, key=weights.get)
    verdict = {"log": "log N", "power": "power"}[best] if weights[best] > DECISIVE_WEIGHT else "undecided"
    a_log, b_log = fits["log"]["params"]
    a_pow, c_pow = fits["power"]["params"]
    return dict(
        n_points=int(np.size(H)), n_censored=int(np.sum(censored)),
        log_a=float(a_log), log_b=float(b_log), log_sigma=fits["log"]["sigma"], log_aic=fits["log"]["aic"],
        power_a=float(a_pow), power_c=float(c_pow), power_sigma=fits["power"]["sigma"],
        power_aic=fits["power"]["aic"], weight_log=float(weights["log"]),
        weight_power=float(weights["power"]), verdict=verdict,
        **curvature(N, H, censored, seed_ids),
    )


def growth_table(window: pd.DataFrame, *, map_fn: Callable = map) -> pd.DataFrame:
    """:func:`growth_fit` per (model, threshold) of a table with model, threshold, seed, N, H,
    censored; ``map_fn`` maps over the (model, threshold) blocks (an executor's map runs them in
    parallel)."""
    blocks = list(window.groupby(["model", "threshold"], sort=True))
    fits = map_fn(_block_fit, [g for _, g in blocks])
    return pd.DataFrame([dict(model=model, threshold=thr, **fit) for ((model, thr), _), fit in zip(blocks, fits)])


def _block_fit(g: pd.DataFrame) -> dict:
    """:func:`growth_fit` of one (model, threshold) block."""
    return growth_fit(g["N"], g["H"], g["censored"], g["seed"])


def seed_growth(window: pd.DataFrame, *, map_fn: Callable = map) -> pd.DataFrame:
    """The seed as the unit (docs/method.md §10b, "Pre-registered: the seed as the unit"): one row per
    (model, [optimizer,] threshold, seed) of a table with model, threshold, seed, N, H, censored:
    b, the log-N slope of H = a + b log N by the censored likelihood (:func:`fit_law`; NaN with
    fewer than 2 distinct N), n_points and n_censored. ``map_fn`` maps over the blocks."""
    keys = [c for c in ("model", "optimizer", "threshold", "seed") if c in window]
    blocks = list(window.groupby(keys, sort=True))
    slopes = list(map_fn(_seed_slope, [g for _, g in blocks]))
    out = pd.DataFrame([key for key, _ in blocks], columns=keys)
    return out.assign(b=np.asarray(slopes, dtype=float), n_points=[len(g) for _, g in blocks],
                      n_censored=[int(g["censored"].sum()) for _, g in blocks])


def _seed_slope(g: pd.DataFrame) -> float:
    """b of the log law fitted to one (model, threshold, seed)'s H(N)."""
    if g["N"].nunique() < 2:
        return np.nan
    return float(fit_law("log", g["N"], g["H"], g["censored"])["params"][1])
