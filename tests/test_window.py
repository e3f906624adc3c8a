"""docs/method.md §7: sample complexity, learnability window and master law (learnwin.stats.window)."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from workflow_helpers import run_adapter, schema_defaults

from learnwin.infra.io import read_table, write_table
from learnwin.stats import alpha as A
from learnwin.stats import window as W
from learnwin.stats.decay import ols

KEYS = dict(model="diag", optimizer="adamw", seed=2, epoch="0")
SNAP = dict(**KEYS, transport="diagonal")  # the key columns of a snapshot's tables
N_GRID = [16, 64, 256, 1024, 4096, 16384]
EPS = 20.0
ARTIFACTS = ("window", "H_N", "master", "exponents")
ALPHA = schema_defaults("alpha")
PER_LAG = dict(noise=["per_lag"], bootstrap=200)  # one noise definition, the schema's bootstrap


def snapshot(lags, m, sigma, alpha, f, n=64, reliable=True, spread=1e-3):
    """psi with exactly mean m(l) per lag (every lag significant for m >> spread / sqrt(n)),
    alpha and envelope tables of one snapshot."""
    base = spread * np.linspace(-1, 1, n)  # zero mean
    psi = pd.concat(
        [pd.DataFrame({"lag": l, "sequence": np.arange(n), "psi": mi + base}) for l, mi in zip(lags, m)]
    ).assign(**SNAP)
    L = len(lags)
    alpha_df = pd.DataFrame(
        {"lag": lags, "alpha": np.broadcast_to(alpha, L), "sigma": np.broadcast_to(sigma, L),
         "reliable": np.broadcast_to(reliable, L)}
    )
    alpha_df["kappa"] = alpha_df["alpha"] / (alpha_df["alpha"] - 1)
    alpha_df["transport"] = "diagonal"
    env = pd.DataFrame({"lag": lags, "f": f}).assign(**SNAP)
    return psi.astype({"lag": "int64", "sequence": "int64"}), alpha_df, env


def test_closed_form_window_and_monotone():
    lags = np.arange(4, 65, 4)
    tau, c, sigma, alpha = 10.0, 3.0, 0.5, 1.6
    f = np.exp(-lags / tau)
    win, h_n, master, _ = W.window_table(*snapshot(lags, c * f, sigma, alpha, f), eps=EPS, N_grid=N_GRID, **PER_LAG)
    ik = 1 - 1 / alpha
    N = np.array(N_GRID, float)
    # Detected iff c f(l) N^(1/kappa) / sigma > eps  <=>  l < tau log(c N^(1/kappa) / (eps sigma)).
    l_star = tau * np.log(c * N**ik / (EPS * sigma))
    expected = [lags[lags < ls].max() if (lags < ls).any() else 0 for ls in l_star]
    np.testing.assert_array_equal(h_n["H_N"], expected)
    assert (np.diff(h_n["H_N"]) >= 0).all() and h_n["H_N"].iloc[-1] > h_n["H_N"].iloc[0]
    first = win[win["N"] == 16]
    np.testing.assert_allclose(first["N_star"], (EPS * sigma / (c * f)) ** (alpha / (alpha - 1)), rtol=1e-9)
    np.testing.assert_allclose(first["m"], c * f, rtol=1e-9)
    det = win.dropna(subset=["N_hat"])
    assert (det.groupby("lag")["N_hat"].first() >= det.groupby("lag")["N_star"].first()).all()
    at = det[det["N"] == det["N_hat"]]
    assert (at["eps_th"] == at["f"]).all()
    assert master["slope"].iloc[0] == pytest.approx(1.0, abs=1e-9)
    assert master["r2"].iloc[0] == pytest.approx(1.0, abs=1e-9)
    assert master["intercept"].iloc[0] == pytest.approx(alpha / (alpha - 1) * np.log(EPS * sigma / c))
    assert master["n_points"].iloc[0] == len(lags) and master["flag"].iloc[0] == ""
    assert master["n_significant"].iloc[0] == len(lags) and (master["noise"] == "per_lag").all()
    assert list(win.columns[:6]) == [*SNAP, "noise"] and win["significant"].all()


def test_degenerate_window():
    lags = np.array([1, 2, 3, 4])
    f = np.array([1.0, 1e-3, 0.0, 1e-300])
    psi, alpha_df, env = snapshot(lags, np.zeros(4), 1.0, 1.5, f)
    psi = psi.assign(psi=0.0)  # psi all zero: m = 0
    win, h_n, master, expo = W.window_table(psi, alpha_df, env, eps=EPS, N_grid=N_GRID, **PER_LAG)
    assert (h_n["H_N"] == 0).all() and not win["detected"].any()
    assert master["n_significant"].iloc[0] == 0 and np.isnan(expo["b"].iloc[0]) and expo["flag"].iloc[0]
    assert win["N_hat"].isna().all() and np.isinf(win["N_star"]).all()
    assert np.isnan(master["slope"].iloc[0]) and master["n_points"].iloc[0] == 0 and master["flag"].iloc[0]
    # kappa = inf (alpha = 1): SNR = m / sigma for every N.
    win1, h1, _, _ = W.window_table(*snapshot(lags, np.ones(4), 0.01, 1.0, f), eps=EPS, N_grid=N_GRID, **PER_LAG)
    assert np.isinf(win1["kappa"]).all() and (h1["H_N"] == 4).all() and (win1["N_star"] == 0).all()
    np.testing.assert_allclose(win1["snr"], 100.0)
    # sigma = 0: no scale, never detected.
    win0, h0, _, _ = W.window_table(psi.assign(psi=1.0), alpha_df.assign(sigma=0.0), env, eps=EPS, N_grid=N_GRID, **PER_LAG)
    assert (h0["H_N"] == 0).all() and win0["snr"].isna().all()


def decay_rows(tau):
    return pd.DataFrame(
        [dict(model="diag", optimizer="adamw", epoch="0", transport="diagonal", functional="gamma", scope="mean",
              law="exp", selected=True,
              A=1.0, scale=tau, l_c=np.nan, k=np.nan, floor=np.nan, lag_min=4.0, lag_max=64.0)]
    )


def test_aggregate_and_round_trip(tmp_path):
    lags = np.arange(4, 65, 4)
    tau, c, alpha = 10.0, 3.0, 1.6
    f = np.exp(-lags / tau)
    frames = []
    for seed, sigma in ((2, 0.4), (12, 0.6)):
        psi, a_df, env = snapshot(lags, c * f, sigma, alpha, f)
        tables = W.window_table(psi.assign(seed=seed), a_df, env.assign(seed=seed), eps=EPS, N_grid=N_GRID, **PER_LAG)
        for artifact, df in zip(ARTIFACTS, tables):
            write_table(df, tmp_path / f"{artifact}{seed}.parquet", artifact)
        frames.append([read_table(tmp_path / f"{a}{seed}.parquet", a) for a in ARTIFACTS])
    win, h_n, master, _ = frames[0]
    assert win["N"].dtype == np.int64 and win["snr"].dtype == np.float32 and win["detected"].dtype == bool
    assert h_n["H_N"].dtype == np.int64 and master["n_points"].dtype == np.int64
    h_all, agg, m_all, e_all = W.aggregate(*([fr[i] for fr in frames] for i in (1, 0, 2, 3)), [decay_rows(tau)],
                                           eps=EPS, N_grid=N_GRID)
    assert len(h_all) == 2 * len(N_GRID) and len(m_all) == 2 and len(agg) == len(N_GRID) and len(e_all) == 2
    assert list(agg.columns[:6]) == ["model", "optimizer", "epoch", "transport", "noise", "N"]
    assert (agg["n_seeds"] == 2).all() and (agg["law"] == "exp").all()
    both = h_all.pivot(index="N", columns="seed", values="H_N")
    np.testing.assert_allclose(agg["mean"], both.mean(axis=1).to_numpy())
    np.testing.assert_allclose(agg["std"], both.std(axis=1).to_numpy())
    sigma_med = 0.5  # median over seeds of 0.4 and 0.6
    assert agg["pred_sigma"].iloc[0] == pytest.approx(sigma_med, rel=1e-6)
    assert agg["pred_c"].iloc[0] == pytest.approx(c, rel=1e-5)
    theta = EPS * sigma_med / c * np.array(N_GRID, float) ** -(1 - 1 / alpha)
    expected = np.where(theta >= np.exp(-4 / tau), 0.0, tau * -np.log(theta))
    np.testing.assert_allclose(agg["predicted"], expected, rtol=1e-5)
    write_table(agg, tmp_path / "agg.parquet", "H_N")
    assert read_table(tmp_path / "agg.parquet", "H_N")["law"].tolist() == ["exp"] * len(N_GRID)


def test_window_and_aggregate_keep_transports_apart():
    """Two transports in one snapshot (envelope tau 10 under diagonal, 20 under exact, another
    sigma): each transport's window, H_N, master and exponents rows are those of its tables alone
    (same seeds), the aggregate predicts each from its own primary decay fit (the exact norm's fit,
    tau 5, is not used) and the H_N differ."""
    lags = np.arange(4, 65, 4)
    c, alpha = 3.0, 1.6
    tabs = {}
    for name, tau, sigma in (("diagonal", 10.0, 0.5), ("exact", 20.0, 0.3)):
        f = np.exp(-lags / tau)
        tabs[name] = [df.assign(transport=name) for df in snapshot(lags, c * f, sigma, alpha, f)]
    stacked = [pd.concat([tabs["exact"][i], tabs["diagonal"][i]], ignore_index=True) for i in range(3)]
    got = W.window_table(*stacked, eps=EPS, N_grid=N_GRID, **PER_LAG)
    for name in ("exact", "diagonal"):
        alone = W.window_table(*tabs[name], eps=EPS, N_grid=N_GRID, **PER_LAG)
        for g, a in zip(got, alone):
            assert list(g.columns) == list(a.columns) and list(g.columns).index("transport") == 4
            pd.testing.assert_frame_equal(g[g["transport"] == name].reset_index(drop=True), a)
    h = got[1].pivot(index="N", columns="transport", values="H_N")
    assert (h["exact"] >= h["diagonal"]).all() and (h["exact"] > h["diagonal"]).any()
    decay = pd.concat([decay_rows(10.0).assign(transport="diagonal", functional="gamma"),
                       decay_rows(20.0).assign(transport="exact", functional="signal"),
                       decay_rows(5.0).assign(transport="exact", functional="norm")], ignore_index=True)
    _, agg, master, _ = W.aggregate([got[1]], [got[0]], [got[2]], [got[3]], [decay], eps=EPS, N_grid=N_GRID)
    assert sorted(master["transport"]) == ["diagonal", "exact"]
    for name, tau, sigma in (("diagonal", 10.0, 0.5), ("exact", 20.0, 0.3)):
        rows = agg[agg["transport"] == name]
        theta = EPS * sigma / c * np.array(N_GRID, float) ** -(1 - 1 / alpha)
        expected = np.where(theta >= np.exp(-4 / tau), 0.0, tau * -np.log(theta))
        np.testing.assert_allclose(rows["predicted"], expected, rtol=1e-5)
        np.testing.assert_array_equal(rows["mean"], h[name].to_numpy())


def test_master_law_regression_matches_scipy_linregress():
    """The numpy OLS point estimates against scipy.stats.linregress on noisy data; the CI is
    the percentile interval of the slopes refitted on the resampled y."""
    from scipy import stats

    rng = np.random.default_rng(4)
    x = rng.uniform(1.0, 12.0, 25)
    y = 0.8 * x + 1.5 + 0.3 * rng.standard_normal(25)
    boot_y = y + 0.3 * rng.standard_normal((500, 25))
    got = W.master_law(x, y, boot_y=boot_y)
    ref = stats.linregress(x, y)
    np.testing.assert_allclose([got["slope"], got["intercept"], got["r2"]],
                               [ref.slope, ref.intercept, ref.rvalue ** 2], rtol=1e-10)
    slopes = [stats.linregress(x, yb).slope for yb in boot_y]
    np.testing.assert_allclose([got["slope_lo"], got["slope_hi"]], np.quantile(slopes, [0.025, 0.975]), rtol=1e-10)
    boot_y[0, 3] = np.inf  # a resample with a non-finite y is dropped, not propagated
    assert np.isfinite(W.master_law(x, y, boot_y=boot_y)["slope_lo"])


# ---------------------------------------------------------------- noise definitions (docs/method.md §7b) ----

LAGS7B = np.arange(2, 42, 2)
F7B = np.exp(-LAGS7B / 10.0)


def noisy_snapshot(noise_scales_with_f: bool, n=2000, c=5.0, s=1.0, rng_seed=1, scale=1.0):
    """psi_n(l) = c f(l) + noise, Gaussian noise of scale s (times f(l) when it scales with f),
    S_n = the sum over lags; everything times ``scale``. Per-lag alpha fitted by learnwin.stats.alpha."""
    rng = np.random.default_rng(rng_seed)
    noise = rng.standard_normal((len(LAGS7B), n)) * (F7B[:, None] if noise_scales_with_f else 1.0)
    P = scale * (c * F7B[:, None] + s * noise)
    psi = pd.DataFrame({"lag": np.repeat(LAGS7B, n), "sequence": np.tile(np.arange(n), len(LAGS7B)),
                        "psi": P.ravel()}).assign(**SNAP)
    total = pd.DataFrame({"sequence": np.arange(n), "S": P.sum(axis=0)}).assign(**SNAP)
    env = pd.DataFrame({"lag": LAGS7B, "f": F7B}).assign(**SNAP)
    alpha_df = A.fit_lags(psi, **(ALPHA | {"bootstrap": 50}), seed=1)
    return psi, alpha_df, env, total


def both(psi, alpha_df, env, total, N_grid=N_GRID, bootstrap=200):
    tables = W.window_table(psi, alpha_df, env, total, eps=EPS, N_grid=N_grid, noise=W.NOISES,
                            bootstrap=bootstrap, seed=3, alpha_fit=ALPHA | {"bootstrap": 50})
    return [t.set_index("noise") for t in tables]


def test_fixed_noise_both_definitions_recover_slope_one():
    """mean ~ f, noise of fixed scale: b = 1, a = 0, so per_lag (b - a) and pooled (b) both give 1."""
    _, _, master, expo = both(*noisy_snapshot(False))
    for noise in W.NOISES:
        r, e = master.loc[noise], expo.loc[noise]
        assert r["slope_lo"] < 1.0 < r["slope_hi"] and r["slope"] == pytest.approx(1.0, abs=0.05), noise
        assert r["slope_hi"] - r["slope_lo"] < 0.3 and r["n_points"] == r["n_significant"] == len(LAGS7B)
        assert e["b_lo"] < 1.0 < e["b_hi"] and e["a_lo"] < 0.0 < e["a_hi"], noise
    assert master.loc["pooled", "slope"] == pytest.approx(expo.loc["pooled", "b"], abs=1e-12)


def test_noise_scaling_with_f_per_lag_measures_b_minus_a():
    """sigma ~ f and m ~ f: per_lag slope = b - a = 0 (its CI excludes 1), pooled slope = b = 1."""
    _, _, master, expo = both(*noisy_snapshot(True))
    per_lag, pooled = master.loc["per_lag"], master.loc["pooled"]
    assert per_lag["slope_lo"] < 0.0 < per_lag["slope_hi"] and per_lag["slope_hi"] < 0.5
    assert expo.loc["per_lag", "a"] == pytest.approx(1.0, abs=0.05)
    assert expo.loc["per_lag", "b"] - expo.loc["per_lag", "a"] == pytest.approx(per_lag["slope"], abs=0.05)
    assert pooled["slope_lo"] < 1.0 < pooled["slope_hi"]
    assert pooled["slope"] == pytest.approx(expo.loc["pooled", "b"], abs=1e-12)
    assert (pooled["slope_lo"], pooled["slope_hi"]) == pytest.approx((expo.loc["pooled", "b_lo"], expo.loc["pooled", "b_hi"]))
    assert expo.loc["pooled", "a"] == pytest.approx(0.0, abs=1e-12)


def test_rate_scale_invariance_of_N_star_and_H_N():
    """Every psi and S times c (every effective rate Lambda times c): N*, H_N and the master law
    are unchanged under both definitions (alpha refitted on the scaled psi)."""
    grid = [2**k for k in range(4, 31)]
    ref = both(*noisy_snapshot(True), N_grid=grid, bootstrap=50)
    scaled = both(*noisy_snapshot(True, scale=1e-4), N_grid=grid, bootstrap=50)
    for noise in W.NOISES:
        np.testing.assert_allclose(scaled[0].loc[noise, "N_star"], ref[0].loc[noise, "N_star"], rtol=1e-6)
        np.testing.assert_array_equal(scaled[1].loc[noise, "H_N"], ref[1].loc[noise, "H_N"])
        np.testing.assert_allclose(scaled[0].loc[noise, "sigma"], 1e-4 * ref[0].loc[noise, "sigma"], rtol=1e-6)
        cols = ["slope", "slope_lo", "slope_hi"]
        np.testing.assert_allclose(scaled[2].loc[noise, cols].astype(float), ref[2].loc[noise, cols].astype(float), rtol=1e-6)
    assert ref[1].loc["pooled", "H_N"].iloc[-1] > 0  # the grid reaches the pooled N*


def test_pooled_sigma_of_known_stable_sum():
    """sigma_S and alpha_S of an alpha-stable S (scipy, S1, beta = 0; n = 1e4) are recovered:
    alpha within 0.05 (about 3 ECF RMSEs at n = 1e4, notes/alpha-and-decay-anchors.md §4) and sigma
    within 5 % (measured over 10 draws per alpha in 1.3-1.8: sd 0.8-1.7 %, max 3.6 %)."""
    from scipy.stats import levy_stable

    levy_stable.parameterization = "S1"
    n, alpha_true, scale = 10_000, 1.5, 2.0
    S = levy_stable.rvs(alpha_true, 0.0, scale=scale, size=n, random_state=np.random.default_rng(7))
    lags = np.array([2, 4, 6])
    psi, alpha_df, env = snapshot(lags, np.array([1.0, 0.5, 0.25]), 0.1, 1.8, np.array([1.0, 0.5, 0.25]), n=n)
    total = pd.DataFrame({"sequence": np.arange(n), "S": S}).assign(**SNAP)
    win = W.window_table(psi, alpha_df, env, total, eps=EPS, N_grid=N_GRID, noise=["pooled"],
                         bootstrap=20, alpha_fit=ALPHA | {"bootstrap": 100})[0]
    assert win["alpha"].iloc[0] == pytest.approx(alpha_true, abs=0.05)
    assert win["sigma"].iloc[0] == pytest.approx(scale, rel=0.05)
    assert win["reliable"].all() and win["sigma"].nunique() == 1
    expected = (EPS * win["sigma"] / win["m"]) ** (win["alpha"] / (win["alpha"] - 1))
    np.testing.assert_allclose(win["N_star"], expected, rtol=1e-9)


def test_significance_filter_excludes_and_counts_zero_mean_lags():
    """Lags whose psi has mean exactly 0 are not significant, leave the fit, and are counted."""
    rng = np.random.default_rng(2)
    lags, n = np.arange(2, 26, 2), 1000
    f = np.exp(-lags / 8.0)
    noise = rng.standard_normal((len(lags), n))
    noise -= noise.mean(axis=1, keepdims=True)  # exactly zero mean
    zero = np.isin(lags, [4, 10, 16, 22])
    P = np.where(zero[:, None], 0.0, 3.0 * f[:, None]) + noise
    psi = pd.DataFrame({"lag": np.repeat(lags, n), "sequence": np.tile(np.arange(n), len(lags)),
                        "psi": P.ravel()}).assign(**SNAP)
    alpha_df = A.fit_lags(psi, **(ALPHA | {"bootstrap": 50}), seed=1)
    env = pd.DataFrame({"lag": lags, "f": f}).assign(**SNAP)
    win, _, master, expo = W.window_table(psi, alpha_df, env, eps=EPS, N_grid=N_GRID, noise=["per_lag"], bootstrap=50)
    sig = win.drop_duplicates("lag").set_index("lag")["significant"]
    se = P.std(axis=1, ddof=1) / np.sqrt(n)
    np.testing.assert_array_equal(sig.to_numpy(), np.abs(P.mean(axis=1)) > 2 * se)
    assert not sig[lags[zero]].any() and sig[lags[~zero]].sum() >= 6
    assert master["n_significant"].iloc[0] == sig.sum() == expo["n_significant"].iloc[0]
    assert master["n_points"].iloc[0] == (sig & win.drop_duplicates("lag").set_index("lag")["reliable"]).sum()
    # the filter matters: the zero-mean lags have m ~ 1e-17 > 0 and a finite N*, so without it
    # they would enter the fit
    zero_lags = win[win["lag"].isin(lags[zero])]
    assert np.isfinite(zero_lags["N_star"]).all() and master["n_points"].iloc[0] <= len(lags) - zero.sum()


def test_bad_noise_definitions_fail_early():
    psi, alpha_df, env = snapshot(np.array([1, 2, 3]), np.ones(3), 1.0, 1.5, np.ones(3))
    with pytest.raises(ValueError, match="window.noise"):
        W.window_table(psi, alpha_df, env, eps=EPS, N_grid=N_GRID, noise=["global"], bootstrap=200)
    with pytest.raises(ValueError, match="pooled.*total.parquet"):
        W.window_table(psi, alpha_df, env, eps=EPS, N_grid=N_GRID, noise=["pooled"], bootstrap=200)


def test_master_points_are_the_master_fits_own():
    """master_points gives the fit's x, y and inclusion (docs/method.md §7): the stored fit is the OLS
    of y on x over the included lags; unreliable, non-significant and f = 0 lags are left out."""
    lags = np.arange(2, 26, 2)
    f = np.exp(-lags / 8.0)
    f[3] = 0.0
    m = 3.0 * f
    m[5] = 0.0  # zero mean: not significant
    reliable = np.ones(len(lags), bool)
    reliable[[1, 8]] = False
    m[[1, 8]] *= 5.0  # off the law m = 3 f: they would move the slope if they entered
    win, _, master, _ = W.window_table(*snapshot(lags, m, 0.5, 1.6, f, reliable=reliable), eps=EPS,
                                       N_grid=N_GRID, noise=["per_lag"], bootstrap=20)
    per_lag = win.drop_duplicates("lag")
    x, y, included = W.master_points(per_lag["f"], per_lag["kappa"], per_lag["N_star"],
                                     significant=per_lag["significant"], reliable=per_lag["reliable"])
    np.testing.assert_array_equal(np.flatnonzero(~included), [1, 3, 5, 8])
    np.testing.assert_allclose(x[included], -per_lag["kappa"][included] * np.log(f[included]), rtol=1e-12)
    a, b, _ = ols(x[included], y[included])
    row = master.iloc[0]
    assert row["n_points"] == included.sum() == len(lags) - 4
    assert row["slope"] == pytest.approx(b, rel=1e-12) and row["intercept"] == pytest.approx(a, rel=1e-12)
    assert b == pytest.approx(1.0, rel=1e-9)
    # the figures' former rule (significant lags only) takes other points and another slope
    old = per_lag["significant"].to_numpy() & np.isfinite(x) & np.isfinite(y)
    assert old.sum() == included.sum() + 2 and ols(x[old], y[old])[1] != pytest.approx(b, rel=1e-6)


def test_window_seed_from_the_run_seed_as_the_workflow(tmp_path):
    """A library call without ``seed`` writes the compute_window adapter's tables, with the bootstrap
    seed the workflow always used (run seed + 7000); another run seed gives other CIs."""
    rng = np.random.default_rng(3)
    lags = np.arange(2, 20, 2)
    f = np.exp(-lags / 6.0)
    psi, alpha_df, env = snapshot(lags, 3.0 * f, 0.5, 1.6, f, n=200, spread=0.5)
    psi = psi.assign(psi=psi["psi"] + 0.2 * rng.standard_normal(len(psi)))  # CIs of nonzero width
    cfg = dict(eps=EPS, N_grid=N_GRID, noise=["per_lag"], bootstrap=40)
    paths = {name: str(tmp_path / f"{name}.parquet") for name in ("psi", "alpha", "envelope")}
    for (name, path), df in zip(paths.items(), (psi, alpha_df, env)):
        write_table(df, path, name)
    out = {a: str(tmp_path / f"adapter_{a}.parquet") for a in ("window", "H_N", "master", "exponents")}
    run_adapter("compute_window", tmp_path, params={"window": cfg, "alpha": ALPHA},
                input={**paths, "total": str(tmp_path / "none.parquet")}, output=out)
    psi, alpha_df, env = (read_table(paths[n], n) for n in ("psi", "alpha", "envelope"))  # as the adapter reads
    lib = W.window_table(psi, alpha_df, env, **cfg, alpha_fit=ALPHA)
    for artifact, table in zip(ARTIFACTS, lib):
        write_table(table, tmp_path / f"lib_{artifact}.parquet", artifact)
        assert pq.read_table(out[artifact]).equals(pq.read_table(tmp_path / f"lib_{artifact}.parquet")), artifact
    assert W.bootstrap_seed(psi) == 2 + W.SEED_OFFSET
    pd.testing.assert_frame_equal(lib[2], W.window_table(psi, alpha_df, env, **cfg, seed=2 + 7000)[2])
    other = W.window_table(psi, alpha_df, env, **cfg, seed=0)[2]
    assert other["slope_lo"].iloc[0] != lib[2]["slope_lo"].iloc[0]
    with pytest.raises(ValueError, match="run seeds"):
        W.window_table(pd.concat([psi, psi.assign(seed=5)]), alpha_df, env, **cfg)


def test_a_snapshot_table_without_its_transport_is_refused_by_name():
    """No reader fills in a missing ``transport`` column: the error names the table and the column."""
    lags = np.arange(4, 17, 4)
    psi, alpha_df, env = snapshot(lags, 0.1 * np.ones(4), 1.0, 1.5, np.exp(-lags / 10))
    with pytest.raises(ValueError, match="psi table: no column 'transport'"):
        W.window_table(psi.drop(columns="transport"), alpha_df, env, eps=EPS, N_grid=N_GRID, **PER_LAG)
    with pytest.raises(ValueError, match="envelope table: no column 'transport'"):
        W.window_table(psi, alpha_df, env.drop(columns="transport"), eps=EPS, N_grid=N_GRID, **PER_LAG)
