"""A seed's data on disk, whatever its task (docs/method.md §1): the splits train, val and diag,
each ``{split}_x.npy`` (n, T, D) and ``{split}_y.npy`` (n, T), and ``task.json`` (the seed, the
task section and the unit vector u), drawn by the functions of the ``task.kind`` entry of
:mod:`learnwin.infra.tasks`. Every job reads a split back with :func:`learnwin.infra.io.load_split`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from learnwin.infra import io
from learnwin.infra.tasks import spec_of

SPLITS = ("train", "val", "diag")


def write_splits(seed: int, task: Mapping, out_dir: str | Path) -> None:
    """Write ``{split}_x.npy``, ``{split}_y.npy`` for every split and ``task.json``."""
    out_dir, spec = Path(out_dir), spec_of(task)
    draw = spec.load("draw")
    for split in SPLITS:
        x, y = draw(seed, task, split, task[f"n_{split}"])
        io.save_array(x, out_dir / f"{split}_x.npy")
        io.save_array(y, out_dir / f"{split}_y.npy")
    u = spec.load("direction")(seed, task)
    io.write_json({"seed": seed, "task": dict(task), "u": u.tolist()}, out_dir / "task.json")
