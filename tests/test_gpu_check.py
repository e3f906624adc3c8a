"""benchmarks/gpu_check.sh's frame, without its parts: the first answer (versions; the GRU, LSTM and
ConstGate at the replication size against cuDNN; the GRU's member ensemble; one small DAG) comes
first and within 300 s, the rest after it where time is left; a budget that is spent skips every
part, each counted as failed, and the summary names them and the command that writes the GPU cost
table."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIRST = ["A1. versions", "A2. GRU, LSTM, ConstGate steps at the replication size", "A3. the GRU's member ensemble",
         "A4. one small DAG"]
REST = ["0. preflight", "1. smoke DAGs", "2. ms per training step", "3. ensembles", "4. one paper-size snapshot"]
PARTS = FIRST + REST
FIRST_ANSWER_S = 300


def _check(tmp_path, *args, **env) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), **env}
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _plan(stdout: str) -> list[tuple[str, int, int]]:
    """(part, limit s, start s) of each part a planned run prints, in order."""
    return [(name, int(limit), int(float(at)))
            for name, limit, at in re.findall(r"^== (.+) \(limit (\d+) s, at ([\d.]+) s\)$", stdout, re.M)]


def _plan_faults(plan: list[tuple[str, int, int]]) -> list[str]:
    """What breaks the frame: the parts out of order, or the first answer past its 300 s."""
    names = [p for p, _, _ in plan]
    in_order = len(names) == len(PARTS) and all(n.startswith(q) for n, q in zip(names, PARTS))
    faults = [] if in_order else [f"parts {names}, expected {PARTS}"]
    end = max((at + limit for p, limit, at in plan if p.startswith("A")), default=0)
    if end > FIRST_ANSWER_S:
        faults.append(f"the first answer may take {end} s, more than {FIRST_ANSWER_S}")
    return faults


LONGER_STEPS = {"GPU_CHECK_FIRST_STEP_LIMIT": "400"}


@pytest.mark.parametrize("env,fault", [({}, False), (LONGER_STEPS, False),
                                       ({**LONGER_STEPS, "GPU_CHECK_FIRST_BUDGET": "600"}, True)],
                         ids=["defaults", "a longer part cut to the budget", "planted: a first answer of 600 s"])
def test_the_first_answer_comes_first_within_300_s(tmp_path, env, fault):
    """The planned run (GPU_CHECK_PLAN: limits only, nothing run): the first answer's four parts
    first, ending by 300 s (a part given more is cut to what is left), then the rest in order; a
    first answer given a longer budget fails the check."""
    out = _check(tmp_path, GPU_CHECK_PLAN="1", GPU_CHECK_BUDGET="1500", **env)  # time for every part
    skipped = 2 if env == LONGER_STEPS else 0  # A3 and A4, counted as failed
    assert out.returncode == skipped and out.stdout.count(" skipped, ") == skipped, out.stdout + out.stderr
    plan = _plan(out.stdout)
    faults = _plan_faults(plan)
    if fault:
        assert "the first answer may take 550 s, more than 300" in faults, faults
        return
    if env:  # the longer part cut to what is left of the 300 s, the first answer's later parts skipped
        assert plan[1][1:] == (270, 30) and plan[2][0].startswith("0. preflight") and plan[2][2] == 300, plan
        return
    assert faults == [], faults
    assert sum(limit for _, limit, _ in plan[:4]) == FIRST_ANSWER_S  # the four parts' limits fill the 300 s
    assert plan[4][2] == FIRST_ANSWER_S and "the first answer in 300 s" in out.stdout


def test_the_plan_check_finds_parts_out_of_order():
    plan = [(p, 10, 10 * i) for i, p in enumerate(PARTS)]
    assert _plan_faults(plan) == []
    assert _plan_faults(plan[4:] + plan[:4]) != []  # the rest before the first answer
    assert _plan_faults(plan[:3] + plan[4:]) != []  # no DAG


def test_a_spent_budget_skips_every_part_and_the_summary_says_so(tmp_path):
    out = _check(tmp_path, "--dry", GPU_CHECK_BUDGET="1")
    assert out.returncode == len(PARTS), out.stdout + out.stderr
    summary = out.stdout[out.stdout.index("== summary"):].splitlines()
    assert [line.split(maxsplit=1)[0] for line in summary[2:2 + len(PARTS)]] == [p.split()[0] for p in PARTS]
    assert all(p in line and " skipped " in line for p, line in zip(PARTS, summary[2:]))
    assert f"python -m learnwin.infra.gpu_cost {tmp_path}/gpu_check.log" in out.stdout
    assert (tmp_path / "gpu_check.log").read_text().count("skipped, ") == len(PARTS)
