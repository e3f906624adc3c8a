"""learnwin.report.findings: the sentences carry the counts of the verdict table (docs/method.md §8b),
on per-seed tables built to hold every claim or to fail every one, and on the synthetic run of
tests/synthetic_claims.py whose verdicts are known row by row."""

import pandas as pd
import pytest

from learnwin.infra import io, layout
from learnwin.report import findings
from learnwin.stats.claims import verdicts

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
    c = findings.sentences(table)[2]
    assert c.startswith(f"(c) Optimizer (AdamW against {words}): 4 of 4 (model, check) rows hold")
    assert findings.summary_sentences(table)[2].startswith(f"(c) Optimizer (AdamW against {words}) holds")
    other = "plain SGD" if sgd == "sgd_momentum" else "SGD with momentum"
    assert other not in c


@pytest.mark.parametrize("hold", [True, False])
def test_every_claim_holds_or_fails_and_the_sentences_count_it(hold):
    table = _verdicts(_per_seed(hold))
    assert len(table) == 4 + 8 + 4 + 8  # a: 4 runs; b: 4 x 2 noises; c: 2 models x 2 checks; d: 4 x 2
    assert (table["holds"] == hold).all() and (table["k"] == (3 if hold else 0)).all() and (table["n"] == 3).all()
    a, b, c, d = findings.sentences(table)
    if hold:
        assert a == ("(a) Envelope class: 4 of 4 (model, optimizer) rows hold: exponential in const/adamw, "
                     "const/sgd; power-law-like in gru/adamw, gru/sgd.")
        assert b.startswith("(b) Growth of H_N in N: 4 of 4 (model, optimizer) rows hold (per_lag noise): "
                            "logarithmic in const/adamw, const/sgd; power in gru/adamw, gru/sgd; 4 of 4")
        assert c == ("(c) Optimizer (AdamW against plain SGD): 4 of 4 (model, check) rows hold: adamw broader in "
                     "const (log tau_q IQR), gru (log tau_q IQR); adamw slower in const (tau_env), gru (tau_env).")
        assert "4 of 4 (model, optimizer) rows hold (pooled noise): within band in" in d and "mean slope 1.00" in d
    else:
        assert a.startswith("(a) Envelope class: 0 of 4 (model, optimizer) rows hold: exponential in gru/adamw")
        assert "0 of 4 (model, optimizer) rows hold (per_lag noise): logarithmic in gru/adamw" in b
        assert c.startswith("(c) Optimizer (AdamW against plain SGD): 0 of 4 (model, check) rows hold")
        assert "0 of 4 (model, optimizer) rows hold (pooled noise): excludes 1 in" in d and "mean slope 0.30" in d
    page = findings.to_html(table)
    assert page.count('<tr class="holds">') == (len(table) if hold else 0)
    assert page.count('<tr class="fails">') == (0 if hold else len(table))


def test_transport_is_named_only_when_the_table_has_two():
    one = _verdicts(_per_seed(True))
    two = pd.concat([one, _verdicts(_per_seed(False), "exact", "signal")], ignore_index=True)
    assert "transport" not in findings.sentences(one)[0]
    a = findings.sentences(two)[0]
    assert "4 of 4 (model, optimizer) rows hold (diagonal transport, gamma)" in a
    assert "0 of 4 (model, optimizer) rows hold (exact transport, signal)" in a


def test_findings_say_which_functional_a_verdict_depends_on():
    """Claim (a) under three functionals of the exact transport: const/gru hold under signal and
    norm; under diag_entries const becomes power-law-like (fails) while gru still holds. The
    sentence says gru holds under every functional and const only under the other two."""
    holds, fails = _per_seed(True), _per_seed(False)
    parts = [_verdicts(holds, "exact", "signal"), _verdicts(holds, "exact", "norm")]
    mixed = {k: t.copy() for k, t in holds.items()}
    const = mixed["a"]["model"] == "const"
    mixed["a"].loc[const] = fails["a"].loc[const].to_numpy()
    parts.append(_verdicts(mixed, "exact", "diag_entries"))
    a = findings.sentences(pd.concat(parts, ignore_index=True))[0]
    assert "4 of 4 (model, optimizer) rows hold (exact signal)" in a
    assert "2 of 4 (model, optimizer) rows hold (exact diag_entries)" in a
    assert ("Across functionals, the verdict holds under every functional for gru/adamw, gru/sgd; it depends "
            "on the functional: const/adamw only under exact signal, exact norm; const/sgd only under exact "
            "signal, exact norm.") in a
    assert "Across functionals" not in findings.sentences(_verdicts(holds))[0]


