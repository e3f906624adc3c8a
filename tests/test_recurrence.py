"""The hand-written steps of learnwin.models.recurrence against the definition, each cell's ``step``
under autograd (docs/method.md §2): one step's states, and the gradients of a loss on them with
respect to the pre-activation and the previous state."""

import pytest
import torch

from learnwin.models import recurrence as rec
from learnwin.models.cells import build_model

B, D, H = 4, 3, 5
GATED = ["const", "shared", "diag", "gru", "lstm"]


def _cell(name):
    """float64, every parameter random (gates off their init, LayerNorm affine not 1, 0)."""
    torch.manual_seed(0)
    cell = build_model(name, D, H, layer_norm=True, const_s=0.3).double().cell
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return cell


def _definition(cell, xp, states, weights):
    """States after one ``cell.step`` and the gradients of sum(weights * states) w.r.t. xp and states."""
    xp, states = xp.clone().requires_grad_(), [s.clone().requires_grad_() for s in states]
    hp = states[0] @ cell.recurrent().T
    full = (*states, torch.zeros_like(states[0])) if len(states) == 2 else tuple(states)  # the LSTM's trace e
    out = cell.step(xp, hp, full, trace=False)
    new = [out.hidden, out.transported][:len(states)]
    grads = torch.autograd.grad(sum((w * v).sum() for w, v in zip(weights, new)), [xp, *states])
    return [v.detach() for v in new], list(grads)


def _hand_written(cell, xp, states, weights):
    """The same from the family's forward_step, factors and backward_step, on fresh tensors."""
    norm = rec.Norm(cell.norm.weight, cell.norm.bias, cell.norm.eps)
    u, h = cell.recurrent(), states[0]
    zeros = torch.zeros_like(h)
    new = [torch.empty_like(h) for _ in states]
    if type(cell).__name__ == "GRU":
        w = rec.GRUWeights(u, cell.U_h, norm, u.T.contiguous(), cell.U_h.T.contiguous())
        step = rec.GRUStep.of(h.new_empty(B, 2 * H), *(torch.empty_like(h) for _ in range(3)), new[0])
        mean, rstd = rec.gru_forward_step(w, xp[:, :2 * H], xp[:, 2 * H:], h, step)
        out = rec.GRUGrads(torch.empty_like(h), torch.empty_like(step.zr))
        f = rec.gru_factors(step.zr, h, step.g)
        dah, dh = rec.gru_backward_step(w, f, weights[0], zeros, step.ah, mean, rstd, out)
        return new, [torch.cat([out.dzr, dah], -1), dh]
    if type(cell).__name__ == "LSTM":
        w = rec.LSTMWeights(u, norm, u.T.contiguous())
        step = rec.LSTMStep.of(torch.empty_like(xp), torch.empty_like(h), torch.empty_like(h), *new)
        mean, rstd = rec.lstm_forward_step(w, xp, h, states[1], step)
        out = rec.LSTMGrads(torch.empty_like(h), torch.empty_like(xp))
        f = rec.lstm_factors(step.pre, states[1], step.g, step.tc)
        dc, dh = rec.lstm_backward_step(w, f, weights[0], zeros, None, weights[1], step.ag, mean, rstd, out)
        return new, [out.da, dh, dc]
    w = rec.GateWeights(u, cell.s, norm, u.T.contiguous())
    step = rec.GateStep.of(torch.empty_like(xp), torch.empty_like(h), new[0])
    mean, rstd = rec.gate_forward_step(w, xp, h, step)
    out = rec.GateGrads(torch.empty_like(h), None if step.gate is None else torch.empty_like(xp))
    f = rec.gate_factors(cell.s, step.gate, h, step.g)
    da, dh = rec.gate_backward_step(w, f, weights[0], zeros, step.a, mean, rstd, out)
    return new, [da, dh]


def _difference(name) -> float:
    """Largest |hand-written - definition| over the new states and every gradient, one random step."""
    cell = _cell(name)
    gen = torch.Generator().manual_seed(1)
    n = 2 if name == "lstm" else 1
    xp = torch.randn(B, sum(w.shape[0] for w in cell.input_weights()), generator=gen, dtype=torch.float64)
    states = [torch.randn(B, H, generator=gen, dtype=torch.float64) for _ in range(n)]
    weights = [torch.randn(B, H, generator=gen, dtype=torch.float64) for _ in range(n)]
    with torch.no_grad():
        hand = _hand_written(cell, xp, states, weights)
    ref = _definition(cell, xp, states, weights)
    pairs = [(a, b) for got, want in zip(hand, ref) for a, b in zip(got, want, strict=True)]
    assert len(pairs) == 2 * n + 1 and all(b.abs().max() > 1e-3 for _, b in pairs)  # not a comparison of zeros
    return max((a - b).abs().max().item() for a, b in pairs)


@pytest.mark.parametrize("name", GATED)
def test_hand_written_steps_equal_the_cell_step(name):
    assert _difference(name) < 1e-12


FACTORS = {"const": "gate_factors", "shared": "gate_factors", "diag": "gate_factors", "gru": "gru_factors",
           "lstm": "lstm_factors"}


@pytest.mark.parametrize("name", GATED)
def test_a_planted_fault_in_the_backward_or_forward_is_seen(name, monkeypatch):
    """One part in a million off a step's factor (the backward), or off the LayerNorm (the forward)."""
    real = getattr(rec, FACTORS[name])
    with monkeypatch.context() as m:
        m.setattr(rec, FACTORS[name], lambda *a: (lambda f: f._replace(**{f._fields[0]: f[0] * (1 + 1e-6)}))(real(*a)))
        assert _difference(name) > 1e-9
    forward = rec.ln_forward
    monkeypatch.setattr(rec, "ln_forward", lambda a, ln: (lambda n, *s: (n * (1 + 1e-6), *s))(*forward(a, ln)))
    assert _difference(name) > 1e-9
