"""The Markdown tables of the committed docs pages, read back as DataFrames (the tests that
recompute a page's verdicts from the values it prints)."""

from __future__ import annotations

import itertools

import pandas as pd


def table_after(text: str, heading: str) -> pd.DataFrame:
    """The first Markdown table after ``heading`` in ``text``: its header row as the columns, its
    body rows (the separator row dropped) as strings."""
    lines = text.split(heading, 1)[1].splitlines()
    rows = list(itertools.takewhile(lambda s: s.startswith("|"),
                                    itertools.dropwhile(lambda s: not s.startswith("|"), lines)))
    cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
    return pd.DataFrame(cells[2:], columns=cells[0])
