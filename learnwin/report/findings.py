"""The findings of a run, generated from its verdict table, as markdown (``findings.md``) and HTML
(the report's Claims page) (docs/method.md §8b). Both open with what a reader wants first: the
claim x model pivot of each transport's primary functional (:func:`at_a_glance`) and one plain
sentence per claim with its verdict word (:func:`summary_sentences`); the detail follows as one
compact table per claim (:func:`detail`): k/n seeds per (model, optimizer) and scope (noise,
transport, functional). The verdict words and the rows they count are
learnwin.stats.claims.claim_words's, the rule the README's answer table applies to the recorded
machines' runs. The verdict table is learnwin.stats.claims.to_markdown's. Where the caller gives
it, the last sentences place the run's counts against the default run's band (docs/method.md §8c,
learnwin.stats.band.position).
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from learnwin.infra.io import atomic_path
from learnwin.infra.optimizers import OPTIMIZERS
from learnwin.infra.registry import CELLS
from learnwin.stats.claims import NO_EXPECTATION, NOISE_ANY, claim_words, counted_rows, holds_words, number, to_markdown
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


def _counts(table: pd.DataFrame) -> pd.Series:
    """"k/n" seeds that agree with the expectation, with ✓ where the row holds (k > n/2)."""
    return table["k"].astype(str) + "/" + table["n"].astype(str) + np.where(table["holds"], " ✓", "")


def _model_order(models) -> list[str]:
    """The distinct ``models`` in the registry's order (a model it lacks last)."""
    return sorted(pd.unique(models), key=lambda m: list(CELLS).index(m) if m in CELLS else len(CELLS))


