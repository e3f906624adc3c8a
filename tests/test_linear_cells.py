"""The diagonal linear cells (docs/method.md §2b): parallel scan against the step loop, exact
transport against the diagonal one, the LRU's closed-form envelope, RG-LRU with a frozen gate."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from learnwin.models.cells import build_model
from learnwin.models.scan import linear_scan
from learnwin.models.state import real_view
from learnwin.probing.detect import random_directions
from learnwin.probing.snapshot import probe

F64 = torch.float64
LINEAR = ["mingru", "minlstm", "rglru", "lru", "s6"]
D, H, N = 3, 4, 3


def _model(name, seed=0, **kw):
    torch.manual_seed(seed)
    return build_model(name, D, H, state_size=N, const_s=0.2, **kw).double()


def _trained(name, steps=5, seed=0, T=11):
    """A float64 model after a few AdamW steps, so every parameter has moved off its init."""
    model = _model(name, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    x, y = torch.randn(8, T, D, dtype=F64), torch.randn(8, T, dtype=F64)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model


def _loop(a, b):
    h, out = torch.zeros_like(b[:, 0]), []
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        out.append(h)
    return torch.stack(out, 1)


@pytest.mark.parametrize("T", [1, 16, 37, 300])
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_scan_equals_the_loop_for_signed_and_complex_inputs(T, kind):
    """Chunks of 16, nested twice at T = 300; b of both signs; complex a of modulus < 1."""
    gen = torch.Generator().manual_seed(T)
    a = torch.rand(2, T, 5, generator=gen, dtype=F64) * 0.99
    b = torch.randn(2, T, 5, generator=gen, dtype=F64)
    if kind == "complex":
        a = a * torch.exp(1j * torch.rand(2, T, 5, generator=gen, dtype=F64) * 6)
        b = b + 1j * torch.randn(2, T, 5, generator=gen, dtype=F64)
    torch.testing.assert_close(linear_scan(a, b), _loop(a, b), rtol=0, atol=1e-12)
    assert (b.real < 0).any() and (b.real > 0).any()


@pytest.mark.parametrize("name", LINEAR)
@pytest.mark.parametrize("T", [37, 100])
def test_scan_loss_and_every_gradient_equal_the_step_loop(name, T):
    """T not a multiple of the chunk (16); float64, to 1e-10."""
    model = _trained(name)
    x, y = torch.randn(3, T, D, dtype=F64), torch.randn(3, T, dtype=F64)
    out = []
    for reference in (False, True):
        model.zero_grad()
        loss = F.mse_loss(model(x, reference=reference), y)
        loss.backward()
        out.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_scan, g_scan), (loss_ref, g_ref) = out
    torch.testing.assert_close(loss_scan, loss_ref, rtol=1e-10, atol=0)
    for n in g_ref:
        torch.testing.assert_close(g_scan[n], g_ref[n], rtol=1e-10, atol=1e-12, msg=f"{name} {n}")
    assert all(g.abs().max() > 0 for g in g_ref.values())  # every parameter takes part


@pytest.mark.parametrize("name", LINEAR)
def test_trace_leak_is_the_exact_one_step_jacobian(name):
    """d h_t / d h_{t-1} of the cell's own step is diag(leak_t), correction 0; for the complex
    LRU state, on (Re h, Im h), the 2 x 2 blocks [[Re lambda, -Im lambda], [Im lambda, Re lambda]]."""
    cell = _trained(name).cell
    x = torch.randn(2, 6, D, dtype=F64)
    tr = cell.trace(x)
    assert tr.correction.abs().max() == 0
    z_prev = real_view(tr.transported[:, 2])
    for b in range(2):
        def step(z, b=b):
            h = torch.view_as_complex(z.unflatten(-1, (-1, 2))) if tr.leak.is_complex() else z
            return real_view(cell._step(x[b:b + 1, 3], h[None])[0])

        J = torch.autograd.functional.jacobian(step, z_prev[b])
        lam = tr.leak[b, 3]
        if lam.is_complex():
            blocks = [torch.stack([torch.stack([v.real, -v.imag]), torch.stack([v.imag, v.real])]) for v in lam]
            expected = torch.block_diag(*blocks)
        else:
            expected = torch.diag(lam)
        torch.testing.assert_close(J, expected, rtol=0, atol=1e-14)
    torch.testing.assert_close(tr.hidden, cell(x)[0], rtol=0, atol=1e-13)


def _probe_both(model, x, y, lags, rates):
    """(diagonal, exact) tables of one probe computing both transports."""
    y_hat = model(x).detach()
    cell, w_out = model.cell, model.W_out.detach()
    dirs = {n.removeprefix("cell."): d.double() for n, d in random_directions(model, 3, 0).items()
            if n.startswith("cell.")}
    tables = probe(cell, w_out, [(x, y, y_hat)], lags, lr=0.01, rates=rates, order=1, directions=dirs,
                   transport=("diagonal", "exact"), exact_sequences=x.shape[0])
    return [[df[df["transport"] == name].reset_index(drop=True) for df in tables] for name in ("diagonal", "exact")]


@pytest.mark.parametrize("name", LINEAR)
def test_exact_transport_equals_the_diagonal_transport(name):
    """psi, S and the envelope (exact: f_diag_entries, the diagonal entries d hidden_q / d z^q the
    diagonal Gamma stands for) of the exact transport == the diagonal one to 1e-10 (float64)."""
    model = _trained(name, seed=1)
    T = 9
    x, y = torch.randn(3, T, D, dtype=F64), torch.randn(3, T, dtype=F64)
    rates = torch.rand(H, D, dtype=F64) * 0.01  # AdamW-like rates of the input weights (H x D)
    lags = list(range(0, T))
    (env_d, _, psi_d, tot_d), (env_x, _, psi_x, tot_x) = _probe_both(model, x, y, lags, rates)
    np.testing.assert_allclose(env_x["f_diag_entries"], env_d["f"], rtol=1e-10)
    key = ["sequence", "lag"]
    np.testing.assert_allclose(psi_x.sort_values(key)["psi"], psi_d.sort_values(key)["psi"], rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(tot_x["S"], tot_d["S"], rtol=1e-10)
    assert psi_d["psi"].abs().min() > 0 and env_d["f"].min() > 0  # real signals on both sides


def test_lru_envelope_is_the_closed_form_per_unit():
    """mu_abs_q(l) = Lambda |c_q| |lambda_q|^l (SGD: Lambda = lr), tau_q = -1 / ln|lambda_q|."""
    model = _trained("lru")
    cell = model.cell
    T, lr = 12, 0.01
    x = torch.randn(4, T, D, dtype=F64)
    lags = list(range(1, T))
    env, units, _, _ = probe(cell, model.W_out.detach(), [(x, x[..., 0], x[..., 0])], lags, lr=lr)
    with torch.no_grad():
        mod, c = cell.eigenvalues().abs().numpy(), torch.complex(cell.c_re, cell.c_im).abs().numpy()
    ell = np.asarray(lags, dtype=np.float64)
    closed = lr * c[None, :] * mod[None, :] ** ell[:, None]  # (L, H)
    got = units.sort_values(["lag", "unit"])["mu_abs"].to_numpy().reshape(len(lags), H)
    np.testing.assert_allclose(got, closed, rtol=1e-10)
    np.testing.assert_allclose(env["f"], closed.sum(1), rtol=1e-10)
    tau = units.groupby("unit")["tau"].first().to_numpy()
    np.testing.assert_allclose(tau, -1 / np.log(mod), rtol=1e-8)
    assert np.ptp(mod) > 1e-3  # trained units differ: the test sees each unit's own modulus


def test_rglru_with_a_frozen_gate_is_a_real_lru():
    """r_t = sigma(b_a), i_t = sigma(b_x) constant: a = sigma(Lambda)^(c r) is an LRU with real
    lambda = a, gamma = sqrt(1 - a^2) sigma(b_x), B = W_u, c = 1, D = 0: same states and envelope."""
    rg = _trained("rglru").cell
    lru = _model("lru").cell
    with torch.no_grad():
        rg.W_a.zero_()
        rg.W_x.zero_()
        rg.b_u.zero_()
        rg.b_a.copy_(torch.linspace(-1, 1, H, dtype=F64))
        rg.b_x.copy_(torch.linspace(0.5, -0.5, H, dtype=F64))
        r, i = torch.sigmoid(rg.b_a), torch.sigmoid(rg.b_x)
        a = torch.exp(-rg.c * r * F.softplus(-rg.Lambda))
        lru.nu_log.copy_(torch.log(-torch.log(a)))
        lru.theta_log.fill_(-math.inf)  # phase exp(-inf) = 0: a real spectrum
        lru.gamma_log.copy_(torch.log(torch.sqrt(1 - a * a) * i))
        lru.B_re.copy_(rg.W_u)
        lru.B_im.zero_()
        lru.c_re.fill_(1.0)
        lru.c_im.zero_()
        lru.D.zero_()
    x = torch.randn(3, 20, D, dtype=F64)
    torch.testing.assert_close(lru(x)[0], rg(x)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(lru.eigenvalues().real, a, rtol=0, atol=1e-15)
    w = torch.ones(1, H, dtype=F64)
    lags = list(range(1, 20))
    env_rg, units_rg, _, _ = probe(rg, w, [(x, x[..., 0], x[..., 0])], lags, lr=0.01)
    env_lru, units_lru, _, _ = probe(lru, w, [(x, x[..., 0], x[..., 0])], lags, lr=0.01)
    np.testing.assert_allclose(env_lru["f"], env_rg["f"], rtol=1e-10)
    np.testing.assert_allclose(units_lru["mu_abs"], units_rg["mu_abs"], rtol=1e-10)
    assert np.ptp(a.numpy()) > 1e-3  # units decay at different rates


@pytest.mark.parametrize("name", LINEAR)
def test_receive_is_the_readout_derivative(name):
    """d hidden_q / d (Re h_p, Im h_p) = (Re R_p, -Im R_p) for p in unit q, 0 elsewhere."""
    cell = _trained(name).cell
    x = torch.randn(1, 1, D, dtype=F64)
    tr = cell.trace(x)
    z = real_view(tr.transported[0, 0])

    def hidden(z):
        h = torch.view_as_complex(z.unflatten(-1, (-1, 2))) if tr.transported.is_complex() else z
        return cell.readout(h[None, None], x)[0, 0]

    J = torch.autograd.functional.jacobian(hidden, z)  # (H, n)
    R = real_view(tr.receive[0, 0].conj())  # (n,)
    m = R.shape[0] // H
    expected = torch.block_diag(*[R[q * m:(q + 1) * m][None] for q in range(H)])
    torch.testing.assert_close(J, expected, rtol=0, atol=1e-14)
    assert R.abs().min() > 0


def test_lyapunov_spectrum_of_the_lru_is_its_log_moduli():
    """Constant block-diagonal rotation-scalings: exponents ln|lambda_q|, each twice (Re, Im)."""
    from learnwin.probing.lyapunov import sequence_spectrum

    cell = _trained("lru").cell
    x = torch.randn(2, 30, D, dtype=F64)
    spec = sequence_spectrum(cell, x)
    assert spec.shape == (2, cell.state_width) == (2, 2 * H)
    expected = torch.log(cell.eigenvalues().abs()).detach().repeat_interleave(2).sort(descending=True).values
    torch.testing.assert_close(spec, expected.expand_as(spec), rtol=0, atol=1e-10)


def test_rglru_input_normaliser_has_a_bounded_slope_at_a_closed_gate():
    """sqrt(1 - a^2) keeps its value, its slope is 1 / (2 sqrt y) down to the cap, and a gate
    shut to r = 0 (a = 1) leaves every gradient finite, where torch.sqrt's would be infinite."""
    from learnwin.models.linear_cells import BoundedSqrt

    y = torch.tensor([0.0, 1e-9, 1e-4, 0.25, 1.0], dtype=torch.float64, requires_grad=True)
    out = BoundedSqrt.apply(y)
    torch.testing.assert_close(out, torch.sqrt(y.detach()), rtol=0, atol=0)
    (g,) = torch.autograd.grad(out.sum(), y)
    cap = BoundedSqrt.MAX_GRAD
    expected = torch.minimum(0.5 / torch.sqrt(y.detach()), torch.full_like(y, cap))
    torch.testing.assert_close(g, expected, rtol=1e-12, atol=0)
    assert g[0] == cap and g[1] == cap and g[2] == pytest.approx(50.0)
    _, tangent = torch.func.jvp(BoundedSqrt.apply, (y.detach(),), (torch.ones_like(y),))  # the snapshot's forward mode
    torch.testing.assert_close(tangent, expected, rtol=1e-12, atol=0)

    torch.manual_seed(0)
    net = build_model("rglru", 3, 4, const_s=0.2).double()
    with torch.no_grad():
        net.cell.W_a.zero_()
        net.cell.b_a.fill_(-800.0)  # r_t = 0 in float64: a_t = 1 exactly
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    a, _ = net.cell.coefficients(x)
    assert bool((a == 1).all())
    net(x).square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
