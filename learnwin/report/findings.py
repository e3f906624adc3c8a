"""The findings of a run: one sentence per claim, generated from its verdict table, and the table
itself, as markdown (``findings.md``) and HTML (the report's Claims page) (docs/method.md §8b).

:func:`sentences` counts, per claim and per noise definition / transport where they apply, the
rows that hold and names the (model, optimizer) rows under each majority verdict, so each sentence
carries its numbers; the verdict table is learnwin.stats.claims.to_markdown's.
"""

from __future__ import annotations

import html
import os

import pandas as pd

from learnwin.infra.io import atomic_path
from learnwin.stats.claims import NOISE_ANY, number, to_markdown

TITLES = {"a": "Envelope class", "b": "Growth of H_N in N", "c": "Optimizer (AdamW against plain SGD)",
          "d": "Master law"}
#: Columns of the HTML verdict table, in order.
HTML_COLUMNS = ["claim", "check", "model", "optimizer", "noise", "transport", "expected", "verdict", "k/n",
                "holds", "per-seed values"]


def _runs(g: pd.DataFrame) -> str:
    return ", ".join(f"{r.model}/{r.optimizer}" for r in g.itertuples())


def _scope(noise: str, transport: str, several_transports: bool) -> str:
    parts = ([] if noise == NOISE_ANY else [f"{noise} noise"]) + ([f"{transport} transport"] if several_transports else [])
    return f" ({', '.join(parts)})" if parts else ""


def _claim_sentence(claim: str, g: pd.DataFrame, several_transports: bool) -> str:
    """One sentence for one claim: per scope, rows that hold of all, and the rows per verdict."""
    unit = "(model, optimizer) rows" if claim != "c" else "(model, check) rows"
    parts = []
    for (noise, transport), s in g.groupby(["noise", "transport"], sort=True):
        per_verdict = "; ".join(
            f"{verdict} in {_runs(v) if claim != 'c' else ', '.join(f'{r.model} ({r.check})' for r in v.itertuples())}"
            for verdict, v in s.groupby("verdict", sort=True))
        extra = ""
        if claim == "d":
            extra = f"; mean slope {number(s['estimate'].mean())}"
        parts.append(f"{int(s['holds'].sum())} of {len(s)} {unit} hold{_scope(noise, transport, several_transports)}: "
                     f"{per_verdict}{extra}")
    return f"({claim}) {TITLES[claim]}: " + "; ".join(parts) + "."


def sentences(table: pd.DataFrame) -> list[str]:
    """One sentence per claim present in the verdict table (learnwin.stats.claims.COLUMNS), in
    claim order; a claim without rows (e.g. (c) with one optimizer) says so."""
    several = table["transport"].nunique() > 1
    out = []
    for claim in TITLES:
        g = table[table["claim"] == claim]
        out.append(_claim_sentence(claim, g, several) if len(g)
                   else f"({claim}) {TITLES[claim]}: not measured in this run.")
    return out


def markdown(table: pd.DataFrame) -> str:
    """findings.md: the sentences as a list, then the verdict table."""
    lines = ["# Findings", "", "Claims of docs/method.md §8b; a row holds when more than half of its seeds "
             "agree with the expectation (k/n).", ""]
    lines += [f"- {s}" for s in sentences(table)]
    return "\n".join([*lines, "", "## Verdicts", "", to_markdown(table), ""])


def _values(values) -> str:
    return ", ".join(number(v) for v in values)


def to_html(table: pd.DataFrame) -> str:
    """The sentences and the verdict table as one self-contained HTML fragment."""
    t = table.assign(**{"k/n": table["k"].astype(str) + "/" + table["n"].astype(str),
                        "holds": table["holds"].map({True: "holds", False: "fails"}),
                        "per-seed values": [_values(v) for v in table["values"]]})
    rows = "\n".join(
        f'<tr class="{"holds" if r["holds"] == "holds" else "fails"}">'
        + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in HTML_COLUMNS) + "</tr>"
        for _, r in t.iterrows())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in HTML_COLUMNS)
    items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences(table))
    style = ("<style>.claims{font-family:sans-serif;font-size:12px}.claims table{border-collapse:collapse}"
             ".claims td,.claims th{border:1px solid #ccc;padding:2px 5px;text-align:left}"
             ".claims tr.holds td:nth-child(10){background:#d7f0d7}.claims tr.fails td:nth-child(10)"
             "{background:#f6dada}</style>")
    return (f'{style}<div class="claims"><h2>Claims: verdicts</h2><ul>{items}</ul>'
            f'<div style="overflow-x:auto"><table id="claims-verdicts"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div></div>\n")


def write(table: pd.DataFrame, *, findings: str | os.PathLike, html_path: str | os.PathLike) -> None:
    """Write findings.md and the HTML page, each atomically."""
    with atomic_path(findings) as tmp:
        tmp.write_text(markdown(table))
    with atomic_path(html_path) as tmp:
        tmp.write_text(to_html(table))
