"""The networks both ground-truth protocols train and rebuild (docs/method.md §10, §10b) on the
single-lag stream of the config's task (``task.kind`` through the task table): a seed's data on the
device and a lag's targets, the network a protocol trains (:class:`Network`: a registered cell or any module,
:mod:`learnwin.recovery.plain`), the paired init of a (model, seed), the held-out score of a
trained network, the check that a rebuilt network is the one scored, and the snapshots of the
rebuilt networks for the prediction (:mod:`learnwin.stats.prediction`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch import nn

from learnwin.infra.config import lag_grid
from learnwin.infra.resources import EVAL_BATCH
from learnwin.infra.tasks import spec_of
from learnwin.models.cells import build_model
from learnwin.models.train import make_optimizer
from learnwin.probing.snapshot import snapshot_state
from learnwin.stats.groundtruth import lag_scores
from learnwin.tasks.synthetic import components, lag_targets


def init_seed(seed: int, model: str) -> int:
    """The seed of a (model, seed)'s init, batch order and control permutation."""
    return int(np.random.SeedSequence([seed, zlib.crc32(model.encode())]).generate_state(1)[0])


def job_data(seed: int, task: Mapping, gt: Mapping, n_max: int, device: str = "cpu") -> dict:
    """The single-lag stream of a seed's trainings on the task ``task.kind`` (through the task
    table, :mod:`learnwin.infra.tasks`; docs/method.md §10): the first ``n_max`` train sequences
    with the task's noise-only targets (x_all, y0_all: its draw with no lag) and their components
    u . x_t along the seed's direction (comp_train), and the first ``gt["n_test"]`` diag sequences
    (x_test on ``device``, comp_test). :func:`lag_task` gives a lag's targets."""
    spec = spec_of(task)
    draw, u = spec.load("draw"), spec.load("direction")(seed, task)
    none = {**task, "lags": [], "coefs": []}
    x_all, y0_all = draw(seed, none, "train", n_max)
    x_test, _ = draw(seed, none, "diag", gt["n_test"])
    return dict(x_all=x_all, y0_all=y0_all, comp_train=components(x_all, u), comp_test=components(x_test, u),
                x_test=torch.from_numpy(x_test).to(device))


def lag_task(seed: int, task: Mapping, data: Mapping, lag: int, coef: float, n: int | None = None) -> np.ndarray:
    """Targets (n, T) of the single-lag task at ``lag`` with coefficient ``coef`` on the first ``n``
    (None: all) train sequences of ``data`` (:func:`job_data` of ``seed`` and ``task``): the task's
    draw with that one lag; the synthetic task's from the stream's noise and components, without
    drawing again (the same values bit for bit, tests/test_recovery_task.py)."""
    n = len(data["x_all"]) if n is None else n
    if task.get("kind", "synthetic") == "synthetic":
        return lag_targets(data["y0_all"][:n], data["comp_train"][:n], lag, coef)
    return spec_of(task).load("draw")(seed, {**task, "lags": [lag], "coefs": [coef]}, "train", n)[1]


@dataclass(frozen=True)
class Network:
    """What a ground-truth protocol trains (docs/method.md §10b): ``name``, the model's (its init
    seed's, :func:`init_seed`, and its runs'), and ``make(input_size)``, a fresh module mapping
    inputs (B, T, D) to predictions (B, T), built under the init's torch seed."""

    name: str
    make: Callable[[int], nn.Module]


def registered(model: str, model_config: Mapping) -> Network:
    """The registered cell ``model`` with its readout under the ``model`` section (:func:`build_model`)."""
    return Network(model, partial(build_model, model, **model_config))


def initial(model: str, optimizer: str, input_size: int, *, init: int, model_config: Mapping,
            optim_config: Mapping, device: str = "cpu"):
    """(network, optimizer) of a (model, seed) at initialisation (torch seed ``init``)."""
    return init_network(registered(model, model_config), optimizer, input_size, init=init,
                        optim_config=optim_config, device=device)


def init_network(network: Network, optimizer: str, input_size: int, *, init: int, optim_config: Mapping,
                 device: str = "cpu"):
    """(module, optimizer) of ``network`` at initialisation (torch seed ``init``)."""
    torch.manual_seed(init)
    net = network.make(input_size).to(device)
    return net, make_optimizer(optimizer, net.parameters(), optim_config)


PREDICT_BATCH = EVAL_BATCH  # held-out sequences per scoring forward


@torch.no_grad()
def predict(net, x: torch.Tensor, batch: int) -> np.ndarray:
    """Model outputs (n, T) in batches."""
    net.eval()
    return torch.cat([net(x[i:i + batch]) for i in range(0, len(x), batch)]).cpu().numpy()


def held_out_scores(net, data: Mapping, lags, *, init: int, gt: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """(r, null) of a trained network on ``data``'s held-out sequences at ``lags``
    (:func:`learnwin.stats.groundtruth.lag_scores`)."""
    return scores_of(predict(net, data["x_test"], PREDICT_BATCH), data, lags, init=init, gt=gt)


def scores_of(pred: np.ndarray, data: Mapping, lags, *, init: int, gt: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """(r, null) at ``lags`` of a network's predictions ``pred`` (n, T) on ``data``'s held-out sequences."""
    return lag_scores(pred, data["comp_test"], lags, seed=init, n_perm=gt["n_perm"], quantile=gt["null_quantile"])


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
    x, y = spec_of(task).load("draw")(seed, {**task, "lags": [lag], "coefs": [gt["coef"]]}, "diag", task["n_diag"])
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
