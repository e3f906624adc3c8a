"""End to end: `snakemake recovery` under the dataset protocol (docs/method.md §10) on the smoke
config, on a copy of the session's smoke run (the prediction side needs its snapshot statistics)."""

import shutil

import numpy as np
import pytest
from workflow_helpers import snakemake

from learnwin.infra import layout
from learnwin.infra.io import read_table

pytestmark = pytest.mark.slow

MODELS, SEEDS, N, THRESHOLDS, LAGS = 3, 2, [64, 512], [0.1, 0.2, 0.3], [1, 3, 5, 7, 9, 11]
# the budget protocol is the default; a fixed-gate cell, a learned-gate cell and the LSTM
DATASET = ("--config", "recovery={protocol: dataset, models: [const, gru, lstm]}")


@pytest.fixture(scope="module")
def recovery_run(smoke_run, tmp_path_factory):
    work = tmp_path_factory.mktemp("recovery") / "w"
    shutil.copytree(smoke_run, work, symlinks=True)
    snakemake(work, "--cores", "2", "--configfile", "config/smoke.yaml", *DATASET, "--", "recovery")
    return work


def check_recovery_outputs(work) -> None:
    """What the smoke config's recovery tables must hold (its sizes are in the constants above)."""
    table = {name: read_table(work / path, "seed_growth" if name in layout.SEED_GROWTH else "recovery")
             for name, path in layout.RECOVERY.items()}
    w = table["window"]
    main = w[w["arm"] == "main"]
    assert len(main) == MODELS * SEEDS * len(N) * len(THRESHOLDS)
    assert ((main["H"] >= 0) & (main["H"] <= LAGS[-1])).all()
    assert (main.loc[main["censored"], "H"] == LAGS[-1]).all()
    # H grows as the threshold falls (same trainings, a lower bar), when the lags are monotone
    wide = main.pivot_table(index=["model", "seed", "N"], columns="threshold", values="H_grid")
    mono = table["monotonicity"]
    assert len(mono) == MODELS * 1 * 1 * len(THRESHOLDS)  # first seed, validate_n_train [64]
    assert (mono.loc[mono["holes"] == 0, "agrees"]).all()  # bisection is exact where monotone
    assert (wide.notna().all(axis=None))
    steps = table["steps_check"]
    assert len(steps) == MODELS * 1 * len(THRESHOLDS) and (steps["steps_double"] == 2 * steps["steps_main"]).all()
    # every training is paired: one control per (model, seed, N) of the main arm
    s = table["scores"]
    ctrl = s[(s["arm"] == "main") & (s["target"] == "control")]
    assert len(ctrl) == MODELS * SEEDS * len(N) * len(LAGS)
    g = table["growth"]
    assert len(g) == MODELS * len(THRESHOLDS) and set(g["verdict"]) == {"too few seeds"}  # two N decide nothing
    assert np.isnan(g["c_mean"]).all()  # a seed's Box-Cox exponent needs four budgets
    # the prediction from the ground truth's own networks: both networks of every (model, seed),
    # two primary variants (trained networks) per threshold beside the secondary ones
    net = table["network_H_N"]
    assert set(net["epoch"]) == {"init", "trained"} and net["model"].nunique() == MODELS
    assert (net.drop_duplicates(["model", "epoch", "transport", "noise"])["n_seeds"] == SEEDS).all()
    sc = table["prediction_scores"]
    assert set(sc["networks"]) == {"init", "trained", "main_run"}
    primary = sc[sc["primary"]]
    assert len(primary) == 2 * len(THRESHOLDS) and set(primary["networks"]) == {"trained"}
    assert set(zip(primary["transport"], primary["noise"])) == {("diagonal", "per_lag"), ("exact", "pooled")}
    for name in ("recovery_window", "recovery_scores"):
        assert (work / layout.figure(name, "png")).stat().st_size > 10_000


def test_recovery_smoke(recovery_run):
    check_recovery_outputs(recovery_run)
