"""How the measured window grows with N (docs/method.md §10, §10c): censoring-aware fits of H(N),
each seed's growth exponent and log-N slope, and the verdict on the growth law with the seed as
the unit.

* **Likelihood (Tobit).** Gaussian residuals of common sigma around mu(N); a right-censored point
  (H >= c: the last grid lag was learned) contributes log(1 - Phi((c - mu) / sigma)), a
  left-censored one (H < c: not even the first grid lag, with H given as that lag) log Phi((c - mu)
  / sigma). Maximum likelihood with scipy.optimize.minimize (BFGS with the exact gradient for the
  laws linear in their parameters; Nelder-Mead, then BFGS for the power law).
* **Laws.** "log": mu = a + b log N; "power": mu = a N^c; "boxcox": mu = a + b ((N / N_ref)^c - 1) / c,
  log N at c = 0, a power of N for c > 0, saturating for c < 0, its c by profile likelihood on
  :data:`C_RANGE` (:func:`fit_boxcox`).
* **Per seed.** :func:`seed_growth`: per (model, threshold, seed) the Box-Cox exponent c and the log
  law's slope b, with the counts of uncensored, left- and right-censored points behind them.
* **Verdict.** :func:`shape_table`: per model the mean of c over its seeds and its Student
  t-interval; log N inside [-C_BAND, C_BAND], power above C_BAND, saturating below -C_BAND, else
  undecided (docs/method.md §10c). A model whose window is right-censored at its largest budget
  in any seed is "cut off". :func:`growth_table` adds the pooled fits' rates, which the eps-free
  prediction compares (they decide no verdict).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import optimize, special

from learnwin.stats.intervals import t_interval

C_RANGE = (-2.0, 2.0)  # the Box-Cox exponents searched (docs/method.md §10c)
C_BAND = 0.1  # |c| below this is log N; the paper's power laws have c >= 0.18 (§10c)
MIN_SHAPE_BUDGETS = 4  # a seed's c needs uncensored points at this many budgets
MIN_SHAPE_SEEDS = 3  # a model's verdict needs this many seeds with a c
LOG_N, POWER, SATURATING, UNDECIDED, TOO_FEW = "log N", "power", "saturating", "undecided", "too few seeds"
CUT_OFF = "cut off"
SIGMA_FLOOR = 1e-6  # a law that fits every point exactly (H constant, say) keeps a finite likelihood


def design(law: str, N, c: float = 0.0, n_ref: float = 1.0) -> np.ndarray:
    """Columns of the laws linear in their parameters: log (1, log N); boxcox (1, ((N / n_ref)^c - 1)
    / c), which is (1, log(N / n_ref)) at c = 0."""
    if law not in ("log", "boxcox"):
        raise ValueError(f"unknown linear law {law!r}")
    u = np.log(np.asarray(N, dtype=float)) - (np.log(n_ref) if law == "boxcox" else 0.0)
    return np.stack([np.ones_like(u), u if law == "log" or c == 0 else np.expm1(c * u) / c], axis=1)


def power_curve(theta: np.ndarray, N) -> np.ndarray:
    """mu(N) = a N^c of the power law's parameters (a, c)."""
    a, c = theta
    return a * np.asarray(N, dtype=float) ** c


_LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


def _flags(censored, left) -> tuple[np.ndarray, np.ndarray]:
    """(right, left) as boolean arrays; no ``left``: nothing left-censored."""
    right = np.asarray(censored, dtype=bool)
    return right, np.zeros_like(right) if left is None else np.asarray(left, dtype=bool)


