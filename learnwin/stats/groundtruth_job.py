"""The trainings of the ground-truth window (docs/method.md §10): one process runs every training
of one (model, seed) over an N ladder, so that start-up is paid once. The statistics are
:mod:`learnwin.stats.groundtruth` (criterion, bisection) and :mod:`learnwin.stats.growth`.

Task (docs/method.md §1 with one lag): y_t = c (u . x_{t-l}) 1[t >= l] + eps_t. The training set
of N is the first N sequences of the seed's train stream (nested across N); the scores are taken
on the first ``n_test`` sequences of the diag stream, never trained on.

* **Paired runs.** The init and the batch order of every training of (model, seed) come from one
  seed derived from (seed, model) (:func:`init_seed`): runs differ only in their lag, N and
  targets.
* **Equal budget.** Every training takes ``steps`` steps of the docs/method.md §3 recipe
  (reshuffle per epoch, full batches, MSE, clip); no model selection.
* **Control.** Per N one training on the targets of the first lag permuted across sequences
  (which keeps their distribution and breaks x -> y), scored against every lag's component.
* **Same networks.** :func:`groundtruth_networks` rebuilds a (model, seed)'s init and one of its
  trainings as checkpoints, and :func:`groundtruth_snapshots` snapshots them like the main run's,
  for the prediction (:mod:`learnwin.stats.prediction`).
* **Bisection.** Per N and threshold, :func:`learnwin.stats.groundtruth.bisect_window` on the
  snapshot lag grid; trainings are cached per (N, lag), so the thresholds share them, and each
  threshold's bisection starts from the bracket the cached lags give (warm start).
  ``full_grid`` trains every lag instead (the monotonicity check).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.models.data import components, make_split, task_vector
from learnwin.models.train import checkpoint, checkpoint_meta, make_optimizer, train_epoch
from learnwin.probing.snapshot import snapshot_state
from learnwin.stats.groundtruth import bisect_window, lag_scores, margin

ARMS = ("main", "full_grid", "double_steps")


def init_seed(seed: int, model: str) -> int:
    """The seed of a (model, seed)'s init, batch order and control permutation."""
    return int(np.random.SeedSequence([seed, zlib.crc32(model.encode())]).generate_state(1)[0])


@torch.no_grad()
def predict(net, x: torch.Tensor, batch: int) -> np.ndarray:
    """Model outputs (n, T) in batches."""
    net.eval()
    return torch.cat([net(x[i:i + batch]) for i in range(0, len(x), batch)]).cpu().numpy()


def job_data(seed: int, task: Mapping, gt: Mapping, n_max: int, device: str = "cpu") -> dict:
    """The data of a seed's trainings: the first ``n_max`` sequences of the train stream with
    noise-only targets (x_all, y0_all) and their components comp_train = u . x_t, and the first
    ``gt["n_test"]`` of the diag stream (x_test on ``device``, comp_test)."""
    T, D, noise = task["T"], task["D"], task["noise_std"]
    u = task_vector(seed, D)
    x_all, y0_all = make_split(seed, "train", n_max, T, D, [], [], noise)
    x_test, _ = make_split(seed, "diag", gt["n_test"], T, D, [], [], noise)
    return dict(x_all=x_all, y0_all=y0_all, comp_train=components(x_all, u), comp_test=components(x_test, u),
                x_test=torch.from_numpy(x_test).to(device))


