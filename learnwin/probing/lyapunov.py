"""Time scales of the exact transport: the Lyapunov spectrum of the Jacobian product (docs/method.md §4c).

The exact transport M_{t,l} = J_t J_{t-1} ... J_{t-l+1} (docs/method.md §4b) is a product of the
one-step Jacobians J_k = d z_k / d z_{k-1} of the full state z (h, or (h, c) for the LSTM). Its
modes, not its units, carry the time scales. Along each sequence the product's Lyapunov
exponents come from repeated QR (Benettin; Shimada and Nagashima):

    Q_0 = I;   J_k Q_{k-1} = Q_k R_k  (k = 1..T-1);   lambda_q = mean over k of log |R_k[q, q]|,

and tau_q = -1 / lambda_q (inf when lambda_q >= 0). For a diagonal J_k every Q_k is I and
lambda_q is the unit's mean log-leak, the per-unit time scale of the paper's diagonal transport.

Choices (docs/method.md §4c):
* Steps k = 1..T-1: the Jacobians that appear in the transport products of a sequence (J_0 maps
  the fixed initial state z_{-1} = 0). No transient is discarded: with T = 64 there is no room,
  and the exponents are then exactly the finite-time ones of the whole product M_{T-1,T-1}
  (the product of the R_k is its R factor).
* Per sequence the exponents are sorted (largest first), then averaged rank by rank over the
  first ``snapshot.exact_sequences`` diag sequences; tau_q from the averaged lambda_q.
* The table keeps every mode (S H of them: 2H for the LSTM); ``leading`` marks the H slowest,
  the ones claim (c) compares with the H per-unit tau_q of the diagonal transport (for the LSTM
  the other H are the fast modes the output h adds on top of the cell state c).
* A stack's state is taken layers top to bottom (docs/method.md §2c): its J is then block
  upper-triangular, so the QR resolves each layer's modes and the convolution windows' nilpotent
  shift lands exactly at the floor; bottom to top, the lower windows' columns picked up the upper
  layers' dynamics at T = 64 (tests/test_stack.py).
* The one-step Jacobians are those of :func:`learnwin.probing.exact_transport.dense_jacobians`
  (closed form per cell, model dtype), filled in one step at a time; the QR and the log sums are in
  float64. The loop over time steps is the only loop: the QR is batched over sequences, in batches
  whose stored Jacobians fit :data:`learnwin.infra.config.EXACT_JACOBIAN_BYTES`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from learnwin.infra import io
from learnwin.infra.config import EXACT_JACOBIAN_BYTES
from learnwin.models.cells import checkpoint_model
from learnwin.probing.exact_transport import dense_jacobians

_TINY = 1e-300


def qr_exponents(jacobians: Iterable[Tensor]) -> Tensor:
    """Lyapunov exponents (B, n), float64, of the products of ``jacobians`` (each (B, n, n), in
    step order: the first one acts first), in the order of the QR columns (docs/method.md §4c)."""
    Q = total = None
    steps = 0
    for J in jacobians:
        J = J.double()
        if Q is None:
            B, n, _ = J.shape
            Q = torch.eye(n, dtype=J.dtype, device=J.device).expand(B, n, n)
            total = torch.zeros(B, n, dtype=J.dtype, device=J.device)
        Q, R = torch.linalg.qr(torch.bmm(J, Q))
        total += torch.log(torch.diagonal(R, dim1=-2, dim2=-1).abs().clamp_min(_TINY))
        steps += 1
    if not steps:
        raise ValueError("qr_exponents: no Jacobians (a sequence needs T >= 2 steps)")
    return total / steps


def sequence_spectrum(cell: torch.nn.Module, x: Tensor) -> Tensor:
    """Per-sequence Lyapunov exponents (B, S H), float64, largest first, of sequences x (B, T, D)
    (docs/method.md §4c): the QR sweep over their exact one-step Jacobians J_k, k = 1..T-1."""
    with torch.no_grad():
        J = dense_jacobians(cell, x, cell.full_state(*cell(x)))  # J_k (B, S H, S H) by step
        # a stack's layers top to bottom: J block upper-triangular (docs/method.md §2c)
        order = cell.top_down()
        if order is not None:
            order = order.to(x.device)
        steps = (J.step(k) if order is None else J.step(k)[:, order][:, :, order] for k in range(1, x.shape[1]))
        return qr_exponents(steps).sort(-1, descending=True).values


def spectrum_table(lam: np.ndarray, hidden: int) -> pd.DataFrame:
    """Rows (mode, lambda, tau, leading) from the rank-wise mean exponents ``lam`` (S H,)."""
    lam = np.asarray(lam, dtype=float)
    with np.errstate(divide="ignore"):
        tau = np.where(lam < 0, -1.0 / lam, np.where(np.isnan(lam), np.nan, np.inf))
    modes = np.arange(lam.size, dtype=np.int64)
    return pd.DataFrame({"mode": modes, "lambda": lam, "tau": tau, "leading": modes < hidden})


def lyapunov_checkpoint(*, checkpoint: str | Path, data_dir: str | Path, sequences: int, batch_size: int,
                        keys: dict, device: str = "cpu") -> pd.DataFrame:
    """The lyapunov table (run keys, mode, lambda, tau, leading) of one checkpoint, over the
    first ``sequences`` diag sequences (docs/method.md §4c), at most ``batch_size`` at a time and
    fewer where their Jacobians would exceed :data:`EXACT_JACOBIAN_BYTES` (S6 in the Mamba block);
    NaN values for a diverged run."""
    state = io.load_checkpoint(checkpoint, map_location=device)
    model = checkpoint_model(state, device)
    H = model.cell.hidden_size
    n = model.cell.state_width
    if state.get("diverged"):
        table = spectrum_table(np.full(n, np.nan), H)
    else:
        x_all = io.load_split(data_dir, "diag")[0][:sequences]
        total = torch.zeros(n, dtype=torch.float64)
        copied = sum(length for *_, length in model.cell.copied())
        per_sequence = x_all.shape[1] * (n - copied) * n * 4  # its stored float32 Jacobian rows
        batch_size = min(batch_size, max(1, EXACT_JACOBIAN_BYTES // per_sequence))
        for i in range(0, x_all.shape[0], batch_size):
            x = torch.from_numpy(np.array(x_all[i:i + batch_size])).to(device)
            total += sequence_spectrum(model.cell, x).sum(0).cpu()
        table = spectrum_table((total / x_all.shape[0]).numpy(), H)
    for col, value in reversed(list(keys.items())):
        table.insert(0, col, value)
    return table
