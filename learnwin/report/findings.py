"""The findings of a run: one sentence per claim, generated from its verdict table, and the table
itself, as markdown (``findings.md``) and HTML (the report's Claims page) (docs/method.md §8b).

:func:`sentences` counts, per claim and per noise definition / transport / functional where they
apply, the rows that hold and names the (model, optimizer) rows under each majority verdict, so each
sentence carries its numbers; for a claim measured under several envelope functionals
(docs/method.md §8b) it then says for which rows the verdict holds under all of them, under none, or
under which ones only (:func:`robustness`). The verdict table is learnwin.stats.claims.to_markdown's.
"""

from __future__ import annotations

import html
import os

import pandas as pd

from learnwin.infra.io import atomic_path
from learnwin.stats.claims import NO_EXPECTATION, NOISE_ANY, holds_words, number, to_markdown

TITLES = {"a": "Envelope class", "b": "Growth of H_N in N", "c": "Optimizer (AdamW against plain SGD)",
          "d": "Master law"}
#: Columns of the HTML verdict table, in order.
HTML_COLUMNS = ["claim", "check", "model", "optimizer", "noise", "transport", "functional", "expected",
                "verdict", "k/n", "holds", "per-seed values"]


def _runs(g: pd.DataFrame) -> str:
    return ", ".join(f"{r.model}/{r.optimizer}" for r in g.itertuples())


def _scope(noise: str, transport: str, several_transports: bool) -> str:
    parts = ([] if noise == NOISE_ANY else [f"{noise} noise"]) + ([f"{transport} transport"] if several_transports else [])
    return f" ({', '.join(parts)})" if parts else ""


def _name(r) -> str:
    return f"{r.model} ({r.check})" if r.claim == "c" else f"{r.model}/{r.optimizer}"


def robustness(g: pd.DataFrame) -> str:
    """Per (check, model, optimizer, noise) of one claim's rows: whether its verdict holds under
    every envelope functional (docs/method.md §8b), under none, or which ones it depends on."""
    if g["functional"].nunique() < 2:
        return ""
    every, none, some = [], [], []
    for (*_, noise), s in g.groupby(["check", "model", "optimizer", "noise"], sort=False):
        held = [f"{r.transport} {r.functional}" for r in s.itertuples() if r.holds]
        name = _name(s.iloc[0]) + ("" if noise == NOISE_ANY else f" ({noise})")
        if len(held) == len(s):
            every.append(name)
        elif not held:
            none.append(name)
        else:
            some.append(f"{name} only under {', '.join(held)}")
    parts = ([f"holds under every functional for {', '.join(every)}"] if every else []) + (
        [f"fails under every functional for {', '.join(none)}"] if none else []) + (
        [f"depends on the functional: {'; '.join(some)}"] if some else [])
    return " Across functionals, the verdict " + "; it ".join(parts) + "."


def _claim_sentence(claim: str, g: pd.DataFrame, several_transports: bool) -> str:
    """One sentence for one claim: per scope (noise, transport, functional), rows that hold of all,
    and the rows per verdict; then, for claims measured under several functionals, :func:`robustness`."""
    unit = "(model, optimizer) rows" if claim != "c" else "(model, check) rows"
    several_functionals = g["functional"].nunique() > 1
    parts = []
    for (noise, transport, functional), s in g.groupby(["noise", "transport", "functional"], sort=True):
        per_verdict = "; ".join(f"{verdict} in {', '.join(_name(r) for r in v.itertuples())}"
                                for verdict, v in s.groupby("verdict", sort=True))
        extra = ""
        if claim == "d":
            extra = f"; mean slope {number(s['estimate'].mean())}"
        scope = _scope(noise, transport, several_transports)
        if several_functionals:
            scope = scope[:-1] + f", {functional})" if scope else f" ({transport} {functional})"
        scored = s[s["expected"] != NO_EXPECTATION]  # a cell without an expectation: reported, not scored
        held = (f"{int(scored['holds'].sum())} of {len(scored)} {unit} hold{scope}" if len(scored)
                else f"not scored{scope}, no expectation for these cells")
        parts.append(f"{held}: {per_verdict}{extra}")
    return f"({claim}) {TITLES[claim]}: " + "; ".join(parts) + "." + robustness(g)


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
                        "holds": holds_words(table, "holds", "fails"),
                        "per-seed values": [_values(v) for v in table["values"]]})
    rows = "\n".join(
        f'<tr class="{r["holds"].replace(" ", "-")}">'
        + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in HTML_COLUMNS) + "</tr>"
        for _, r in t.iterrows())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in HTML_COLUMNS)
    items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences(table))
    style = ("<style>.claims{font-family:sans-serif;font-size:12px}.claims table{border-collapse:collapse}"
             ".claims td,.claims th{border:1px solid #ccc;padding:2px 5px;text-align:left}"
             ".claims tr.holds td:nth-child(11){background:#d7f0d7}.claims tr.fails td:nth-child(11)"
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
