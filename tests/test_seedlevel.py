"""The pre-registered seed-level tests of docs/method.md §10b ("Pre-registered: the seed as the
unit") on synthetic seeds whose answer is known: the t-interval, claim (d)'s verdict per model and
overall (consistent, differs below or above, undecided, too few seeds; holds, fails, mixed), the
fixed- against learned-gate comparison of claim (b) (holds, reversed, not supported; each
criterion made to fail alone; Holm's adjustment deciding), and `groundtruth_tables.py
--seed-level` end to end on a results folder of known slopes."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from workflow_helpers import experiment_script

from learnwin.infra import io, layout
from learnwin.report.formatting import table_after
from learnwin.stats import seedlevel as sl
from learnwin.stats.claims import TRUTH_WORDS

GROUPS = {"const": "logarithmic", "shared": "logarithmic", "diag": "power", "gru": "power", "lstm": "power",
          "lru": None}
DEV = np.array([-0.2, -0.1, 0.0, 0.1, 0.2])  # five seeds' deviations from a model's mean (sd 0.158)
SEEDS = (6203, 7307, 8419, 9521, 10631)


def slopes(per_model: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([dict(model=m, seed=s, slope=v) for m, vals in per_model.items() for s, v in zip(SEEDS, vals)])


KAPPA = 2.0  # band: d within ±1


@pytest.mark.parametrize("d, verdict", [
    ([-0.1, 0.0, 0.1], sl.CONSISTENT),  # interval ±0.25 inside the band
    ([0.3, 0.4, 0.5], sl.CONSISTENT),  # excludes 0 but inside the band: not "differs"
    ([-1.7, -1.6, -1.5], sl.BELOW),  # excludes 0, outside the band
    ([-1.2, -0.9, -0.6], sl.BELOW),  # only the band's lower edge crossed: no longer consistent
    ([1.5, 1.6, 1.7], sl.ABOVE),
    ([-3.0, 0.0, 3.0], sl.UNDECIDED),  # neither inside the band nor excluding 0
    ([-0.9, 0.0, 0.9], sl.UNDECIDED),  # centred, but the interval (±2.24) leaves the band: one criterion fails
    ([np.nan, 0.0, 0.1, np.nan, np.nan], sl.TOO_FEW),  # two finite slopes
])
def test_kappa_verdict_per_model(d, verdict):
    out = sl.kappa_test(slopes({"gru": [KAPPA + x for x in d]}), {"gru": KAPPA}).iloc[0]
    assert out["verdict"] == verdict and out["band"] == KAPPA / 2
    finite = np.asarray(d)[np.isfinite(d)]
    assert out["n_seeds"] == finite.size and out["d_mean"] == pytest.approx(finite.mean())
    assert out["s_mean"] == pytest.approx(KAPPA + finite.mean())
    if finite.size >= 2:
        half = stats.t.ppf(0.975, finite.size - 1) * finite.std(ddof=1) / np.sqrt(finite.size)
        assert (out["d_lo"], out["d_hi"]) == pytest.approx((finite.mean() - half, finite.mean() + half))


def test_kappa_verdict_edges_and_no_kappa():
    # an interval ending just inside the band's upper edge is consistent; just outside, it differs (above)
    half = stats.t.ppf(0.975, 2) * 0.1 / np.sqrt(3)
    for eps, verdict in ((-1e-9, sl.CONSISTENT), (1e-9, sl.ABOVE)):
        edge = sl.kappa_test(slopes({"gru": [KAPPA + 1 - half + eps + x for x in (-0.1, 0.0, 0.1)]}), {"gru": KAPPA})
        assert edge["d_hi"].item() == pytest.approx(1.0 + eps, abs=1e-12) and edge["verdict"].item() == verdict
    none = sl.kappa_test(slopes({"gru": [0.3, 0.4, 0.5], "lstm": [0.3, 0.4, 0.5]}), {"gru": np.nan})
    assert list(none["verdict"]) == [sl.NO_KAPPA, sl.NO_KAPPA]  # alpha <= 1, or no kappa for the model


@pytest.mark.parametrize("verdicts, overall", [
    ([sl.CONSISTENT] * 5, "holds"),
    ([sl.BELOW] * 4 + [sl.ABOVE], "fails"),
    ([sl.BELOW] * 4 + [sl.CONSISTENT], "mixed"),
    ([sl.CONSISTENT] * 4 + [sl.UNDECIDED], "mixed"),
    ([sl.BELOW] * 4 + [sl.TOO_FEW], "mixed"),
    ([], "mixed"),
])
def test_kappa_overall(verdicts, overall):
    assert sl.kappa_overall(verdicts) == overall


def growth_slopes(means: dict[str, float], spread: dict[str, float] | None = None) -> pd.DataFrame:
    """Five seeds per model: b = mean + spread * DEV rolled by the model's place in ``means`` (spread
    1 unless given), so that two models' paired seed differences vary."""
    spread = spread or {}
    return pd.DataFrame([dict(model=m, seed=s, b=mu + spread.get(m, 1.0) * d)
                         for k, (m, mu) in enumerate(means.items()) for s, d in zip(SEEDS, np.roll(DEV, k))])


