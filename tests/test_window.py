"""METHOD §7: sample complexity, learnability window and master law (learnwin.window)."""

import numpy as np
import pandas as pd
import pytest

from learnwin import window as W
from learnwin.io import read_table, write_table

KEYS = dict(model="diag", optimizer="adamw", seed=2, epoch="0")
N_GRID = [16, 64, 256, 1024, 4096, 16384]
EPS = 20.0


def snapshot(lags, m, sigma, alpha, f, n=64, reliable=True):
    """psi with exactly mean m(l) per lag, alpha and envelope tables of one snapshot."""
    base = np.linspace(-1, 1, n)  # zero mean
    psi = pd.concat(
        [pd.DataFrame({"lag": l, "sequence": np.arange(n), "psi": mi + base}) for l, mi in zip(lags, m)]
    ).assign(**KEYS)
    L = len(lags)
    alpha_df = pd.DataFrame(
        {"lag": lags, "alpha": np.broadcast_to(alpha, L), "sigma": np.broadcast_to(sigma, L),
         "reliable": np.broadcast_to(reliable, L)}
    )
    alpha_df["kappa"] = alpha_df["alpha"] / (alpha_df["alpha"] - 1)
    env = pd.DataFrame({"lag": lags, "f": f}).assign(**KEYS)
    return psi.astype({"lag": "int64", "sequence": "int64"}), alpha_df, env


def test_closed_form_window_and_monotone():
    lags = np.arange(4, 65, 4)
    tau, c, sigma, alpha = 10.0, 3.0, 0.5, 1.6
    f = np.exp(-lags / tau)
    win, h_n, master = W.window_table(*snapshot(lags, c * f, sigma, alpha, f), eps=EPS, N_grid=N_GRID)
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


def test_degenerate_window():
    lags = np.array([1, 2, 3, 4])
    f = np.array([1.0, 1e-3, 0.0, 1e-300])
    psi, alpha_df, env = snapshot(lags, np.zeros(4), 1.0, 1.5, f)
    psi = psi.assign(psi=0.0)  # psi all zero: m = 0
    win, h_n, master = W.window_table(psi, alpha_df, env, eps=EPS, N_grid=N_GRID)
    assert (h_n["H_N"] == 0).all() and not win["detected"].any()
    assert win["N_hat"].isna().all() and np.isinf(win["N_star"]).all()
    assert np.isnan(master["slope"].iloc[0]) and master["n_points"].iloc[0] == 0 and master["flag"].iloc[0]
    # kappa = inf (alpha = 1): SNR = m / sigma for every N.
    win1, h1, _ = W.window_table(*snapshot(lags, np.ones(4), 0.01, 1.0, f), eps=EPS, N_grid=N_GRID)
    assert np.isinf(win1["kappa"]).all() and (h1["H_N"] == 4).all() and (win1["N_star"] == 0).all()
    np.testing.assert_allclose(win1["snr"], 100.0)
    # sigma = 0: no scale, never detected.
    win0, h0, _ = W.window_table(psi.assign(psi=1.0), alpha_df.assign(sigma=0.0), env, eps=EPS, N_grid=N_GRID)
    assert (h0["H_N"] == 0).all() and win0["snr"].isna().all()


def decay_rows(tau):
    return pd.DataFrame(
        [dict(model="diag", optimizer="adamw", epoch="0", scope="mean", law="exp", selected=True,
              A=1.0, scale=tau, extra=np.nan, k=np.nan, lag_min=4.0, lag_max=64.0)]
    )


def test_aggregate_and_round_trip(tmp_path):
    lags = np.arange(4, 65, 4)
    tau, c, alpha = 10.0, 3.0, 1.6
    f = np.exp(-lags / tau)
    frames = []
    for seed, sigma in ((2, 0.4), (12, 0.6)):
        psi, a_df, env = snapshot(lags, c * f, sigma, alpha, f)
        tables = W.window_table(psi.assign(seed=seed), a_df, env.assign(seed=seed), eps=EPS, N_grid=N_GRID)
        for artifact, df in zip(("window", "H_N", "master"), tables):
            write_table(df, tmp_path / f"{artifact}{seed}.parquet", artifact)
        frames.append([read_table(tmp_path / f"{a}{seed}.parquet", a) for a in ("window", "H_N", "master")])
    win, h_n, master = frames[0]
    assert win["N"].dtype == np.int64 and win["snr"].dtype == np.float32 and win["detected"].dtype == bool
    assert h_n["H_N"].dtype == np.int64 and master["n_points"].dtype == np.int64
    h_all, agg, m_all = W.aggregate(
        [fr[1] for fr in frames], [fr[0] for fr in frames], [fr[2] for fr in frames], [decay_rows(tau)],
        eps=EPS, N_grid=N_GRID,
    )
    assert len(h_all) == 2 * len(N_GRID) and len(m_all) == 2 and len(agg) == len(N_GRID)
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


def test_master_law_regression_matches_scipy_linregress():
    """The numpy OLS and its t-based 95% CI against scipy.stats.linregress on noisy data."""
    from scipy import stats

    rng = np.random.default_rng(4)
    f = np.exp(-np.linspace(0.5, 6, 25))
    kappa = rng.uniform(1.2, 2.5, 25)
    x = -kappa * np.log(f)
    N_star = np.exp(0.8 * x + 1.5 + 0.3 * rng.standard_normal(25))
    table = pd.DataFrame({"kappa": kappa, "f": f, "N_star": N_star, "reliable": True})
    got = W.master_law(table)
    ref = stats.linregress(x, np.log(N_star))
    half = stats.t.ppf(0.975, 23) * ref.stderr
    np.testing.assert_allclose([got["slope"], got["intercept"], got["r2"], got["slope_lo"], got["slope_hi"]],
                               [ref.slope, ref.intercept, ref.rvalue ** 2, ref.slope - half, ref.slope + half],
                               rtol=1e-10)
