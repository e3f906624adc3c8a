"""eps calibrated against a measured window (docs/method.md §7): analytic SNR curves.

With snr(l, N) = c sqrt(N) / l, the window at threshold eps is the largest grid lag below
c sqrt(N) / eps, so a measured window fixes eps to an interval known in closed form.
"""

import numpy as np
import pandas as pd
import pytest

from learnwin.stats.calibrate import calibrate, out_of_sample, window_at

LAGS = np.arange(2, 66, 2)


def test_window_at_threshold():
    snr = 100.0 / LAGS  # detected (snr > eps) for l < 100 / eps
    assert window_at(snr, LAGS, [10.0, 5.0, 200.0]).tolist() == [8, 18, 0]
    assert window_at(np.where(LAGS == 8, np.nan, snr), LAGS, 10.0).tolist() == [6]


def test_calibrate_recovers_the_interval_of_thresholds():
    snr = 100.0 / LAGS
    eps, lo, hi = calibrate(snr, LAGS, h_emp=16)
    # H = 16 needs snr(16) = 6.25 > eps >= snr(18) = 5.56
    assert (lo, hi) == pytest.approx((100 / 18, 100 / 16))
    assert eps == pytest.approx(np.sqrt(lo * hi))
    assert window_at(snr, LAGS, eps)[0] == 16
    # a measured window between two grid lags: the closest reachable one wins
    assert window_at(snr, LAGS, calibrate(snr, LAGS, h_emp=17)[0])[0] in (16, 18)
    # beyond the grid: every lag detected
    assert window_at(snr, LAGS, calibrate(snr, LAGS, h_emp=100)[0])[0] == 64


def _windows(c: dict, noise: str) -> pd.DataFrame:
    rows = []
    for model, cm in c.items():
        for seed in (1, 2):
            for N in (64, 1024):
                rows += [dict(model=model, optimizer="adamw", seed=seed, noise=noise, N=N, lag=int(l),
                              snr=cm * np.sqrt(N) / l) for l in LAGS]
    return pd.DataFrame(rows)


def test_out_of_sample_prediction_follows_the_calibrated_threshold():
    c = {"const": 40.0, "gru": 80.0, "lstm": 160.0}
    eps_true = 50.0  # windows 6-64: none saturated at the calibration point (gru, N = 1024: 50)
    window = _windows(c, "pooled")
    measured = pd.DataFrame([dict(model=m, optimizer="adamw", seed=s, N=N,
                                  H_N_emp=int(window_at(cm * np.sqrt(N) / LAGS, LAGS, eps_true)[0]))
                             for m, cm in c.items() for s in (1, 2) for N in (64, 1024)])
    res = out_of_sample(window, measured, model="gru", N=1024, noise="pooled")
    t = res["table"].set_index(["model", "N"])
    assert res["eps"] == pytest.approx(np.sqrt(80 * 32 / 52 * 80 * 32 / 50))  # middle of (snr(52), snr(50)]
    assert ((t["predicted"] - t["measured"]).abs() <= 2).all()  # within one grid step everywhere
    assert res["spearman"] == pytest.approx(1.0) and res["n_points"] == 5 and res["same_order"]
    assert res["order_measured"] == "lstm>gru>const"
    # measured windows that fall where the SNR rises: the check fails
    flipped = measured.assign(H_N_emp=64 - measured["H_N_emp"])
    bad = out_of_sample(window, flipped, model="gru", N=1024, noise="pooled")
    assert bad["spearman"] < 0 and not bad["same_order"]