def test_robustness_keeps_the_noise_definitions_apart():
    """Claim (b) under two transports (one functional each) and two noise definitions: a row that
    holds under per_lag on both transports but under pooled on the diagonal one only is named once
    per noise definition, never with a transport listed twice."""
    holds, fails = _per_seed(True), _per_seed(False)
    mixed = {k: t.copy() for k, t in holds.items()}
    pooled = mixed["b"]["noise"] == "pooled"
    mixed["b"].loc[pooled] = fails["b"].loc[pooled].to_numpy()
    table = pd.concat([_verdicts(holds, "diagonal", "gamma"), _verdicts(mixed, "exact", "signal")],
                      ignore_index=True)
    b = findings.sentences(table)[1]
    assert "const/adamw (per_lag)" in b and "const/adamw (pooled) only under diagonal gamma;" in b
    assert "diagonal gamma, exact signal, diagonal gamma" not in b


def test_findings_of_the_synthetic_run(tmp_path):
    from synthetic_claims import write_claim_run

    from learnwin.infra import layout

    write_claim_run(tmp_path)
    md = layout.under(tmp_path / "results", layout.CLAIMS["findings"]).read_text()
    # expected_claims(): a 4/4; b 4/4 per_lag, 0/4 pooled; c 2/4 (gru's); d 0/4 per_lag, 3/4 pooled
    assert "- (a) Envelope class: 4 of 4 (model, optimizer) rows hold:" in md
    assert ("4 of 4 (model, optimizer) rows hold (per_lag noise): logarithmic in const/adamw, const/sgd; "
            "power in gru/adamw, gru/sgd; 0 of 4 (model, optimizer) rows hold (pooled noise): censored in "
            "const/adamw, const/sgd; flat in gru/adamw, gru/sgd.") in md
    assert "(c) Optimizer (AdamW against plain SGD): 2 of 4 (model, check) rows hold:" in md
    assert "0 of 4 (model, optimizer) rows hold (per_lag noise): excludes 1 in" in md
    assert "3 of 4 (model, optimizer) rows hold (pooled noise): split in gru/sgd; within band in const/adamw, gru/adamw, const/sgd" in md
    assert "| d | master slope CI | gru | sgd | pooled | diagonal | gamma | within band | split | 1/2 | no |" in md
    page = layout.under(tmp_path / "results", layout.CLAIMS["html"]).read_text()
    assert page.count('<tr class="holds">') == 13 and page.count('<tr class="fails">') == 11


@pytest.mark.parametrize("hold", [True, False])
def test_findings_open_with_the_pivot_and_one_plain_sentence_per_claim(hold):
    table = _verdicts(_per_seed(hold))
    a, b, c, d = findings.summary_sentences(table)
    if hold:
        assert a == "(a) Envelope class holds: 4/4 rows, in every row for const, gru; the same under every optimizer."
        assert d == ("(d) Master law holds: 8/8 rows, in every row for const, gru; the same under every noise, "
                     "optimizer.")
    else:
        assert b == ("(b) Growth of H_N in N does not hold: 0/8 rows, in none for const, gru; the same under every "
                     "noise, optimizer.")
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
    assert page.index('id="claims-glance"') < page.index("<details>") < page.index('id="claims-verdicts"')


def test_a_plain_sentence_names_what_the_claim_depends_on():
    per_seed = _per_seed(True)
    exact = _per_seed(False)
    table = pd.concat([_verdicts(per_seed), _verdicts(exact, "exact", "signal")], ignore_index=True)
    a = findings.summary_sentences(table)[0]
    assert a == ("(a) Envelope class holds in part: 4/8 rows, in some for const, gru; it depends on the transport "
                 "(diagonal 4/4, exact 0/4).")
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
