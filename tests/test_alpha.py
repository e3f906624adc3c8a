"""docs/method.md §6: symmetric alpha-stable fits, selection and reliability (learnwin.stats.alpha)."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from workflow_helpers import run_adapter, schema_defaults

from learnwin.infra.io import read_table, write_table
from learnwin.stats import alpha as A

ALPHA = schema_defaults("alpha")


def sas(alpha, size, rng, scale=1.0):
    """Symmetric alpha-stable draws (Chambers-Mallows-Stuck, beta = 0, S1 scale)."""
    v = rng.uniform(-np.pi / 2, np.pi / 2, size)
    w = rng.exponential(1.0, size)
    x = np.sin(alpha * v) / np.cos(v) ** (1 / alpha) * (np.cos((1 - alpha) * v) / w) ** ((1 - alpha) / alpha)
    return scale * x


@pytest.mark.parametrize("alpha", [1.2, 1.5, 1.8, 2.0])
def test_bias_ecf_and_mcculloch(alpha):
    rng = np.random.default_rng(int(alpha * 10))
    draws = [sas(alpha, 20_000, rng, scale=2.5) for _ in range(10)]
    ecf = np.array([A.ecf_fit(x)[0] for x in draws])
    mcc = np.array([A.mcculloch_alpha(x) for x in draws])
    sig = np.array([A.ecf_fit(x)[1] for x in draws])
    assert abs(ecf.mean() - alpha) <= 0.03
    assert abs(mcc.mean() - alpha) <= 0.04
    assert abs(sig.mean() / 2.5 - 1) <= 0.03


def test_fit_sample_selects_ecf_and_agrees():
    x = sas(1.5, 20_000, np.random.default_rng(3))
    fit = A.fit_sample(x, **ALPHA, seed=1)
    assert fit.method == "ecf" and fit.reliable and fit.flag == ""
    assert fit.alpha == fit.alpha_ecf and abs(fit.alpha - 1.5) < 0.05
    assert fit.alpha_mcc_lo < 1.5 < fit.alpha_mcc_hi and fit.agree
    assert fit.kappa == pytest.approx(fit.alpha / (fit.alpha - 1))
    assert A.fit_sample(x, **ALPHA, seed=1) == fit  # same seed, same numbers


def test_bootstrap_matches_index_bootstrap():
    """The order-statistic bootstrap has the law of the (B, n) index-draw bootstrap."""
    rng = np.random.default_rng(5)
    x = sas(1.6, 2000, rng)
    idx = rng.integers(0, x.size, size=(3000, x.size))
    brute = A._alpha_from_ratio(
        np.diff(np.quantile(x[idx], [0.05, 0.95], axis=1), axis=0)[0]
        / np.diff(np.quantile(x[idx], [0.25, 0.75], axis=1), axis=0)[0]
    )
    med, lo, hi = A.bootstrap_mcculloch(x, 3000, np.random.default_rng(6))
    b_med, b_lo, b_hi = np.quantile(brute, [0.5, 0.025, 0.975])
    assert med == pytest.approx(b_med, abs=0.01)
    assert (hi - lo) == pytest.approx(b_hi - b_lo, rel=0.1)


DEGENERATE = {
    "constant": np.full(5000, 3.0),
    "n<10": np.arange(5.0),
    "zeros": np.zeros(5000),
    "outlier": np.r_[np.zeros(4999), 1e12],
    "nonfinite": np.r_[np.random.default_rng(1).standard_normal(5000), np.nan, np.inf],
    "cauchy": np.random.default_rng(2).standard_cauchy(20_000),
}


@pytest.mark.parametrize("name", list(DEGENERATE))
def test_degenerate_samples(name):
    fit = A.fit_sample(DEGENERATE[name], **ALPHA, seed=0)
    assert not fit.reliable and fit.flag
    assert 1.0 <= fit.alpha <= 2.0 and np.isfinite(fit.sigma) and fit.sigma >= 0
    assert not np.isnan(fit.kappa)
    if name in ("constant", "n<10", "zeros", "outlier"):
        assert fit.method == "default" and fit.alpha == 2.0 and fit.kappa == 2.0
    if name == "cauchy":
        assert "kappa unbounded" in fit.flag and fit.alpha < 1.02 and fit.kappa > 50


def test_kappa_and_table():
    assert A.kappa(1.0) == np.inf and A.kappa(2.0) == 2.0 and A.kappa(1.5) == pytest.approx(3.0)
    np.testing.assert_array_equal(A.kappa(np.array([0.9, 1.0, 1.25])), [np.inf, np.inf, 5.0])
    tab = A.mcculloch_table()
    assert len(tab) >= 201 and tab["alpha"].min() == 1.0 and tab["alpha"].max() == 2.0
    assert np.all(np.diff(tab["alpha"]) > 0) and np.all(np.diff(tab["ratio"]) < 0)
    # Cauchy: R = tan(0.45 pi) / tan(0.25 pi); Gaussian: R = z_0.95 / z_0.75.
    assert tab["ratio"].iloc[0] == pytest.approx(np.tan(0.45 * np.pi), rel=1e-6)
    assert tab["ratio"].iloc[-1] == pytest.approx(1.6448536 / 0.6744898, rel=1e-6)
    assert A.mcculloch_table() is tab  # cached, read once


def psi_table(rng, lags=(4, 8, 12), n=1500, alpha=1.5):
    rows = [
        pd.DataFrame({"lag": lag, "sequence": np.arange(n), "psi": 0.1 + sas(alpha, n, rng)})
        for lag in lags
    ]
    df = pd.concat(rows, ignore_index=True)
    return df.assign(model="gru", optimizer="adamw", seed=2, epoch="best")[
        ["model", "optimizer", "seed", "epoch", "lag", "sequence", "psi"]
    ].astype({"lag": "int64", "sequence": "int64", "seed": "int64"})


def test_fit_lags_parquet_round_trip(tmp_path):
    psi = psi_table(np.random.default_rng(0))
    out = A.fit_lags(psi, bootstrap=200, min_samples=1000, max_samples=1000, ci_width_max=0.3, seed=2)
    assert list(out["lag"]) == [4, 8, 12] and (out["n"] == 1000).all()
    assert out["reliable"].all() and (out["method"] == "ecf").all()
    path = tmp_path / "alpha.parquet"
    write_table(out, path, "alpha")
    back = read_table(path, "alpha")
    assert list(back.columns) == list(out.columns)
    assert back["alpha"].dtype == np.float32 and back["lag"].dtype == np.int64
    assert back["reliable"].dtype == bool and back["epoch"].iloc[0] == "best"
    np.testing.assert_allclose(back["alpha"], out["alpha"], rtol=1e-6)
    again = A.fit_lags(psi, bootstrap=200, min_samples=1000, max_samples=1000, ci_width_max=0.3, seed=2)
    pd.testing.assert_frame_equal(out, again)


def test_fit_lags_averages_directions():
    rng = np.random.default_rng(1)
    psi = psi_table(rng, lags=(4,), n=1200)
    two = pd.concat([psi.assign(direction=0), psi.assign(direction=1, psi=3 * psi["psi"])])
    out = A.fit_lags(two, **(ALPHA | {"bootstrap": 50}), seed=0)
    ref = A.fit_lags(psi.assign(psi=2 * psi["psi"]), **(ALPHA | {"bootstrap": 50}), seed=0)
    pd.testing.assert_frame_equal(out, ref)


def test_fit_lags_seed_from_the_run_seed_as_the_workflow(tmp_path):
    """A library call without ``seed`` writes the fit_alpha adapter's table, with the bootstrap seed
    the workflow always used (run seed + 6000); another run seed gives other bootstrap CIs."""
    psi = psi_table(np.random.default_rng(5), lags=(4, 8), n=1200).assign(seed=12)
    cfg = dict(bootstrap=60, min_samples=1000, max_samples=100_000, ci_width_max=0.3)
    write_table(psi, tmp_path / "psi.parquet", "psi")
    run_adapter("fit_alpha", tmp_path, params={"alpha": cfg}, input={"psi": str(tmp_path / "psi.parquet")},
                output={"alpha": str(tmp_path / "adapter.parquet")})
    psi = read_table(tmp_path / "psi.parquet", "psi")  # what the adapter reads (float32 psi)
    lib = A.fit_lags(psi, **cfg)
    write_table(lib, tmp_path / "library.parquet", "alpha")
    assert pq.read_table(tmp_path / "adapter.parquet").equals(pq.read_table(tmp_path / "library.parquet"))
    pd.testing.assert_frame_equal(lib, A.fit_lags(psi, **cfg, seed=12 + 6000))
    other = A.fit_lags(psi.assign(seed=2), **cfg)
    assert not np.allclose(other["alpha_mcc_lo"], lib["alpha_mcc_lo"])
    with pytest.raises(ValueError, match="run seeds"):
        A.fit_lags(pd.concat([psi, psi.assign(seed=2)]), **cfg)


def test_fit_lags_keeps_transports_apart():
    """psi of two transports, Gaussian under one and alpha = 1.3 under the other: one row per
    (transport, lag), each the fit of that transport's rows alone (same seeds), near its own alpha."""
    rng = np.random.default_rng(8)
    lags = (4, 8)
    gauss = psi_table(rng, lags=lags, n=3000).assign(psi=lambda d: rng.normal(0.1, 1.0, len(d)))
    heavy = psi_table(rng, lags=lags, n=3000)
    heavy["psi"] = 0.1 + sas(1.3, len(heavy), rng)
    psi = pd.concat([heavy.assign(transport="exact"), gauss.assign(transport="diagonal")], ignore_index=True)
    cfg = ALPHA | {"bootstrap": 50}
    out = A.fit_lags(psi, **cfg, seed=3)
    assert list(zip(out["transport"], out["lag"])) == [("diagonal", 4), ("diagonal", 8), ("exact", 4), ("exact", 8)]
    for name, part in (("diagonal", gauss), ("exact", heavy)):
        alone = A.fit_lags(part.assign(transport=name), **cfg, seed=3)
        pd.testing.assert_frame_equal(out[out["transport"] == name].reset_index(drop=True), alone)
    got = out.set_index(["transport", "lag"])["alpha"]
    assert (got.loc["diagonal"] > 1.9).all() and (abs(got.loc["exact"] - 1.3) < 0.1).all()
