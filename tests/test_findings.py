"""learnwin.report.findings: the sentences and the per-claim tables carry the counts of the verdict
table (docs/method.md §8b), on per-seed tables built to hold every claim or to fail every one, and on
the synthetic run of tests/synthetic_claims.py whose verdicts are known row by row; their verdict
words are those the README's answer table (experiments/answer_table.py) gives the same run, and no
paragraph or bullet of findings.md or the Claims page runs over 80 words."""

import html
import re
from pathlib import Path

import numpy as np
import pandas as pd
import prose
import pytest
from workflow_helpers import experiment_script

from learnwin.infra import io, layout
from learnwin.report import findings
from learnwin.stats import band
from learnwin.stats.claims import claim_words, verdicts

ROOT = Path(__file__).resolve().parents[1]

SEEDS = [1, 2, 3]
MODELS = ["const", "gru"]


def _per_seed(hold: bool) -> dict[str, pd.DataFrame]:
    """Per-seed tables of 2 models x (adamw, sgd) x 3 seeds where every claim holds (or fails)."""
    runs = [dict(model=m, optimizer=o, seed=s) for m in MODELS for o in ("adamw", "sgd") for s in SEEDS]
    power = {"const": not hold, "gru": hold}  # the expectation: const exponential, gru power-law-like
    a = pd.DataFrame([dict(**r, w_power=0.9 if power[r["model"]] else 0.1, w_tempered=0.0,
                           w_exp=0.1 if power[r["model"]] else 0.9, law="power",
                           **{"class": "power-law-like" if power[r["model"]] else "exponential"}) for r in runs])
    growth = {"const": "logarithmic", "gru": "power"} if hold else {"const": "power", "gru": "logarithmic"}
    b = pd.DataFrame([dict(**r, noise=nz, growth=growth[r["model"]], censored=False, c_power=0.4)
                      for r in runs for nz in ("per_lag", "pooled")])
    wide = {("adamw", True): 3.0, ("sgd", True): 1.0, ("adamw", False): 1.0, ("sgd", False): 3.0}
    c = pd.DataFrame([dict(**r, log_tau_iqr=wide[(r["optimizer"], hold)], tau_env=10 * wide[(r["optimizer"], hold)],
                           val_r2=0.5) for r in runs])
    slope = 1.0 if hold else 0.3
    d = pd.DataFrame([dict(**r, noise=nz, slope=slope, slope_lo=slope - 0.1, slope_hi=slope + 0.1)
                      for r in runs for nz in ("per_lag", "pooled")])
    return dict(a=a, b=b, c=c, d=d)


def _verdicts(per_seed, transport="diagonal", functional="gamma"):
    return verdicts({k: t.assign(transport=transport, functional=functional) for k, t in per_seed.items()})


@pytest.mark.parametrize("sgd, words", [("sgd", "plain SGD"), ("sgd_momentum", "SGD with momentum")])
def test_claim_c_names_the_optimizers_it_compared(sgd, words):
    """Claim (c)'s sentences name the run's optimizers (the default compares AdamW with SGD with
    momentum, not plain SGD), in the detail and in the plain summary."""
    per_seed = {k: t.assign(optimizer=t["optimizer"].replace("sgd", sgd)) for k, t in _per_seed(True).items()}
    table = _verdicts(per_seed)
    assert set(table.loc[table["claim"] == "c", "optimizer"]) == {f"adamw vs {sgd}"}
    heading = findings.details(table)[2][0]
    assert heading == f"(c) Optimizer (AdamW against {words})"
    assert findings.summary_sentences(table)[2].startswith(f"(c) Optimizer (AdamW against {words}) holds: 4 of 4")
    assert f"**{heading}**" in findings.markdown(table)


def _rows(df: pd.DataFrame) -> list[list[str]]:
    return [[str(v) for v in r] for r in df.itertuples(index=False)]


