"""Ground truth of the window (docs/method.md §10): bisection, the learned criterion under a null
model, the censoring-aware growth fits and the prediction scores, on synthetic cases whose answer
is known."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from learnwin.stats import growth, prediction
from learnwin.stats.groundtruth import bisect_window, lag_scores, margin

LAGS = np.arange(1, 64, 2)  # the snapshot grid 1..63 step 2


def linear_margin(H_true):
    """A monotone margin crossing 0 at H_true (learned below it)."""
    return lambda lag: 0.01 * (H_true - lag)


@pytest.mark.parametrize("H_true", [1.5, 10.3, 40.0, 61.2])
def test_bisection_interpolates_H_with_log2_evaluations(H_true):
    calls = []

    def m(lag):
        calls.append(lag)
        return linear_margin(H_true)(lag)

    out = bisect_window(LAGS, m)
    assert out["H"] == pytest.approx(H_true, abs=1e-9)  # a linear margin is interpolated exactly
    assert out["H_grid"] == LAGS[LAGS < H_true].max()
    assert not out["censored"]
    assert out["lag_lo"] <= H_true < out["lag_hi"] and out["lag_hi"] - out["lag_lo"] == 2
    assert len(calls) == len(set(calls)) <= 2 + math.ceil(math.log2(LAGS.size - 1))  # 7 of 32 lags


def test_bisection_nonlinear_margin_within_one_grid_step():
    H_true = 23.4
    out = bisect_window(LAGS, lambda lag: np.tanh((H_true - lag) / 3))  # nearly linear near 0
    assert out["H"] == pytest.approx(H_true, abs=0.05)
    out = bisect_window(LAGS, lambda lag: np.exp(-lag / 10) - np.exp(-H_true / 10))  # convex
    assert abs(out["H"] - H_true) < 2 and out["H_grid"] == 23


def test_bisection_censored_and_empty():
    out = bisect_window(LAGS, linear_margin(100.0))
    assert out["censored"] and out["H"] == 63 and out["H_grid"] == 63 and np.isnan(out["lag_hi"])
    assert out["evaluated"] == [1, 63]
    out = bisect_window(LAGS, linear_margin(0.5))
    assert not out["censored"] and out["H"] == 0 and out["H_grid"] == 0 and out["evaluated"] == [1]
    with pytest.raises(ValueError, match="strictly increasing"):
        bisect_window([3, 1], linear_margin(2))


def test_lag_scores_match_pearson_and_find_the_lag():
    rng = np.random.default_rng(0)
    n, T = 64, 32
    comp = rng.standard_normal((n, T))
    pred = np.zeros((n, T))
    pred[:, 5:] = comp[:, :-5] + 0.5 * rng.standard_normal((n, T - 5))
    lags = np.array([1, 3, 5, 7, 40])
    r, null = lag_scores(pred, comp, lags, n_perm=50, quantile=0.99, seed=1)
    for i, lag in enumerate(lags[:-1]):
        ref = np.corrcoef(pred[:, lag:].ravel(), comp[:, :-lag].ravel())[0, 1]
        assert r[i] == pytest.approx(ref, abs=1e-12)
    assert r[2] == pytest.approx(1 / math.sqrt(1.25), abs=0.05) and np.all(np.abs(r[[0, 1, 3]]) < 0.1)
    assert np.all(null[:4] < 0.1) and np.isnan(r[4]) and np.isnan(null[4])
    assert margin(r[2], 0.0, null[2], 0.2) > 0 and margin(r[0], 0.0, null[0], 0.2) < 0


def _null_run(rng, seed, *, n=32, T=16, n_perm=100, quantile=0.95, control=True):
    """H of a model that learned nothing: prediction and control are noise."""
    comp = rng.standard_normal((n, T))
    lags = np.array([1])
    r, null = lag_scores(rng.standard_normal((n, T)), comp, lags, n_perm=n_perm, quantile=quantile, seed=seed)
    r_ctrl = lag_scores(rng.standard_normal((n, T)), comp, lags, n_perm=1, quantile=quantile, seed=seed)[0]
    m = margin(r, r_ctrl if control else 0.0, null, 0.0)
    return bisect_window(np.arange(1, 16, 2), lambda lag: m[0])["H"]  # only the first lag is asked


def test_null_model_false_positive_rate():
    """Without an effect threshold or control, P(H > 0) = 1 - quantile (the permutation null's
    level), within its binomial 99.9 % interval; the control only lowers it."""
    rng, runs, q = np.random.default_rng(3), 1500, 0.95
    hits = sum(_null_run(rng, s, quantile=q, control=False) > 0 for s in range(runs))
    lo, hi = stats.binomtest(hits, runs).proportion_ci(0.999)
    assert lo <= 1 - q <= hi
    hits_ctrl = sum(_null_run(rng, s, quantile=q) > 0 for s in range(runs))
    assert hits_ctrl / runs < 1 - q
    assert hits_ctrl / runs <= stats.binomtest(hits_ctrl, runs).proportion_ci(0.999).high


N_LADDER = 64 * 2 ** np.arange(8)


SHAPES = {"log": lambda n: -22 + 6.5 * np.log(n), "power": lambda n: 0.35 * n ** 0.5,
          "saturating": lambda n: 50 - 120 * n ** -0.25}


def synthetic(law, rng, *, seeds=5, sigma=1.5, cap=63.0):
    mu = SHAPES[law](N_LADDER.astype(float))
    rows = []
    for s in range(seeds):
        H = mu + sigma * rng.standard_normal(mu.size)
        cens = H >= cap
        rows += [dict(model=law, threshold=0.2, seed=s, N=n, H=min(h, cap), censored=c)
                 for n, h, c in zip(N_LADDER, H, cens)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("law", ["log", "power", "saturating"])
def test_seed_shape_decides_the_true_law(law):
    """docs/method.md §10c: each seed's Box-Cox exponent c by the censored likelihood, the verdict
    from its t-interval over 5 seeds against the band ±0.1: log N (c = 0), a power (c = 0.5,
    censored at 25), saturating (c = -0.25); each law is called what it is and nothing else."""
    for draw in range(3):
        d = synthetic(law, np.random.default_rng([len(law), draw]), sigma=0.5,
                      cap=25.0 if law == "power" else 63.0)
        per_seed = growth.seed_growth(d)
        shape = growth.shape_table(per_seed).iloc[0]
        assert shape["verdict"] == {"log": "log N", "power": "power", "saturating": "saturating"}[law]
        assert shape["n_seeds"] == 5 and shape["c_t_lo"] < shape["c_mean"] < shape["c_t_hi"]
        true_c = {"log": 0.0, "power": 0.5, "saturating": -0.25}[law]
        assert shape["c_mean"] == pytest.approx(true_c, abs=0.08)
        assert shape["cut_off"] == (law == "power") == bool(per_seed["n_censored"].sum())


def test_a_ceiling_taken_at_face_value_looks_saturating():
    """A log-N window cut off at 30 (its last grid lag, right-censored at the three largest N) is
    log N under the censored likelihood and marked cut off; the same points taken as exact bend
    down and read as saturating, so the check can fail both ways."""
    d = synthetic("log", np.random.default_rng(11), sigma=0.3, cap=30.0)
    assert (d.groupby("seed")["censored"].sum() == 2).all()
    censored = growth.shape_table(growth.seed_growth(d)).iloc[0]
    assert censored["verdict"] == "log N" and censored["cut_off"]
    naive = growth.shape_table(growth.seed_growth(d.assign(censored=False))).iloc[0]
    assert naive["verdict"] == "saturating" and not naive["cut_off"]


def test_left_censored_windows_are_not_zeros():
    """H = 0 where the window lies below the first grid lag (12): left-censored there, the log-N
    slope is recovered; taken as exact zeros (below their true 5-10) they steepen it."""
    d = synthetic("log", np.random.default_rng(12), sigma=0.3)
    low = d["H"] < 12
    assert (low.groupby(d["seed"]).sum() == 2).all()
    d = d.assign(H=np.where(low, 0.0, d["H"]), left_censored=low, first_lag=12)
    np.testing.assert_allclose(growth.seed_growth(d)["b"], 6.5, atol=0.3)
    zeros = growth.seed_growth(d.drop(columns=["left_censored", "first_lag"]))["b"]
    assert (zeros > 7.0).all()


def test_shape_verdict_bands():
    """The rule of docs/method.md §10c on intervals (lo, hi) of the mean c: inside ±0.1, above,
    below, across a band edge, and too few seeds."""
    v = growth.shape_verdict
    assert v(-0.05, 0.08, 5) == "log N" and v(0.12, 0.6, 5) == "power" and v(-0.5, -0.2, 5) == "saturating"
    assert v(0.05, 0.3, 5) == "undecided" and v(-0.3, 0.05, 4) == "undecided" and v(-0.05, 0.05, 2) == "too few seeds"


def test_censoring_aware_fit_is_unbiased_where_naive_is_not():
    """Over 10 draws with ~30 % of the points censored at 30 (slope 6.5, its spread 0.13)."""
    tobit, naive = [], []
    for draw in range(10):
        d = synthetic("log", np.random.default_rng(draw), cap=30.0, sigma=1.0)
        assert d["censored"].mean() > 0.2
        tobit.append(growth.fit_law("log", d["N"], d["H"], d["censored"])["params"][1])
        naive.append(growth.fit_law("log", d["N"], d["H"], np.zeros(len(d), bool))["params"][1])
    assert np.mean(tobit) == pytest.approx(6.5, abs=0.15) and np.mean(naive) < 6.0


@pytest.mark.parametrize("c", [0.0, 0.3])
@pytest.mark.parametrize("cap", [np.inf, 30.0])
def test_linear_law_fit_is_the_numerical_optimum(c, cap):
    """A law linear in its parameters: closed form without censored points, BFGS on the exact
    gradient with them; both reach the likelihood's optimum as a long Nelder-Mead search from that
    point finds it (it finds nothing better, to 1e-7), and the gradient is the numerical one's."""
    d = synthetic("log", np.random.default_rng(3), cap=cap, sigma=1.0)
    N, H, cens = d["N"].to_numpy(float), d["H"].to_numpy(float), d["censored"].to_numpy(bool)
    assert cens.any() == np.isfinite(cap)
    left = np.isfinite(cap) & (H < 8)  # with censoring on both sides: H < 8 left-censored at 8
    H = np.where(left, 8.0, H)
    X = growth.design("boxcox", N, c, 1024.0)  # the log law at c = 0, a Box-Cox law else
    fit = growth.fit_linear(X, H, cens, left)

    def nll(p):
        return -growth.tobit_loglik(H, cens, X @ p[:-1], np.exp(p[-1]), left)

    p = np.append(fit["params"], np.log(fit["sigma"]))
    assert nll(p) == pytest.approx(-fit["loglik"], abs=1e-9)
    search = optimize.minimize(nll, p + 0.05, method="Nelder-Mead",
                               options=dict(maxiter=20000, xatol=1e-10, fatol=1e-12))
    assert search.fun >= nll(p) - 1e-7
    grad = growth._linear_nll_grad(X, H, cens, left, p + 0.1)
    numeric = optimize.approx_fprime(p + 0.1, nll, 1e-7)
    assert np.linalg.norm(grad - numeric) < 1e-5 * np.linalg.norm(grad)


