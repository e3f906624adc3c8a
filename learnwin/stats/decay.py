"""Decay class of the envelope f(l) by regression on y = log f, and the predicted H_N (docs/method.md §8).

Candidate laws (``T`` is the transformed lag, every law is y = a + b T(l) [+ floor]):

- exp:          f = A exp(-l / tau),                T = l,               scale = tau = -1 / b
- power:        f = A l^(-beta),                    T = log l,           scale = beta = -b
- log:          f = A (log(1 + l))^(-gamma),        T = log log(1 + l),  scale = gamma = -b
- tempered:     f = A l^(-beta) exp(-(l / l_c)^k),  T = log l,           scale = beta, columns l_c, k
- exp_floor, power_floor, log_floor: the plain law + F (F >= 0), same T and scale, column floor = F

The table :data:`LAW_SPECS` holds, per law, its axis (T, its inverse and how the scale reads the
slope b) and its parameter count and fit; :func:`fit_curve` runs every law the same way.

Choices where docs/method.md §8 says "choose":

* Functionals (:data:`FUNCTIONALS`): every functional of every transport in the envelope table is
  fitted on its own (columns ``transport`` and ``functional``); :data:`PRIMARY` names the one
  each transport's window uses.

* Fit window: lags > 0 with finite f > 0, sorted, then ``trim`` points dropped at each end; fewer
  than ``min_points`` left -> every row of that scope is flagged and not selected. Points near a
  noise floor are not dropped: the floor variants model them instead (cutting the range damages
  slow decays: docs/method-notes.md, "Decay class (§8)").
* The two-parameter laws are ordinary least squares on y = log f. The tempered law is profiled
  over a grid, k in {0.5, 1, 1.5, 2} x 25 log-spaced l_c in [lag_min, lag_max] (a cut-off inside
  the window; beyond it the law is a plain power law), with (a, beta) by least squares at every
  grid point; it counts 4 parameters. Floor laws are fitted with
  ``scipy.optimize.least_squares`` on log f, F >= 0, from two starts (the plain law with F = 0,
  and the plain law fitted to log(f - min f / 2) with F = min f / 2); 3 parameters.
* Floor detection: a floor law takes part in the selection (column ``candidate``) only when its
  fitted floor is at least half the smallest f in the window (the floor makes up >= 1/3 of the
  tail). With 10 % (a tail within 10x of the floor) noise alone made the floor
  laws win on 10-12 % of clean exp/power/log curves of 16 points. Otherwise it is reported but not a candidate (weight 0), because a floor law with
  F -> 0 is its plain law plus a free parameter and would only blur the weights.
* Selection: AICc (AIC with the small-sample correction 2k(k+1)/(n-k-1): the window holds 8-30
  points, where plain AIC over-fits the 4-parameter tempered law) among the candidates; Akaike
  weights from AICc; ``ambiguous`` when the best weight is < 0.9. Columns ``aic`` (plain) and
  ``bic`` are reported too; AIC-type scores use n log(RSS / n) + penalty.
* CIs: moving-block residual bootstrap (``block`` lag-grid points, blocks drawn with
  replacement from the n - block + 1 overlapping blocks, centred residuals), refitting the law
  on ŷ + r*; percentile 95 % CI of the fitted slope b (or beta), mapped to the scale. Vectorised
  for the linear and tempered laws; the floor laws refit in a loop over resamples, and only when
  they are candidates (else NaN CI).
* Predicted H_N (``predict_window``): theta_N = (eps sigma / c) N^(-1/kappa) and H_N = f^{-1}
  (theta_N) in closed form for the linear and floor laws (T* = (log(theta - F) - a) / b), on a
  dense log-spaced lag grid up to 1e4 lag_max for the tempered law (largest l with
  f(l) > theta). It is 0 when theta >= f(lag_min); inf when the law never falls to theta (a floor
  F >= theta, a non-decaying fit, theta = 0, or a tempered f still above theta at the grid end);
  continuous values beyond lag_max are extrapolations and are kept.

Recovery on synthetic curves (lags 4..64 step 4, 16 points, 5 % log-normal multiplicative noise,
50 seeded draws per law; tests/test_decay.py prints the confusion matrix): every law is recovered
in >= 94 % of draws except the known pair log vs power_floor. Its confusion: true log ->
power_floor in 2/50 draws and true power_floor -> log in 1/50 with the test's draws (seeds
(11, d)), 6/50 and 4/50 with another set of 50 draws (seeds (7, d)); the other misses were
exp -> tempered (1-3/50).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from learnwin.infra import io

TEMPERED_K = (0.5, 1.0, 1.5, 2.0)
#: The envelope functionals fitted per transport (docs/method.md §4, §4b): name -> envelope column.
#: diagonal: ``gamma``, the first-order Gamma envelope f of §4; exact: ``signal``, the signal
#: envelope f of §4b (readout-projected adjoint, rate-weighted), and the secondary ``diag_entries``
#: (f_diag_entries, the diagonal entries of M) and ``norm`` (f_norm, its Frobenius norm).
FUNCTIONALS = {"diagonal": {"gamma": "f"},
               "exact": {"signal": "f", "diag_entries": "f_diag_entries", "norm": "f_norm"}}
#: The functional of each transport that the window, the predicted H_N and the figures use.
PRIMARY = {"diagonal": "gamma", "exact": "signal"}
TEMPERED_LC = 25
FLOOR_FRACTION = 0.5
AMBIGUOUS_WEIGHT = 0.9
SEED = 8_000  # base seed of the bootstrap generators of fit_envelopes (scopes add their own key)


def _tau_from_slope(b) -> np.ndarray:
    b = np.asarray(b, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(b < 0, -1.0 / b, np.inf)


@dataclass(frozen=True)
class Axis:
    """The regression axis T(l) of a law family, its inverse, and the scale read from the slope b
    of y = a + b T (and back); docs/method.md §8."""

    transform: Callable[[np.ndarray], np.ndarray]
    inverse: Callable[[np.ndarray], np.ndarray]
    scale_from_slope: Callable[[np.ndarray], np.ndarray]
    slope_from_scale: Callable[[float], float]


AXES = {
    "exp": Axis(lambda lag: lag, lambda T: T, _tau_from_slope,
                lambda scale: -1.0 / scale if scale != 0 else -np.inf),  # scale = tau = -1 / b
    "power": Axis(np.log, np.exp, lambda b: -np.asarray(b, dtype=float), lambda scale: -scale),  # beta = -b
    "log": Axis(lambda lag: np.log(np.log1p(lag)), lambda T: np.expm1(np.exp(T)),
                lambda b: -np.asarray(b, dtype=float), lambda scale: -scale),  # gamma = -b
}


@dataclass(frozen=True)
class Fit:
    """One law fitted to y = log f: intercept a, slope b on T, rss, the law's own columns (l_c and
    k, or floor), whether it is a selection candidate, and the bootstrap slopes (None: no CI)."""

    a: float
    b: float
    rss: float
    columns: dict
    candidate: bool
    slopes: np.ndarray | None


def _fit_linear(lag, T, y, f, boot) -> Fit:
    """Ordinary least squares on y = log f (the plain laws)."""
    a, b, rss = ols(T, y)
    yhat = a + b * T
    return Fit(a, b, rss, {}, True, ols(T, boot(yhat))[1])


def _fit_tempered_law(lag, T, y, f, boot) -> Fit:
    """The tempered law profiled over the (k, l_c) grid; its slope b = -beta."""
    a, beta, lc, k, rss = (v[0] for v in _fit_tempered(lag, y[:, None]))
    yhat = a - beta * T - (lag / lc) ** k
    return Fit(a, -beta, rss, dict(l_c=lc, k=k), True, -_fit_tempered(lag, boot(yhat))[1])


def _fit_floor_law(lag, T, y, f, boot) -> Fit:
    """A plain law plus a floor F >= 0; a candidate (and bootstrapped) only when F is at least
    :data:`FLOOR_FRACTION` of the smallest f."""
    a, b, F, rss = _fit_floor(T, y)
    candidate = bool(F >= FLOOR_FRACTION * f.min())
    slopes = None
    if candidate:
        yhat = np.log(np.exp(a + b * T) + F)
        slopes = _refit_floor(T, boot(yhat).T, np.array([a, b, F]))[:, 1]
    return Fit(a, b, rss, dict(floor=F), candidate, slopes)


@dataclass(frozen=True)
class LawSpec:
    """A candidate law: its axis family (:data:`AXES`), parameter count and fit."""

    axis: str
    n_params: int
    fit: Callable[..., Fit]

    @property
    def has_floor(self) -> bool:
        return self.fit is _fit_floor_law


LAW_SPECS = {
    "exp": LawSpec("exp", 2, _fit_linear),
    "power": LawSpec("power", 2, _fit_linear),
    "log": LawSpec("log", 2, _fit_linear),
    "tempered": LawSpec("power", 4, _fit_tempered_law),
    "exp_floor": LawSpec("exp", 3, _fit_floor_law),
    "power_floor": LawSpec("power", 3, _fit_floor_law),
    "log_floor": LawSpec("log", 3, _fit_floor_law),
}
LAWS = tuple(LAW_SPECS)


def _axis(law: str) -> Axis:
    return AXES[LAW_SPECS[law].axis]


def transform(law: str, lag) -> np.ndarray:
    """T(l) of a law (see the module table)."""
    return _axis(law).transform(np.asarray(lag, dtype=float))


def inverse_transform(law: str, T) -> np.ndarray:
    """l from T(l) (overflows to inf)."""
    with np.errstate(over="ignore"):
        return _axis(law).inverse(np.asarray(T, dtype=float))


def law_f(row, lag) -> np.ndarray:
    """f(l) of a fitted decay row (law, A, scale, l_c, k, floor)."""
    law = row["law"]
    lag = np.asarray(lag, dtype=float)
    A, scale = float(row["A"]), float(row["scale"])
    if law == "tempered":
        return A * lag ** (-scale) * np.exp(-((lag / float(row["l_c"])) ** float(row["k"])))
    b = _axis(law).slope_from_scale(scale)
    floor = float(row["floor"]) if LAW_SPECS[law].has_floor else 0.0
    with np.errstate(over="ignore"):
        return A * np.exp(b * transform(law, lag)) + floor


def ols(T: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least squares of every column of Y (n, ...) on [1, T] -> (a, b, rss), vectorised."""
    Tc = T - T.mean()
    Yc = Y - Y.mean(axis=0)
    b = np.tensordot(Tc, Yc, axes=(0, 0)) / np.dot(Tc, Tc)
    a = Y.mean(axis=0) - b * T.mean()
    resid = Y - a - np.multiply.outer(T, b)
    return a, b, np.sum(resid**2, axis=0)


