"""The measured window of any sequence model, as a library call (docs/method.md §10b, "Any model").

:func:`measure_window` runs the budget protocol of the workflow's job on a user's module
(:mod:`learnwin.recovery.plain`), seed by seed, through the job's own code
(:class:`learnwin.recovery.budget_job.BudgetJob`: the online pass per lag, the paired init, the
control, the score and its null, early stop and the frontier rule), and reads the tables of the
workflow's aggregate off its scores (:mod:`learnwin.stats.budget`, :mod:`learnwin.stats.growth`).
Its defaults are config/config.yaml's (tests/test_measure.py holds them equal).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from torch import nn

from learnwin.recovery.budget_job import BudgetJob, Settings
from learnwin.recovery.plain import plain_network
from learnwin.stats import budget, growth


@dataclass(frozen=True)
class Window:
    """What :func:`measure_window` measured: ``scores`` (r(l, N) and its null, one row per
    (seed, target, lag, N), as the workflow's scores table), ``learning_budget`` (each lag's
    N̂_emp per seed and threshold), ``window`` (H(N), the learned prefix, per seed), ``H`` (its mean
    over the seeds), ``slopes`` (each seed's growth exponent c and log-N slope b, §10c) and
    ``growth`` (the verdict on the growth law with the seed as the unit, §10c; "too few seeds"
    under 3)."""

    scores: pd.DataFrame
    learning_budget: pd.DataFrame
    window: pd.DataFrame
    H: pd.DataFrame
    slopes: pd.DataFrame
    growth: pd.DataFrame


class WindowError(RuntimeError):
    """A training of :func:`measure_window` failed; ``scores`` holds every finished one's rows."""

    def __init__(self, message: str, scores: pd.DataFrame):
        super().__init__(message)
        self.scores = scores


def measure_window(
    make_model: Callable[[int], nn.Module], *, T: int, lags: Sequence[int], budgets: Sequence[int],
    seeds: Sequence[int], name: str = "model", D: int = 8, noise_std: float = 0.2, coef: float = 0.5,
    optimizer: str = "adamw", optim_config: Mapping | None = None, batch_size: int = 32, grad_clip: float = 1.0,
    thresholds: Sequence[float] = (0.1, 0.2, 0.3), frontier_stop: int = 2, n_test: int = 256, n_perm: int = 200,
    null_quantile: float = 0.99, device: str = "cpu", resume: str | Path | None = None, progress: bool = True,
) -> Window:
    """The window of ``make_model``'s network under the training budgets ``budgets`` (docs/method.md
    §10b): per seed, the control and each lag of ``lags`` (< ``T``) trained online on fresh
    sequences of the single-lag task (``D`` inputs, ``noise_std``, ``coef``), scored on ``n_test``
    held-out sequences at each budget, with early stop and the frontier rule (``frontier_stop``, 0:
    every lag). ``name`` seeds the paired init as a model name does in the workflow, so a
    registered cell's builder named as the cell gives the workflow's scores. ``optim_config``: the
    optimizer's hyper-parameters (None: adamw's lr 0.005, weight decay 1e-4; another optimizer's
    defaults). ``resume``: a
    directory where each finished training is kept and from which a re-run with the same settings
    goes on. ``progress``: one line per lag on stderr.

    A factory that raises or a module with the wrong output is a
    :class:`learnwin.recovery.plain.ModelError` before any training; a training that fails (a
    non-finite loss: :class:`learnwin.models.train.DivergenceError`) raises :class:`WindowError`
    from it, holding the finished trainings' rows (and ``resume``, where given, keeps them).
    """
    if max(lags) >= T or min(lags) < 1:
        raise ValueError(f"lags = {sorted(lags)} must lie in 1 .. T - 1 = {T - 1}")
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    network = plain_network(make_model, name, T)
    network.make(D)  # a factory or an output that cannot train stops here, before any training
    source = f"{getattr(make_model, '__module__', '')}:{getattr(make_model, '__qualname__', repr(make_model))}"
    if optim_config is None:  # the config's adamw; another optimizer's own defaults
        optim_config = dict(lr=0.005, weight_decay=1e-4) if optimizer == "adamw" else {}
    tables, t0 = [], time.perf_counter()
    for seed in seeds:
        run = Settings(model=name, optimizer=optimizer, seed=seed, lags=lags, budgets=budgets, batch_size=batch_size,
                       task=dict(T=T, D=D, noise_std=noise_std), model_config={"module": source},
                       optim_config=optim_config, train_config=dict(grad_clip=grad_clip),
                       gt=dict(coef=coef, n_test=n_test, n_perm=n_perm, null_quantile=null_quantile),
                       thresholds=thresholds, device=device)
        job = BudgetJob(run, network, resume=None if resume is None else Path(resume) / f"seed{seed}")
        done = []
        try:
            for rows in job.task_rows(frontier_stop):
                done += rows
                if progress:
                    print(f"measure_window {name} seed {seed}: lag {rows[-1]['lag']} trained to N={rows[-1]['N']} "
                          f"({len({row['lag'] for row in done})}/{len(lags)} lags, {time.perf_counter() - t0:.0f} s)",
                          file=sys.stderr, flush=True)
        except Exception as err:
            raise WindowError(f"measure_window {name}: seed {seed} failed ({type(err).__name__}: {err}); the "
                              "finished trainings' rows are in this error's .scores"
                              + (f" and kept in {resume}" if resume else ""),
                              pd.concat([*tables, job.table(done)], ignore_index=True)) from err
        tables.append(job.table(done))
    return window_of(pd.concat(tables, ignore_index=True), thresholds, budgets)


def window_of(scores: pd.DataFrame, thresholds: Sequence[float], budgets: Sequence[int]) -> Window:
    """The tables of a :class:`Window` from the ``scores`` of the budget protocol, read as the
    workflow's aggregate reads them (:mod:`learnwin.stats.budget`, :mod:`learnwin.stats.growth`)."""
    learning_budget = budget.learning_budget(scores, thresholds, budgets)
    window = budget.window_by_budget(learning_budget, budgets)
    slopes = growth.seed_growth(window.rename(columns={"H_emp": "H"}))
    return Window(scores=scores, learning_budget=learning_budget, window=window,
                  H=budget.window_over_seeds(window), slopes=slopes, growth=growth.shape_table(slopes))