def tobit_loglik(H, censored, mu, sigma: float, left=None) -> float:
    """Gaussian log-likelihood with right-censored (``censored``: H >= the given H) and
    left-censored (``left``: H < the given H) points (scipy.special's log_ndtr: the normal's
    log-CDF, log-survival at -z)."""
    H, mu = np.asarray(H, dtype=float), np.asarray(mu, dtype=float)
    right, low = _flags(censored, left)
    z = (H - mu) / sigma
    exact = -0.5 * z ** 2 - _LOG_SQRT_2PI - np.log(sigma)
    return float(np.sum(np.where(right, special.log_ndtr(-z), np.where(low, special.log_ndtr(z), exact))))


def _power_start(N, H) -> np.ndarray:
    """(a, c) of the log-log least squares on the positive H, the power law's start."""
    N, H = np.asarray(N, dtype=float), np.asarray(H, dtype=float)
    ok = H > 0
    if ok.sum() >= 2 and np.ptp(np.log(N[ok])) > 0:
        c, log_a = np.polyfit(np.log(N[ok]), np.log(H[ok]), 1)
        return np.array([np.exp(log_a), c])
    return np.array([max(H.mean(), 1e-3), 0.1])


def fit_law(law: str, N, H, censored, left=None) -> dict:
    """Maximum-likelihood fit of the power law or of the log law (linear in its parameters):
    parameters, sigma, log-likelihood, AIC, n. Without censored points the log law is least
    squares in closed form (sigma^2 = RSS / n, floored at :data:`SIGMA_FLOOR`)."""
    if law == "power":
        return _fit_power(N, H, censored, left)
    return fit_linear(design(law, N), H, censored, left, law=law)


def fit_linear(X: np.ndarray, H, censored, left=None, *, law: str = "linear") -> dict:
    """The censored likelihood of mu = X theta: least squares when nothing is censored, else BFGS
    with the exact gradient from the least-squares start."""
    H = np.asarray(H, dtype=float)
    right, low = _flags(censored, left)
    theta = np.linalg.lstsq(X, H, rcond=None)[0]
    if not (right.any() or low.any()):
        sigma = max(float(np.sqrt(np.mean((H - X @ theta) ** 2))), SIGMA_FLOOR)
        ll = tobit_loglik(H, right, X @ theta, sigma)
    else:
        resid = H - X @ theta
        p0 = np.append(theta, np.log(max(resid.std(), 1e-2 * max(H.std(), 1e-3), 1e-6)))

        def nll(p):
            return -tobit_loglik(H, right, X @ p[:-1], np.exp(p[-1]), low)

        p = optimize.minimize(nll, p0, jac=functools.partial(_linear_nll_grad, X, H, right, low),
                              method="BFGS", options=dict(gtol=1e-9)).x
        theta, sigma, ll = p[:-1], float(np.exp(p[-1])), -nll(p)
    k = theta.size + 1
    return dict(law=law, params=theta, sigma=sigma, loglik=ll, aic=2 * k - 2 * ll, n=int(H.size))


def _fit_power(N, H, censored, left=None) -> dict:
    """H = a N^c by Nelder-Mead, then BFGS, from the log-log least-squares start."""
    N, H = np.asarray(N, dtype=float), np.asarray(H, dtype=float)
    right = np.asarray(censored, dtype=bool)
    theta0 = _power_start(N, H)
    resid = H - power_curve(theta0, N)
    p0 = np.append(theta0, np.log(max(resid.std(), 1e-2 * max(H.std(), 1e-3), 1e-6)))

    def nll(p):
        with np.errstate(over="ignore", invalid="ignore"):
            mu = power_curve(p[:-1], N)
        if not np.all(np.isfinite(mu)):
            return np.inf
        return -tobit_loglik(H, right, mu, np.exp(p[-1]), left)

    best = optimize.minimize(nll, p0, method="Nelder-Mead", options=dict(maxiter=4000, xatol=1e-8, fatol=1e-10))
    polished = optimize.minimize(nll, best.x, method="BFGS")
    p = polished.x if polished.fun < best.fun else best.x
    ll = -nll(p)
    return dict(law="power", params=p[:-1], sigma=float(np.exp(p[-1])), loglik=ll, aic=2 * p.size - 2 * ll,
                n=int(H.size))


