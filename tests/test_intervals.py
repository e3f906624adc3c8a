"""The Student t-interval over seeds (docs/method.md §10, "Intervals over seeds") against scipy's,
and against the seeds' range that a percentile bootstrap over three seeds returns."""

import numpy as np
import pytest
from scipy import stats

from learnwin.stats.intervals import t_interval

LRU_SEEDS = [1.07, 0.93, 1.15]  # the LRU stack's per-seed slopes of docs/results-stacks-slope.md


@pytest.mark.parametrize("values", [LRU_SEEDS, [0.2, -0.4, 1.3, 0.8, 0.5], [3.0, 3.5]])
def test_t_interval_is_scipys(values):
    mean, lo, hi, n = t_interval(values)
    ref = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert n == len(values) and mean == pytest.approx(np.mean(values), rel=1e-12)
    np.testing.assert_allclose((lo, hi), ref, rtol=1e-12)
    lo90, hi90 = t_interval(values, level=0.9)[1:3]
    np.testing.assert_allclose((lo90, hi90), stats.t.interval(0.9, len(values) - 1, loc=np.mean(values),
                                                              scale=stats.sem(values)), rtol=1e-12)


def test_t_interval_of_the_lru_stack_seeds():
    """1.05 ± t_{0.975, 2} 0.111 / sqrt 3 = [0.77, 1.33], below kappa 2.04 (docs/results.md)."""
    mean, lo, hi, _ = t_interval(LRU_SEEDS)
    assert (round(mean, 2), round(lo, 2), round(hi, 2)) == (1.05, 0.77, 1.33)


def test_three_seeds_interval_is_wider_than_their_range():
    """With three seeds the half-width t_{0.975, 2} sd / sqrt 3 = 2.48 sd exceeds the largest
    distance of a seed from the mean (at most 2 sd / sqrt 3 = 1.15 sd), so the interval holds the
    range strictly, where a percentile bootstrap's 95 % interval over three seeds is the range."""
    draws = np.random.default_rng(0).normal(size=(200, 3))
    for v in draws:
        _, lo, hi, _ = t_interval(v)
        assert lo < v.min() and hi > v.max()


def test_t_interval_drops_missing_seeds_and_needs_two():
    mean, lo, hi, n = t_interval([1.0, np.nan, 3.0, np.inf])
    assert (mean, n) == (2.0, 2) and (lo, hi) == pytest.approx(stats.t.interval(0.95, 1, loc=2.0, scale=1.0))
    mean, lo, hi, n = t_interval([2.5, np.nan])
    assert (mean, n) == (2.5, 1) and np.isnan(lo) and np.isnan(hi)
    mean, lo, hi, n = t_interval([])
    assert n == 0 and np.isnan(mean) and np.isnan(lo) and np.isnan(hi)