def _tempered_grid(lag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lcs = np.geomspace(lag.min(), lag.max(), TEMPERED_LC)
    k, lc = np.meshgrid(TEMPERED_K, lcs, indexing="ij")
    return k.ravel(), lc.ravel()


def _fit_tempered(lag: np.ndarray, Y: np.ndarray):
    """Profile fit of the tempered law for every column of Y -> (a, beta, l_c, k, rss)."""
    k, lc = _tempered_grid(lag)
    temper = (lag[:, None] / lc[None, :]) ** k[None, :]  # (n, G)
    Z = Y[:, :, None] + temper[:, None, :]  # (n, B, G)
    a, b, rss = ols(np.log(lag), Z)
    best = np.argmin(rss, axis=-1)
    pick = np.arange(Y.shape[1])
    return a[pick, best], -b[pick, best], lc[best], k[best], rss[pick, best]


def _fit_floor(T: np.ndarray, y: np.ndarray):
    """least_squares fit of log(exp(a + b T) + F) to y -> (a, b, F, rss)."""
    from scipy.optimize import least_squares  # imported here: ~1 s start-up the window stage skips

    f = np.exp(y)

    def resid(p):
        with np.errstate(over="ignore"):
            return np.log(np.exp(p[0] + p[1] * T) + p[2]) - y

    def jac(p):
        with np.errstate(over="ignore", invalid="ignore"):
            g = np.exp(p[0] + p[1] * T)
            share = g / (g + p[2])
            return np.column_stack([share, T * share, 1.0 / (g + p[2])])

    a0, b0, _ = ols(T, y)
    F0 = 0.5 * f.min()
    a1, b1, _ = ols(T, np.log(f - F0))
    best = None
    for p0 in [(a0, b0, 0.0), (a1, b1, F0)]:
        res = least_squares(
            resid, np.array(p0, dtype=float), jac=jac, bounds=([-np.inf, -np.inf, 0.0], np.inf),
            x_scale="jac",
        )
        if best is None or res.cost < best.cost:
            best = res
    a, b, F = best.x
    return a, b, F, 2.0 * best.cost


def _refit_floor(T: np.ndarray, Y: np.ndarray, p0: np.ndarray, iters: int = 30) -> np.ndarray:
    """Levenberg-Marquardt refit of log(exp(a + b T) + F) to every row of Y (B, n) from p0.

    Vectorised over the rows (the loop runs over iterations); F is kept >= 0 by projection.
    """

    def resid_jac(P):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            g = np.exp(P[:, :1] + P[:, 1:2] * T)
            s = g + P[:, 2:]
            J = np.stack([g / s, T * g / s, 1.0 / s], axis=-1)
            return np.log(s) - Y, J

    P = np.tile(p0, (Y.shape[0], 1))
    r, J = resid_jac(P)
    cost = np.sum(r**2, axis=1)
    lam = np.full(Y.shape[0], 1e-3)
    for _ in range(iters):
        JTJ = np.einsum("bni,bnj->bij", J, J)
        JTr = np.einsum("bni,bn->bi", J, r)
        diag = np.einsum("bii->bi", JTJ)
        ridge = lam[:, None] * diag + 1e-12 * diag.max(axis=1, keepdims=True) + 1e-300
        step = -np.linalg.solve(JTJ + ridge[:, :, None] * np.eye(3), JTr[:, :, None])[:, :, 0]
        trial = P + step
        trial[:, 2] = np.maximum(trial[:, 2], 0.0)
        r_new, J_new = resid_jac(trial)
        cost_new = np.sum(r_new**2, axis=1)
        better = np.isfinite(cost_new) & (cost_new < cost)
        P = np.where(better[:, None], trial, P)
        r = np.where(better[:, None], r_new, r)
        J = np.where(better[:, None, None], J_new, J)
        cost = np.where(better, cost_new, cost)
        lam = np.where(better, lam * 0.3, lam * 10.0)
    return P


def _block_residuals(resid: np.ndarray, n_boot: int, block: int, rng) -> np.ndarray:
    """Moving-block resamples of centred residuals -> (n, n_boot)."""
    n = resid.size
    block = int(min(max(block, 1), n))
    r = resid - resid.mean()
    n_blocks = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(n_boot, n_blocks))
    idx = (starts[:, :, None] + np.arange(block)).reshape(n_boot, -1)[:, :n]
    return r[idx].T


