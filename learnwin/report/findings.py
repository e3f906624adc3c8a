"""The findings of a run, generated from its verdict table, as markdown (``findings.md``) and HTML
(the report's Claims page) (docs/method.md §8b). Both open with what a reader wants first: the
claim x model pivot of each transport's primary functional (:func:`at_a_glance`) and one plain
sentence per claim (:func:`summary_sentences`); the detail follows under its own heading.

:func:`sentences` counts, per claim and per noise definition / transport / functional where they
apply, the rows that hold and names the (model, optimizer) rows under each majority verdict, so each
sentence carries its numbers; for a claim measured under several envelope functionals
(docs/method.md §8b) it then says for which rows the verdict holds under all of them, under none, or
under which ones only (:func:`robustness`). The verdict table is learnwin.stats.claims.to_markdown's.
"""

from __future__ import annotations

import html
import os

import numpy as np
import pandas as pd

from learnwin.infra.io import atomic_path
from learnwin.infra.optimizers import OPTIMIZERS
from learnwin.infra.registry import CELLS
from learnwin.stats.claims import NO_EXPECTATION, NOISE_ANY, holds_words, number, to_markdown
from learnwin.stats.claims import markdown as md_table
from learnwin.stats.decay import PRIMARY

TITLES = {"a": "Envelope class", "b": "Growth of H_N in N", "c": "Optimizer", "d": "Master law"}
#: Columns of the HTML verdict table, in order.
HTML_COLUMNS = ["claim", "check", "model", "optimizer", "noise", "transport", "functional", "expected",
                "verdict", "k/n", "holds", "per-seed values"]


#: The rows of the pivot, one per claim check and scope; the models are its columns.
PIVOT_INDEX = ["claim", "check", "optimizer", "noise", "transport", "functional"]
#: The factors a plain sentence says a claim depends on, when its rows hold at different rates.
FACTORS = ("transport", "noise", "optimizer")