def _linear_nll_grad(X: np.ndarray, H: np.ndarray, right: np.ndarray, left: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Gradient of the censored negative log-likelihood of mu = X theta in (theta, log sigma)."""
    sigma = np.exp(p[-1])
    z = (H - X @ p[:-1]) / sigma
    log_pdf = -0.5 * z ** 2 - _LOG_SQRT_2PI
    up = np.exp(log_pdf - special.log_ndtr(-z))  # -d logsf / dz
    down = np.exp(log_pdf - special.log_ndtr(z))  # d logcdf / dz
    d_mu = np.where(right, up, np.where(left, -down, z)) / sigma  # d loglik / d mu
    d_s = np.where(right, up * z, np.where(left, -down * z, z ** 2 - 1.0))  # d loglik / d log sigma
    return -np.append(X.T @ d_mu, d_s.sum())


def fit_boxcox(N, H, censored, left=None) -> dict:
    """The Box-Cox law in N (docs/method.md §10c): c by profile likelihood, on a grid of step 0.1
    over :data:`C_RANGE`, then refined by a bounded scalar search around the grid's best; a, b at
    that c (N_ref the geometric mean of N) and the log-likelihood."""
    N = np.asarray(N, dtype=float)
    n_ref = float(np.exp(np.log(N).mean()))

    def profile(c):
        return fit_linear(design("boxcox", N, c, n_ref), H, censored, left, law="boxcox")

    grid = np.linspace(*C_RANGE, int(round((C_RANGE[1] - C_RANGE[0]) / 0.1)) + 1)
    lls = np.array([profile(c)["loglik"] for c in grid])
    k = int(np.nanargmax(lls))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    best = optimize.minimize_scalar(lambda c: -profile(c)["loglik"], bounds=(lo, hi), method="bounded",
                                    options=dict(xatol=1e-4))
    c = float(best.x) if -best.fun >= lls[k] else float(grid[k])
    fit = profile(c)
    return dict(c=c, a=float(fit["params"][0]), b=float(fit["params"][1]), loglik=fit["loglik"], n_ref=n_ref)


def _censoring(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(H as fitted, right, left) of a window block: a left-censored H (column ``left_censored``,
    the window below the first grid lag) is given as that lag (column ``first_lag``)."""
    right = g["censored"].to_numpy(bool)
    if "left_censored" not in g:
        return g["H"].to_numpy(float), right, np.zeros_like(right)
    left = g["left_censored"].to_numpy(bool)
    return np.where(left, g["first_lag"].to_numpy(float), g["H"].to_numpy(float)), right, left


def growth_table(window: pd.DataFrame, per_seed: pd.DataFrame, *, map_fn: Callable = map) -> pd.DataFrame:
    """Per (model, threshold) of a table with model, threshold, seed, N, H, censored (and
    left_censored, first_lag where H can be left-censored): the pooled censored fits' rates
    (log_b: lags per e-fold of N; power_c, the exponent of a N^c; descriptive, compared by the
    eps-free prediction) beside :func:`shape_table`'s verdict on ``per_seed``, the window's
    :func:`seed_growth` table."""
    blocks = list(window.groupby(["model", "threshold"], sort=True))
    fits = list(map_fn(_pooled_rates, [g for _, g in blocks]))
    pooled = pd.DataFrame([dict(model=model, threshold=thr, **fit) for ((model, thr), _), fit in zip(blocks, fits)])
    shape = shape_table(per_seed)
    return pooled.merge(shape.drop(columns=[c for c in ("optimizer",) if c in shape]), on=["model", "threshold"],
                        how="left")


def _pooled_rates(g: pd.DataFrame) -> dict:
    """log_b and power_c of one (model, threshold) block's points (NaN with fewer than 4 points
    or 2 distinct N)."""
    if len(g) < 4 or g["N"].nunique() < 2:
        return dict(log_b=np.nan, power_c=np.nan)
    H, right, left = _censoring(g)
    return dict(log_b=float(fit_law("log", g["N"], H, right, left)["params"][1]),
                power_c=float(fit_law("power", g["N"], H, right, left)["params"][1]))


def seed_growth(window: pd.DataFrame, *, map_fn: Callable = map) -> pd.DataFrame:
    """The seed as the unit (docs/method.md §10b, §10c): one row per (model, [optimizer,]
    threshold, seed) of a window table (model, threshold, seed, N, H, censored[, left_censored,
    first_lag]): b, the log-N slope of H = a + b log N, and c, the Box-Cox exponent, each by the
    censored likelihood (b NaN with fewer than 2 distinct N; c NaN with uncensored points at fewer
    than :data:`MIN_SHAPE_BUDGETS` budgets); n_points, n_uncensored, n_censored (right), n_left,
    and cut_off (right-censored at the seed's largest N). ``map_fn`` maps over the blocks."""
    keys = [c for c in ("model", "optimizer", "threshold", "seed") if c in window]
    blocks = list(window.groupby(keys, sort=True))
    fits = list(map_fn(_seed_fit, [g for _, g in blocks]))
    out = pd.DataFrame([key for key, _ in blocks], columns=keys)
    return out.assign(**{k: [f[k] for f in fits] for k in fits[0]} if fits else {})


def _seed_fit(g: pd.DataFrame) -> dict:
    """b and c of one (model, threshold, seed)'s H(N), with its counts."""
    H, right, left = _censoring(g)
    N = g["N"].to_numpy(float)
    exact = ~right & ~left
    b = float(fit_law("log", N, H, right, left)["params"][1]) if np.unique(N).size >= 2 else np.nan
    c = fit_boxcox(N, H, right, left)["c"] if np.unique(N[exact]).size >= MIN_SHAPE_BUDGETS else np.nan
    return dict(b=b, c=c, n_points=int(H.size), n_uncensored=int(exact.sum()), n_censored=int(right.sum()),
                n_left=int(left.sum()), cut_off=bool(right[N == N.max()].any()))


def shape_verdict(lo: float, hi: float, n: int) -> str:
    """The growth law of a t-interval [lo, hi] of the mean Box-Cox exponent over n seeds
    (docs/method.md §10c)."""
    if n < MIN_SHAPE_SEEDS:
        return TOO_FEW
    if -C_BAND <= lo and hi <= C_BAND:
        return LOG_N
    if lo > C_BAND:
        return POWER
    if hi < -C_BAND:
        return SATURATING
    return UNDECIDED


def shape_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per (model, [optimizer,] threshold) of :func:`seed_growth`'s table: c_mean, c_t_lo, c_t_hi,
    n_seeds (seeds with a c), verdict (:func:`shape_verdict`), cut_off (any seed right-censored at
    its largest N), b_mean, b_t_lo, b_t_hi and the points behind them (n_uncensored, n_censored,
    n_left summed over seeds)."""
    keys = [c for c in ("model", "optimizer", "threshold") if c in per_seed]
    rows = []
    for key, g in per_seed.groupby(keys, sort=True):
        c, c_lo, c_hi, n = t_interval(g["c"])
        b, b_lo, b_hi, _ = t_interval(g["b"])
        rows.append(dict(zip(keys, key), c_mean=c, c_t_lo=c_lo, c_t_hi=c_hi, n_seeds=n,
                         verdict=shape_verdict(c_lo, c_hi, n), cut_off=bool(g["cut_off"].any()),
                         b_mean=b, b_t_lo=b_lo, b_t_hi=b_hi, n_uncensored=int(g["n_uncensored"].sum()),
                         n_censored=int(g["n_censored"].sum()), n_left=int(g["n_left"].sum())))
    return pd.DataFrame(rows)