def _scores(rss: float, n: int, k: int) -> tuple[float, float, float]:
    loglik_term = n * np.log(max(rss, 1e-300) / n)
    aic = loglik_term + 2 * k
    aicc = aic + 2 * k * (k + 1) / (n - k - 1) if n - k - 1 > 0 else np.inf
    return aic, aicc, loglik_term + k * np.log(n)


def fit_curve(
    lag,
    f,
    *,
    min_points: int,
    trim: int,
    bootstrap: int,
    block: int,
    seed=0,
) -> pd.DataFrame:
    """Fit every law to one envelope (docs/method.md §8) -> one row per law (decay.parquet columns).
    The keywords but ``seed`` are the decay config section."""
    lag = np.asarray(lag, dtype=float)
    f = np.asarray(f, dtype=float)
    order = np.argsort(lag)
    lag, f = lag[order], f[order]
    ok = np.isfinite(f) & (f > 0) & (lag > 0)
    lag, f = lag[ok], f[ok]
    if trim:
        lag, f = lag[trim:-trim], f[trim:-trim]
    n = lag.size
    rows = {law: _empty_row(law) for law in LAWS}
    if n < min_points:
        for row in rows.values():
            row["flag"] = f"fit window has {n} < min_points = {min_points} points"
        return _finish(rows, n, lag)
    y = np.log(f)
    tss = float(np.sum((y - y.mean()) ** 2))
    for i, (law, spec) in enumerate(LAW_SPECS.items()):
        rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), i])

        def boot(yhat, rng=rng):  # refit targets: yhat + moving-block resampled residuals
            return yhat[:, None] + _block_residuals(y - yhat, bootstrap, block, rng)

        fit = spec.fit(lag, transform(law, lag), y, f, boot)
        scale_from_slope = AXES[spec.axis].scale_from_slope
        row = rows[law]
        row.update(A=np.exp(fit.a), scale=float(scale_from_slope(fit.b)), candidate=fit.candidate, **fit.columns)
        if fit.slopes is not None:
            lo, hi = np.quantile(fit.slopes, [0.025, 0.975])
            s_lo, s_hi = sorted(scale_from_slope([lo, hi]).tolist())
            row.update(scale_lo=s_lo, scale_hi=s_hi)
        aic, aicc, bic = _scores(float(fit.rss), n, spec.n_params)
        row.update(aic=aic, aicc=aicc, bic=bic, r2=1.0 - float(fit.rss) / tss if tss > 0 else np.nan)
    return _finish(rows, n, lag)


