"""docs/method.md §8: decay-class regression of the envelope and the predicted window (learnwin.stats.decay)."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from workflow_helpers import run_adapter, schema_defaults

from learnwin.infra.io import read_table, write_table
from learnwin.stats import decay as D

DECAY = schema_defaults("decay")

LAG = np.arange(4, 65, 4.0)  # the default diagnostic lag grid (16 points)
TRUE = {
    "exp": lambda l: np.exp(-l / 12),
    "power": lambda l: l**-1.5,
    "log": lambda l: np.log1p(l) ** -3,
    "tempered": lambda l: l**-0.5 * np.exp(-l / 20),
    "exp_floor": lambda l: np.exp(-l / 8) + 1e-3,
    "power_floor": lambda l: l**-2.0 + 5e-4,
    "log_floor": lambda l: np.log1p(l) ** -6 + 3e-4,
}
EXCUSED = {("log", "power_floor"), ("power_floor", "log")}  # the known confusable pair


def noisy(law, draw):
    rng = np.random.default_rng([11, draw])
    return TRUE[law](LAG) * np.exp(0.05 * rng.standard_normal(LAG.size))


def test_recovery_confusion():
    confusion = pd.DataFrame(0, index=list(TRUE), columns=D.LAWS)
    for law in TRUE:
        for draw in range(50):
            fit = D.fit_curve(LAG, noisy(law, draw), **(DECAY | {"bootstrap": 10}), seed=draw)
            confusion.loc[law, fit.loc[fit["selected"], "law"].item()] += 1
    print("\nselected law (columns) per true law (rows), 50 draws:\n" + confusion.to_string())
    for law in TRUE:
        wrong = sum(confusion.loc[law, c] for c in D.LAWS if c != law and (law, c) not in EXCUSED)
        assert wrong <= 5, (law, confusion.loc[law].to_dict())
    assert confusion.loc["log", "log"] >= 40 and confusion.loc["power_floor", "power_floor"] >= 40


@pytest.mark.parametrize(
    "law, scale, floor",
    [("exp", 12.0, np.nan), ("power", 1.5, np.nan), ("log", 3.0, np.nan), ("power_floor", 2.0, 5e-4)],
)
def test_exact_curve_parameters(law, scale, floor):
    fit = D.fit_curve(LAG, TRUE[law](LAG), **(DECAY | {"bootstrap": 50}), seed=0).set_index("law")
    row = fit.loc[law]
    assert row["selected"] and not row["ambiguous"] and row["weight"] > 0.99
    assert row["A"] == pytest.approx(1.0, rel=1e-6) and row["scale"] == pytest.approx(scale, rel=1e-6)
    assert row["r2"] == pytest.approx(1.0, abs=1e-9)
    assert row["lag_min"] == 4 and row["lag_max"] == 64
    if np.isfinite(floor):
        assert row["floor"] == pytest.approx(floor, rel=1e-4)
    # each law's own columns: l_c and k for tempered, floor for the floor laws, NaN elsewhere
    assert fit.loc["tempered", ["l_c", "k"]].notna().all() and np.isnan(fit.loc["tempered", "floor"])
    floors = fit.index.str.endswith("_floor")
    assert fit.loc[floors, "floor"].notna().all() and fit.loc[~floors & (fit.index != "tempered"), "floor"].isna().all()
    assert fit.loc[fit.index != "tempered", ["l_c", "k"]].isna().all().all()


def test_block_bootstrap_ci_covers_truth():
    fit = D.fit_curve(LAG, noisy("exp", 3), **DECAY, seed=1).set_index("law")
    lo, hi = fit.loc["exp", ["scale_lo", "scale_hi"]]
    assert lo < 12.0 < hi and hi - lo < 3.0


def test_window_and_trim():
    f = TRUE["power"](LAG)
    f[[0, 5]] = [np.nan, 0.0]
    fit = D.fit_curve(LAG, f, **(DECAY | {"trim": 1, "bootstrap": 10}))
    assert fit["lag_min"].iloc[0] == 12 and fit["lag_max"].iloc[0] == 60
    short = D.fit_curve(LAG[:6], TRUE["exp"](LAG[:6]), **(DECAY | {"bootstrap": 10}))
    assert not short["selected"].any() and short["flag"].str.contains("min_points").all()


def row(law, A=1.0, scale=1.0, l_c=np.nan, k=np.nan, floor=np.nan, lag_min=1.0, lag_max=64.0):
    return pd.Series(dict(law=law, A=A, scale=scale, l_c=l_c, k=k, floor=floor, lag_min=lag_min, lag_max=lag_max))


def test_predict_window_closed_forms():
    N = np.array([16.0, 256.0, 4096.0])
    alpha, sigma, c, eps = 1.5, 0.02, 2.0, 20.0
    theta = eps * sigma / c * N ** (-1 / 3)
    np.testing.assert_allclose(D.predict_window(row("exp", scale=10.0), alpha, sigma, c, eps, N), 10 * -np.log(theta))
    np.testing.assert_allclose(
        D.predict_window(row("power", scale=0.5), alpha, sigma, c, eps, N), theta ** (-1 / 0.5)
    )
    np.testing.assert_allclose(
        D.predict_window(row("log", scale=2.0), alpha, sigma, c, eps, N), np.exp(theta ** (-1 / 2.0)) - 1
    )
    floor = D.predict_window(row("exp_floor", scale=10.0, floor=theta[1]), alpha, sigma, c, eps, N)
    assert floor[0] == pytest.approx(10 * -np.log(theta[0] - theta[1])) and np.isinf(floor[1:]).all()
    tempered = row("tempered", scale=0.5, l_c=30.0, k=1.0)
    got = D.predict_window(tempered, alpha, sigma, c, eps, N)
    np.testing.assert_allclose(D.law_f(tempered, got), theta, rtol=2e-3)
    # theta above f at the first lag -> 0; alpha = 1 (kappa = inf) -> theta constant in N.
    assert (D.predict_window(row("exp", scale=10.0), alpha, 10.0, c, eps, N) == 0).all()
    flat = D.predict_window(row("power", scale=0.5), 1.0, sigma, c, eps, N)
    assert np.ptp(flat) == 0 and flat[0] == pytest.approx((eps * sigma / c) ** -2)


def test_fit_envelopes_scopes_and_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    env = pd.concat(
        [
            pd.DataFrame({"lag": LAG.astype(np.int64), "f": TRUE["exp"](LAG) * np.exp(0.05 * rng.standard_normal(LAG.size))}).assign(seed=s)
            for s in (2, 12)
        ]
    ).assign(model="gru", optimizer="adamw", epoch="best", transport="diagonal")
    out = D.fit_envelopes(env, min_points=8, trim=0, bootstrap=20, block=5, seed=7)
    assert sorted(out["scope"].unique()) == ["mean", "seed12", "seed2"]
    assert (out.groupby("scope")["selected"].sum() == 1).all()
    sel = out[out["selected"]].set_index("scope")
    assert (sel["law"] == "exp").all() and sel.loc["mean", "scale"] == pytest.approx(12, rel=0.1)
    np.testing.assert_allclose(out.groupby("scope")["weight"].sum(), 1.0)
    pd.testing.assert_frame_equal(out, D.fit_envelopes(env, min_points=8, trim=0, bootstrap=20, block=5, seed=7))
    path = tmp_path / "decay.parquet"
    write_table(out, path, "decay")
    back = read_table(path, "decay")
    assert list(back.columns) == list(out.columns)
    assert back["aic"].dtype == np.float32 and back["n_params"].dtype == np.int64
    assert back["selected"].dtype == bool and back["law"].tolist() == out["law"].tolist()


def test_fit_envelopes_default_seed_is_the_workflows(tmp_path):
    """A library call without ``seed`` writes the fit_decay adapter's table, with the seed the
    workflow always used (8000); another seed gives other bootstrap CIs."""
    rng = np.random.default_rng(6)
    paths = []
    for s in (2, 12):
        env = pd.DataFrame({"lag": LAG.astype(np.int64), "f": TRUE["power"](LAG) * np.exp(0.05 * rng.standard_normal(LAG.size))})
        paths.append(str(tmp_path / f"env{s}.parquet"))
        write_table(env.assign(seed=s, model="gru", optimizer="adamw", epoch="best", transport="diagonal"), paths[-1],
                    "envelope")
    cfg = dict(min_points=8, trim=0, bootstrap=30, block=5)
    run_adapter("fit_decay", tmp_path, params={"decay": cfg}, input={"envelopes": paths},
                output={"decay": str(tmp_path / "adapter.parquet")})
    env = pd.concat([read_table(p, "envelope") for p in paths], ignore_index=True)
    lib = D.fit_envelopes(env, **cfg)
    write_table(lib, tmp_path / "library.parquet", "decay")
    assert pq.read_table(tmp_path / "adapter.parquet").equals(pq.read_table(tmp_path / "library.parquet"))
    pd.testing.assert_frame_equal(lib, D.fit_envelopes(env, **cfg, seed=8000))
    assert not np.allclose(D.fit_envelopes(env, **cfg, seed=1)["scale_lo"], lib["scale_lo"], equal_nan=True)


def test_fit_envelopes_per_transport_and_functional():
    """Diagonal rows decay exponentially, the exact signal and diagonal entries as power laws and the
    exact norm exponentially with another length: each (transport, functional) gets its own fit,
    equal to fitting that column alone, and primary() picks gamma and signal."""
    rng = np.random.default_rng(9)

    def noisy(f):
        return f * np.exp(0.03 * rng.standard_normal(LAG.size))

    rows = []
    for s in (2, 12):
        base = pd.DataFrame({"lag": LAG.astype(np.int64), "seed": s})
        rows.append(base.assign(transport="diagonal", f=noisy(TRUE["exp"](LAG)), f_diag_entries=np.nan,
                                f_norm=np.nan))
        rows.append(base.assign(transport="exact", f=noisy(TRUE["power"](LAG)),
                                f_diag_entries=noisy(TRUE["power"](LAG)), f_norm=noisy(np.exp(-LAG / 30.0))))
    env = pd.concat(rows, ignore_index=True).assign(model="gru", optimizer="adamw", epoch="best")
    cfg = dict(min_points=8, trim=0, bootstrap=20, block=5, seed=7)
    out = D.fit_envelopes(env, **cfg)
    assert list(out.columns[:6]) == ["model", "optimizer", "epoch", "transport", "functional", "scope"]
    sel = out[out["selected"] & (out["scope"] == "mean")].set_index(["transport", "functional"])
    assert sorted(sel.index) == [("diagonal", "gamma"), ("exact", "diag_entries"), ("exact", "norm"),
                                 ("exact", "signal")]
    assert sel.loc[("diagonal", "gamma"), "law"] == "exp" and sel.loc[("exact", "norm"), "law"] == "exp"
    assert sel.loc[("diagonal", "gamma"), "scale"] == pytest.approx(12, rel=0.1)
    assert sel.loc[("exact", "norm"), "scale"] == pytest.approx(30, rel=0.1)
    assert sel.loc[("exact", "signal"), "law"] == "power" == sel.loc[("exact", "diag_entries"), "law"]
    alone = D.fit_envelopes(env[env["transport"] == "exact"].drop(columns="f").rename(columns={"f_norm": "f"})
                            .assign(transport="diagonal"), **cfg)  # the norm column alone, fitted as a gamma
    got = out[(out["transport"] == "exact") & (out["functional"] == "norm")]
    pd.testing.assert_frame_equal(got.drop(columns=["transport", "functional"]).reset_index(drop=True),
                                  alone.drop(columns=["transport", "functional"]))
    prim = D.primary(out)
    assert set(zip(prim["transport"], prim["functional"])) == {("diagonal", "gamma"), ("exact", "signal")}


def test_a_table_without_its_transport_is_refused_by_name():
    """No reader fills in a missing ``transport`` column (every snapshot writes it): a hand-made
    envelope without one gets an error that names the table and the column."""
    env = pd.DataFrame({"lag": LAG.astype(np.int64), "f": TRUE["exp"](LAG), "seed": 2}).assign(
        model="gru", optimizer="adamw", epoch="best")
    with pytest.raises(ValueError, match="envelope table: no column 'transport'"):
        D.fit_envelopes(env, min_points=8, trim=0, bootstrap=20, block=5, seed=7)
