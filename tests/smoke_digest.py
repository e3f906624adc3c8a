"""Digest of a run's Parquet tables, to prove that a refactor changes no number.

    python tests/smoke_digest.py RESULTS_DIR          # record this machine's digest, drop all others
    python tests/smoke_digest.py RESULTS_DIR --add    # record it beside the others' (numbers unchanged)

Run it on the results folder of `snakemake --cores 2 --configfile config/smoke.yaml`.
tests/test_smoke_digest.py compares every smoke run with the digest recorded for its numeric
environment. A table's digest covers its column names and types, every value bit for bit, and the
learnwin.* file metadata; not the pandas/pyarrow version stamps, which change with the installed
libraries.

The bits hold only within one numeric environment: the versions of torch, numpy and scipy, and
the CPU, since MKL and OpenBLAS pick their kernels by CPU model and instruction set, and a run's
float32 results differ between them (with the same library versions, 194 of the smoke run's 235
tables differed on an AMD Zen 5 machine from the digest of an earlier machine). So the golden file
holds one digest per environment. A change meant to move numbers records its own environment
and drops the others, which it cannot re-record; ``--add`` records a further environment for
numbers that did not move.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

GOLDEN = Path(__file__).parent / "data" / "smoke_digest.json"
#: The libraries whose numerics the tables depend on; the digest holds only where they match.
NUMERIC_LIBRARIES = ("torch", "numpy", "scipy")
#: /proc/cpuinfo fields that name a CPU model (what BLAS libraries dispatch on).
CPU_FIELDS = ("vendor_id", "cpu family", "model", "model name")


def table_digest(table: pa.Table) -> str:
    """sha256 over column names, types and values (exact float repr) and learnwin.* metadata."""
    h = hashlib.sha256()
    meta = sorted((k, v) for k, v in (table.schema.metadata or {}).items() if k.startswith(b"learnwin."))
    h.update(repr(meta).encode())
    for name, column in zip(table.column_names, table.columns):
        h.update(f"{name}:{column.type}:{column.to_pylist()!r}".encode())
    return h.hexdigest()


def results_digest(results: Path) -> dict[str, str]:
    """Digest of every Parquet file under ``results``, keyed by its path relative to it."""
    return {str(p.relative_to(results)): table_digest(pq.read_table(p))
            for p in sorted(Path(results).rglob("*.parquet"))}


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's architecture and model: /proc/cpuinfo's first processor where there is one."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block ends at the first blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    named = [f"{key} {fields[key]}" for key in CPU_FIELDS if key in fields]
    return ", ".join([platform.machine(), *(named or [platform.processor()])])


def environment() -> dict[str, str]:
    """What a run's bits depend on: numeric library versions, CPU model, torch's instruction set."""
    import torch

    return {**{name: version(name) for name in NUMERIC_LIBRARIES}, "cpu": cpu_model(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def recorded(env: dict[str, str], golden: Path = GOLDEN) -> tuple[dict[str, str] | None, list[dict]]:
    """(the tables recorded for ``env`` or None, every recorded environment)."""
    entries = json.loads(golden.read_text())["digests"] if golden.exists() else []
    match = next((e["tables"] for e in entries if e["environment"] == env), None)
    return match, [e["environment"] for e in entries]


def record(tables: dict[str, str], env: dict[str, str], add: bool, golden: Path = GOLDEN) -> int:
    """Write ``tables`` as ``env``'s digest; keep the other environments' only with ``add``.
    Returns the number of environments in the file."""
    entries = json.loads(golden.read_text())["digests"] if add and golden.exists() else []
    entries = [e for e in entries if e["environment"] != env] + [{"environment": env, "tables": tables}]
    golden.parent.mkdir(exist_ok=True)
    golden.write_text(json.dumps({"digests": entries}, indent=1) + "\n")
    return len(entries)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Record a smoke run's digest for this numeric environment.")
    ap.add_argument("results", type=Path, help="the run's results folder")
    ap.add_argument("--add", action="store_true", help="keep the other environments' digests")
    args = ap.parse_args()
    tables = results_digest(args.results)
    n = record(tables, environment(), args.add)
    print(f"{len(tables)} tables -> {GOLDEN} ({n} environment{'s' if n > 1 else ''})")
