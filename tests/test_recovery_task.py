"""Recovery honours ``task.kind`` (docs/method.md §1, §10): the ground truth's single-lag stream is
the config's task drawn through the task table; the synthetic task's targets, computed from its
stream without a redraw, are its draw's bit for bit; and the budget job on a user's task (the
tests' toy task, tests/toy_task.py) trains on that task's targets."""

import numpy as np
import pytest
import toy_task
from test_budget import GT, MODEL, OPTIM, TASK, one_thread  # noqa: F401  (one_thread: autouse)

from learnwin.recovery import budget_job
from learnwin.recovery.budget_job import budget_trainings
from learnwin.recovery.task import job_data, lag_task
from learnwin.tasks.synthetic import draw

TANH = dict(TASK, kind="tanh", module="toy_task")


@pytest.mark.parametrize("lag", [1, 5, 15])
def test_the_synthetic_targets_are_its_draw_with_one_lag(lag):
    """lag_task on the synthetic task (noise plus c u . x_{t-l}) equals the task's own draw with
    lags = [l], bit for bit, on the first n sequences (the prefix the dataset protocol takes)."""
    data = job_data(3, TASK, GT, 64)
    for n in (64, 16):
        x, y = draw(3, {**TASK, "lags": [lag], "coefs": [GT["coef"]]}, "train", n)
        np.testing.assert_array_equal(x, data["x_all"][:n])
        np.testing.assert_array_equal(lag_task(3, TASK, data, lag, GT["coef"], n), y)


def test_a_user_tasks_stream_is_its_draw():
    """Under task.kind = tanh the stream's inputs and components are the synthetic one's (the toy
    draws the same inputs and u), and a lag's targets are c tanh(2 u . x_{t-l}) plus the noise,
    far from the synthetic targets (the check can fail)."""
    data, synthetic = job_data(3, TANH, GT, 64), job_data(3, TASK, GT, 64)
    np.testing.assert_array_equal(data["x_all"], synthetic["x_all"])
    np.testing.assert_array_equal(data["comp_test"], synthetic["comp_test"])
    y = lag_task(3, TANH, data, 5, GT["coef"])
    expect = data["y0_all"].astype(np.float64)
    expect[:, 5:] += GT["coef"] * np.tanh(2 * data["comp_train"][:, :-5].astype(np.float64))
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)
    assert np.abs(y - lag_task(3, TASK, synthetic, 5, GT["coef"])).max() > 0.05


def test_the_budget_job_trains_on_the_configs_task(monkeypatch):
    """The budget job under task.kind = tanh: every training's targets are the toy task's draw with
    the lag (the control's permuted), and its scores differ from the synthetic task's job."""
    seen, real = [], budget_job.online

    def online(net, opt, x, y, **kw):
        seen.append((kw["run_name"].split()[-1], y.numpy().copy()))
        return real(net, opt, x, y, **kw)

    monkeypatch.setattr(budget_job, "online", online)
    kw = dict(model="gru", optimizer="adamw", seed=3, lags=[1, 5], thresholds=[0.1, 0.2, 0.3], budgets=[16, 32, 64],
              batch_size=8, frontier_stop=0, model_config=MODEL, optim_config=OPTIM["adamw"],
              train_config=dict(grad_clip=1.0), gt=GT)
    tanh = budget_trainings(task=TANH, **kw)
    assert [label for label, _ in seen] == ["control", "lag=1", "lag=5"]
    for label, y in seen[1:]:
        lag = int(label.split("=")[1])
        np.testing.assert_array_equal(y, toy_task.draw(3, {**TANH, "lags": [lag], "coefs": [GT["coef"]]}, "train", 64)[1])
    first = toy_task.draw(3, {**TANH, "lags": [1], "coefs": [GT["coef"]]}, "train", 64)[1]
    np.testing.assert_array_equal(np.sort(seen[0][1], axis=None), np.sort(first, axis=None))  # permuted sequences
    synthetic = budget_trainings(task=TASK, **kw)
    assert not np.allclose(tanh["r"], synthetic["r"])
