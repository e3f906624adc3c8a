"""How the measured window grows with N (docs/method.md §10): censoring-aware fits of H(N) as
a + b log N against a N^c, Akaike weights, the curvature against log N, and whether the
architectures' slopes differ.

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
* **Architectures.** Likelihood-ratio test of one common slope b (each model its own a and
  sigma) against a slope per model under the log law: 2 (ll_separate - ll_common) against
  chi^2 with (models - 1) degrees of freedom. :func:`groups_differ`: the same test of one common
  slope against one slope per group of models (docs/method.md §10b, claim (b)).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

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


def slopes_differ(window: pd.DataFrame) -> pd.DataFrame:
    """Per threshold: the likelihood-ratio test of one common log-N slope across models, that is
    :func:`groups_differ` with every model its own group (threshold, n_models, lr, df, p_value)."""
    own = {m: m for m in sorted(window["model"].unique())}
    return groups_differ(window, own)[["threshold", "n_models", "lr", "df", "p_value"]]


def groups_differ(window: pd.DataFrame, groups: Mapping[str, str]) -> pd.DataFrame:
    """Per threshold: the likelihood-ratio test of one common log-N slope for every model against one
    slope per group (docs/method.md §10b, claim (b)); ``groups`` maps model -> group, models absent
    from it are left out. Every model keeps its own intercept and sigma. One row per threshold:
    threshold, groups, n_models, slope_<group> (the group's common slope), lr, df (groups - 1), p_value."""
    names = list(dict.fromkeys(groups.values()))
    cols = ["threshold", "groups", "n_models", *(f"slope_{g}" for g in names), "lr", "df", "p_value"]
    window = window[window["model"].isin(list(groups))]
    rows = []
    for thr, g in window.groupby("threshold", sort=True):
        blocks = dict(list(g.groupby("model", sort=True)))
        members = {k: [m for m in blocks if groups[m] == k] for k in names}
        members = {k: v for k, v in members.items() if v}
        fits = {k: _group_fit([blocks[m] for m in v]) for k, v in members.items()}
        common = _common_slope_fit(list(blocks.values()))[0]
        lr = max(2 * (sum(ll for ll, _ in fits.values()) - common), 0.0)
        df = len(fits) - 1
        rows.append(dict(threshold=thr, groups="; ".join(f"{k}: {', '.join(v)}" for k, v in members.items()),
                         n_models=len(blocks), **{f"slope_{k}": fits[k][1] if k in fits else np.nan for k in names},
                         lr=lr, df=df, p_value=float(stats.chi2.sf(lr, df)) if df > 0 else np.nan))
    return pd.DataFrame(rows, columns=cols)


def _group_fit(blocks) -> tuple[float, float]:
    """(max log-likelihood, slope) of blocks sharing one slope; one block is its own log-law fit."""
    if len(blocks) == 1:
        fit = fit_law("log", blocks[0]["N"], blocks[0]["H"], blocks[0]["censored"])
        return fit["loglik"], float(fit["params"][1])
    return _common_slope_fit(blocks)


def _common_slope_fit(blocks) -> tuple[float, float]:
    """(max log-likelihood, b) with one slope b shared by every block (own intercept and sigma),
    profiled over b."""
    def neg(b):
        total = 0.0
        for blk in blocks:
            x = np.log(blk["N"].to_numpy(float))
            resid = blk["H"].to_numpy(float) - b * x
            fit = fit_law("log", np.exp(np.zeros_like(x)), resid, blk["censored"].to_numpy(bool))
            total += fit["loglik"]  # intercept-only fit: the design at N = 1 is (1, 0)
        return -total
    slopes = [fit_law("log", b["N"], b["H"], b["censored"])["params"][1] for b in blocks]
    res = optimize.minimize_scalar(neg, bounds=(min(slopes) - 1, max(slopes) + 1), method="bounded")
    return -float(res.fun), float(res.x)
