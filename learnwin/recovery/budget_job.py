"""The online trainings of the window under a training budget (docs/method.md §10b): one process
runs the control and the lags of one (model, seed). The estimators are :mod:`learnwin.stats.budget`.

* **Online.** Step k trains on sequences kB .. (k+1)B - 1 of the seed's train stream, once each, in
  order, at a constant learning rate (:func:`online`): the network after k steps is the network
  trained with budget N = kB. The stream of N_max starts with the stream of any smaller N
  (:func:`learnwin.models.data.make_split` draws sequence by sequence).
* **Paired.** The control and every lag start from the init of (model, seed) (``init_seed``).
* **Scores.** After the step that completes each budget, r and its null on the held-out sequences
  (``held_out_scores``, as in §10); scoring uses no random state and the network goes back to
  training mode, so it does not perturb the training.
* **Control.** The targets of the first grid lag under one permutation of the whole stream, trained
  to N_max and scored at every grid lag and budget.
* **Early stop.** A lag's training stops once it is learned at two consecutive budgets under the
  largest threshold: its N̂_emp is then known under every threshold.
* **Frontier.** Lags run in increasing order; after ``frontier_stop`` consecutive lags with no
  learned pair by N_max under the smallest threshold, the larger lags are not run (they have no
  task rows; :func:`learnwin.stats.budget.learning_budget` marks them).
* **Same networks.** :func:`budget_networks` rebuilds a (model, seed)'s init and its first grid
  lag's training as checkpoints, for the prediction and claim (d), snapshotted by
  :func:`learnwin.recovery.task.groundtruth_snapshots`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from learnwin.models.train import checkpoint, checkpoint_meta, train_step
from learnwin.recovery.task import check_recorded, held_out_scores, init_seed, initial, job_data, lag_targets
from learnwin.stats.budget import budget_grid, first_pair
from learnwin.stats.groundtruth import margin


def online(net, opt, x: torch.Tensor, y: torch.Tensor, *, budgets: Sequence[int], batch_size: int, grad_clip: float,
           run_name: str, lr_key: str) -> Iterator[int]:
    """Train ``net`` online on (x, y) (docs/method.md §10b): step k on sequences kB .. (k+1)B - 1.
    Yields each budget N of the increasing ``budgets`` (multiples of B, at most len(x)) after the
    step that completes it; the caller may score the network there, or stop."""
    done = 0
    for N in budgets:
        for start in range(done, N, batch_size):
            stop = start + batch_size
            train_step(net, opt, x[start:stop], y[start:stop], grad_clip=grad_clip, run_name=run_name,
                       lr_key=lr_key, where=f"N={stop}")
        done = N
        yield N


def budget_trainings(
    *, model: str, optimizer: str, seed: int, lags: Sequence[int], thresholds: Sequence[float],
    budgets: Sequence[int], batch_size: int, frontier_stop: int, task: Mapping, model_config: Mapping,
    optim_config: Mapping, train_config: Mapping, gt: Mapping, early_stop: bool = True, device: str = "cpu",
) -> pd.DataFrame:
    """The scores of one (model, seed): one row per (target, lag, N) scored, target "control" (at
    every grid lag and budget) or "task" (the lag's own training, at its lag, at each budget until
    it stopped), with r, null and seconds (the training's wall time from its init to that score).

    ``budgets``: increasing multiples of ``batch_size``; ``frontier_stop`` = 0 runs every lag;
    ``early_stop`` = False runs every lag to N_max (a check). ``train_config["grad_clip"]`` and
    ``gt`` (coef, n_test, n_perm, null_quantile) as in §10.
    """
    budgets = budget_grid(budgets, batch_size)
    lags = np.asarray(sorted(lags), dtype=int)
    thr = np.array([min(thresholds), max(thresholds)], dtype=float)[:, None]  # frontier's, early stop's
    n_max, coef = int(budgets[-1]), gt["coef"]
    init = init_seed(seed, model)
    data = job_data(seed, task, gt, n_max, device)
    x = torch.from_numpy(data["x_all"]).to(device)
    name, lr_key = f"model={model} optimizer={optimizer} seed={seed}", f"optim.{optimizer}.lr"

    def trained(y: np.ndarray, label: str, score_lags, stop=None) -> list[dict]:
        """Score rows of one training on targets ``y``; ``stop(rows)`` ends it early."""
        net, opt = initial(model, optimizer, x.shape[-1], init=init, model_config=model_config,
                           optim_config=optim_config, device=device)
        t0, rows = time.perf_counter(), []
        for N in online(net, opt, x, torch.from_numpy(y).to(device), budgets=budgets, batch_size=batch_size,
                        grad_clip=train_config["grad_clip"], run_name=f"{name} {label}", lr_key=lr_key):
            r, null = held_out_scores(net, data, score_lags, init=init, gt=gt)
            net.train()
            seconds = time.perf_counter() - t0
            rows += [dict(N=int(N), lag=int(lag), r=a, null=b, seconds=seconds) for lag, a, b in zip(score_lags, r, null)]
            if stop is not None and stop(rows):
                break
        return rows

    perm = np.random.default_rng([init, n_max]).permutation(n_max)
    control = trained(lag_targets(data["y0_all"], data["comp_train"], int(lags[0]), coef)[perm], "control", lags)
    r_ctrl = np.array([row["r"] for row in control]).reshape(budgets.size, lags.size)

    def learned(rows: list[dict], i: int) -> np.ndarray:
        """(smallest, largest threshold) x budgets scored so far: the lag ``lags[i]`` learned."""
        r, null = (np.array([row[k] for row in rows]) for k in ("r", "null"))
        return margin(r, r_ctrl[:len(rows), i], null, thr) > 0

    table = [dict(target="control", **row) for row in control]
    unlearned = 0
    for i, lag in enumerate(lags.tolist()):
        stop = (lambda rows, i=i: first_pair(learned(rows, i)[1]) >= 0) if early_stop else None
        rows = trained(lag_targets(data["y0_all"], data["comp_train"], lag, coef), f"lag={lag}", [lag], stop)
        table += [dict(target="task", **row) for row in rows]
        unlearned = unlearned + 1 if first_pair(learned(rows, i)[0]) < 0 else 0
        if frontier_stop and unlearned >= frontier_stop:
            break
    keys = dict(model=model, optimizer=optimizer, seed=seed)
    out = pd.DataFrame(table).assign(**keys)
    return out[[*keys, "target", "lag", "N", "r", "null", "seconds"]]


def budget_networks(
    *, model: str, optimizer: str, seed: int, lags: Sequence[int], budgets: Sequence[int], task: Mapping,
    model_config: Mapping, optim_config: Mapping, train_config: Mapping, gt: Mapping, recorded: pd.DataFrame,
    device: str = "cpu",
) -> dict[str, dict]:
    """The networks of one (model, seed) of the budget protocol as checkpoints (docs/method.md
    §10b), named as :data:`learnwin.stats.prediction.NETWORKS`: the shared init, and the first grid
    lag's online training at its last scored budget (where early stop ended it, else N_max). Both
    record that lag as ``task_lag``.

    The trained network is trained again as :func:`budget_trainings` trained it, so on CPU it is
    bitwise the network the protocol scored: its held-out score must equal the ``recorded`` one
    (the job's scores table) or this raises.
    """
    lag = int(min(lags))
    rows = recorded[(recorded["target"] == "task") & (recorded["lag"] == lag)]
    if rows.empty:
        raise ValueError(f"model={model} seed={seed}: the scores have no task row at the first grid lag {lag}")
    batch_size = train_config["batch_size"]
    budgets = budget_grid(budgets, batch_size)
    n_stop = int(rows["N"].max())
    init = init_seed(seed, model)
    data = job_data(seed, task, gt, n_stop, device)
    kw = dict(model_config=model_config, optim_config=optim_config)
    meta = {**checkpoint_meta(model, optimizer, seed, input_size=task["D"], **kw), "task_lag": lag}
    net, opt = initial(model, optimizer, task["D"], init=init, device=device, **kw)
    nets = {"init": checkpoint(net, opt, "init", meta, float("nan"))}
    y = torch.from_numpy(lag_targets(data["y0_all"], data["comp_train"], lag, gt["coef"])).to(device)
    for _ in online(net, opt, torch.from_numpy(data["x_all"]).to(device), y, budgets=budgets[budgets <= n_stop],
                    batch_size=batch_size, grad_clip=train_config["grad_clip"],
                    run_name=f"model={model} seed={seed} lag={lag}", lr_key=f"optim.{optimizer}.lr"):
        pass
    check_recorded(held_out_scores(net, data, [lag], init=init, gt=gt)[0][0], recorded, N=n_stop, lag=lag,
                   who=f"model={model} seed={seed}")
    nets["trained"] = checkpoint(net, opt, "trained", meta, float("nan"))
    return nets
