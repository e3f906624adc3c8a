"""The GPU cost table: measured ms per training step of each cell family and seconds per snapshot
batch on one GPU, the law the GPU jobs' requests scale them by (:mod:`learnwin.infra.resources`),
and the one command that writes the table from the GPU check's log.

The table (:data:`TABLE`, YAML) holds rows as the check prints them. The check
(``benchmarks/gpu_check.sh``) prints, for what the jobs run (the fused step in its device mode),
one line per measurement, anywhere in its log::

    gpu_cost step FAMILY T H BATCH MS_PER_STEP
    gpu_cost snapshot FAMILY T H SEQUENCES SECONDS PEAK_GIB

``FAMILY`` a registered cell (a single layer of it), ``T`` the sequence length, ``H`` the hidden
width, ``BATCH`` the training batch, ``MS_PER_STEP`` the milliseconds of one step (forward, loss,
backward, clipping, optimizer update); a snapshot line gives one diagonal-transport snapshot batch of
``SEQUENCES`` sequences: its seconds and peak GPU memory in GiB. Then::

    python -m learnwin.infra.gpu_cost gpu_check_out/gpu_check.log

replaces the table with the log's rows (the device named by its ``device`` line, if any). Until a
check has run, the table holds the H200 figures of ``../shared/runs/gpu-5bba9d6-h200/step_times.md``:
bptt's unfused path before the fused step existed, an upper bound.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import yaml

#: The committed table.
TABLE = Path(__file__).with_name("gpu_cost.yaml")
#: A log line of the check: its kind, then the fields of :data:`FIELDS`.
LINE = re.compile(r"^\s*gpu_cost\s+(step|snapshot)\s+(.*?)\s*$")
#: The fields of each kind of line (the table's row keys), all numbers but the family.
FIELDS = {"step": ("family", "T", "H", "batch", "ms_per_step"),
          "snapshot": ("family", "T", "H", "sequences", "seconds", "peak_gib")}
#: The line that names the device: ``gpu_cost device NAME``.
DEVICE = re.compile(r"^\s*gpu_cost\s+device\s+(.+?)\s*$")


def parse(log: str) -> dict:
    """The table of a check's log: its device and its step and snapshot rows (:data:`LINE`).
    Raises ValueError naming a malformed line, or when the log has no step row."""
    table = {"device": None, "step": [], "snapshot": []}
    for number, text in enumerate(log.splitlines(), 1):
        if m := DEVICE.match(text):
            table["device"] = m.group(1)
            continue
        if not (m := LINE.match(text)):
            continue
        kind, values = m.group(1), m.group(2).split()
        if len(values) != len(FIELDS[kind]):
            raise ValueError(f"log line {number}: {text.strip()!r}: a {kind} row has {len(FIELDS[kind])} fields "
                             f"({' '.join(FIELDS[kind])})")
        try:
            row = {k: (v if k == "family" else float(v)) for k, v in zip(FIELDS[kind], values)}
        except ValueError as err:
            raise ValueError(f"log line {number}: {text.strip()!r}: {err}") from err
        table[kind].append({k: int(v) if k in ("T", "H", "batch", "sequences") else v for k, v in row.items()})
    if not table["step"]:
        raise ValueError("no 'gpu_cost step' line in the log: did the check's step part run?")
    return table


def write(table: Mapping, path: Path = TABLE, source: str = "") -> None:
    """Write ``table`` to ``path`` atomically (a temporary file renamed over it)."""
    text = (f"# The GPU cost table (learnwin.infra.gpu_cost), written by `python -m learnwin.infra.gpu_cost LOG`.\n"
            f"# source: {source}\n" + yaml.safe_dump(dict(table), sort_keys=False, default_flow_style=None))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@functools.cache
def load(path: Path = TABLE) -> dict:
    """The table at ``path`` (read once per process)."""
    return yaml.safe_load(path.read_text())


def step_law(table: Mapping) -> dict[str, tuple[float, float]]:
    """Per family the law ms per step = T (launch + arith B G H^2), G the family's gate blocks at the
    rows' single layer: a step is T sequential time steps, each a fixed cost of issuing its kernels
    and an arithmetic cost that grows with the batch's matrix products (on an H200, eight times the
    batch cost 5-10 % more: step_times.md). Fitted by least squares over a family's rows at two
    sizes or more, the pooled slope (the median family's) where a family has one row or the fit is
    not positive in both terms; a family outside the table takes the slowest family's launch
    (:func:`ms_per_step`)."""
    from learnwin.infra.registry import CELLS

    rows: dict[str, list] = {}
    for r in table["step"]:
        rows.setdefault(r["family"], []).append((r["ms_per_step"] / r["T"],
                                                 r["batch"] * CELLS[r["family"]].gate_blocks * r["H"] ** 2))
    fits = {}
    for family, pts in rows.items():
        if len({w for _, w in pts}) > 1:
            per, w = np.array(pts).T
            launch, arith = np.linalg.lstsq(np.stack([np.ones_like(w), w], 1), per, rcond=None)[0]
            if launch > 0 and arith >= 0:
                fits[family] = (float(launch), float(arith))
    pooled = float(np.median([a for _, a in fits.values()])) if fits else 0.0
    law = {}
    for family, pts in rows.items():
        if family not in fits:
            launch = max(0.0, float(np.mean([p - pooled * w for p, w in pts])))
            fits[family] = (launch, pooled)
        law[family] = fits[family]
    return law


def ms_per_step(family: str, T: int, H: int, batch: int, gates: float, layers: int = 1,
                table: Mapping | None = None) -> float:
    """ms per training step of ``family`` by :func:`step_law` at (T, H, batch), ``gates`` its
    matrix products per step in units of H^2 (all ``layers``' together; each layer issues its own
    kernels). A family outside the table: the slowest family's launch (an upper bound for the
    diagonal linear cells, whose scan is parallel over time)."""
    law = step_law(load() if table is None else table)
    launch, arith = law.get(family, (max(v[0] for v in law.values()), max(v[1] for v in law.values())))
    return T * (layers * launch + arith * batch * gates * H * H)


def snapshot_ratio(cpu_seconds, table: Mapping | None = None) -> float:
    """GPU seconds per CPU-law second of a snapshot: the largest over the table's snapshot rows of
    their measured seconds over the CPU cost law's seconds for that batch, ``cpu_seconds(family, T,
    H, sequences)``; 1 where the table has no snapshot row."""
    rows = (load() if table is None else table).get("snapshot") or []
    return max((r["seconds"] / cpu_seconds(r["family"], r["T"], r["H"], r["sequences"]) for r in rows), default=1.0)


def snapshot_peak_mb(sequences: int, T: int, units: int, table: Mapping | None = None) -> float:
    """Peak GPU memory (MB) of a snapshot batch of ``sequences`` at (T, ``units``): the largest of
    the table's measured peaks scaled by sequences x T x units (0 where the table has no snapshot row)."""
    rows = (load() if table is None else table).get("snapshot") or []
    return max((1024 * r["peak_gib"] * sequences * T * units / (r["sequences"] * r["T"] * r["H"]) for r in rows),
               default=0.0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="the GPU check's log (gpu_check_out/gpu_check.log)")
    ap.add_argument("--out", type=Path, default=TABLE, help=f"the table to write (default {TABLE})")
    args = ap.parse_args(argv)
    table = parse(args.log.read_text())
    write(table, args.out, source=f"{args.log.name}, {len(table['step'])} step and "
                                  f"{len(table['snapshot'])} snapshot rows")
    law = step_law(table)
    for family, (launch, arith) in law.items():
        print(f"{family}: {launch * 1e3:.1f} us per time step + {arith * 1e12:.2f} ms per 1e12 B G H^2 units")
    print(f"wrote {args.out} ({len(law)} families)")


if __name__ == "__main__":
    main()
