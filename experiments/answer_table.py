"""The answer at a glance: the paper's four claims against what learnwin finds, one row per
claim, generated from the committed results pages and tables, for the README's opening and
docs/results.md's first screen.

    python experiments/answer_table.py            # print the table
    python experiments/answer_table.py --write    # write it between the markers of both pages,
                                                  # the runs' counts (learnwin.stats.band.TABLE)
                                                  # the pool's ranges (band.RESAMPLED), the check
                                                  # runs' estimates (band.CHECKS) and the fresh
                                                  # runs' counts (band.FRESH)

Sources: the claims tables of the pre-registered seed draws of the default run (docs/method.md
§8c, ``data/runs/default-draws/*/claims.parquet``, each ``snakemake --cores 2 --config
'seeds=[...]'``), the "Claims at a glance" table of the default run of every machine in
:data:`DEFAULT_RUNS` (``python experiments/results_tables.py RESULTS`` after ``snakemake --cores
2``), and the pre-registered growth-law runs (:data:`GROWTH_PAGES`, each ``python
experiments/groundtruth_tables.py RESULTS --growth``). A default-run count is given as its band
over the draws and the machines (learnwin.stats.band: k of n rows that hold, lo-hi where the runs
differ; docs/method.md §8b: a row holds when more than half of its seeds agree), widened to the
resampled range of the pool's seeds once ``data/runs/default-pool`` is complete (§8c), and the verdict
word of §8b (learnwin.stats.claims.verdict_word) with the number of runs it comes out in; on the
ground truth, the rule of §10c. ``tests/test_docs.py`` holds the README's and results.md's table,
and the committed counts, to this output.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd
import yaml

from learnwin.infra import io, layout
from learnwin.report.formatting import table_after
from learnwin.stats import band
from learnwin.stats.claims import TRUTH_WORDS
from learnwin.stats.decay import PRIMARY
from learnwin.stats.growth_power import P_DECIDED

ROOT = Path(__file__).resolve().parents[1]
#: The committed default runs, one per recorded machine: (machine and commit, page).
DEFAULT_RUNS = {
    "AMD EPYC family 25 model 1, 39917d4": "docs/results-default.md",
    "Intel Xeon family 6 model 167, b57989e": "docs/results-default-xeon.md",
}
#: The pre-registered growth-law pages, newest first, with their run's length and rule: a cell's
#: measured law is the newest page's that ran it (docs/method.md §10d, §10c).
GROWTH_PAGES = {"docs/results-growth-T256.md": ("T 256", "§10d"), "docs/results-growth.md": ("T 128", "§10c")}
#: The folder of the committed runs' raw tables.
RUNS = Path("data", "runs")
#: The pre-registered seed draws of the default run (docs/method.md §8c): one results folder per
#: draw (learnwin.infra.layout inside it), and seeds.yaml.
DRAWS = RUNS / "default-draws"
#: The seed-resampled band's pool (the draws' seeds re-run, each draw with its agreement flags)
#: and its test's fresh triples (docs/method.md §8c): draw sets of the same form.
POOL = RUNS / "default-pool"
FRESH = RUNS / "default-fresh"
#: The registered test of the band resampled from the pool's and the fresh runs' 84 seeds (§8c).
FRESH2 = RUNS / "default-fresh2"
#: Each registered test of a resampled band: its draw set -> the draw sets whose seeds make its pool.
BAND_TESTS = {FRESH: (POOL,), FRESH2: (POOL, FRESH)}
#: The committed ranges of the band that :data:`FRESH2` tests, fixed before its runs.
RANGES2 = FRESH2 / "ranges.csv"
#: The default seeds on CPUs the band does not contain, its registered checks (docs/method.md §8c):
#: folder of :data:`RUNS` -> CPU.
CHECK_RUNS = {"default-epyc-25-17": "AMD EPYC of cpu family 25, model 17",
              "default-epyc-26-2": "AMD EPYC of cpu family 26, model 2"}
GLANCE = "### Claims at a glance, each transport's primary functional"
GLANCE_EVERY = "### Claims at a glance, every functional"
#: A default-run page whose claim (d) has the equivalence band of docs/method.md §8b prints this column.
BAND_COLUMN = "CI within 1 ± 0.5"
LAW_HEAD = "### Claim (b), the growth law"
PRED_HEAD = "### The prediction from the init networks"
NAMES = {"const": "ConstGate", "shared": "SharedGate", "diag": "DiagGate", "gru": "GRU", "lstm": "LSTM"}
BEGIN, END = "<!-- answer -->", "<!-- /answer -->"
HEADER = ["claim", "the paper says", "learnwin finds", "run", "rule"]


def glance(page: str) -> pd.DataFrame:
    """A default-run page's claims table on each transport's primary functional (the page's own, or
    its every-functional table's primary rows), long: claim, check, optimizer, noise, transport,
    model, holds."""
    if GLANCE in page:
        wide = table_after(page, GLANCE)
    else:
        wide = table_after(page, GLANCE_EVERY)
        wide = wide[wide["functional"] == wide["transport"].map(PRIMARY)].drop(columns="functional")
    long = wide.melt(id_vars=["claim", "check", "optimizer", "noise", "transport"], var_name="model",
                     value_name="cell")
    return long.assign(holds=long["cell"].str.endswith("✓"))


P_ORDER = 0.05  # the prediction orders the cells below this exact p (docs/method.md §10b)


def growth_cells(page: str, cells: list[str] | None = None) -> tuple[str, str, str]:
    """(b) on the truth (of ``cells``, default all), (d) on the truth and the prediction's order
    from a growth page (docs/results-growth.md). Claim (d)'s cells are counted by verdict: those
    that differ from kappa (above or below) apart from the undecided and the consistent ones; the
    prediction "orders" the cells only at p < :data:`P_ORDER`, else it is "not shown to order" them;
    a page without the prediction (an arm of one cell, docs/method.md §10e) gives None for it."""
    law = table_after(page, LAW_HEAD).set_index("model")
    law = law.loc[[m for m in law.index if cells is None or m in cells]]
    parts = []
    for word in ("power", "log N", "saturating", "undecided"):
        models = [m for m in law.index if law.loc[m, "verdict"] == word]
        parts += [f"{NAMES[m]} {word} (c {law.loc[m, 'mean c']} {law.loc[m, '95 % t-interval of c']}"
                  + (f"; the design's power {law.loc[m, P_DECIDED]}" if word == "undecided" and P_DECIDED in law
                     else "") + ")" for m in models]
    cut = [m for m in law.index if law.loc[m, "verdict"].endswith("(cut off)")]
    if cut:
        parts.append(", ".join(NAMES[m] for m in cut) + " cut off at the last grid lag, T/2")
    d = table_after(page, "### Claim (d) on the truth").set_index("model")
    overall = re.search(r"Claim \(d\) on the truth: \*\*(\w+)\*\*", page)[1]
    means = d["mean d"].astype(float)
    counts = {word: int(d["verdict"].str.startswith(word).sum()) for word in ("differs", "undecided", "consistent")}
    d_text = (f"{TRUTH_WORDS[overall]} on the truth: s - kappa {means.min():.2f} to {means.max():.2f}, "
              + ", ".join(f"{k} of {len(d)} cells {text}" for text, k in
                          (("differ from kappa", counts["differs"]), ("undecided", counts["undecided"]),
                           ("consistent with kappa", counts["consistent"])) if k or text == "differ from kappa"))
    if PRED_HEAD not in page:
        return "; ".join(parts), d_text, None
    pred = table_after(page, PRED_HEAD).iloc[0]
    p = float(pred["p_perm"])
    pred_text = (f"{'orders' if p < P_ORDER else 'is not shown to order'} the cells: tau-b "
                 f"{float(pred['tau_mean']):.2f}, exact p {p:.3f}")
    return "; ".join(parts), d_text, pred_text


def growth_pages(root: Path = ROOT) -> list[tuple[str, str, str, bool]]:
    """(text, run, rule, arm) of each page of :data:`GROWTH_PAGES` under ``root``, newest first; an
    arm is a page of one cell (docs/method.md §10e), which gives that cell's law and no prediction
    or claim (d) across cells."""
    out = []
    for name, (run, rule) in GROWTH_PAGES.items():
        if (root / name).is_file():
            page = (root / name).read_text()
            out.append((page, run, rule, len(table_after(page, LAW_HEAD)) == 1))
    if not out:
        raise SystemExit(f"no growth page under {root}: {', '.join(GROWTH_PAGES)}")
    return out


def measured_window(root: Path = ROOT) -> tuple[str, str, str]:
    """Claim (b) measured by training: each cell's law from the newest page of :data:`GROWTH_PAGES`
    that ran it, and the prediction from the init networks of the newest page that is not an arm;
    the row's finding, run and rule. Where two pages contribute, each part names its run, and each
    run but the first of several cells names its cells."""
    parts, runs, rules, seen, pred_given = [], [], [], set(), False
    for page, run, rule, arm in growth_pages(root):
        law = table_after(page, LAW_HEAD).set_index("model")
        cells = [m for m in law.index if m not in seen]
        if not cells:
            continue
        text, _, pred = growth_cells(page, cells)
        if pred is not None and not pred_given:
            text, pred_given = f"{text}; the prediction from the init networks {pred}", True
        parts.append((run, text))
        seeds = len(re.findall(r"\d+: ", law["c per seed"].iloc[0]))  # every seed is listed, fitted or not
        runs.append(f"{run}, {seeds} unseen seeds"
                    + (f" ({', '.join(NAMES[m] for m in cells)})" if seen or arm else ""))
        rules.append(rule)
        seen.update(cells)
    finds = "; ".join(f"{run}: {text}" if len(parts) > 1 else text for run, text in parts)
    return finds, "; ".join(runs), ", ".join(rules)


def master_law(root: Path = ROOT) -> tuple[str, str, str]:
    """Claim (d) on the truth from the newest page of :data:`GROWTH_PAGES` that is not an arm: its
    words, run and rule."""
    for page, run, rule, arm in growth_pages(root):
        if not arm:
            return growth_cells(page)[1], run, rule
    raise SystemExit(f"no growth page of several cells under {root}: {', '.join(GROWTH_PAGES)}")


def counts(root: Path = ROOT) -> pd.DataFrame:
    """The counts of every committed default run (learnwin.stats.band.TABLE): each seed draw's
    claims table under :data:`DRAWS`, then each machine's page; claim (d) of a page only where it
    has §8b's equivalence band (:data:`BAND_COLUMN`)."""
    draws = sorted(d for d in (root / DRAWS).iterdir() if layout.under(d, layout.CLAIMS["parquet"]).is_file())
    runs = [(d.name, "draw", band.run_counts(claims_table(d)))
            for d in draws]
    for machine, name in DEFAULT_RUNS.items():
        page = (root / name).read_text()
        own = band.run_counts(glance(page))
        runs.append((machine, "machine", {c: v for c, v in own.items() if BAND_COLUMN in page or "(d)" not in c}))
    return band.counts_table(runs)


def claims_table(folder: Path) -> pd.DataFrame:
    """The verdict table of a kept run (its claims.parquet in the results layout under ``folder``)."""
    return pd.read_parquet(layout.under(folder, layout.CLAIMS["parquet"]))


def checks(root: Path = ROOT) -> pd.DataFrame:
    """The check runs' estimates (learnwin.stats.band.CHECKS)."""
    return pd.concat([band.check_estimates(run, cpu, claims_table(root / RUNS / run)) for run, cpu in CHECK_RUNS.items()],
                     ignore_index=True)


def kept(root: Path, draw_set: Path) -> tuple[list[Path], int]:
    """The draws of a draw set whose tables are kept, and how many its seeds.yaml registers."""
    registered = yaml.safe_load((root / draw_set / "seeds.yaml").read_text())["draws"]
    folders = [root / draw_set / band.draw_name(d) for d in registered]
    return [d for d in folders if layout.under(d, layout.CLAIMS["parquet"]).is_file()], len(registered)


def ranges(root: Path = ROOT, pool: tuple[Path, ...] = (POOL,)) -> pd.DataFrame | None:
    """The resampled ranges (learnwin.stats.band.resampled) of the seeds of the draw sets ``pool``
    (the README's band: :data:`POOL`'s) once every registered draw of each is kept, else None."""
    flags = agreement(root, pool)
    return None if flags is None else band.resampled(flags)


def agreement(root: Path, pool: tuple[Path, ...]) -> pd.DataFrame | None:
    """The agreement flags of the draws of the draw sets ``pool``, stacked, once every registered
    draw of each is kept, else None."""
    parts = []
    for draw_set in pool:
        done, registered = kept(root, draw_set)
        if len(done) < registered:
            return None
        parts += [io.read_table(d / band.AGREEMENT, "agreement") for d in done]
    return pd.concat(parts, ignore_index=True)


def fresh_counts(root: Path = ROOT) -> pd.DataFrame:
    """The counts of each kept fresh run of :data:`FRESH` (learnwin.stats.band.FRESH)."""
    done, _ = kept(root, FRESH)
    return band.counts_table([(d.name, "fresh", band.run_counts(claims_table(d))) for d in done])


def band_test(test: Path, root: Path = ROOT) -> str:
    """The registered test (docs/method.md §8c) of the band resampled from the pool of
    :data:`BAND_TESTS` on the draw set ``test``, in one line: its state, the share of its runs
    inside with its 95 % interval, then each run outside, its counts outside and how many of the
    pool's triples reach them."""
    flags = agreement(root, BAND_TESTS[test])
    if flags is None:
        return f"{test}: the pool of its band is not complete; no test"
    b = band.bands(counts(root), band.resampled(flags))
    done, registered = kept(root, test)
    tables = {d.name: claims_table(d) for d in done}
    out = {name: band.outside(band.run_counts(table), b) for name, table in tables.items()}
    inside = sum(not o for o in out.values())
    x = band.subset_counts(flags)[0]
    coverage = band.coverage(x, b)
    verdict = band.fresh_verdict(inside, len(done), registered, coverage)
    share = "" if not done else " share inside {:.2f} [{:.2f}, {:.2f}] (exact 95 %);".format(
        *band.share_interval(inside, len(done)))
    named = "".join(f" {name} outside: {'; '.join(o)}.{pool_tails(tables[name], b, x)}" for name, o in out.items() if o)
    spans = ", ".join(f"{name} {v.span()}" for name, v in b.items())
    return (f"{test} (band of {flags['seed'].nunique()} seeds: {spans}): {inside} of {len(done)} runs kept ({registered} "
            f"registered) inside in every count;{share} pass at {band.fresh_threshold(registered, coverage)} or "
            f"more (coverage {coverage:.3f}): {verdict}.{named}")


def pool_tails(table: pd.DataFrame, b: dict[str, band.Band], x: pd.DataFrame) -> str:
    """How many of the pool's triples (their counts ``x``, learnwin.stats.band.subset_counts) reach
    each count of the run's verdict ``table`` that lies outside the bands ``b`` (as high, or as
    low), in words."""
    words = []
    for name, (k, n) in band.run_counts(table).items():
        if name in b and not b[name].lo <= k <= b[name].hi:
            reach = int((x[name] >= k).sum() if k > b[name].hi else (x[name] <= k).sum())
            words.append(f"{name} {k} of {n}: {reach} of {len(x)} pool triples ({100 * reach / len(x):.1f} %) reach it")
    return "".join(f" {w}." for w in words)


def runs_phrase(b: band.Band) -> str:
    """"default, 8 seed draws and 2 machines"."""
    parts = [f"{k} seed draw{'s' * (k > 1)}" if kind == "draw" else f"{k} machine{'s' * (k > 1)}"
             for kind, k in b.runs.items() if k]
    return "default, " + " and ".join(parts) + (f", {b.subsets} resampled triples" if b.subsets else "")


def rows(root: Path = ROOT) -> list[list[str]]:
    """The answer table's rows from the committed pages and tables under ``root``."""
    b = band.bands(counts(root), ranges(root))
    a, bb, c_exact, c_diag, d, d_diagonal = (b[name] for name in band.COUNTS)
    d_truth, d_run, d_rule = master_law(root)
    measured, measured_run, measured_rule = measured_window(root)
    return [
        ["(a) envelope", "learned gates give slowly (power-law) decaying envelopes",
         f"{a.word_phrase()}: power-law-like in {a.span()} learned-gate rows", runs_phrase(a), "§8b, §8c"],
        ["(b) predicted window", "H_N grows like a power of N where the envelope is a power law (learned gates)",
         f"{bb.word_phrase()}: a power of N in {bb.span()} learned-gate rows", runs_phrase(bb), "§8b, §8c"],
        ["(b) measured window", "the same, measured by training",
         measured, measured_run, measured_rule],
        ["(c) optimizer", "AdamW broadens the time scales and slows the envelope against SGD",
         f"exact transport: {c_exact.word_phrase()}, {c_exact.span()} rows; diagonal: {c_diag.word_phrase()}, "
         f"{c_diag.span()}", runs_phrase(c_exact), "§8b, §8c"],
        ["(d) master law", "log N*(l) grows like kappa (-log f(l)): slope 1 in kappa-units",
         f"{d_truth}; in the default run: {d.word_phrase()}, the master slope's interval within 1 ± 0.5 in "
         f"{d.span()} rows ({d_diagonal.span()} under per_lag noise and the diagonal transport)",
         f"{d_run}; {runs_phrase(d)}", f"{d_rule}, §8b, §8c"],
    ]


def markdown_table(table: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in table])


