"""The exact transport (docs/method.md §4b) against brute-force products of full one-step Jacobians."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.func import jacrev

from learnwin.models.cells import build_model
from learnwin.models.state import output_error
from learnwin.probing import exact_transport as et
from learnwin.probing.detect import random_directions, tangents
from learnwin.probing.envelope import DiagonalTransport, base_rate, receiving_times
from learnwin.probing.snapshot import probe
from learnwin.tasks.synthetic import targets

F64 = torch.float64
D, H, T = 3, 4, 9


def _trained(name, steps=5, seed=0):
    """A small float64 model after a few AdamW steps on the delayed-regression task."""
    torch.manual_seed(seed)
    model = build_model(name, D, H).double()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    x = torch.randn(16, T, D, dtype=F64)
    y = torch.as_tensor(targets(x.numpy(), np.ones(D) / math.sqrt(D), [2, 4], [0.6, 0.5]))
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model, opt


def _brute_force_M(cell, x):
    """M[b, t, k] = d z_t / d z_k (S H x S H) as products of jacrev one-step Jacobians."""
    z = cell.full_state(*cell(x)).detach()
    z_prev = F.pad(z, (0, 0, 1, 0))[:, :-1]
    xp = F.linear(x, torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0)).detach()
    n = z.shape[-1]
    M = torch.zeros(x.shape[0], T, T, n, n, dtype=F64)
    for b in range(x.shape[0]):
        J = [jacrev(lambda zz, b=b, k=k: cell.cell_step(xp[b:b + 1, k], zz[None])[1][0])(z_prev[b, k]).detach()
             for k in range(T)]
        for t in range(T):
            prod = torch.eye(n, dtype=F64)
            for k in range(t, -1, -1):
                M[b, t, k] = prod
                prod = prod @ J[k]
    return M


def _J(cell, x):
    return et.step_jacobians(cell, x, cell.full_state(*cell(x)))


def _sweep(cell, x, src):
    """a[b, t, k] (P, S H) from the adjoint sweep, zero for k > t."""
    B, _, P, n = src.shape
    a = torch.zeros(B, T, T, P, n, dtype=F64)

    def visit(k, A):  # the stack's blocks, rows t >= k
        a[:, k:, k] = torch.cat(A, -1)[:, k:]

    et.adjoint_sweep(_J(cell, x), src, visit)
    return a


@pytest.mark.parametrize("name", ["const", "shared", "diag", "gru", "lstm"])
@pytest.mark.parametrize("layer_norm", [True, False])
def test_closed_form_step_jacobians_equal_autograd(name, layer_norm):
    """Each cell's step_jacobian (gates, LayerNorm) equals jacrev of its own _step to 1e-10."""
    torch.manual_seed(3)
    cell = build_model(name, D, H, layer_norm=layer_norm, gate_init="official").double().cell
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(3, T, D, dtype=F64)
    z = cell.full_state(*cell(x)).detach()
    xp = F.linear(x, torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0)).detach()
    closed = et.jacobians(cell, x, z)
    for b in range(3):
        for k in (1, 4, T - 1):
            ref = jacrev(lambda zz, b=b, k=k: cell.cell_step(xp[b:b + 1, k], zz[None])[1][0])(z[b, k - 1])
            torch.testing.assert_close(closed[b, k], ref, rtol=0, atol=1e-10)
    assert closed[:, 1:].abs().max() > 0.1
    batched = et.autograd_jacobian(cell.state_step, xp[:, 4], z[:, 3])
    torch.testing.assert_close(closed[:, 4], batched, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["const", "gru", "lstm"])