def held_out_scores(net, data: Mapping, lags, *, init: int, gt: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """(r, null) of a trained network on ``data``'s held-out sequences at ``lags``
    (:func:`learnwin.stats.groundtruth.lag_scores`)."""
    return lag_scores(predict(net, data["x_test"], 256), data["comp_test"], lags, seed=init, n_perm=gt["n_perm"],
                      quantile=gt["null_quantile"])


def initial(model: str, optimizer: str, input_size: int, *, init: int, model_config: Mapping,
            optim_config: Mapping, device: str = "cpu"):
    """(network, optimizer) of a (model, seed) at initialisation (torch seed ``init``)."""
    torch.manual_seed(init)
    net = build_model(model, input_size, **model_config).to(device)
    return net, make_optimizer(optimizer, net.parameters(), optim_config)


def lag_targets(y0: np.ndarray, comp: np.ndarray, lag: int, coef: float) -> np.ndarray:
    """Targets of the single-lag task: noise ``y0`` (n, T) plus c u . x_{t-l} for t >= l, from the
    components ``comp`` (n, T) = u . x_t."""
    y = y0.copy()
    y[:, lag:] += coef * comp[:, :-lag]
    return y


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
    optim_config: Mapping, train_config: Mapping, gt: Mapping, device: str = "cpu",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scores, window) of one (model, seed) over ``n_train``.

    scores: one row per (N, lag, target) scored: target "task" (the lag's own training, at its
    lag) or "control" (the shuffled-target training, at every lag), with r, null, the training's
    seconds. window: one row per (N, threshold): H, H_grid, censored, lag_lo, lag_hi, trainings.
    """
    if arm not in ARMS:
        raise ValueError(f"groundtruth arm {arm!r} must be one of {ARMS}")
    lags = np.asarray(sorted(lags), dtype=int)
    init = init_seed(seed, model)
    data = job_data(seed, task, gt, max(n_train), device)
    kw = dict(model=model, optimizer=optimizer, init=init, steps=steps, coef=gt["coef"], lags=lags,
              thresholds=thresholds, full_grid=arm == "full_grid", device=device, gt=gt,
              train_kw=dict(model_config=model_config, optim_config=optim_config, train_config=train_config),
              name=f"model={model} optimizer={optimizer} seed={seed}")
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
           gt, train_kw, name) -> tuple[list, list]:
    """Score and window rows of one N: the control, then the bisection per threshold (trainings
    cached per lag), or every lag first when ``full_grid``."""
    x = torch.from_numpy(data["x_all"][:N]).to(device)

    def targets(lag):
        return torch.from_numpy(lag_targets(data["y0_all"][:N], data["comp_train"][:N], lag, coef)).to(device)

    def fit(y, label):
        return train(model, optimizer, x, y, init=init, steps=steps, run_name=f"{name} N={N} {label}",
                     **train_kw)[0]

    t0 = time.perf_counter()
    perm = np.random.default_rng([init, N]).permutation(N)
    net = fit(targets(int(lags[0]))[perm], "control")
    r_ctrl, null_ctrl = held_out_scores(net, data, lags, init=init, gt=gt)
    seconds = time.perf_counter() - t0
    score_rows = [dict(N=N, lag=int(lag), target="control", r=r, null=nl, seconds=seconds)
                  for lag, r, nl in zip(lags, r_ctrl, null_ctrl)]
    ctrl = dict(zip(lags.tolist(), r_ctrl))
    cache: dict[int, tuple[float, float]] = {}

    def task_score(lag: int) -> tuple[float, float]:
        if lag not in cache:
            t0 = time.perf_counter()
            net = fit(targets(lag), f"lag={lag}")
            r, nl = held_out_scores(net, data, [lag], init=init, gt=gt)
            cache[lag] = (float(r[0]), float(nl[0]))
            score_rows.append(dict(N=N, lag=lag, target="task", r=cache[lag][0], null=cache[lag][1],
                                   seconds=time.perf_counter() - t0))
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
    y = torch.from_numpy(lag_targets(data["y0_all"], data["comp_train"], lag, gt["coef"])).to(device)
    net, opt = train(model, optimizer, torch.from_numpy(data["x_all"]).to(device), y, init=init, steps=steps,
                     train_config=train_config, run_name=f"model={model} seed={seed} N={N} lag={lag}", **kw)
    check_recorded(held_out_scores(net, data, [lag], init=init, gt=gt)[0][0], recorded, N=N, lag=lag,
                   who=f"model={model} seed={seed}")
    nets["trained"] = checkpoint(net, opt, "trained", meta, float("nan"))
    return nets


def check_recorded(r: float, recorded: pd.DataFrame, *, N: int, lag: int, who: str) -> None:
    """Raise unless a re-trained network's held-out score ``r`` at (N, lag) equals the ``recorded``
    one (a scores table's task row, to float32, as tables store it): not the same network."""
    rec = recorded[(recorded["N"] == N) & (recorded["lag"] == lag) & (recorded["target"] == "task")]
    if len(rec) != 1 or np.float32(r) != np.float32(rec["r"].iloc[0]):
        raise ValueError(f"{who}: the re-trained network (N={N}, lag={lag}) scores r={r:.9g}, the ground truth "
                         f"recorded {rec['r'].tolist()}: not the same network (settings changed?)")


def groundtruth_snapshots(
    nets: Mapping[str, dict], *, task: Mapping, gt: Mapping, snapshot: Mapping, device: str = "cpu",
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(envelope, psi, total) of each network of :func:`groundtruth_networks` (column ``epoch`` =
    its name), taken as the main run's snapshots (docs/method.md §4-5) on the first
    ``task["n_diag"]`` sequences of the diag stream of the networks' seed, with the targets of
    their single-lag task; ``snapshot`` is the config's snapshot section."""
    first = next(iter(nets.values()))  # the networks share their seed and task
    seed, lag = first["seed"], first["task_lag"]
    x, y = make_split(seed, "diag", task["n_diag"], task["T"], task["D"], [lag], [gt["coef"]], task["noise_std"])
    tables = []
    for name, state in nets.items():
        keys = dict(model=state["cell"], optimizer=state["optimizer_name"], seed=seed, epoch=name)
        env, _, psi, total = snapshot_state(
            state, x, y, lags=lag_grid(snapshot), order=snapshot["order"], times_per_lag=snapshot["times_per_lag"],
            directions=snapshot["directions"], batch_size=snapshot["batch_size"],
            keep_directions=snapshot["keep_directions"], keys=keys, device=device,
            transport=snapshot["transport"], exact_sequences=snapshot["exact_sequences"])
        tables.append((env, psi, total))
    return tuple(pd.concat(parts, ignore_index=True) for parts in zip(*tables))
