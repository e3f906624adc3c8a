"""The power analysis of the growth-law rule (docs/method.md §10d): the simulated protocol reads the
law it was given, the job's training is counted as the protocol trains, and the rule's verdicts
come out right on clear cases, both ways."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_helpers import experiment_script

from learnwin.infra import io, layout
from learnwin.stats import growth
from learnwin.stats.growth_power import (
    CUT_OFF,
    Design,
    Scenario,
    _job_sequences,
    calibrate,
    calibrated_noise,
    design_power,
    learning_budgets,
    pooled_spread,
    seed_pool,
    simulate_windows,
    verdict_rates,
)

ROOT = Path(__file__).resolve().parents[1]


def boxcox(N, sc: Scenario):
    """The scenario's law H(N) through its anchors, in closed form."""
    u = np.log(np.asarray(N, dtype=float) / sc.n_lo)
    span = np.log(sc.n_hi / sc.n_lo)
    shape = (lambda v: v) if sc.c == 0 else (lambda v: np.expm1(sc.c * v) / sc.c)
    return sc.h_lo + (sc.h_hi - sc.h_lo) * shape(u) / shape(span)


@pytest.mark.parametrize("c", [0.0, 0.18, -0.2])
def test_the_learning_budget_inverts_the_law(c):
    sc = Scenario("s", c, h_lo=4.0, h_hi=48.0)
    lags = np.arange(4, 61, 4, dtype=float)
    log_n = sc.log_budget(lags)
    finite = np.isfinite(log_n)
    np.testing.assert_allclose(boxcox(np.exp(log_n[finite]), sc), lags[finite], rtol=1e-12)
    if c < 0:  # a saturating law has a ceiling: the lags past it are never learned
        ceiling = sc.h_lo - (sc.h_hi - sc.h_lo) / np.expm1(c * np.log(sc.n_hi / sc.n_lo))
        assert not finite[lags > ceiling].any() and finite[lags < ceiling].all()


def test_a_noiseless_window_is_the_largest_grid_lag_below_the_law():
    sc = Scenario("log N", 0.0, h_lo=4.0, h_hi=48.0)
    design = Design(lags=tuple(range(4, 65, 4)), n_max=2**16)
    log_nhat = learning_budgets(np.random.default_rng(0), sc, design.lags, 2, sigma_lag=0.0, sigma_seed=0.0)
    window, _ = simulate_windows(log_nhat, design)
    seed0 = window[window["seed"] == 0]
    law = boxcox(seed0["N"], sc)
    expected = np.clip(np.floor(law / 4) * 4, 0, 64)
    np.testing.assert_array_equal(seed0["H"], expected)
    np.testing.assert_array_equal(seed0["left_censored"], expected == 0)
    np.testing.assert_array_equal(seed0["censored"], expected == 64)
    assert seed0["N"].max() == 2**15  # the last budget only confirms


def test_a_late_lag_stops_the_learned_prefix():
    design = Design(lags=(4, 8, 12, 16), n_max=2**10, n_min=64)  # budgets 64 .. 1024, read to 512
    log_nhat = np.log([[64, 64, 700, 64]])  # lag 12 learned from 1024 only: never within the read budgets
    window, _ = simulate_windows(log_nhat, design)
    assert window["H"].tolist() == [8, 8, 8, 8]
    assert not window["censored"].any()


def test_the_job_trains_each_lag_to_its_pair_and_stops_at_the_frontier():
    budgets = np.array([64.0, 128, 256, 512])  # indices 0..3; a pair needs onset <= 2
    onset = np.array([[0, 1, 2, 3, 4, 0]])  # lags 4 and 5 have no pair; lag 6 after them
    # per lag: to the pair's second budget (128, 256, 512), then N_max for the pairless lags
    assert _job_sequences(onset, budgets, frontier_stop=0)[0] == 512 + 128 + 256 + 512 + 512 + 512 + 128
    assert _job_sequences(onset, budgets, frontier_stop=1)[0] == 512 + 128 + 256 + 512 + 512
    assert _job_sequences(onset, budgets, frontier_stop=2)[0] == 512 + 128 + 256 + 512 + 512 + 512
    no_frontier = np.array([[0, 1, 3, 0]])  # one pairless lag, then a learned one: frontier 2 runs all
    assert _job_sequences(no_frontier, budgets, frontier_stop=2)[0] == 512 + 128 + 256 + 512 + 128


def test_the_rule_names_each_clear_law_and_not_the_other():
    """Small noise, wide budgets: the rule says log N of a log-N pool and power of a power pool (the
    check can fail: each pool's verdict is tested against the other law too)."""
    rng = np.random.default_rng(3)
    design = Design(lags=tuple(range(4, 129, 4)), n_max=2**18)
    shares = {}
    for sc in (Scenario("log N", 0.0, 4.0, 48.0), Scenario("power", 0.4, 4.0, 48.0)):
        pool = seed_pool(rng, sc, design, 12, sigma_lag=0.1, sigma_seed=0.1)
        shares[sc.name] = verdict_rates(pool, 6, groups=200, rng=rng)
    assert shares["log N"].get(growth.LOG_N, 0) >= 0.9 and shares["log N"].get(growth.POWER, 0) == 0
    assert shares["power"].get(growth.POWER, 0) >= 0.9 and shares["power"].get(growth.LOG_N, 0) == 0


