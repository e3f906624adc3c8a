"""The README's library example runs and recovers the analytic time scales tau = -1/log(a); its
measure_window example prints what the README shows."""

import contextlib
import io
import math
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_first_lines_give_the_two_commands():
    head = README.read_text().splitlines()[:15]
    commands = [line for line in head if line.startswith("python3 -m venv")]
    assert len(commands) == 2
    assert commands[0].endswith("snakemake --cores 2") and "torch==2.13.0" in commands[0]
    assert commands[1].endswith("pytest") and "'.[test]'" in commands[1]
    # CI installs and tests exactly as the README's second command does
    install = re.search(r"pip install (.*?) &&", commands[1])[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert f"pip install --quiet {install}\n" in ci and "\npytest " in ci


def test_readme_library_example():
    text = README.read_text()
    code = re.search(r"<!-- readme-example -->\n```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "README.md", "exec"), scope)
    units, env = scope["units"], scope["env"]
    a = scope["cell"].a.double().numpy()
    taus = units.groupby("unit").tau.first().to_numpy()
    assert all(math.isclose(t, -1 / math.log(ai), rel_tol=1e-4) for t, ai in zip(taus, a))
    assert env["f"].is_monotonic_decreasing and len(scope["psi"]) == 32 * 13
    shown = re.search(r"It prints .*?\n\n```\n(.*?)```", text, re.S).group(1)
    assert out.getvalue() == shown  # the output the README shows


def test_readme_measure_window_example():
    """The "Measure your own model's window" example prints the output the README shows, and its
    window is the learned prefix of its learning budgets (read from the printed tables)."""
    text = README.read_text().split("<!-- measure-example -->", 1)[1]
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "README.md", "exec"), scope)
    shown = re.search(r"It prints .*?\n\n```\n(.*?)```", text, re.S).group(1)
    assert out.getvalue() == shown
    window, budget = scope["w"].window, scope["w"].learning_budget
    at = budget[budget["threshold"] == 0.2].set_index("lag")
    for row in window[window["threshold"] == 0.2].itertuples():
        learned = [lag for lag, grid in at["N_hat_grid"].items() if grid <= row.N]
        prefix = [lag for lag in at.index if lag <= row.H_emp]
        assert set(prefix) <= set(learned) and (row.H_emp == at.index[-1] or at.index[len(prefix)] not in learned)
