"""Gradient snapshot of one checkpoint: envelope, per-unit rates, psi and S (docs/method.md §4-5, §7b).

:func:`probe` works on any cell that implements the interface of :mod:`learnwin.models.cells`
(``trace``, ``forward -> (hidden, transported)``, ``hidden_size``) plus a readout weight, so a
user's own gated cell can be measured without the workflow. :func:`snapshot_checkpoint` is the
workflow stage: it rebuilds a trained model and its optimizer state from a checkpoint and
streams the diag split through :func:`probe` in batches, so RAM is bounded by the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from learnwin.infra import io, registry
from learnwin.infra.config import TRANSPORTS, transports_of
from learnwin.models.cells import checkpoint_model
from learnwin.models.state import layout_of
from learnwin.probing.detect import psi_diagonal, psi_frame, random_directions, tangents
from learnwin.probing.envelope import (
    DiagonalTransport,
    EnvelopeAccumulator,
    chunk_budget,
    lag_chunks,
    rate_matrix,
    receiving_times,
    take_times,
    trace_rate,
    unit_magnitude,
)
from learnwin.probing.exact_transport import ExactAccumulator, add_batch


def probe(
    cell: torch.nn.Module,
    w_out: Tensor,
    batches: Iterable[tuple[Tensor, Tensor, Tensor]],
    lags: Sequence[int],
    *,
    lr: float,
    rates: Tensor | None = None,
    order: int = 1,
    times_per_lag: int = 0,
    directions: dict[str, Tensor] | None = None,
    keep_directions: bool = False,
    transport: str | Sequence[str] = "diagonal",
    exact_sequences: int = 64,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Envelope (per lag), units (per unit and lag), psi (per lag and sequence) and total tables.

    ``batches`` yields (x (B, T, D), y (B, T), y_hat (B, T)); ``rates`` is the H x H
    per-parameter rate matrix of an adaptive optimizer, or a list of them, one per layer (None:
    Lambda = lr; :func:`rates_of`); ``times_per_lag`` is
    the number of receiving times per lag of the envelope and per-unit rates (0: all; docs/method.md
    §4); psi always averages over every receiving time (docs/method.md §5). ``directions`` maps cell
    parameter names to (K, *shape) tangent directions (None: empty psi and total). The total
    holds S_n = sum over l = 0..T-1 of psi_n(l) per sequence (docs/method.md §7b, pooled).
    ``transport`` (docs/method.md §4b): ``diagonal``, ``exact`` or both; every table carries a
    ``transport`` column, and both share one forward pass and one tangent pass per batch. The
    exact envelope's secondary functionals use the first ``exact_sequences`` sequences.
    """
    names = transports_of(transport)
    if directions is not None and not keep_directions:  # tangents are linear in the direction
        directions = {n: d.mean(0, keepdim=True) for n, d in directions.items()}
    lag_t = torch.as_tensor(list(lags), dtype=torch.long)
    diag = EnvelopeAccumulator(lags, cell.hidden_size, lr)
    exact = None
    rows = {n: ([], []) for n in names}  # transport -> (psi rows, total rows)
    offset = 0
    layout = layout_of(cell)
    for x, y, y_hat in batches:
        trace = cell.trace(x)
        lam = trace_rate(trace, rates, lr, cell.hidden_size)
        B, T, H = lam.shape
        work = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 models: tests
        budget = chunk_budget(x.device)
        delta, src = layout.output_sources(x, trace.transported, y_hat - y, w_out)  # the readout's error
        v = None
        if directions is not None:  # tangents of the full state; the transported state is its last block
            v = tangents(cell, x, directions, layout.full_state)
            v = v if keep_directions else v[0]
        psi = {}
        if "diagonal" in names:
            transport_d = DiagonalTransport(trace, order, work)
            t_all, k_all, mask_all = receiving_times(lag_t.to(x.device), T, times_per_lag)
            start = 0
            for chunk in lag_chunks(lags, B * t_all.shape[1] * trace.leak.shape[-1], budget):
                idx = slice(start, start + len(chunk))
                start += len(chunk)
                t, k, mask = t_all[idx], k_all[idx], mask_all[idx]
                g0, g = (unit_magnitude(gamma, H) for gamma in transport_d.gamma(t, k, mask))
                diag.add(idx, g0, g, take_times(lam.to(work), k), mask, order)
            if v is not None:
                v_moved = layout.transported(v)
                v_moved = v_moved.to(transport_d.dtype if v_moved.is_complex() else work)
                psi["diagonal"] = psi_diagonal(transport_d, lam.to(work), delta.to(work), v_moved, budget)
        if "exact" in names:
            if exact is None:
                exact = ExactAccumulator(lags, T, H, times_per_lag, device=x.device)
            z = layout.full_state(trace.hidden, trace.transported)
            n_matrix = min(B, max(0, exact_sequences - offset))
            psi_x = add_batch(exact, cell, x, z, lam.to(x.dtype), delta.to(x.dtype),
                              None if v is None else v.to(x.dtype), n_matrix, trace.receive, src)
            if psi_x is not None:
                psi["exact"] = psi_x
        for name, p in psi.items():  # p: (..., B, T) at every lag
            rows[name][0].append(psi_frame(p[..., lag_t.to(p.device)].cpu().numpy(), lags, offset))
            rows[name][1].append(_total_frame((p.mean(0) if keep_directions else p).sum(-1).cpu().numpy(), offset))
        offset += B
    tables = []
    for name in names:
        if name == "diagonal":
            env, units = diag.tables(order)
        else:
            env, units = exact.tables()
        psi_rows, total_rows = rows[name]
        psi_df = pd.concat(psi_rows, ignore_index=True) if psi_rows else pd.DataFrame(
            {"lag": np.zeros(0, np.int64), "sequence": np.zeros(0, np.int64), "psi": []})
        total_df = pd.concat(total_rows, ignore_index=True) if total_rows else _total_frame(np.zeros(0), 0)
        tables.append([_with_transport(df, name) for df in (env, units, psi_df, total_df)])
    return tuple(pd.concat(parts, ignore_index=True) for parts in zip(*tables))


