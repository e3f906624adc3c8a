"""The documentation agrees with the code: spec citations resolve to sections of docs/method.md,
no file points at the team's external spec or at tracker items, and config/README.md documents
every schema key with the schema's default."""

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import experiment_script

from learnwin.infra import layout
from learnwin.stats.growth_power import P_DECIDED

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "method.md"
CONFIG_README = ROOT / "config" / "README.md"
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"

#: The spec's sections, in order (the numbering the code cites).
SECTIONS = ["1", "2", "2a", "2b", "2c", "3", "4", "4b", "4c", "5", "6", "7", "7b", "8", "8b", "8c", "9", "10", "10b", "10c",
            "10d", "10e"]
SCANNED_DIRS = ("learnwin", "workflow", "benchmarks", "experiments", "tools", "tests", "config")
TEXT_SUFFIXES = {".py", ".smk", ".md", ".rst", ".yaml", ".yml", ".sh"}

SECTION_ID = r"\d+[a-z]?"
CITATION = re.compile(rf"docs/method\.md (§{SECTION_ID}\b(?:\s*(?:[-–,]|and)\s*§?{SECTION_ID}\b)*)")
EXTERNAL = re.compile(r"\bMETHOD\b")  # the team's spec, outside the repository
TRACKER = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)


def scanned_files() -> list[Path]:
    files = [ROOT / "Snakefile", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for d in SCANNED_DIRS:
        files += sorted(p for p in (ROOT / d).rglob("*")
                        if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts)
    return [p for p in files if p != Path(__file__).resolve()]  # this file spells the patterns


def hits(pattern: re.Pattern) -> list[str]:
    """``path:line: text`` of every line of the scanned files that matches ``pattern``."""
    out = []
    for path in scanned_files():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    return out


def spec_headings() -> list[str]:
    return re.findall(rf"^## §({SECTION_ID})\. \S", SPEC.read_text(), re.M)


def test_spec_has_the_cited_numbering_and_cites_the_paper():
    assert spec_headings() == SECTIONS
    assert "arXiv:2512.05790" in SPEC.read_text()


def cited_sections(text: str) -> set[str]:
    return {s for m in CITATION.finditer(text) for s in re.findall(SECTION_ID, m[1])}


def test_citation_parser():
    text = "see docs/method.md §4-5 and docs/method.md §1, §3-§7b; docs/method.md §8b recipe, §2 ok"
    assert cited_sections(text) == {"4", "5", "1", "3", "7b", "8b"}


def test_every_citation_names_a_section():
    sections = set(spec_headings())
    missing = [f"{path.relative_to(ROOT)}: §{s}" for path in scanned_files()
               for s in sorted(cited_sections(path.read_text()) - sections)]
    assert not missing, "citations of sections docs/method.md does not have:\n" + "\n".join(missing)


def test_no_citation_of_the_external_spec():
    found = hits(EXTERNAL)
    assert not found, "cite docs/method.md instead:\n" + "\n".join(found)


def test_no_tracker_numbers():
    found = hits(TRACKER)
    assert not found, "say what the code does, not which tracker item asked for it:\n" + "\n".join(found)


def test_patterns_match_what_they_should():
    assert TRACKER.search("(Issue #8)") and TRACKER.search("issues 3 and 4") and TRACKER.search("issue 12")
    assert not TRACKER.search("tissue 3") and not TRACKER.search("issues with lag 3")
    assert EXTERNAL.search("Choices where METHOD is silent") and not EXTERNAL.search("METHODS, methods")


# ---- config/README.md against the JSON schema ----

def schema_defaults(node: dict | None = None, prefix: str = "") -> dict[str, object]:
    """Dotted key -> schema default of every leaf key; the ``optim`` section's from the optimizer
    registry, which the config check validates it against (learnwin.infra.optimizers)."""
    if node is None:
        from learnwin.infra import optimizers

        node = yaml.safe_load(SCHEMA.read_text())
        node["properties"]["optim"] = optimizers.schema()
    out = {}
    for name, spec in node["properties"].items():
        if "properties" in spec:
            out.update(schema_defaults(spec, f"{prefix}{name}."))
        else:
            assert "default" in spec, f"schema key {prefix}{name} has no default"
            out[prefix + name] = spec["default"]
    return out


def parse_default(cell: str, n_keys: int) -> list[object]:
    """The README's default cell -> one value per key of its row."""
    cell = cell.replace("`", "").strip()
    m = re.fullmatch(r"(\d+) … (\d+) \(powers of 2\)", cell)
    if m:
        values = [[2**k for k in range(int(m[1]).bit_length() - 1, int(m[2]).bit_length())]]
    elif n_keys > 1:
        values = yaml.safe_load(f"[{cell}]")
        values = values * n_keys if len(values) == 1 else values
    else:
        values = [yaml.safe_load(cell)]
    return [_number(v) for v in values]


def _number(v):
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def readme_defaults(text: str) -> dict[str, object]:
    """Dotted key -> documented default, from the ``| key | default | meaning |`` tables."""
    out, section, in_table = {}, "", False
    for line in text.splitlines():
        if line.startswith("## "):
            m = re.match(r"## `(\w+)`", line)
            section, in_table = (m[1] + "." if m else ""), False
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["key", "default"]:
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            keys = re.findall(r"`([\w.]+)`", cells[0])
            values = parse_default(cells[1], len(keys))
            assert len(values) == len(keys), f"config/README.md row {line!r}: {len(keys)} keys, {len(values)} defaults"
            for key, value in zip(keys, values):
                assert section + key not in out, f"config/README.md documents {section}{key} twice"
                out[section + key] = value
    return out


def test_readme_parser():
    text = ("## `a` — x\n\n| key | default | meaning |\n|---|---|---|\n| `n`, `m` | 1, 1e-4 | two |\n"
            "| `l` | `[x, 2]` | list |\n| `g` | 16 … 64 (powers of 2) | grid |\n| `p`, `q` | null | both |\n"
            "\n| file | use |\n|---|---|\n| `c.yaml` | not a key |\n## Top level\n| key | default | meaning |\n"
            "|---|---|---|\n| `t` | true | flag |\n")
    assert readme_defaults(text) == {"a.n": 1, "a.m": 1e-4, "a.l": ["x", 2], "a.g": [16, 32, 64],
                                     "a.p": None, "a.q": None, "t": True}


def disagreements(readme: dict, schema: dict) -> dict[str, object]:
    """Keys undocumented, documented but not in the schema, or with another default."""
    return {
        "undocumented": sorted(set(schema) - set(readme)),
        "not in the schema": sorted(set(readme) - set(schema)),
        "default (readme, schema)": {k: (readme[k], schema[k]) for k in sorted(set(schema) & set(readme))
                                     if readme[k] != schema[k]},
    }


def test_config_readme_documents_every_schema_key_with_its_default():
    found = disagreements(readme_defaults(CONFIG_README.read_text()), schema_defaults())
    assert not any(found.values()), f"config/README.md against the schema: {found}"


def test_config_readme_check_sees_a_wrong_default_and_a_missing_key():
    text = (CONFIG_README.read_text().replace("| `steps` | 256 |", "| `steps` | 100 |")
            .replace("| `snapshot_epochs` | `[0, best]` |", "| `snapshot_epochs` | `[best]` |"))
    text = "\n".join(line for line in text.splitlines() if not line.startswith("| `block` |"))
    found = disagreements(readme_defaults(text), schema_defaults())
    assert found["undocumented"] == ["decay.block", "model.block"] and not found["not in the schema"]
    assert found["default (readme, schema)"] == {"recovery.steps": (100, 256),
                                                  "train.snapshot_epochs": (["best"], [0, "best"])}


# ---- links, section references and the findings on top ----

RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
LINKED_PAGES = ("README.md", "docs/*.md", "experiments/README.md", "config/README.md", "profiles/README.md")
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: A section named in prose: ``docs/results.md, "Across machines"`` (the quote starts a heading of the page).
SECTION_REF = re.compile(r"((?:docs/)?[\w-]+\.md),?\s+\"([^\"]+)\"")


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m[1] for m in re.finditer(r"^#+ (.+?)\s*$", path.read_text(), re.M)]


