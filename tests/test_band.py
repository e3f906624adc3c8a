"""learnwin.stats.band (docs/method.md §8c): a count's band is the min and max over the runs, its
verdict words counted per run; a run's position names each count outside its band; a config that
differs from the default experiment's is named, on tables whose counts are known by construction."""

import numpy as np
import pandas as pd
import pytest

from learnwin.stats import band

DIAGONAL = dict(claim="c", check="tau_env", optimizer="adamw vs sgd_momentum", noise="-", transport="diagonal",
                functional="gamma", expected="adamw slower")


def _verdicts(k: int, n: int = 10) -> pd.DataFrame:
    """A verdict table of claim (c) on the diagonal transport alone: n rows, the first k hold; and
    as many rows of a secondary functional, all holding, which no count reads."""
    rows = [dict(DIAGONAL, model=f"m{i}", holds=i < k) for i in range(n)]
    rows += [dict(DIAGONAL, model=f"m{i}", functional="norm", holds=True) for i in range(n)]
    return pd.DataFrame(rows)


def _counts(ks: list[int], n: int = 10, machines: int = 0) -> pd.DataFrame:
    runs = [(f"r{i}", "machine" if i < machines else "draw", band.run_counts(_verdicts(k, n))) for i, k in enumerate(ks)]
    return band.counts_table(runs)


def test_run_counts_read_the_primary_functional_of_each_count():
    assert band.run_counts(_verdicts(6)) == {"(c) diagonal": (6, 10)}
    assert band.run_counts(_verdicts(0)) == {"(c) diagonal": (0, 10)}


@pytest.mark.parametrize("ks, span, phrase", [
    ([3, 5, 8], "3-8 of 10", "holds in part in 3 of 3 draws"),
    ([6, 6], "6 of 6", "holds in 2 of 2 draws"),
    ([10, 2, 10], "2-10 of 10", "holds in 2 of 3 draws, does not hold in 1"),
    ([0, 1, 2, 3], "0-3 of 8", "does not hold in 3 of 4 draws, holds in part in 1"),
])
def test_a_band_is_the_min_and_max_and_its_words_are_counted_per_run(ks, span, phrase):
    n = 6 if span.endswith("of 6") else 8 if span.endswith("of 8") else 10
    (b,) = band.bands(_counts(ks, n, machines=1)).values()
    assert (b.lo, b.hi, b.n) == (min(ks), max(ks), n)
    assert b.span() == span and b.word_phrase() == phrase
    assert b.runs == {"draw": len(ks) - 1, "machine": 1}


def test_runs_that_count_different_rows_give_no_band():
    counts = pd.concat([_counts([3]), _counts([3], n=8)])
    with pytest.raises(ValueError, match=r"\(c\) diagonal: the runs count \[8, 10\] rows"):
        band.bands(counts)


@pytest.mark.parametrize("k, inside", [(4, True), (6, True), (8, True), (3, False), (9, False)])
def test_the_position_names_a_count_outside_the_band(k, inside):
    counts = _counts([4, 8, 6], machines=1)
    sentences = band.position(_verdicts(k), counts)
    head = "Against the default run's band (docs/method.md §8c, 2 seed draws and 1 recorded machine)"
    if inside:
        assert sentences == [f"{head}, every count of this run lies inside."]
    else:
        assert sentences == [f"{head}, this run lies outside in 1 of 1 counts: (c) diagonal {k} of 10 rows (band 4-8 of 10)."]


def test_a_run_of_other_rows_lies_outside():
    assert "(c) diagonal 4 of 8 rows (band 4-8 of 10)" in band.position(_verdicts(4, n=8), _counts([4, 8]))[0]


DEFAULT = {"seeds": [2, 12], "device": "auto", "task": {"T": 64, "lags": [8, 16]}, "model": {"hidden": 32},
           "recovery": {"seeds": [2]}}


@pytest.mark.parametrize("change, keys", [
    ({}, []),
    ({"seeds": [5, 6], "device": "cpu", "recovery": {"seeds": [9]}}, []),  # what a draw changes
    ({"task": {"T": 128, "lags": [8, 16]}}, ["task.T"]),
    ({"task": {"T": 64, "lags": (8, 16)}, "extra": 1}, []),  # a tuple is the list; keys the file lacks
    ({"task": {"T": 64, "lags": [8, 24]}, "model": {"hidden": 16}}, ["task.lags", "model.hidden"]),
    ({"model": None}, ["model"]),
])
def test_differing_keys_name_what_the_default_file_sets_otherwise(change, keys):
    assert band.differing_keys({**DEFAULT, **change}, DEFAULT) == keys


