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


def test_claim_metrics_on_synthetic_artifacts(tmp_path):
    """Known envelopes, unit time scales and master rows (tests/synthetic.py) read back."""
    from learnwin.claims import claim_metrics
    from learnwin.io import write_table
    from synthetic import MODELS, OPTIMIZERS, SEEDS, tau_of, write_artifacts

    tables = write_artifacts(tmp_path)
    runs = tables["curve"].drop_duplicates(["model", "optimizer", "seed"])[["model", "optimizer", "seed"]]
    write_table(runs.assign(epoch="best", val_r2=0.5 + 0.1 * runs["seed"]), tmp_path / "results/summary.parquet",
                "summary")
    m = claim_metrics(tmp_path / "results", MODELS, OPTIMIZERS, SEEDS).set_index(["optimizer", "model"])
    for opt in OPTIMIZERS:
        for model in MODELS:
            taus = [tau_of(model, s, "best") for s in SEEDS]
            row = m.loc[(opt, model)]
            assert min(taus) < row["tau_env"] < max(taus)  # the seed mean of two exponentials
            # unit taus are tau * (0.5, 1.0, 1.5) and inf: IQR over the finite ones is tau / 2
            assert row["tau_iqr"] == pytest.approx(np.mean(taus) / 2, rel=1e-5)
            assert row["val_r2"] == pytest.approx(0.5 + 0.1 * np.mean(SEEDS))
            assert (row["slope"], row["slope_r2"], row["law"]) == (1.0, pytest.approx(0.98), "exp")
