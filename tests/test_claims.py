"""Claim metrics of issue 8 on analytic envelopes and hand-made metric tables (learnwin.claims)."""

import numpy as np
import pandas as pd
import pytest

from learnwin.claims import claim_verdicts, envelope_shape

LAGS = np.arange(2, 62, 2, dtype=float)


def test_envelope_shape_exponential_and_power():
    tau, decel = envelope_shape(LAGS, 3.0 * np.exp(-LAGS / 12.5))
    assert tau == pytest.approx(12.5, rel=1e-10)
    assert decel == pytest.approx(1.0, rel=1e-10)
    tau_p, decel_p = envelope_shape(LAGS, LAGS ** -1.5)
    # log f = -1.5 log l: the slope falls like 1/l, so the late half is several times flatter
    assert decel_p < 0.3
    assert tau_p > 0
    assert envelope_shape(LAGS, np.ones_like(LAGS))[0] == np.inf  # a flat envelope never decays


def _metrics(changes):
    base = dict(val_r2=0.5, law="exp", tau_env=10.0, decel=1.0, tau_iqr=1.0, H_low=4.0, H_mid=10.0,
                H_max=16.0, accel=1.0, capped=False, slope=1.0, slope_r2=0.9)
    rows = []
    for opt in ["adamw", "sgd"]:
        for model in ["const", "shared", "diag", "gru", "lstm"]:
            rows.append({"model": model, "optimizer": opt, **base, **changes.get((opt, model), {})})
    return pd.DataFrame(rows)


def test_verdicts_count_each_check():
    slow = dict(tau_env=30.0, decel=0.5, accel=2.0, tau_iqr=5.0)
    m = _metrics({("adamw", "diag"): slow, ("adamw", "gru"): slow, ("adamw", "lstm"): dict(tau_env=30.0),
                  ("sgd", "const"): dict(slope=0.5)})
    v = claim_verdicts(m).set_index("claim")
    assert (v.loc["a", "holds"], v.loc["a", "of"]) == (5, 6)  # lstm is slower but does not decelerate
    assert (v.loc["b", "holds"], v.loc["b", "of"]) == (4, 5)  # const/shared log-linear, lstm too
    assert (v.loc["c", "holds"], v.loc["c", "of"]) == (5, 10)  # diag, gru: both; lstm: tau only
    assert (v.loc["d", "holds"], v.loc["d", "of"]) == (9, 10)