@pytest.mark.parametrize("hold", [True, False])
def test_every_claim_holds_or_fails_and_the_tables_count_it(hold):
    table = _verdicts(_per_seed(hold))
    assert len(table) == 4 + 8 + 4 + 8  # a: 4 runs; b: 4 x 2 noises; c: 2 models x 2 checks; d: 4 x 2
    assert (table["holds"] == hold).all() and (table["k"] == (3 if hold else 0)).all() and (table["n"] == 3).all()
    (ha, a), (hb, b), (hc, c), (hd, d) = findings.details(table)
    assert (ha, hb, hc, hd) == ("(a) Envelope class", "(b) Growth of H_N in N", "(c) Optimizer (AdamW against "
                                "plain SGD)", "(d) Master law")
    k, tick = ("3/3", " ✓") if hold else ("0/3", "")
    exp, power = ("exponential", "power-law-like")[::1 if hold else -1]
    assert list(a.columns) == ["model", "optimizer", "diagonal"]  # one scope: no "held" column
    assert _rows(a) == [["const", "adamw", f"{k}{tick} {exp}"], ["const", "sgd", f"{k}{tick} {exp}"],
                        ["gru", "adamw", f"{k}{tick} {power}"], ["gru", "sgd", f"{k}{tick} {power}"],
                        ["rows held", "", "4/4" if hold else "0/4"]]
    assert list(b.columns) == ["model", "optimizer", "per_lag diagonal", "pooled diagonal", "held"]
    log, pw = ("logarithmic", "power")[::1 if hold else -1]
    assert _rows(b)[0] == ["const", "adamw", f"{k}{tick} {log}", f"{k}{tick} {log}", "2/2" if hold else "0/2"]
    assert _rows(b)[3] == ["gru", "sgd", f"{k}{tick} {pw}", f"{k}{tick} {pw}", "2/2" if hold else "0/2"]
    assert list(c.columns) == ["model", "check", "diagonal"]
    not_ = "" if hold else "not "
    assert _rows(c) == [["const", "log tau_q IQR", f"{k}{tick} adamw {not_}broader"],
                        ["const", "tau_env", f"{k}{tick} adamw {not_}slower"],
                        ["gru", "log tau_q IQR", f"{k}{tick} adamw {not_}broader"],
                        ["gru", "tau_env", f"{k}{tick} adamw {not_}slower"], ["rows held", "", "4/4" if hold else "0/4"]]
    band = "within band" if hold else "excludes 1"
    assert _rows(d)[1] == ["const", "sgd", f"{k}{tick} {band}", f"{k}{tick} {band}", "2/2" if hold else "0/2"]
    slope = "1.00" if hold else "0.30"
    assert _rows(d)[-2:] == [["rows held", "", *(["4/4"] * 2 if hold else ["0/4"] * 2), ""],
                             ["mean slope", "", slope, slope, ""]]
    page = findings.to_html(table)
    assert page.count('<tr class="holds">') == (len(table) if hold else 0)
    assert page.count('<tr class="fails">') == (0 if hold else len(table))
    assert page.count('class="claim-detail"') == 4
    shade = "hsl(120,60%,85%)" if hold else "hsl(0,60%,85%)"  # the heat map: green all, red none
    assert f'<td style="background:{shade}">{k}{tick} {band}</td>' in page


def test_scopes_are_columns_with_the_functional_named_where_a_transport_has_several():
    one = _verdicts(_per_seed(True))
    two = pd.concat([one, _verdicts(_per_seed(False), "exact", "signal")], ignore_index=True)
    a = findings.details(two)[0][1]
    assert list(a.columns) == ["model", "optimizer", "diagonal", "exact", "held"]
    assert _rows(a)[0] == ["const", "adamw", "3/3 ✓ exponential", "0/3 power-law-like", "1/2"]
    assert _rows(a)[-1] == ["rows held", "", "4/4", "0/4", ""]
    three = pd.concat([two, _verdicts(_per_seed(True), "exact", "norm")], ignore_index=True)
    a = findings.details(three)[0][1]
    assert list(a.columns) == ["model", "optimizer", "diagonal", "exact signal", "exact norm", "held"]


def test_the_held_column_says_under_how_many_functionals_a_row_holds():
    """Claim (a) under three functionals of the exact transport: const/gru hold under signal and
    norm; under diag_entries const becomes power-law-like (fails) while gru still holds. The table
    says gru holds under every functional (3/3) and const under two (2/3)."""
    holds, fails = _per_seed(True), _per_seed(False)
    parts = [_verdicts(holds, "exact", "signal"), _verdicts(holds, "exact", "norm")]
    mixed = {k: t.copy() for k, t in holds.items()}
    const = mixed["a"]["model"] == "const"
    mixed["a"].loc[const] = fails["a"].loc[const].to_numpy()
    parts.append(_verdicts(mixed, "exact", "diag_entries"))
    a = findings.details(pd.concat(parts, ignore_index=True))[0][1]
    assert list(a.columns) == ["model", "optimizer", "exact signal", "exact diag_entries", "exact norm", "held"]
    assert _rows(a) == [["const", "adamw", "3/3 ✓ exponential", "0/3 power-law-like", "3/3 ✓ exponential", "2/3"],
                        ["const", "sgd", "3/3 ✓ exponential", "0/3 power-law-like", "3/3 ✓ exponential", "2/3"],
                        ["gru", "adamw", *["3/3 ✓ power-law-like"] * 3, "3/3"],
                        ["gru", "sgd", *["3/3 ✓ power-law-like"] * 3, "3/3"],
                        ["rows held", "", "4/4", "2/4", "4/4", ""]]


