"""The pages regenerated from data/runs/ (experiments/data_pages.py), and the growth pages recomputed
(docs/method.md §10c): docs/results-growth.md's generated parts are the printout of their commands on
the committed raw tables of data/runs/, as is a default run's page;
every verdict, interval and count on the page follows from the page's own per-seed values by the
rule; the prose of the page, of docs/results.md and of the README says what those verdicts say.
Each check is shown to fail on a planted fault."""

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_helpers import experiment_script

from learnwin.infra import io, layout
from learnwin.report.formatting import table_after
from learnwin.stats import growth, seedlevel
from learnwin.stats.intervals import t_interval

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results-growth.md"
#: The pages newer than the T 128 one, oldest first, each by the data folder a paragraph cites it by
#: (§10d's at T 256): a clause of a paragraph citing one is held to its verdicts for the cells it
#: ran, to the T 128 page's (or another cited page's) for the others.
T256 = ROOT / "docs" / "results-growth-T256.md"
NEWER = {T256: "growth-T256"}
NEWER_KEYS = tuple(NEWER.values())
NEWER_PAGE = next(iter(NEWER)).read_text()  # the T 256 page
GROWTH_PAGES = [p for p in (PAGE, *NEWER) if p.is_file()]
RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
NAMES = {"ConstGate": "const", "SharedGate": "shared", "DiagGate": "diag", "GRU": "gru", "LSTM": "lstm"}
GROUPS = {"fixed-gate cells": ("const", "shared", "diag"), "learned-gate cells": ("gru", "lstm")}
LAW_HEAD = "### Claim (b), the growth law"
MAX_HEAD = "### The growth law under H_max"
D_HEAD = "### Claim (d) on the truth"
PRED_HEAD = "### The prediction from the init networks"
MARGIN_HEAD = "## The margin check of docs/method.md §10c"
DIGITS = 0.0051  # half the last digit of a two-decimal value, and a hair: a mean of rounded values is within 2

data_pages = experiment_script("data_pages")
groundtruth_tables = experiment_script("groundtruth_tables")


def per_seed(cell: str) -> dict[int, float]:
    """"11213: 0.18, 12301: -0.09" -> {11213: 0.18, 12301: -0.09}."""
    return {int(k): float(v) for k, v in re.findall(r"(\d+): (-?[\d.]+|nan)", cell)}


def interval(cell: str) -> tuple[float, float]:
    lo, hi = re.fullmatch(r"\[(-?[\d.]+), (-?[\d.]+)\]", cell.strip()).groups()
    return float(lo), float(hi)


def mean_sd(cell: str) -> tuple[float, float, int]:
    """"46.4 ± 12.8 (1 cens.)" -> (46.4, 12.8, 1); a H_max cell's holes are not censoring."""
    m = re.match(r"(-?[\d.]+) ± (-?[\d.]+|nan)(?: \((\d+) cens\.\))?", cell)
    return float(m[1]), float(m[2]), int(m[3] or 0)


def censored_at_last(page: str) -> dict[str, int]:
    """Per model, the seeds whose H_emp is right-censored at the last reported budget."""
    h = table_after(page, "### H_emp(N)").set_index("model")
    return {m: mean_sd(h.loc[m].iloc[-1])[2] for m in h.index}


def law_faults(page: str, heading: str, cut: dict[str, int] | None) -> list[str]:
    """A growth-law table against its own per-seed c: n, the mean and the t-interval (within the
    rounding of the printed c), the verdict by the rule from the printed interval, "cut off" where a
    seed's window is right-censored at the last budget (``cut``: per model, the H_emp table's
    count), and every seed's points summing to the same count."""
    out, table = [], table_after(page, heading)
    points_at = [i for i, c in enumerate(table.columns) if c.startswith("points per seed")][0]
    for r in table.itertuples(index=False):
        model, seeds, n, mean, ci, verdict = r[0], per_seed(r[1]), int(r[2]), float(r[3]), interval(r[4]), r[5]
        m, lo, hi, k = t_interval(list(seeds.values()))
        if k != n or abs(m - mean) > 2 * DIGITS:
            out.append(f"{model}: mean c {mean} over n {n}, its seeds give {m:.3f} over {k}")
        if abs(lo - ci[0]) > 4 * DIGITS or abs(hi - ci[1]) > 4 * DIGITS:
            out.append(f"{model}: t-interval {ci}, its seeds give [{lo:.3f}, {hi:.3f}]")
        law = growth.shape_verdict(*ci, n)
        cut_off = verdict.endswith(f" ({growth.CUT_OFF})")
        if verdict.removesuffix(f" ({growth.CUT_OFF})") != law:
            out.append(f"{model}: verdict {verdict!r}, the rule gives {law!r} on {ci}")
        if cut is not None and cut_off != (cut[model] > 0):
            out.append(f"{model}: {'cut off' if cut_off else 'not cut off'}, {cut[model]} seeds censored at the end")
        points = {sum(map(int, p.split("/"))) for p in re.findall(r"\d+: (\d+/\d+/\d+)", r[points_at])}
        if len(points) != 1:
            out.append(f"{model}: the seeds' points sum to {sorted(points)}")
    return out


def kappa_verdict(lo: float, hi: float, band: float) -> str:
    """docs/method.md §10c's claim (d) verdict of a printed interval of d and band."""
    if lo >= -band and hi <= band:
        return seedlevel.CONSISTENT
    return seedlevel.BELOW if hi < 0 else seedlevel.ABOVE if lo > 0 else seedlevel.UNDECIDED


