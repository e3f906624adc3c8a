"""Where every artifact of a run lives: the one module that knows the results layout.

docs/artifacts.md describes each file. Paths are relative to the working directory, the way
Snakemake reads them; the ``{seed}``, ``{optimizer}``, ``{model}``, ``{epoch}``, ``{name}`` ...
fields are the rules' wildcards (fill them with ``str.format``). :func:`under` re-roots a path on
another run's results folder, for readers outside the workflow (experiments/, tests).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = "results"
#: The raw tables of the published runs, kept in the repository (docs/method.md §10d): one folder
#: per run, laid out under it as a run's results folder is (:func:`under`).
KEPT_RUNS = "data/runs"
#: A kept run's record of its sittings, in its folder: one entry per kept or parked unit (its commit,
#: CPU, seconds; a parked one's trainings and segment seconds), experiments/seed_by_seed.py.
SITTINGS = "sittings.yaml"
#: The power table of the growth-law rule (docs/method.md §10d, experiments/growth_power.py).
GROWTH_POWER = "data/power/growth_power.parquet"

DATA = f"{ROOT}/data/seed{{seed}}"
RUN = f"{ROOT}/train/{{optimizer}}/{{model}}/seed{{seed}}"
SNAP = f"{ROOT}/snapshots/{{optimizer}}/{{model}}/seed{{seed}}/epoch{{epoch}}"
DECAY = f"{ROOT}/decay/{{optimizer}}/{{model}}/epoch{{epoch}}.parquet"
#: Cross-run aggregates of the statistics stage, by artifact name.
STATS = {name: f"{ROOT}/stats/{name}.parquet" for name in ("H_N", "H_N_agg", "master", "exponents")}
FIGURE = f"{ROOT}/figures/{{name}}.{{ext}}"
SUMMARY = {
    "parquet": f"{ROOT}/summary.parquet",
    "csv": f"{ROOT}/summary.csv",
    "html": f"{ROOT}/summary.html",
    "reading": f"{ROOT}/reading.rst",
}
PROVENANCE = f"{ROOT}/provenance.yaml"
#: The claim verdicts (docs/method.md §8b): the table, its reading in markdown, and both as HTML
#: for the report's Claims category and landing page.
CLAIMS = {
    "parquet": f"{ROOT}/claims.parquet",
    "findings": f"{ROOT}/findings.md",
    "html": f"{ROOT}/claims.html",
}
#: One ground-truth job of `snakemake recovery` (an arm of one (optimizer, model, seed)), by table name.
RECOVERY_RUN = {name: f"{ROOT}/recovery/runs/{{arm}}/{{optimizer}}/{{model}}/seed{{seed}}/{name}.parquet"
                for name in ("scores", "window")}
#: Snapshots of one (optimizer, model, seed)'s own networks, at init and trained (column epoch), for
#: the same-network prediction (docs/method.md §10), by table name.
RECOVERY_SNAPSHOT = {name: f"{ROOT}/recovery/runs/main/{{optimizer}}/{{model}}/seed{{seed}}/{name}.parquet"
                     for name in ("envelope", "psi", "total")}
#: Aggregates of the ground truth of the window (`snakemake recovery`), by table name.
RECOVERY = {name: f"{ROOT}/recovery/{name}.parquet"
            for name in ("scores", "window", "growth", "slopes", "monotonicity", "steps_check",
                         "network_H_N", "network_decay", "growth_prediction", "prediction",
                         "prediction_scores")}
#: The scores of one job of the budget protocol (docs/method.md §10b): one (optimizer, model, seed).
BUDGET_RUN = f"{ROOT}/recovery/budget/runs/{{optimizer}}/{{model}}/seed{{seed}}/scores.parquet"
#: Snapshots of one (optimizer, model, seed)'s own networks under the budget protocol, at init and
#: trained (column epoch), by table name.
BUDGET_SNAPSHOT = {name: f"{ROOT}/recovery/budget/runs/{{optimizer}}/{{model}}/seed{{seed}}/{name}.parquet"
                   for name in ("envelope", "psi", "total")}
#: Aggregates of the budget protocol over one seed set (``{seed_set}``: exploration or confirm), by table name.
BUDGET = {name: f"{ROOT}/recovery/budget/{{seed_set}}/{name}.parquet"
          for name in ("scores", "learning_budget", "window", "H_emp", "growth", "slopes", "groups",
                       "learning_slope", "network_alpha", "network_H_N", "network_decay", "growth_prediction",
                       "prediction", "prediction_scores", "confirm")}
#: The tables of RECOVERY and BUDGET written under schema ``seed_growth`` (each seed's log-N slope,
#: the seed-level group comparison; docs/method.md §10b), the others under ``recovery`` / ``budget``.
SEED_GROWTH = ("slopes", "groups")


def budget_schema(name: str) -> str:
    """The schema of BUDGET table ``name``: ``seed_growth`` (:data:`SEED_GROWTH`), ``budget`` (the
    trainings' scores, as BUDGET_RUN's) or ``budget_tables`` (the aggregate's other tables)."""
    return "seed_growth" if name in SEED_GROWTH else "budget" if name == "scores" else "budget_tables"
#: Stems of its figures (:func:`figure`), suffixed ``_{seed_set}``.
BUDGET_FIGURES = ("budget_surface", "budget_window", "budget_N_hat")
LOGS = f"{ROOT}/logs"
BENCH = f"{ROOT}/benchmarks"


def resume_dir(output: str | os.PathLike) -> Path:
    """The ``.resume/`` directory of the job that writes ``output``, beside it: what a resumable job
    keeps until its outputs are written (:mod:`learnwin.infra.resume`)."""
    return Path(output).parent / ".resume"


def figure(name: str, ext: str = "png") -> str:
    """Path of one figure file."""
    return FIGURE.format(name=name, ext=ext)


def under(results_dir: str | os.PathLike, path: str, **fields) -> Path:
    """``path`` (a path of this layout, its wildcards filled from ``fields``) inside the results
    folder ``results_dir``."""
    return Path(results_dir) / Path(path.format(**fields)).relative_to(ROOT)


def glob(results_dir: str | os.PathLike, path: str, **fields) -> list[Path]:
    """The existing files of ``path`` in ``results_dir``, sorted; a wildcard not given in
    ``fields`` matches any value."""
    fill = {name: fields.get(name, "*") for name in re.findall(r"{(\w+)}", path)}
    return sorted(Path(results_dir).glob(str(Path(path.format(**fill)).relative_to(ROOT))))
