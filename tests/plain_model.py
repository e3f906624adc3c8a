"""A model of your own that is any nn.Module, named by import path in ``recovery.modules``
(docs/method.md §10b, "Any model"): torch's GRU, whose features get measure_window's readout."""

from torch import nn


def make(input_size: int) -> nn.Module:
    return nn.GRU(input_size, 6, batch_first=True)
