"""A recovery job killed after some of its trainings and run again goes on from its ``.resume/``
state (learnwin.infra.resume) and writes the uninterrupted job's tables bit for bit: the budget
protocol's job one training at a time and in lag chunks (docs/method.md §10b), and the dataset
protocol's ground truth with its bisections (§10). Only ``seconds`` (wall time) may differ."""

import json

import numpy as np
import pandas as pd
import pytest
from test_budget import GT, MODEL, TASK, one_thread  # noqa: F401  (one_thread: its autouse fixture, one torch thread)

from learnwin.infra import layout, resume
from learnwin.recovery.budget_job import budget_trainings
from learnwin.recovery.groundtruth_job import groundtruth_job

OPTIM = dict(lr=0.05, weight_decay=1e-4)
LAGS = [1, 3, 5, 7, 9, 11, 13, 15]
BUDGET = dict(model="gru", optimizer="adamw", seed=3, lags=LAGS, thresholds=[0.1, 0.2, 0.3],
              budgets=[16, 32, 64, 128, 256], batch_size=8, frontier_stop=2, task=TASK, model_config=MODEL,
              optim_config=OPTIM, train_config=dict(grad_clip=1.0), gt=GT)
GROUND = dict(model="gru", optimizer="adamw", seed=3, n_train=[32, 64], lags=LAGS, thresholds=[0.1, 0.3], steps=12,
              arm="main", task=TASK, model_config=MODEL, optim_config=dict(lr=0.02, weight_decay=1e-4),
              train_config=dict(batch_size=16, grad_clip=1.0), gt=GT)


class Killed(Exception):
    """The job's end at its time limit, simulated."""


@pytest.fixture
def trainings(monkeypatch):
    """Every unit a job computes, by key, in order; ``kill_at`` = k raises :class:`Killed` instead
    of computing its k-th new unit (0-based), as a job killed while training it."""
    real, log = resume.Units.run, {"computed": [], "kill_at": None}

    def run(self, key, compute):
        def counted():
            if len(log["computed"]) == log["kill_at"]:
                raise Killed(key)
            log["computed"].append(key)
            return compute()

        return real(self, key, counted)

    monkeypatch.setattr(resume.Units, "run", run)
    return log


def resumed(job, kw: dict, work, trainings: dict, kill_at: int):
    """``job(**kw)`` killed while computing its ``kill_at``-th unit, then run again to its end from
    ``work``: the second run's outputs, and the units each run computed."""
    trainings.update(computed=[], kill_at=kill_at)
    with pytest.raises(Killed):
        job(**kw, resume=work)
    first = trainings["computed"]
    assert json.loads((work / resume.STATE).read_text())["units"].keys() == set(first)  # each kept as it ended
    trainings.update(computed=[], kill_at=None)
    return job(**kw, resume=work), first, trainings["computed"]


def assert_same_tables(a: pd.DataFrame, b: pd.DataFrame):
    """Equal column by column, floats bit for bit (NaN where NaN), but wall time."""
    a, b = (t.drop(columns=["seconds"], errors="ignore") for t in (a, b))
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for col in a.columns:
        assert a[col].dtype == b[col].dtype, col
        if pd.api.types.is_float_dtype(a[col]):
            assert np.array_equal(a[col].to_numpy(), b[col].to_numpy(), equal_nan=True), col
        else:
            assert a[col].tolist() == b[col].tolist(), col


@pytest.mark.parametrize("ensemble, kill_at, units", [(0, 3, ["control", "lag=1", "lag=3"]),
                                                       (3, 1, ["lags=1.."])])
def test_a_killed_budget_job_resumes_to_the_same_scores(tmp_path, trainings, ensemble, kill_at, units):
    """Killed at its fourth training (one at a time) or its second lag chunk (chunks of 3, the
    control with the first), the job goes on from the units it kept and writes the scores of a job
    never killed; the early stop and the frontier rule fire in both (lag 1 stops early, the frontier
    ends the job before lag 15), so the kept units feed both on resumption."""
    kw = dict(BUDGET, ensemble=ensemble)
    whole = budget_trainings(**kw)
    work = layout.resume_dir(tmp_path / "scores.parquet")
    again, first, rest = resumed(budget_trainings, kw, work, trainings, kill_at)
    assert first == units and rest and not set(rest) & set(first)  # the kept units are not trained again
    assert_same_tables(again, whole)
    task = whole[whole["target"] == "task"].groupby("lag")["N"].max()
    assert task.loc[1] < BUDGET["budgets"][-1] and task.index[-1] < LAGS[-1]  # early stop, frontier
    assert np.abs(whole["r"]).max() > 0.3  # learned lags among them


def test_a_killed_ground_truth_job_resumes_to_the_same_tables(tmp_path, trainings):
    """Killed in its second N's bisection, the ground-truth job goes on from its kept trainings and
    writes the scores and windows of a job never killed: the same bisection steps (evaluations)
    on the same scores."""
    scores, window = groundtruth_job(**GROUND)
    work = layout.resume_dir(tmp_path / "scores.parquet")
    kill_at = 1 + int(((scores["N"] == 32) & (scores["target"] == "task")).sum()) + 2  # N=64's second lag
    (again, again_window), first, rest = resumed(groundtruth_job, GROUND, work, trainings, kill_at)
    assert first[0] == "N=32 control" and first[kill_at - 2] == "N=64 control" and not set(rest) & set(first)
    assert_same_tables(again, scores)
    assert_same_tables(again_window, window)
    assert (window["evaluations"] > 2).all() and window["censored"].eq(False).any()  # real bisections


def test_changed_settings_ignore_the_kept_units(tmp_path, trainings):
    """A resume state of other settings (more steps) is ignored: the job trains every unit again
    and writes the tables of the new settings."""
    work = layout.resume_dir(tmp_path / "scores.parquet")
    trainings.update(kill_at=3)
    with pytest.raises(Killed):
        groundtruth_job(**GROUND, resume=work)
    trainings.update(computed=[], kill_at=None)
    longer = dict(GROUND, steps=GROUND["steps"] + 4)
    again = groundtruth_job(**longer, resume=work)
    assert trainings["computed"][0] == "N=32 control"
    assert len(trainings["computed"]) == 2 + (again[0]["target"] == "task").sum()  # every unit trained again
    assert_same_tables(again[0], groundtruth_job(**longer)[0])
