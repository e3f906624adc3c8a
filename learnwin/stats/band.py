"""The default run's counts as bands over seed draws and the recorded machines (docs/method.md §8c).

Another CPU is another seed draw, so a count of the default run (a claim's rows that hold,
:data:`COUNTS`) is stated as its band: the minimum and maximum over the pre-registered seed draws
(``data/runs/default-draws``) and each recorded machine's default run, widened, once the pool of
§8c's seed-resampled band is in, to the central 99 % range of the count over every triple of the
pool's seeds (:func:`resampled`, from each seed's agreement flags). The runs' counts and that range
are package data (:data:`TABLE`, :data:`RESAMPLED`, written by ``python experiments/answer_table.py
--write`` from the committed tables), so an installed run's findings.md places its own counts
against them (:func:`position`), and one outside is told how often the fresh runs of §8c's test lay
outside too (:data:`FRESH`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.stats import binom, binomtest

from learnwin.stats.claims import KEY, counted_rows, held_counts, verdict_word

#: The counts the answer states of the default run: name -> (claim, scope of
#: learnwin.stats.claims.held_counts): (c) one per transport, (d) all rows and its exception.
COUNTS = {
    "(a)": ("a", {}),
    "(b)": ("b", {}),
    "(c) exact": ("c", {"transport": "exact"}),
    "(c) diagonal": ("c", {"transport": "diagonal"}),
    "(d)": ("d", {}),
    "(d) per_lag diagonal": ("d", {"noise": "per_lag", "transport": "diagonal"}),
}
#: The committed runs' counts: run, kind (draw or machine), count, k, n.
TABLE = Path(__file__).with_name("tables") / "default_counts.csv"
#: The seed-resampled range of each count (:func:`resampled`): count, lo, hi, n, level, seeds,
#: subsets; absent until the pool of docs/method.md §8c is in.
RESAMPLED = Path(__file__).with_name("tables") / "default_resampled.csv"
#: The claims estimates of each kept check run of docs/method.md §8c (the default seeds on a CPU the
#: band does not contain): run, cpu, the claims KEY, estimate; :func:`reproduces` matches a run to one.
CHECKS = Path(__file__).with_name("tables") / "default_checks.csv"
#: The counts of each kept fresh run of docs/method.md §8c's test (run, kind "fresh", count, k, n):
#: how often a default run on unused seeds lies outside the band, and in how many counts.
FRESH = Path(__file__).with_name("tables") / "default_fresh.csv"
#: How close (relative) a run's claims estimates must be to a check run's for it to reproduce that
#: run: the same trainings give estimates a float32 ulp or two apart across CPUs (1.2e-7 measured);
#: below float32's smallest normal number a value counts as zero.
RTOL, ATOL = 1e-6, float(np.finfo(np.float32).tiny)
#: A kept draw's per-seed agreement flags (learnwin.stats.claims.seed_agreement), beside its claims table.
AGREEMENT = "agreement.parquet"
#: The resampled range's level and the seeds a default run has (docs/method.md §8c).
LEVEL, SEEDS_PER_RUN = 0.99, 3
#: The registered test's false-alarm rate: fresh runs inside fall below the binomial 5 % quantile.
ALPHA = 0.05
#: What a draw changes of the default config (its seeds), or what does not reach the claims.
FREE_KEYS = ("seeds", "device", "recovery")
#: The kinds of run a band is taken over, in the words the answer uses.
KINDS = {"draw": "seed draw", "machine": "recorded machine"}
#: The differing config keys :func:`position` names before it counts the rest.
NAMED = 4


def draw_name(seeds) -> str:
    """A seed draw's folder name in its draw set of data/runs (docs/method.md §8c): seeds<a>-<b>-<c>."""
    return "seeds" + "-".join(map(str, seeds))


