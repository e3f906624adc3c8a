"""The three linters pass: ruff on the Python, snakefmt on the rules, ``snakemake --lint`` on the
workflow (which also asks every rule to name its software: workflow/envs/learnwin.yaml)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import ROOT, SNAKEMAKE

from learnwin.infra import layout

SNAKEFILES = ["Snakefile", "workflow/rules"]
LAYOUT = ROOT / "learnwin" / "infra" / "layout.py"


def _run(*cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff():
    proc = _run(sys.executable, "-m", "ruff", "check", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_snakefmt():
    proc = _run(sys.executable, "-m", "snakefmt", "--check", *SNAKEFILES)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_snakemake_lint(configfile):
    proc = _run(*SNAKEMAKE, "--lint", "--configfile", configfile)
    assert proc.returncode == 0 and "Lints for" not in proc.stdout + proc.stderr, proc.stdout[-4000:] + proc.stderr[-2000:]


def _code_files():
    skip_dirs = {".git", ".venv", ".snakemake", ".ruff_cache", "docs", "runs", "__pycache__", "learnwin.egg-info"}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip_dirs]
        for name in files:
            if name == "Snakefile" or Path(name).suffix in {".py", ".smk", ".sh", ".yaml"}:
                yield Path(folder) / name


def test_one_path_layout():
    """No code names a results path except learnwin/infra/layout.py (rules, scripts, package, tests)."""
    needle = layout.ROOT + "/"
    code = [p for p in _code_files() if p != LAYOUT]
    assert len(code) > 50 and ROOT / "workflow" / "rules" / "common.smk" in code
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in code
                 for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if needle in line]
    assert not offenders, offenders


def _layout_names() -> tuple[set[str], set[str]]:
    """The results folder's subfolders and its top-level files, from learnwin.infra.layout."""
    values = [v for k, v in vars(layout).items() if k.isupper()]
    values += [p for v in values if isinstance(v, dict) for p in v.values()]
    paths = [v for v in values if isinstance(v, str) and v.startswith(layout.ROOT + "/")]
    parts = [p.removeprefix(layout.ROOT + "/").split("/") for p in paths]
    return {q[0] for q in parts if len(q) > 1}, {q[0] for q in parts if len(q) == 1}


def hand_built_paths(text: str) -> list[int]:
    """Lines of ``text`` that build a results path by hand: a string that is a subfolder of the
    layout joined with "/" (``results / "snapshots"``, ``"decay" / o``), one that begins with such a
    subfolder ("stats/H_N.parquet", f"decay/{o}/..."), or a top-level file of the layout
    ("summary.parquet", "claims.parquet") joined with "/"."""
    folders, files = _layout_names()
    names = "|".join(map(re.escape, sorted(folders)))
    tops = "|".join(map(re.escape, sorted(files)))
    joined = re.compile(rf"""/\s*[rf]?["'](?:{names}|{tops})["']|[rf]?["'](?:{names})["']\)?\s*/""")
    leading = re.compile(rf"""[rf]?["'](?:{names})/""")
    return [i for i, line in enumerate(text.splitlines(), 1) if joined.search(line) or leading.search(line)]


def test_hand_built_paths_are_caught():
    """The check fails on the ways claims.measure used to build its paths, and not on the
    layout's own forms or on config sections that share a folder's name."""
    bad = ['p = results / "snapshots" / o / m / f"seed{s}"', 'q = results / "stats" / "H_N.parquet"',
           'r = results / "summary.parquet"', 'x = res / f"decay/{o}/gru/epochbest.parquet"',
           't = Path("train") / opt']
    good = ['p = layout.under(results, layout.SNAP, optimizer=o)', 'cfg = config["train"]["epochs"]',
            'x = section("decay")', 'y = f"{SNAP}/envelope.parquet"', 'z = snap / "units.parquet"']
    assert hand_built_paths("\n".join(bad)) == [1, 2, 3, 4, 5]
    assert hand_built_paths("\n".join(good)) == []


def test_no_hand_built_results_paths():
    """learnwin/, workflow/ and experiments/ reach results files through learnwin.infra.layout only."""
    code = [p for p in _code_files() if p != LAYOUT and p.relative_to(ROOT).parts[0] in {"learnwin", "workflow", "experiments"}]
    assert ROOT / "learnwin" / "stats" / "claims.py" in code
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in code for i in hand_built_paths(p.read_text(errors="replace"))]
    assert not offenders, offenders
