"""Provenance of a workflow run: what ran, with which code, where (the run's provenance.yaml).

:func:`collect` records the resolved config (schema defaults applied), the learnwin version
and git commit, the versions of the numeric stack and Snakemake, the compute device, the
thread count, the host and a UTC timestamp. The caller passes the config and thread count
in; nothing here imports Snakemake.
"""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

#: Distributions whose versions are recorded.
PACKAGES = ("torch", "numpy", "scipy", "pyarrow", "pandas", "matplotlib", "snakemake")


def version(dist: str) -> str:
    """Installed version of a distribution, or "not installed"."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def git_commit(path: str | Path) -> str:
    """``git rev-parse HEAD`` of the checkout holding ``path`` (a "-dirty" suffix when it has
    uncommitted changes to tracked files), or "unknown" when it is not in a checkout."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty else "")


def cpu_name() -> str:
    """The CPU's model name, family and model (/proc/cpuinfo), else the platform's."""
    try:
        pairs = (line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line)
        info = {key.strip(): value.strip() for key, value in pairs}
        return f"{info['model name']} (family {info['cpu family']}, model {info['model']})"
    except (OSError, KeyError):
        return platform.processor() or platform.machine()


def commit_files(root: str | Path, files: list, message: str) -> None:
    """One git commit of ``files`` alone in the checkout ``root`` (whatever else is staged stays out),
    for the raw tables a long run keeps as it goes (data/runs/README.md); retried while another git
    command holds the index, and a warning naming the files when it cannot."""
    files = [str(f) for f in files]
    for _ in range(10):
        if subprocess.run(["git", "add", *files], cwd=root).returncode == 0 and subprocess.run(
                ["git", "commit", "-q", "-m", message, "--", *files], cwd=root).returncode == 0:
            return
        time.sleep(30)
    print(f"could not commit {files}: commit them by hand", file=sys.stderr)


def device_name(device: str) -> str:
    """The CUDA device name when ``device`` (config key, auto/cpu/cuda) resolves to CUDA, else "cpu"."""
    if device == "cpu":
        return "cpu"
    try:
        import torch
    except ImportError:
        return "cpu"
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"


def _plain(value: Any) -> Any:
    """Deep copy of a config as plain dicts and lists (YAML-safe)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def collect(config: Mapping, threads: int | None) -> dict:
    """The provenance record of a run with the resolved ``config`` on ``threads`` cores
    (``None``: not known, e.g. a cluster run)."""
    package_dir = Path(__file__).resolve().parent
    return {
        "learnwin": {"version": version("learnwin"), "git_commit": git_commit(package_dir)},
        "versions": {"python": platform.python_version(), **{p: version(p) for p in PACKAGES}},
        "device": device_name(config.get("device", "auto")),
        "threads": threads,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "timestamp_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": _plain(config),
    }