def test_seed_growth_one_slope_per_seed():
    """Each (model, threshold, seed)'s log-N slope by the censored likelihood (docs/method.md §10b):
    exact on noiseless lines of a known slope per seed, recovered under censoring, NaN with one N."""
    x = np.log(N_LADDER)
    b_true = {0: 2.0, 1: 4.0, 2: 6.0}
    rows = [dict(model=m, threshold=0.2, seed=s, N=n, H=1.0 + b * xi + (m == "steeper") * 3 * xi, censored=False)
            for m in ("flat", "steeper") for s, b in b_true.items() for n, xi in zip(N_LADDER, x)]
    out = growth.seed_growth(pd.DataFrame(rows)).set_index(["model", "seed"])
    np.testing.assert_allclose(out.loc["flat", "b"], list(b_true.values()), atol=1e-8)
    np.testing.assert_allclose(out.loc["steeper", "b"], [b + 3 for b in b_true.values()], atol=1e-8)
    assert (out["n_points"] == N_LADDER.size).all() and (out["n_censored"] == 0).all()
    d = synthetic("log", np.random.default_rng(3), seeds=3, sigma=0.5, cap=30.0)
    assert (d.groupby("seed")["censored"].sum() == 2).all()  # every seed censored at its two largest N
    cens = growth.seed_growth(d)
    np.testing.assert_allclose(cens["b"], 6.5, atol=0.3)
    ols = [np.polyfit(np.log(g["N"]), g["H"], 1)[0] for _, g in d.groupby("seed")]
    assert max(ols) < 5.6  # the censored points taken at face value would pull it down
    assert (cens["n_censored"] == d.groupby("seed")["censored"].sum().to_numpy()).all()
    one = growth.seed_growth(d[d["N"] == N_LADDER[0]])
    assert one["b"].isna().all()


