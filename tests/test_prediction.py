"""The eps calibration of the predicted window (docs/method.md §8, §10), vectorised over the eps
grid: every result equals the per-eps loop it replaces, bit for bit, on synthetic inputs."""

import functools

import numpy as np
import pandas as pd
import pytest

from learnwin.stats import decay as D
from learnwin.stats import prediction as P

N = np.array([64, 128, 256, 512, 1024, 2048, 4096, 8192])
ROWS = {  # one decay row per law, and two more tempered ones
    "exp": dict(law="exp", A=0.5, scale=12.0),
    "power": dict(law="power", A=0.3, scale=1.2),
    "log": dict(law="log", A=0.4, scale=2.5),
    "tempered": dict(law="tempered", A=0.6, scale=0.4, l_c=30.0, k=1.0),
    "tempered_rising": dict(law="tempered", A=0.05, scale=-0.8, l_c=20.0, k=1.5),
    "tempered_slow": dict(law="tempered", A=0.6, scale=0.1, l_c=1e6, k=0.5),  # above theta at the grid end
    "exp_floor": dict(law="exp_floor", A=0.5, scale=8.0, floor=2e-3),
    "power_floor": dict(law="power_floor", A=0.3, scale=2.0, floor=2e-3),
    "log_floor": dict(law="log_floor", A=0.4, scale=4.0, floor=2e-3),
}


def decay_row(name) -> pd.Series:
    return pd.Series(dict(l_c=np.nan, k=np.nan, floor=np.nan, lag_min=1.0, lag_max=63.0) | ROWS[name])


def tempered_dense(row, alpha, sigma, c, eps, N_grid):
    """The tempered window as computed before the vectorisation: the boolean matrix of f > theta
    on the 20,001-point lag grid, one eps at a time."""
    theta = (eps * sigma / c) * np.asarray(N_grid, float) ** (-max(1.0 - 1.0 / alpha, 0.0))
    grid = np.geomspace(float(row["lag_min"]), 1e4 * float(row["lag_max"]), 20001)
    above = D.law_f(row, grid)[:, None] > theta[None, :]
    last = grid.size - 1 - np.argmax(above[::-1], axis=0)
    out = np.where(above[-1], np.inf, grid[last])
    return np.where(theta >= D.law_f(row, float(row["lag_min"])), 0.0, out)


@pytest.mark.parametrize("name", list(ROWS))
def test_predict_window_over_eps_equals_the_per_eps_loop(name):
    row, (alpha, sigma, c) = decay_row(name), (1.6, 0.03, 0.01)
    got = D.predict_window(row, alpha, sigma, c, P.EPS_GRID, N)
    loop = np.stack([D.predict_window(row, alpha, sigma, c, eps, N) for eps in P.EPS_GRID])
    assert got.shape == (P.EPS_GRID.size, N.size) and np.array_equal(got, loop)
    # the grid reaches every branch: beyond the first lag (0), a finite lag, never reached (inf)
    assert (got == 0).any() and (np.isfinite(got) & (got > 0)).any()
    assert np.isinf(got).any() == (name.endswith("floor") or name == "tempered_slow")
    if row["law"] == "tempered":
        assert np.array_equal(got, np.stack([tempered_dense(row, alpha, sigma, c, eps, N) for eps in P.EPS_GRID]))
    # NaN inputs stay NaN; theta = inf (c = 0) is beyond the first lag
    assert np.isnan(D.predict_window(row, np.nan, sigma, c, P.EPS_GRID, N)).all()
    assert (D.predict_window(row, alpha, sigma, 0.0, P.EPS_GRID, N) == 0).all()


def test_tempered_window_is_the_largest_lag_above_theta():
    row, theta = decay_row("tempered_rising"), np.array([1e-3, 1e-2, 3e-2])  # f peaks at 0.23 near l = 13
    got = D.predict_window(row, 2.0, 1.0, 1.0, theta, [1.0])[:, 0]
    f = D.law_f(row, got)
    assert (f > theta).all() and np.allclose(f, theta, rtol=1e-2)
    assert (np.diff(got) < 0).all() and got[-1] > 13  # the falling side, not the rising one


def test_mean_square_finite_equals_np_mean_per_eps():
    rng = np.random.default_rng(3)
    d = rng.standard_normal((37, 241)) * 10.0 ** rng.integers(-3, 4, (37, 241))
    d[rng.random(d.shape) < 0.2] = np.inf
    d[rng.random(d.shape) < 0.1] = np.nan
    d[:, 5] = np.nan  # no finite point: inf
    d[:, 100:140] = d[:, [100]]  # ties: argmin keeps the first
    got = P._mean_square_finite(d)
    loop = [np.mean(col[np.isfinite(col)] ** 2) if np.isfinite(col).any() else np.inf for col in d.T]
    assert np.array_equal(got, loop) and got[5] == np.inf and np.ptp(got[100:140]) == 0


def loo_per_eps(measured, inputs, N_grid):
    """Leave-one-model-out as computed before the vectorisation: a table and a merge per eps."""

    @functools.cache
    def predict(eps):
        rows = []
        for r in (row._asdict() for row in inputs.itertuples(index=False)):
            curve = D.predict_window(r, r["pred_alpha"], r["pred_sigma"], r["pred_c"], eps, N_grid)
            rows += [dict(model=r["model"], N=int(n), predicted=float(h)) for n, h in zip(N_grid, curve)]
        return pd.DataFrame(rows, columns=["model", "N", "predicted"])

    out = []
    for model in sorted(measured["model"].unique()):
        errors = []
        for eps in P.EPS_GRID:
            both = measured[measured["model"] != model].merge(predict(eps), on=["model", "N"])
            d = (both["predicted"] - both["measured"]).to_numpy(float)
            d = d[np.isfinite(d)]
            errors.append(np.mean(d ** 2) if d.size else np.inf)
        eps = float(P.EPS_GRID[int(np.argmin(errors))])
        out.append(measured[measured["model"] == model].merge(predict(eps), on=["model", "N"]).assign(eps=eps))
    return pd.concat(out, ignore_index=True)


def test_leave_one_model_out_equals_the_per_eps_loop():
    names = ["power", "tempered_rising", "tempered_slow", "exp_floor"]
    inputs = pd.DataFrame([dict(model=name, pred_alpha=a, pred_sigma=0.03, pred_c=0.01) | ROWS[name]
                           | dict(lag_min=1.0, lag_max=63.0, l_c=ROWS[name].get("l_c", np.nan),
                                  k=ROWS[name].get("k", np.nan), floor=ROWS[name].get("floor", np.nan))
                           for name, a in zip(names, (1.3, 1.8, 1.6, 1.4))])
    rng = np.random.default_rng(5)
    measured = pd.DataFrame([dict(model=m, N=int(n), measured=k * np.log(n) + rng.normal(), censored=bool(n == N[-1]))
                             for k, m in enumerate(names, 1) for n in N])
    measured = measured.drop(index=[3, 12]).reset_index(drop=True)  # points missing for two models
    measured.loc[7, "measured"] = np.nan
    got = P.leave_one_model_out(measured, P.predict_levels(inputs, N))
    pd.testing.assert_frame_equal(got, loo_per_eps(measured, inputs, N), check_exact=True)
    assert set(got["model"]) == set(names) and len(got) == len(measured)
    assert got["eps"].isin(P.EPS_GRID).all() and got["eps"].nunique() > 1
