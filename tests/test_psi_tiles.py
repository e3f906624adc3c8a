"""psi's long lags through time tiles (learnwin.probing.detect._far_sums, docs/method.md §4-5).

Oracles: the direct sums over every lag (``psi_diagonal(block=T)``: the only path before the
tiles, and still the path up to T = 64), the float64 loop over lags and receiving times of
tests/test_snapshot.py, and the closed form of a ConstGate with W_h = 0 (Gamma = (1 - s)^l).
"""

import functools

import numpy as np
import pandas as pd
import pytest
import torch
from test_snapshot import _probe, _setup, naive_psi

from learnwin.models.state import output_error
from learnwin.probing import snapshot
from learnwin.probing.detect import DIRECT_T, lag_block, psi_diagonal, tangents
from learnwin.probing.envelope import DiagonalTransport, base_rate


def _inputs(name, T, B=3, dtype=torch.float64, order=1):
    model, x, y, y_hat, dirs, rates = _setup(name, T=T, B=B)
    cell = model.cell
    trace = cell.trace(x)
    lam = base_rate(trace.presynaptic, rates if name in ("gru", "lstm") else None, 1e-3, cell.hidden_size)
    delta = output_error(y_hat - y, model.W_out.detach())
    v = cell.transported(tangents(cell, x, dirs, cell.full_state))
    transport = DiagonalTransport(trace, order, dtype)
    work = dtype if not v.is_complex() else transport.dtype
    return transport, lam.to(dtype), delta.to(dtype), v.to(work)


@pytest.mark.parametrize("name,order", [("gru", 1), ("lstm", 1), ("const", 0), ("lru", 1), ("s6", 1)])
@pytest.mark.parametrize("keep", [False, True])
def test_tiles_equal_the_direct_sums(name, order, keep):
    """Every tile size and sequence block gives the direct sums: to 1e-12 in float64, to float32
    rounding in float32 (the LRU's complex Gamma and the S6's P = H M components included)."""
    T = 23
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        transport, lam, delta, v = _inputs(name, T, dtype=dtype, order=order)
        v = v if keep else v.mean(0)
        direct = psi_diagonal(transport, lam, delta, v, block=T)
        scale = direct.abs().max().item()
        for budget in (1, 10 ** 9):  # one sequence at a time, or the whole batch
            same_chunks = psi_diagonal(transport, lam, delta, v, budget=budget, block=T)
            for block in (1, 2, 5, 8):
                tiled = psi_diagonal(transport, lam, delta, v, budget=budget, block=block)
                assert tiled.shape == direct.shape and tiled.dtype == torch.float64
                torch.testing.assert_close(tiled, direct, rtol=0, atol=tol * scale)
                if not v.is_complex():  # short lags: the same code (a complex sum over a shorter chunk may round
                    assert torch.equal(tiled[..., :block], same_chunks[..., :block])  # otherwise)


def test_tiles_match_the_float64_loop():
    T = 40
    model, x, y, y_hat, dirs, rates = _setup("gru", T=T, B=2)
    transport, lam, delta, v = _inputs("gru", T, B=2)
    got = psi_diagonal(transport, lam, delta, v.mean(0), block=6).numpy()
    ref = naive_psi(model, x, y, y_hat, dirs, rates, list(range(T)))
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())


def test_lag_block_keeps_short_sequences_direct():
    assert [lag_block(T) for T in (24, 64)] == [24, 64]  # smoke and default configs: every lag direct
    assert DIRECT_T == 64 and lag_block(65) == 8 and lag_block(256) == 8
    assert lag_block(1024) == 16 and lag_block(4096) == 32


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_probe_tables_past_the_direct_length_equal_the_direct_ones(name, monkeypatch):
    """At T > DIRECT_T the probe takes the tiles: its psi and S equal those of the direct sums (the
    probe before them) to 1e-10 in float64 and to rounding in float32; the envelope is untouched."""
    T, lags = 72, [1, 9, 17, 40, 63, 71]
    model, x, y, y_hat, dirs, rates = _setup(name, T=T, B=4)
    assert lag_block(T) < T
    tables = {}
    for model_dtype in (torch.float64, torch.float32):
        m = model.to(model_dtype)
        args = (m, x.to(model_dtype), y.to(model_dtype), y_hat.to(model_dtype),
                {n: d.to(model_dtype) for n, d in dirs.items()}, rates, lags, 8)
        tiled = _probe(*args)
        with monkeypatch.context() as patch:
            patch.setattr(snapshot, "psi_diagonal", functools.partial(psi_diagonal, block=T))
            direct = _probe(*args)
        tables[model_dtype] = tiled, direct
    for dtype, rtol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        (env, units, psi, total), (env0, units0, psi0, total0) = tables[dtype]
        pd.testing.assert_frame_equal(env, env0)
        pd.testing.assert_frame_equal(units, units0)
        pd.testing.assert_frame_equal(psi.drop(columns="psi"), psi0.drop(columns="psi"))
        per_lag = psi0.groupby("lag")["psi"].transform(lambda s: s.abs().max())  # each lag on its own scale
        worst = ((psi["psi"] - psi0["psi"]).abs() / per_lag).max()
        assert worst <= rtol, f"{dtype}: psi differs by {worst:.1e} of its lag's largest value"
        np.testing.assert_allclose(total["S"], total0["S"], rtol=rtol, atol=rtol * total0["S"].abs().max())
    assert tables[torch.float32][0][2]["psi"].ne(tables[torch.float32][1][2]["psi"]).any()  # not the same path


def test_constgate_without_recurrence_closed_form_at_long_lags():
    """W_h = 0 and SGD: mu_{t,l} = lr (1 - s)^l, so psi_n(l) = lr (1 - s)^l mean_t delta_t . v_{t-l}
    at every lag, the tiled ones included (T = 96 > DIRECT_T)."""
    s, lr, T = 0.05, 0.05, 96
    model, x, y, y_hat, dirs, _ = _setup("const", T=T, B=3)
    model.cell.s.fill_(s)
    with torch.no_grad():
        model.cell.W_h.zero_()
        y_hat = model(x)
    cell = model.cell
    trace = cell.trace(x)
    delta = output_error(y_hat - y, model.W_out.detach())
    v = tangents(cell, x, dirs).mean(0)
    lam = base_rate(trace.presynaptic, None, lr, cell.hidden_size)
    got = psi_diagonal(DiagonalTransport(trace, 1, torch.float64), lam, delta, v).numpy()
    gram = np.einsum("bth,bkh->btk", delta.numpy(), v.numpy())
    closed = np.stack([lr * (1 - s) ** l * np.diagonal(gram, -l, 1, 2).mean(-1) for l in range(T)], 1)
    np.testing.assert_allclose(got, closed, rtol=1e-10, atol=1e-13 * np.abs(closed).max())
