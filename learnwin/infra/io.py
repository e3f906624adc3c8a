"""Atomic artifact I/O: versioned Parquet tables, checkpoints, YAML/JSON.

Every writer goes through :func:`atomic_path`: the data is written to a temp file in
the target folder and renamed over the target only once it is complete, so a killed
job never leaves a file that looks finished. Every reader names the file in its error.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

#: Schema version of each Parquet artifact. Bump when its columns change.
SCHEMA_VERSIONS: dict[str, int] = {
    "curve": 1,
    "envelope": 3,
    "units": 1,
    "psi": 1,
    "total": 1,
    "alpha": 2,
    "decay": 3,
    "window": 3,
    "H_N": 3,
    "master": 3,
    "exponents": 2,
    "summary": 4,
    "recovery": 2,
    "budget": 1,
    "budget_tables": 1,
    "seed_growth": 2,
    "memory": 1,
    "claims": 2,
    "agreement": 1,
    "lyapunov": 1,
    "growth_power": 1,
    "design_power": 1,
}
_META_KEY = b"learnwin.schema"
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class ArtifactError(RuntimeError):
    """An input artifact is missing, unreadable or of the wrong schema version."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temp path beside ``path``; rename it onto ``path`` when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=suffix or path.suffix or ".tmp", dir=path.parent
    )
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_table(df: pd.DataFrame, path: str | os.PathLike, artifact: str,
                notes: Mapping[str, str] | None = None) -> None:
    """Write ``df`` as zstd Parquet with float32 values and the artifact's schema version.

    ``notes`` are stored in the file metadata under ``learnwin.<key>`` (:func:`read_notes`).
    """
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].astype(np.float32)
    table = pa.Table.from_pandas(out, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[_META_KEY] = f"{artifact}:{SCHEMA_VERSIONS[artifact]}".encode()
    meta.update({f"learnwin.{key}".encode(): value.encode() for key, value in (notes or {}).items()})
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_notes(path: str | os.PathLike) -> dict[str, str]:
    """The ``notes`` a Parquet artifact was written with (metadata only; the data is not read)."""
    meta = pq.read_schema(path).metadata or {}
    return {k.decode().removeprefix("learnwin."): v.decode() for k, v in meta.items()
            if k.startswith(b"learnwin.") and k != _META_KEY}


def require_columns(table: pd.DataFrame, name: str, columns) -> pd.DataFrame:
    """``table`` itself; a :class:`ValueError` naming ``name`` and the columns it lacks. Every
    stage writes its key columns (``transport`` and ``noise`` included, docs/artifacts.md), so no
    reader fills one in; a hand-made table passed to the library gets this error instead."""
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{name}: no column {', '.join(map(repr, missing))} (docs/artifacts.md)")
    return table


def read_table(path: str | os.PathLike, artifact: str) -> pd.DataFrame:
    """Read a Parquet artifact, checking that it is readable and of the current version."""
    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing input artifact ({artifact})")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ArtifactError(
            f"{path}: unreadable or truncated Parquet file ({exc}); delete it and re-run "
            "the stage that produces it"
        ) from exc
    found = (table.schema.metadata or {}).get(_META_KEY, b"").decode()
    expected = f"{artifact}:{SCHEMA_VERSIONS[artifact]}"
    if found != expected:
        raise ArtifactError(
            f"{path}: schema {found or 'unknown'!r}, expected {expected!r}; re-run the stage "
            "that produces it (e.g. snakemake --forcerun <rule>)"
        )
    return table.to_pandas()


def save_checkpoint(state: Mapping, path: str | os.PathLike) -> None:
    """Atomically ``torch.save`` a checkpoint dictionary."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(dict(state), tmp)


def load_checkpoint(path: str | os.PathLike, map_location: str = "cpu") -> dict:
    """Load a checkpoint with torch's safe loader (``weights_only=True``: tensors and plain
    containers, no code run), with an error naming the file when it is missing, corrupt or holds
    another type. Every checkpoint and resume state is tensors, numbers, strings and containers
    of them (docs/method.md §3), so the loader needs no allow-list."""
    import pickle

    import torch

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing checkpoint")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ArtifactError(
            f"{path}: refused by the safe checkpoint loader, it holds a type that is not a tensor or "
            f"a plain container ({exc}); a learnwin checkpoint never does: re-run training"
        ) from exc
    except Exception as exc:  # torch raises several types for truncated zips
        raise ArtifactError(
            f"{path}: unreadable or truncated checkpoint ({exc}); delete it and re-run training"
        ) from exc


def write_yaml(data, path: str | os.PathLike) -> None:
    """Atomically write YAML."""
    with atomic_path(path) as tmp:
        tmp.write_text(yaml.safe_dump(data, sort_keys=False))


def write_json(data, path: str | os.PathLike) -> None:
    """Atomically write JSON."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))


def save_array(array: np.ndarray, path: str | os.PathLike) -> None:
    """Atomically ``np.save`` an array (readable back with memory mapping)."""
    with atomic_path(path, suffix=".npy") as tmp:
        np.save(tmp, array)


def load_array(path: str | os.PathLike, mmap: bool = True) -> np.ndarray:
    """Load an ``.npy`` array, memory-mapped by default so large splits stream."""
    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing data file")
    try:
        return np.load(path, mmap_mode="r" if mmap else None)
    except (ValueError, OSError) as exc:
        raise ArtifactError(f"{path}: unreadable data file ({exc}); re-run the data stage") from exc


def load_split(data_dir: str | os.PathLike, split: str, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets of one split a seed's data holds (``{split}_x.npy``, ``{split}_y.npy``,
    written by :func:`learnwin.tasks.splits.write_splits`), memory-mapped by default."""
    data_dir = Path(data_dir)
    return load_array(data_dir / f"{split}_x.npy", mmap), load_array(data_dir / f"{split}_y.npy", mmap)
