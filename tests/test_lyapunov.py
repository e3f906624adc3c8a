"""Lyapunov spectrum of the exact transport (docs/method.md §4c) against analytic oracles."""

import math

import numpy as np
import pytest
import torch

from learnwin.infra import io
from learnwin.models.cells import build_model
from learnwin.probing.lyapunov import lyapunov_checkpoint, qr_exponents, sequence_spectrum, spectrum_table
from learnwin.stats.claims import TAU_SOURCE, log_tau_iqr


def _zero_recurrence(model, *names):
    with torch.no_grad():
        for name in names:
            getattr(model.cell, name).zero_()
    return model.double()


@pytest.mark.parametrize("layer_norm", [True, False])
def test_const_gate_without_recurrence_gives_the_log_leak(layer_norm):
    """W_h = 0: J_k = (1 - s) I exactly, so every exponent is log(1 - s), tau = -1/log(1 - s)."""
    torch.manual_seed(0)
    model = _zero_recurrence(build_model("const", 3, 5, layer_norm=layer_norm, const_s=0.2), "W_h")
    s = float(model.cell.s)  # 0.2 rounded to float32 when built
    lam = sequence_spectrum(model.cell, torch.randn(4, 12, 3, dtype=torch.float64))
    torch.testing.assert_close(lam, torch.full((4, 5), math.log(1 - s), dtype=torch.float64), rtol=0, atol=1e-10)
    tau = spectrum_table(lam.mean(0).numpy(), 5)["tau"]
    np.testing.assert_allclose(tau, -1 / math.log(1 - s), rtol=1e-10)


def test_diagonal_cell_gives_the_sorted_mean_log_leak_per_unit():
    """DiagGate with W_h = U_s = 0 (LayerNorm on): J_k = diag(1 - s_k), s_k input-dependent per
    unit, so per sequence lambda = mean over k = 1..T-1 of log(1 - s_k^q), sorted largest first."""
    torch.manual_seed(1)
    model = _zero_recurrence(build_model("diag", 3, 6, const_s=0.2), "W_h", "U_s")
    with torch.no_grad():
        model.cell.W_s.normal_()  # leaks that differ by unit and by step
    x = torch.randn(5, 16, 3, dtype=torch.float64)
    leak = model.cell.trace(x).leak[:, 1:]  # 1 - s_k, k = 1..T-1
    expected = torch.log(leak).mean(1).sort(-1, descending=True).values
    assert float((expected[:, 0] - expected[:, -1]).min()) > 0.1  # the oracle is not a constant
    torch.testing.assert_close(sequence_spectrum(model.cell, x), expected, rtol=0, atol=1e-10)


def _constant_jacobian(eigenvalues, seed):
    """A non-normal J = V diag(ev) V^-1 (V random, far from orthogonal)."""
    g = torch.Generator().manual_seed(seed)
    n = len(eigenvalues)
    V = torch.eye(n, dtype=torch.float64) + 0.8 * torch.randn(n, n, generator=g, dtype=torch.float64)
    return V @ torch.diag(torch.tensor(eigenvalues, dtype=torch.float64)) @ torch.linalg.inv(V)


EIGS = [(1.1, 0.95, -0.8, 0.6), (0.97, -0.9, 0.5, 0.3)]


def test_constant_jacobian_finite_product_is_its_qr_factor():
    """J_k Q_{k-1} = Q_k R_k telescopes: J^T = Q_T R_T ... R_1, so T lambda_q = log |R(J^T)[q, q]|
    exactly (the finite-T value), batched over two different J. The oracle's direct QR of J^T
    loses about log10 |ev_1 / ev_n|^T digits of its smallest R entries (5 at T = 12), hence 1e-9."""
    J = torch.stack([_constant_jacobian(e, seed) for seed, e in enumerate(EIGS)])
    T = 12
    lam = qr_exponents(J for _ in range(T))
    R = torch.linalg.qr(torch.linalg.matrix_power(J, T)).R
    exact = torch.log(torch.diagonal(R, dim1=-2, dim2=-1).abs()) / T
    assert any(np.linalg.norm((J[i] @ J[i].T - J[i].T @ J[i]).numpy()) > 0.1 for i in range(2))  # non-normal
    torch.testing.assert_close(lam, exact, rtol=0, atol=1e-9)


def test_constant_jacobian_converges_to_the_log_moduli_of_its_eigenvalues():
    """lambda_q(T) = log |ev_q| + C_q / T + O(rho^T) (the QR aligns with the eigenvectors
    geometrically, rho = max |ev_{q+1} / ev_q| = 0.95 / 1.1 here), so the Richardson combination
    2 lambda(2T) - lambda(T) removes the O(1/T) alignment cost: at T = 400, rho^T ~ 1e-25, what
    is left is float64 rounding."""
    J = torch.stack([_constant_jacobian(e, seed) for seed, e in enumerate(EIGS)])
    truth = torch.log(torch.tensor(EIGS, dtype=torch.float64).abs())  # already largest |ev| first
    lam_t, lam_2t = (qr_exponents(J for _ in range(T)) for T in (400, 800))
    torch.testing.assert_close(2 * lam_2t - lam_t, truth, rtol=0, atol=1e-10)
    assert float((lam_t - truth).abs().max()) > 1e-4  # the 1/T term is real, and removed above


