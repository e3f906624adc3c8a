"""Behaviour does not change unnoticed: the smoke run's tables equal the recorded digest.

tests/data/smoke_digest.json was written from the smoke run of the commit before the workflow
refactor (one table-driven figure rule, one path layout) and still holds after it: the refactor
moved no number. Regenerate it (tests/smoke_digest.py) only with a change meant to move numbers.
"""

import json

import numpy as np
import pyarrow as pa
import pytest
from smoke_digest import GOLDEN, library_versions, results_digest, table_digest

from learnwin import layout


def _table(values, meta=None):
    return pa.table({"lag": [1, 2], "psi": pa.array(values, pa.float32())},
                    metadata=meta or {b"learnwin.schema": b"psi:1"})


def test_digest_sees_one_ulp_and_metadata_but_not_version_stamps():
    base = table_digest(_table([0.5, 0.25]))
    nudged = float(np.nextafter(np.float32(0.25), np.float32(1)))
    assert table_digest(_table([0.5, nudged])) != base
    assert table_digest(_table([0.5, 0.25], {b"learnwin.schema": b"psi:2"})) != base
    stamped = {b"learnwin.schema": b"psi:1", b"pandas": b'{"pandas_version": "9.9"}'}
    assert table_digest(_table([0.5, 0.25], stamped)) == base


@pytest.mark.slow
def test_smoke_tables_match_the_recorded_digest(smoke_run):
    recorded = json.loads(GOLDEN.read_text())
    if recorded["versions"] != library_versions():
        pytest.skip(f"digest recorded with {recorded['versions']}, this environment has "
                    f"{library_versions()}: bitwise identity holds only for equal numerics")
    now = results_digest(smoke_run / layout.ROOT)
    assert sorted(now) == sorted(recorded["tables"])
    changed = [name for name in now if now[name] != recorded["tables"][name]]
    assert not changed, f"{len(changed)} tables changed, e.g. {changed[:5]}"
