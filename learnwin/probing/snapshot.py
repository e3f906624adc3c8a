"""Gradient snapshot of one checkpoint: envelope, per-unit rates, psi and S (docs/method.md §4-5, §7b).

:func:`probe` works on any cell that implements the interface of :mod:`learnwin.models.cells`
(``trace``, ``forward -> (hidden, transported)``, ``hidden_size``) plus a readout weight, so a
user's own gated cell can be measured without the workflow. :func:`snapshot_checkpoint` is the
workflow stage: it rebuilds a trained model and its optimizer state from a checkpoint and
streams the diag split through :func:`probe` in batches, so memory is bounded by the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from learnwin.infra import io
from learnwin.models.cells import build_model
from learnwin.models.data import load_split
from learnwin.probing.detect import output_error, psi_all_lags, psi_frame, random_directions, tangents
from learnwin.probing.envelope import (
    EnvelopeAccumulator,
    Transport,
    base_rate,
    lag_chunks,
    rate_matrix,
    receiving_times,
    take_times,
)
from learnwin.probing.exact_transport import probe_exact


def probe(
    cell: torch.nn.Module,
    w_out: Tensor,
    batches: Iterable[tuple[Tensor, Tensor, Tensor]],
    lags: Sequence[int],
    *,
    lr: float,
    rates: Tensor | None = None,
    order: int = 1,
    windows: int = 0,
    directions: dict[str, Tensor] | None = None,
    keep_directions: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Envelope (per lag), units (per unit and lag), psi (per lag and sequence) and total tables.

    ``batches`` yields (x (B, T, D), y (B, T), y_hat (B, T)); ``rates`` is the H x H
    per-parameter rate matrix of an adaptive optimizer (None: Lambda = lr); ``windows`` is
    the number of receiving times per lag of the envelope and per-unit rates (0: all; docs/method.md
    §4); psi always averages over every receiving time (docs/method.md §5). ``directions`` maps cell
    parameter names to (K, *shape) tangent directions (None: empty psi and total). The total
    holds S_n = sum over l = 0..T-1 of psi_n(l) per sequence (docs/method.md §7b, pooled).
    """
    if directions is not None and not keep_directions:  # tangents are linear in the direction
        directions = {n: d.mean(0, keepdim=True) for n, d in directions.items()}
    lag_t = torch.as_tensor(list(lags), dtype=torch.long)
    acc = EnvelopeAccumulator(lags, cell.hidden_size, lr)
    psi_rows, total_rows, offset = [], [], 0
    for x, y, y_hat in batches:
        trace = cell.trace(x)
        lam = base_rate(trace.presynaptic, rates, lr).float()
        transport = Transport(trace, order)
        B, T, H = lam.shape
        t_all, k_all, mask_all = receiving_times(lag_t.to(x.device), T, windows)
        start = 0
        for chunk in lag_chunks(lags, B * t_all.shape[1] * H):
            idx = slice(start, start + len(chunk))
            start += len(chunk)
            t, k, mask = t_all[idx], k_all[idx], mask_all[idx]
            g0, g = transport.gamma(t, k, mask)
            acc.add(idx, g0, g, take_times(lam, k), mask, order)
        if directions is not None:
            delta = output_error(y_hat, y, w_out).float()
            v = tangents(cell, x, directions).float()
            psi = psi_all_lags(transport, lam, delta, v if keep_directions else v[0])  # (..., B, T)
            psi_rows.append(psi_frame(psi[..., lag_t.to(psi.device)].cpu().numpy(), lags, offset))
            total = psi.mean(0) if keep_directions else psi
            total_rows.append(_total_frame(total.sum(-1).cpu().numpy(), offset))
        offset += x.shape[0]
    env, units = acc.tables(order)
    psi_df = pd.concat(psi_rows, ignore_index=True) if psi_rows else pd.DataFrame(
        {"lag": [], "sequence": [], "psi": []})
    total_df = pd.concat(total_rows, ignore_index=True) if total_rows else _total_frame(np.zeros(0), 0)
    return env, units, psi_df, total_df