def test_spectrum_table_taus_and_leading_modes():
    t = spectrum_table(np.array([0.1, 0.0, -0.5, -2.0]), 2)
    np.testing.assert_array_equal(t["tau"], [np.inf, np.inf, 2.0, 0.5])
    assert t["leading"].tolist() == [True, True, False, False]


def test_lyapunov_checkpoint_lstm_has_2h_modes_and_claim_c_reads_the_leading_h(tmp_path):
    """The artifact of an LSTM checkpoint: 2H modes, mean over sequences of each run's sorted
    spectrum; claim (c)'s exact spread uses the H leading (slowest) modes."""
    D, H, T = 3, 4, 10
    torch.manual_seed(2)
    model = build_model("lstm", D, H)
    io.save_checkpoint({"model": model.state_dict(), "cell": "lstm",
                        "model_config": {"input_size": D, "hidden": H}}, tmp_path / "best.pt")
    x = np.random.default_rng(0).standard_normal((7, T, D)).astype(np.float32)
    io.save_array(x, tmp_path / "diag_x.npy")
    io.save_array(np.zeros((7, T), np.float32), tmp_path / "diag_y.npy")
    table = lyapunov_checkpoint(checkpoint=tmp_path / "best.pt", data_dir=tmp_path, sequences=5,
                                batch_size=2, keys={"model": "lstm", "seed": 2}, device="cpu")
    expected = sequence_spectrum(model.cell, torch.from_numpy(x[:5])).mean(0).numpy()
    assert list(table.columns) == ["model", "seed", "mode", "lambda", "tau", "leading"]
    np.testing.assert_allclose(table["lambda"], expected, rtol=0, atol=1e-5)  # float32 Jacobians, batches of 2 vs 5
    assert len(table) == 2 * H and table["leading"].sum() == H
    lead = table.loc[table["leading"], "tau"].to_numpy()
    q = np.quantile(np.log(lead), [0.25, 0.75])
    run = table.assign(optimizer="adamw")
    taus = TAU_SOURCE["exact"]({"lyapunov": run}, "exact")  # claim (c)'s exact tau_q: the H leading modes
    assert taus.index.names == ["model", "optimizer", "seed", "mode"] and len(taus) == H
    assert log_tau_iqr(taus) == pytest.approx(q[1] - q[0], abs=1e-12)
    assert q[1] - q[0] != pytest.approx(np.subtract(*np.quantile(np.log(table["tau"]), [0.75, 0.25])))


def test_lyapunov_checkpoint_batches_what_fits_and_the_spectrum_does_not_move(tmp_path, monkeypatch):
    """A stack whose Jacobians would not fit the bound is taken a few sequences at a time (here one:
    the bound lowered to one sequence's stored rows, T r n float32 with r = n less the windows'
    copied rows): the same spectrum as in one batch, to float32 rounding."""
    from learnwin.probing import lyapunov

    D, H, T = 3, 4, 10
    torch.manual_seed(3)
    cfg = {"input_size": D, "hidden": H, "layers": 2, "block": "hawk"}
    model = build_model("rglru", D, H, layers=2, block="hawk")
    io.save_checkpoint({"model": model.state_dict(), "cell": "rglru", "model_config": cfg}, tmp_path / "best.pt")
    x = np.random.default_rng(0).standard_normal((5, T, D)).astype(np.float32)
    io.save_array(x, tmp_path / "diag_x.npy")
    io.save_array(np.zeros((5, T), np.float32), tmp_path / "diag_y.npy")
    run = dict(checkpoint=tmp_path / "best.pt", data_dir=tmp_path, sequences=5, batch_size=8, keys={"model": "rglru"})
    whole = lyapunov_checkpoint(**run)
    n, copied = model.cell.state_width, sum(length for *_, length in model.cell.copied())
    batches = []
    spectrum = lyapunov.sequence_spectrum
    monkeypatch.setattr(lyapunov, "sequence_spectrum", lambda cell, x: batches.append(len(x)) or spectrum(cell, x))
    monkeypatch.setattr(lyapunov, "EXACT_JACOBIAN_BYTES", T * (n - copied) * n * 4)
    parts = lyapunov_checkpoint(**run)
    assert batches == [1] * 5 and copied > 0
    np.testing.assert_allclose(parts["lambda"], whole["lambda"], rtol=0, atol=1e-5)
    assert len(whole) == n and whole["leading"].sum() == model.cell.hidden_size