def claims_at_a_glance(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (claim, check, optimizer, noise, transport, functional), one column per model (in
    the registry's order): "k/n" seeds that agree with the expectation, marked ✓ where the row holds
    (k > n/2); a cell without an expectation (not scored) shows its majority verdict in italics."""
    scored = table["k"].astype(str) + "/" + table["n"].astype(str) + np.where(table["holds"], " ✓", "")
    cell = np.where(table["expected"] == NO_EXPECTATION, "*" + table["verdict"].astype(str) + "*", scored)
    wide = table.assign(cell=cell).pivot_table(index=PIVOT_INDEX, columns="model", values="cell",
                                               aggfunc="first", sort=False)
    models = pd.unique(table["model"])
    return wide[sorted(models, key=lambda m: list(CELLS).index(m) if m in CELLS else len(CELLS))].reset_index()


def primary_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The verdicts on each transport's primary functional (learnwin.stats.decay.PRIMARY)."""
    return table[table["functional"] == table["transport"].map(PRIMARY)]


def at_a_glance(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`claims_at_a_glance` of the primary functionals, without the functional column."""
    return claims_at_a_glance(primary_rows(table)).drop(columns="functional")


def _rate(s: pd.DataFrame) -> str:
    return f"{int(s['holds'].sum())}/{len(s)}"


def title(claim: str, g: pd.DataFrame) -> str:
    """The claim's title; claim (c)'s names the optimizers its rows compare (e.g. "Optimizer (AdamW
    against SGD with momentum)")."""
    if claim != "c" or g.empty:
        return TITLES[claim]
    pairs = [" against ".join((OPTIMIZERS[o].words if o in OPTIMIZERS else o) for o in pair.split(" vs "))
             for pair in pd.unique(g["optimizer"])]
    return f"{TITLES[claim]} ({'; '.join(pairs)})"


def summary_sentence(claim: str, g: pd.DataFrame) -> str:
    """One plain sentence for one claim's primary rows: how many hold, for which models everywhere,
    somewhere or nowhere, and the factors (transport, noise, optimizer) under which they hold at
    different rates."""
    scored = g[(g["expected"] != NO_EXPECTATION) & (g["n"] > 0)]
    empty = f" ({int((g['n'] == 0).sum())} rows without data)" if (g["n"] == 0).any() else ""
    if scored.empty:
        return f"({claim}) {title(claim, g)}: not scored, no expectation or no data for these cells."
    by_model = scored.groupby("model", sort=False)["holds"].agg(["sum", "size"])
    every = [m for m, r in by_model.iterrows() if r["sum"] == r["size"]]
    none = [m for m, r in by_model.iterrows() if r["sum"] == 0]
    some = [m for m in by_model.index if m not in every and m not in none]
    where = [f"{label} for {', '.join(ms)}" for label, ms in
             (("in every row", every), ("in some", some), ("in none", none)) if ms]
    depends = []
    for factor in FACTORS:
        rates = {level: _rate(s) for level, s in scored.groupby(factor, sort=False)}
        fractions = {scored.loc[scored[factor] == level, "holds"].mean() for level in rates}
        if len(rates) > 1 and len(fractions) > 1:
            depends.append(f"{factor} (" + ", ".join(f"{level} {r}" for level, r in rates.items()) + ")")
    verdict = ("holds" if scored["holds"].all() else "does not hold" if not scored["holds"].any()
               else "holds in part")
    if depends:
        tail = f"; it depends on the {' and the '.join(depends)}"
    elif len(scored) > 1:
        varied = ", ".join(f for f in FACTORS if scored[f].nunique() > 1)
        tail = f"; the same under every {varied or 'scope'}"
    else:
        tail = ""
    return f"({claim}) {title(claim, g)} {verdict}: {_rate(scored)} rows{empty}, {'; '.join(where)}{tail}."


def summary_sentences(table: pd.DataFrame) -> list[str]:
    """:func:`summary_sentence` per claim, on the primary functionals, in claim order."""
    main = primary_rows(table)
    return [summary_sentence(c, main[main["claim"] == c]) if (main["claim"] == c).any()
            else f"({c}) {TITLES[c]}: not measured in this run." for c in TITLES]


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
    return f"({claim}) {title(claim, g)}: " + "; ".join(parts) + "." + robustness(g)


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


LEGEND = ("The paper's claims (docs/method.md §8b) on each transport's primary functional: k/n seeds agree "
          "with the expectation, ✓ = the row holds (k > n/2), *italics* = the majority verdict of a cell "
          "without an expectation.")


def markdown(table: pd.DataFrame) -> str:
    """findings.md: the pivot and one plain sentence per claim; then, under their own headings, the
    sentences per functional and the verdict table."""
    lines = ["# Findings", "", LEGEND, "", md_table(at_a_glance(table)), ""]
    lines += [f"- {s}" for s in summary_sentences(table)]
    lines += ["", "## Per transport, noise and functional", ""] + [f"- {s}" for s in sentences(table)]
    return "\n".join([*lines, "", "## Verdicts", "", to_markdown(table), ""])


def _values(values) -> str:
    return ", ".join(number(v) for v in values)


def _html_table(df: pd.DataFrame, **attrs) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>"
                   for r in df.itertuples(index=False))
    attr = "".join(f' {k}="{v}"' for k, v in attrs.items())
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def to_html(table: pd.DataFrame) -> str:
    """One self-contained HTML fragment: the pivot and the plain sentences first; the sentences per
    functional and the verdict table one click down (a closed <details>)."""
    t = table.assign(**{"k/n": table["k"].astype(str) + "/" + table["n"].astype(str),
                        "holds": holds_words(table, "holds", "fails"),
                        "per-seed values": [_values(v) for v in table["values"]]})
    rows = "\n".join(
        f'<tr class="{r["holds"].replace(" ", "-")}">'
        + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in HTML_COLUMNS) + "</tr>"
        for _, r in t.iterrows())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in HTML_COLUMNS)
    items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences(table))
    plain = "".join(f"<li>{html.escape(s)}</li>" for s in summary_sentences(table))
    style = ("<style>.claims{font-family:sans-serif;font-size:12px}.claims table{border-collapse:collapse}"
             ".claims td,.claims th{border:1px solid #ccc;padding:2px 5px;text-align:left}"
             ".claims tr.holds td:nth-child(11){background:#d7f0d7}.claims tr.fails td:nth-child(11)"
             "{background:#f6dada}</style>")
    return (f'{style}<div class="claims"><h2>Claims at a glance</h2><p>{html.escape(LEGEND)}</p>'
            f'{_html_table(at_a_glance(table), id="claims-glance")}<ul>{plain}</ul>'
            f"<details><summary>Per transport, noise and functional, and every verdict ({len(table)} rows)"
            f'</summary><ul>{items}</ul><div style="overflow-x:auto"><table id="claims-verdicts"><thead><tr>'
            f"{head}</tr></thead><tbody>{rows}</tbody></table></div></details></div>\n")


def write(table: pd.DataFrame, *, findings: str | os.PathLike, html_path: str | os.PathLike) -> None:
    """Write findings.md and the HTML page, each atomically."""
    with atomic_path(findings) as tmp:
        tmp.write_text(markdown(table))
    with atomic_path(html_path) as tmp:
        tmp.write_text(to_html(table))
