"""psi over every receiving time and the lag-independent total S_n (docs/method.md §5, §7b).

Oracles: a float64 loop over lags and receiving times that multiplies the one-step factors of
each Gamma directly and averages psi over the K directions after the fact (the package takes
the mean direction first), and the closed form of a ConstGate with W_h = 0 under SGD, where
mu_{t,l} = lr (1 - s)^l exactly.
"""

import numpy as np
import pandas as pd
import pytest
import torch

from learnwin.infra import io
from learnwin.models.cells import build_model
from learnwin.models.state import output_error
from learnwin.probing.detect import EXP_FLOOR, exp_flushed, psi_diagonal, random_directions, tangents
from learnwin.probing.envelope import DiagonalTransport, base_rate, receiving_times
from learnwin.probing.snapshot import probe, snapshot_checkpoint
from learnwin.tasks.splits import write_splits

F64 = torch.float64


def _setup(name, T=12, B=3, H=4, D=3, K=3, seed=0):
    torch.manual_seed(seed)
    model = build_model(name, D, H, gate_init="paper").double()  # the draws these tests were sized on
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" not in n and not n.startswith("cell.b_"):
                p.add_(0.4 * torch.randn(p.shape, generator=gen, dtype=F64))
    x = torch.randn(B, T, D, dtype=F64, generator=gen)
    y_hat = model(x).detach()
    y = y_hat + torch.randn(B, T, dtype=F64, generator=gen)
    dirs = {n.removeprefix("cell."): d.double() for n, d in random_directions(model, K, seed).items()
            if n.startswith("cell.")}
    rates = 1e-3 * (0.5 + torch.rand(H, H, dtype=F64, generator=gen))  # an adaptive optimizer's rates
    return model, x, y, y_hat, dirs, rates


def naive_psi(model, x, y, y_hat, dirs, rates, lags, times_per_lag=0):
    """psi_n(l) (B, L) by loops over lags and receiving times, in float64 (docs/method.md §4-5)."""
    cell = model.cell
    trace = cell.trace(x)
    leak = trace.leak.clamp(1e-12, 1.0)
    ratio = trace.correction / leak
    h2 = trace.presynaptic ** 2
    lam = torch.where(h2.sum(-1, keepdim=True) > 0, h2 @ rates.T / h2.sum(-1, keepdim=True),
                      rates.mean(1))  # Rayleigh quotient at h_{k-1}
    delta = output_error(y_hat - y, model.W_out.detach())
    v = tangents(cell, x, dirs)  # (K, B, T, H), every direction
    T = x.shape[1]
    t_all, _, mask = receiving_times(torch.as_tensor(lags), T, times_per_lag)
    out = torch.zeros(x.shape[0], len(lags), dtype=F64)
    for i, lag in enumerate(lags):
        times = t_all[i][mask[i]].tolist()
        for t in times:
            k = t - lag
            steps = slice(k + 1, t + 1)  # empty at lag 0: Gamma = the receiving factor
            gamma = trace.receive[:, t] * leak[:, steps].prod(1) * (1 + ratio[:, steps].sum(1))
            mu = lam[:, k] * gamma
            out[:, i] += (mu * delta[:, t] * v[:, :, k]).sum(-1).mean(0) / len(times)
    return out.numpy()


def _probe(model, x, y, y_hat, dirs, rates, lags, times_per_lag, keep=False):
    return probe(model.cell, model.W_out.detach(), [(x, y, y_hat)], lags, lr=1e-3, rates=rates,
                 times_per_lag=times_per_lag, directions=dirs, keep_directions=keep)