def _empty_row(law: str) -> dict:
    nan = np.nan
    spec = LAW_SPECS[law]
    return dict(
        law=law, n_params=spec.n_params, aic=nan, aicc=nan, bic=nan, r2=nan, weight=0.0,
        selected=False, ambiguous=False, candidate=not spec.has_floor, lag_min=nan,
        lag_max=nan, A=nan, scale=nan, scale_lo=nan, scale_hi=nan, l_c=nan, k=nan, floor=nan, flag="",
    )


def _finish(rows: dict, n: int, lag: np.ndarray) -> pd.DataFrame:
    """Candidates, Akaike weights (from AICc), selection and ambiguity of one scope."""
    rows = list(rows.values())
    aicc = np.array([r["aicc"] for r in rows])
    cand = np.array([r["candidate"] for r in rows]) & np.isfinite(aicc)
    if cand.any():
        w = np.where(cand, np.exp(-0.5 * (np.where(cand, aicc, 0.0) - aicc[cand].min())), 0.0)
        w /= w.sum()
        best = int(np.argmax(w))
        for r, wi, ci in zip(rows, w, cand):
            r.update(weight=wi, candidate=bool(ci), ambiguous=bool(w[best] < AMBIGUOUS_WEIGHT))
        rows[best]["selected"] = True
    for r, ci in zip(rows, cand):
        r["candidate"] = bool(ci)
        if n:
            r.update(lag_min=lag.min(), lag_max=lag.max())
        if not ci and not r["flag"]:
            r["flag"] = (
                f"floor < {FLOOR_FRACTION:g} x min f: not a candidate"
                if LAW_SPECS[r["law"]].has_floor
                else "AICc undefined (n <= k + 1): not a candidate"
            )
    return pd.DataFrame(rows)


