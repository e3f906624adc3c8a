"""The default run's counts as bands over seed draws and the recorded machines (docs/method.md §8c).

Another CPU is another seed draw, so a count of the default run (a claim's rows that hold,
:data:`COUNTS`) is stated as its band: the minimum and maximum over the pre-registered seed draws
(``data/runs/default-draws``) and each recorded machine's default run. The runs' counts are
package data (:data:`TABLE`, one row per run and count, written by ``python
experiments/answer_table.py --write`` from the committed tables), so an installed run's
findings.md places its own counts against them (:func:`position`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from learnwin.stats.claims import held_counts, verdict_word

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
#: What a draw changes of the default config (its seeds), or what does not reach the claims.
FREE_KEYS = ("seeds", "device", "recovery")
#: The kinds of run a band is taken over, in the words the answer uses.
KINDS = {"draw": "seed draw", "machine": "recorded machine"}
#: The differing config keys :func:`position` names before it counts the rest.
NAMED = 4


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

    def span(self) -> str:
        """"k of n", or "lo-hi of n"."""
        return f"{self.lo} of {self.n}" if self.lo == self.hi else f"{self.lo}-{self.hi} of {self.n}"

    def word_phrase(self) -> str:
        """How often each verdict word comes out: "holds in part in 9 of 10 draws, does not hold in 1"."""
        total = sum(self.runs.values())
        (first, k), *rest = self.words
        return ", ".join([f"{first} in {k} of {total} draws", *(f"{w} in {k}" for w, k in rest)])


def bands(counts: pd.DataFrame) -> dict[str, Band]:
    """The :class:`Band` of each count of a :data:`TABLE`, in :data:`COUNTS` order; every run of a
    count must count the same rows."""
    out = {}
    for name in [c for c in COUNTS if c in set(counts["count"])]:
        g = counts[counts["count"] == name]
        if g["n"].nunique() != 1:
            raise ValueError(f"{name}: the runs count {sorted(set(g['n']))} rows; a band needs the same rows")
        n = int(g["n"].iloc[0])
        words = Counter(verdict_word([int(k)], n) for k in g["k"]).most_common()
        kinds = g["kind"].value_counts()
        out[name] = Band(int(g["k"].min()), int(g["k"].max()), n, words, {k: int(kinds.get(k, 0)) for k in KINDS})
    return out


def read(path: str | Path = TABLE) -> pd.DataFrame:
    """The committed runs' counts (:data:`TABLE`)."""
    return pd.read_csv(path)


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


def position(table: pd.DataFrame, counts: pd.DataFrame, differing: Sequence[str] = ()) -> str:
    """One sentence: where the run's counts (of its verdict ``table``) fall against the bands of
    ``counts`` (a :data:`TABLE`): inside every band, or outside, naming each count outside; or, where
    the run's config ``differing`` from the default experiment's, that no band applies."""
    if differing:
        keys = ", ".join(differing[:NAMED]) + (f" and {len(differing) - NAMED} more" if len(differing) > NAMED else "")
        return (f"This run's config differs from the default experiment's ({keys}): the default run's band "
                "(docs/method.md §8c) does not apply.")
    b = bands(counts)
    runs = next(iter(b.values())).runs
    source = " and ".join(f"{k} {KINDS[kind]}{'s' * (k > 1)}" for kind, k in runs.items() if k)
    own = run_counts(table)
    outside = [f"{name} {k} of {n} rows (band {b[name].span()})" for name, (k, n) in own.items()
               if name in b and not (n == b[name].n and b[name].lo <= k <= b[name].hi)]
    head = f"Against the default run's band (docs/method.md §8c, {source})"
    if not outside:
        return f"{head}, every count of this run lies inside."
    return f"{head}, this run lies outside in {len(outside)} of {len(own)} counts: {'; '.join(outside)}."