def _wide(psi, lags):
    return psi.pivot(index="sequence", columns="lag", values="psi")[lags].to_numpy()


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_psi_averages_every_receiving_time_and_S_sums_every_lag(name):
    model, x, y, y_hat, dirs, rates = _setup(name)
    T, lags = x.shape[1], [1, 3, 6, 9]
    ref = naive_psi(model, x, y, y_hat, dirs, rates, lags)
    env, _, psi, total = _probe(model, x, y, y_hat, dirs, rates, lags, times_per_lag=3)
    got = _wide(psi, lags)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    # the envelope's 3 receiving times per lag do not reach psi: their mean is a different number
    sub = naive_psi(model, x, y, y_hat, dirs, rates, lags, times_per_lag=3)
    assert np.abs(got - sub).max() > 1e-2 * np.abs(ref).max()
    env0, _, psi0, total0 = _probe(model, x, y, y_hat, dirs, rates, lags, times_per_lag=0)
    np.testing.assert_array_equal(psi0["psi"], psi["psi"])
    np.testing.assert_array_equal(total0["S"], total["S"])
    assert not np.allclose(env0["f"], env["f"], rtol=1e-3)  # the subsampled times do reach the envelope
    # S_n: every lag 0..T-1, the instantaneous lag 0 included
    every = naive_psi(model, x, y, y_hat, dirs, rates, list(range(T)))
    assert total["sequence"].tolist() == list(range(x.shape[0]))
    scale = np.abs(every).sum(1)
    np.testing.assert_allclose(total["S"], every.sum(1), rtol=1e-5, atol=1e-6 * scale.max())
    assert not np.allclose(total["S"], every[:, 1:].sum(1), rtol=1e-5, atol=1e-6 * scale.max())  # lag 0 counts
    # per direction: S is the direction mean of the per-direction sums, psi's average
    _, _, per_dir, total_k = _probe(model, x, y, y_hat, dirs, rates, lags, times_per_lag=3, keep=True)
    np.testing.assert_allclose(per_dir.groupby(["sequence", "lag"])["psi"].mean().to_numpy(),
                               got.ravel(), rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    np.testing.assert_allclose(total_k["S"], total["S"], rtol=1e-5, atol=1e-6 * scale.max())


def test_constgate_without_recurrence_closed_form():
    """W_h = 0 and SGD: r = 0, Lambda = lr, so mu_{t,l} = lr (1 - s)^l at every t."""
    s, lr, T, lags = 0.2, 0.05, 10, [1, 2, 5]
    torch.manual_seed(3)
    model = build_model("const", 2, 3, const_s=s).double()
    with torch.no_grad():
        model.cell.W_h.zero_()
    x = torch.randn(4, T, 2, dtype=F64)
    y_hat = model(x).detach()
    y = torch.randn(4, T, dtype=F64)
    dirs = {n.removeprefix("cell."): d.double() for n, d in random_directions(model, 2, 1).items()
            if n.startswith("cell.")}
    _, _, psi, total = probe(model.cell, model.W_out.detach(), [(x, y, y_hat)], lags, lr=lr, times_per_lag=2,
                             directions=dirs)
    delta = output_error(y_hat - y, model.W_out.detach()).numpy()
    v = tangents(model.cell, x, dirs).mean(0).numpy()
    gram = np.einsum("bth,bkh->btk", delta, v)  # delta_t . v_k
    # psi_n(l) = lr (1 - s)^l mean_t delta_t . v_{t-l}: the l-th lower diagonal of the Gram matrix
    closed = np.stack([lr * (1 - s) ** l * np.diagonal(gram, -l, 1, 2).mean(-1) for l in range(T)], 1)
    np.testing.assert_allclose(_wide(psi, lags), closed[:, lags], rtol=1e-5, atol=1e-7 * np.abs(closed).max())
    np.testing.assert_allclose(total["S"], closed.sum(1), rtol=1e-5, atol=1e-7 * np.abs(closed).sum(1).max())


def test_diverged_checkpoint_gives_nan_total_of_the_same_shape(tmp_path):
    task = dict(T=10, D=2, lags=[2], coefs=[0.5], noise_std=0.1, n_train=4, n_val=4, n_diag=5)
    write_splits(1, task, tmp_path / "data")
    io.save_checkpoint({"diverged": "loss became nan", "model_config": {"hidden": 3}}, tmp_path / "best.pt")
    keys = dict(model="gru", optimizer="sgd", seed=1, epoch="best")
    env, units, psi, total = snapshot_checkpoint(
        checkpoint=tmp_path / "best.pt", data_dir=tmp_path / "data", lags=[1, 2], order=1, times_per_lag=0,
        directions=2, batch_size=8, keep_directions=False, keys=keys)
    assert list(total.columns) == ["model", "optimizer", "seed", "epoch", "transport", "sequence", "S"]
    assert total["sequence"].tolist() == list(range(5)) and total["S"].isna().all()
    assert len(psi) == 2 * 5 and psi["psi"].isna().all()
    for transport, extra in (("diagonal", "f_gates"), ("exact", "f_norm")):
        env_t = snapshot_checkpoint(
            checkpoint=tmp_path / "best.pt", data_dir=tmp_path / "data", lags=[1, 2], order=1, times_per_lag=0,
            directions=2, batch_size=8, keep_directions=False, keys=keys, transport=transport)[0]
        assert set(env_t["transport"]) == {transport} and env_t[[extra, "f_diagonal"]].isna().all().all()
    io.write_table(total, tmp_path / "total.parquet", "total")
    back = io.read_table(tmp_path / "total.parquet", "total")
    assert back["sequence"].dtype == np.int64 and back["S"].isna().all()


def test_transport_list_keeps_each_transports_rows_as_computed_alone(tmp_path):
    """snapshot.transport [diagonal, exact]: the stacked tables hold, row for row, what each
    transport gives alone (the diagonal rows unchanged by adding the exact one), and the two differ."""
    task = dict(T=12, D=2, lags=[2], coefs=[0.5], noise_std=0.1, n_train=4, n_val=4, n_diag=6)
    write_splits(1, task, tmp_path / "data")
    torch.manual_seed(0)
    model = build_model("gru", 2, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape))
    io.save_checkpoint({"cell": "gru", "model_config": {"input_size": 2, "hidden": 3},
                        "model": model.state_dict(), "optimizer_name": "sgd", "optimizer": {},
                        "hparams": {"lr": 0.1}}, tmp_path / "best.pt")
    kw = dict(checkpoint=tmp_path / "best.pt", data_dir=tmp_path / "data", lags=[1, 2, 4], order=1,
              times_per_lag=0, directions=2, batch_size=4, keep_directions=False,
              keys=dict(model="gru", optimizer="sgd", seed=1, epoch="best"), exact_sequences=6)
    both = snapshot_checkpoint(**kw, transport=["exact", "diagonal"])
    for name in ("diagonal", "exact"):
        alone = snapshot_checkpoint(**kw, transport=name)
        for got, ref in zip(both, alone):
            rows = got[got["transport"] == name].reset_index(drop=True)
            pd.testing.assert_frame_equal(rows[ref.columns], ref)
    env = both[0].set_index(["transport", "lag"])
    assert env.loc["diagonal", ["f_diag_entries", "f_norm"]].isna().all().all()
    assert not np.allclose(env.loc["exact", "f"], env.loc["diagonal", "f"])
    with pytest.raises(ValueError, match="snapshot.transport"):
        snapshot_checkpoint(**kw, transport=["exact", "lyapunov"])