def _with_transport(df: pd.DataFrame, name: str) -> pd.DataFrame:
    df.insert(0, "transport", name)
    return df


def _total_frame(total: np.ndarray, offset: int) -> pd.DataFrame:
    """Rows (sequence, S) from a (B,) array of S_n."""
    return pd.DataFrame({"sequence": np.arange(len(total), dtype=np.int64) + offset, "S": total})


def _sorted(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return df.sort_values(keys, kind="stable").reset_index(drop=True)


def snapshot_checkpoint(*, checkpoint: str | Path, data_dir: str | Path, device: str = "cpu",
                        **kwargs) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """:func:`snapshot_state` of a checkpoint file on the diag split of ``data_dir``."""
    x_all, y_all = io.load_split(data_dir, "diag")
    return snapshot_state(io.load_checkpoint(checkpoint, map_location=device), x_all, y_all, device=device,
                          **kwargs)


def snapshot_state(
    state: dict,
    x_all: np.ndarray,
    y_all: np.ndarray,
    *,
    lags: Sequence[int],
    order: int,
    times_per_lag: int,
    directions: int,
    batch_size: int,
    keep_directions: bool,
    keys: dict,
    device: str = "cpu",
    transport: str | Sequence[str] = "diagonal",
    exact_sequences: int = 64,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Envelope, units, psi and total tables of one checkpoint ``state`` (as saved by
    :func:`learnwin.models.train.checkpoint`) on held-out inputs ``x_all`` (n, T, D) and targets
    ``y_all`` (n, T), with run keys.

    ``transport`` (docs/method.md §4b): ``diagonal``, ``exact`` or a list of them; every table holds
    the rows of each listed transport, tagged by a ``transport`` column. With exact, one probe
    computes both transports (shared forward pass) and the exact rows of the envelope keep the
    diagonal path's columns next to f, f_diag_entries and f_norm (:func:`_one_transport`).
    """
    names = transports_of(transport)
    if state.get("diverged"):  # a tombstone of a diverged run: NaN tables, same shape
        registry.load_cells(state["model_config"].get("cells_module"))
        units = registry.units(state["model_config"], registry.CELLS[state.get("cell", keys["model"])])
        return _with_keys(_listed(_nan_tables(lags, units, x_all.shape[0], TRANSPORTS), names), keys)
    model = checkpoint_model(state, device)
    cell = model.cell
    rates = rates_of(model, state["optimizer_name"], state["optimizer"], state["hparams"])
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
    env, units, psi, total = probe(cell, w_out, batches(), lags, lr=lr, rates=rates, order=order,
                                   times_per_lag=times_per_lag, directions=cell_dirs, keep_directions=keep_directions,
                                   transport=TRANSPORTS if "exact" in names else names,
                                   exact_sequences=exact_sequences)
    return _with_keys(_listed((env, units, psi, total), names), keys)


def rates_of(model: torch.nn.Module, optimizer: str, optimizer_state: dict, hparams: dict):
    """The rate matrices of :func:`learnwin.probing.envelope.rate_matrix`, one per layer over its
    recurrent weights (:func:`learnwin.models.state.rate_groups`, docs/method.md §2c); None where
    Lambda is the plain lr."""
    rates = [rate_matrix(model, [f"cell.{n}" for n in group], optimizer, optimizer_state, hparams)
             for group in model.cell.rate_groups()]
    if any(r is None for r in rates):
        return None
    return rates


def _listed(tables, names: tuple[str, ...]):
    """The rows of every transport in ``names`` (:func:`_one_transport` each), stacked; in the
    envelope the diagonal rows have NaN f_diag_entries and f_norm (the exact path's functionals)."""
    parts = [_one_transport(tables, name) for name in names]
    return tuple(pd.concat(p, ignore_index=True) for p in zip(*parts))


def _one_transport(tables, transport: str):
    """The rows of ``transport``; under exact the envelope also carries the diagonal path's columns
    (f_diagonal = its f, and f_gates, f_order0/1, lambda_mean/std; ratio = f / f_gates)."""
    env, units, psi, total = (df[df["transport"] == transport].reset_index(drop=True) for df in tables)
    diag = tables[0][tables[0]["transport"] == "diagonal"].set_index("lag")
    gate_cols = ["f_gates", "f_order0", "f_order1", "ratio", "lambda_mean", "lambda_std"]
    if transport == "exact":
        env = env[["transport", "lag", "f", "f_geo", "f_diag_entries", "f_norm"]].copy()
        lag = env["lag"].to_numpy()
        env["f_diagonal"] = diag.loc[lag, "f"].to_numpy()
        for col in ("f_gates", "f_order0", "f_order1", "lambda_mean", "lambda_std"):
            env[col] = diag.loc[lag, col].to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            env["ratio"] = np.where(env["f_gates"] > 0, env["f"] / env["f_gates"], np.nan)
    else:
        env = env[["transport", "lag", "f", "f_geo", *gate_cols]].copy()
        env["f_diagonal"] = env["f"]
    return env, units, psi, total


def _with_keys(tables, keys: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run-key columns first, rows in a fixed order."""
    env, units, psi, total = tables
    for df in tables:
        for col, value in reversed(list(keys.items())):
            df.insert(0, col, value)
    return (_sorted(env, ["transport", "lag"]), _sorted(units, ["transport", "unit", "lag"]),
            _sorted(psi, [c for c in ("transport", "lag", "sequence", "direction") if c in psi.columns]),
            _sorted(total, ["transport", "sequence"]))


def _nan_tables(lags: Sequence[int], hidden: int, n_seq: int, names: tuple[str, ...]):
    """Envelope, units, psi and total tables of a diverged run: every value NaN, per transport."""
    tables = []
    for name in names:
        if name == "diagonal":
            env, units = EnvelopeAccumulator(lags, hidden, lr=1.0).tables(order=1)
        else:
            env, units = ExactAccumulator(lags, max(lags) + 1, hidden, times_per_lag=0).tables()
        env[env.columns.drop("lag")] = np.nan
        units[["mu_abs", "tau"]] = np.nan
        psi = psi_frame(np.full((n_seq, len(lags)), np.nan), lags, 0)
        tables.append([_with_transport(df, name) for df in (env, units, psi, _total_frame(np.full(n_seq, np.nan), 0))])
    return tuple(pd.concat(parts, ignore_index=True) for parts in zip(*tables))
