"""Memory curve m_mem(l) = mean over sequences and receiving times of u . d y_hat_t / d x_{t-l}.

An independent check of both transports (docs/method.md §4b): it uses only the model's forward pass and
autograd, no trace, no Gamma, no adjoint sweep. For a batch, one backward pass per receiving
time t, all batched (``is_grads_batched``), gives d y_hat_t / d x_k for every (t, k); its
projection on the task vector u is gathered at k = t - l for the lag grid. Choice (docs/method.md
silent): every receiving time t = l..T-1 enters the mean (no subsampling), over the first
``snapshot.memory_sequences`` diag sequences (the batched backward costs about 20 ms per sequence
at the default size on one core); the mean of |.| over the same (sequence, t) pairs is also kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from learnwin.infra import io
from learnwin.infra.resources import DEVICE_MEMORY_CURVE_BYTES, MEMORY_CURVE_BYTES, memory_curve_bytes
from learnwin.models.cells import GatedRNN, checkpoint_model
from learnwin.probing.envelope import receiving_times


def input_sensitivity(model: GatedRNN, x: Tensor, u: Tensor) -> Tensor:
    """G[b, t, k] = u . d y_hat[b, t] / d x[b, k], shape (B, T, T) (zero for k > t).

    ``model`` is a :class:`learnwin.models.cells.GatedRNN` run on its step-by-step path: the batched
    backward here runs under vmap, which cannot batch the out= writes of the training fast path.
    The receiving times go through that backward in chunks of :func:`curve_chunk` of them.
    """
    B, T, _ = x.shape
    chunk = curve_chunk(B, T, model.cell.hidden_size, x.device)
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        y_hat = model(xg, reference=True)  # (B, T)
        probes = torch.eye(T, dtype=y_hat.dtype, device=x.device)[:, None, :].expand(T, B, T)
        G = torch.cat([torch.autograd.grad(y_hat, xg, probes[t:t + chunk], retain_graph=t + chunk < T,
                                           is_grads_batched=True)[0] @ u for t in range(0, T, chunk)])
    return G.transpose(0, 1)  # each chunk's (t, B, T_k, D) gradients projected on u as they come


def curve_chunk(B: int, T: int, hidden: int, device: torch.device | str) -> int:
    """Receiving times per batched backward of :func:`input_sensitivity`: as many as keep its work
    arrays (:func:`learnwin.infra.resources.memory_curve_bytes`) within the budget of ``device``,
    :data:`learnwin.infra.resources.MEMORY_CURVE_BYTES` on the CPU (four chunks at the default
    size), :data:`learnwin.infra.resources.DEVICE_MEMORY_CURVE_BYTES` on an accelerator; at least one."""
    budget = MEMORY_CURVE_BYTES if torch.device(device).type == "cpu" else DEVICE_MEMORY_CURVE_BYTES
    return max(1, min(T, budget // memory_curve_bytes(B, T, hidden, 1)))


class MemoryAccumulator:
    """Per-lag sums of u . d y_hat_t / d x_{t-l} and of its absolute value over (sequence, t)."""

    def __init__(self, lags: Sequence[int], T: int, device: torch.device | str = "cpu"):
        self.lags = np.asarray(lags, dtype=np.int64)
        self.t, self.k, self.mask = receiving_times(torch.as_tensor(self.lags, device=device), T)  # on G's device
        self.sum = np.zeros(len(self.lags))
        self.abs = np.zeros(len(self.lags))
        self.count = np.zeros(len(self.lags))

    def add(self, G: Tensor) -> None:
        vals = G[:, self.t, self.k].double() * self.mask  # (B, L, T)
        self.sum += vals.sum((0, 2)).cpu().numpy()
        self.abs += vals.abs().sum((0, 2)).cpu().numpy()
        self.count += G.shape[0] * self.mask.sum(1).cpu().numpy()

    def table(self) -> pd.DataFrame:
        n = np.maximum(self.count, 1)
        return pd.DataFrame({"lag": self.lags, "m_mem": self.sum / n, "m_mem_abs": self.abs / n})


def memory_checkpoint(*, checkpoint: str | Path, data_dir: str | Path, u: Sequence[float],
                      lags: Sequence[int], batch_size: int, sequences: int, keys: dict,
                      device: str = "cpu") -> pd.DataFrame:
    """The memory table (run keys, lag, m_mem, m_mem_abs) of one checkpoint on the diag split."""
    state = io.load_checkpoint(checkpoint, map_location=device)
    x_all = io.load_split(data_dir, "diag")[0][:sequences]
    acc = MemoryAccumulator(lags, x_all.shape[1], device)
    if state.get("diverged"):
        table = acc.table().assign(m_mem=np.nan, m_mem_abs=np.nan)
    else:
        model = checkpoint_model(state, device)
        u_t = torch.as_tensor(np.asarray(u, dtype=np.float32), device=device)
        for i in range(0, x_all.shape[0], batch_size):
            x = torch.from_numpy(np.array(x_all[i:i + batch_size])).to(device)
            acc.add(input_sensitivity(model, x, u_t))
        table = acc.table()
    for col, value in reversed(list(keys.items())):
        table.insert(0, col, value)
    return table
