"""The GPU cost table: the check's log lines, the one command that writes the table, the law the GPU
jobs' requests scale it by, and the cap and retries of a long training job."""

import math

import pytest
import yaml

from learnwin.infra import gpu_cost, resources
from learnwin.infra.registry import CELLS

LAUNCH, ARITH = {"gru": 0.3, "const": 0.2}, 2e-10


def _ms(family, T, H, batch):
    return T * (LAUNCH[family] + ARITH * batch * CELLS[family].gate_blocks * H * H)


def _log():
    rows = [(f, T, H, B) for f in LAUNCH for T, H, B in ((1024, 128, 512), (1536, 256, 384), (64, 32, 32))]
    return "\n".join(["gpu_check: part 2a", "gpu_cost device NVIDIA H100 80GB HBM3",
                      *(f"gpu_cost step {f} {T} {H} {B} {_ms(f, T, H, B)!r}" for f, T, H, B in rows),
                      "cell  fast ms  x nn.LSTM", "gpu_cost snapshot gru 1024 128 128 40.5 20.25", "== done"])


def test_the_writer_command_turns_the_checks_log_into_the_table(tmp_path):
    log = tmp_path / "gpu_check.log"
    log.write_text(_log())
    out = tmp_path / "table.yaml"
    gpu_cost.main([str(log), "--out", str(out)])
    table = yaml.safe_load(out.read_text())
    assert table == gpu_cost.parse(_log()) and table["device"] == "NVIDIA H100 80GB HBM3"
    assert len(table["step"]) == 6 and table["step"][0] == {"family": "gru", "T": 1024, "H": 128, "batch": 512,
                                                            "ms_per_step": _ms("gru", 1024, 128, 512)}
    assert table["snapshot"] == [{"family": "gru", "T": 1024, "H": 128, "sequences": 128, "seconds": 40.5,
                                  "peak_gib": 20.25}]
    assert not list(tmp_path.glob(".table.yaml.*"))  # written atomically: no temporary left


def test_a_malformed_or_empty_log_is_refused_by_line():
    with pytest.raises(ValueError, match=r"log line 2: 'gpu_cost step gru 1024 128 512': a step row has 5 fields"):
        gpu_cost.parse("x\ngpu_cost step gru 1024 128 512\n")
    with pytest.raises(ValueError, match="no 'gpu_cost step' line"):
        gpu_cost.parse("gpu_check: the step part ran past its limit\n")


def test_the_law_is_recovered_from_rows_drawn_from_it():
    table = gpu_cost.parse(_log())
    law = gpu_cost.step_law(table)
    for family in LAUNCH:
        assert law[family] == pytest.approx((LAUNCH[family], ARITH), rel=1e-9)
        assert gpu_cost.ms_per_step(family, 333, 77, 99, CELLS[family].gate_blocks, table=table) == pytest.approx(
            _ms(family, 333, 77, 99), rel=1e-9)
    # a stack issues each layer's kernels; a family outside the table takes the slowest launch
    assert gpu_cost.ms_per_step("gru", 100, 10, 10, 6, layers=2, table=table) == pytest.approx(
        100 * (2 * 0.3 + ARITH * 10 * 6 * 100), rel=1e-9)
    assert gpu_cost.ms_per_step("lru", 100, 10, 10, 0, table=table) == pytest.approx(100 * 0.3, rel=1e-9)
    one = {"step": [r for r in table["step"] if r["family"] == "const"][:1] + table["step"][:3]}
    assert gpu_cost.step_law(one)["const"] == pytest.approx((_ms("const", 1024, 128, 512) / 1024 - ARITH * 512 * 16384,
                                                             ARITH), rel=1e-9)  # one row: the pooled slope


def test_a_snapshots_device_memory_scales_the_measured_peak():
    table = gpu_cost.parse(_log())
    assert gpu_cost.snapshot_peak_mb(64, 2048, 32, table=table) == pytest.approx(1024 * 20.25 * (64 * 2048 * 32)
                                                                                 / (128 * 1024 * 128))
    assert gpu_cost.snapshot_peak_mb(64, 2048, 32, table={"step": []}) == 0


def test_the_committed_table_is_the_h200_upper_bound():
    table = gpu_cost.load()
    rows = {(r["family"], r["T"], r["H"], r["batch"]): r["ms_per_step"] for r in table["step"]}
    assert rows[("gru", 1024, 128, 512)] == 405.0 and rows[("lstm", 1024, 128, 512)] == 431.0
    assert set(gpu_cost.step_law(table)) == {"const", "shared", "diag", "gru", "lstm"}


def test_long_trainings_ask_the_cap_and_the_retries_they_need():
    assert resources._minutes(60 * 60 * 30, cap=True) == resources.MAX_RUNTIME < 24 * 60
    assert resources._minutes(60 * 60 * 30) == 2 * 30 * 60  # a job that cannot resume is not capped
    assert resources.resume_retries(resources.MAX_RUNTIME) is None
    assert resources.resume_retries(resources.MAX_RUNTIME + 1) == 2
    assert resources.resume_retries(5 * resources.MAX_RUNTIME) == 5  # four more attempts and a spare
    assert math.isclose(resources.gpu_train_seconds({"train": {"batch_size": 4}, "task": {"T": 8},
                                                     "model": {"hidden": 2}}, "gru", 2, 10, evaluated=8)
                        - resources.GPU_START_S,
                        2 * (10 + resources.EVAL_SHARE * 2) * gpu_cost.ms_per_step("gru", 8, 2, 4, 3) / 1000)
