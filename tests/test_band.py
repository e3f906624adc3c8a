"""learnwin.stats.band (docs/method.md §8c): a count's band is the min and max over the runs, its
verdict words counted per run; a run's position names each count outside its band; a config that
differs from the default experiment's is named, on tables whose counts are known by construction."""

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
    sentence = band.position(_verdicts(k), counts)
    head = "Against the default run's band (docs/method.md §8c, 2 seed draws and 1 recorded machine)"
    if inside:
        assert sentence == f"{head}, every count of this run lies inside."
    else:
        assert sentence == f"{head}, this run lies outside in 1 of 1 counts: (c) diagonal {k} of 10 rows (band 4-8 of 10)."


def test_a_run_of_other_rows_lies_outside():
    assert "(c) diagonal 4 of 8 rows (band 4-8 of 10)" in band.position(_verdicts(4, n=8), _counts([4, 8]))


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
    sentence = band.position(_verdicts(6), _counts([6]), keys)
    assert sentence == ("This run's config differs from the default experiment's (task.T, task.D, model.hidden, "
                        "train.epochs and 2 more): the default run's band (docs/method.md §8c) does not apply.")


def test_the_committed_counts_are_readable_and_banded():
    """The package data every installed run reads: one band per count of :data:`band.COUNTS`."""
    bands = band.bands(band.read())
    assert list(bands) == list(band.COUNTS)
    assert all(b.runs["machine"] >= 1 for b in bands.values())