FAR = {"const": 10.0, "shared": 12.0, "diag": 3.0, "gru": 4.0, "lstm": 2.0, "lru": 50.0}


def test_groups_hold():
    out = sl.group_test(growth_slopes(FAR), GROUPS)
    s = out["summary"]
    assert (s["fixed"], s["learned"]) == ("const, shared", "diag, gru, lstm")  # the LRU has no group
    assert (s["slope_fixed"], s["slope_learned"]) == pytest.approx((11.0, 3.0))
    assert (s["ordering"], s["p_perm_fixed_above"], s["n_assignments"]) == ("fixed above", 0.1, 10)
    assert (s["pairs_fixed_above"], s["n_pairs"], s["verdict"]) == (6, 6, sl.HOLDS)
    m = out["models"].set_index("model")
    half = stats.t.ppf(0.975, 4) * DEV.std(ddof=1) / np.sqrt(5)
    np.testing.assert_allclose(m.loc["gru", ["b_mean", "b_lo", "b_hi"]].to_numpy(float), [4 - 0, 4 - half, 4 + half])
    assert m.loc["const", "group_slope"] == 11.0 and m.loc["lstm", "group_slope"] == 3.0
    pair = out["pairs"].set_index(["fixed", "learned"]).loc[("const", "gru")]
    ref = stats.ttest_rel(10 + DEV, 4 + np.roll(DEV, 3), alternative="greater")  # paired by seed
    assert (pair["t"], pair["p_fixed_above"]) == pytest.approx((ref.statistic, ref.pvalue))


def test_groups_reversed():
    s = sl.group_test(growth_slopes({"const": 3.0, "shared": 2.0, "diag": 10.0, "gru": 11.0, "lstm": 12.0}),
                      GROUPS)["summary"]
    assert (s["ordering"], s["p_perm_learned_above"], s["p_perm_fixed_above"]) == ("learned above", 0.1, 1.0)
    assert (s["pairs_learned_above"], s["pairs_fixed_above"], s["verdict"]) == (6, 0, sl.REVERSED)


def test_groups_not_supported_when_one_pair_is_not_separated():
    """Criterion (2) fails alone: every fixed-gate mean above every learned-gate mean (p = 0.1), but
    DiagGate's seeds spread over SharedGate's: one pair of six not at Holm p < 0.05."""
    s = sl.group_test(growth_slopes({**FAR, "diag": 9.5}, {"diag": 20.0}), GROUPS)["summary"]
    assert (s["ordering"], s["p_perm_fixed_above"]) == ("fixed above", 0.1)
    assert s["pairs_fixed_above"] < 6 and s["verdict"] == sl.NOT_SUPPORTED


