"""The synthetic multi-lag delayed regression task, ``task.kind: synthetic`` (docs/method.md §1),
and its single-lag stream, on which both ground-truth protocols train (§10, §10b).

y_t = sum_k c_k (u . x_{t-l_k}) 1[t >= l_k] + eps_t with x_t ~ N(0, I_D) and a unit vector u
drawn once per seed. Each split (train, val, diag) has its own seeded stream derived from
(seed, split), and each sequence is drawn whole (inputs and noise together), so the first n
sequences of a split are the same whatever its size: changing n_train changes neither val nor
diag, nor the first sequences of train.

Single-lag stream (docs/method.md §1 with one lag, §10b): y_t = c (u . x_{t-l}) 1[t >= l] + eps_t
(:func:`lag_targets`, from the noise and the components u . x_t). Training sets are prefixes of the
seed's train stream; the scores are taken on the first ``n_test`` sequences of the diag stream,
never trained on (:func:`learnwin.recovery.task.job_data`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

_STREAM = {"u": 0, "train": 1, "val": 2, "diag": 3}


def task_vector(seed: int, D: int) -> np.ndarray:
    """The unit vector u of a seed (docs/method.md §1), shared by all splits."""
    u = np.random.default_rng([seed, _STREAM["u"]]).standard_normal(D)
    return (u / np.linalg.norm(u)).astype(np.float32)


def components(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """u . x_t (N, T) for x (N, T, D), one exactly rounded product and sum at a time in the order
    d = 0..D-1: the same bits on every CPU, for any memory layout and any number of sequences. (A
    BLAS dot product rounds by the kernel that the CPU, the array's strides and its size select, and
    the targets of one sequence must not depend on how many were drawn with it; docs/method.md §1.)"""
    proj = x[..., 0] * u[0]
    for d in range(1, x.shape[-1]):  # the input dimension D
        proj = proj + x[..., d] * u[d]
    return proj


def targets(x: np.ndarray, u: np.ndarray, lags: Sequence[int], coefs: Sequence[float]) -> np.ndarray:
    """Noise-free targets sum_k c_k (u . x_{t-l_k}) 1[t >= l_k] for x of shape (N, T, D)."""
    proj = components(x, u)  # (N, T)
    y = np.zeros_like(proj)
    for lag, coef in zip(lags, coefs):  # a handful of task lags, not the diagnostic lag grid
        y[:, lag:] += coef * proj[:, :-lag]
    return y


#: A network learns the task when the val R^2 of its best-validation epoch is at least this
#: (docs/method.md §3, "Learns the task"): half the target's variance, more than any one task lag
#: carries on every task of config/ (:func:`variance_shares`), so a network must use two lags or more.
LEARNS_R2 = 0.5


def variance_shares(task) -> np.ndarray:
    """Each task lag's expected share of the target's variance pooled over sequences and steps (the
    variance of val R^2, learnwin.models.train.r2_score): c_k^2 (T - l_k) / T over the sum of these
    and noise_std^2. The largest is about the most val R^2 a network that uses one task lag can
    reach (docs/method.md §3, "Learns the task")."""
    T, c, lags = task["T"], np.asarray(task["coefs"], float), np.asarray(task["lags"], float)
    part = c ** 2 * (T - lags) / T
    return part / (part.sum() + task["noise_std"] ** 2)


#: Bytes of one block of :func:`make_split`'s float64 draw (128 MiB): a split is drawn a block of
#: sequences at a time, so it holds the float32 split plus one block, not the whole draw in float64.
DRAW_BYTES = 2**27


def make_split(
    seed: int, split: str, n: int, T: int, D: int, lags, coefs, noise_std: float
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs (n, T, D) and targets (n, T), float32, for one split of one seed. The (n, T, D + 1)
    standard normal draw (inputs, noise) is taken a block of sequences at a time (:data:`DRAW_BYTES`):
    the generator fills in order, so the blocks hold one whole draw's values, and the targets of a
    sequence depend on it alone (:func:`components`): the same bits as one draw (tests/test_data.py)."""
    rng = np.random.default_rng([seed, _STREAM[split]])
    u = task_vector(seed, D)
    x, y = np.empty((n, T, D), np.float32), np.empty((n, T), np.float32)
    block = max(1, DRAW_BYTES // (T * (D + 1) * 8))
    for start in range(0, n, block):  # blocks of sequences
        draw = rng.standard_normal((min(block, n - start), T, D + 1)).astype(np.float32)
        x[start:start + len(draw)] = draw[..., :D]
        y[start:start + len(draw)] = targets(draw[..., :D], u, lags, coefs) + noise_std * draw[..., D]
    return x, y


def draw(seed: int, task: Mapping, split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` sequences of a split under the ``task`` section (the task table's ``draw``)."""
    return make_split(seed, split, n, task["T"], task["D"], task["lags"], task["coefs"], task["noise_std"])


def direction(seed: int, task: Mapping) -> np.ndarray:
    """The seed's unit vector u (the task table's ``direction``)."""
    return task_vector(seed, task["D"])


def lag_targets(y0: np.ndarray, comp: np.ndarray, lag: int, coef: float) -> np.ndarray:
    """Targets of the single-lag task: noise ``y0`` (n, T) plus c u . x_{t-l} for t >= l, from the
    components ``comp`` (n, T) = u . x_t."""
    y = y0.copy()
    y[:, lag:] += coef * comp[:, :-lag]
    return y