def test_the_tables_keep_the_noise_definitions_apart():
    """Claim (b) under two transports (one functional each) and two noise definitions: a row that
    holds under per_lag on both transports but under pooled on the diagonal one only holds under
    three of its four scopes, each its own column."""
    holds, fails = _per_seed(True), _per_seed(False)
    mixed = {k: t.copy() for k, t in holds.items()}
    pooled = mixed["b"]["noise"] == "pooled"
    mixed["b"].loc[pooled] = fails["b"].loc[pooled].to_numpy()
    table = pd.concat([_verdicts(holds, "diagonal", "gamma"), _verdicts(mixed, "exact", "signal")],
                      ignore_index=True)
    b = findings.details(table)[1][1]
    assert list(b.columns) == ["model", "optimizer", "per_lag diagonal", "per_lag exact", "pooled diagonal",
                               "pooled exact", "held"]
    assert _rows(b)[0] == ["const", "adamw", "3/3 ✓ logarithmic", "3/3 ✓ logarithmic", "3/3 ✓ logarithmic",
                           "0/3 power", "3/4"]


def test_findings_of_the_synthetic_run(tmp_path):
    from synthetic_claims import write_claim_run

    write_claim_run(tmp_path)
    md = layout.under(tmp_path / "results", layout.CLAIMS["findings"]).read_text()
    # expected_claims(): a 4/4; b 4/4 per_lag, 0/4 pooled; c 2/4 (gru's); d 0/4 per_lag, 3/4 pooled
    assert "- (a) Envelope class holds: 2 of 2 learned-gate rows hold; all rows hold for const, gru." in md
    assert ("**(b) Growth of H_N in N**\n\n| model | optimizer | per_lag diagonal | pooled diagonal | held |\n"
            "|---|---|---|---|---|\n| const | adamw | 2/2 ✓ logarithmic | 0/2 censored | 1/2 |") in md
    assert "| rows held |  | 4/4 | 0/4 |  |" in md
    assert "- (c) Optimizer (AdamW against plain SGD) holds in part: 2 of 4 rows hold;" in md
    assert "| gru | sgd | 0/2 excludes 1 | 1/2 split | 0/2 |\n| rows held |  | 0/4 | 3/4 |  |\n| mean slope |" in md
    assert "| d | master slope CI | gru | sgd | pooled | diagonal | gamma | within band | split | 1/2 | no |" in md
    page = layout.under(tmp_path / "results", layout.CLAIMS["html"]).read_text()
    assert page.count('<tr class="holds">') == 13 and page.count('<tr class="fails">') == 11


@pytest.mark.parametrize("hold", [True, False])
def test_findings_open_with_the_pivot_and_one_plain_sentence_per_claim(hold):
    table = _verdicts(_per_seed(hold))
    a, b, c, d = findings.summary_sentences(table)
    if hold:
        assert a == "(a) Envelope class holds: 2 of 2 learned-gate rows hold; all rows hold for const, gru."
        assert d == "(d) Master law holds: 8 of 8 rows hold; all rows hold for const, gru."
    else:
        assert b == "(b) Growth of H_N in N does not hold: 0 of 4 learned-gate rows hold; no row for const, gru."
    head = findings.markdown(table).splitlines()[:40]
    first = next(i for i, line in enumerate(head) if line.startswith("| "))
    pivot = head[first: head.index("", first)]  # the first table
    assert pivot[0] == "| claim | check | optimizer | noise | transport | const | gru |"
    assert len(pivot) == 2 + 12  # header, rule, one row per (claim, check, optimizer, noise)
    assert all(("✓" in line) == hold for line in pivot[2:])
    plain = head[first + len(pivot) + 1: first + len(pivot) + 5]  # right after the pivot
    assert [line[:4] for line in plain] == ["- (a", "- (b", "- (c", "- (d"]
    assert plain == [f"- {s}" for s in (a, b, c, d)]
    page = findings.to_html(table)
    assert (page.index('id="claims-glance"') < page.index('class="claim-detail"') < page.index("<details>")
            < page.index('id="claims-verdicts"'))


