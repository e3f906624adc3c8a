"""A reduced version of the default science: the robust parts of the paper's claims.

ConstGate's envelope is exponential (its leak is fixed), so the decay regression must select
the exponential law; DiagGate learns per-unit gates, so its tau_q spectrum is broader than
ConstGate's, whose units all sit near -1/log(1 - s). Checked across seeds.
"""

import numpy as np
import pytest
import torch

from learnwin.infra import io
from learnwin.models.train import train_run
from learnwin.probing.snapshot import snapshot_checkpoint
from learnwin.stats.decay import fit_envelopes
from learnwin.tasks.splits import write_splits

TASK = dict(T=40, D=4, lags=[3, 6, 12], coefs=[0.6, 0.5, 0.4], noise_std=0.2,
            n_train=128, n_val=32, n_diag=64)
MODEL = dict(hidden=12, layer_norm=True, const_s=0.1, gru_init_update=0.1, lstm_init_forget=0.5, gate_init="paper")
LAGS = list(range(1, 31))


def _snapshot(tmp_path, model, seed):
    data = tmp_path / f"data{seed}"
    if not data.exists():
        write_splits(seed, TASK, data)
    out = tmp_path / f"{model}{seed}"
    torch.set_num_threads(1)
    train_run(data_dir=data, out_dir=out, model=model, optimizer="adamw", seed=seed, model_config=MODEL,
              optim_config={"lr": 0.01, "weight_decay": 1e-4},
              train_config=dict(epochs=8, batch_size=16, grad_clip=1.0, r2_subset=32), snapshot_epochs=[8])
    keys = dict(model=model, optimizer="adamw", seed=seed, epoch="8")
    env, units, _, _ = snapshot_checkpoint(checkpoint=out / "epoch8.pt", data_dir=data, lags=LAGS, order=1,
                                        times_per_lag=0, directions=1, batch_size=64, keep_directions=False,
                                        keys=keys)
    return env, units


@pytest.mark.parametrize("seed", [2, 12])
def test_const_envelope_is_exponential_and_diag_tau_spectrum_is_broader(tmp_path, seed):
    env_c, units_c = _snapshot(tmp_path, "const", seed)
    _, units_d = _snapshot(tmp_path, "diag", seed)
    fits = fit_envelopes(env_c, min_points=8, trim=0, bootstrap=20, block=3, seed=0)
    chosen = fits[fits["selected"] & (fits["scope"] == "mean")]
    assert chosen["law"].tolist() == ["exp"]
    tau_fit = float(chosen["scale"].iloc[0])
    assert tau_fit == pytest.approx(-1 / np.log(1 - MODEL["const_s"]), rel=0.25)

    def iqr(units):
        tau = units.drop_duplicates("unit")["tau"].to_numpy()
        tau = tau[np.isfinite(tau)]
        return np.subtract(*np.percentile(tau, [75, 25]))

    assert iqr(units_d) > 2 * iqr(units_c)
    io.write_table(env_c, tmp_path / "envelope.parquet", "envelope")  # the stage artifact round-trips
    assert io.read_table(tmp_path / "envelope.parquet", "envelope")["f"].dtype == np.float32
