"""The hand-written BPTT of learnwin.models.bptt against the step-by-step autograd reference."""

import pytest
import torch

from learnwin.infra.registry import CELLS, MODELS
from learnwin.models import bptt
from learnwin.models.cells import GatedCell, build_model

GATED = [m for m in MODELS if issubclass(CELLS[m].load(), GatedCell)]  # the diagonal linear cells: test_linear_cells.py


def _random_model(name, layer_norm, D=3, H=5):
    """float64, every parameter random (LayerNorm affine included), so no gate sits at init."""
    torch.manual_seed(0)
    model = build_model(name, D, H, layer_norm=layer_norm, const_s=0.3).double()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.6 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        if layer_norm:
            model.cell.norm.weight.add_(1.0)
    return model


def _loss_and_grads(model, x, y, reference):
    model.zero_grad(set_to_none=True)
    loss = torch.mean((model(x, reference=reference) - y) ** 2)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("name", GATED)
def test_fast_path_equals_reference(name, layer_norm):
    model = _random_model(name, layer_norm)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 9, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    loss, grads = _loss_and_grads(model, x, y, reference=False)
    ref_loss, ref_grads = _loss_and_grads(model, x, y, reference=True)
    torch.testing.assert_close(loss, ref_loss, rtol=0, atol=1e-10)
    assert grads.keys() == ref_grads.keys()
    for n, g in ref_grads.items():
        assert g.abs().max() > 1e-3, n  # the comparison is not between two zeros
        torch.testing.assert_close(grads[n], g, rtol=0, atol=1e-10, msg=n)


@pytest.mark.parametrize("hidden_too", [True, False])
@pytest.mark.parametrize("name", GATED)
def test_gradients_of_both_states_and_input(name, hidden_too):
    """Loss on the transported state (and the hidden one); gradient w.r.t. the input x too."""
    model = _random_model(name, True)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 7, 3, generator=gen, dtype=torch.float64)
    wh, wc = torch.randn(2, 3, 7, 5, generator=gen, dtype=torch.float64)
    out = []
    for reference in (False, True):
        xr = x.clone().requires_grad_()
        h, c = model.cell(xr, reference=reference)
        loss = (c.sin() * wc).sum() + ((h * wh).sum() if hidden_too else 0)
        loss.backward()
        out.append((h.detach(), c.detach(), xr.grad))
    for fast, ref in zip(*out):
        torch.testing.assert_close(fast, ref, rtol=0, atol=1e-10)


def test_fast_path_is_taken_only_when_safe(monkeypatch):
    model = _random_model("gru", True)
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    calls = []
    real = bptt.Scan.apply
    monkeypatch.setattr(bptt.Scan, "apply", lambda *a: calls.append(1) or real(*a))
    model(x)
    assert len(calls) == 1
    model(x, reference=True)
    with torch.no_grad():
        model(x)
    params = dict(model.named_parameters())
    torch.func.jvp(lambda p: torch.func.functional_call(model, p, (x,)), (params,),
                   ({n: torch.ones_like(p) for n, p in params.items()},))
    torch.func.grad(lambda p: torch.func.functional_call(model, p, (x,)).sum())(params)
    assert len(calls) == 1


def test_double_backward_through_fast_path_raises():
    model = _random_model("lstm", True)
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()