def test_harrell_c_uses_censoring():
    measured, cens = np.array([1.0, 2.0, 3.0, 63.0]), np.array([False, False, False, True])
    assert prediction.harrell_c(measured, cens, [1, 2, 3, 4]) == 1.0
    assert prediction.harrell_c(measured, cens, [4, 3, 2, 1]) == 0.0
    # two censored points are not comparable with each other: only the 3 + 2 pairs with observed ones
    both = np.array([1.0, 63.0, 63.0])
    assert prediction.harrell_c(both, [False, True, True], [1, 3, 2]) == 1.0


def test_scores_and_loo_calibration():
    """A prediction H = log(N) * k_model - log(eps) ranks every block right once eps is found."""
    rows = [dict(model=m, N=n, measured=k * np.log(n) - np.log(2.0), censored=False)
            for m, k in (("a", 1.0), ("b", 2.0), ("c", 3.0)) for n in N_LADDER]
    measured = pd.DataFrame(rows)
    slope = dict(a=1.0, b=2.0, c=3.0)

    keys = measured[["model", "N"]]
    levels = prediction.Levels(keys, (keys["model"].map(slope) * np.log(keys["N"])).to_numpy()[:, None]
                               - np.log(prediction.EPS_GRID))
    loo = prediction.leave_one_model_out(measured[["model", "N", "measured", "censored"]], levels)
    assert np.allclose(loo["eps"], 2.0, rtol=0.05)
    s = prediction.score(loo)
    assert [s[k] for k in ("tau_within_N", "tau_within_model", "c_within_N")] == pytest.approx([1, 1, 1])
    rev = prediction.score(loo.assign(predicted=-loo["predicted"]))
    assert [rev[k] for k in ("tau_within_N", "c_within_model")] == pytest.approx([-1, 0])


