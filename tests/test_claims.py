"""The claim checks of docs/method.md §8b (learnwin.stats.claims) on curves and tables of known answer."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from learnwin.infra import io, layout, optimizers
from learnwin.report import findings
from learnwin.stats.claims import (
    COLUMNS,
    KEY,
    claim_scores,
    claim_table,
    claim_words,
    counted_rows,
    decay_length,
    envelope_weights,
    growth_law,
    held_counts,
    holds_words,
    inputs,
    learned_gates,
    log_tau_iqr,
    to_markdown,
    verdict_word,
    verdicts,
)
from learnwin.stats.decay import PRIMARY, fit_envelopes

LAGS = np.arange(2, 62, 2, dtype=float)
N = 2.0 ** np.arange(4, 17)  # the default N grid, 16 .. 65536
CURVES = {
    "power": LAGS ** -1.5,  # fails the old "slower than const" rule (tau_env 15 < const's 19.5)
    "exp_floor": np.exp(-LAGS / 8) + 1e-3,  # passed the old "decel < 0.8" rule
    "mixture": 0.7 * np.exp(-LAGS / 4) + 0.3 * np.exp(-LAGS / 15),  # passed it too
}


def _decay(curve: str, model: str = "gru", seeds=(1, 2, 3)) -> pd.DataFrame:
    """learnwin.stats.decay fits of one curve with 3 % seeded log-normal noise per seed."""
    env = pd.concat([pd.DataFrame(dict(
        model=model, optimizer="adamw", epoch="best", seed=s, transport="diagonal", lag=LAGS,
        f=CURVES[curve] * np.exp(0.03 * np.random.default_rng(s).standard_normal(LAGS.size))))
        for s in seeds])
    return fit_envelopes(env, min_points=8, trim=0, bootstrap=20, block=5, seed=0)


def _verdicts(a=None, b=None, c=None, d=None, transport="diagonal"):
    """verdicts() of the given per-seed tables (empty where not given), measured under ``transport``
    and its primary functional unless the tables say otherwise."""
    empty = dict(a=["model", "optimizer", "seed", "w_power", "w_tempered", "w_exp", "law", "class"],
                 b=["model", "optimizer", "seed", "noise", "growth", "censored", "c_power"],
                 c=["model", "optimizer", "seed", "log_tau_iqr", "tau_env", "val_r2"],
                 d=["model", "optimizer", "seed", "noise", "slope", "slope_lo", "slope_hi"])
    given = dict(a=a, b=b, c=c, d=d)
    scope = dict(transport=transport, functional=PRIMARY[transport])
    return verdicts({k: (given[k] if given[k] is not None else pd.DataFrame(columns=cols)).pipe(
        lambda t: t.assign(**{c: v for c, v in scope.items() if c not in t.columns})) for k, cols in empty.items()})


def test_envelope_class_from_real_akaike_weights():
    w = {curve: envelope_weights(_decay(curve)) for curve in CURVES}
    assert (w["power"]["class"] == "power-law-like").all() and (w["power"]["w_power"] > 0.99).all()
    assert (w["power"]["law"] == "power").all()
    assert (w["exp_floor"]["class"] == "exponential").all() and (w["exp_floor"]["w_exp"] > 0.99).all()
    assert (w["exp_floor"]["law"] == "exp_floor").all()
    # the mixture selects the tempered law, which counts with the exponential family
    assert (w["mixture"]["class"] == "exponential").all() and (w["mixture"]["w_tempered"] > 0.99).all()
    for t in w.values():  # the three family weights are the Akaike weights: they sum to 1
        assert np.allclose(t[["w_power", "w_tempered", "w_exp"]].sum(axis=1), 1.0)

    v = _verdicts(a=pd.concat([w["power"], envelope_weights(_decay("mixture", "const"))]))
    v = v.set_index("model")
    assert (v.loc["gru", "verdict"], v.loc["gru", "k"], v.loc["gru", "n"], v.loc["gru", "holds"]) == \
        ("power-law-like", 3, 3, True)
    assert (v.loc["const", "verdict"], v.loc["const", "k"], v.loc["const", "holds"]) == ("exponential", 3, True)
    assert v.loc["gru", "estimate"] == pytest.approx(w["power"]["w_power"].mean())
    miss = _verdicts(a=w["mixture"]).iloc[0]  # the mixture does not make a gru power-law-like
    assert (miss["verdict"], miss["k"], miss["n"], miss["holds"]) == ("exponential", 0, 3, False)


def test_envelope_weights_one_power_seed_of_two_is_split():
    a = pd.concat([envelope_weights(_decay("power", seeds=(1,))), envelope_weights(_decay("exp_floor", seeds=(2,)))])
    row = _verdicts(a=a).iloc[0]
    assert (row["verdict"], row["k"], row["n"], row["holds"]) == ("split", 1, 2, False)
    assert row["spread"] == pytest.approx(np.std(a["w_power"], ddof=1))


def test_growth_law_logarithmic_and_power():
    log = growth_law(N, 4 + 5 * np.log(N), lag_max=100)
    assert log["growth"] == "logarithmic" and log["b_log"] == pytest.approx(5.0) and log["sse_log"] < 1e-20
    power = growth_law(N, 0.5 * N ** 0.4, lag_max=100)
    assert power["growth"] == "power" and power["c_power"] == pytest.approx(0.4, abs=1e-6)
    assert power["sse_power"] < 1e-10 < power["sse_log"] and power["aic_power"] < power["aic_log"]
    # H_N on the lag grid (step 2) from an exponential envelope, N* = 10 f^-2, f = exp(-l / 10):
    # an exact line in log N, where the old accel was 1 (a coin flip against its "<= 1")
    lag = np.arange(2, 62, 2)
    H_exp = np.array([lag[10 * np.exp(lag / 5) <= n].max(initial=0) for n in N])
    assert growth_law(N, H_exp, lag_max=60)["growth"] == "logarithmic"
    # and from a power-law envelope f = l^-1 on lags 1..199: H_N = sqrt(N / 10)
    lag = np.arange(1, 200)
    H_pow = np.array([lag[10 * lag ** 2.0 <= n].max(initial=0) for n in N])
    fit = growth_law(N, H_pow, lag_max=199)
    assert fit["growth"] == "power" and fit["c_power"] == pytest.approx(0.5, abs=0.02)


def test_growth_law_censored_flat_and_too_few():
    stuck = growth_law(N, np.minimum(2 ** np.arange(13), 60), lag_max=60)  # 1, 2, 4 .. 32, then 60
    assert (stuck["growth"], stuck["censored"], stuck["n_points"]) == ("power", True, 6)
    at_max = growth_law(N, np.r_[[0] * 9, 10, 30, 60, 60], lag_max=60)
    assert (at_max["growth"], at_max["censored"], at_max["n_points"]) == ("censored", True, 2)
    few = growth_law(N, np.r_[[0] * 11, 10, 30], lag_max=60)
    assert (few["growth"], few["censored"]) == ("too few points", False)
    flat = growth_law(N, np.r_[[0] * 3, [20] * 10], lag_max=60)
    assert (flat["growth"], flat["n_points"]) == ("flat", 10)


def test_growth_verdicts_count_seeds_per_noise():
    b = pd.DataFrame(dict(model="const", optimizer="adamw", seed=[1, 2, 3, 1, 2, 3],
                          noise=["per_lag"] * 3 + ["pooled"] * 3, censored=[False, False, True] * 2,
                          growth=["logarithmic", "logarithmic", "censored", "power", "power", "censored"],
                          c_power=[0.1, 0.2, np.nan, 0.5, 0.6, np.nan]))
    v = _verdicts(b=b).set_index("noise")
    assert (v.loc["per_lag", "verdict"], v.loc["per_lag", "k"], v.loc["per_lag", "n"]) == ("logarithmic", 2, 3)
    assert v.loc["per_lag", "holds"] and not v.loc["pooled", "holds"]
    assert (v.loc["pooled", "verdict"], v.loc["pooled", "k"]) == ("power", 0)
    assert v.loc["pooled", "estimate"] == pytest.approx(0.55)
    assert claim_scores(_verdicts(b=b)) == {"b:per_lag": "1/1", "b:pooled": "0/1"}


def test_a_cell_without_expectation_is_reported_not_scored(fresh_registry):
    """A registered cell with no expected class or growth law (tests/toy_cell.py) gets expected
    "none": its verdict is in the table, and the scores count the other cells only."""
    fresh_registry.load_cells("toy_cell")
    b = pd.DataFrame(dict(model=["const"] * 3 + ["toy"] * 3, optimizer="adamw", seed=[1, 2, 3] * 2,
                          noise="per_lag", censored=False, c_power=np.nan,
                          growth=["logarithmic", "logarithmic", "power", "logarithmic", "logarithmic", "power"]))
    v = _verdicts(b=b).set_index("model")
    assert (v.loc["toy", "expected"], v.loc["toy", "verdict"], v.loc["toy", "k"]) == ("none", "logarithmic", 0)
    assert v.loc["const", "holds"] and not v.loc["toy", "holds"]
    assert claim_scores(v.reset_index()) == {"b:per_lag": "1/1"}  # without the toy's row: 1/2
    table = v.reset_index()
    assert list(holds_words(table)) == ["yes", "not scored"]  # findings.md's holds column
    toy_only = table[table["model"] == "toy"]
    assert findings.summary_sentences(toy_only)[1] == ("(b) Growth of H_N in N: not scored, no expectation or no "
                                                       "data for these cells.")
    assert findings.details(toy_only)[0][1].values.tolist() == [["toy", "adamw", "*logarithmic*"],
                                                                 ["rows held", "", "–"]]
    assert findings.details(table)[0][1].values.tolist() == [["const", "adamw", "2/3 ✓ logarithmic"],
                                                              ["toy", "adamw", "*logarithmic*"],
                                                              ["rows held", "", "1/1"]]
    html = findings.to_html(table)
    assert '<tr class="not-scored">' in html and '<tr class="holds">' in html


def test_log_tau_iqr_counts_infinite_units():
    tau = np.exp(np.r_[np.arange(7.0), np.inf])
    # order statistics 0..6, inf: q25 = 1.75, q75 = 5.25; dropping the inf unit would give 3.0
    assert log_tau_iqr(tau) == pytest.approx(3.5)
    assert log_tau_iqr(np.r_[tau, np.nan, np.nan]) == pytest.approx(3.5)  # NaN units left out
    assert log_tau_iqr(np.exp([0.0, 1.0, 2.0, np.inf])) == np.inf  # q75 lies between 2 and inf
    assert np.isnan(log_tau_iqr([np.inf] * 4)) and np.isnan(log_tau_iqr([np.nan]))
    assert log_tau_iqr(3.0 * tau) == pytest.approx(3.5)  # a spread of log tau: scale-free


def test_decay_length():
    assert decay_length(LAGS, 3.0 * np.exp(-LAGS / 12.5)) == pytest.approx(12.5, rel=1e-10)
    assert decay_length(LAGS, np.ones_like(LAGS)) == np.inf
    assert np.isnan(decay_length(LAGS, np.full(LAGS.size, np.nan)))


def test_optimizer_verdicts_pair_seeds(monkeypatch):
    c = pd.DataFrame(dict(model="gru", optimizer=["adamw"] * 3 + ["sgd"] * 3, seed=[1, 2, 3] * 2,
                          log_tau_iqr=[np.inf, 2.0, 1.0, 1.0, 1.0, 2.0], tau_env=[5.0, 6.0, np.nan, 9.0, 9.0, 9.0],
                          val_r2=[0.5, 0.6, 0.7, 0.1, 0.2, 0.3]))
    v = _verdicts(c=c).set_index("check")
    spread, env = v.loc["log tau_q IQR"], v.loc["tau_env"]
    assert (spread["k"], spread["n"], spread["holds"], spread["verdict"]) == (2, 3, True, "adamw broader")
    assert (env["k"], env["n"], env["holds"], env["verdict"]) == (0, 2, False, "adamw not slower")
    assert env["estimate"] == pytest.approx(5.5)
    assert "val R² AdamW 0.60 vs sgd 0.20" in spread["detail"]
    # with SGD + momentum as the plain-rate optimizer, (c) pairs AdamW with it instead
    v = _verdicts(c=c.replace({"optimizer": {"sgd": "sgd_momentum"}})).set_index("check")
    assert v.loc["tau_env", "optimizer"] == "adamw vs sgd_momentum"
    assert (v.loc["log tau_q IQR", "k"], v.loc["log tau_q IQR", "n"]) == (2, 3)
    # which optimizers are plain is the registry's word: a registered one pairs too, an adaptive one not
    with monkeypatch.context() as m:
        m.setitem(optimizers.OPTIMIZERS, "sgd_nesterov", optimizers.OPTIMIZERS["sgd_momentum"])
        v = _verdicts(c=c.replace({"optimizer": {"sgd": "sgd_nesterov"}})).set_index("check")
        assert v.loc["tau_env", "optimizer"] == "adamw vs sgd_nesterov"
    assert _verdicts(c=c.replace({"optimizer": {"sgd": "rmsprop"}})).empty


def test_master_ci_within_band_per_noise():
    """docs/method.md §8b: a seed counts when its slope CI lies inside 1 ± 0.5; a CI that covers 1
    but leaves the band is undecided, one that excludes 1 outside it excludes 1."""
    d = pd.DataFrame(dict(model="diag", optimizer="sgd", seed=[1, 2, 3] * 3,
                          noise=["per_lag"] * 3 + ["pooled"] * 3 + ["wide"] * 3,
                          slope=[0.3, 0.35, 0.9, 1.0, 1.05, 0.5, 1.0, 1.1, 1.3],
                          slope_lo=[0.2, 0.3, 0.7, 0.9, 0.95, np.nan, 0.3, 0.4, 1.2],
                          slope_hi=[0.4, 0.4, 1.1, 1.1, 1.15, np.nan, 1.7, 1.8, 1.4]))
    v = _verdicts(d=d).set_index("noise")
    assert (v.loc["per_lag", "k"], v.loc["per_lag", "n"], v.loc["per_lag", "verdict"]) == (1, 3, "excludes 1")
    assert not v.loc["per_lag", "holds"]
    assert (v.loc["pooled", "k"], v.loc["pooled", "n"], v.loc["pooled", "verdict"]) == (2, 2, "within band")
    assert v.loc["pooled", "holds"] and v.loc["pooled", "estimate"] == pytest.approx(1.025)
    assert "1.00 [0.90, 1.10]" in v.loc["pooled", "detail"]
    # covering 1 is not support: two seeds cover it with intervals wider than the band
    assert (v.loc["wide", "k"], v.loc["wide", "verdict"], v.loc["wide", "holds"]) == (1, "undecided", False)
    md = to_markdown(_verdicts(d=d))
    assert "| d | master slope CI | diag | sgd | pooled | diagonal | gamma | within band | within band | 2/2 | yes |" in md


def test_claim_table_on_synthetic_artifacts(tmp_path):
    """The claims rule's library function on a run built so that each verdict is known, both
    ways (tests/synthetic_claims.py): every row, its k and n, and the per-seed lists."""
    from synthetic_claims import FUNCTIONAL, TRANSPORT, expected_claims, write_claim_run

    spec = write_claim_run(tmp_path)
    results = tmp_path / "results"
    files = inputs(results, spec["models"], spec["optimizers"], spec["seeds"], "best")
    assert all(Path(p).is_file() for paths in files.values() for p in paths)
    table = claim_table(files, "best")
    got = table.set_index(KEY)[["verdict", "k", "n", "holds"]]
    want = expected_claims().set_index(got.index.names)[got.columns]
    pd.testing.assert_frame_equal(got.sort_index(), want.sort_index(), check_dtype=False)
    assert table["holds"].any() and not table["holds"].all()
    assert (table["seeds"].map(len) == table["n"]).all() and (table["values"].map(len) == table["n"]).all()
    # (d) pooled gru/sgd: the slopes of master_row, seed by seed
    d = table.set_index(KEY).loc[("d", "master slope CI", "gru", "sgd", "pooled", TRANSPORT, FUNCTIONAL)]
    assert d["seeds"] == [1, 2] and d["values"] == pytest.approx([1.02, 1.7])
    assert d["estimate"] == pytest.approx(1.36)
    # the rule's artifact: list columns that pandas reads back as they were written
    stored = io.read_table(layout.under(results, layout.CLAIMS["parquet"]), "claims")
    assert list(stored.columns) == COLUMNS and len(stored) == len(table)
    assert list(stored.set_index(KEY).loc[("d", "master slope CI", "gru", "sgd", "pooled", TRANSPORT, FUNCTIONAL), "seeds"]) == [1, 2]


def test_seed_agreement_gives_the_flags_each_row_counts(tmp_path):
    """Per verdict row of the synthetic run, the seeds' agreement flags: as many as n, as many True
    as k, in the row's seed order; (d) pooled gru/sgd: seed 1's slope within the band, seed 2's
    1.7 outside it."""
    from synthetic_claims import FUNCTIONAL, TRANSPORT, write_claim_run

    from learnwin.stats.claims import measure, read_inputs, seed_agreement, verdicts

    spec = write_claim_run(tmp_path)
    per_seed = measure(read_inputs(inputs(tmp_path / "results", spec["models"], spec["optimizers"], spec["seeds"],
                                          "best")), "best")
    table, flags = verdicts(per_seed), seed_agreement(per_seed)
    by_row = flags.groupby(KEY, sort=False).agg(seeds=("seed", list), k=("agree", "sum"))
    rows = table[table["n"] > 0].set_index(KEY)
    assert len(by_row) == len(rows) and flags["agree"].any() and not flags["agree"].all()
    pd.testing.assert_series_equal(by_row["k"].reindex(rows.index), rows["k"], check_names=False, check_dtype=False)
    assert by_row["seeds"].reindex(rows.index).tolist() == rows["seeds"].tolist()
    d = flags.set_index(KEY).loc[[("d", "master slope CI", "gru", "sgd", "pooled", TRANSPORT, FUNCTIONAL)]]
    assert d["seed"].tolist() == [1, 2] and d["agree"].tolist() == [True, False]


def test_claim_table_names_a_missing_input(tmp_path):
    from synthetic_claims import write_claim_run

    spec = write_claim_run(tmp_path)
    files = inputs(tmp_path / "results", spec["models"], spec["optimizers"], spec["seeds"], "best")
    Path(files["units"][1]).unlink()
    with pytest.raises(io.ArtifactError, match="units.parquet: missing input artifact"):
        claim_table(files, "best")


@pytest.mark.parametrize("ks, n, word", [([4], 4, "holds"), ([4, 4], 4, "holds"), ([1], 4, "does not hold"),
                                         ([0, 1], 4, "does not hold"), ([2], 4, "holds in part"),
                                         ([4, 3], 4, "holds in part"), ([1, 2], 4, "holds in part"),
                                         ([0], 3, "does not hold"), ([1], 3, "holds in part")])
def test_verdict_words(ks, n, word):
    """docs/method.md §8b, "Verdict words": all rows on every machine, at most a quarter on every
    machine (1 of 4 is a quarter; 1 of 3 is more), else in part."""
    assert verdict_word(ks, n) == word


def test_the_verdict_words_count_the_learned_gates_on_each_primary_functional():
    """(a) and (b) count the cells the registry expects power-law-like (diag, gru, lstm), (c) gets a
    word per transport, and every claim counts each transport's primary functional only."""
    rows = [dict(claim=c, model=m, transport=t, functional=f, holds=(m != "const") != (f == "norm"))
            for c in "abcd" for m in ("const", "shared", "diag", "gru", "lstm")
            for t, f in (("diagonal", "gamma"), ("exact", "signal"), ("exact", "norm"))]
    table = pd.DataFrame(rows)
    assert learned_gates(["lstm", "const", "toy", "gru"]) == ["lstm", "gru"]
    a = counted_rows(table, "a")
    assert sorted(set(a["model"])) == ["diag", "gru", "lstm"] and set(a["functional"]) == {"gamma", "signal"}
    assert len(counted_rows(table, "d")) == 10 and len(counted_rows(table, "d", transport="exact")) == 5
    assert claim_words([table], "a") == {"": ("holds", [6], 6)}  # const's rows (which fail) are not counted
    assert claim_words([table], "d") == {"": ("holds in part", [8], 10)}
    assert claim_words([table, table.assign(holds=False)], "c") == {
        "diagonal": ("holds in part", [4, 0], 5), "exact": ("holds in part", [4, 0], 5)}
    assert claim_words([table.assign(holds=False)], "b") == {"": ("does not hold", [0], 6)}
    with pytest.raises(ValueError, match=r"claim \(a\).*same rows on every machine"):
        held_counts([table, table[table["model"] != "gru"]], "a")
    with pytest.raises(ValueError, match="at least one counted row"):
        verdict_word([0], 0)
