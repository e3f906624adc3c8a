"""Digest of a run's Parquet tables, to prove that a refactor changes no number.

    python tests/smoke_digest.py RESULTS_DIR     # rewrite tests/data/smoke_digest.json

Run it on the results folder of `snakemake --cores 2 --configfile config/smoke.yaml` after a change
that is meant to move numbers; tests/test_smoke_digest.py compares every smoke run against it.
A table's digest covers its column names and types, every value bit for bit, and the learnwin.*
file metadata; not the pandas/pyarrow version stamps, which change with the installed libraries.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

GOLDEN = Path(__file__).parent / "data" / "smoke_digest.json"
#: The libraries whose numerics the tables depend on; the digest holds only where they match.
NUMERIC_LIBRARIES = ("torch", "numpy", "scipy")


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


def library_versions() -> dict[str, str]:
    return {name: version(name) for name in NUMERIC_LIBRARIES}


if __name__ == "__main__":
    tables = results_digest(Path(sys.argv[1]))
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({"versions": library_versions(), "tables": tables}, indent=1) + "\n")
    print(f"{len(tables)} tables -> {GOLDEN}")