def run_counts(table: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """{name: (k, n)} of one run's verdict table (learnwin.stats.claims.claim_table, or a page's
    claims table in that form) for each of :data:`COUNTS` the table has rows of."""
    out = {}
    for name, (claim, scope) in COUNTS.items():
        (k,), n = held_counts([table], claim, **scope)
        if n:
            out[name] = (k, n)
    return out


def counts_table(runs: Sequence[tuple[str, str, Mapping[str, tuple[int, int]]]]) -> pd.DataFrame:
    """The :data:`TABLE` of ``runs``, each (run, kind, :func:`run_counts`)."""
    rows = [dict(run=run, kind=kind, count=name, k=k, n=n)
            for run, kind, counts in runs for name, (k, n) in counts.items()]
    return pd.DataFrame(rows, columns=["run", "kind", "count", "k", "n"])


class Band(NamedTuple):
    """A count's band over the runs: rows that hold, lo to hi of n; each verdict word of
    docs/method.md §8b with the number of runs it comes out in, most frequent first; runs per kind."""

    lo: int
    hi: int
    n: int
    words: list[tuple[str, int]]
    runs: dict[str, int]
    subsets: int = 0  # the seed subsets of the resampled range it spans too (0: none)

    def span(self) -> str:
        """"k of n", or "lo-hi of n"."""
        return f"{self.lo} of {self.n}" if self.lo == self.hi else f"{self.lo}-{self.hi} of {self.n}"

    def word_phrase(self) -> str:
        """How often each verdict word comes out: "holds in part in 9 of 10 draws, does not hold in 1"."""
        total = sum(self.runs.values())
        (first, k), *rest = self.words
        return ", ".join([f"{first} in {k} of {total} draws", *(f"{w} in {k}" for w, k in rest)])


def bands(counts: pd.DataFrame, ranges: pd.DataFrame | None = None) -> dict[str, Band]:
    """The :class:`Band` of each count of a :data:`TABLE`, in :data:`COUNTS` order: the runs' min and
    max, widened to the count's resampled range where ``ranges`` (:func:`resampled`) has one; every
    run of a count, and its range, must count the same rows."""
    out = {}
    for name in [c for c in COUNTS if c in set(counts["count"])]:
        g = counts[counts["count"] == name]
        r = ranges[ranges["count"] == name] if ranges is not None else pd.DataFrame(columns=["n", "lo", "hi"])
        if len({*g["n"], *r["n"]}) != 1:
            raise ValueError(f"{name}: the runs count {sorted({*g['n'], *r['n']})} rows; a band needs the same rows")
        n = int(g["n"].iloc[0])
        words = Counter(verdict_word([int(k)], n) for k in g["k"]).most_common()
        kinds = g["kind"].value_counts()
        lo, hi = int(min([g["k"].min(), *r["lo"]])), int(max([g["k"].max(), *r["hi"]]))
        out[name] = Band(lo, hi, n, words, {k: int(kinds.get(k, 0)) for k in KINDS},
                         int(r["subsets"].iloc[0]) if len(r) else 0)
    return out


def read(path: str | Path = TABLE) -> pd.DataFrame | None:
    """A committed table of counts or ranges (:data:`TABLE`, :data:`RESAMPLED`, :data:`FRESH`), or
    None where it is not written (the ranges before the pool is in, the fresh counts before a run)."""
    return pd.read_csv(path) if Path(path).is_file() else None


def read_checks(path: str | Path = CHECKS) -> pd.DataFrame | None:
    """The check runs' estimates (:data:`CHECKS`), or None where none is written."""
    path = Path(path)
    return pd.read_csv(path, dtype={k: str for k in KEY}, keep_default_na=False, na_values=[""]) if path.is_file() else None


def check_estimates(run: str, cpu: str, table: pd.DataFrame) -> pd.DataFrame:
    """A check run's rows of :data:`CHECKS` from its verdict ``table``."""
    return table[KEY + ["estimate"]].assign(run=run, cpu=cpu)[["run", "cpu", *KEY, "estimate"]]


def reproduces(table: pd.DataFrame, checks: pd.DataFrame | None) -> list[tuple[str, str]]:
    """The (run, cpu) of each check run whose claims estimates the verdict ``table`` equals row for
    row, within :data:`RTOL` and :data:`ATOL` (docs/method.md §8c): the same seeds trained to the
    same numbers, on that CPU's arithmetic."""
    if checks is None:
        return []
    own = table[KEY + ["estimate"]].astype({k: str for k in KEY}).set_index(KEY)["estimate"].astype(float)
    out = []
    for (run, cpu), rows in checks.groupby(["run", "cpu"], sort=True):
        kept = rows.set_index(KEY)["estimate"].astype(float)
        if kept.index.sort_values().equals(own.index.sort_values()):
            a, b = own.sort_index().to_numpy(), kept.sort_index().to_numpy()
            if np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
                out.append((run, cpu))
    return out


def fresh_phrase(fresh: pd.DataFrame, b: Mapping[str, Band], outside_counts: int) -> str:
    """What the fresh runs of docs/method.md §8c's test (a :data:`FRESH` table) say of a run outside
    the bands ``b`` in ``outside_counts`` counts: how many of them lay outside too, in at most how
    many counts each, and whether the run's counts outside exceed that."""
    out = [len(outside({c: (int(k), int(n)) for c, k, n in g[["count", "k", "n"]].to_numpy()}, b))
           for _, g in fresh.groupby("run", sort=True)]
    most, mine = max(out), f"{outside_counts} count{'s' * (outside_counts != 1)} outside"
    if not most:
        return (f"None of the {len(out)} default runs on unused seeds of §8c's test lay outside: {mine} points to an "
                "install that differs from the one recorded.")
    head = (f"Of the {len(out)} default runs on unused seeds of §8c's test, {sum(o > 0 for o in out)} lay outside "
            f"too, in at most {most} count{'s' * (most != 1)} each")
    if outside_counts <= most:
        return f"{head}: a count outside is what a seed draw gives, not by itself a faulty install."
    return f"{head}: {mine} is more than any of them, which points to an install that differs from the one recorded."


def share_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float, float]:
    """The share k / n of runs inside the band with its exact (Clopper-Pearson) ``level`` interval."""
    ci = binomtest(k, n).proportion_ci(level, method="exact")
    return k / n, float(ci.low), float(ci.high)


