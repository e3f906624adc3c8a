"""A new cell family at built-in speed from one module, a cell class and a registry line
(docs/architecture.md, "Where a change goes"): the family below, the tests' user cell's leaky
recurrence h_t = a h_{t-1} + (1 - a) tanh(LN(xp_t + h_{t-1} U^T)), is defined here alone
(learnwin.models.recurrence.Family's records and steps; the cell's ``step`` its reference), the cell
names it in ``scan``, one registry line registers it, and it trains through bptt's driver
and through the fused driver on the pretend CUDA device (tests/pretend_cuda.py, loops graphed):
loss and every gradient equal to autograd over the reference step. A planted fault in the family's
backward fails both."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
from pretend_cuda import Replay, pretend_cuda
from torch import Tensor, nn
from toy_cell_impl import Toy

from learnwin.infra.registry import CellSpec, register
from learnwin.models import bptt, fused
from learnwin.models import recurrence as rec
from learnwin.models.cells import StepOut, build_model

# -- the family: one module's worth, for the tests' user cell (tests/toy_cell_impl.py) ------------------
# h_t = a h_{t-1} + (1 - a) tanh(LN(xp_t + h_{t-1} U^T)), a fixed leak a per unit


class Weights(NamedTuple):
    u: Tensor
    leak: Tensor
    norm: rec.Norm | None
    uT: Tensor | None = None


class Saved(NamedTuple):
    pre: Tensor  # the LN input xp_t + h_{t-1} U^T
    g: Tensor


class Step(NamedTuple):
    pre: Tensor
    g: Tensor
    h: Tensor


class Factors(NamedTuple):
    k: Tensor  # d LN-output / dh_t = (1 - a) (1 - g^2)


class Grads(NamedTuple):
    dy: Tensor
    da: Tensor


class Leaky(rec.Family):
    @staticmethod
    def step(saved, states):
        return Step(*saved, states[0])

    @staticmethod
    def weights(mats, norm, forward=False):
        return Weights(*mats, norm, mats[0].mT.contiguous() if forward else None)

    @staticmethod
    def split(xp):
        return (xp,)

    @staticmethod
    def widths(G, H):
        return Saved(G, H)

    @staticmethod
    def forward_step(w, xs, prev, out):
        rec.mm(xs[0], prev[0], w.uT, out=out.pre)
        n, mean, rstd = rec.ln_forward(out.pre, w.norm)
        torch.addcmul(w.leak * prev[0], 1 - w.leak, torch.tanh(n, out=out.g), out=out.h)
        return mean, rstd

    @staticmethod
    def factors(w, saved, prev, at):
        g = saved.g[at]
        return Factors((1 - w.leak) * (1 - g * g))

    @staticmethod
    def ln_input(saved):
        return saved.pre

    @staticmethod
    def grads(dy, da):
        return Grads(dy, da)

    @staticmethod
    def backward_step(w, f, carry, prev_grads, a, mean, rstd, out, more=True):
        dh = carry[0]
        dy = torch.mul(dh, f.k, out=out.dy)
        da = out.da.copy_(rec.ln_input_grad(dy, a, mean, rstd, w.norm))
        return (rec.mm(torch.addcmul(prev_grads[0], dh, w.leak), da, w.u),) if more else None, None

    @staticmethod
    def finish(grads, kept, saved, prev, out=None):
        da = grads.da if out is None else out.copy_(grads.da)
        return da, (rec.outer(da, prev[0]), None)  # None: the fixed leak


class FastToy(Toy):
    """The tests' user cell with its family: ``scan`` names it (LayerNorm optional, as the built-in cells')."""

    def __init__(self, input_size, hidden_size, layer_norm=True, **_):
        super().__init__(input_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size) if layer_norm else nn.Identity()

    def scan(self):
        return Leaky, (*bptt.projection(self), self.W_h, self.a, *bptt.layer_norm(self.norm))

    def step(self, xp, hp, state, trace):
        """Toy's step with the LayerNorm on the candidate (the trace: Toy's, without it)."""
        if isinstance(self.norm, nn.Identity):
            return super().step(xp, hp, state, trace)
        if trace:
            raise NotImplementedError("FastToy's trace has no LayerNorm term")
        h = self.a * state[0] + (1 - self.a) * torch.tanh(self.norm(xp + hp))
        return StepOut((h,), h, h)


# -- the tests ---------------------------------------------------------------------------------------


@pytest.fixture
def leaky(fresh_registry):
    register("leaky", CellSpec(f"{__name__}:FastToy", gate_blocks=1, color="tab:olive"))  # the registry line
    yield


def _loss_and_grads(model, x, y, reference):
    model.zero_grad(set_to_none=True)
    loss = torch.mean((model(x, reference=reference) - y) ** 2)
    loss.backward()
    return [loss.detach().cpu()] + [p.grad.cpu() for p in model.parameters()]


def _difference(layer_norm: bool, device: str | None) -> float:
    """Largest |driver - autograd over the reference step| of the loss and every gradient, float64:
    bptt's driver (``device`` None), or the fused one on the pretend CUDA device."""
    torch.manual_seed(0)
    model = build_model("leaky", 3, 5, layer_norm=layer_norm).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 9, 3, generator=gen, dtype=torch.float64), torch.randn(4, 9, generator=gen,
                                                                                   dtype=torch.float64)
    ref = _loss_and_grads(model, x, y, reference=True)
    if device is None:
        with fused.use(None):
            fast = _loss_and_grads(model, x, y, reference=False)
    else:
        with pretend_cuda(), fused.use(fused.Mode(compile=False, graph=True)):
            model, x, y = model.to(device), x.to(device), y.to(device)
            fast = _loss_and_grads(model, x, y, reference=False)
    assert all(r.abs().max() > 1e-3 for r in ref)  # not a comparison of zeros
    return max((a - b).abs().max().item() for a, b in zip(fast, ref, strict=True))


@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("device", [None, "meta"], ids=["bptt", "fused-pretend-cuda"])
def test_a_family_from_a_test_module_trains_through_both_drivers(leaky, device, layer_norm, monkeypatch):
    monkeypatch.setattr(fused, "GRAPH_BACKEND", Replay)
    monkeypatch.setattr(fused, "_graphed", {})
    monkeypatch.setattr(Replay, "captures", 0)
    calls = []
    for driver in (bptt.Scan, fused.Scan):
        real = driver.apply
        monkeypatch.setattr(driver, "apply", lambda *a, _d=driver, _r=real: calls.append(_d) or _r(*a))
    assert _difference(layer_norm, device) < 1e-10
    assert calls == [bptt.Scan if device is None else fused.Scan]
    assert Replay.captures == (0 if device is None else 2)  # the fused loops graphed: forward and backward


@pytest.mark.parametrize("device", [None, "meta"], ids=["bptt", "fused-pretend-cuda"])
def test_a_planted_fault_in_the_family_fails_both_drivers(leaky, device, monkeypatch):
    """One part in a million off the backward's factor."""
    monkeypatch.setattr(fused, "GRAPH_BACKEND", Replay)
    monkeypatch.setattr(fused, "_graphed", {})
    real = Leaky.factors
    monkeypatch.setattr(Leaky, "factors", staticmethod(lambda *a: Factors(real(*a).k * (1 + 1e-6))))
    assert _difference(True, device) > 1e-9