@pytest.mark.parametrize("shape", [(1, 6), (5, 1), (1, 1)])
@pytest.mark.parametrize("name", GATED)
def test_single_sequence_and_single_step(name, shape):
    """Batch 1 or T = 1 (views of size-1 dimensions): still the reference."""
    model = _random_model(name, True)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(*shape, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(*shape, generator=gen, dtype=torch.float64)
    loss, grads = _loss_and_grads(model, x, y, reference=False)
    ref_loss, ref_grads = _loss_and_grads(model, x, y, reference=True)
    torch.testing.assert_close(loss, ref_loss, rtol=0, atol=1e-10)
    for n, g in ref_grads.items():
        torch.testing.assert_close(grads[n], g, rtol=0, atol=1e-10, msg=n)


@pytest.mark.parametrize("name", GATED)
def test_inputs_untouched_and_results_are_ordinary_tensors(name):
    """The loops run in inference mode: nothing they return may be an inference tensor (an
    optimizer or gradient clipping writes grads in place), and they never write their inputs."""
    model = _random_model(name, True)
    cell = model.cell
    x = torch.randn(1, 5, 3, dtype=torch.float64, requires_grad=True)
    before = x.detach().clone()
    hidden, moved = cell.fast_forward(x)
    out = (hidden,) if moved is hidden else (hidden, moved)
    assert torch.equal(x.detach(), before)
    assert not any(o.is_inference() for o in out)
    sum(o.sum() for o in out).backward()
    assert torch.equal(x.detach(), before)
    params = [x, *(p for p in cell.parameters() if p.grad is not None)]
    assert len(params) >= 6  # x, input weight and bias, a recurrent matrix, the LayerNorm weight and bias
    assert not any(p.grad.is_inference() for p in params)
    with pytest.raises(RuntimeError, match="view"):  # the saved states cannot be changed under autograd
        out[0].add_(1)
    torch.nn.utils.clip_grad_norm_(params, 1e-3)  # in place on every grad
    assert torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])) <= 1e-3 + 1e-12


@pytest.mark.parametrize("name", GATED)
def test_backward_twice_with_retained_graph(name):
    """The backward reads its saved buffers and never overwrites them."""
    model = _random_model(name, True)
    x = torch.randn(3, 6, 3, dtype=torch.float64)
    loss = model(x).square().sum()
    first = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    second = torch.autograd.grad(loss, list(model.parameters()))
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("T, row, budget", [(9, 8, 32), (9, 8, 8), (9, 8, 1), (64, 16384, 1 << 20),
                                            (7, 100, 10_000)])
def test_blocks_cover_every_step_once_last_first(T, row, budget, monkeypatch):
    monkeypatch.setattr(bptt, "BLOCK_BYTES", budget)
    blocks = list(bptt._blocks(T, row))
    n = max(1, budget // row)
    assert [t for lo, hi in blocks for t in range(hi - 1, lo - 1, -1)] == list(range(T - 1, -1, -1))
    assert all(hi - lo == n for lo, hi in blocks[:-1]) and 0 < blocks[-1][1] - blocks[-1][0] <= n


def test_a_devices_blocks_are_sized_by_its_own_budget():
    """The paper's size (batch 512, H 128, float32: 256 KiB a row): one step per block on the CPU,
    the whole sequence in one block on an accelerator."""
    row = 512 * 128 * 4
    assert len(list(bptt._blocks(1024, row))) == len(list(bptt._blocks(1024, row, "cpu"))) == 1024
    assert list(bptt._blocks(1024, row, torch.device("cuda"))) == list(bptt._blocks(1024, row, "meta")) == [(768, 1024),
                                                                                                          (512, 768), (256, 512), (0, 256)]


WIDTH = {"const": 1.0, "shared": 1.2, "diag": 2.0, "gru": 2.0, "lstm": 4.0}  # widest buffer / H (H = 5)


@pytest.mark.parametrize("steps", [1, 4])
@pytest.mark.parametrize("name", GATED)
def test_time_blocks_give_the_same_bits(name, steps, monkeypatch):
    """The backward's factors block by block (one step, or uneven blocks of 4 of 9): the same
    bits as one block, so the block size is a speed choice only."""
    model = _random_model(name, True)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(4, 9, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    loss, grads = _loss_and_grads(model, x, y, reference=False)
    monkeypatch.setattr(bptt, "BLOCK_BYTES", int(steps * 4 * 8 * 5 * WIDTH[name]))  # batch 4, float64
    assert len(list(bptt._blocks(9, int(4 * 8 * 5 * WIDTH[name])))) == (9 if steps == 1 else 3)
    blocked_loss, blocked = _loss_and_grads(model, x, y, reference=False)
    assert torch.equal(blocked_loss, loss)
    for n, g in grads.items():
        assert torch.equal(blocked[n], g), n