def fit_envelopes(
    envelopes: pd.DataFrame,
    *,
    min_points: int,
    trim: int,
    bootstrap: int,
    block: int,
    seed: int = SEED,
) -> pd.DataFrame:
    """decay.parquet for one (optimizer, model, epoch): per transport and functional
    (:data:`FUNCTIONALS`, the envelope columns present), scope "mean" (seed-averaged f) and "seed{S}".
    The keywords but ``seed`` are the decay config section (its defaults live in the schema only).

    The bootstrap generator of a scope is seeded by (seed, 0) for "mean" and (seed, 1 + S) for
    run seed S, under every transport and functional, so the numbers do not depend on which seeds,
    transports or functionals are present. The default ``seed`` is the workflow's (``SEED``).
    """
    keys = {c: envelopes[c].iloc[0] for c in ("model", "optimizer", "epoch") if c in envelopes}
    io.require_columns(envelopes, "envelope table", ["transport"])
    frames = []
    for transport, env in envelopes.groupby("transport", sort=False):
        if transport not in FUNCTIONALS:
            raise ValueError(f"envelope: transport {transport!r}; allowed: {', '.join(FUNCTIONALS)}")
        for functional, column in FUNCTIONALS[transport].items():
            if column not in env.columns:
                continue
            mean = env.groupby("lag", sort=True)[column].mean()
            scopes = [("mean", mean.index.to_numpy(), mean.to_numpy(), 0)]
            for s, g in env.groupby("seed", sort=True):
                scopes.append((f"seed{s}", g["lag"].to_numpy(), g[column].to_numpy(), 1 + int(s)))
            for scope, lag, f, sid in scopes:
                df = fit_curve(
                    lag, f, min_points=min_points, trim=trim, bootstrap=bootstrap, block=block,
                    seed=[int(seed), sid],
                )
                frames.append(df.assign(transport=transport, functional=functional, scope=scope))
    out = pd.concat(frames, ignore_index=True)
    for col, val in reversed(keys.items()):
        out.insert(0, col, val)
    front = [*keys, "transport", "functional", "scope", "law"]
    return out[front + [c for c in out.columns if c not in front]]


