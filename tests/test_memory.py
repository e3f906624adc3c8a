"""Memory curve u . d y_hat_t / d x_{t-l} (docs/method.md §4b) against autograd and a closed form."""

import numpy as np
import torch

from learnwin.models.cells import build_model
from learnwin.probing import memory
from learnwin.probing.memory import MemoryAccumulator, input_sensitivity

F64 = torch.float64


def test_sensitivity_equals_one_backward_per_output():
    torch.manual_seed(0)
    model = build_model("lstm", 3, 4).double()
    x = torch.randn(2, 6, 3, dtype=F64)
    u = torch.randn(3, dtype=F64)
    G = input_sensitivity(model, x, u)
    for b in range(2):
        for t in range(6):
            xg = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(model(xg)[b, t], xg)
            torch.testing.assert_close(G[b, t], grad[b] @ u, rtol=1e-12, atol=1e-14)
            assert torch.all(grad[1 - b] == 0)  # sequences do not mix
    assert G[:, 3, 1].abs().min() > 0


def test_receiving_times_in_chunks_give_the_same_sensitivity(monkeypatch):
    """A work-array budget below one chunk of all T receiving times splits the batched backward
    (here into chunks of 2 of the 6 times); the sensitivities stay those of one pass."""
    torch.manual_seed(0)
    model = build_model("gru", 3, 4).double()
    x, u = torch.randn(2, 6, 3, dtype=F64), torch.randn(3, dtype=F64)
    whole = input_sensitivity(model, x, u)
    monkeypatch.setattr(memory, "MEMORY_CURVE_BYTES", 2 * 16 * 2 * 6 * 4 * 4)
    chunks = []
    real_grad = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda out, inp, probes, **kw: chunks.append(len(probes))
                        or real_grad(out, inp, probes, **kw))
    torch.testing.assert_close(input_sensitivity(model, x, u), whole, rtol=1e-12, atol=1e-14)
    assert chunks == [2, 2, 2]


def test_a_devices_chunk_is_sized_by_its_own_budget():
    """The paper's memory curve (batch 128, T 1024, H 128): one receiving time per backward within the
    CPU's 256 MB, eight within an accelerator's 8 GiB; the smoke size takes all T at once on both."""
    assert memory.curve_chunk(128, 1024, 128, "cpu") == 1
    assert memory.curve_chunk(128, 1024, 128, torch.device("cuda")) == 8
    assert memory.curve_chunk(128, 1024, 128, "meta") == 8
    assert memory.curve_chunk(2, 16, 4, "cpu") == memory.curve_chunk(2, 16, 4, "cuda") == 16


def test_constgate_without_recurrence_closed_form():
    """W_h = 0, no LN: u . d y_t / d x_k = (1-s)^(t-k) s sum_q W_out,q (1 - g_k,q^2) (W_x u)_q."""
    s, T = 0.25, 7
    model = build_model("const", 3, 4, layer_norm=False, const_s=s).double()
    with torch.no_grad():
        model.cell.W_h.zero_()
    x = torch.randn(3, T, 3, dtype=F64)
    u = torch.tensor([0.6, 0.0, 0.8], dtype=F64)
    g = torch.tanh(x @ model.cell.W_x.T.detach() + model.cell.b_x.detach())  # (B, T, H)
    per_k = s * ((1 - g * g) * model.W_out.detach()[0] * (model.cell.W_x.detach() @ u)).sum(-1)
    lags = np.arange(0, T)
    acc = MemoryAccumulator(lags, T)
    acc.add(input_sensitivity(model, x, u))
    table = acc.table()
    expected = [(1 - s) ** lag * per_k[:, : T - lag].mean().item() for lag in lags]
    np.testing.assert_allclose(table["m_mem"], expected, rtol=1e-12)
    expected_abs = [(1 - s) ** lag * per_k[:, : T - lag].abs().mean().item() for lag in lags]
    np.testing.assert_allclose(table["m_mem_abs"], expected_abs, rtol=1e-12)
