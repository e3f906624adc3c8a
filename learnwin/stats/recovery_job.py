"""The training job of the direct measurement of the learnability window (beyond the paper):
train one model on a single-lag task and score how well it recovers the lagged component.
The statistics over jobs (learned rule, empirical window, comparison) are :mod:`learnwin.stats.recovery`.

Task (docs/method.md §1 with one lag): y_t = c (u . x_{t-l}) 1[t >= l] + eps_t, drawn by
:func:`learnwin.models.data.make_split` with ``lags=[l], coefs=[c]``; a lag l >= T gives an all-noise
target. Training sequences are the first N of the seed's train stream (nested in N); the held-out
set is the first ``n_test`` sequences of the seed's diag stream, never trained on.

Choices:

* **Equal gradient steps.** Every run takes ``steps`` steps of the docs/method.md §3 recipe
  (:func:`learnwin.models.train.train_epoch`: per-epoch seeded reshuffle, full batches of
  ``train.batch_size``, MSE, clip), so the epoch count is steps / (N // batch) and the last epoch
  may be partial. With a fixed batch size equal steps is also equal samples (steps x batch):
  runs differ in how many distinct sequences they see, not in compute. No model selection: the
  model after the last step is measured.
* **Recovery metric.** r = Pearson correlation, pooled over held-out sequences and t >= l, of the
  prediction y_hat_t with the lagged component s_t = u . x_{t-l} (NaN when l >= T: there is no
  such component). r is 1 for a model that outputs c s_t plus anything uncorrelated with s_t.
* **Noise floor.** null = the ``null_quantile`` quantile of r with the predictions paired with
  the lagged component of other held-out sequences (``n_perm`` seeded permutations): what r
  reaches by chance for this prediction's temporal structure.
* **Shuffled-target control.** At the N of ``control_n_train`` the job also trains the same
  model (same init, same steps) on training targets permuted across sequences, which keeps the
  targets' distribution and destroys the x -> y relation. Its recovery measures how well a
  model that learned nothing about u aligns with the lagged component by chance (this is not
  sampling noise: with small D a random readout correlates strongly with u . x_{t-l}, of
  either sign); r_ctrl = the largest |control recovery| of the same (model, optimizer, seed, lag).

Seeding: data from the run seed (as in docs/method.md §1); model init, batch order and the control's
permutation from (seed, lag, n_train) via :func:`run_seed`. Same config -> same numbers on CPU.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from learnwin.models.cells import build_model
from learnwin.models.data import make_split, targets, task_vector
from learnwin.models.train import make_optimizer, train_epoch


def run_seed(seed: int, lag: int, n_train: int) -> int:
    """The seed of one recovery job, derived from (seed, lag, n_train)."""
    return int(np.random.SeedSequence([seed, lag, n_train]).generate_state(1)[0])


def lagged_component(x: np.ndarray, u: np.ndarray, lag: int) -> np.ndarray:
    """s_t = u . x_{t-l} on t >= l, shape (n, T - l) (empty when l >= T)."""
    return targets(x, u, [lag], [1.0])[:, lag:]


def recovery_score(pred: np.ndarray, comp: np.ndarray) -> float:
    """Pooled Pearson correlation of predictions and lagged component (NaN when empty/constant)."""
    p, s = np.ravel(pred).astype(float), np.ravel(comp).astype(float)
    if p.size < 2 or p.std() == 0 or s.std() == 0:
        return float("nan")
    return float(np.corrcoef(p, s)[0, 1])


def permutation_null(pred: np.ndarray, comp: np.ndarray, *, n_perm: int, quantile: float,
                     seed: int) -> float:
    """Quantile of the recovery score with predictions paired with other sequences' components."""
    if comp.size == 0:
        return float("nan")
    rng = np.random.default_rng([seed, 7])
    scores = [recovery_score(pred[rng.permutation(len(pred))], comp) for _ in range(n_perm)]
    return float(np.nanquantile(scores, quantile))


@torch.no_grad()
def predict(net, x: torch.Tensor, batch: int) -> np.ndarray:
    """Model outputs (n, T) in batches."""
    net.eval()
    return torch.cat([net(x[i:i + batch]) for i in range(0, len(x), batch)]).cpu().numpy()


def fit(net, opt, x: torch.Tensor, y: torch.Tensor, *, steps: int, seed: int, batch_size: int,
        grad_clip: float, run_name: str, lr_key: str) -> int:
    """Exactly ``steps`` gradient steps of the docs/method.md §3 recipe; returns the epochs begun."""
    done, epoch = 0, 0
    while done < steps:
        epoch += 1
        done += train_epoch(net, opt, x, y, seed=seed, epoch=epoch, batch_size=batch_size,
                            grad_clip=grad_clip, run_name=run_name, lr_key=lr_key,
                            max_steps=steps - done)
    return epoch


def recovery_run(
    *, model: str, optimizer: str, seed: int, lag: int, n_train: int, control: bool,
    task: Mapping, model_config: Mapping, optim_config: Mapping, train_config: Mapping,
    recovery: Mapping, device: str = "cpu",
) -> pd.DataFrame:
    """Train one (model, optimizer, seed, lag, n_train) job and measure its recovery.

    One row (``target = "true"``), plus the shuffled-target control row when ``control``.
    """
    T, D, noise = task["T"], task["D"], task["noise_std"]
    bs, clip, steps = train_config["batch_size"], train_config["grad_clip"], recovery["steps"]
    rs = run_seed(seed, lag, n_train)
    x, y = make_split(seed, "train", n_train, T, D, [lag], [recovery["coef"]], noise)
    x_test, _ = make_split(seed, "diag", recovery["n_test"], T, D, [lag], [recovery["coef"]], noise)
    comp = lagged_component(x_test, task_vector(seed, D), lag)
    x_t, x_test_t = torch.from_numpy(x).to(device), torch.from_numpy(x_test).to(device)
    variants = {"true": y}
    if control:
        variants["shuffled"] = y[np.random.default_rng([rs, 1]).permutation(n_train)]
    rows = []
    for target, y_train in variants.items():
        t0 = time.perf_counter()
        torch.manual_seed(rs)
        net = build_model(model, D, **model_config).to(device)
        opt = make_optimizer(optimizer, net.parameters(), optim_config)
        run_name = (f"model={model} optimizer={optimizer} seed={seed} lag={lag} "
                    f"n_train={n_train} target={target}")
        epochs = fit(net, opt, x_t, torch.from_numpy(y_train).to(device), steps=steps, seed=rs,
                     batch_size=bs, grad_clip=clip, run_name=run_name,
                     lr_key=f"optim.{optimizer}.lr")
        pred = predict(net, x_test_t, bs)[:, lag:]
        rows.append(dict(
            model=model, optimizer=optimizer, seed=seed, lag=lag, n_train=n_train, target=target,
            steps=steps, epochs=epochs, recovery=recovery_score(pred, comp),
            null=permutation_null(pred, comp, n_perm=recovery["n_perm"],
                                  quantile=recovery["null_quantile"], seed=rs),
            seconds=time.perf_counter() - t0,
        ))
    return pd.DataFrame(rows).astype({"seed": "int64", "lag": "int64", "n_train": "int64",
                                      "steps": "int64", "epochs": "int64"})