def primary(decay: pd.DataFrame) -> pd.DataFrame:
    """The rows of each transport's primary functional (:data:`PRIMARY`), the one the window's f
    is (docs/method.md §4b)."""
    return decay[decay["functional"] == decay["transport"].map(PRIMARY)]


def predict_window(decay_row, alpha: float, sigma: float, c: float, eps, N_grid) -> np.ndarray:
    """Closed-form H_N(N) of docs/method.md §8 from one selected decay row (see the module docstring):
    shape (N,) for a scalar ``eps``, (eps, N) for a 1-D array of eps (every eps at once)."""
    N = np.asarray(N_grid, dtype=float)
    eps = np.asarray(eps, dtype=float)[..., None]
    law = decay_row["law"]
    inv_kappa = max(1.0 - 1.0 / alpha, 0.0) if alpha > 0 else np.nan
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        theta = (eps * sigma / c) * N ** (-inv_kappa)
    lag_min = float(decay_row["lag_min"])
    f_first = law_f(decay_row, lag_min)
    if law == "tempered":
        grid = np.geomspace(lag_min, 1e4 * float(decay_row["lag_max"]), 20001)
        fg = law_f(decay_row, grid)
        # the largest grid lag with f > theta is the last one whose tail max(f[i:]) > theta
        tail_max = np.maximum.accumulate(np.where(np.isnan(fg), -np.inf, fg)[::-1])[::-1]
        n_above = np.searchsorted(-tail_max, -theta, side="left")
        last = np.where(n_above > 0, n_above - 1, grid.size - 1)
        out = np.where(n_above == grid.size, np.inf, grid[last])
    else:
        b = _axis(law).slope_from_scale(float(decay_row["scale"]))
        F = float(decay_row["floor"]) if LAW_SPECS[law].has_floor else 0.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            T = (np.log(theta - F) - np.log(float(decay_row["A"]))) / b
            out = inverse_transform(law, T)
        out = np.where((theta <= F) | (b >= 0), np.inf, out)
    out = np.where(theta >= f_first, 0.0, out)
    return np.where(np.isnan(theta), np.nan, out)
