"""Degenerate statistics give defined outputs, never an exception deep inside a plot.

Envelope values of 0 or underflow at long lags, psi all zero, alpha at the boundaries 1 and 2,
and no lag detectable at any N, pushed through the real stage functions (alpha -> window ->
decay -> aggregate) and then through every figure.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from learnwin import plots  # noqa: E402
from learnwin.infra.figures import FIGURES  # noqa: E402
from learnwin.stats import (
    alpha,
    decay,
    window,  # noqa: E402
)

LAGS = np.arange(2, 34, 2)
N_GRID = [16, 256, 4096]
KEYS = dict(model="gru", optimizer="adamw", seed=2, epoch="best")
rng = np.random.default_rng(0)


def _with_keys(df, **keys):
    for col, val in reversed(list({**KEYS, **keys}.items())):
        df.insert(0, col, val)
    return df


def _psi(values):  # values: (lags, sequences)
    L, n = values.shape
    return _with_keys(pd.DataFrame({"lag": np.repeat(LAGS, n), "sequence": np.tile(np.arange(n), L),
                                    "psi": values.ravel()}), transport="diagonal")


def _envelope(f):
    return _with_keys(pd.DataFrame({"lag": LAGS, "f": f, "f_geo": f, "f_gates": f, "f_order0": f,
                                    "f_order1": f, "ratio": np.ones_like(f), "lambda_mean": 1.0,
                                    "lambda_std": 0.0, "f_diagonal": f}), transport="diagonal")


CASES = {
    # envelope decays to exact 0 / float32 underflow at long lags; psi has a real signal
    "envelope underflow": (np.where(LAGS < 20, np.exp(-LAGS / 2.0), 0.0),
                           0.05 + rng.standard_normal((len(LAGS), 1200))),
    # the statistic is identically zero: no scale, no signal
    "psi all zero": (np.exp(-LAGS / 8.0), np.zeros((len(LAGS), 1200))),
    # Cauchy noise (alpha at the boundary 1, kappa = inf) and Gaussian noise (alpha = 2)
    "alpha at 1": (np.exp(-LAGS / 8.0), rng.standard_cauchy((len(LAGS), 1200))),
    "alpha at 2": (np.exp(-LAGS / 8.0), rng.standard_normal((len(LAGS), 1200))),
    # pure zero-mean noise: nothing detectable at any N
    "nothing detectable": (np.exp(-LAGS / 8.0), 1e3 * rng.standard_normal((len(LAGS), 1200))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_degenerate_inputs_flow_through_statistics_and_plots(case, tmp_path):
    f, values = CASES[case]
    psi, env = _psi(values), _envelope(f)
    a = alpha.fit_lags(psi, bootstrap=50, min_samples=1000, max_samples=100000, ci_width_max=0.3, seed=1)
    assert len(a) == len(LAGS) and np.isfinite(a["alpha"]).all() and a["alpha"].between(1, 2).all()
    total = _with_keys(pd.DataFrame({"sequence": np.arange(values.shape[1]), "S": values.sum(axis=0)}), transport="diagonal")
    win, h_n, master, expo = window.window_table(psi, a, env, total, eps=20, N_grid=N_GRID,
                                                 noise=window.NOISES, bootstrap=20, alpha_fit=dict(bootstrap=50, min_samples=1000, max_samples=100000, ci_width_max=0.3))
    assert set(master["noise"]) == set(expo["noise"]) == set(window.NOISES)
    assert h_n["H_N"].dtype == np.int64
    assert all(np.all(np.diff(h["H_N"]) >= 0) for _, h in h_n.groupby("noise"))
    dec = decay.fit_envelopes(env, min_points=6, trim=0, bootstrap=20, block=3, seed=1)
    H_all, H_agg, master_all, expo_all = window.aggregate([h_n], [win], [master], [expo], [dec], eps=20,
                                                          N_grid=N_GRID)
    if case == "psi all zero":
        assert (h_n["H_N"] == 0).all() and not a["reliable"].any()
        assert (a["flag"] != "").all()
    if case == "nothing detectable":
        assert (h_n["H_N"] == 0).all() and not win["detected"].any()
    if case == "alpha at 1":
        # kappa unbounded: mostly flagged unreliable (the CI can miss alpha = 1 by chance)
        assert a["alpha"].median() < 1.15 and a["reliable"].mean() <= 0.25
    if case == "alpha at 2":
        assert (a["alpha"] > 1.9).all()
    curve = pd.DataFrame({"model": "gru", "optimizer": "adamw", "seed": 2, "epoch": [0, 1],
                          "train_mse": [1.0, 0.5], "train_r2": [0.0, 0.5], "val_mse": [1.0, 0.5],
                          "val_r2": [0.0, np.nan]})
    units = _with_keys(pd.DataFrame({"unit": np.repeat([0, 1], len(LAGS)), "lag": np.tile(LAGS, 2),
                                     "mu_abs": np.tile(f, 2), "tau": np.repeat([np.inf, np.nan], len(LAGS))}),
                       transport="diagonal")
    out = lambda i: dict(png=tmp_path / f"{i}.png", pdf=tmp_path / f"{i}.pdf", dpi=60)  # noqa: E731
    figs = [
        plots.plot_H_N(H_agg, models=["gru"], optimizers=["adamw"], epoch="best", **out(0)),
        plots.plot_envelope(env, dec, models=["gru"], optimizers=["adamw"], **out(1)),
        plots.plot_envelope_decomposition(env, models=["gru"], optimizers=["adamw"], **out(2)),
        plots.plot_tau_spectra(units, models=["gru"], optimizers=["adamw"], **out(3)),
        plots.plot_N_hat_vs_f(win, master_all, models=["gru"], optimizers=["adamw"], epoch="best", **out(4)),
        plots.plot_master_law(win, master_all, models=["gru"], optimizers=["adamw"], epoch="best", **out(5)),
        plots.plot_alpha(a, models=["gru"], optimizers=["adamw"], **out(6)),
        plots.plot_eps_th(win, models=["gru"], optimizers=["adamw"], budgets=[16, 4096], **out(7)),
        plots.plot_learning_curves(curve, models=["gru"], optimizers=["adamw"], **out(8)),
        plots.plot_optimizers(env, units, models=["gru"], optimizers=["adamw"], **out(9)),
        plots.plot_decay_table(dec, models=["gru"], optimizers=["adamw"], **out(10)),
        plots.plot_epochs(env, a, models=["gru"], optimizers=["adamw"], epochs=["best"], **out(11)),
        plots.plot_exponents(expo_all, models=["gru"], optimizers=["adamw"], epoch="best", **out(12)),
        plots.plot_memory(env, _with_keys(pd.DataFrame({"lag": LAGS, "m_mem": f, "m_mem_abs": f})),
                          models=["gru"], optimizers=["adamw"], **out(13)),
    ]
    assert len(figs) == len(FIGURES)
    for i in range(len(figs)):
        assert (tmp_path / f"{i}.png").stat().st_size > 1000 and (tmp_path / f"{i}.pdf").exists()