def kappa_faults(page: str) -> list[str]:
    """Claim (d)'s table against its per-seed s and kappa: d = s - kappa per seed, the mean and
    t-interval of d, the band kappa/2, each verdict and the overall one."""
    out, verdicts = [], []
    for r in table_after(page, D_HEAD).itertuples(index=False):
        model, s, kappa, d = r[0], per_seed(r[1]), per_seed(r[2]), per_seed(r[3])
        bad = [seed for seed in d if abs(s[seed] - kappa[seed] - d[seed]) > 2 * DIGITS]
        if bad:
            out.append(f"{model}: d != s - kappa for seeds {bad}")
        m, lo, hi, _ = t_interval(list(d.values()))
        ci, band = interval(r[6]), float(r[7].removeprefix("± "))
        if abs(m - float(r[5])) > 2 * DIGITS or abs(lo - ci[0]) > 4 * DIGITS or abs(hi - ci[1]) > 4 * DIGITS:
            out.append(f"{model}: mean d {r[5]} {r[6]}, its seeds give {m:.3f} [{lo:.3f}, {hi:.3f}]")
        if abs(np.mean(list(kappa.values())) / 2 - band) > DIGITS:
            out.append(f"{model}: band ± {band}, its seeds' kappa give ± {np.mean(list(kappa.values())) / 2:.3f}")
        verdicts.append(kappa_verdict(*ci, band))
        if r[8] != verdicts[-1]:
            out.append(f"{model}: verdict {r[8]!r}, the rule gives {verdicts[-1]!r}")
    overall = re.search(r"Claim \(d\) on the truth: \*\*(\w+)\*\*", page)[1]
    if overall != seedlevel.kappa_overall(verdicts):
        out.append(f"claim (d) overall {overall!r}, the models give {seedlevel.kappa_overall(verdicts)!r}")
    return out


def window_faults(page: str) -> list[str]:
    """H_emp against H_max: where no seed has a hole below H_max, the two windows are the same
    lag in every seed, so their mean ± sd agree."""
    h_emp = table_after(page, "### H_emp(N)").set_index("model")
    h_max = table_after(page, "### H_max(N)").set_index("model")
    return [f"{m} {N}: H_emp {h_emp.loc[m, N]}, H_max {h_max.loc[m, N]}" for m in h_emp.index for N in h_emp.columns
            if h_max.loc[m, N].endswith("(0.0 holes)") and mean_sd(h_emp.loc[m, N])[:2] != mean_sd(h_max.loc[m, N])[:2]]


def margin_faults(page: str) -> list[str]:
    """The margin check's verdict line against its table's rows at the largest budget."""
    text = page.split(MARGIN_HEAD, 1)[1]
    rows = table_after(text, "D = H_emp")
    top = rows[rows["N"].astype(int) == rows["N"].astype(int).max()].set_index("model")
    passes = {m: (lambda lo, hi: lo <= 0 <= hi or (-4 <= lo and hi <= 4))(*interval(top.loc[m, "95 % t-interval of D_32"]))
              for m in top.index}
    line = re.search(r"the margin T/2 is \*\*([\w ]+)\*\* \(D_32's interval covers 0 or lies within ±4 lags: (.*?)\); "
                     r"the boundary effect is shown for (.*?) \(D_full's interval above 4 lags, of the models whose "
                     r"T 64 window passes 32: (.*?)\)", text, re.S)
    marks = dict(re.findall(r"(\w+) ([✓✗])", line[2]))
    out = [f"{m}: marked {marks.get(m)}, its D_32 interval {'passes' if ok else 'fails'}"
           for m, ok in passes.items() if (marks.get(m) == "✓") != ok]
    if line[1] != ("supported" if all(passes.values()) else "not supported"):
        out.append(f"the margin is {line[1]!r} with {passes}")
    shown = [m for m in line[4].split(", ") if interval(top.loc[m, "95 % t-interval of D_full"])[0] > 4]
    if (", ".join(shown) or "no model") != line[3]:
        out.append(f"the boundary effect is shown for {line[3]!r}; the rows give {shown}")
    return out


def generated(page: str) -> str:
    return "\n".join(m[0] for m in data_pages.MARKER.finditer(page))


def prose(text: str) -> str:
    """``text`` without its generated parts, tables and code."""
    text = data_pages.MARKER.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.startswith(("|", "    ")))


def prose_faults(page: str) -> list[str]:
    """The page's prose against its tables: every interval it quotes is one of the tables', the
    prediction is worded by its p (docs/method.md §10b: it orders the cells at p < 0.05), and
    claim (d)'s range is the models' mean d."""
    tables = generated(page) or "\n".join(line for line in page.splitlines() if line.startswith("|"))
    words = prose(page)
    out = [f"the prose quotes {ci}, no table has it" for ci in re.findall(r"\[-?\d+\.\d+, -?\d+\.\d+\]", words)
           if ci not in tables]
    if PRED_HEAD in page:  # an arm of one cell has no prediction (docs/method.md §10e)
        p = float(table_after(page, PRED_HEAD).iloc[0]["p_perm"])
        says_orders = re.search(r"prediction from the init networks\*\* (orders|is not shown to order)", words)[1]
        if (says_orders == "orders") != (p < 0.05):
            out.append(f"the prose says the prediction {says_orders} the cells at p = {p}")
    means = table_after(page, D_HEAD)["mean d"].astype(float)
    quoted = re.search(r"d = s - kappa (?:between (-?\d+(?:\.\d+)?) and|of) (-?\d+(?:\.\d+)?)", words)
    if quoted is None:
        return [*out, "the prose quotes no d = s - kappa (between LO and HI, or of D for one cell)"]
    if (float(quoted[1] or quoted[2]), float(quoted[2])) != (means.min(), means.max()):
        out.append(f"claim (d) quoted {quoted[0]!r}, the table's mean d {means.tolist()}")
    return out