def broken_links(page: Path) -> list[str]:
    """Relative links of ``page`` whose file does not exist or whose ``#anchor`` is no heading."""
    out = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif frag and dest.suffix == ".md" and frag not in {anchor(h) for h in headings(dest)}:
            out.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return out


def broken_section_refs(path: Path) -> list[str]:
    """``page.md, "Section"`` references in ``path`` whose page has no heading starting so."""
    out = []
    text = re.sub(r"\s+", " ", path.read_text())  # a reference may wrap
    for page, section in SECTION_REF.findall(text):
        target = ROOT / "docs" / Path(page).name
        if target.exists() and not any(h.startswith(section) for h in headings(target)):
            out.append(f"{path.relative_to(ROOT)}: {page}, \"{section}\"")
    return out


def test_anchor_and_link_checks_see_a_broken_link(tmp_path):
    assert anchor("Learnability window H_N, under both noise definitions") == \
        "learnability-window-h_n-under-both-noise-definitions"
    assert anchor("Master law and the exponents a, b") == "master-law-and-the-exponents-a-b"
    page = ROOT / "docs" / "_probe.md"
    try:
        page.write_text("# Top\n\n## A, b\n\n[ok](#a-b) [ok](results.md#claims) [bad](#nothing) "
                        "[gone](results-previous-default.md) [web](https://example.org)\n"
                        'docs/results.md, "Across machines" and docs/results.md, "What the fixes changed"\n')
        assert broken_links(page) == ["docs/_probe.md: #nothing (no such heading)",
                                      "docs/_probe.md: results-previous-default.md (no such file)"]
        assert broken_section_refs(page) == ['docs/_probe.md: docs/results.md, "What the fixes changed"']
    finally:
        page.unlink()


