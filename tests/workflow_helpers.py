"""Shared helpers for the tests that run Snakemake on a copy of the workflow."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
WORKFLOW_FILES = ("Snakefile", "workflow", "config", "profiles")
#: The target rules that make every Parquet table of `all` without drawing its figures: for runs
#: whose assertions read tables only (figures are each a job of their own, a fifth of a smoke
#: run's CPU).
TABLE_TARGETS = ("train", "snapshot", "alpha", "decay", "window", "write_summary", "claims")
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def experiment_script(name: str):
    """The module of experiments/<name>.py (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schema_defaults(section: str) -> dict:
    """The schema's default of every key of one config section: the keywords the workflow passes
    to the statistics functions, which have no defaults of their own."""
    props = yaml.safe_load(SCHEMA.read_text())["properties"][section]["properties"]
    return {key: spec["default"] for key, spec in props.items()}


def copy_workflow(dest: Path, root: Path = ROOT) -> Path:
    """Copy what a run needs (Snakefile, workflow/, config/, profiles/) of the checkout ``root``
    into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("results", ".snakemake", "__pycache__", "*.pyc")
    for item in WORKFLOW_FILES:
        src = root / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=ignore, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest / item)
    return dest


def snakemake(work: Path, *args: str, timeout: int = 3600, check: bool = True,
              **popen) -> subprocess.CompletedProcess:
    """Run Snakemake in ``work``; on failure show the end of its output."""
    proc = subprocess.run([*SNAKEMAKE, *args], cwd=work, capture_output=True, text=True,
                          timeout=timeout, **popen)
    if check:
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def scheduled(work: Path, *args: str, **popen) -> dict[str, int]:
    """Rule -> job count of a dry run (Snakemake's "Job stats" table); {} when nothing to do.
    ``popen``: passed to :func:`snakemake` (an ``env``, say)."""
    out = snakemake(work, "-n", "--cores", "2", *args, **popen).stdout
    table = out.split("Job stats:", 1)[1] if "Job stats:" in out else ""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def scheduled_jobs(work: Path, *args: str, **popen) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job of a dry run, in the order Snakemake prints them; a job
    without wildcards has {}. ``popen``: as in :func:`scheduled`."""
    out = snakemake(work, "-n", "--cores", "2", *args, **popen).stdout
    jobs = []
    for block in re.split(r"^rule ", out, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        found = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        pairs = found[1].split(", ") if found else []
        jobs.append((rule, dict(p.split("=", 1) for p in pairs)))
    return jobs


@contextlib.contextmanager
def worktree(rev: str, dest: Path):
    """A git worktree of revision ``rev`` of this checkout at ``dest``, removed on exit."""
    subprocess.run(["git", "worktree", "add", "--detach", str(dest), rev], cwd=ROOT, capture_output=True,
                   check=True)
    try:
        yield dest
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(dest)], cwd=ROOT, check=True)


def parquet_tables(results: Path) -> dict[str, object]:
    """Every Parquet file under ``results`` as a pyarrow Table, keyed by relative path."""
    return {str(p.relative_to(results)): pq.read_table(p) for p in sorted(results.rglob("*.parquet"))}


def assert_same_tables(a: Path, b: Path) -> int:
    """The two result trees hold the same Parquet files with identical contents."""
    left, right = parquet_tables(a), parquet_tables(b)
    assert sorted(left) == sorted(right)
    for name, table in left.items():
        assert table.equals(right[name]), f"{name} differs"
    return len(left)


_ADAPTER = """
import json, runpy, sys, types
spec = json.loads(sys.argv[2])
smk = types.SimpleNamespace(threads=1, log=spec["log"],
                            **{k: types.SimpleNamespace(**spec[k]) for k in ("params", "input", "output")})
runpy.run_path(sys.argv[1], init_globals={"snakemake": smk}, run_name="__main__")
"""


def run_adapter(script: str, work: Path, *, params: dict, input: dict, output: dict) -> None:
    """Run ``workflow/scripts/<script>.py`` in a fresh Python with a stand-in ``snakemake`` object
    (params, input, output as given; one thread; log in ``work``)."""
    spec = json.dumps(dict(params=params, input=input, output=output, log=[str(work / f"{script}.log")]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    path = ROOT / "workflow" / "scripts" / f"{script}.py"
    proc = subprocess.run([sys.executable, "-c", _ADAPTER, str(path), spec], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    log = work / f"{script}.log"
    assert proc.returncode == 0, proc.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
