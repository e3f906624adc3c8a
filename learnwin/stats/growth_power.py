"""Power of the growth-law rule (docs/method.md §10d): how often §10c's verdict on the seeds'
Box-Cox exponents names the true law, for a design (seeds, budgets, lag grid), by simulation.

* **Generative model.** A cell's window follows the Box-Cox law H(N) = a + b ((N / N_ref)^c - 1) / c
  through two anchors, H(N_lo) = h_lo and H(N_hi) = h_hi (:class:`Scenario`). Grid lag l is learned
  from the budget N(l) where the law reaches l, in log N shifted by a seed offset (sd
  ``sigma_seed``, shared by the seed's lags) and a lag's own noise (sd ``sigma_lag``), both in
  e-folds of N (:func:`learning_budgets`).
* **The protocol's reading** (docs/method.md §10b). A lag is learned at a doubling N_k >= N(l); the
  last budget only confirms, so the window is read at N_0 .. N_{max-1}; H_emp(N) is the learned
  prefix of the grid, left-censored when the first lag is not learned and right-censored at the
  last grid lag (:func:`simulate_windows`). The training a job does: the control to N_max, each lag
  until its pair N_{j+1} (or N_max), lags in order until ``frontier_stop`` in a row have no pair.
* **The estimator** is §10c's own: :func:`learnwin.stats.growth.seed_growth` per seed, then per
  group of n seeds the t-interval of c and :func:`learnwin.stats.growth.shape_verdict`; a group with
  a seed cut off at its largest reported budget has no verdict (:func:`verdict_rates`).
* **Noise calibrated on a run.** ``sigma_lag`` is set so that the simulated within-cell spread of c
  (the sd of a seed's c around its cell's mean) at the run's design matches the measured one
  (:func:`pooled_spread`, :func:`calibrate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from learnwin.stats import growth
from learnwin.stats.intervals import t_interval

CUT_OFF = "cut off"  # a group with a seed cut off decides nothing (docs/method.md §10c)
SIGMA_SEED = 0.3  # e-folds of N: a seed's offset (H_emp's sd over seeds at T 128, 3-13 lags, at b ~ 11)
#: The laws whose power an undecided cell's page states (docs/method.md §10d): log N and a power of
#: N with the paper's smallest exponent, by Box-Cox c.
STATED = ((growth.LOG_N, 0.0), (growth.POWER, 0.18))
#: The growth-law table's column of that power (docs/results-growth.md, experiments/answer_table.py).
P_DECIDED = "P(decided)"


@dataclass(frozen=True)
class Scenario:
    """A true growth law: Box-Cox exponent ``c`` (0: log N, > 0: a power of N, < 0: saturating)
    through the anchors H(n_lo) = h_lo and H(n_hi) = h_hi (lags)."""

    name: str
    c: float
    h_lo: float
    h_hi: float
    n_lo: float = 2.0**8
    n_hi: float = 2.0**14

    def log_budget(self, lags) -> np.ndarray:
        """log N at which the law reaches each lag (+inf past a saturating law's ceiling)."""
        lags = np.asarray(lags, dtype=float)
        span = np.log(self.n_hi / self.n_lo)
        if self.c == 0:
            return np.log(self.n_lo) + (lags - self.h_lo) / (self.h_hi - self.h_lo) * span
        unit = np.expm1(self.c * span) / self.c  # the law's (x^c - 1) / c at n_hi, with x = N / n_lo
        inside = 1 + self.c * (lags - self.h_lo) / (self.h_hi - self.h_lo) * unit
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(inside > 0, np.log(self.n_lo) + np.log(inside) / self.c, np.inf)


@dataclass(frozen=True)
class Design:
    """A run's design: the lag grid, the doubling budgets 64 .. n_max (the window read at all but
    the last) and the frontier rule."""

    lags: tuple[int, ...]
    n_max: int
    n_min: int = 64
    frontier_stop: int = 1

    @property
    def budgets(self) -> np.ndarray:
        return self.n_min * 2.0 ** np.arange(int(round(np.log2(self.n_max / self.n_min))) + 1)


def learning_budgets(rng: np.random.Generator, scenario: Scenario, lags, n_seeds: int, *, sigma_lag: float,
                     sigma_seed: float) -> np.ndarray:
    """(n_seeds, L) log N from which each grid lag is learned, per seed: the law's, plus the seed's
    offset and each lag's noise (e-folds of N)."""
    base = scenario.log_budget(lags)
    return (base[None, :] + sigma_seed * rng.standard_normal((n_seeds, 1))
            + sigma_lag * rng.standard_normal((n_seeds, len(base))))


def simulate_windows(log_nhat: np.ndarray, design: Design, *, model: str = "sim") -> tuple[pd.DataFrame, np.ndarray]:
    """(window table, training sequences per job) of the seeds' learning budgets ``log_nhat``
    (n_seeds, L) read as the protocol reads them (docs/method.md §10b). The table has
    :func:`learnwin.stats.growth.seed_growth`'s columns (threshold 0.2)."""
    lags = np.asarray(design.lags)
    budgets = design.budgets
    log_b = np.log(budgets)
    onset = np.searchsorted(log_b, log_nhat, side="left")  # (S, L): index of the first doubling >= N(l)
    reported = log_b[:-1]
    learned = reported[None, :, None] >= log_nhat[:, None, :]  # (S, K, L)
    prefix = np.cumprod(learned, axis=2).sum(axis=2)  # (S, K): leading learned grid lags
    H = np.where(prefix > 0, lags[np.maximum(prefix - 1, 0)], 0)
    seeds, k = np.meshgrid(np.arange(log_nhat.shape[0]), np.arange(reported.size), indexing="ij")
    window = pd.DataFrame(dict(model=model, threshold=0.2, seed=seeds.ravel(), N=budgets[:-1][k.ravel()],
                               H=H.ravel().astype(float), censored=(prefix == lags.size).ravel(),
                               left_censored=(prefix == 0).ravel(), first_lag=float(lags[0])))
    return window, _job_sequences(onset, budgets, design.frontier_stop)


def _job_sequences(onset: np.ndarray, budgets: np.ndarray, frontier_stop: int) -> np.ndarray:
    """Training sequences of each seed's job: the control to N_max; each lag run, to its pair's
    second budget (N_max without a pair); the lags run in order until ``frontier_stop`` in a row
    have no pair within the budgets."""
    n_max, last = budgets[-1], budgets.size - 1
    no_pair = onset >= last  # (S, L)
    per_lag = np.where(no_pair, n_max, budgets[np.minimum(onset + 1, last)])
    if not frontier_stop:
        return n_max + per_lag.sum(axis=1)
    # the frontier stops at the first lag ending frontier_stop lags in a row without a pair
    done = np.cumsum(np.pad(no_pair, ((0, 0), (1, 0))), axis=1)  # (S, L + 1): pairless lags before index
    streak = done[:, frontier_stop:] - done[:, :-frontier_stop]  # pairless among the frontier_stop ending at i
    ends = np.pad(streak == frontier_stop, ((0, 0), (frontier_stop - 1, 0)))
    stop = np.where(ends.any(axis=1), ends.argmax(axis=1), no_pair.shape[1] - 1)
    runs = np.arange(no_pair.shape[1])[None, :] <= stop[:, None]
    return n_max + (per_lag * runs).sum(axis=1)


def seed_pool(rng: np.random.Generator, scenario: Scenario, design: Design, n_seeds: int, *, sigma_lag: float,
              sigma_seed: float, map_fn: Callable = map) -> pd.DataFrame:
    """``n_seeds`` simulated seeds of ``scenario`` under ``design``, each fitted by §10c's
    estimator (:func:`learnwin.stats.growth.seed_growth`: c, b, cut_off, counts) with its job's
    training sequences (``sequences``)."""
    log_nhat = learning_budgets(rng, scenario, design.lags, n_seeds, sigma_lag=sigma_lag, sigma_seed=sigma_seed)
    window, sequences = simulate_windows(log_nhat, design, model=scenario.name)
    fits = growth.seed_growth(window, map_fn=map_fn)
    return fits.assign(sequences=sequences[fits["seed"].to_numpy()])


def verdict_rates(pool: pd.DataFrame, n: int, *, groups: int, rng: np.random.Generator) -> pd.Series:
    """The share of each verdict over ``groups`` groups of ``n`` distinct seeds drawn from ``pool``
    (:func:`seed_pool`): §10c's verdict on the group's c (t-interval, band
    :data:`learnwin.stats.growth.C_BAND`), or :data:`CUT_OFF` where a seed of the group is cut off."""
    c, cut = pool["c"].to_numpy(float), pool["cut_off"].to_numpy(bool)
    verdicts = []
    for _ in range(groups):
        pick = rng.choice(c.size, size=n, replace=False)
        _, lo, hi, k = t_interval(c[pick])
        verdicts.append(CUT_OFF if cut[pick].any() else growth.shape_verdict(lo, hi, k))
    return pd.Series(verdicts).value_counts(normalize=True)


def pooled_spread(per_seed: pd.DataFrame) -> float:
    """The within-cell sd of the seeds' c of a :func:`learnwin.stats.growth.seed_growth` table:
    sqrt(sum over models of (n - 1) s^2 / sum of (n - 1))."""
    g = per_seed.dropna(subset=["c"]).groupby("model")["c"]
    dof = g.count() - 1
    return float(np.sqrt((dof * g.var(ddof=1)).sum() / dof.sum()))


def calibrate(target: float, spreads: Sequence[float], sigmas: Sequence[float]) -> float:
    """The lag noise whose simulated within-cell spread of c is ``target``: linear interpolation of
    the increasing ``spreads`` measured at ``sigmas``; outside their range, an error."""
    spreads, sigmas = np.asarray(spreads, dtype=float), np.asarray(sigmas, dtype=float)
    if np.any(np.diff(spreads) <= 0):
        raise ValueError(f"calibrate: the simulated spreads must increase with the lag noise, got {spreads.round(3)}")
    if not spreads[0] <= target <= spreads[-1]:
        raise ValueError(f"calibrate: the target spread {target:.3f} lies outside the simulated "
                         f"{spreads[0]:.3f} .. {spreads[-1]:.3f}: widen the lag-noise grid")
    return float(np.interp(target, spreads, sigmas))


def calibrated_noise(table: pd.DataFrame) -> float:
    """The lag noise of the power table (docs/method.md §10d) calibrated on the T 128 run's spread."""
    return float(table.loc[table["noise"] == "calibrated", "sigma_lag"].iloc[0])


def design_power(h_lo: float, h_hi: float, design: Design, n_seeds: int, *, sigma_lag: float, n_lo: float = 2.0**8,
                 n_hi: float = 2.0**14, sigma_seed: float = SIGMA_SEED, pool: int = 2000, groups: int = 2000,
                 seed: int = 0) -> dict[str, float]:
    """The power a run's design had for one cell (docs/method.md §10d): per law of :data:`STATED`,
    the probability that §10c's rule names it when it is the truth through the cell's own anchors
    (its mean window ``h_lo`` at N ``n_lo`` and ``h_hi`` at ``n_hi``), on ``n_seeds`` seeds. The
    groups are drawn from one pool of simulated seeds, whose mean c moves the power: a pool of 120
    leaves it some 0.1 off, one of 2000 some 0.03 (§10d)."""
    power = {}
    for law, c in STATED:
        rng = np.random.default_rng(seed)
        fits = seed_pool(rng, Scenario(law, c, h_lo, h_hi, n_lo, n_hi), design, pool, sigma_lag=sigma_lag,
                         sigma_seed=sigma_seed)
        power[law] = float(verdict_rates(fits, n_seeds, groups=groups, rng=rng).get(law, 0.0))
    return power