@pytest.mark.parametrize("gap, verdict", [(0.9, sl.NOT_SUPPORTED), (1.2, sl.HOLDS)])
def test_groups_holm_decides(gap, verdict):
    """DiagGate below both fixed-gate cells by ``gap``: both its pairs' raw paired p are below 0.05
    (0.034 and 0.042; 0.015 and 0.019), Holm's adjustment over the six pairs, the four others tiny,
    lifts them to max(2 min, max) (0.067 fails, 0.029 holds)."""
    out = sl.group_test(growth_slopes({"const": 10.0, "shared": 10.0, "diag": 10.0 - gap, "gru": 2.0, "lstm": 2.0},
                                      {"diag": 5.0}), GROUPS)
    diag = out["pairs"][out["pairs"]["learned"] == "diag"]
    p = diag["p_fixed_above"].to_numpy()
    assert (p < 0.05).all()
    np.testing.assert_allclose(diag["holm_fixed_above"], max(2 * p.min(), p.max()))
    assert out["summary"]["verdict"] == verdict


def test_groups_permutation_p_and_no_ordering():
    """const 10, shared 8, diag 9: SharedGate below DiagGate breaks the ordering; of the 10
    assignments two have a group difference at least the observed one ({const, diag}, {const, shared})."""
    s = sl.group_test(growth_slopes({"const": 10.0, "shared": 8.0, "diag": 9.0, "gru": 3.0, "lstm": 2.0}),
                      GROUPS)["summary"]
    assert (s["ordering"], s["p_perm_fixed_above"], s["p_perm_learned_above"]) == ("neither", 0.2, 0.9)
    assert s["verdict"] == sl.NOT_SUPPORTED


@pytest.mark.parametrize("cells", [{"lru": 5.0, "mingru": 3.0}, {"const": 10.0, "shared": 12.0, "lru": 2.0}])
def test_groups_need_a_cell_of_each_kind(cells):
    """Cells without the expectation (the linear cells) or one group alone: no groups, not a verdict
    on the lead (the fixed cells of the second case sit far above the LRU)."""
    s = sl.group_test(growth_slopes(cells), {**GROUPS, "mingru": None})["summary"]
    assert (s["verdict"], s["n_pairs"], s["n_assignments"]) == (sl.NO_GROUPS, 0, 0)


def test_groups_table_per_threshold():
    a = growth_slopes(FAR).assign(optimizer="adamw", threshold=0.2)
    b = growth_slopes({"const": 3.0, "shared": 2.0, "diag": 10.0, "gru": 11.0, "lstm": 12.0}).assign(
        optimizer="adamw", threshold=0.3)
    out = sl.groups_table(pd.concat([a, b]), GROUPS)
    assert list(out.columns) == ["optimizer", "threshold", *sl.SUMMARY]
    assert list(zip(out["threshold"], out["verdict"])) == [(0.2, sl.HOLDS), (0.3, sl.REVERSED)]


# --- end to end: groundtruth_tables.py --seed-level on a results folder of known slopes -------------

LAGS, N = np.arange(1, 62, 4), 2.0 ** np.arange(6, 17)
ALPHA = {"const": 1.8, "shared": 1.9, "diag": 1.7, "gru": 1.6, "lstm": 1.85}  # kappa = alpha / (alpha - 1)


