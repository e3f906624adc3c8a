"""Direct measurement of the learnability window, held against the prediction (beyond the paper).

Task (docs/method.md §1 with one lag): y_t = c (u . x_{t-l}) 1[t >= l] + eps_t, drawn by
:func:`learnwin.data.make_split` with ``lags=[l], coefs=[c]``; a lag l >= T gives an all-noise
target. Training sequences are the first N of the seed's train stream (nested in N); the held-out
set is the first ``n_test`` sequences of the seed's diag stream, never trained on.

Choices:

* **Equal gradient steps.** Every run takes ``steps`` steps of the docs/method.md §3 recipe
  (:func:`learnwin.train.train_epoch`: per-epoch seeded reshuffle, full batches of
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
* **Learned rule.** l is learned with N when r > threshold and r > r_ctrl + null.
* **Empirical window.** H_N_emp(N) = the largest learned lag of the grid (0 when none), per
  (model, optimizer, seed); over seeds: mean, std (ddof = 1), median, min, max. H_N_emp is
  non-decreasing "within noise" when every drop of the seed mean between consecutive N is at
  most the larger seed std of the two points.
* **Comparison.** Per snapshot epoch, against H_N of the snapshot statistics (column ``mean`` of
  H_N_agg, docs/method.md §7) and the decay-class prediction (``predicted``, docs/method.md §8) at N = n_train:
  Spearman rank correlation over all (model, N) points with finite values, and whether the
  model ordering (models ranked by their window averaged over N) is the same.

Seeding: data from the run seed (as in docs/method.md §1); model init, batch order and the control's
permutation from (seed, lag, n_train) via :func:`run_seed`. Same config -> same numbers on CPU.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from scipy import stats

from learnwin.cells import build_model
from learnwin.data import make_split, targets, task_vector
from learnwin.train import make_optimizer, train_epoch

KEYS = ["model", "optimizer", "seed", "lag"]
SOURCES = {"snapshot": "mean", "decay": "predicted"}  # prediction -> column of H_N_agg


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


def learned(rows: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """The true-target rows with r_ctrl and ``learned`` = r > threshold and r > r_ctrl + null.

    r_ctrl is the largest |control recovery| of the same (model, optimizer, seed, lag); a lag
    without any control row is an error.
    """
    true = rows[rows["target"] == "true"].drop(columns="target")
    ctrl = (rows[rows["target"] == "shuffled"].assign(recovery=lambda d: d["recovery"].abs())
            .groupby(KEYS)["recovery"].max()
            .rename("r_ctrl").reset_index())
    out = true.merge(ctrl, on=KEYS, how="left")
    missing = out.loc[out["r_ctrl"].isna() & (out["null"].notna()), KEYS].drop_duplicates()
    if len(missing):
        raise ValueError(f"no shuffled-target control for {missing.to_dict('records')}")
    out["learned"] = (out["recovery"] > threshold) & (out["recovery"] > out["r_ctrl"] + out["null"])
    return out.sort_values([*KEYS, "n_train"], ignore_index=True)


def empirical_window(table: pd.DataFrame) -> pd.DataFrame:
    """H_N_emp per (model, optimizer, seed, N): the largest learned lag (0 when none)."""
    lag = table["lag"].where(table["learned"], 0)
    out = (table.assign(lag_learned=lag).groupby(["model", "optimizer", "seed", "n_train"])
           ["lag_learned"].max().rename("H_N_emp").reset_index())
    return out.rename(columns={"n_train": "N"}).astype({"H_N_emp": "int64"})


def aggregate_window(window: pd.DataFrame) -> pd.DataFrame:
    """Seed statistics of H_N_emp per (model, optimizer, N) and the ``monotone`` flag."""
    g = window.groupby(["model", "optimizer", "N"])["H_N_emp"]
    agg = g.agg(n_seeds="count", emp_mean="mean", emp_std="std", emp_median="median",
                emp_min="min", emp_max="max").reset_index()
    flags = {key: nondecreasing_within_noise(b.sort_values("N")["emp_mean"], b.sort_values("N")["emp_std"])
             for key, b in agg.groupby(["model", "optimizer"])}
    agg["monotone"] = [flags[key] for key in zip(agg["model"], agg["optimizer"])]
    return agg.astype({"n_seeds": "int64"})


def nondecreasing_within_noise(mean: Sequence[float], std: Sequence[float]) -> bool:
    """Every drop of the seed mean between consecutive N is <= the larger std of the two."""
    m = np.asarray(mean, dtype=float)
    s = np.nan_to_num(np.asarray(std, dtype=float))
    return bool(np.all(m[:-1] - m[1:] <= np.maximum(s[:-1], s[1:])))


def compare(agg: pd.DataFrame, h_n_agg: pd.DataFrame) -> pd.DataFrame:
    """Empirical window next to the predicted ones per (model, optimizer, epoch, noise, N); the
    noise definition (docs/method.md §7b) is carried when ``h_n_agg`` has one."""
    noise = ["noise"] if "noise" in h_n_agg else []
    pred = h_n_agg[["model", "optimizer", "epoch", *noise, "N", "mean", "predicted", "law"]].rename(
        columns={"mean": "H_N_snapshot", "predicted": "H_N_decay"})
    out = agg.merge(pred, on=["model", "optimizer", "N"], how="left")
    return out.sort_values(["optimizer", "epoch", *noise, "model", "N"], ignore_index=True)


def agreement(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per (optimizer, epoch[, noise], source): Spearman of empirical vs predicted over (model, N), and
    whether models rank the same by their window averaged over N."""
    rows = []
    noise = ["noise"] if "noise" in comparison else []
    for key, block in comparison.dropna(subset=["epoch"]).groupby(["optimizer", "epoch", *noise]):
        opt, epoch = key[:2]
        extra = dict(noise=key[2]) if noise else {}
        for source, col in (("snapshot", "H_N_snapshot"), ("decay", "H_N_decay")):
            ok = block[np.isfinite(block[col]) & np.isfinite(block["emp_mean"])]
            rho, p = spearman(ok["emp_mean"], ok[col])
            means = ok.groupby("model")[["emp_mean", col]].mean()
            emp_rank = means["emp_mean"].rank(method="average")
            pred_rank = means[col].rank(method="average")
            rows.append(dict(
                optimizer=opt, epoch=epoch, **extra, source=source, n_points=len(ok), spearman=rho,
                p_value=p, order_empirical=model_order(means["emp_mean"]), order_predicted=model_order(means[col]),
                order_agrees=bool(len(means) > 1 and emp_rank.equals(pred_rank)),
            ))
    return pd.DataFrame(rows).astype({"n_points": "int64"})


def spearman(a, b) -> tuple[float, float]:
    """Spearman's rho and its p-value (NaN with fewer than 3 points or a constant side)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan"), float("nan")
    res = stats.spearmanr(a, b)
    return float(res.statistic), float(res.pvalue)


def model_order(values: pd.Series) -> str:
    """Models from the largest to the smallest window, '=' between ties: 'gru>lstm=diag'."""
    out = ""
    for i, (name, v) in enumerate(values.sort_values(ascending=False, kind="stable").items()):
        out += "" if i == 0 else ("=" if np.isclose(v, prev) else ">")
        out += str(name)
        prev = v
    return out