def test_every_link_and_named_section_resolves():
    pages = sorted({p for pattern in LINKED_PAGES for p in ROOT.glob(pattern)})
    broken = [b for page in pages for b in broken_links(page)]
    broken += [b for path in scanned_files() for b in broken_section_refs(path)]
    assert not broken, "links or section names that point nowhere:\n" + "\n".join(broken)


def markdown_tables(lines: list[str]) -> list[list[list[str]]]:
    """Each markdown table in ``lines`` as rows of stripped cells (the separator row dropped)."""
    tables, rows = [], []
    for line in [*lines, ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            tables, rows = [*tables, rows], []
    return tables


def claims_tables(lines: list[str]) -> list[list[list[str]]]:
    """Tables with a ``claim`` column and one verdict column per model, a "k/n" in every model
    cell, covering the four claims (a)-(d)."""
    models = ["const", "shared", "diag", "gru", "lstm"]
    out = []
    for table in markdown_tables(lines):
        head, body = table[0], table[1:]
        if "claim" not in head or not set(models) <= set(head):
            continue
        cols = [head.index(m) for m in models]
        if ({row[head.index("claim")] for row in body} == set("abcd")
                and all(re.fullmatch(r"\d+/\d+( ✓)?", row[c]) for row in body for c in cols)):
            out.append(table)
    return out


def question_sections(text: str) -> list[str]:
    """The claims (a)-(d) that have a ``## (x) ...`` section of their own, in page order."""
    return re.findall(r"^## \(([a-d])\) ", text, re.M)


def test_results_page_opens_on_the_claims_table_and_the_questions():
    """The answer table on the first screen, the default run's claims table after it, then one
    section per claim, (a) to (d), the first within 90 lines."""
    text = RESULTS.read_text()
    first_screen = text.splitlines()[:60]
    assert answer_table.BEGIN in "\n".join(first_screen[:20]), "docs/results.md must open on the answer table"
    assert len(claims_tables(first_screen)) == 1, "the default run's claims table follows it"
    assert question_sections(text) == list("abcd"), "one section per claim, in order"
    assert question_sections("\n".join(text.splitlines()[:90]))[:1] == ["a"]
    # the section check can fail: a claim's section missing, two out of order
    assert question_sections(text.replace("\n## (b) ", "\n### (b) ")) == list("acd")
    assert question_sections(text.replace("\n## (c) ", "\n## (x) ").replace("\n## (a) ", "\n## (c) ")) != list("abcd")
    # the check can fail: the table pushed below the first screen, a cell without a verdict
    assert claims_tables(([""] * 50 + first_screen)[:60]) == []
    assert claims_tables([line.replace("3/3 ✓", "holds") for line in first_screen]) == []


# ---- one source for the answer: the README's and results.md's table is experiments/answer_table.py's ----

answer_table = experiment_script("answer_table")


def answer_disagreements(page: str) -> list[str]:
    """The rows of ``page``'s answer table that are not the generated ones (from the committed
    pages the answer names), each as "page row != generated row"."""
    want = answer_table.markdown_table(answer_table.rows()).splitlines()
    have = answer_table.block(page).splitlines()
    out = [f"{h} != {w}" for h, w in zip(have, want) if h != w]
    return out + ([f"{len(have)} lines, {len(want)} generated"] if len(have) != len(want) else [])


@pytest.mark.parametrize("page", [README, RESULTS], ids=["README", "results.md"])
def test_the_answer_table_is_the_generated_one(page):
    assert answer_disagreements(page.read_text()) == []


@pytest.mark.parametrize("old, new", [
    ("SharedGate power (c 0.26 [0.17, 0.35]); ConstGate saturating (c -0.18 [-0.25, -0.11]);",
     "SharedGate power (c -0.18 [-0.25, -0.11]); ConstGate saturating (c 0.26 [0.17, 0.35]);"),  # two cells' numbers swapped
    ("10 of 10 rows", "8 of 10 rows"),  # a count changed
    ("does not hold on the truth", "holds on the truth"),  # a verdict flipped
    ("is not shown to order the cells", "orders the cells"),  # "not supported" into "supported"
    (" (0-1 of 10 under per_lag noise and the diagonal transport)", ""),  # an exception dropped
    ("; DiagGate cut off at the last grid lag, T/2", ""),  # a qualification dropped
])
def test_the_answer_check_fails_on_each_plant(old, new):
    """The plants a review found in the README's findings (two models' numbers swapped, a count
    moved, a verdict flipped, "not supported" into "supported", an exception dropped), each planted
    alone in today's README."""
    readme = README.read_text()
    assert old in answer_table.block(readme)
    assert answer_disagreements(readme.replace(old, new, 1))


# ---- the README's default-run counts are bands that hold every committed draw and machine (method.md §8c) ----

SPAN = r"(\d+)(?:-(\d+))? of (\d+)"
#: Where the answer table states each count of learnwin.stats.band.COUNTS ("lo-hi of n" or "k of n").
SPANS = {
    "(a)": rf"power-law-like in {SPAN} learned-gate rows",
    "(b)": rf"a power of N in {SPAN} learned-gate rows",
    "(c) exact": rf"exact transport: [^;|]*, {SPAN} rows;",
    "(c) diagonal": rf"; diagonal: [^;|]*, {SPAN} \|",
    "(d)": rf"within 1 ± 0.5 in {SPAN} rows",
    "(d) per_lag diagonal": rf"\({SPAN} under per_lag noise and the diagonal transport\)",
}


def stated_bands(page: str) -> dict[str, tuple[int, int, int]]:
    """The (lo, hi, n) the page's answer table states of each count."""
    out = {}
    for name, pattern in SPANS.items():
        lo, hi, n = re.search(pattern, answer_table.block(page)).groups()
        out[name] = (int(lo), int(hi or lo), int(n))
    return out


def runs_outside(page: str, counts) -> list[str]:
    """Each committed run's count that the page's stated band does not hold."""
    bands = stated_bands(page)
    return [f"{r.run} {r.count} {r.k} of {r.n}" for r in counts.itertuples()
            if not (r.n == bands[r.count][2] and bands[r.count][0] <= r.k <= bands[r.count][1])]


def test_the_committed_counts_are_those_of_the_committed_runs():
    """learnwin/stats/tables/default_counts.csv, which an installed run's findings.md reads, is what
    ``python experiments/answer_table.py --write`` makes of the committed draws and pages."""
    from learnwin.stats import band

    assert band.read().astype(str).equals(answer_table.counts().astype(str))
    draws = yaml.safe_load((ROOT / answer_table.DRAWS / "seeds.yaml").read_text())["draws"]
    done = set(band.read().query("kind == 'draw'")["run"])
    assert done <= {"seeds" + "-".join(map(str, d)) for d in draws}, "a draw of seeds not pre-registered"


def test_the_committed_ranges_are_those_of_the_committed_pool():
    """learnwin/stats/tables/default_resampled.csv is what ``answer_table.py --write`` makes of the
    pool's agreement flags (docs/method.md §8c), and absent while the pool is not complete."""
    from learnwin.stats import band

    got, want = band.read(band.RESAMPLED), answer_table.ranges()
    assert (got is None) == (want is None)
    if want is not None:
        pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_the_second_tests_ranges_are_those_of_the_pool_and_fresh_seeds():
    """data/runs/default-fresh2/ranges.csv, the band that the second registered test of docs/method.md
    §8c checks, is what ``answer_table.py --write`` makes of the pool's and the fresh runs' 84 seeds,
    committed before any of that test's runs."""
    got = pd.read_csv(ROOT / answer_table.RANGES2)
    pd.testing.assert_frame_equal(got, answer_table.ranges(ROOT, answer_table.BAND_TESTS[answer_table.FRESH2]),
                                  check_dtype=False)
    assert set(got["seeds"]) == {84} and set(got["subsets"]) == {84 * 83 * 82 // 6}


def test_the_committed_fresh_counts_are_those_of_the_committed_fresh_runs():
    """learnwin/stats/tables/default_fresh.csv, from which a run outside the band learns how often the
    fresh runs of docs/method.md §8c's test lay outside, is what ``answer_table.py --write`` makes of
    data/runs/default-fresh."""
    from learnwin.stats import band

    assert band.read(band.FRESH).astype(str).equals(answer_table.fresh_counts().astype(str))


def test_a_check_run_is_placed_in_bullets_within_findings_word_limit():
    """Each kept check run of docs/method.md §8c, placed as an installed run's findings.md places it:
    outside in one count, then what the fresh runs say of that (20 of them, 2 outside, each in one
    count), then the other check run it reproduces; each bullet within findings.md's word limit."""
    from prose import LIMIT, markdown_blocks, too_long

    from learnwin.stats import band

    every = band.read_checks()
    for run in answer_table.CHECK_RUNS:
        sentences = band.position(answer_table.claims_table(ROOT / answer_table.RUNS / run), band.read(),
                                  ranges=band.read(band.RESAMPLED), checks=every[every["run"] != run],
                                  fresh=band.read(band.FRESH))
        assert len(sentences) == 3 and "lies outside in 1 of 6 counts: (c) diagonal 8 of 10 rows" in sentences[0]
        assert sentences[1].startswith("Of the 20 default runs on unused seeds of §8c's test, 2 lay outside too, "
                                       "in at most 1 count each: a count outside is what a seed draw gives")
        assert too_long(markdown_blocks("\n".join(f"- {s}" for s in sentences))) == [], LIMIT


def _last_cpu(draw_set: Path) -> dict[str, str]:
    times = draw_set / "times.tsv"
    rows = pd.read_csv(times, sep="\t") if times.is_file() else pd.DataFrame(columns=["draw", "rc", "cpu"])
    return dict(rows[rows["rc"] == 0][["draw", "cpu"]].values)


def test_a_pool_draw_on_its_draws_cpu_gives_the_draws_claims_table():
    """A draw re-run for the pool on the CPU that ran it gives its committed claims table, every
    column, bit for bit (docs/method.md §8c); the pool's agreement flags count each row's k."""
    from learnwin.infra import io
    from learnwin.stats import band

    pool, draws = _last_cpu(ROOT / answer_table.POOL), _last_cpu(ROOT / answer_table.DRAWS)
    same = [d for d, cpu in pool.items() if draws.get(d) == cpu]
    if not same:
        pytest.skip("no pool draw yet on the CPU of its draw")
    for d in same:
        path = layout.under(Path(d), layout.CLAIMS["parquet"])
        mine, theirs = (pd.read_parquet(ROOT / s / path) for s in (answer_table.POOL, answer_table.DRAWS))
        pd.testing.assert_frame_equal(mine, theirs)
        flags = io.read_table(ROOT / answer_table.POOL / d / band.AGREEMENT, "agreement")
        k = flags.groupby(["claim", "check", "model", "optimizer", "noise", "transport", "functional"])["agree"].sum()
        rows = mine[mine["n"] > 0].set_index(list(k.index.names))["k"]
        assert k.reindex(rows.index).astype(int).tolist() == rows.astype(int).tolist()


def test_a_pool_draws_own_triple_resampled_gives_its_counts():
    """Resampling one kept draw's three seeds gives one triple, whose counts are the draw's own
    (learnwin.stats.band.subset_counts counts rows as the claims do)."""
    from learnwin.infra import io
    from learnwin.stats import band

    done, _ = answer_table.kept(ROOT, answer_table.POOL)
    if not done:
        pytest.skip("no pool draw kept yet")
    for d in done:
        x, rows = band.subset_counts(io.read_table(d / band.AGREEMENT, "agreement"))
        own = band.run_counts(pd.read_parquet(layout.under(d, layout.CLAIMS["parquet"])))
        assert {name: (int(x[name].iloc[0]), rows[name]) for name in x} == own, d.name


@pytest.mark.parametrize("page", [README, RESULTS], ids=["README", "results.md"])
def test_every_committed_run_lies_inside_the_stated_band(page):
    from learnwin.stats import band

    assert runs_outside(page.read_text(), band.read()) == []


@pytest.mark.parametrize("name", list(SPANS))
def test_the_band_check_fails_on_a_planted_count_outside(name):
    """A run whose count lies one row beyond the README's band (above it, or below where the band
    reaches n) is named."""
    from learnwin.stats import band

    readme = README.read_text()
    lo, hi, n = stated_bands(readme)[name]
    planted = band.counts_table([("planted", "draw", {name: (hi + 1 if hi < n else lo - 1, n)})])
    assert runs_outside(readme, planted) == [f"planted {name} {planted['k'][0]} of {n}"]
    assert runs_outside(readme, band.counts_table([("planted", "draw", {name: (lo, n)})])) == []


def test_readme_opens_with_the_answer_in_few_words():
    """Two commands first, the four claims, the answer table and its picture before the first
    section, in at most 250 words of prose (code blocks and table rows not counted)."""
    text = README.read_text()
    opening = text.split("\n## ", 1)[0]
    assert opening.index("python3 -m venv") < opening.index("**(a)**") < opening.index(answer_table.BEGIN)
    assert all(f"**({c})**" in opening for c in "abcd") and "![" in opening
    assert (ROOT / re.search(r"!\[[^\]]*\]\(([^)]+)\)", opening)[1]).is_file()
    prose = re.sub(r"```.*?```", " ", opening, flags=re.S)
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith(("|", "<!--", "!", "#")))
    assert len(re.findall(r"\S+", prose)) <= 250


GROWTH = "docs/results-growth.md"  # the T 128 page
GROWTH_PAGE = (ROOT / GROWTH).read_text()


def test_growth_cells_tell_undecided_from_differs():
    """Claim (d)'s cells counted by verdict: a cell set to undecided is no longer counted as
    differing, and one set to consistent is counted as such; the page as it is: every cell differs."""
    _, d_text, _ = answer_table.growth_cells(GROWTH_PAGE)
    assert "5 of 5 cells differ from kappa" in d_text and "undecided" not in d_text
    rows = GROWTH_PAGE.split("### Claim (d) on the truth", 1)
    gru = next(line for line in rows[1].splitlines() if line.startswith("| gru |"))
    for verdict, words in (("undecided", "4 of 5 cells differ from kappa, 1 of 5 cells undecided"),
                           ("consistent with kappa", "4 of 5 cells differ from kappa, 1 of 5 cells consistent")):
        planted = GROWTH_PAGE.replace(gru, gru.replace("differs from kappa (below)", verdict))
        assert words in answer_table.growth_cells(planted)[1]


def test_each_cells_measured_law_comes_from_the_newest_growth_page_that_ran_it(tmp_path):
    """With the T 128 page alone, the row is that page's; a T 256 page of four cells takes their
    laws and its prediction, and the GRU's law stays the T 128 page's, each part naming its run."""
    (tmp_path / "docs").mkdir()
    (tmp_path / GROWTH).write_text(GROWTH_PAGE)
    law, _, pred = answer_table.growth_cells(GROWTH_PAGE)
    assert answer_table.measured_window(tmp_path) == (f"{law}; the prediction from the init networks {pred}",
                                                      "T 128, 5 unseen seeds", "§10c")
    lines = GROWTH_PAGE.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| const | 11213: 0.18,")]
    newer = [line for line in lines if not line.startswith("| gru |")]  # four cells, ConstGate decided log N
    newer = "\n".join(newer).replace(lines[rows[0]], lines[rows[0]].replace("undecided (cut off)", "log N"))
    newer = newer.replace("| 0.200 | 5 | 9 | 0.451 | 0.083 |", "| 0.200 | 4 | 9 | 0.667 | 0.021 |")
    (tmp_path / "docs" / "results-growth-T256.md").write_text(newer)
    finds, run, rule = answer_table.measured_window(tmp_path)
    assert finds.startswith("T 256: ConstGate log N (c -0.00 [-0.22, 0.21]); LSTM undecided")
    assert "SharedGate, DiagGate cut off at the last grid lag, T/2; the prediction from the init networks orders " \
           "the cells: tau-b 0.67, exact p 0.021; T 128: GRU power (c 0.44 [0.33, 0.55])" in finds
    assert finds.count("the prediction") == 1 and finds.count("GRU") == 1
    assert (run, rule) == ("T 256, 5 unseen seeds; T 128, 5 unseen seeds (GRU)", "§10d, §10c")


def test_claim_d_on_the_truth_comes_from_the_newest_growth_page(tmp_path):
    """master_law: with the T 128 page alone, its (d) and run; with the T 256 page beside it, the T 256
    page's (d) (its own range of s - kappa and count of cells), run and rule; with none, an error
    naming the pages."""
    (tmp_path / "docs").mkdir()
    with pytest.raises(SystemExit, match="results-growth.md"):
        answer_table.master_law(tmp_path)
    (tmp_path / GROWTH).write_text(GROWTH_PAGE)
    assert answer_table.master_law(tmp_path) == (answer_table.growth_cells(GROWTH_PAGE)[1], "T 128", "§10c")
    t256 = (ROOT / "docs" / "results-growth-T256.md").read_text()
    (tmp_path / "docs" / "results-growth-T256.md").write_text(t256)
    d_text, run, rule = answer_table.master_law(tmp_path)
    assert (d_text, run, rule) == (answer_table.growth_cells(t256)[1], "T 256", "§10d")
    assert "4 of 4 cells differ from kappa" in d_text and d_text != answer_table.growth_cells(GROWTH_PAGE)[1]


def test_an_arm_of_one_cell_gives_that_cells_law_and_the_older_pages_the_rest(tmp_path, monkeypatch):
    """An arm (docs/method.md §10e: a page of one cell, no prediction) newer than the T 256 page gives
    DiagGate's law and names its cell; the prediction and claim (d) stay the T 256 page's, the GRU's
    law the T 128 page's."""
    docs = tmp_path / "docs"
    docs.mkdir()
    t256 = (ROOT / "docs" / "results-growth-T256.md").read_text()
    for name in ("results-growth.md", "results-growth-T256.md"):
        (docs / name).write_text((ROOT / "docs" / name).read_text())
    before = answer_table.measured_window(tmp_path)
    pred = t256.split("### The prediction from the init networks", 1)[1].split("###", 1)[0]
    arm = "\n".join(line for line in t256.replace(pred, "").replace("### The prediction from the init networks", "")
                    .splitlines() if not line.startswith(("| const |", "| shared |", "| lstm |")))
    arm = arm.replace("| diag | 16703:", "| diag | 61001: 0.21, 16703:", 1)  # one more seed listed: 21
    (docs / "arm.md").write_text(arm)
    monkeypatch.setattr(answer_table, "GROWTH_PAGES", {"docs/arm.md": ("T 512", "§10e"), **answer_table.GROWTH_PAGES})
    assert [a for *_, a in answer_table.growth_pages(tmp_path)] == [True, False, False]
    diag, _, none = answer_table.growth_cells(arm)
    assert none is None and diag == answer_table.growth_cells(t256, ["diag"])[0]
    finds, run, rule = answer_table.measured_window(tmp_path)
    three = answer_table.growth_cells(t256, ["const", "shared", "lstm"])[0]
    assert finds == (f"T 512: {diag}; T 256: {three}; the prediction from the init networks "
                     f"{answer_table.growth_cells(t256)[2]}; T 128: GRU power (c 0.44 [0.33, 0.55])")
    assert finds.count("the prediction") == 1 and before[0].count("the prediction") == 1
    assert run == ("T 512, 21 unseen seeds (DiagGate); T 256, 20 unseen seeds (ConstGate, SharedGate, LSTM); "
                   "T 128, 5 unseen seeds (GRU)") and rule == "§10e, §10d, §10c"
    assert answer_table.master_law(tmp_path) == (answer_table.growth_cells(t256)[1], "T 256", "§10d")
    for name in ("results-growth.md", "results-growth-T256.md"):
        (docs / name).unlink()
    with pytest.raises(SystemExit, match="several cells"):  # an arm alone has no claim (d) across cells
        answer_table.master_law(tmp_path)


def test_growth_cells_word_the_prediction_and_an_undecided_law():
    """p >= 0.05: "is not shown to order"; p < 0.05: "orders". An undecided law gives the power its
    design had (docs/method.md §10d) where the growth-law table has that column."""
    law, _, pred = answer_table.growth_cells(GROWTH_PAGE)
    assert pred.startswith("is not shown to order the cells: tau-b 0.45, exact p 0.083")
    assert "LSTM undecided (c -0.24 [-0.50, 0.02]; the design's power log N: 0.00, c 0.18: 0.19)" in law
    assert "GRU power (c 0.44 [0.33, 0.55])" in law  # a decided law has none
    row = next(line for line in GROWTH_PAGE.splitlines() if line.startswith("| 0.200 | 5 | 9 |"))
    assert answer_table.growth_cells(GROWTH_PAGE.replace(row, row.replace("0.083", "0.042")))[2].startswith(
        "orders the cells: tau-b 0.45, exact p 0.042")
    moved = GROWTH_PAGE.replace("| log N: 0.00, c 0.18: 0.19 |", "| log N: 0.71, c 0.18: 0.60 |")
    assert "(c -0.24 [-0.50, 0.02]; the design's power log N: 0.71, c 0.18: 0.60)" in answer_table.growth_cells(moved)[0]
    lines = GROWTH_PAGE.split("### Claim (b), the growth law", 1)[1].split("\n\n", 2)[1].splitlines()
    assert lines[0].endswith(f" {P_DECIDED} |")
    without = GROWTH_PAGE.replace("\n".join(lines), "\n".join(line.rsplit("|", 2)[0] + "|" for line in lines))
    assert "the design's power" not in answer_table.growth_cells(without)[0]  # a page without the column


def unlisted_scripts(readme: str, scripts: list[str]) -> list[str]:
    """The scripts whose file name the README does not mention."""
    return [name for name in scripts if name not in readme]


def test_experiments_readme_lists_every_script():
    """experiments/README.md, which the README points to for the scripts, names each of them; a
    script it leaves out is found."""
    readme = (ROOT / "experiments" / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "experiments").glob("*.py"))
    assert len(scripts) >= 18 and unlisted_scripts(readme, scripts) == []
    assert unlisted_scripts(readme.replace("seed_by_seed.py", "seed-by-seed"), scripts) == ["seed_by_seed.py"]
