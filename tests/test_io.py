"""Atomic writes and clear errors for unreadable or outdated artifacts (docs/reliability.md)."""

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from learnwin.infra import io


def _frame():
    return pd.DataFrame({"model": ["gru", "gru"], "seed": [2, 2], "lag": [4, 8], "f": [0.5, 0.25]})


def test_write_table_is_float32_zstd_and_versioned(tmp_path):
    path = tmp_path / "a" / "envelope.parquet"
    io.write_table(_frame(), path, "envelope")
    meta = pq.ParquetFile(path).metadata
    assert meta.row_group(0).column(3).compression == "ZSTD"
    table = pq.read_table(path)
    assert table.schema.field("f").type == pa.float32()
    assert table.schema.metadata[b"learnwin.schema"] == f"envelope:{io.SCHEMA_VERSIONS['envelope']}".encode()
    back = io.read_table(path, "envelope")
    np.testing.assert_array_equal(back["f"], np.float32([0.5, 0.25]))
    assert [p.name for p in path.parent.iterdir()] == ["envelope.parquet"]  # no temp left
    assert path.stat().st_mode & 0o777 == 0o666 & ~io._UMASK  # the usual mode, not mkstemp's 0600


def test_failed_write_leaves_no_file(tmp_path):
    path = tmp_path / "psi.parquet"
    with pytest.raises(RuntimeError):
        with io.atomic_path(path) as tmp:
            tmp.write_bytes(b"half a file")
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_truncated_parquet_names_the_file(tmp_path):
    path = tmp_path / "psi.parquet"
    io.write_table(_frame(), path, "psi")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(io.ArtifactError, match=rf"{path}: unreadable or truncated Parquet"):
        io.read_table(path, "psi")


def test_missing_artifact_names_the_file(tmp_path):
    with pytest.raises(io.ArtifactError, match="nothere.parquet: missing input artifact"):
        io.read_table(tmp_path / "nothere.parquet", "psi")


def test_schema_version_mismatch_says_rerun(tmp_path, monkeypatch):
    path = tmp_path / "alpha.parquet"
    io.write_table(_frame(), path, "alpha")
    written = io.SCHEMA_VERSIONS["alpha"]
    monkeypatch.setitem(io.SCHEMA_VERSIONS, "alpha", written + 1)
    with pytest.raises(io.ArtifactError,
                       match=rf"schema 'alpha:{written}', expected 'alpha:{written + 1}'; re-run the stage"):
        io.read_table(path, "alpha")
    with pytest.raises(io.ArtifactError,
                       match=rf"schema 'alpha:{written}', expected 'psi:{io.SCHEMA_VERSIONS['psi']}'"):
        io.read_table(path, "psi")


def test_truncated_checkpoint_names_the_file(tmp_path):
    import torch

    path = tmp_path / "best.pt"
    io.save_checkpoint({"model": {"w": torch.ones(100)}, "epoch": 3}, path)
    assert io.load_checkpoint(path)["epoch"] == 3
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(io.ArtifactError, match=rf"{path}: unreadable or truncated checkpoint"):
        io.load_checkpoint(path)


def test_corrupt_data_file_names_the_file(tmp_path):
    path = tmp_path / "diag_x.npy"
    io.save_array(np.ones((3, 4), dtype=np.float32), path)
    np.testing.assert_array_equal(io.load_array(path), 1)
    path.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(io.ArtifactError, match=rf"{path}: unreadable data file"):
        io.load_array(path)
    assert not os.path.exists(tmp_path / "other.npy")


class _Touch:
    """A pickled object whose unpickling creates ``marker``: what a crafted checkpoint could run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_crafted_checkpoint_is_refused_without_running_its_code(tmp_path):
    """Checkpoints load with torch's safe loader (weights_only=True, docs/method.md §3): a pickle
    that would run code is refused, naming the file, and its code never runs."""
    import torch

    path, marker = tmp_path / "best.pt", tmp_path / "ran"
    torch.save({"model": {"w": torch.ones(3)}, "payload": _Touch(marker)}, path)
    with pytest.raises(io.ArtifactError, match=rf"{path}: refused by the safe checkpoint loader"):
        io.load_checkpoint(path)
    assert not marker.exists()