def _total_frame(total: np.ndarray, offset: int) -> pd.DataFrame:
    """Rows (sequence, S) from a (B,) array of S_n."""
    return pd.DataFrame({"sequence": np.arange(len(total), dtype=np.int64) + offset, "S": total})


def _sorted(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return df.sort_values(keys, kind="stable").reset_index(drop=True)


def snapshot_checkpoint(
    *,
    checkpoint: str | Path,
    data_dir: str | Path,
    lags: Sequence[int],
    order: int,
    windows: int,
    directions: int,
    batch_size: int,
    keep_directions: bool,
    keys: dict,
    device: str = "cpu",
    transport: str = "diagonal",
    exact_sequences: int = 64,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Envelope, units, psi and total tables of one checkpoint on the diag split, with run keys.

    ``transport`` = exact takes units, psi, total and the envelope's f and f_geo from
    :func:`learnwin.probing.exact_transport.probe_exact` (docs/method.md §4b); the diagonal envelope stays in
    ``f_diagonal`` (and f_gates, f_order0/1, lambda_mean/std stay diagonal-path quantities).
    """
    state = io.load_checkpoint(checkpoint, map_location=device)
    x_all, y_all = load_split(data_dir, "diag")
    if state.get("diverged"):  # a tombstone of a diverged run: NaN tables, same shape
        return _with_keys(_nan_tables(lags, state["model_config"]["hidden"], x_all.shape[0]), keys)
    model = build_model(state["cell"], **state["model_config"]).to(device)
    model.load_state_dict(state["model"])
    model.eval()
    cell = model.cell
    recurrent = [f"cell.{name}" for name in cell.recurrent_weights()]
    rates = rate_matrix(model, recurrent, state["optimizer_name"], state["optimizer"], state["hparams"])
    dirs = random_directions(model, directions, seed=int(keys["seed"]))
    cell_dirs = {n.removeprefix("cell."): d for n, d in dirs.items() if n.startswith("cell.")}

    def batches():
        for i in range(0, x_all.shape[0], batch_size):
            x = torch.from_numpy(np.array(x_all[i:i + batch_size])).to(device)
            y = torch.from_numpy(np.array(y_all[i:i + batch_size])).to(device)
            with torch.no_grad():
                y_hat = model(x)
            yield x, y, y_hat

    lr, w_out = state["hparams"]["lr"], model.W_out.detach()
    exact = transport == "exact"
    env, units, psi, total = probe(cell, w_out, batches(), lags, lr=lr, rates=rates, order=order,
                                   windows=windows, directions=None if exact else cell_dirs,
                                   keep_directions=keep_directions)
    env["f_diagonal"] = env["f"]
    if exact:
        env_x, units, psi, total = probe_exact(cell, w_out, batches(), lags, lr=lr, rates=rates,
                                               windows=windows, directions=cell_dirs,
                                               keep_directions=keep_directions,
                                               exact_sequences=exact_sequences)
        env["f"], env["f_geo"] = env_x["f"].to_numpy(), env_x["f_geo"].to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            env["ratio"] = np.where(env["f_gates"] > 0, env["f"] / env["f_gates"], np.nan)
    return _with_keys((env, units, psi, total), keys)


def _with_keys(tables, keys: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run-key columns first, rows in a fixed order."""
    env, units, psi, total = tables
    for df in tables:
        for col, value in reversed(list(keys.items())):
            df.insert(0, col, value)
    return (_sorted(env, ["lag"]), _sorted(units, ["unit", "lag"]),
            _sorted(psi, [c for c in ("lag", "sequence", "direction") if c in psi.columns]),
            _sorted(total, ["sequence"]))


def _nan_tables(lags: Sequence[int], hidden: int, n_seq: int):
    """Envelope, units, psi and total tables of a diverged run: every value NaN."""
    env, units = EnvelopeAccumulator(lags, hidden, lr=1.0).tables(order=1)
    env["f_diagonal"] = np.nan
    env[env.columns.drop("lag")] = np.nan
    units[["mu_abs", "tau"]] = np.nan
    psi = psi_frame(np.full((n_seq, len(lags)), np.nan), lags, 0)
    return env, units, psi, _total_frame(np.full(n_seq, np.nan), 0)
