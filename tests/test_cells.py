"""Each cell's step against a hand-written step (METHOD §2), and the gate operating point."""

import math

import pytest
import torch

from learnwin.cells import MODELS, build_model


def _ln(v):
    return torch.nn.functional.layer_norm(v, v.shape[-1:])  # init LN: unit weight, zero bias


def _sig(v):
    return 1 / (1 + torch.exp(-v))


def _randomise(model):
    """float64 and random weights everywhere except the LayerNorm (kept at its init)."""
    model = model.double()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model


def _hand_step(name, m, x, h, c):
    """One step written out from METHOD §2, with the module's parameters."""
    cell = m.cell
    if name in ("const", "shared", "diag"):
        g = torch.tanh(_ln(x @ cell.W_x.T + cell.b_x + h @ cell.W_h.T))
        if name == "const":
            s = cell.s
        elif name == "shared":
            s = _sig(x @ cell.w_s[0] + cell.b_s + h @ cell.u_s[0])[:, None]
        else:
            s = _sig(x @ cell.W_s.T + cell.b_s + h @ cell.U_s.T)
        return (1 - s) * h + s * g, None
    if name == "gru":
        z = _sig(x @ cell.W_z.T + cell.b_z + h @ cell.U_z.T)
        r = _sig(x @ cell.W_r.T + cell.b_r + h @ cell.U_r.T)
        g = torch.tanh(_ln(x @ cell.W_h.T + cell.b_h + (r * h) @ cell.U_h.T))
        return (1 - z) * h + z * g, None
    i = _sig(x @ cell.W_i.T + cell.b_i + h @ cell.U_i.T)
    f = _sig(x @ cell.W_f.T + cell.b_f + h @ cell.U_f.T)
    o = _sig(x @ cell.W_o.T + cell.b_o + h @ cell.U_o.T)
    g = torch.tanh(_ln(x @ cell.W_g.T + cell.b_g + h @ cell.U_g.T))
    c = f * c + i * g
    return o * torch.tanh(c), c


@pytest.mark.parametrize("name", MODELS)
def test_step_matches_hand_computation(name):
    torch.manual_seed(0)
    m = _randomise(build_model(name, 3, 4))
    x = torch.randn(2, 3, 3, dtype=torch.float64)
    hidden, transported = m.cell(x)
    h = c = torch.zeros(2, 4, dtype=torch.float64)
    for t in range(3):
        h, c_new = _hand_step(name, m, x[:, t], h, c)
        c = c_new if c_new is not None else h
        torch.testing.assert_close(hidden[:, t], h, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(transported[:, t], c, rtol=1e-12, atol=1e-12)
    y = m(x)
    torch.testing.assert_close(y, (hidden @ m.W_out.T + m.b_out).squeeze(-1))


@pytest.mark.parametrize("name", ["const", "shared", "diag"])
def test_gates_start_at_the_same_operating_point(name):
    m = build_model(name, 3, 5, const_s=0.05)
    trace = m.cell.trace(torch.randn(4, 6, 3))
    # exact up to float32 rounding of s and of sigmoid(logit(s))
    torch.testing.assert_close(trace.leak, torch.full_like(trace.leak, 0.95), rtol=0, atol=1e-7)


def test_gru_and_lstm_gate_init():
    gru = build_model("gru", 3, 5, gru_init_update=0.05)
    lstm = build_model("lstm", 3, 5, lstm_init_forget=0.5)
    x = torch.randn(4, 6, 3)
    torch.testing.assert_close(gru.cell.trace(x).leak, torch.full((4, 6, 5), 0.95), rtol=0, atol=1e-7)
    torch.testing.assert_close(lstm.cell.trace(x).leak, torch.full((4, 6, 5), 0.5), rtol=0, atol=1e-7)
    assert float(gru.cell.b_z[0]) == pytest.approx(math.log(0.05 / 0.95))


def test_orthogonal_init_and_zero_biases():
    m = build_model("const", 3, 5)
    w = m.cell.W_h
    torch.testing.assert_close(w @ w.T, torch.eye(5), rtol=0, atol=1e-6)
    assert float(m.W_out.detach().norm()) == pytest.approx(1.0)
    assert torch.count_nonzero(m.cell.b_x) == 0 and float(m.b_out) == 0.0


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="unknown model 'rnn'"):
        build_model("rnn", 3, 4)
