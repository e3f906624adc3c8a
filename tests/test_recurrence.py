"""Every family's hand-written steps (learnwin.models.recurrence.Family) against the definition, each
cell's ``step`` under autograd (docs/method.md §2): one step's states, and the gradients of a loss on
them with respect to the pre-activation and the previous states. The cells are iterated through
their ``scan()``: no test here names a family."""

import pytest
import torch

from learnwin.infra.registry import CELLS, MODELS
from learnwin.models import recurrence as rec
from learnwin.models.cells import build_model

B, D, H = 4, 3, 5
GATED = [m for m in MODELS if getattr(CELLS[m].load(), "scan", None) is not None]


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
    out = cell.step(xp, hp, cell.state_of(states[0], states[-1]), trace=False)
    new = [out.hidden, out.transported][:len(states)]
    grads = torch.autograd.grad(sum((w * v).sum() for w, v in zip(weights, new)), [xp, *states])
    return [v.detach() for v in new], list(grads)


def _hand_written(cell, xp, states, weights):
    """The same from the family's forward_step, factors, backward_step and finish, on fresh tensors
    (one step: the finish on a sequence of one)."""
    family, (_, _, *mats, ln_w, ln_b, eps) = cell.scan()
    norm = rec.norm(ln_w, ln_b, eps)
    widths = family.widths(xp.shape[-1], H)
    saved = type(widths)(*(xp.new_empty(B, n) for n in widths))
    new = tuple(torch.empty_like(h) for h in states)
    mean, rstd = family.forward_step(family.weights(mats, norm, True), family.split(xp), states,
                                     family.step(saved, new))
    w, a = family.weights(mats, norm), family.ln_input(saved)
    out = family.grads(torch.empty_like(a), torch.empty_like(xp))
    f = family.factors(w, saved, states, ...)
    carry, kept = family.backward_step(w, f, weights, tuple(map(torch.zeros_like, states)), a, mean, rstd, out)
    one = [type(r)(*(None if v is None else v[None] for v in r)) for r in (out, saved)]
    da, _ = family.finish(*one[:1], [] if kept is None else [kept], one[1], tuple(s[None] for s in states))
    return list(new), [da[0], *carry]


def _difference(name) -> float:
    """Largest |hand-written - definition| over the new states and every gradient, one random step."""
    cell = _cell(name)
    gen = torch.Generator().manual_seed(1)
    n = cell.scan()[0].states
    xp = torch.randn(B, sum(w.shape[0] for w in cell.input_weights()), generator=gen, dtype=torch.float64)
    states = tuple(torch.randn(B, H, generator=gen, dtype=torch.float64) for _ in range(n))
    weights = tuple(torch.randn(B, H, generator=gen, dtype=torch.float64) for _ in range(n))
    with torch.no_grad():
        hand = _hand_written(cell, xp, states, weights)
    ref = _definition(cell, xp, states, weights)
    pairs = [(a, b) for got, want in zip(hand, ref) for a, b in zip(got, want, strict=True)]
    assert len(pairs) == 2 * n + 1 and all(b.abs().max() > 1e-3 for _, b in pairs)  # not a comparison of zeros
    return max((a - b).abs().max().item() for a, b in pairs)


@pytest.mark.parametrize("name", GATED)
def test_hand_written_steps_equal_the_cell_step(name):
    assert _difference(name) < 1e-12


@pytest.mark.parametrize("name", GATED)
def test_a_planted_fault_in_the_backward_or_forward_is_seen(name, monkeypatch):
    """One part in a million off a step's factor (the backward), or off the LayerNorm (the forward)."""
    family = _cell(name).scan()[0]
    real = family.factors
    with monkeypatch.context() as m:
        m.setattr(family, "factors", staticmethod(
            lambda *a: (lambda f: f._replace(**{f._fields[0]: f[0] * (1 + 1e-6)}))(real(*a))))
        assert _difference(name) > 1e-9
    forward = rec.ln_forward
    monkeypatch.setattr(rec, "ln_forward", lambda a, ln: (lambda n, *s: (n * (1 + 1e-6), *s))(*forward(a, ln)))
    assert _difference(name) > 1e-9
