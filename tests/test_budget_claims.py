"""Claims (b) and (d) of the window under a training budget and its confirmatory test (docs/method.md
§10b) on synthetic tables with a known answer: the slope of log N̂_emp(l) against -log f(l) beside
kappa = alpha / (alpha - 1), and the exact permutation test of the prediction's order (the
fixed- against learned-gate growth with the seed as the unit: tests/test_seedlevel.py)."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from learnwin.stats import budget, prediction
from learnwin.stats.budget import learning_slope, seed_slopes

LAGS = np.arange(1, 11)
TAU, KAPPA = 4.0, 3.0  # alpha = 1.5


def tables(C=(1.0, 5.0, 30.0), kappa_of_seed=None):
    """N_hat = C_s f^(-kappa_s) exactly, f = exp(-l / tau), two thresholds and two transports."""
    seeds = np.arange(1, len(C) + 1)
    k = np.full(len(C), KAPPA) if kappa_of_seed is None else np.asarray(kappa_of_seed)
    f = np.exp(-LAGS / TAU)
    lb = pd.concat([pd.DataFrame(dict(model="gru", optimizer="adamw", seed=s, lag=LAGS, threshold=t,
                                      N_hat=c * f ** -ks, N_hat_grid=np.nan, left_censored=False,
                                      right_censored=False, run=True))
                    for s, c, ks in zip(seeds, C, k) for t in (0.1, 0.2)], ignore_index=True)
    env = pd.concat([pd.DataFrame(dict(model="gru", optimizer="adamw", seed=s, epoch=7, transport=tr, lag=LAGS,
                                       f=f, f_gates=0.5))
                     for s in seeds for tr in ("diagonal", "exact")], ignore_index=True)
    kap = pd.DataFrame(dict(model="gru", optimizer="adamw", epoch=7, transport=["diagonal", "exact"], alpha=[1.5, 0.8]))
    return lb, env, kap


def test_learning_slope_recovers_kappa():
    lb, env, kap = tables()
    per_seed = seed_slopes(lb, env)
    assert len(per_seed) == 3 * 2 * 2
    np.testing.assert_allclose(per_seed["slope"], KAPPA, atol=1e-9)
    assert (per_seed["n_lags"] == LAGS.size).all()
    out = learning_slope(lb, env, kap).set_index(["transport", "threshold"])
    np.testing.assert_allclose(out["slope"], KAPPA, atol=1e-9)
    np.testing.assert_allclose(out[["slope_t_lo", "slope_t_hi"]], KAPPA, atol=1e-9)  # equal slopes: no spread
    assert (out["n_seeds"] == 3).all()
    assert out.loc[("diagonal", 0.1), "kappa"] == pytest.approx(1.5 / 0.5)
    assert np.isnan(out.loc[("exact", 0.1), "kappa"]) and out.loc[("exact", 0.1), "alpha"] == 0.8


def test_learning_slope_keeps_censored_lags_censored_and_drops_missing_ones():
    """Lag 1 left-censored (N̂ at most twice its true value), lags 9-10 right-censored (N̂ at least
    half of it): consistent bounds of an exact line, so the censored likelihood's slope is kappa;
    lags absent from the envelope or with f = 0 are dropped, and the counts say what is left."""
    lb, env, kap = tables()
    true = lb["N_hat"].copy()
    left, right = lb["lag"] == 1, lb["lag"] >= 9
    lb = lb.assign(left_censored=left, right_censored=right,
                   N_hat=np.where(left, 2 * true, np.where(right, true / 2, true)))
    env = env[env["lag"] != 5]  # absent from the envelope: dropped
    env.loc[env["lag"] == 6, "f"] = 0.0  # no -log f: dropped
    per_seed = seed_slopes(lb, env)
    np.testing.assert_allclose(per_seed["slope"], KAPPA, atol=1e-3)
    assert (per_seed["n_lags"] == 10 - 1 - 2 - 1 - 1).all()
    assert (per_seed["n_left"] == 1).all() and (per_seed["n_right"] == 2).all()


def test_dropping_right_censored_lags_biases_the_slope_where_the_censored_likelihood_does_not():
    """log N̂ = a + kappa (-log f) + noise (sd 1) over 40 lags with -log f from 0.05 to 2,
    right-censored at a budget that about half the lags do not reach: the censored likelihood
    recovers kappa over 20 seeds; the slope of the uncensored lags alone (a selection on the
    outcome) falls short of it."""
    rng = np.random.default_rng(5)
    lags = np.arange(1, 41)
    x = lags / 20
    censored, dropped = [], []
    for seed in range(20):
        y = 1.0 + KAPPA * x + rng.standard_normal(lags.size)
        cap = 1.0 + KAPPA * x[20]
        right = y >= cap
        lb = pd.DataFrame(dict(model="gru", optimizer="adamw", seed=seed, lag=lags, threshold=0.2,
                               N_hat=np.exp(np.minimum(y, cap)), N_hat_grid=np.nan, left_censored=False,
                               right_censored=right, run=True))
        env = pd.DataFrame(dict(model="gru", optimizer="adamw", seed=seed, epoch="trained", transport="diagonal",
                                lag=lags, f=np.exp(-x)))
        censored.append(seed_slopes(lb, env)["slope"].item())
        dropped.append(np.polyfit(x[~right], y[~right], 1)[0])
    assert np.mean(censored) == pytest.approx(KAPPA, abs=0.25) and np.mean(dropped) < KAPPA - 0.8


def test_right_censored_lags_enter_at_the_last_reported_budget():
    """log N̂ = a + s (-log f) + noise (sd 0.25) over 100 lags, scored on the doubling grid 16 ..
    8192 with a margin linear in log N that crosses 0 at N̂: learning_budget recovers each N̂ from
    16 to 4096 exactly (below 16 left-censored), and a lag with N̂ above 4096, the last reported budget (a pair needs 8192 too),
    is right-censored there. The censored slope recovers s over 20 seeds; the same lags entered at
    N_max = 8192, where the data do not censor them, bias it upwards."""
    rng = np.random.default_rng(11)
    lags, budgets = np.arange(1, 101), 2 ** np.arange(4, 14)
    x = np.linspace(0.5, 5.0, lags.size)
    slope, a = 1.5, 3.0
    at_last, at_max = [], []
    for seed in range(20):
        y = a + slope * x + 0.25 * rng.standard_normal(lags.size)
        r = 0.2 + 0.05 * (np.log(budgets)[None, :] - y[:, None])  # margin r - 0.2 crosses 0 at N̂
        rows = [dict(target="control", lag=lag, N=N, r=0.0, null=0.05) for N in budgets for lag in lags]
        rows += [dict(target="task", lag=lag, N=N, r=r[i, k], null=0.05)
                 for i, lag in enumerate(lags) for k, N in enumerate(budgets)]
        scores = pd.DataFrame(rows).assign(model="gru", optimizer="adamw", seed=seed)
        lb = budget.learning_budget(scores, [0.2], budgets)
        right, left = y > np.log(budgets[-2]), y < np.log(budgets[0])
        assert (lb["right_censored"].to_numpy() == right).all() and (lb["left_censored"].to_numpy() == left).all()
        exact = ~(left | right)
        np.testing.assert_allclose(np.log(lb["N_hat"][exact]), y[exact], atol=1e-9)
        assert (lb["N_hat"][right] == budgets[-2]).all() and (lb["N_hat"][left] == budgets[0]).all()
        env = pd.DataFrame(dict(model="gru", optimizer="adamw", seed=seed, epoch="trained", transport="diagonal",
                                lag=lags, f=np.exp(-x)))
        at_last.append(seed_slopes(lb, env)["slope"].item())
        at_max.append(seed_slopes(lb.assign(N_hat=np.where(right, budgets[-1], lb["N_hat"])), env)["slope"].item())
    assert 0.25 < np.mean(right) < 0.6  # the case censors a good part of the lags
    assert np.mean(at_last) == pytest.approx(slope, abs=0.03) and np.mean(at_max) > slope + 0.07


def test_learning_slope_needs_three_lags():
    lb, env, kap = tables()
    lb.loc[(lb["seed"] == 2) & (lb["lag"] > 2), "right_censored"] = True
    per_seed = seed_slopes(lb, env).set_index("seed")
    assert per_seed.loc[2, "slope"].isna().all() and (per_seed.loc[2, "n_lags"] == 2).all()
    out = learning_slope(lb, env, kap)
    assert (out["n_seeds"] == 2).all()
    np.testing.assert_allclose(out["slope"], KAPPA, atol=1e-9)


@pytest.mark.parametrize("ks", [[2.0, 2.5, 3.5, 4.0], [2.0, 3.1, 3.5]])
def test_learning_slope_t_interval_over_seeds(ks):
    """The seed mean's Student t-interval (n - 1 df) of the seeds' slopes, scipy's; with three
    seeds wider than their range (a percentile bootstrap over seeds is inside it)."""
    lb, env, kap = tables(C=(1.0, 2.0, 3.0, 4.0)[:len(ks)], kappa_of_seed=ks)
    out = learning_slope(lb, env, kap)
    lo, hi = stats.t.interval(0.95, len(ks) - 1, loc=np.mean(ks), scale=stats.sem(ks))
    np.testing.assert_allclose(out["slope"], np.mean(ks), atol=1e-9)
    np.testing.assert_allclose(out["slope_t_lo"], lo, rtol=1e-7)
    np.testing.assert_allclose(out["slope_t_hi"], hi, rtol=1e-7)
    if len(ks) == 3:
        assert (out["slope_t_lo"] < min(ks)).all() and (out["slope_t_hi"] > max(ks)).all()


def test_kendall_tau_b_equals_scipy_with_ties():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, size=(7, 6, 3)).astype(float)  # ties on purpose
    y = rng.integers(0, 4, size=(6, 3)).astype(float)
    got = prediction.kendall_tau_b(x, y)
    for i, k in itertools.product(range(7), range(3)):
        ref = stats.kendalltau(x[i, :, k], y[:, k], variant="b").statistic
        assert np.isclose(got[i, k], ref, atol=1e-12) or (np.isnan(ref) and np.isnan(got[i, k]))
    assert np.isnan(prediction.kendall_tau_b(np.ones((4, 2)), y[:4, :2])).all()  # one predicted value


def levels_table(measured: np.ndarray, predicted: np.ndarray, N=(64, 128, 256)) -> pd.DataFrame:
    models = [f"m{i}" for i in range(measured.shape[0])]
    return pd.DataFrame([dict(model=m, N=n, measured=measured[i, k], predicted=predicted[i, k])
                         for i, m in enumerate(models) for k, n in enumerate(N)])


def test_permutation_test_exact_p_both_ways():
    """Five models ordered alike at every N: tau 1, and only the identity reaches it (p = 1/120);
    reversed: tau -1 and p = 1; a brute-force loop over the relabellings with scipy agrees on noise."""
    meas = np.array([[1, 2, 3], [2, 4, 6], [3, 6, 9], [4, 8, 12], [5, 10, 15]], float)
    up = prediction.permutation_test(levels_table(meas, meas * 0.5 + 1))
    assert up["tau_mean"] == 1 and up["p_perm"] == 1 / 120 and up["n_perms"] == 120 and up["n_blocks"] == 3
    down = prediction.permutation_test(levels_table(meas, -meas))
    assert down["tau_mean"] == -1 and down["p_perm"] == 1
    rng = np.random.default_rng(2)
    pred = rng.normal(size=meas.shape)
    got = prediction.permutation_test(levels_table(meas, pred))
    means = [np.mean([stats.kendalltau(pred[list(p), k], meas[:, k], variant="b").statistic for k in range(3)])
             for p in itertools.permutations(range(5))]
    assert np.isclose(got["tau_mean"], means[0]) and got["p_perm"] == np.mean(np.array(means) >= means[0] - 1e-12)


def test_permutation_test_skips_constant_budgets_and_models_without_prediction():
    meas = np.array([[0, 2, 3], [0, 4, 6], [0, 6, 9], [0, 8, 12]], float)  # N = 64: every model 0
    pred = meas + 1.0
    pred[3, 1] = np.nan  # this model leaves the test
    got = prediction.permutation_test(levels_table(meas, pred))
    assert got["n_models"] == 3 and got["n_blocks"] == 2 and got["tau_mean"] == 1 and got["p_perm"] == 1 / 6


def test_confirmatory_table_flags_the_pre_registered_row():
    meas = np.array([[1, 2, 3], [2, 4, 6], [3, 6, 9], [4, 8, 12], [5, 10, 15]], float)
    rows = []
    for thr, net, sign in ((0.2, "init", 1), (0.1, "init", 1), (0.2, "trained", -1)):
        rows.append(levels_table(meas, sign * meas).assign(threshold=thr, networks=net, transport="diagonal",
                                                          noise="per_lag"))
    table = prediction.confirmatory_table(pd.concat(rows, ignore_index=True)).set_index(["threshold", "networks"])
    assert table["pre_registered"].to_dict() == {(0.1, "init"): False, (0.2, "init"): True, (0.2, "trained"): False}
    assert table.loc[(0.2, "init"), "passes"] and not table.loc[(0.2, "trained"), "passes"]
    assert table.loc[(0.2, "init"), "p_perm"] == 1 / 120