# -- the seed-resampled band (docs/method.md §8c) -----------------------------------------------


def subset_counts(agreement: pd.DataFrame, size: int = SEEDS_PER_RUN) -> tuple[pd.DataFrame, dict[str, int]]:
    """Each count of :data:`COUNTS` on every ``size``-subset of the seeds of ``agreement``
    (learnwin.stats.claims.seed_agreement of the pool's runs, stacked): a row of a subset holds when
    more than half of its seeds with a flag agree (docs/method.md §8b), as in a run of those seeds.
    -> (one row per subset, one column per count; the rows each count reads)."""
    seeds = np.sort(agreement["seed"].unique())
    if seeds.size < size:
        raise ValueError(f"resampling needs at least {size} seeds, the pool has {seeds.size}")
    subsets = np.array(list(combinations(range(seeds.size), size)))
    out, rows = {}, {}
    for name, (claim, scope) in COUNTS.items():
        flags = counted_rows(agreement, claim, **scope)
        if flags.empty:
            continue
        f = flags.pivot_table(index=KEY, columns="seed", values="agree", aggfunc="first")
        f = f.reindex(columns=seeds).to_numpy(dtype=float)[:, subsets]  # (row, subset, seed); NaN: no flag
        k, n = np.nansum(f, axis=2), np.sum(~np.isnan(f), axis=2)
        out[name], rows[name] = ((n > 0) & (k > n / 2)).sum(axis=0), f.shape[0]
    return pd.DataFrame(out), rows


def central_range(x, level: float = LEVEL) -> tuple[int, int]:
    """The narrowest integer [lo, hi] with at most (1 - level) / 2 of ``x`` below lo and as much
    above hi."""
    x = np.asarray(x)
    c, tail = np.arange(x.min(), x.max() + 1), (1 - level) / 2
    below, above = (x[None, :] < c[:, None]).mean(axis=1), (x[None, :] > c[:, None]).mean(axis=1)
    return int(c[below <= tail + 1e-12].max()), int(c[above <= tail + 1e-12].min())


def resampled(agreement: pd.DataFrame, level: float = LEVEL, size: int = SEEDS_PER_RUN) -> pd.DataFrame:
    """Each count's resampled range over every ``size``-subset of the pool's seeds
    (:func:`subset_counts`, :func:`central_range`): count, lo, hi, n (rows), level, seeds (the
    pool's), subsets."""
    x, rows = subset_counts(agreement, size)
    out = []
    for name in x:
        lo, hi = central_range(x[name], level)
        out.append(dict(count=name, lo=lo, hi=hi, n=rows[name], level=level, seeds=agreement["seed"].nunique(),
                        subsets=len(x)))
    return pd.DataFrame(out)


def coverage(x: pd.DataFrame, b: Mapping[str, Band]) -> float:
    """The share of the pool's seed subsets, their counts ``x`` (:func:`subset_counts`), that lie
    inside the bands ``b`` in every count (docs/method.md §8c: the p of the fresh runs' test)."""
    return float(np.all([(x[name] >= b[name].lo) & (x[name] <= b[name].hi) for name in x], axis=0).mean())