def claims_at_a_glance(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (claim, check, optimizer, noise, transport, functional), one column per model (in
    the registry's order): "k/n" seeds that agree with the expectation, marked ✓ where the row holds
    (k > n/2); a cell without an expectation (not scored) shows its majority verdict in italics."""
    cell = np.where(table["expected"] == NO_EXPECTATION, "*" + table["verdict"].astype(str) + "*", _counts(table))
    wide = table.assign(cell=cell).pivot_table(index=PIVOT_INDEX, columns="model", values="cell",
                                               aggfunc="first", sort=False)
    return wide[_model_order(table["model"])].reset_index()


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


def _factors(rows: pd.DataFrame) -> str:
    """The factors (transport, noise, optimizer) under whose levels ``rows`` hold at different rates."""
    depends = []
    for factor in FACTORS:
        rates = {level: _rate(s) for level, s in rows.groupby(factor, sort=False)}
        if len(rates) > 1 and rows.groupby(factor, sort=False)["holds"].mean().nunique() > 1:
            depends.append(f"{factor} (" + ", ".join(f"{level} {r}" for level, r in rates.items()) + ")")
    return f"; it depends on the {' and the '.join(depends)}" if depends else ""


def summary_sentence(claim: str, g: pd.DataFrame) -> str:
    """One plain sentence for one claim's primary rows: its verdict word and count over the rows
    it counts (learnwin.stats.claims.claim_words: (a) and (b) the learned gates', (c) one per
    transport), the models it holds for everywhere, somewhere or nowhere, and the factors
    (transport, noise, optimizer) under which the counted rows hold at different rates."""
    scored = g[(g["expected"] != NO_EXPECTATION) & (g["n"] > 0)]
    empty = f" ({int((g['n'] == 0).sum())} rows without data)" if (g["n"] == 0).any() else ""
    words = claim_words([g], claim)
    if scored.empty or not words:
        return f"({claim}) {title(claim, g)}: not scored, no expectation or no data for these cells."
    unit = "learned-gate rows" if claim in ("a", "b") else "rows"
    if len(words) == 1:
        (w,) = words.values()
        head = f" {w.word}: {w.ks[0]} of {w.n} {unit} hold"
    else:
        head = ": " + "; ".join(f"{w.word} under the {level} transport, {w.ks[0]} of {w.n} {unit}"
                                for level, w in words.items())
    by_model = scored.groupby("model")["holds"].agg(["sum", "size"]).loc[_model_order(scored["model"])]
    every = [m for m, r in by_model.iterrows() if r["sum"] == r["size"]]
    none = [m for m, r in by_model.iterrows() if r["sum"] == 0]
    some = [m for m in by_model.index if m not in every and m not in none]
    where = "; ".join(f"{label} for {', '.join(ms)}" for label, ms in
                      (("all rows hold", every), ("some rows", some), ("no row", none)) if ms)
    return f"({claim}) {title(claim, g)}{head}{empty}; {where}{_factors(counted_rows(g, claim))}."


def summary_sentences(table: pd.DataFrame) -> list[str]:
    """:func:`summary_sentence` per claim, on the primary functionals, in claim order."""
    main = primary_rows(table)
    return [summary_sentence(c, main[main["claim"] == c]) if (main["claim"] == c).any()
            else f"({c}) {TITLES[c]}: not measured in this run." for c in TITLES]


def _scope_key(scope: tuple[str, str, str]) -> tuple:
    noise, transport, functional = scope
    return noise, transport, functional != PRIMARY.get(transport), functional


def detail(g: pd.DataFrame) -> pd.DataFrame:
    """One claim's rows as one table: a row per (model, optimizer), for claim (c) per (model, check);
    a column per scope (noise, transport and, where a transport has several, functional), each cell
    "k/n" seeds that agree, ✓ where the row holds, and the majority verdict (in italics, unscored,
    where the cell has no expectation); "held": the scopes the row holds under, when there are
    several; the last row counts the rows that hold per scope, and claim (d)'s gives the mean
    slope under it."""
    claim = g["claim"].iloc[0]
    index = ["model", "check" if claim == "c" else "optimizer"]
    scopes = sorted(set(zip(g["noise"], g["transport"], g["functional"])), key=_scope_key)
    several = g.groupby("transport")["functional"].nunique().gt(1)
    names = {s: " ".join([*([] if s[0] == NOISE_ANY else [s[0]]), s[1], *([s[2]] if several[s[1]] else [])])
             for s in scopes}
    scored = g["expected"] != NO_EXPECTATION
    cell = np.where(scored, _counts(g) + " " + g["verdict"].astype(str), "*" + g["verdict"].astype(str) + "*")
    g = g.assign(scope=[names[s] for s in zip(g["noise"], g["transport"], g["functional"])], cell=cell)
    wide = g.pivot_table(index=index, columns="scope", values="cell", aggfunc="first", sort=False)
    wide = wide[[names[s] for s in scopes]].reset_index()
    wide["model"] = pd.Categorical(wide["model"], _model_order(g["model"]))
    wide = wide.sort_values("model", kind="stable").astype({"model": str})
    s = g[scored]
    last = {c: _rate(s[s["scope"] == c]) if (s["scope"] == c).any() else "–" for c in names.values()}
    if len(scopes) > 1:
        held = s.groupby(index, sort=False)["holds"].agg(["sum", "size"])
        wide["held"] = [f"{int(held.loc[k, 'sum'])}/{int(held.loc[k, 'size'])}" if k in held.index else "–"
                        for k in zip(wide["model"], wide[index[1]])]
        last["held"] = ""
    total = [{"model": "rows held", index[1]: "", **last}]
    if claim == "d":
        total.append({"model": "mean slope", index[1]: "", **dict.fromkeys(last, ""),
                      **{c: number(g.loc[g["scope"] == c, "estimate"].mean()) for c in names.values()}})
    return pd.concat([wide, pd.DataFrame(total)], ignore_index=True)


def details(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(heading, :func:`detail`) per claim present in the table, in claim order."""
    return [(f"({c}) {title(c, g)}", detail(g)) for c, g in
            ((c, table[table["claim"] == c]) for c in TITLES) if len(g)]


LEGEND = ("The paper's claims (docs/method.md §8b) on each transport's primary functional: k/n seeds agree "
          "with the expectation, ✓ = the row holds (k > n/2), *italics* = the majority verdict of a cell "
          "without an expectation.")
DETAIL_LEGEND = ("Each claim under every noise definition, transport and functional: k/n seeds agree, ✓ = the "
                 "row holds, then the row's majority verdict; held = the scopes a row holds under; rows held = "
                 "the rows that hold per scope.")


def markdown(table: pd.DataFrame, position: Sequence[str] = ()) -> str:
    """findings.md: the pivot and one plain sentence per claim, and the ``position`` sentences
    against the default run's band where given; then, under their own headings, one table per
    claim (:func:`detail`) and the verdict table."""
    lines = ["# Findings", "", LEGEND, "", md_table(at_a_glance(table)), ""]
    lines += [f"- {s}" for s in [*summary_sentences(table), *position]]
    lines += ["", "## Per transport, noise and functional", "", DETAIL_LEGEND, ""]
    for heading, df in details(table):
        lines += [f"**{heading}**", "", md_table(df), ""]
    return "\n".join([*lines, "## Verdicts", "", to_markdown(table), ""])


def _values(values) -> str:
    return ", ".join(number(v) for v in values)


def _td(value) -> str:
    """A table cell; a "k/n" cell shaded by k/n (red none, green all: the table as a heat map), an
    unscored "*verdict*" in italics."""
    text = "–" if not isinstance(value, str) and pd.isna(value) else str(value)
    counts = re.match(r"(\d+)/(\d+)", text)
    style = ""
    if counts and int(counts[2]):
        style = f' style="background:hsl({120 * int(counts[1]) // int(counts[2])},60%,85%)"'
    if len(text) > 2 and text[0] == text[-1] == "*":
        return f"<td><em>{html.escape(text[1:-1])}</em></td>"
    return f"<td{style}>{html.escape(text)}</td>"


def _html_table(df: pd.DataFrame, **attrs) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(_td(v) for v in r) + "</tr>" for r in df.itertuples(index=False))
    attr = "".join(f' {k}="{v}"' for k, v in attrs.items())
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def to_html(table: pd.DataFrame, position: Sequence[str] = ()) -> str:
    """One self-contained HTML fragment: the pivot, the plain sentences and the ``position``
    sentences (where given) first, then one table per
    claim (the k/n cells shaded as a heat map); the verdict table one click down (a closed <details>)."""
    t = table.assign(**{"k/n": table["k"].astype(str) + "/" + table["n"].astype(str),
                        "holds": holds_words(table, "holds", "fails"),
                        "per-seed values": [_values(v) for v in table["values"]]})
    rows = "\n".join(
        f'<tr class="{r["holds"].replace(" ", "-")}">'
        + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in HTML_COLUMNS) + "</tr>"
        for _, r in t.iterrows())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in HTML_COLUMNS)
    plain = "".join(f"<li>{html.escape(s)}</li>" for s in [*summary_sentences(table), *position])
    per_claim = "".join(f'<h3>{html.escape(h)}</h3>{_html_table(df, **{"class": "claim-detail"})}'
                        for h, df in details(table))
    style = ("<style>.claims{font-family:sans-serif;font-size:12px}.claims table{border-collapse:collapse}"
             ".claims td,.claims th{border:1px solid #ccc;padding:2px 5px;text-align:left}"
             ".claims tr.holds td:nth-child(11){background:#d7f0d7}.claims tr.fails td:nth-child(11)"
             "{background:#f6dada}</style>")
    return (f'{style}<div class="claims"><h2>Claims at a glance</h2><p>{html.escape(LEGEND.replace("*italics*", "italics"))}</p>'
            f'{_html_table(at_a_glance(table), id="claims-glance")}<ul>{plain}</ul>'
            f"<h2>Per transport, noise and functional</h2><p>{html.escape(DETAIL_LEGEND)}</p>{per_claim}"
            f"<details><summary>Every verdict ({len(table)} rows)</summary>"
            f'<div style="overflow-x:auto"><table id="claims-verdicts"><thead><tr>'
            f"{head}</tr></thead><tbody>{rows}</tbody></table></div></details></div>\n")


def write(table: pd.DataFrame, *, findings: str | os.PathLike, html_path: str | os.PathLike,
          position: Sequence[str] = ()) -> None:
    """Write findings.md and the HTML page, each atomically, with the ``position`` sentences."""
    with atomic_path(findings) as tmp:
        tmp.write_text(markdown(table, position))
    with atomic_path(html_path) as tmp:
        tmp.write_text(to_html(table, position))
