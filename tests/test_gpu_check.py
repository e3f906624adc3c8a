"""benchmarks/gpu_check.sh's frame, without its parts: a budget that is spent skips every part, each
counted as failed, and the summary names them and the command that writes the GPU cost table."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ["0. preflight", "1. smoke DAGs", "2. ms per training step", "3. ensembles", "4. one paper-size snapshot"]


def test_a_spent_budget_skips_every_part_and_the_summary_says_so(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "GPU_CHECK_BUDGET": "1"}
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--dry"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == len(PARTS), out.stdout + out.stderr
    summary = out.stdout[out.stdout.index("== summary"):].splitlines()
    assert [line.split(maxsplit=1)[0] for line in summary[2:2 + len(PARTS)]] == [p.split()[0] for p in PARTS]
    assert all(p in line and " skipped " in line for p, line in zip(PARTS, summary[2:]))
    assert f"python -m learnwin.infra.gpu_cost {tmp_path}/gpu_check.log" in out.stdout
    assert (tmp_path / "gpu_check.log").read_text().count("skipped, ") == len(PARTS)