def outside(own: Mapping[str, tuple[int, int]], b: Mapping[str, Band]) -> list[str]:
    """The counts of ``own`` (:func:`run_counts`) outside their band, each "name k of n rows (band ...)"."""
    return [f"{name} {k} of {n} rows (band {b[name].span()})" for name, (k, n) in own.items()
            if name in b and not (n == b[name].n and b[name].lo <= k <= b[name].hi)]


def fresh_threshold(runs: int, coverage: float, alpha: float = ALPHA) -> int:
    """The registered test of the resampled band (docs/method.md §8c): of ``runs`` default runs on
    fresh seed triples, at least this many must lie inside in every count, the largest t with
    P(X < t) <= ``alpha`` for X ~ Binomial(runs, ``coverage``)."""
    t = np.arange(runs + 1)
    return int(t[binom.cdf(t - 1, runs, coverage) <= alpha].max())


def differing_keys(config: Mapping, default: Mapping, prefix: str = "") -> list[str]:
    """The dotted keys that ``default`` (the default experiment's config file) sets and ``config``
    gives another value, apart from :data:`FREE_KEYS`."""
    out = []
    for key, value in default.items():
        name = f"{prefix}{key}"
        if not prefix and key in FREE_KEYS:
            continue
        mine = config.get(key) if isinstance(config, Mapping) else None
        if isinstance(value, Mapping) and isinstance(mine, Mapping):
            out += differing_keys(mine, value, f"{name}.")
        elif mine != value and not (isinstance(value, list) and list(mine or ()) == value):
            out.append(name)
    return out


def position(table: pd.DataFrame, counts: pd.DataFrame, differing: Sequence[str] = (),
             ranges: pd.DataFrame | None = None, checks: pd.DataFrame | None = None,
             fresh: pd.DataFrame | None = None) -> list[str]:
    """Where the run's counts (of its verdict ``table``) fall against the bands of ``counts`` (a
    :data:`TABLE`) and ``ranges`` (:data:`RESAMPLED`, where in), in sentences, one bullet each of
    findings.md: inside every band, or outside, naming each count outside, then how often the fresh
    runs of ``fresh`` (:data:`FRESH`, where in) lay outside too (:func:`fresh_phrase`); then the kept
    check runs of ``checks`` (:data:`CHECKS`) it reproduces, in one sentence. Where the run's config is ``differing``
    from the default experiment's, one sentence: no band applies."""
    if differing:
        keys = ", ".join(differing[:NAMED]) + (f" and {len(differing) - NAMED} more" if len(differing) > NAMED else "")
        return [f"This run's config differs from the default experiment's ({keys}): the default run's band "
                "(docs/method.md §8c) does not apply."]
    b = bands(counts, ranges)
    first = next(iter(b.values()))
    source = " and ".join(f"{k} {KINDS[kind]}{'s' * (k > 1)}" for kind, k in first.runs.items() if k)
    if first.subsets:
        source += f", widened to the {100 * LEVEL:g} % range of {first.subsets} resampled seed triples"
    own = run_counts(table)
    out = outside(own, b)
    head = f"Against the default run's band (docs/method.md §8c, {source})"
    kept = [f"the {cpu} (data/runs/{run})" for run, cpu in reproduces(table, checks)]
    same = [f"Its claims equal those of the default run{'s' * (len(kept) > 1)} kept from {' and '.join(kept)}, to a "
            f"relative {RTOL:g}: the same numbers on the same arithmetic, a known result of these seeds, not a faulty "
            "install."] if kept else []
    if not out:
        return [f"{head}, every count of this run lies inside.", *same]
    told = [fresh_phrase(fresh, b, len(out))] if fresh is not None and len(fresh) else []
    return [f"{head}, this run lies outside in {len(out)} of {len(own)} counts: {'; '.join(out)}.", *told, *same]


def fresh_verdict(inside: int, kept: int, runs: int, coverage: float) -> str:
    """The registered test's state with ``kept`` of its ``runs`` fresh runs in, ``inside`` of them
    inside the band in every count: "passes" once the threshold (:func:`fresh_threshold`) is
    reached, "fails" once the runs left cannot reach it, else "open"."""
    t = fresh_threshold(runs, coverage)
    return "passes" if inside >= t else "fails" if inside + runs - kept < t else "open"