def verdicts(page: str) -> dict[str, str]:
    """Each model's growth-law verdict of the page (without the cut-off mark)."""
    law = table_after(page, LAW_HEAD).set_index("model")["verdict"]
    return {m: v.removesuffix(f" ({growth.CUT_OFF})") for m, v in law.items()}


LAW = re.compile(r"grows? like (log N|a power of N)|(?:is|are|reads?) \*{0,2}\"?(log N|power|saturating|undecided)\b")
NEGATION = re.compile(r"\b(no cell|not|neither|none)\b|n't\b", re.I)
ABOUT_GROWTH = ("recovery-growth", "results-growth", "#the-growth-law", *NEWER_KEYS)


def cited(para: str) -> tuple[str, ...]:
    """The keys of :data:`NEWER` that ``para`` cites, oldest first."""
    return tuple(key for key in NEWER_KEYS if key in para)


def cited_view(base: dict, newer: dict | None, keys: tuple[str, ...]) -> dict:
    """``base`` (per cell, the T 128 page's) overlaid by each cited newer page's values (``newer``:
    key -> per cell), oldest first."""
    out = dict(base)
    for key in keys:
        out.update((newer or {}).get(key, {}))
    return out


def law_sentences(text: str) -> list[tuple[str, tuple[str, ...], str, bool, bool]]:
    """(clause, cells, law, negated, cited) of each clause about the measured growth law: the
    paragraphs of ``text`` that cite a growth run, cut at sentence ends, semicolons and ", and"; a
    clause counts when it names a law (LAW) and cells (NAMES, GROUPS, "no cell"); ``cited``: the
    paragraph cites the T 256 run."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        if not any(key in para for key in ABOUT_GROWTH):
            continue
        for clause in re.split(r"(?<=[.;])\s|, and |: ", re.sub(r"\s+", " ", para)):
            m = LAW.search(clause)
            if not m:
                continue
            law = {"a power of N": "power"}.get(m[1] or m[2], m[1] or m[2])
            cells = [c for name, c in NAMES.items() if re.search(rf"\b{name}\b", clause[:m.start()])]
            cells += [c for group, cs in GROUPS.items() if group in clause[:m.start()] for c in cs]
            negated = bool(NEGATION.search(clause[:m.start()]))
            if re.search(r"\bno cell", clause[:m.start()], re.I):
                cells = list(NAMES.values())
            if cells:
                out.append((clause, tuple(cells), law, negated, cited(para)))
    return out


def sentence_faults(text: str, law_of: dict[str, str], newer: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Clauses whose law disagrees with the verdicts: a positive one where a named cell has
    another verdict, a negated one where a named cell has that verdict. A clause of a paragraph
    citing a newer run reads that run's verdicts (``newer``: its key -> verdict per cell) for the cells it has."""
    out = []
    for clause, cells, law, negated, keys in law_sentences(text):
        of = cited_view(law_of, newer, keys)
        wrong = [c for c in cells if (of[c] == law) == negated]
        if wrong:
            out.append(f"{clause!r}: {', '.join(f'{c} {of[c]}' for c in wrong)}")
    return out


def quoted_faults(text: str, page: str) -> list[str]:
    """Intervals quoted in the paragraphs of ``text`` that cite the growth run and that none of the
    growth page's tables holds."""
    tables = "\n".join(line for line in page.splitlines() if line.startswith("|"))
    paras = [p for p in re.split(r"\n\s*\n", prose(text)) if any(key in p for key in ABOUT_GROWTH)]
    return [f"{ci} quoted, not in the growth page's tables" for p in paras
            for ci in re.findall(r"\[-?\d+\.\d+, -?\d+\.\d+\]", p) if ci not in tables]


def cut_off_count_faults(text: str, page: str, newer: dict[str, str] | None = None) -> list[str]:
    """"ConstGate, SharedGate and DiagGate ... in 1, 5 and 2 (of the 5) seeds" in ``text``'s prose (the
    last cells named before the counts, one per count) against the seeds right-censored at the
    last budget in the page's H_emp table (a newer page's, ``newer``: its key -> page, in a paragraph
    citing it, for the cells it ran)."""
    out = []
    sentences = [(sentence, para) for para in re.split(r"\n\s*\n", prose(text))
                 for sentence in re.split(r"(?<=\.)\s", re.sub(r"\s+", " ", para))]
    for sentence, para in sentences:
        m = re.search(r"\bin (\d+(?:, \d+)*) and (\d+) (?:of the \d+ )?seeds", sentence)
        if not m:
            continue
        cut = cited_view(censored_at_last(page), {k: censored_at_last(t) for k, t in (newer or {}).items()}, cited(para))
        named = sorted((hit.start(), cell) for name, cell in NAMES.items()
                       for hit in re.finditer(rf"\b{name}\b", sentence[:m.start()]))
        counts = [int(k) for k in m[1].split(", ")] + [int(m[2])]
        named = named[-len(counts):]  # the cells the counts follow
        if [cut[c] for _, c in named] != counts:
            out.append(f"{m[0]!r} for {[c for _, c in named]}: the page's H_emp table has {[cut[c] for _, c in named]}")
    return out