def test_a_run_of_another_config_is_told_the_band_does_not_apply():
    keys = ["task.T", "task.D", "model.hidden", "train.epochs", "alpha.bootstrap", "decay.block"]
    sentences = band.position(_verdicts(6), _counts([6]), keys)
    assert sentences == ["This run's config differs from the default experiment's (task.T, task.D, model.hidden, "
                        "train.epochs and 2 more): the default run's band (docs/method.md §8c) does not apply."]


def test_the_committed_counts_are_readable_and_banded():
    """The package data every installed run reads: one band per count of :data:`band.COUNTS`."""
    bands = band.bands(band.read())
    assert list(bands) == list(band.COUNTS)
    assert all(b.runs["machine"] >= 1 for b in bands.values())


# ---- the seed-resampled band (method.md §8c) ----


def _agreement(flags: dict[str, dict[int, bool | None]]) -> pd.DataFrame:
    """An agreement table (learnwin.stats.claims.seed_agreement's form) of claim (c)'s diagonal
    rows: {model: {seed: flag}}, None for a seed without a flag."""
    return pd.DataFrame([dict({k: DIAGONAL[k] for k in ("claim", "check", "optimizer", "noise", "transport",
                                                        "functional")}, model=m, seed=s, agree=a)
                         for m, seeds in flags.items() for s, a in seeds.items() if a is not None])


def test_subset_counts_equal_the_hypergeometric_count():
    """One row whose flag holds for 2 of 6 seeds: it holds on a triple that draws both (4 of the 20
    triples), as a run of those three seeds would count it."""
    x, rows = band.subset_counts(_agreement({"m0": {s: s < 2 for s in range(6)}}))
    assert rows == {"(c) diagonal": 1} and len(x) == 20
    assert x["(c) diagonal"].sum() == 4


def test_a_seed_without_a_flag_is_left_out_of_its_triples_n():
    """Seed 2 has no flag on row m0 (one on m1, which no triple holds): a triple of one agreeing
    seed, one not and seed 2 counts 1 of 2 (fails), one of two agreeing seeds and seed 2 counts 2 of
    2 (holds)."""
    x, _ = band.subset_counts(_agreement({"m0": {0: True, 1: False, 2: None, 3: True},
                                          "m1": dict.fromkeys(range(4), False)}))
    # triples in order: (0,1,2) (0,1,3) (0,2,3) (1,2,3)
    assert x["(c) diagonal"].tolist() == [0, 1, 1, 0]


def test_rows_that_one_seed_moves_together_show_in_the_resampled_range_not_in_disjoint_triples():
    """Two rows move with the same 6 of 24 seeds (as SharedGate's two diagonal rows of (c)). Eight
    disjoint triples with at most one such seed each give the band 0-0; every resampled triple with
    two of them counts 2 (28 % of them), so the 99 % range reaches 2 and a run at 2 lies inside it,
    outside the min-max band."""
    rare = {0, 3, 6, 9, 12, 15}  # one in each of the triples (0,1,2), (3,4,5) ... (15,16,17)
    flags = {m: {s: s in rare for s in range(24)} for m in ("m0", "m1")}
    ag = _agreement(flags)
    draws = [band.run_counts(_verdicts(0, n=2))] * 8
    counts = band.counts_table([(f"d{i}", "draw", c) for i, c in enumerate(draws)])
    x, _ = band.subset_counts(ag)
    assert set(x["(c) diagonal"]) == {0, 2}
    assert (x["(c) diagonal"] == 2).mean() == pytest.approx((15 * 18 + 20) / 2024)
    ranges = band.resampled(ag)
    assert ranges[["lo", "hi", "n", "subsets", "seeds"]].values.tolist() == [[0, 2, 2, 2024, 24]]
    run = _verdicts(2, n=2)
    assert "outside in 1 of 1 counts: (c) diagonal 2 of 2 rows (band 0 of 2)" in band.position(run, counts)[0]
    (widened,) = band.position(run, counts, ranges=ranges)
    assert widened.endswith("widened to the 99 % range of 2024 resampled seed triples), every count of this run lies inside.")


def test_the_central_range_leaves_at_most_half_the_rest_on_each_side():
    x = np.arange(100)
    assert band.central_range(x, 0.98) == (1, 98)
    assert band.central_range(x, 0.99) == (0, 99)
    assert band.central_range([3] * 50 + [5] * 50, 0.99) == (3, 5)