@pytest.mark.parametrize("name", ["gru", "lru"])
@pytest.mark.parametrize("keep", [False, True])
def test_sequence_blocks_change_no_value_of_psi(name, keep):
    """A budget smaller than one lag of the batch splits the sequences into blocks (long T):
    psi is the same number as with the whole batch per lag chunk, to rounding (the kernels
    reduce blocks of other shapes), and both match the float64 loop (docs/method.md §5)."""
    model, x, y, y_hat, dirs, rates = _setup(name, T=12, B=5)
    cell = model.cell
    trace = cell.trace(x)
    rates = rates if name == "gru" else None  # the LRU's pre-synaptic vector is x_t
    lam = base_rate(trace.presynaptic, rates, 1e-3, cell.hidden_size)
    delta = output_error(y_hat - y, model.W_out.detach())
    v = cell.transported(tangents(cell, x, dirs, cell.full_state))
    v = v if keep else v.mean(0)
    transport = DiagonalTransport(trace, 1, F64)
    P, K = v.shape[-1], (v.shape[0] if keep else 1)
    whole = psi_diagonal(transport, lam, delta, v, budget=5 * 12 * P * K)  # one lag of all 5 sequences
    for budget in (1, 2 * 12 * P * K, 3 * 12 * P * K + 1):  # blocks of 1, 2 and 3 sequences
        blocked = psi_diagonal(transport, lam, delta, v, budget=budget)
        torch.testing.assert_close(blocked, whole, rtol=1e-14, atol=1e-14 * whole.abs().max().item())
    if name == "gru":  # the loop oracle is written for a real state
        ref = naive_psi(model, x, y, y_hat, dirs, rates, list(range(12)))
        got = whole.mean(0) if keep else whole
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())


def test_exp_flushed_equals_exp_above_the_floor_and_zero_below():
    """float32 exp is exact where its result is a normal number and exactly 0 below the floor
    (subnormal or underflow), for real and complex arguments; float64 is left alone."""
    x = torch.tensor([0.0, -1.5, -80.0, EXP_FLOOR, -87.5, -95.0, -300.0])
    got = exp_flushed(x)
    np.testing.assert_array_equal(got[:4].numpy(), torch.exp(x[:4]).numpy())
    assert got[4:].tolist() == [0.0, 0.0, 0.0]
    z = torch.complex(x, torch.full_like(x, 0.7))
    gz = exp_flushed(z)
    np.testing.assert_array_equal(gz[:4].numpy(), torch.exp(z[:4]).numpy())
    assert gz[4:].abs().tolist() == [0.0, 0.0, 0.0]
    x64 = x.double()
    np.testing.assert_array_equal(exp_flushed(x64).numpy(), torch.exp(x64).numpy())
    assert exp_flushed(x64)[5] > 0  # exp(-95) is a normal float64
