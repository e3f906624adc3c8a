"""Workflow-level checks of the figures and report stages (slow: they run Snakemake).

* On synthetic artifacts (tests/synthetic.py) with only common/figures/report rules: every
  figure, the summary and provenance are made, and the report embeds them all.
* The report renders in a headless browser (Chromium, where installed): its landing page shows the
  claims' tables.
* On the smoke config with the whole workflow (needs every upstream stage): changing only
  ``figures.dpi`` re-schedules figure jobs (and provenance) and nothing upstream, and
  ``snakemake --report`` builds a report that contains every figure.
"""

from __future__ import annotations

import base64
import html as htmllib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import synthetic as S
import yaml
from workflow_helpers import copy_workflow, scheduled, snakemake

from learnwin.infra import layout
from learnwin.infra.figures import FIGURES

FIGURE_RULES = {f"plot_{name}" for name in FIGURES}
# Rules allowed to re-run when only the figures section changes: the figures, provenance
# (it records the config) and the target rules.
FIGURE_ONLY = FIGURE_RULES | {"write_provenance", "all", "figures", "summary"}

pytestmark = pytest.mark.slow


def _with_figures(work: Path, base: str, **figures) -> str:
    """Write a copy of config ``base`` with the figures section updated; return its path."""
    config = yaml.safe_load((work / base).read_text())
    config["figures"] = {**config.get("figures", {}), **figures}
    path = work / "config" / "changed.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path.relative_to(work))


def _report_has_every_figure(work: Path, *args: str) -> None:
    report = work / "report.html"
    snakemake(work, "--report", str(report), *args)
    html = report.read_text()
    for rule in FIGURE_RULES:
        assert f"{rule.removeprefix('plot_')}.png" in html, rule
    assert "summary.html" in html
    assert "Reading of the results" in html  # reading.rst, included by workflow.rst
    assert "system-message" not in html  # no rst error in the landing page or captions
    _report_has_the_verdict_table(work, html)


def _embedded(html: str) -> str:
    """The report's landing page (a JSON string in the HTML) and every embedded HTML result (a
    base64 data URI), decoded."""
    landing = json.loads(re.search(r'var workflow_desc = (".*?");\n', html).group(1))
    blobs = re.findall(r"data:text/html;charset=[\w-]+;filename=[^;]*;base64,([A-Za-z0-9+/=]+)", html)
    return landing + "".join(base64.b64decode(b).decode("utf-8", "replace") for b in blobs)


def _report_has_the_verdict_table(work: Path, html: str) -> None:
    """The Claims category holds claims.html, and the landing page and that page show every verdict
    row of claims.parquet: its cells (model, optimizer, k/n, holds, fails or not scored) in table order."""
    claims = pd.read_parquet(work / layout.CLAIMS["parquet"])
    assert "Claims" in html and "claims.html" in html
    assert sorted(json.loads(re.search(r"var categories = (\{.*?\});", html).group(1)))[0] == "Claims"
    text = _embedded(html)
    assert text.count('<table id="claims-verdicts">') >= 2  # landing page and the Claims page
    page = text[text.index('<table id="claims-verdicts">'):]
    for r in claims.itertuples():
        cells = [r.claim, r.check, r.model, r.optimizer, r.noise, r.transport, r.functional, r.expected, r.verdict,
                 f"{r.k}/{r.n}", "not scored" if r.expected == "none" else "holds" if r.holds else "fails"]
        row = "".join(f"<td>{htmllib.escape(str(c))}</td>" for c in cells)
        assert row in page, row


def _assert_figure_only(jobs: dict[str, int]) -> None:
    assert FIGURE_RULES <= set(jobs), f"figure jobs missing: {FIGURE_RULES - set(jobs)}"
    assert set(jobs) <= FIGURE_ONLY, f"upstream jobs scheduled: {set(jobs) - FIGURE_ONLY}"


