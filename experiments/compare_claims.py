"""Which claim verdicts two runs share, from the pages that experiments/results_tables.py printed.

    python experiments/compare_claims.py PAGE_A PAGE_B

Each page is the markdown output of `python experiments/results_tables.py RESULTS_DIR` (the
committed pages under docs/ are such outputs). The "Claims at a glance" tables of the two pages
are compared cell by cell (claim row x model): the script prints how many cells keep their verdict
(holds / does not hold, docs/method.md §8b) and lists the cells whose verdict differs, with both
k/n counts. Runs of one config on two machines differ in float32 rounding from the first training
step on (docs/results.md, "Across machines"); this tells which verdicts survive that.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from learnwin.stats.claims import markdown

HEADING = "### Claims at a glance"
ROW_KEYS = ["claim", "check", "optimizer", "noise"]


def glance(page: str) -> pd.DataFrame:
    """The page's "Claims at a glance" table, long: one row per (claim row, model) with its cell."""
    lines = page.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(HEADING))
    except StopIteration:
        raise ValueError(f"no '{HEADING}' table on the page") from None
    rows = []
    for line in lines[start + 1:]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    wide = pd.DataFrame(rows[2:], columns=rows[0])  # rows[1] is the |---| rule
    return wide.melt(id_vars=ROW_KEYS, var_name="model", value_name="cell")


def verdict_changes(a: pd.DataFrame, b: pd.DataFrame) -> tuple[int, pd.DataFrame]:
    """(cells in both tables, the cells whose verdict differs with both k/n counts)."""
    both = a.merge(b, on=[*ROW_KEYS, "model"], suffixes=(" A", " B"))
    holds_a, holds_b = (both[f"cell {s}"].str.endswith("✓") for s in "AB")
    return len(both), both[holds_a != holds_b].reset_index(drop=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page_a", type=Path)
    ap.add_argument("page_b", type=Path)
    args = ap.parse_args(argv)
    n, changed = verdict_changes(glance(args.page_a.read_text()), glance(args.page_b.read_text()))
    print(f"{n - len(changed)} of {n} claim cells keep their verdict; {len(changed)} change "
          f"(A = {args.page_a}, B = {args.page_b}):\n")
    if len(changed):
        print(markdown(changed))


if __name__ == "__main__":
    main()
