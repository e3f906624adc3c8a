"""Fingerprint of a run's behaviour that holds on any machine, unlike the bitwise digest.

    python tests/smoke_behaviour.py RESULTS_DIR           # record the fingerprint of this run
    python tests/smoke_behaviour.py RESULTS_DIR --against  # print its deviation from the recorded one

Run it on the results folder of `snakemake --cores 2 --configfile config/smoke.yaml`.
tests/test_smoke_digest.py asserts on it wherever the digest of tests/smoke_digest.py has no
entry for the machine, and everywhere else too.

Why this and not the alternatives. The bits of the smoke run differ between CPUs from the first
float32 operation whose kernel the CPU selects (MKL, OpenBLAS and torch's vectorised kernels
dispatch on the instruction set; torch's randn and every matmul of the untrained network are
among them), so "the untrained stages bit for bit" holds for the random inputs and targets only
(the targets are exactly rounded sums, learnwin.tasks.synthetic.components; runs made before that, as
../shared/runs' is, rounded them by BLAS, so only the inputs are compared bit for bit), the epoch-0
snapshots a forward pass. The workflow has no float64
path to compare within a tolerance. What is left to compare is what the numbers are: for every
Parquet table and data array, per column, the count of finite, NaN and infinite values, the mean
and the 10/50/90 % quantiles of the finite values; the value counts of text and list columns; and
the random inputs (`*_x.npy`, numpy's Generator, whose stream is the same on every platform) bit
for bit.

Text holds printed numbers too: a list column of floats is recorded as its values' text, a detail
column as "w_power 0.00 ± nan". Such values are compared by :func:`printed_gap`: the text with its
decimal numbers masked (integers, nan and inf stay text) must have the same counts, and each
masked number, sorted over the values of one masked text, may move by one unit of its last printed
digit plus the tolerance below, in units of the column's largest printed number. Sorting makes the
comparison independent of row order, as the quantiles of the numeric columns are, and it is
non-expansive: values that moved by d stay within d of their recorded partners after sorting. A summary value's deviation is measured in units of its column's magnitude (max |x|, at
least :data:`FLOOR` of the table's largest), so a column of values near zero does not inflate it,
and must stay within :data:`TOLERANCE`.

The tolerance is set between what another machine's float32 rounding does to the smoke run and
what a real change does: docs/reliability.md gives both, measured on runs of this config (the
first emulating another CPU's kernels with ``ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE``,
the second with AdamW's learning rate moved by 1 %).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

GOLDEN = Path(__file__).parent / "data" / "smoke_behaviour.json"
QUANTILES = (0.1, 0.5, 0.9)
#: Largest deviation of a summary value, in units of its column's max |x|, still read as "the same".
TOLERANCE = 1e-3
#: A column's scale is at least this fraction of the table's largest: a column that is zero in exact
#: arithmetic (the pooled exponent a, about 1e-31) holds only rounding noise, about 8 float32 ulps.
FLOOR = 1e-6
#: Arrays drawn from numpy's Generator and only cast to float32: identical on every platform.
BITWISE = "*_x.npy"


def column_summary(values: np.ndarray) -> dict:
    """Counts of finite, NaN and infinite values; mean, quantiles and max |x| of the finite ones."""
    values = np.asarray(values, dtype=np.float64).ravel()
    finite = values[np.isfinite(values)]
    out = {"n": int(finite.size), "nan": int(np.isnan(values).sum()), "inf": int(np.isinf(values).sum())}
    if finite.size:
        out["stats"] = [_round(finite.mean()), *map(_round, np.quantile(finite, QUANTILES))]
        out["scale"] = _round(np.abs(finite).max())
    return out


def _round(v) -> float:
    """Seven significant digits: far finer than :data:`TOLERANCE`, and a smaller golden file."""
    return float(f"{float(v):.7g}")


def table_summary(table: pa.Table) -> dict[str, dict]:
    """One summary per column: numbers as :func:`column_summary`, text as its value counts."""
    out = {}
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type):
            out[name] = column_summary(column.to_numpy(zero_copy_only=False).astype(np.float64))
        else:
            values = [str(v) for v in column.to_pylist()]
            out[name] = {"counts": {v: values.count(v) for v in sorted(set(values))}}
    return out


def fingerprint(results: Path) -> dict[str, dict]:
    """Summary of every Parquet table and .npy array under ``results``, keyed by relative path."""
    results = Path(results)
    out = {str(p.relative_to(results)): table_summary(pq.read_table(p)) for p in sorted(results.rglob("*.parquet"))}
    for p in sorted(results.rglob("*.npy")):
        array = np.load(p)
        key = str(p.relative_to(results))
        out[key] = ({"sha256": hashlib.sha256(array.tobytes()).hexdigest()} if p.match(BITWISE)
                    else {"values": column_summary(array)})
    return out


#: A decimal number as printed: a point or an exponent (integers are counts and stay text).
DECIMAL = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?")


def _masked(text: str) -> tuple[str, list[tuple[float, float]]]:
    """(the text with its decimal numbers replaced by '#', each number with one unit of its last
    printed digit)."""
    numbers = []
    for m in DECIMAL.finditer(text):
        mantissa, _, exponent = m.group().lower().partition("e")
        decimals = len(mantissa.partition(".")[2])
        numbers.append((float(m.group()), 10.0 ** (int(exponent or 0) - decimals)))
    return DECIMAL.sub("#", text), numbers


def printed_gap(now: dict[str, int], recorded: dict[str, int], floor: float) -> float | None:
    """Largest move of the printed numbers of two value-count records, beyond one unit of their last
    printed digit, in units of the column's largest (at least ``floor``); None when the texts differ
    in anything but decimal numbers (see the module docstring)."""
    def grouped(counts):
        out: dict[str, list] = {}
        for text, count in counts.items():
            template, numbers = _masked(text)
            out.setdefault(template, []).extend([numbers] * count)
        return out

    a, b = grouped(now), grouped(recorded)
    if {t: len(v) for t, v in a.items()} != {t: len(v) for t, v in b.items()}:
        return None
    pairs = []
    for template in a:  # per masked text and number position: the sorted values, paired in order
        for u, v in zip(zip(*a[template]), zip(*b[template])):
            pairs += zip(sorted(u), sorted(v))
    if not pairs:
        return 0.0
    scale = max(floor, *(abs(n[0]) for pair in pairs for n in pair)) or 1.0
    return max(max(abs(p[0] - q[0]) - max(p[1], q[1]), 0.0) / scale for p, q in pairs)


def deviations(now: dict, recorded: dict) -> tuple[list[str], dict[str, float]]:
    """(what differs in kind: tables, columns, counts, text values or bits; the largest deviation
    of a summary value per table, in units of its column's max |x|)."""
    mismatch, dev = [], {}
    for key in sorted(set(now) | set(recorded)):
        if key not in now or key not in recorded:
            mismatch.append(f"{key}: {'missing' if key not in now else 'not recorded'}")
            continue
        a, b = now[key], recorded[key]
        if sorted(a) != sorted(b):
            mismatch.append(f"{key}: columns {sorted(a)} != {sorted(b)}")
            continue
        if "sha256" in a:
            if a != b:
                mismatch.append(f"{key}: bits")
            continue
        dev[key] = 0.0
        floor = FLOOR * max((c.get("scale", 0.0) for c in [*a.values(), *b.values()]), default=0.0)
        for col in a:
            x, y = a[col], b[col]
            if "counts" in x and x != y:
                gap = printed_gap(x["counts"], y["counts"], floor)
                if gap is None:
                    mismatch.append(f"{key}[{col}]: {x} != recorded")
                else:
                    dev[key] = max(dev[key], gap)
                continue
            exact = {k: v for k, v in x.items() if k not in ("stats", "scale")}
            if exact != {k: v for k, v in y.items() if k not in ("stats", "scale")}:
                mismatch.append(f"{key}[{col}]: {exact} != recorded")
            elif "stats" in x:
                scale = max(x["scale"], y["scale"], floor) or 1.0
                gap = max(abs(u - v) for u, v in zip(x["stats"], y["stats"])) / scale
                dev[key] = max(dev[key], gap)
    return mismatch, dev


def compare(now: dict, recorded: dict, tolerance: float = TOLERANCE) -> list[str]:
    """What differs between two fingerprints beyond ``tolerance``; empty when the run behaves the same."""
    mismatch, dev = deviations(now, recorded)
    return mismatch + [f"{key}: deviation {d:.2e} > {tolerance:.0e}" for key, d in dev.items() if d > tolerance]


def load(golden: Path = GOLDEN) -> dict:
    return json.loads(golden.read_text())


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Record or compare a smoke run's behaviour fingerprint.")
    ap.add_argument("results", type=Path, help="the run's results folder")
    ap.add_argument("--against", action="store_true", help="compare with the recorded fingerprint")
    args = ap.parse_args()
    now = fingerprint(args.results)
    if args.against:
        mismatch, dev = deviations(now, load())
        worst = sorted(dev.items(), key=lambda kv: -kv[1])
        print(f"{len(mismatch)} mismatches in kind; {sum(d > TOLERANCE for d in dev.values())} of {len(dev)} "
              f"tables beyond {TOLERANCE:.0e}; {sum(d > 0 for d in dev.values())} deviate at all")
        print(f"largest {worst[0][1]:.2e}:", *(f"  {k}: {d:.2e}" for k, d in worst[:8]), sep="\n")
        from smoke_digest import environment, recorded, results_digest

        digest = recorded(environment())[0]
        if digest:  # how many of the tables differ bit for bit from this machine's digest
            bits = results_digest(args.results)
            print(f"{sum(bits[k] != digest.get(k) for k in bits)} of {len(bits)} tables differ bit for bit")
        print(*mismatch[:20], sep="\n")
    else:
        GOLDEN.parent.mkdir(exist_ok=True)
        lines = (f"{json.dumps(key)}: {json.dumps(now[key], sort_keys=True)}" for key in sorted(now))
        GOLDEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one line per table
        print(f"{len(now)} tables and arrays -> {GOLDEN}")