def test_left_product_equals_the_dense_row_product(name):
    """left from one stack's blocks into another's (strided rows k.. of (B, T, P, n_s) buffers, as
    the sweep holds them) equals [a_h, a_c] J_k with the dense closed-form J_k to 1e-12, in both
    Jacobian forms, and leaves the rows t < k of both alone."""
    torch.manual_seed(5)
    cell = build_model(name, D, H, gate_init="official").double().cell
    x = torch.randn(3, T, D, dtype=F64)
    z = cell.full_state(*cell(x)).detach()
    dense = et.jacobians(cell, x, z)
    k = 4
    stack, spare = torch.randn(2, 3, T, 2, z.shape[-1], dtype=F64)
    expected = torch.einsum("brpi,bij->brpj", stack[:, k:], dense[:, k])
    rows = lambda blocks: [b[:, k:].view(3, -1, b.shape[-1]) for b in blocks]  # noqa: E731
    for J in (et.step_jacobians(cell, x, z), et.DenseJacobians(dense)):
        a, out = ([b.clone() for b in buf.split(J.widths, -1)] for buf in (stack, spare))
        J.left(rows(a), rows(out), k)
        torch.testing.assert_close(torch.cat(out, -1)[:, k:], expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(torch.cat(out, -1)[:, :k], spare[:, :k], rtol=0, atol=0)
        torch.testing.assert_close(torch.cat(a, -1)[:, :k], stack[:, :k], rtol=0, atol=0)
    assert (expected - stack[:, k:]).abs().max() > 0.1


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_step_reproduces_the_forward_pass(name):
    cell = _trained(name)[0].cell
    x = torch.randn(2, T, D, dtype=F64)
    z = cell.full_state(*cell(x))
    xp = F.linear(x, torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0))
    state = torch.zeros(2, z.shape[-1], dtype=F64)
    for t in range(T):
        state = cell.cell_step(xp[:, t], state)[1]
        torch.testing.assert_close(state, z[:, t], rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_adjoints_equal_brute_force_jacobian_products(name):
    """a_{t,k} = M_{t,k}^T delta_t and diag of M to 1e-10; the diagonal Gamma is only reported."""
    model, _ = _trained(name)
    cell = model.cell
    x = torch.randn(2, T, D, dtype=F64)
    M = _brute_force_M(cell, x)
    S = cell.state_blocks
    delta = torch.randn(2, T, H, dtype=F64)
    a = _sweep(cell, x, et._h_block(delta, S)[:, :, None])[:, :, :, 0]
    expected = torch.einsum("btkij,bti->btkj", M, et._h_block(delta, S))
    torch.testing.assert_close(a, expected, rtol=0, atol=1e-10)
    assert a.abs().max() > 1e-3  # a real signal, not zeros on both sides
    # diagonal of d h_t / d z_k at unit q's transported component, from H basis adjoints
    basis = et._h_block(torch.eye(H, dtype=F64), S).expand(2, T, H, S * H)
    col = (S - 1) * H
    diag = torch.diagonal(_sweep(cell, x, basis)[..., col:col + H], dim1=-2, dim2=-1)
    exact = torch.diagonal(M[..., :H, col:col + H], dim1=-2, dim2=-1)
    tk = torch.ones(T, T, dtype=torch.bool).tril()
    torch.testing.assert_close(diag[:, tk], exact[:, tk], rtol=0, atol=1e-10)
    # report: the diagonal first-order Gamma against the exact diagonal (never asserted equal)
    lags = torch.arange(1, T)
    t, k, mask = receiving_times(lags, T)
    _, gamma = DiagonalTransport(cell.trace(x), order=1, dtype=F64).gamma(t, k, mask)
    ex = exact[:, t, k] * mask[None, :, :, None]
    ratio = gamma.abs().sum((0, 2, 3)) / ex.abs().sum((0, 2, 3))
    print(f"{name}: sum|Gamma1| / sum|exact diag| by lag 1..{T - 1}:", np.round(ratio.numpy(), 3))


def _exact_envelope(cell, x, lam, delta, times_per_lag=0):
    acc = et.ExactAccumulator(list(range(1, T)), T, H, times_per_lag=times_per_lag)
    et.add_batch(acc, cell, x, cell.full_state(*cell(x)), lam, delta, None, x.shape[0])
    return acc.tables()


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_secondary_functionals_on_the_subsampled_receiving_times_equal_brute_force(name):
    """f_diag_entries and f_norm read only the subsampled receiving times of each lag (the sweep's
    visit skips the others) and equal the brute-force jacrev products there to 1e-10."""
    cell = _trained(name, seed=2)[0].cell
    x = torch.randn(3, T, D, dtype=F64)
    lam = 0.01 + 0.01 * torch.rand(3, T, H, dtype=F64)
    env, _ = _exact_envelope(cell, x, lam, torch.randn(3, T, H, dtype=F64), times_per_lag=3)
    S = cell.state_blocks
    M = _brute_force_M(cell, x)[..., :H, (S - 1) * H:S * H]
    lags = torch.arange(1, T)
    t, k, mask = receiving_times(lags, T, 3)
    for i in range(len(lags)):
        ts, ks = t[i][mask[i]], k[i][mask[i]]
        block = M[:, ts, ks] * lam[:, ks, None, :]  # (B, W, H, H): M diag(Lambda)
        entries = torch.diagonal(block, dim1=-2, dim2=-1).abs().sum(-1).mean()
        norm = block.pow(2).sum((-2, -1)).sqrt().mean() * math.sqrt(H)
        np.testing.assert_allclose(env["f_diag_entries"][i], entries.item(), rtol=1e-10)
        np.testing.assert_allclose(env["f_norm"][i], norm.item(), rtol=1e-10)
    assert mask.sum(-1).min() < mask.sum(-1).max() <= 3 < T - 1  # times_per_lag binds on short lags only


def test_constgate_without_recurrence_is_exactly_a_leak_power():
    """W_h = 0: M = (1 - s)^l I exactly; with |delta^q_t| uniform (random signs) every functional
    is the diagonal path's f."""
    s = 0.25  # exact in float32, so the float64 buffer is exactly s
    model = build_model("const", D, H, const_s=s).double()
    with torch.no_grad():
        model.cell.W_h.zero_()
    x = torch.randn(3, T, D, dtype=F64)
    delta = 0.7 * torch.randn(3, T, H, dtype=F64).sign()
    env, units = _exact_envelope(model.cell, x, torch.full((3, T, H), 0.01, dtype=F64), delta)
    lags = np.arange(1, T)
    for col in ("f", "f_diag_entries", "f_norm"):
        np.testing.assert_allclose(env[col], 0.01 * H * (1 - s) ** lags, rtol=1e-12)
    np.testing.assert_allclose(units["tau"], -1 / math.log(1 - s), rtol=1e-10)
    M = _brute_force_M(model.cell, x)
    off = M[:, 5, 1] - torch.diagonal(M[:, 5, 1], dim1=-2, dim2=-1).diag_embed()
    assert off.abs().max() == 0


def test_signal_envelope_equals_its_diagonal_analogue_when_M_is_diagonal():
    """ConstGate, W_h = 0, unit-dependent rates and a random delta: the exact f equals
    mean_{n,t} sum_q Lambda^q |delta^q_t Gamma^q_{t-l,l}| / dbar(l) with the diagonal path's
    Gamma (exact here: r = 0) to 1e-10; f_diag_entries and f_norm equal sum_q Lambda^q Gamma^q and
    sqrt(H) ||Lambda Gamma||_2 (Cauchy-Schwarz: f_norm >= f_diag_entries)."""
    model = build_model("const", D, H, const_s=0.3).double()
    with torch.no_grad():
        model.cell.W_h.zero_()
    cell = model.cell
    B = 4
    x = torch.randn(B, T, D, dtype=F64)
    delta = torch.randn(B, T, H, dtype=F64)
    lam = 0.01 + 0.01 * torch.rand(B, T, H, dtype=F64)
    env, _ = _exact_envelope(cell, x, lam, delta)
    lags = torch.arange(1, T)
    t, k, mask = receiving_times(lags, T)
    _, gamma = DiagonalTransport(cell.trace(x), order=1, dtype=F64).gamma(t, k, mask)  # (B, L, W, H)
    lam_k, d_t = lam[:, k], delta[:, t]
    m = mask[None].double()
    n = m.sum((0, 2)) * B
    signal = ((lam_k * (d_t * gamma).abs()).sum(-1) * m).sum((0, 2)) / n
    dbar = (d_t.abs().mean(-1) * m).sum((0, 2)) / n
    np.testing.assert_allclose(env["f"], (signal / dbar).numpy(), rtol=1e-10)
    entries = ((lam_k * gamma.abs()).sum(-1) * m).sum((0, 2)) / n
    np.testing.assert_allclose(env["f_diag_entries"], entries.numpy(), rtol=1e-10)
    norm = ((lam_k * gamma).pow(2).sum(-1).sqrt() * math.sqrt(H) * m).sum((0, 2)) / n
    np.testing.assert_allclose(env["f_norm"], norm.numpy(), rtol=1e-10)
    assert (env["f_norm"] > env["f_diag_entries"]).all()
    assert not np.allclose(env["f"], env["f_diag_entries"], rtol=1e-3)  # the delta weighting matters


def test_constgate_recurrence_couples_units_off_the_diagonal():
    """W_h != 0: the exact Jacobian has off-diagonal coupling and its diagonal is not Gamma."""
    model = build_model("const", D, H, const_s=0.3, layer_norm=False).double()
    x = torch.randn(2, T, D, dtype=F64)
    M = _brute_force_M(model.cell, x)
    off = M[:, 6, 2] - torch.diagonal(M[:, 6, 2], dim1=-2, dim2=-1).diag_embed()
    assert off.abs().max() > 1e-3
    basis = torch.eye(H, dtype=F64).expand(2, T, H, H)
    diag = torch.diagonal(_sweep(model.cell, x, basis), dim1=-2, dim2=-1)[:, 6, 2]
    t, k = torch.tensor([[6]]), torch.tensor([[2]])
    _, gamma = DiagonalTransport(model.cell.trace(x), order=1, dtype=F64).gamma(t, k, torch.ones(1, 1, dtype=torch.bool))
    assert (diag - gamma[:, 0, 0]).abs().max() > 1e-4


@pytest.mark.parametrize("name", ["const", "shared", "diag", "gru", "lstm"])
def test_psi_and_S_against_a_naive_loop(name):
    """psi of the closed-form path equals brute-force jacrev products and the autograd-Jacobian
    (old) path to 1e-10; probe(transport=exact) returns it with the signal envelope."""
    model, opt = _trained(name, seed=1)
    cell = model.cell
    x = torch.randn(2, T, D, dtype=F64)
    y = torch.randn(2, T, dtype=F64)
    y_hat = model(x).detach()
    S = cell.state_blocks
    rates = torch.rand(H, H, dtype=F64) * 0.01
    hidden = cell(x)[0].detach()
    lam = base_rate(F.pad(hidden, (0, 0, 1, 0))[:, :-1], rates, 0.01)
    dirs = {n.removeprefix("cell."): d.double() for n, d in random_directions(model, 3, 0).items()
            if n.startswith("cell.")}
    mean_dir = {n: d.mean(0, keepdim=True) for n, d in dirs.items()}
    v = tangents(cell, x, mean_dir, cell.full_state)[0]
    delta = output_error(y_hat - y, model.W_out.detach())
    M = _brute_force_M(cell, x)
    naive = torch.zeros(2, T, dtype=F64)
    for b in range(2):
        for lag in range(T):
            vals = []
            for t in range(lag, T):
                a = M[b, t, t - lag].T @ et._h_block(delta[b, t], S)
                vals.append((a * lam[b, t - lag].repeat(S) * v[b, t - lag]).sum())
            naive[b, lag] = torch.stack(vals).mean()
    psi = et.psi_exact(_J(cell, x), delta, lam, v)
    torch.testing.assert_close(psi, naive, rtol=1e-10, atol=1e-14)
    z = cell.full_state(*cell(x))
    xp = F.linear(x, torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0))
    z_prev = F.pad(z, (0, 0, 1, 0))[:, :-1]
    J_old = torch.stack([et.autograd_jacobian(cell.state_step, xp[:, k], z_prev[:, k]) for k in range(T)], 1)
    torch.testing.assert_close(psi, et.psi_exact(et.DenseJacobians(J_old), delta, lam, v), rtol=1e-10, atol=1e-14)
    assert naive.abs().min() > 0
    lags = [1, 3, 5]
    env, units, table, total = probe(cell, model.W_out.detach(), [(x, y, y_hat)], lags, lr=0.01,
                                     rates=rates, directions=dirs, transport="exact")
    np.testing.assert_allclose(table.sort_values(["sequence", "lag"])["psi"], naive[:, lags].reshape(-1),
                               rtol=1e-10)
    np.testing.assert_allclose(total["S"], naive.sum(1), rtol=1e-10)
    assert list(env.columns) == ["transport", "lag", "f", "f_geo", "f_diag_entries", "f_norm"]
    assert len(units) == H * len(lags) and set(table["transport"]) == {"exact"}
    # the signal envelope against the brute-force adjoints a = M^T delta (every t, every sequence)
    col = (S - 1) * H
    for lag in lags:
        sig = [(lam[b, t - lag] * (M[b, t, t - lag].T @ et._h_block(delta[b, t], S))[col:col + H].abs()).sum()
               for b in range(2) for t in range(lag, T)]
        dbar = torch.stack([delta[b, t].abs().mean() for b in range(2) for t in range(lag, T)]).mean()
        np.testing.assert_allclose(env.loc[env["lag"] == lag, "f"], (torch.stack(sig).mean() / dbar).item(),
                                   rtol=1e-10)


def test_both_transports_share_one_probe():
    """transport [diagonal, exact]: each transport's rows equal its own single-transport probe."""
    model, _ = _trained("gru", seed=2)
    x = torch.randn(3, T, D, dtype=F64)
    y = torch.randn(3, T, dtype=F64)
    batch = [(x, y, model(x).detach())]
    dirs = {n.removeprefix("cell."): d.double() for n, d in random_directions(model, 2, 0).items()
            if n.startswith("cell.")}
    kw = dict(lr=0.01, directions=dirs, exact_sequences=2)
    both = probe(model.cell, model.W_out.detach(), batch, [1, 4], transport=["diagonal", "exact"], **kw)
    for name in ("diagonal", "exact"):
        alone = probe(model.cell, model.W_out.detach(), batch, [1, 4], transport=name, **kw)
        for b, a in zip(both, alone):
            part = b.loc[b["transport"] == name, list(a.columns)].reset_index(drop=True)
            pd.testing.assert_frame_equal(part, a.reset_index(drop=True))
    with pytest.raises(ValueError, match="snapshot.transport"):
        probe(model.cell, model.W_out.detach(), batch, [1], transport="approx", lr=0.01)
