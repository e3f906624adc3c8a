"""What a cell's ``trace`` returns to the probe: its per-step diagonal Jacobian terms (docs/method.md §4)."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor


@dataclass
class Trace:
    """Per-step internals of one pass (docs/method.md §4).

    ``hidden`` and ``candidate`` are (B, T, H); ``transported``, ``leak``, ``correction`` and
    ``receive`` are (B, T, P) with P = H for the gated cells, or H M (complex for the LRU) for
    the diagonal linear cells of docs/method.md §2b.
    """

    hidden: Tensor  # h_t
    transported: Tensor  # h_t, or c_t for the LSTM
    leak: Tensor  # lambda_t
    correction: Tensor  # r_t
    receive: Tensor  # factor at the receiving end of Gamma0 (e_t for the LSTM, else 1)
    candidate: Tensor  # candidate g~_t (post-tanh); the input term b_t of a diagonal linear cell
    inputs: Tensor | None = None  # pre-synaptic vector of the rate-carrying weights; None: h_{t-1}

    @property
    def presynaptic(self) -> Tensor:
        """What the rate-carrying weights act on at step t: ``inputs`` (x_t), or h_{t-1} (zeros at t = 0)."""
        if self.inputs is not None:
            return self.inputs
        return F.pad(self.hidden, (0, 0, 1, 0))[:, :-1]
