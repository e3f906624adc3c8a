"""The trainings of the ground-truth window (docs/method.md §10): one process runs every training
of one (model, seed) over an N ladder, so that start-up is paid once. The statistics are
:mod:`learnwin.stats.groundtruth` (criterion, bisection) and :mod:`learnwin.stats.growth`.

Task: the single-lag task of :mod:`learnwin.recovery.task`. The training set of N is the first N
sequences of the seed's train stream (nested across N).

* **Paired runs.** The init and the batch order of every training of (model, seed) come from one
  seed derived from (seed, model) (:func:`init_seed`): runs differ only in their lag, N and
  targets.
* **Equal budget.** Every training takes ``steps`` steps of the docs/method.md §3 recipe
  (reshuffle per epoch, full batches, MSE, clip); no model selection.
* **Control.** Per N one training on the targets of the first lag permuted across sequences
  (which keeps their distribution and breaks x -> y), scored against every lag's component.
* **Same networks.** :func:`groundtruth_networks` rebuilds a (model, seed)'s init and one of its
  trainings as checkpoints, and :func:`learnwin.recovery.task.groundtruth_snapshots` snapshots them like the main run's,
  for the prediction (:mod:`learnwin.stats.prediction`).
* **Bisection.** Per N and threshold, :func:`learnwin.stats.groundtruth.bisect_window` on the
  snapshot lag grid; trainings are cached per (N, lag), so the thresholds share them, and each
  threshold's bisection starts from the bracket the cached lags give (warm start).
  ``full_grid`` trains every lag instead (the monotonicity check).
* **Resume.** Each finished training (an N's control, an (N, lag)) keeps its score rows in the
  job's ``.resume/`` directory (``resume``, :class:`learnwin.infra.resume.Units`); a re-run with
  the same settings takes them from there, in the order the bisection asks for them (a cached lag
  is not known to a bisection before it is asked for, as in an uninterrupted run). Every training
  starts from its own seeds (the paired init, the epoch orders of :func:`train`, the permutation
  of (init, N), the scores' permutations), so a skipped training shifts nothing after it: the
  resumed job's tables are the uninterrupted one's (tests/test_resume.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from learnwin.infra.resume import Units
from learnwin.models.train import checkpoint, checkpoint_meta, train_epoch
from learnwin.recovery.task import check_recorded, held_out_scores, init_seed, initial, job_data, lag_task
from learnwin.stats.groundtruth import bisect_window, margin

ARMS = ("main", "full_grid", "double_steps")


def train(model: str, optimizer: str, x: torch.Tensor, y: torch.Tensor, *, init: int, steps: int,
          model_config: Mapping, optim_config: Mapping, train_config: Mapping, run_name: str):
    """(network, optimizer): a freshly initialised network (:func:`initial`) after exactly ``steps`` steps."""
    net, opt = initial(model, optimizer, x.shape[-1], init=init, model_config=model_config,
                       optim_config=optim_config, device=x.device)
    done, epoch = 0, 0
    while done < steps:
        epoch += 1
        done += train_epoch(net, opt, x, y, seed=init, epoch=epoch, batch_size=train_config["batch_size"],
                            grad_clip=train_config["grad_clip"], run_name=run_name,
                            lr_key=f"optim.{optimizer}.lr", max_steps=steps - done)
    return net, opt


def groundtruth_job(
    *, model: str, optimizer: str, seed: int, n_train: Sequence[int], lags: Sequence[int],
    thresholds: Sequence[float], steps: int, arm: str, task: Mapping, model_config: Mapping,
    optim_config: Mapping, train_config: Mapping, gt: Mapping, device: str = "cpu", resume: str | Path | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scores, window) of one (model, seed) over ``n_train``; ``resume``: the job's ``.resume/``
    directory, where each finished training keeps its score rows and from which a re-run with the
    same settings goes on (None: nothing kept).

    scores: one row per (N, lag, target) scored: target "task" (the lag's own training, at its
    lag) or "control" (the shuffled-target training, at every lag), with r, null, the training's
    seconds. window: one row per (N, threshold): H, H_grid, censored, lag_lo, lag_hi, trainings.
    """
    if arm not in ARMS:
        raise ValueError(f"groundtruth arm {arm!r} must be one of {ARMS}")
    lags = np.asarray(sorted(lags), dtype=int)
    init = init_seed(seed, model)
    data = job_data(seed, task, gt, max(n_train), device)
    name = f"model={model} optimizer={optimizer} seed={seed}"
    settings = dict(model=model, optimizer=optimizer, seed=seed, n_train=sorted(n_train), lags=lags.tolist(),
                    thresholds=thresholds, steps=steps, arm=arm, task=task, model_config=model_config,
                    optim_config=optim_config, train_config=train_config, gt=gt, device=device)
    kw = dict(model=model, optimizer=optimizer, init=init, steps=steps, coef=gt["coef"], lags=lags,
              thresholds=thresholds, full_grid=arm == "full_grid", device=device, gt=gt,
              train_kw=dict(model_config=model_config, optim_config=optim_config, train_config=train_config),
              name=name, units=Units(resume, settings, f"{name} arm={arm}"), task_of=partial(lag_task, seed, task))
    score_rows, window_rows = [], []
    for N in sorted(n_train):
        s_rows, w_rows = _one_n(N, data, **kw)
        score_rows += s_rows
        window_rows += w_rows
    keys = dict(model=model, optimizer=optimizer, seed=seed, arm=arm, steps=steps)
    scores = pd.DataFrame(score_rows).assign(**keys)
    window = pd.DataFrame(window_rows).assign(**keys)
    front = list(keys)
    return (scores[front + [c for c in scores if c not in front]],
            window[front + [c for c in window if c not in front]])