def test_a_plain_sentence_names_what_the_claim_depends_on():
    per_seed = _per_seed(True)
    exact = _per_seed(False)
    table = pd.concat([_verdicts(per_seed), _verdicts(exact, "exact", "signal")], ignore_index=True)
    a = findings.summary_sentences(table)[0]
    assert a == ("(a) Envelope class holds in part: 2 of 4 learned-gate rows hold; some rows for const, gru; it "
                 "depends on the transport (diagonal 2/2, exact 0/2).")
    c = findings.summary_sentences(table)[2]  # claim (c): one verdict word per transport
    assert c.startswith("(c) Optimizer (AdamW against plain SGD): holds under the diagonal transport, 4 of 4 rows; "
                        "does not hold under the exact transport, 0 of 4 rows; some rows for const, gru")
    no_data = table.assign(n=0)
    assert findings.summary_sentences(no_data)[3] == (
        "(d) Master law: not scored, no expectation or no data for these cells.")


@pytest.mark.slow
def test_the_first_screen_of_a_run_is_the_pivot_and_the_plain_sentences(smoke_run):
    """`head -40` of the run's findings.md: the pivot of the run's claims and one sentence per claim."""
    head = (smoke_run / layout.CLAIMS["findings"]).read_text().splitlines()[:40]
    table = io.read_table(smoke_run / layout.CLAIMS["parquet"], "claims")
    glance = findings.at_a_glance(table)
    first = head.index(next(line for line in head if line.startswith("| claim |")))
    assert len(head) >= first + 2 + len(glance) + 1 + 4
    rows = head[first + 2: first + 2 + len(glance)]
    assert [r.split(" | ")[:5] for r in rows] == [["| " + str(v[0]), *map(str, v[1:5])] for v in glance.values]
    plain = head[first + 2 + len(glance) + 1:][:4]
    assert plain == [f"- {s}" for s in findings.summary_sentences(table)]
    assert all(len(s.split()) <= 60 for s in plain)  # short: about a line each
    md = (smoke_run / layout.CLAIMS["findings"]).read_text()
    assert prose.too_long(prose.markdown_blocks(md)) == []
    assert prose.too_long(prose.html_blocks((smoke_run / layout.CLAIMS["html"]).read_text())) == []


# ---- one verdict vocabulary: findings.md says what the README's answer table says of the same run ----

answer_table = experiment_script("answer_table")
WORDS = r"\b(holds in part|does not hold|holds)\b"


def findings_words(md: str) -> dict[str, list[str]]:
    """The verdict words of each claim's plain sentence in findings.md, in order."""
    bullets = {line[3]: line for line in md.splitlines() if re.match(r"- \([abcd]\) ", line)}
    return {c: re.findall(WORDS, b) for c, b in bullets.items()}


def _only(table: pd.DataFrame, models) -> pd.DataFrame:
    """The run's table with the rows of ``models`` holding (k = n) and every other row failing (k = 0)."""
    hold = table["model"].isin(models)
    return table.assign(holds=hold, k=np.where(hold, table["n"], 0))


@pytest.mark.parametrize("case", ["as built", "only const holds", "every row holds", "two transports"])
def test_findings_use_the_readme_verdict_words(tmp_path, capsys, case):
    """findings.md's verdict word per claim is the one experiments/answer_table.py gives the run's
    results page (its claims table read back, as the README's rows are made). "only const holds" is
    the case where counting every model's rows (const's expectation, exponential, is met) would say
    "holds in part" where the README's rule, on the learned gates, says "does not hold"."""
    from synthetic_claims import write_claim_run

    write_claim_run(tmp_path)
    results = tmp_path / "results"
    table = io.read_table(layout.under(results, layout.CLAIMS["parquet"]), "claims")
    table = {"as built": table, "only const holds": _only(table, ["const"]),
             "every row holds": _only(table, ["const", "gru"]),
             "two transports": pd.concat([table, _only(table, ["const", "gru"]).assign(transport="exact", functional="signal")],
                                         ignore_index=True)}[case]
    io.write_table(table, layout.under(results, layout.CLAIMS["parquet"]), "claims")
    findings.write(table, findings=layout.under(results, layout.CLAIMS["findings"]),
                   html_path=layout.under(results, layout.CLAIMS["html"]))
    experiment_script("results_tables").main([str(results)])
    run = answer_table.glance(capsys.readouterr().out)  # the page's claims table, as answer_table reads it
    readme = {c: [w.word for w in claim_words([run], c).values()] for c in "abcd"}
    have = findings_words(layout.under(results, layout.CLAIMS["findings"]).read_text())
    assert have == readme
    assert {"as built": ["holds", "holds in part", "holds in part", "holds in part"],
            "only const holds": ["does not hold", "does not hold", "holds in part", "holds in part"], "every row holds": ["holds"] * 4,
            "two transports": ["holds", "holds in part", "holds in part", "holds in part"],
            }[case] == [w[0] for w in readme.values()]
    if case == "two transports":
        assert readme["c"] == ["holds in part", "holds"]  # one word per transport: diagonal, exact


