"""The networks both ground-truth protocols train and rebuild (docs/method.md §10, §10b) on the
synthetic task's single-lag stream (:mod:`learnwin.tasks.synthetic`): a seed's data on the
device, the paired init of a (model, seed), the held-out score of a trained network, the check
that a rebuilt network is the one scored, and the snapshots of the rebuilt networks for the
prediction (:mod:`learnwin.stats.prediction`).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from learnwin.infra.config import lag_grid
from learnwin.models.cells import build_model
from learnwin.models.train import make_optimizer
from learnwin.probing.snapshot import snapshot_state
from learnwin.stats.groundtruth import lag_scores
from learnwin.tasks.synthetic import make_split, stream


def init_seed(seed: int, model: str) -> int:
    """The seed of a (model, seed)'s init, batch order and control permutation."""
    return int(np.random.SeedSequence([seed, zlib.crc32(model.encode())]).generate_state(1)[0])


def job_data(seed: int, task: Mapping, gt: Mapping, n_max: int, device: str = "cpu") -> dict:
    """The single-lag stream of a seed's trainings (:func:`learnwin.tasks.synthetic.stream`, its
    first ``gt["n_test"]`` diag sequences held out), x_test on ``device``."""
    data = stream(seed, task, n_max, gt["n_test"])
    data["x_test"] = torch.from_numpy(data["x_test"]).to(device)
    return data


def initial(model: str, optimizer: str, input_size: int, *, init: int, model_config: Mapping,
            optim_config: Mapping, device: str = "cpu"):
    """(network, optimizer) of a (model, seed) at initialisation (torch seed ``init``)."""
    torch.manual_seed(init)
    net = build_model(model, input_size, **model_config).to(device)
    return net, make_optimizer(optimizer, net.parameters(), optim_config)


PREDICT_BATCH = 256  # held-out sequences per scoring forward


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