# ------------------------------------------------ synthetic artifacts, own rules only ----

HARNESS = """\
from snakemake.utils import validate

configfile: "config/synthetic.yaml"
validate(config, "workflow/schemas/config.schema.yaml", set_default=True)

include: "workflow/rules/common.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/claims.smk"

report: "workflow/report/workflow.rst"

rule all:
    input:
        FIGURE_TARGETS,
        REPORT_TARGETS,
        CLAIMS_TARGETS,
"""


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("synthetic_workflow")
    copy_workflow(work)
    (work / "Snakefile").write_text(HARNESS)
    (work / "config" / "synthetic.yaml").write_text(
        yaml.safe_dump(
            {
                "seeds": list(S.SEEDS),
                "models": list(S.MODELS),
                "optimizers": list(S.OPTIMIZERS),
                "train": {"snapshot_epochs": [0, "best"]},
                "figures": {"epoch": "best"},
            }
        )
    )
    S.write_artifacts(work)
    snakemake(work, "--cores", "2", "--workflow-profile", "none")
    return work


def test_synthetic_workflow_outputs(synthetic_run):
    res = synthetic_run / "results"
    for name in (rule.removeprefix("plot_") for rule in FIGURE_RULES):
        assert (res / "figures" / f"{name}.png").stat().st_size > 5000
        assert (res / "figures" / f"{name}.pdf").stat().st_size > 1000
    prov = yaml.safe_load((res / "provenance.yaml").read_text())
    assert prov["config"]["models"] == list(S.MODELS)
    assert prov["config"]["window"]["eps"] == 20  # schema default filled in
    assert prov["threads"] == 2
    summary = (res / "summary.csv").read_text().splitlines()
    assert len(summary) == 1 + len(S.MODELS) * len(S.OPTIMIZERS) * len(S.SEEDS)


def test_synthetic_dpi_change_reruns_figures_only(synthetic_run):
    assert scheduled(synthetic_run, "--workflow-profile", "none") == {}
    changed = _with_figures(synthetic_run, "config/synthetic.yaml", dpi=80)
    _assert_figure_only(
        scheduled(synthetic_run, "--workflow-profile", "none", "--configfile", changed)
    )


def test_synthetic_report(synthetic_run):
    _report_has_every_figure(synthetic_run, "--workflow-profile", "none")


BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


def without_scripts(html: str) -> str:
    return re.sub(r"<script\b.*?</script>", "", html, flags=re.S)


def rendered(page: Path) -> str:
    """The DOM of ``page`` after a headless Chromium ran its scripts, without the scripts themselves."""
    return without_scripts(subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=300).stdout)


@pytest.mark.skipif(BROWSER is None, reason="no Chromium to render the report with")
def test_synthetic_report_renders_in_a_headless_browser(synthetic_run):
    """The report's landing page, drawn by its scripts, shows the Claims page's pivot and tables per
    claim; the file itself, not drawn, shows none of it."""
    report = synthetic_run / "rendered.html"
    snakemake(synthetic_run, "--report", str(report), "--workflow-profile", "none")
    shown = rendered(report)
    for text in ("Claims at a glance", "Per transport, noise and functional", "(d) Master law", "rows held"):
        assert text in shown, text
    assert shown.count('class="claim-detail"') == 4
    assert "Claims at a glance" not in without_scripts(report.read_text())  # the file holds it in a script: only drawn does it show


# ------------------------------------------------------ whole workflow, smoke config ----


def test_smoke_dpi_change_reruns_figures_only(smoke_run):
    assert scheduled(smoke_run, "--configfile", "config/smoke.yaml") == {}
    changed = _with_figures(smoke_run, "config/smoke.yaml", dpi=80)
    _assert_figure_only(scheduled(smoke_run, "--configfile", changed))


def test_smoke_report_contains_every_figure(smoke_run):
    _report_has_every_figure(smoke_run, "--configfile", "config/smoke.yaml")