def test_predicted_growth_and_holm():
    g = prediction.predicted_growth(dict(law="exp", scale=10.0), alpha=2.0)
    assert g["slope_log"] == pytest.approx(5.0) and np.isnan(g["exponent"])
    g = prediction.predicted_growth(dict(law="power", scale=2.0), alpha=1.5)
    assert g["exponent"] == pytest.approx(1 / 6) and np.isnan(g["slope_log"])
    assert np.allclose(prediction.holm([0.01, 0.04, np.nan, 0.03]), [0.03, 0.06, np.nan, 0.06], equal_nan=True)


def test_bisection_warm_start_asks_fewer_new_lags_and_agrees():
    first = bisect_window(LAGS, linear_margin(30.0))
    calls = []

    def m(lag):
        calls.append(lag)
        return linear_margin(34.0)(lag)

    cold = bisect_window(LAGS, linear_margin(34.0))
    warm = bisect_window(LAGS, m, known=first["evaluated"])
    new = [lag for lag in calls if lag not in first["evaluated"]]
    assert warm["H"] == pytest.approx(cold["H"]) == pytest.approx(34.0)
    assert len(new) == 4 < len(cold["evaluated"])  # the bracket (29, 63) holds 16 grid lags: log2 16


def test_monotonicity_and_steps_check_tables():
    """A full grid with a hole at lag 3 (learned 1, 5; not 3, 7): H_full = 5 with one hole, and
    bisection's H_grid = 1 disagrees; the float32 thresholds of a stored table still match."""
    from learnwin.stats.groundtruth import monotonicity, steps_check

    keys = dict(model="gru", seed=2, N=64, arm="full_grid")
    task = pd.DataFrame([dict(**keys, lag=lag, target="task", r=r, null=0.05)
                         for lag, r in zip([1, 3, 5, 7], [0.6, 0.1, 0.5, 0.1])])
    ctrl = task.assign(target="control", r=0.0)
    thr = np.float32(0.2)
    window = pd.DataFrame([dict(**keys, threshold=thr, H=1.5, H_grid=1, censored=False, steps=8)])
    out = monotonicity(pd.concat([task, ctrl]), window)
    assert out[["H_full", "holes", "H_grid", "agrees"]].iloc[0].tolist() == [5, 1, 1, False]
    both = pd.concat([window.assign(arm="main"), window.assign(arm="double_steps", H=3.0, steps=16)])
    chk = steps_check(both)
    assert chk[["H_main", "H_double", "dH", "steps_double"]].iloc[0].tolist() == [1.5, 3.0, 1.5, 16]