def _results(tmp_path: Path, s_of: dict[str, float], b_of: dict[str, float]) -> Path:
    """A budget run's exploration seed set: N̂(l) = 64 f(l)^-s exactly (f = exp(-l / 20)) and H_emp(N)
    = 1 + b ln N exactly, with s and b per model plus DEV per seed; alpha per model."""
    res, f = tmp_path / "results", np.exp(-LAGS / 20)
    lb, window = [], []
    for m in ALPHA:
        for seed, dev in zip(SEEDS, DEV):
            keys = dict(model=m, optimizer="adamw", seed=seed)
            lb.append(pd.DataFrame({**keys, "lag": LAGS, "threshold": 0.2, "N_hat": 64 * f ** -(s_of[m] + dev),
                                    "N_hat_grid": np.nan, "left_censored": False, "right_censored": False, "run": True}))
            window.append(pd.DataFrame({**keys, "N": N.astype(int), "threshold": 0.2, "H_emp": 1 + (b_of[m] + dev) * np.log(N),
                                        "holes": 0, "censored": False, "lags_run": LAGS.size}))
            env = pd.DataFrame([{**keys, "epoch": e, "transport": t, "lag": lag, "f": fl}
                                for e in ("init", "trained") for t in ("diagonal", "exact") for lag, fl in zip(LAGS, f)])
            io.write_table(env, layout.under(res, layout.BUDGET_SNAPSHOT["envelope"], **keys), "envelope")
    net = pd.DataFrame([dict(model=m, optimizer="adamw", epoch=e, transport=t, noise=noise,
                             pred_alpha=a if noise == "per_lag" else 5.0)
                        for m, a in ALPHA.items() for e in ("init", "trained") for t in ("diagonal", "exact")
                        for noise in ("per_lag", "pooled")])
    for name, table in (("learning_budget", pd.concat(lb)), ("window", pd.concat(window)), ("network_H_N", net)):
        io.write_table(table, layout.under(res, layout.BUDGET[name], seed_set="exploration"), layout.budget_schema(name))
    return res


def _seed_level(capsys, res: Path) -> str:
    experiment_script("groundtruth_tables").main([str(res), "--seed-level"])
    return capsys.readouterr().out


def _row(text: str, model: str, header: str) -> dict[str, str]:
    """The cells of ``model``'s row in the first markdown table after ``header``."""
    lines = text[text.index(header):].splitlines()
    cols = next(line for line in lines if line.startswith("| model")).strip("|").split("|")
    row = next(line for line in lines if line.startswith(f"| {model} |")).strip("|").split("|")
    return dict(zip((c.strip() for c in cols), (c.strip() for c in row)))


@pytest.mark.parametrize("case", ["holds", "fails"])
def test_seed_level_end_to_end(tmp_path, capsys, case):
    """Claim (d) at s = kappa (holds) or s = 0.4 (fails, below), claim (b)'s groups far apart the
    paper's way round of the lead (holds) or the other way (reversed): the printed per-seed values,
    means, intervals and verdicts."""
    kappa = {m: a / (a - 1) for m, a in ALPHA.items()}
    s_of = kappa if case == "holds" else dict.fromkeys(ALPHA, 0.4)
    b_of = FAR if case == "holds" else {"const": 2.0, "shared": 3.0, "diag": 10.0, "gru": 11.0, "lstm": 12.0}
    out = _seed_level(capsys, _results(tmp_path, s_of, b_of))
    assert "seed set exploration (6203, 7307, 8419, 9521, 10631), adamw, threshold 0.2" in out
    d = _row(out, "gru", "### Claim (d)")
    assert d["kappa"] == f"{kappa['gru']:.2f}" and d["n"] == "5"
    assert d["s per seed"] == ", ".join(f"{seed}: {s_of['gru'] + x:.2f}" for seed, x in zip(SEEDS, DEV))
    half = stats.t.ppf(0.975, 4) * DEV.std(ddof=1) / np.sqrt(5)
    mean_d = s_of["gru"] - kappa["gru"]
    assert d["95 % t-interval of d"] == f"[{mean_d - half:.2f}, {mean_d + half:.2f}]"
    b = _row(out, "lstm", "### Claim (b), the groups")
    assert b["b per seed"] == ", ".join(f"{seed}: {b_of['lstm'] + x:.2f}" for seed, x in zip(SEEDS, DEV))
    assert b["mean b"] == f"{b_of['lstm']:.2f}" and b["group"] == "learned gates"
    assert b["group slope"] == f"{np.mean([b_of[m] for m in ('diag', 'gru', 'lstm')]):.2f}"
    if case == "holds":
        assert d["verdict"] == sl.CONSISTENT and "Claim (d) on the truth: **holds**" in out
        assert "e-fold of N than the learned-gate cells): **holds**" in out
        assert "0.100 fixed above" in out and "6 of 6 fixed above" in out
    else:
        assert d["verdict"] == sl.BELOW and "Claim (d) on the truth: **fails**" in out
        assert "e-fold of N than the learned-gate cells): **reversed**" in out
        assert "0.100 learned above" in out and "6 of 6 learned above" in out