RESULTS_LAW_HEAD = {PAGE: "### The growth law, measured where", T256: "### The growth law at T 256"}


def results_table_faults(results: str, page: str, heading: str = RESULTS_LAW_HEAD[PAGE]) -> list[str]:
    """docs/results.md's growth-law table under ``heading`` (cell, c, verdict, b) against the growth
    page's, cell by cell of the page."""
    law = table_after(page, LAW_HEAD).set_index("model")
    cut = censored_at_last(page)
    have = table_after(results, heading).set_index("cell")
    out = []
    for name, m in NAMES.items():
        if m not in law.index:
            continue
        v = verdicts(page)[m]
        want = [f"{law.loc[m, 'mean c']} {law.loc[m, '95 % t-interval of c']}",
                v + (f", cut off ({cut[m]} seed{'s' if cut[m] > 1 else ''})" if cut[m] else ""),
                f"{law.loc[m, 'mean b (lags per e-fold)']} {law.loc[m, '95 % t-interval of b']}"]
        if have.loc[name].tolist() != want:
            out.append(f"{name}: {have.loc[name].tolist()} != {want}")
    return out


def page_faults(page: str) -> list[str]:
    """Every check of a growth page on itself (the margin check where the page has one)."""
    cut = censored_at_last(page)
    return (law_faults(page, LAW_HEAD, cut) + law_faults(page, MAX_HEAD, None) + kappa_faults(page)
            + window_faults(page) + (margin_faults(page) if MARGIN_HEAD in page else []) + prose_faults(page))


@pytest.mark.parametrize("path", GROWTH_PAGES, ids=lambda p: p.name)
def test_the_growth_page_follows_from_its_own_values(path):
    assert page_faults(path.read_text()) == []


def test_the_readme_and_results_md_say_what_the_verdicts_say():
    page = PAGE.read_text()
    newer = {key: p.read_text() for p, key in NEWER.items() if p.is_file()}
    law_of, newer_law = verdicts(page), {key: verdicts(t) for key, t in newer.items()}
    readme, results = README.read_text(), RESULTS.read_text()
    assert len(law_sentences(readme)) >= 2 and len(law_sentences(results)) >= 4  # the checks see the sentences
    assert sentence_faults(readme, law_of, newer_law) == [] and sentence_faults(results, law_of, newer_law) == []
    pages = "\n".join(p.read_text() for p in GROWTH_PAGES)
    for p in GROWTH_PAGES:
        assert results_table_faults(results, p.read_text(), RESULTS_LAW_HEAD[p]) == []
    assert quoted_faults(readme, pages) == [] and quoted_faults(results, pages) == []
    assert cut_off_count_faults(results, page, newer) == [] and cut_off_count_faults(page, page) == []
    assert "in 1, 5 and 2" in prose(results) and "in 1, 5 and 2" in prose(page)  # the check sees both


def test_a_cut_off_count_that_the_table_does_not_give_fails():
    page = PAGE.read_text()
    results = plant(RESULTS.read_text(), "in 1, 5 and 2 seeds", "in 1, 4 and 2 seeds")
    assert len(cut_off_count_faults(results, page)) == 1


# ---- each planted fault fails the check ----

