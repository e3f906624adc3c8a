"""The three linters pass: ruff on the Python, snakefmt on the rules, ``snakemake --lint`` on the
workflow (which also asks every rule to name its software: workflow/envs/learnwin.yaml)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import ROOT, SNAKEMAKE

from learnwin.infra import layout

SNAKEFILES = ["Snakefile", "workflow/rules"]


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
    code = [p for p in _code_files() if p != ROOT / "learnwin" / "layout.py"]
    assert len(code) > 50 and ROOT / "workflow" / "rules" / "common.smk" in code
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in code
                 for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if needle in line]
    assert not offenders, offenders