def test_seed_level_names_a_missing_optimizer(tmp_path):
    res = _results(tmp_path, dict.fromkeys(ALPHA, 1.0), FAR)
    with pytest.raises(SystemExit, match="no sgd rows in the exploration seed set's window table"):
        experiment_script("groundtruth_tables").main([str(res), "--seed-level", "--optimizer", "sgd"])


def _per_seed(cell: str, column: str, model: str) -> list[dict]:
    return [dict(model=model, seed=int(s), **{column: float(v)}) for s, v in
            (part.split(": ") for part in cell.split(", "))]


def test_the_committed_seed_level_verdicts_recomputed_from_their_pages_seeds():
    """docs/results-seedlevel.md (the run of config/recovery-seedlevel.yaml): each seed's s and kappa,
    each seed's b, as printed (2 decimals), give again the verdicts the page and docs/results.md
    state: (d) differs below kappa for all five models (fails), the lead on the groups not
    supported with the ordering broken and 4 of 6 pairs; the t-intervals results.md quotes."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    page, results = (docs / "results-seedlevel.md").read_text(), (docs / "results.md").read_text()
    d_table = table_after(page, "### Claim (d) on the truth")
    s = pd.DataFrame([r for _, row in d_table.iterrows() for r in _per_seed(row["s per seed"], "slope", row["model"])])
    assert len(s) == 25 and set(s["seed"]) == set(SEEDS)
    d = sl.kappa_test(s, dict(zip(d_table["model"], d_table["kappa"].astype(float))))
    assert (d["verdict"] == sl.BELOW).all() and sl.kappa_overall(d["verdict"]) == "fails"
    assert list(d_table["verdict"]) == list(d["verdict"])
    for r in d.itertuples():  # the page's intervals of d, to the rounding of the printed slopes
        lo, hi = (float(x) for x in d_table.set_index("model").loc[r.model, "95 % t-interval of d"].strip("[]").split(","))
        assert (r.d_lo, r.d_hi) == pytest.approx((lo, hi), abs=0.01)
    b_table = table_after(page, "### Claim (b), the groups")
    b = pd.DataFrame([r for _, row in b_table.iterrows() for r in _per_seed(row["b per seed"], "b", row["model"])])
    test = sl.group_test(b, GROUPS)
    sm, models = test["summary"], test["models"].set_index("model")
    assert (sm["verdict"], sm["ordering"], sm["pairs_fixed_above"], sm["n_pairs"]) == (sl.NOT_SUPPORTED, "neither", 4, 6)
    assert sm["p_perm_fixed_above"] == pytest.approx(0.2)
    quoted = {"const": "ConstGate", "shared": "SharedGate", "diag": "DiagGate", "gru": "GRU", "lstm": "LSTM"}
    flat = " ".join(results.split())
    for model, name in quoted.items():  # to the rounding of the printed slopes
        found = re.search(rf"{name} (\d+\.\d+) \[(\d+\.\d+), (\d+\.\d+)\]", flat)
        m = models.loc[model]
        assert tuple(map(float, found.groups())) == pytest.approx((m["b_mean"], m["b_lo"], m["b_hi"]), abs=0.011)
    assert "**the lead is not supported**" in results  # claim (d)'s "fails" in §8b's words (TRUTH_WORDS):
    assert f"Claim (d) on the truth {TRUTH_WORDS[sl.kappa_overall(d['verdict'])]}" in results