def plant(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def test_prose_saying_the_fixed_gate_cells_grow_like_log_n_fails():
    readme = plant(README.read_text(), "no cell's is shown to grow like log N", "the fixed-gate cells grow like log N")
    faults = sentence_faults(readme, verdicts(PAGE.read_text()))
    assert len(faults) == 1 and "const undecided" in faults[0] and "diag undecided" in faults[0]


def test_results_md_giving_the_gru_log_n_fails():
    results = plant(RESULTS.read_text(), "| GRU | 0.44 [0.33, 0.55] | power |", "| GRU | 0.44 [0.33, 0.55] | log N |")
    assert [f.split(":")[0] for f in results_table_faults(results, PAGE.read_text())] == ["GRU"]


def test_an_interval_quoted_in_results_md_that_no_table_holds_fails():
    results = plant(RESULTS.read_text(), "95 % t-interval [0.33, 0.55],\n5 seeds)", "95 % t-interval [0.33, 0.65],\n5 seeds)")
    assert quoted_faults(results, PAGE.read_text()) == ["[0.33, 0.65] quoted, not in the growth page's tables"]


def test_a_seed_whose_c_flips_sign_fails():
    page = plant(PAGE.read_text(), "13417: 0.56, 14519: 0.41", "13417: -0.56, 14519: 0.41")
    faults = law_faults(page, LAW_HEAD, censored_at_last(page))
    assert faults and all(f.startswith("gru:") for f in faults)


def test_a_window_moved_at_the_last_budget_fails():
    page = plant(PAGE.read_text(), "| 31.2 ± 3.3 | 44.8 ± 6.6 |", "| 31.2 ± 3.3 | 14.8 ± 6.6 |")
    assert window_faults(page) == ["gru N = 32768: H_emp 14.8 ± 6.6, H_max 44.8 ± 6.6 (0.0 holes)"]


@pytest.mark.parametrize("old, new, check", [
    ("| 0.44 | [0.33, 0.55] | power |", "| 0.44 | [0.33, 0.55] | log N |", "law"),  # a verdict against its interval
    ("| -0.24 | [-0.50, 0.02] | undecided |", "| -0.24 | [-0.50, 0.02] | undecided (cut off) |", "law"),  # a cut-off mark
    ("| -1.94 | [-2.28, -1.59] |", "| -1.94 | [-2.28, 1.59] |", "kappa"),  # an interval of d
    ("Claim (d) on the truth: **fails**", "Claim (d) on the truth: **holds**", "kappa"),  # the overall verdict
    ("const ✓, diag ✓", "const ✗, diag ✓", "margin"),  # a model's mark
    ("c = 0.44,\n  95 % t-interval [0.33, 0.55]", "c = 0.44,\n  95 % t-interval [0.23, 0.55]", "prose"),  # quoted
])
def test_the_page_check_fails_on_each_plant(old, new, check):
    page = plant(PAGE.read_text(), old, new)
    faults = {"law": lambda p: law_faults(p, LAW_HEAD, censored_at_last(p)), "kappa": kappa_faults,
              "margin": margin_faults, "prose": prose_faults}[check](page)
    assert faults


def test_the_sentence_check_reads_negations_and_groups():
    law_of = {"const": "undecided", "shared": "undecided", "diag": "undecided", "gru": "power", "lstm": "undecided"}
    cite = " (results-growth.md)"
    assert sentence_faults("The GRU's window grows like a power of N, and no cell's is shown to grow like log N"
                           + cite, law_of) == []
    assert sentence_faults("No cell grows like log N by the rule" + cite, law_of) == []
    assert sentence_faults("No cell grows like a power of N" + cite, law_of)  # the GRU does
    assert sentence_faults("The learned-gate cells grow like a power of N" + cite, law_of)  # the LSTM does not
    assert sentence_faults("The LSTM's is undecided" + cite, law_of) == []
    assert sentence_faults("The LSTM is saturating" + cite, law_of)
    assert sentence_faults("The LSTM is saturating", law_of) == []  # a paragraph not about the growth run


def test_a_paragraph_citing_the_t256_run_is_held_to_its_verdicts_and_counts():
    """A clause of a paragraph that cites the T 256 run reads its verdicts for the cells it ran and
    the T 128 page's for the others; its cut-off counts are the T 256 page's H_emp table's."""
    page = PAGE.read_text()
    law_of = verdicts(page)
    newer = {**{m: v for m, v in law_of.items() if m != "gru"}, "const": "log N"}
    para = "At T 256 ConstGate grows like log N ([results-growth-T256.md](results-growth-T256.md))."
    newer = {"growth-T256": newer}
    assert sentence_faults(para, law_of, newer) == []
    assert sentence_faults(para.replace("-T256", ""), law_of, newer)  # the T 128 page: undecided
    assert sentence_faults(para, law_of)  # no T 256 page yet
    assert sentence_faults("At T 256 the GRU grows like log N (growth-T256).", law_of, newer)  # the T 128 page's power
    newer_page = {"growth-T256": plant(page, "| 64.0 ± 0.0 (5 cens.) |", "| 64.0 ± 0.0 (3 cens.) |")}
    counts = "ConstGate, SharedGate and DiagGate reach T/2 in 1, 3 and 2 seeds (data/runs/growth-T256)."
    assert cut_off_count_faults(counts, page, newer_page) == []
    assert cut_off_count_faults(counts.replace("growth-T256", "growth-T128"), page, newer_page)
    assert cut_off_count_faults(counts.replace("1, 3 and 2", "1, 5 and 2"), page, newer_page)


def arm_page(page: str, cell: str = "diag") -> str:
    """The generated part of a growth page cut to one cell, ``cell``, without the prediction, under
    prose that quotes its d: an arm's page (docs/method.md §10e)."""
    tables = generated(page)
    tables = tables.replace(tables.split(PRED_HEAD, 1)[1].split("###", 1)[0], "").replace(PRED_HEAD, "")
    tables = "\n".join(line for line in tables.splitlines() if not (
        line.startswith("| ") and line.split(" ", 2)[1] in NAMES.values() and line.split(" ", 2)[1] != cell))
    d = table_after(page, D_HEAD).set_index("model").loc[cell, "mean d"]
    return f"# An arm\n\nClaim (d) on the truth: d = s - kappa of {d}.\n\n{tables}\n"


def test_an_arms_page_is_checked_on_its_one_cell_and_a_planted_fault_fails():
    """An arm's page (one cell, no prediction) passes the page checks; its claim (d) quoted off the
    table's, or its verdict set against its interval, fails them."""
    arm = arm_page(NEWER_PAGE)
    assert PRED_HEAD not in arm and list(table_after(arm, LAW_HEAD)["model"]) == ["diag"]
    assert page_faults(arm) == []
    d = table_after(arm, D_HEAD)["mean d"].iloc[0]
    assert prose_faults(plant(arm, f"d = s - kappa of {d}", "d = s - kappa of 9.99"))
    assert prose_faults(plant(arm, f"d = s - kappa of {d}", "d, s and kappa"))
    row = next(line for line in arm.splitlines() if line.startswith("| diag |") and "(cut off)" in line)
    assert law_faults(plant(arm, row, row.replace("(cut off)", "").replace("undecided", "power")), LAW_HEAD,
                      censored_at_last(arm))


def test_a_paragraph_citing_two_newer_runs_reads_each_for_the_cells_it_ran(monkeypatch):
    """With an arm newer than the T 256 run (its key cited), a clause reads the arm's verdict for its
    cell, the T 256 page's for the cells the arm did not run, the T 128 page's where neither is cited."""
    monkeypatch.setattr(sys.modules[__name__], "NEWER_KEYS", ("growth-T256", "growth-T512-diag"))
    law_of = verdicts(PAGE.read_text())
    newer = {"growth-T256": {**law_of, "const": "log N", "diag": "undecided"}, "growth-T512-diag": {"diag": "power"}}
    both = "DiagGate grows like a power of N (growth-T512-diag). ConstGate grows like log N (growth-T256)."
    assert sentence_faults(both, law_of, newer) == []
    assert sentence_faults(both, law_of, {"growth-T256": newer["growth-T256"]})  # no arm: DiagGate undecided
    assert sentence_faults("DiagGate grows like a power of N (growth-T256).", law_of, newer)  # the T 256 page's
    one = "DiagGate grows like a power of N; ConstGate is undecided (growth-T512-diag, growth-T256)."
    faults = sentence_faults(one, law_of, newer)
    assert len(faults) == 1 and "const log N" in faults[0]


# ---- the generated parts from the committed raw tables ----

def synthetic_run(folder: Path, models=("gru", "lstm"), seeds=(1, 2, 3), record_seeds=(1, 2, 3, 4)) -> None:
    """A budget run's per-job scores: lag l (4..32 step 4) learned from N̂ = 64 * 2^(l / rate +
    seed / 10), rate 8 for the GRU and 4 for the LSTM; the margin r - 0.2 crosses 0 at N̂ in log
    N (control 0, null 0.05). The record names ``record_seeds``."""
    lags, budgets = np.arange(4, 36, 4), 2 ** np.arange(6, 14)
    rate = {"gru": 8.0, "lstm": 4.0}
    for model in models:
        for seed in seeds:
            log_nhat = np.log(64) + np.log(2) * (lags / rate[model] + seed / 10)
            r = 0.2 + 0.05 * (np.log(budgets)[None, :] - log_nhat[:, None])
            rows = [dict(target="control", lag=lag, N=N, r=0.0, null=0.05) for N in budgets for lag in lags]
            rows += [dict(target="task", lag=lag, N=N, r=r[i, k], null=0.05)
                     for i, lag in enumerate(lags) for k, N in enumerate(budgets)]
            scores = pd.DataFrame(rows).assign(model=model, optimizer="adamw", seed=seed)
            io.write_table(scores, layout.under(folder, layout.BUDGET_RUN, optimizer="adamw", model=model, seed=seed),
                           "budget")
    (folder / "run.yaml").write_text(yaml.safe_dump(dict(models=list(models), seeds=list(record_seeds))))


def synthetic_aggregate(folder: Path, models=("gru", "lstm"), seeds=(1, 2, 3), alpha=2.0) -> None:
    """What claim (d) and the prediction read beside :func:`synthetic_run`'s scores: each job's
    envelope f(l) = 2^(-l / rate), so that log N̂ rises by one per unit of -log f (s = 1), each
    seed's alpha (kappa = alpha / (alpha - 1)) and a confirm row of the models."""
    rate, lags = {"gru": 8.0, "lstm": 4.0}, np.arange(4, 36, 4)
    for model in models:
        for seed in seeds:
            env = pd.concat([pd.DataFrame(dict(model=model, optimizer="adamw", seed=seed, epoch=e, transport=t,
                                               lag=lags, f=2.0 ** (-lags / rate[model])))
                             for e in ("init", "trained") for t in ("diagonal", "exact")], ignore_index=True)
            io.write_table(env, layout.under(folder, layout.BUDGET_SNAPSHOT["envelope"], optimizer="adamw",
                                             model=model, seed=seed), "envelope")
    alpha_rows = pd.DataFrame([dict(model=m, optimizer="adamw", seed=s, epoch="trained", transport="diagonal",
                                    noise="per_lag", alpha=alpha) for m in models for s in seeds])
    confirm = pd.DataFrame([dict(threshold=0.2, networks="init", transport="diagonal", noise="per_lag",
                                 n_models=len(models), n_blocks=7, tau_mean=1.0, p_perm=0.5, n_perms=2)])
    for name, table in (("network_alpha", alpha_rows), ("confirm", confirm)):
        io.write_table(table, layout.under(folder, layout.BUDGET[name], seed_set="exploration"),
                       layout.budget_schema(name))


@pytest.mark.parametrize("models", [("lstm",), ("gru", "lstm")])
def test_an_arm_of_one_cell_prints_claim_d_and_no_prediction(tmp_path, models):
    """A growth run of one cell (docs/method.md §10e) prints its claim (d) and says it has no
    prediction (the prediction orders cells); a run of two prints the prediction's table."""
    run = tmp_path / "run"
    synthetic_run(run, models=models, record_seeds=(1, 2, 3))
    synthetic_aggregate(run, models)
    text = data_pages.printout(f"{run} --growth")
    d = table_after(text, D_HEAD).set_index("model")
    assert list(d.index) == list(models) and (d["kappa per seed"] == "1: 2.00, 2: 2.00, 3: 2.00").all()
    assert (d["s per seed"] == "1: 1.00, 2: 1.00, 3: 1.00").all() and (d["mean d"] == "-1.00").all()  # s = 1, kappa 2
    arm = "No prediction from the init networks: it orders cells, and this run is an arm of one cell, lstm"
    assert (arm in text) == (len(models) == 1) and (PRED_HEAD in text) == (len(models) > 1)
    if len(models) > 1:
        assert table_after(text, PRED_HEAD).iloc[0]["n_models"] == "2"


def test_a_partial_run_prints_what_it_has_and_names_what_it_lacks(tmp_path):
    run = tmp_path / "run"
    synthetic_run(run)
    text = data_pages.printout(f"{run} --growth")
    assert f"Partial run: 2 (model, seed) jobs not in {run}: gru 4, lstm 4." in text
    h = table_after(text, "### H_emp(N)").set_index("model")
    # seed s learns lag l from the first budget above 64 * 2^(l / rate + s / 10): at N = 1024 = 64 * 2^4
    # the GRU's prefix ends at lag 28 (28 / 8 + 0.3 < 4 < 32 / 8), the LSTM's at 12, in every seed
    assert h.loc["gru", "N = 1024"] == "28.0 ± 0.0" and h.loc["lstm", "N = 1024"] == "12.0 ± 0.0"
    law = table_after(text, LAW_HEAD).set_index("model")
    assert law.loc["gru", "n"] == "3" and "claim (d) and the prediction need the aggregate" in text.lower()


def test_a_generated_part_is_its_commands_printout_and_a_changed_number_fails(tmp_path):
    run = tmp_path / "data" / "runs" / "toy"
    synthetic_run(run, models=("gru",), record_seeds=(1, 2, 3))
    out = data_pages.printout("data/runs/toy --growth", tmp_path)
    assert "Partial run" not in out
    page = tmp_path / "page.md"
    marker = "<!-- generated: python experiments/groundtruth_tables.py data/runs/toy --growth -->"
    page.write_text(f"# Toy\n\nProse.\n\n{marker}\nold tables\n<!-- /generated -->\n\nMore prose.\n")
    assert data_pages.differences(page, tmp_path)
    page.write_text(data_pages.regenerated(page.read_text(), tmp_path))
    assert data_pages.differences(page, tmp_path) == [] and out in page.read_text()
    page.write_text(page.read_text().replace("28.0 ± 0.0", "25.0 ± 0.0", 1))
    assert any(line.startswith("-") and "25.0 ± 0.0" in line for line in data_pages.differences(page, tmp_path))


@pytest.mark.parametrize("path", GROWTH_PAGES, ids=lambda p: p.name)
def test_the_growth_page_is_regenerated_from_the_committed_tables(path):
    """From a fresh clone: `python experiments/data_pages.py check` (each generated part of a
    growth page is its command's printout on data/runs/)."""
    text = path.read_text()
    folders = sorted({m for args in data_pages.MARKER.findall(text) for m in re.findall(r"data/runs/[\w-]+", args[1])})
    missing = [f for f in folders if not (ROOT / f).is_dir()]
    partial = {f: lacks for f in folders if f not in missing
               for lacks in [groundtruth_tables.run_jobs(ROOT / f, "adamw")[1]] if lacks}
    if not folders or missing or partial:  # a run kept seed by seed is checked once every job is in
        pytest.skip(f"the page's raw tables are not all committed yet ({missing or partial or 'no generated part'})")
    assert str(path.relative_to(ROOT)) in data_pages.PAGES and data_pages.differences(path) == []


def test_the_default_page_is_regenerated_from_the_committed_tables(tmp_path):
    """docs/results-default-epyc-25-17.md's generated part is `results_tables.py` on its committed
    raw tables; a number changed on the page, or in a kept table, is a difference."""
    page = ROOT / "docs" / "results-default-epyc-25-17.md"
    assert str(page.relative_to(ROOT)) in data_pages.PAGES
    assert data_pages.differences(page) == []
    planted = tmp_path / page.name
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| gru | adamw | 3 | "))
    planted.write_text(text.replace(row, row.replace("| 3 |", "| 4 |", 1), 1))
    assert any(line.startswith("-| gru | adamw | 4 | ") for line in data_pages.differences(planted))


def test_collect_copies_a_runs_tables_and_its_record(tmp_path):
    """collect: the jobs' scores and benchmark TSVs and the aggregate's tables but its scores go to
    the data folder in the results layout, with the config's models and seeds in run.yaml; a job
    the run lacks is named by the printout of the data folder."""
    results, dest = tmp_path / "results", tmp_path / "data" / "runs" / "toy"
    synthetic_run(results)
    tsv = layout.under(results, f"{layout.BENCH}/train_budget/adamw/gru/seed1.tsv")
    tsv.parent.mkdir(parents=True)
    tsv.write_text("s\tcpu_time\n1.0\t0.5\n")
    for name in ("scores", "confirm"):
        path = layout.under(results, layout.BUDGET[name].format(seed_set="exploration"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"table")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(dict(recovery=dict(models=["gru", "lstm"], seeds=[1, 2, 3, 4]))))
    data_pages.collect(results, dest, config)
    kept = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert kept == ["benchmarks/train_budget/adamw/gru/seed1.tsv", "recovery/budget/exploration/confirm.parquet",
                    *(f"recovery/budget/runs/adamw/{m}/seed{s}/scores.parquet" for m in ("gru", "lstm") for s in (1, 2, 3)),
                    "run.yaml"]
    assert yaml.safe_load((dest / "run.yaml").read_text())["seeds"] == [1, 2, 3, 4]
    assert f"Partial run: 2 (model, seed) jobs not in {dest}: gru 4, lstm 4." in data_pages.printout(f"{dest} --growth")


def test_a_new_arms_power_is_anchored_where_no_seed_of_the_cell_is_cut_off(tmp_path):
    """--arm-power (docs/method.md §10e): the arm's own design (its lags, budgets, seed count) and
    each of its models' mean H_emp at N 256 and at the largest budget where none of its seeds is
    right-censored in the anchor run; a seed censored at the last budget moves the anchor one down."""
    run = tmp_path / "run"
    synthetic_run(run, record_seeds=(1, 2, 3))
    window = groundtruth_tables.growth_inputs(run, 0.2, "adamw")[3]
    arm = dict(recovery=dict(models=["lstm"], seeds=[7, 8, 9, 10], lags=[4, 8, 12, 16], budgets=[64, 128, 256, 512, 1024]))
    ns = sorted(window["N"].unique())
    free = groundtruth_tables.arm_power_table(window.assign(censored=False), arm, pool=60)
    cut = window.assign(censored=(window["model"] == "lstm") & (window["N"] == ns[-1]) & (window["seed"] == 2))
    table = groundtruth_tables.arm_power_table(cut, arm, pool=60)
    lstm = window[window["model"] == "lstm"].groupby("N")["H_emp"].mean()
    assert list(zip(table["model"], table["law"])) == [("lstm", growth.LOG_N), ("lstm", growth.POWER)]
    assert (free["n_hi"] == ns[-1]).all() and (table["n_hi"] == ns[-2]).all()
    assert (table["h_hi"] == lstm[ns[-2]]).all() and (table["h_lo"] == lstm[256]).all()
    assert (table["seeds"] == 4).all() and (table["n_max"] == 1024).all() and table["p_true"].between(0, 1).all()


def test_an_undecided_cell_states_the_power_of_its_design_from_the_runs_table(tmp_path):
    """--design-power writes, per undecided cell (not cut off), the power the design had for each
    stated law (docs/method.md §10d); the page reads it as that cell's P(decided) words, and a table
    whose cells are not the undecided ones is refused with the command that rewrites it."""
    run = tmp_path / "run"
    synthetic_run(run, record_seeds=(1, 2, 3))
    _, budgets, lb, window, _, shape = groundtruth_tables.growth_inputs(run, 0.2, "adamw")
    lags = sorted(lb["lag"].unique())
    shape = shape.assign(verdict=growth.POWER, cut_off=False)
    shape.loc[shape["model"] == "lstm", "verdict"] = growth.UNDECIDED
    table = groundtruth_tables.design_power_table(window, shape, lags, budgets, pool=60)
    assert list(zip(table["model"], table["law"])) == [("lstm", growth.LOG_N), ("lstm", growth.POWER)]
    assert table["h_hi"].iloc[0] == window[(window["model"] == "lstm") & (window["N"] == budgets[-2])]["H_emp"].mean()
    assert table["p_true"].between(0, 1).all() and (table["seeds"] == 3).all()
    assert groundtruth_tables.design_power_words(run, shape) is None  # not written yet: no column
    io.write_table(table, run / groundtruth_tables.DESIGN_POWER, "design_power")
    words = groundtruth_tables.design_power_words(run, shape)
    p = table.set_index("law")["p_true"]
    assert words == {"lstm": f"log N: {p[growth.LOG_N]:.2f}, c 0.18: {p[growth.POWER]:.2f}"}
    with pytest.raises(SystemExit, match="--design-power"):  # the GRU turned undecided: the table is stale
        groundtruth_tables.design_power_words(run, shape.assign(verdict=growth.UNDECIDED))


def test_the_cost_table_adds_the_parked_segments_it_measured_and_says_how_many_it_lacks(tmp_path):
    """groundtruth_tables.cost_lines: train_budget's sums are the TSVs' (100 + 200 s wall, 90 + 180 s
    CPU) plus the parked segments the driver measured (50 s, 40 s), of the seeds asked for; a segment
    parked from outside has no seconds, and the note counts it; snapshot_budget's sums are its TSVs'."""
    for rule, seed, wall, cpu in [("train_budget", 1, 100, 90), ("train_budget", 2, 200, 180),
                                  ("snapshot_budget", 1, 10, 9)]:
        tsv = layout.under(tmp_path, layout.BENCH) / rule / "adamw" / "diag" / f"seed{seed}.tsv"
        tsv.parent.mkdir(parents=True, exist_ok=True)
        tsv.write_text(f"s\th:m:s\tcpu_time\n{wall}\t0:00:00\t{cpu}\n")
    entries = [dict(optimizer="adamw", model="diag", seed=1, parked_trainings=3, parked_wall_s=50.0, parked_cpu_s=40.0),
               dict(optimizer="adamw", model="diag", seed=2, parked_trainings=2),
               dict(optimizer="adamw", model="diag", seed=1, sitting_s=400.0),
               dict(optimizer="adamw", model="diag", seed=9, parked_trainings=1, parked_wall_s=7.0, parked_cpu_s=7.0)]
    (tmp_path / layout.SITTINGS).write_text(yaml.safe_dump(entries))
    text = "\n".join(groundtruth_tables.cost_lines(tmp_path, groundtruth_tables.BUDGET_RULES, {"seed1", "seed2"}))
    row = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in text.splitlines()
           if line.startswith("| train_budget") or line.startswith("| snapshot_budget")}
    assert row["train_budget"][:4] == ["2", "350", "200", "2.9"] and row["train_budget"][4] == "310"
    assert row["snapshot_budget"][1] == "10" and row["snapshot_budget"][4] == "9"
    assert ("train_budget's sums hold the seconds of the 2 parked segments (sittings.yaml), but for 1 parked "
            "from outside the driver, which nobody measured.") in text
    plain = "\n".join(groundtruth_tables.cost_lines(tmp_path, groundtruth_tables.BUDGET_RULES, {"seed3"}))
    assert "parked" not in plain  # no parked segment of these seeds: the table alone