def test_the_coverage_is_the_share_of_subsets_inside_every_band():
    """Two rows, each agreeing for 2 of 6 seeds (never the same): each holds on 4 of 20 triples. On
    the 99 % range [0, 1] every triple lies inside; at level 0.2 the range is [0, 0], which holds
    the 12 triples where neither row does, and a draw at 1 widens the band to [0, 1] again."""
    ag = _agreement({"m0": {s: s < 2 for s in range(6)}, "m1": {s: s >= 4 for s in range(6)}})
    x, _ = band.subset_counts(ag)
    assert x["(c) diagonal"].value_counts().to_dict() == {0: 12, 1: 8}
    zero, one = (band.counts_table([("d", "draw", band.run_counts(_verdicts(k, n=2)))]) for k in (0, 1))
    for level, counts, lo_hi, share in [(0.99, zero, (0, 1), 1.0), (0.2, zero, (0, 0), 0.6), (0.2, one, (0, 1), 1.0)]:
        b = band.bands(counts, band.resampled(ag, level=level))
        assert (b["(c) diagonal"].lo, b["(c) diagonal"].hi) == lo_hi
        assert band.coverage(x, b) == pytest.approx(share)


@pytest.mark.parametrize("runs, coverage", [(20, 0.95), (20, 0.99), (10, 0.9), (20, 0.5)])
def test_the_fresh_threshold_is_the_binomial_five_percent_quantile(runs, coverage):
    from scipy.stats import binom

    t = band.fresh_threshold(runs, coverage)
    assert binom.cdf(t - 1, runs, coverage) <= band.ALPHA < binom.cdf(t, runs, coverage)
    assert band.fresh_threshold(20, 0.95) == 17


def test_too_small_a_pool_is_an_error():
    with pytest.raises(ValueError, match="at least 3 seeds, the pool has 2"):
        band.subset_counts(_agreement({"m0": {0: True, 1: False}}))


@pytest.mark.parametrize("inside, kept, state", [(17, 17, "passes"), (17, 20, "passes"), (16, 20, "fails"),
                                                 (10, 14, "fails"), (10, 13, "open"), (0, 0, "open")])
def test_the_fresh_test_is_decided_as_soon_as_the_runs_left_cannot_change_it(inside, kept, state):
    """Threshold 17 of 20 at coverage 0.95: reached, out of reach with the runs left, or open."""
    assert band.fresh_verdict(inside, kept, 20, 0.95) == state


# ---- a run that reproduces a kept check run (method.md §8c) ----


def _estimated(k: int, n: int = 10, scale: float = 1.0) -> pd.DataFrame:
    """:func:`_verdicts` with an estimate per row: 0, tiny and order-one values, times ``scale``."""
    table = _verdicts(k, n)
    return table.assign(estimate=np.float32(scale) * np.linspace(0, 2, len(table)).astype(np.float32) ** 3
                        * np.where(np.arange(len(table)) % 3 == 0, 1e-30, 1).astype(np.float32))


def test_a_run_reproduces_a_check_run_within_float32_rounding_and_no_further(tmp_path):
    """The check run's estimates, written as :data:`band.CHECKS` is and read back, match the run's
    own; a float32 ulp off (as two CPUs of one arithmetic give) still does, 1e-5 off on one row or
    one row missing does not."""
    kept = _estimated(8)
    path = tmp_path / "checks.csv"
    band.check_estimates("default-x", "CPU X", kept).to_csv(path, index=False)
    checks = band.read_checks(path)
    assert band.reproduces(kept, checks) == [("default-x", "CPU X")]
    ulp = kept.assign(estimate=np.nextafter(kept["estimate"].to_numpy(), np.float32(np.inf)))
    assert band.reproduces(ulp, checks) == [("default-x", "CPU X")]
    off = kept.copy()
    off.loc[len(off) - 1, "estimate"] *= np.float32(1 + 1e-5)
    assert band.reproduces(off, checks) == []
    assert band.reproduces(kept.iloc[1:], checks) == []
    assert band.reproduces(kept, None) == [] and band.read_checks(tmp_path / "none.csv") is None


def test_the_position_says_which_kept_run_a_run_outside_the_band_reproduces():
    """A run at 8 of 10 against the band 4-7: outside; where its estimates are a kept check run's,
    the sentence names that run and its CPU; a run of other numbers is not told so."""
    counts = _counts([4, 7], machines=1)
    run = _estimated(8)
    checks = band.check_estimates("default-x", "CPU X", run)
    where, same = band.position(run, counts, checks=checks)
    assert where.endswith("outside in 1 of 1 counts: (c) diagonal 8 of 10 rows (band 4-7 of 10).")
    assert same == ("Its claims equal those of the default run kept from the CPU X (data/runs/default-x), "
                    "to a relative 1e-06: the same numbers on the same arithmetic, a known result of these seeds, "
                    "not a faulty install.")
    (other,) = band.position(_estimated(8, scale=1.5), counts, checks=checks)
    assert other.endswith("(c) diagonal 8 of 10 rows (band 4-7 of 10).")


