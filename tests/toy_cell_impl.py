"""The class of the tests' user cell (docs/method.md §2a), registered by tests/toy_cell.py under
its import path ``toy_cell_impl:Toy``: only the jobs that build networks import this module.

Toy: h_t = a h_{t-1} + (1 - a) tanh(W_x x_t + b_x + W_h h_{t-1}), a fixed leak per unit
a_q = linspace(0.5, 0.9, H), no LayerNorm. Its one-step Jacobian diagonal is
a + (1 - a) (1 - g_t^2) diag(W_h), exactly the trace's leak + correction. No ``fast_forward``: it
trains through the inherited step-by-step autograd scan.
"""

import torch

from learnwin.models.cells import GatedCell, StepOut


class Toy(GatedCell):
    def __init__(self, input_size, hidden_size, layer_norm=True, **_):
        super().__init__(input_size, hidden_size, layer_norm=False)
        self.register_buffer("a", torch.linspace(0.5, 0.9, hidden_size))
        self.W_x = torch.nn.Parameter(torch.randn(hidden_size, input_size) / input_size**0.5)
        self.b_x = torch.nn.Parameter(torch.zeros(hidden_size))
        self.W_h = torch.nn.Parameter(torch.randn(hidden_size, hidden_size) / hidden_size)

    def input_weights(self):
        return [self.W_x]

    def input_biases(self):
        return [self.b_x]

    def recurrent(self):
        return self.W_h

    def recurrent_weights(self):
        return ["W_h"]

    def step(self, xp, hp, state, trace):
        g = torch.tanh(xp + hp)
        h = self.a * state[0] + (1 - self.a) * g
        if not trace:
            return StepOut((h,), h, h)
        leak = self.a.expand_as(h)
        return StepOut((h,), h, h, leak, (1 - self.a) * (1 - g * g) * torch.diagonal(self.W_h),
                       torch.ones_like(h), g)
