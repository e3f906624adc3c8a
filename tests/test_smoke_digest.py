"""Behaviour does not change unnoticed: the smoke run's tables equal the recorded digest.

tests/data/smoke_digest.json holds one digest per numeric environment (library versions and CPU,
tests/smoke_digest.py says why). Regenerate it only with a change meant to move numbers.
"""

import numpy as np
import pyarrow as pa
import pytest
from smoke_digest import cpu_model, environment, record, recorded, results_digest, table_digest

from learnwin.infra import layout


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


def test_cpu_model_reads_the_first_processor():
    info = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
            "model name\t: AMD EPYC\nflags\t\t: fpu\n\nprocessor\t: 1\nvendor_id\t: Other\n")
    name = cpu_model(info)
    assert name.endswith("vendor_id AuthenticAMD, cpu family 26, model 2, model name AMD EPYC")
    assert "Other" not in name and "flags" not in name
    assert cpu_model(info.replace("model\t\t: 2", "model\t\t: 17")) != name


def test_one_digest_per_environment(tmp_path):
    golden = tmp_path / "digest.json"
    a, b = {"cpu": "a", "torch": "1"}, {"cpu": "b", "torch": "1"}
    assert recorded(a, golden) == (None, [])
    record({"t": "1"}, a, add=False, golden=golden)
    record({"t": "2"}, b, add=True, golden=golden)
    assert recorded(a, golden) == ({"t": "1"}, [a, b])
    assert recorded(b, golden)[0] == {"t": "2"}
    record({"t": "3"}, a, add=True, golden=golden)  # re-recording replaces the entry
    assert recorded(a, golden) == ({"t": "3"}, [b, a])
    record({"t": "4"}, b, add=False, golden=golden)  # numbers moved: the others are stale
    assert recorded(a, golden) == (None, [b])


@pytest.mark.slow
def test_smoke_tables_match_the_recorded_digest(smoke_run):
    env = environment()
    tables, known = recorded(env)
    if tables is None:
        pytest.skip(f"no digest recorded for this numeric environment {env} (recorded: {known}); "
                    "bitwise identity holds only within one. Record it from a run of numbers "
                    "known to be unchanged: python tests/smoke_digest.py RESULTS_DIR --add")
    now = results_digest(smoke_run / layout.ROOT)
    assert sorted(now) == sorted(tables)
    changed = [name for name in now if now[name] != tables[name]]
    assert not changed, f"{len(changed)} tables changed, e.g. {changed[:5]}"