def test_a_run_that_reproduces_two_check_runs_is_told_so_in_one_sentence():
    run = _estimated(8)
    checks = pd.concat([band.check_estimates("default-x", "CPU X", run), band.check_estimates("default-y", "CPU Y", run)])
    assert band.position(run, _counts([4, 7], machines=1), checks=checks)[1:] == [
        "Its claims equal those of the default runs kept from the CPU X (data/runs/default-x) and the CPU Y "
        "(data/runs/default-y), to a relative 1e-06: the same numbers on the same arithmetic, a known result of these "
        "seeds, not a faulty install."]


def test_the_committed_check_runs_reproduce_each_other():
    """The default seeds on the two AMD EPYCs kept (cpu family 25 model 17, family 26 model 2): one
    arithmetic, so each reproduces the other (docs/method.md §8c)."""
    checks = band.read_checks()
    runs = sorted(checks["run"].unique())
    assert runs == ["default-epyc-25-17", "default-epyc-26-2"]
    for run in runs:
        table = checks[checks["run"] == run]
        assert band.reproduces(table, checks) == [(r, checks.loc[checks["run"] == r, "cpu"].iloc[0]) for r in runs]


def _two_counts(c: int, a: int) -> dict[str, tuple[int, int]]:
    return {"(a)": (a, 12), "(c) diagonal": (c, 10)}


#: Bands (a) 0-1 of 12 and (c) diagonal 4-7 of 10; fresh runs: one inside, one outside in (c) alone.
TWO_BANDS = band.bands(band.counts_table([("r0", "draw", _two_counts(4, 0)), ("r1", "draw", _two_counts(7, 1))]))
FRESH = band.counts_table([("f0", "fresh", _two_counts(5, 1)), ("f1", "fresh", _two_counts(8, 0)),
                           ("f2", "fresh", _two_counts(4, 0))])


@pytest.mark.parametrize("outside_counts, words", [
    (1, "Of the 3 default runs on unused seeds of §8c's test, 1 lay outside too, in at most 1 count each: a count "
        "outside is what a seed draw gives, not by itself a faulty install."),
    (2, "Of the 3 default runs on unused seeds of §8c's test, 1 lay outside too, in at most 1 count each: 2 counts "
        "outside is more than any of them, which points to an install that differs from the one recorded."),
])
def test_the_fresh_runs_tell_a_count_outside_from_more_than_they_showed(outside_counts, words):
    assert band.fresh_phrase(FRESH, TWO_BANDS, outside_counts) == words


def test_where_no_fresh_run_lay_outside_one_count_outside_points_to_the_install():
    inside = FRESH[FRESH["run"] != "f1"]
    assert band.fresh_phrase(inside, TWO_BANDS, 1) == (
        "None of the 2 default runs on unused seeds of §8c's test lay outside: 1 count outside points to an install "
        "that differs from the one recorded.")


def test_the_position_of_a_run_outside_quotes_the_fresh_runs_and_of_a_run_inside_does_not(tmp_path):
    """Written as :data:`band.FRESH` is and read back; the run inside gets no fresh-run words."""
    path = tmp_path / "fresh.csv"
    FRESH.to_csv(path, index=False)
    fresh, counts = band.read(path), _counts([4, 7], machines=1)
    where, told = band.position(_verdicts(8), counts, fresh=fresh)
    assert where.endswith("(c) diagonal 8 of 10 rows (band 4-7 of 10).")
    assert told == ("Of the 3 default runs on unused seeds of §8c's test, 1 lay outside too, in at most 1 count each: "
                    "a count outside is what a seed draw gives, not by itself a faulty install.")
    (inside,) = band.position(_verdicts(5), counts, fresh=fresh)
    assert inside.endswith("every count of this run lies inside.")
    assert band.read(tmp_path / "none.csv") is None


@pytest.mark.parametrize("k, n", [(18, 20), (20, 20), (0, 20), (7, 13)])
def test_the_share_interval_is_the_exact_binomial_one(k, n):
    """Clopper-Pearson: at the lower end, P(X >= k) is 2.5 %; at the upper end, P(X <= k) is 2.5 %;
    an end at 0 or 1 where k is 0 or n."""
    from scipy.stats import binom

    share, lo, hi = band.share_interval(k, n)
    assert share == k / n
    assert lo == 0 if k == 0 else binom.sf(k - 1, n, lo) == pytest.approx(0.025, abs=1e-9)
    assert hi == 1 if k == n else binom.cdf(k, n, hi) == pytest.approx(0.025, abs=1e-9)
    assert 0 <= lo < share < hi <= 1 or share in (0, 1)