def block(text: str) -> str:
    """The table between the answer markers of a page."""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def write(path: Path, table: str) -> None:
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the table into README.md and docs/results.md")
    args = ap.parse_args(argv)
    table = markdown_table(rows())
    if args.write:
        for page in ("README.md", "docs/results.md"):
            write(ROOT / page, table)
        counts(ROOT).to_csv(band.TABLE, index=False)
        r = ranges(ROOT)
        if r is not None:
            r.to_csv(band.RESAMPLED, index=False)
        checks(ROOT).to_csv(band.CHECKS, index=False)
        fresh_counts(ROOT).to_csv(band.FRESH, index=False)
        wide = ranges(ROOT, BAND_TESTS[FRESH2])
        if wide is not None:
            wide.to_csv(ROOT / RANGES2, index=False)
    print(table)
    every, committed, flags = checks(ROOT), counts(ROOT), agreement(ROOT, BAND_TESTS[FRESH])
    r = band.resampled(flags)
    b, x, fresh = band.bands(committed, r), band.subset_counts(flags)[0], fresh_counts(ROOT)
    for run in CHECK_RUNS:
        check = claims_table(ROOT / RUNS / run)
        others = every[every["run"] != run]
        told = " ".join(band.position(check, committed, ranges=r, checks=others, fresh=fresh))
        print(f"{RUNS / run}: {told}{pool_tails(check, b, x)}")
    for test in BAND_TESTS:
        print(band_test(test, ROOT))


if __name__ == "__main__":
    main()