# ---- no paragraph or bullet over 80 words, in findings.md and on the Claims page ----

def _big_table() -> pd.DataFrame:
    """A run's verdict table as wide as the default's: five models, two transports, the exact one
    under three functionals, rows that hold at random (fixed seed)."""
    parts = []
    for transport, functional in (("diagonal", "gamma"), ("exact", "signal"), ("exact", "norm"),
                                  ("exact", "diag_entries")):
        for pair in (("const", "gru"), ("shared", "diag"), ("lstm", "lstm")):
            t = _verdicts(_per_seed(True), transport, functional)
            parts.append(t.assign(model=t["model"].map(dict(zip(MODELS, pair)))).drop_duplicates(
                ["claim", "check", "model", "optimizer", "noise"]))
    table = pd.concat(parts, ignore_index=True)
    k = np.random.default_rng(3).integers(0, 4, len(table))
    return table.assign(k=k, holds=k > 1.5)


def test_no_paragraph_or_bullet_runs_over_80_words(tmp_path):
    from synthetic_claims import write_claim_run

    write_claim_run(tmp_path)
    res = tmp_path / "results"
    for md, page in ((layout.under(res, layout.CLAIMS["findings"]).read_text(),
                      layout.under(res, layout.CLAIMS["html"]).read_text()),
                     (findings.markdown(_big_table()), findings.to_html(_big_table()))):
        blocks, items = prose.markdown_blocks(md), prose.html_blocks(page)
        assert len(blocks) >= 6 and len(items) >= 6  # the legends and the four plain sentences
        assert prose.too_long(blocks) == [] and prose.too_long(items) == []
    caption = (ROOT / "workflow" / "report" / "claims.rst").read_text()  # the Claims page's caption
    assert prose.too_long(prose.markdown_blocks(caption)) == []
    # the check sees a long paragraph and a long bullet, in Markdown and in HTML
    long = " ".join(["word"] * 81)
    assert len(prose.too_long(prose.markdown_blocks(f"{md}\n{long}\n\n- {long}\n"))) == 2
    assert len(prose.too_long(prose.markdown_blocks(f"# T\n\nshort\n{long}\n"))) == 1  # a paragraph of two lines
    assert len(prose.too_long(prose.html_blocks(page.replace("</ul>", f"<li>{long}</li></ul>", 1)))) == 1
    assert prose.too_long(prose.markdown_blocks(f"| {long} |\n")) == []  # a table row is not prose


@pytest.mark.parametrize("shift, where", [(0, "inside"), (1, "outside")])
def test_findings_place_the_run_against_the_default_band(tmp_path, shift, where):
    """findings.md's last plain sentence says where the run's counts fall against the default run's
    band (docs/method.md §8c): inside a band built around the synthetic run's own counts; outside,
    naming the count, when every other run of the band holds one row more (its (c) has 2 of 4)."""
    from synthetic_claims import write_claim_run

    write_claim_run(tmp_path)
    results = tmp_path / "results"
    table = io.read_table(layout.under(results, layout.CLAIMS["parquet"]), "claims")
    own = band.run_counts(table)
    assert own["(c) diagonal"] == (2, 4)  # expected_claims(): (c) holds for gru's 2 rows of 4
    others = {name: (min(k + shift, n), n) for name, (k, n) in own.items()}
    counts = band.counts_table([("draw 1", "draw", others), ("draw 2", "draw", others), ("xeon", "machine", own)])
    counts = counts[(counts["run"] != "xeon") | (shift == 0)]  # the band of the shifted case leaves the run out
    findings.write(table, findings=layout.under(results, layout.CLAIMS["findings"]),
                   html_path=layout.under(results, layout.CLAIMS["html"]), position=band.position(table, counts))
    md = layout.under(results, layout.CLAIMS["findings"]).read_text()
    plain = md.split("## Per transport", 1)[0].strip().splitlines()
    if where == "inside":
        assert plain[-1] == ("- Against the default run's band (docs/method.md §8c, 2 seed draws and 1 recorded "
                             "machine), every count of this run lies inside.")
    else:
        assert plain[-1].startswith("- Against the default run's band (docs/method.md §8c, 2 seed draws), this run "
                                    "lies outside in ")
        assert "(c) diagonal 2 of 4 rows (band 3 of 4)" in plain[-1]
    assert html.escape(plain[-1][2:]) in layout.under(results, layout.CLAIMS["html"]).read_text()