def _one_n(N, data, *, model, optimizer, init, steps, coef, lags, thresholds, full_grid, device,
           gt, train_kw, name, units, task_of) -> tuple[list, list]:
    """Score and window rows of one N: the control, then the bisection per threshold (trainings
    cached per lag), or every lag first when ``full_grid``; each training one of ``units``;
    ``task_of(data, lag, coef, N)`` a lag's targets (:func:`learnwin.recovery.task.lag_task`)."""
    x = torch.from_numpy(data["x_all"][:N]).to(device)

    def targets(lag):
        return torch.from_numpy(task_of(data, lag, coef, N)).to(device)

    def fit(y, label):
        return train(model, optimizer, x, y, init=init, steps=steps, run_name=f"{name} N={N} {label}",
                     **train_kw)[0]

    def control() -> list[dict]:
        t0 = time.perf_counter()
        perm = np.random.default_rng([init, N]).permutation(N)
        net = fit(targets(int(lags[0]))[perm], "control")
        r_ctrl, null_ctrl = held_out_scores(net, data, lags, init=init, gt=gt)
        seconds = time.perf_counter() - t0
        return [dict(N=N, lag=int(lag), target="control", r=r, null=nl, seconds=seconds)
                for lag, r, nl in zip(lags, r_ctrl, null_ctrl)]

    def task(lag: int) -> dict:
        t0 = time.perf_counter()
        net = fit(targets(lag), f"lag={lag}")
        r, nl = held_out_scores(net, data, [lag], init=init, gt=gt)
        return dict(N=N, lag=lag, target="task", r=float(r[0]), null=float(nl[0]), seconds=time.perf_counter() - t0)

    score_rows = list(units.run(f"N={N} control", control))
    ctrl = {row["lag"]: row["r"] for row in score_rows}
    cache: dict[int, tuple[float, float]] = {}

    def task_score(lag: int) -> tuple[float, float]:
        lag = int(lag)
        if lag not in cache:
            row = units.run(f"N={N} lag={lag}", partial(task, lag))
            cache[lag] = (row["r"], row["null"])
            score_rows.append(row)
        return cache[lag]

    def margin_at(lag: int, thr: float) -> float:
        r, nl = task_score(lag)
        return float(margin(r, ctrl[lag], nl, thr))

    if full_grid:
        for lag in lags:  # each lag is one training
            task_score(int(lag))
    window_rows = []
    for thr in thresholds:
        out = bisect_window(lags, lambda lag: margin_at(lag, thr), known=list(cache))  # noqa: B023
        window_rows.append(dict(N=N, threshold=float(thr), H=out["H"], H_grid=out["H_grid"],
                                censored=out["censored"], lag_lo=out["lag_lo"], lag_hi=out["lag_hi"],
                                evaluations=len(out["evaluated"])))
    for row in window_rows:
        row["trainings"] = len(cache) + 1  # the task lags of this N and its control
    return score_rows, window_rows


def groundtruth_networks(
    *, model: str, optimizer: str, seed: int, n_train: Sequence[int], lags: Sequence[int], steps: int,
    task: Mapping, model_config: Mapping, optim_config: Mapping, train_config: Mapping, gt: Mapping,
    recorded: pd.DataFrame, device: str = "cpu",
) -> dict[str, dict]:
    """The networks of one (model, seed) of the main arm as checkpoints, named as
    :data:`learnwin.stats.prediction.NETWORKS`: its shared init, and its training on the first grid
    lag at the largest N, the one training every bisection runs (docs/method.md §10). Both record
    that lag as ``task_lag``.

    The trained network is trained again with the seeds, data and budget of
    :func:`groundtruth_job`, so on CPU it is bitwise the network the ground truth scored: its
    held-out score at that lag must equal the ``recorded`` one (the job's scores table, to float32)
    or this raises.
    """
    N, lag, D = max(n_train), int(min(lags)), task["D"]
    init = init_seed(seed, model)
    data = job_data(seed, task, gt, N, device)
    kw = dict(model_config=model_config, optim_config=optim_config)
    meta = {**checkpoint_meta(model, optimizer, seed, input_size=D, **kw), "task_lag": lag}
    net, opt = initial(model, optimizer, D, init=init, device=device, **kw)
    nets = {"init": checkpoint(net, opt, "init", meta, float("nan"))}
    y = torch.from_numpy(lag_task(seed, task, data, lag, gt["coef"])).to(device)
    net, opt = train(model, optimizer, torch.from_numpy(data["x_all"]).to(device), y, init=init, steps=steps,
                     train_config=train_config, run_name=f"model={model} seed={seed} N={N} lag={lag}", **kw)
    check_recorded(held_out_scores(net, data, [lag], init=init, gt=gt)[0][0], recorded, N=N, lag=lag,
                   who=f"model={model} seed={seed}")
    nets["trained"] = checkpoint(net, opt, "trained", meta, float("nan"))
    return nets