def test_a_group_with_a_cut_off_seed_decides_nothing():
    pool = pd.DataFrame(dict(c=[0.0, 0.01, -0.01, 0.0], cut_off=[False, False, False, True]))
    shares = verdict_rates(pool, 4, groups=5, rng=np.random.default_rng(0))
    assert shares.to_dict() == {CUT_OFF: 1.0}
    shares = verdict_rates(pool.iloc[:3], 3, groups=5, rng=np.random.default_rng(0))
    assert shares.to_dict() == {growth.LOG_N: 1.0}


def test_pooled_spread_weights_each_cell_by_its_degrees_of_freedom():
    a, b = [0.1, 0.3, 0.5], [0.0, 0.4]
    table = pd.DataFrame(dict(model=["a"] * 3 + ["b"] * 2, c=a + b))
    expected = np.sqrt((2 * np.var(a, ddof=1) + 1 * np.var(b, ddof=1)) / 3)
    assert pooled_spread(table) == pytest.approx(expected, rel=1e-12)


def test_calibrate_interpolates_and_refuses_what_it_cannot_bracket():
    assert calibrate(0.15, [0.1, 0.2], [0.2, 0.6]) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="outside"):
        calibrate(0.25, [0.1, 0.2], [0.2, 0.6])
    with pytest.raises(ValueError, match="increase"):
        calibrate(0.15, [0.2, 0.1], [0.2, 0.6])


def _power_command():
    return experiment_script("growth_power")


def test_the_committed_power_table_is_the_one_in_the_method_and_chose_the_runs_design():
    """docs/method.md §10d prints the committed table as the command renders it, and the T 256
    config runs the design its rule chooses (the cheapest with power >= 0.8 and wrong laws <= 5 %)."""
    cmd = _power_command()
    table = io.read_table(ROOT / layout.GROWTH_POWER, "growth_power")
    assert cmd.markdown(table) in (ROOT / "docs" / "method.md").read_text()
    best = cmd.choose(table)
    cfg = yaml.safe_load((ROOT / "config" / "recovery-growth-T256.yaml").read_text())["recovery"]
    assert cfg["budgets"][-1] == best["n_max"] and len(cfg["seeds"]) == best["seeds"]
    assert cfg["budgets"] == [64 * 2**k for k in range(len(cfg["budgets"]))]
    assert cfg["lags"] == list(cmd.LAGS_T256)


def test_the_design_rule_refuses_a_table_without_power():
    cmd = _power_command()
    table = io.read_table(ROOT / layout.GROWTH_POWER, "growth_power")
    weak = table.assign(p_true=table["p_true"].clip(upper=0.79))
    with pytest.raises(SystemExit, match="no design"):
        cmd.choose(weak)
    wrong = table.assign(p_wrong=0.06)
    with pytest.raises(SystemExit, match="no design"):
        cmd.choose(wrong)


def test_the_power_a_design_had_is_the_tables_and_moves_with_the_design():
    """design_power (the power an undecided cell's page states, docs/method.md §10d) through the fast
    anchors at the T 256 design reproduces the committed table's P(true law) within its Monte Carlo
    error, and a design that cannot decide (5 seeds, N_max 2^17; a slow cell) has little power."""
    table = io.read_table(ROOT / layout.GROWTH_POWER, "growth_power")
    sigma = calibrated_noise(table)
    assert 0.35 < sigma < 0.45
    cmd = _power_command()
    t256 = Design(lags=cmd.LAGS_T256, n_max=2**18, frontier_stop=1)
    power = design_power(4.0, 48.0, t256, 8, sigma_lag=sigma, pool=400, groups=1000)
    calibrated = table[(table["noise"] == "calibrated") & (table["n_max"] == 2**18) & (table["seeds"] == 8)]
    for law, scenario in ((growth.LOG_N, "log N"), (growth.POWER, "power c 0.18")):
        expected = calibrated.loc[calibrated["scenario"] == scenario, "p_true"].iloc[0]
        assert abs(power[law] - expected) < 0.12, (law, power[law], expected)
    weak = design_power(4.0, 48.0, Design(lags=cmd.LAGS_T256, n_max=2**17), 5, sigma_lag=sigma, pool=150,
                        groups=1000)
    assert weak[growth.LOG_N] < 0.5 and weak[growth.POWER] < 0.4
    slow = design_power(4.0, 14.0, t256, 8, sigma_lag=sigma, pool=150, groups=1000)
    assert slow[growth.LOG_N] < 0.45
