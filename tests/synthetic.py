"""Synthetic artifacts with known values, in the layout and columns of docs/artifacts.md.

A 2 models x 2 optimizers x 2 seeds x 2 snapshot epochs grid. The envelope is exactly
f(l) = AMP[opt] exp(-l / tau) with tau = TAU[model] * (1 + 0.1 (seed - 1)) * EPOCH_SCALE[epoch];
the tail index is ALPHA[model] + 0.005 (l - 8) on reliable lags (the last lag is unreliable,
alpha = 2), so its median over reliable lags is ALPHA[model]; the sample complexity follows
the master law exactly, N* = C f^-kappa, so N_hat and H_N follow from the N grid. The
window, H_N, master and exponents tables hold the same values under both noise definitions
(column ``noise``, docs/method.md §7b); every lag is significant; the exponents are b = 1, a = 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from learnwin.infra.io import write_table

MODELS = ("const", "gru")
OPTIMIZERS = ("adamw", "sgd")
SEEDS = (1, 2)
EPOCHS = ("0", "best")
LAGS = np.arange(1, 17)
N_GRID = (16, 256, 4096, 65536)
TAU = {"const": 4.0, "gru": 8.0}
AMP = {"adamw": 1.0, "sgd": 0.5}
ALPHA = {"const": 1.6, "gru": 1.8}
EPOCH_SCALE = {"0": 0.5, "best": 1.0}
C = 10.0
UNITS = 4
CURVE_EPOCHS = 6
NOISES = ("per_lag", "pooled")


def tau_of(model: str, seed: int, epoch: str) -> float:
    return TAU[model] * (1 + 0.1 * (seed - 1)) * EPOCH_SCALE[epoch]


def final_val_r2(seed: int) -> float:
    return 0.5 + 0.05 * (CURVE_EPOCHS - 1) + 0.01 * seed


def _run_tables(opt: str, model: str, seed: int, epoch: str) -> dict[str, pd.DataFrame]:
    run = dict(model=model, optimizer=opt, seed=seed, epoch=epoch)  # memory, lyapunov: no transport column
    key = dict(**run, transport="diagonal")  # the others carry it, as a snapshot writes them
    tau = tau_of(model, seed, epoch)
    f = AMP[opt] * np.exp(-LAGS / tau)
    envelope = pd.DataFrame(
        dict(
            **key,
            lag=LAGS,
            f=f,
            f_geo=0.9 * f,
            f_gates=f / 2,
            f_order0=f,
            f_order1=f,
            ratio=np.full(len(LAGS), 2.0),
            lambda_mean=0.9,
            lambda_std=0.01,
            f_diagonal=f * np.exp(-LAGS / 10.0),
        )
    )
    unit_tau = [tau * (0.5 + 0.5 * u) for u in range(UNITS - 1)] + [np.inf]
    units = pd.DataFrame(
        [
            dict(
                **key,
                unit=u,
                lag=lag,
                mu_abs=AMP[opt] / UNITS * np.exp(-lag / t) if np.isfinite(t) else 0.1,
                tau=t,
            )
            for u, t in enumerate(unit_tau)
            for lag in LAGS
        ]
    )
    reliable = LAGS < LAGS[-1]
    alpha = np.where(reliable, ALPHA[model] + 0.005 * (LAGS - 8), 2.0)
    kappa = alpha / (alpha - 1)
    alpha_t = pd.DataFrame(
        dict(
            **key,
            lag=LAGS,
            n=1000,
            alpha=alpha,
            sigma=1.0,
            method=np.where(reliable, "ecf", "default"),
            alpha_ecf=alpha,
            sigma_ecf=1.0,
            alpha_mcc=alpha,
            alpha_mcc_lo=alpha - 0.05,
            alpha_mcc_hi=alpha + 0.05,
            sigma_mcc=1.0,
            reliable=reliable,
            agree=True,
            kappa=kappa,
            clipped=~reliable,
            flag=np.where(reliable, "", "n < min_samples"),
        )
    )
    n_star = C * f ** (-kappa)
    rows, h_n = [], []
    for N in N_GRID:
        grid = np.array(N_GRID, float)
        n_hat = np.array(
            [grid[grid >= ns].min() if (grid >= ns).any() else np.nan for ns in n_star]
        )
        for i, lag in enumerate(LAGS):
            rows.append(
                dict(
                    **key,
                    lag=lag,
                    N=N,
                    f=f[i],
                    m=0.1,
                    sigma=1.0,
                    alpha=alpha[i],
                    kappa=kappa[i],
                    reliable=reliable[i],
                    significant=True,
                    snr=20 * (N / n_star[i]) ** (1 / kappa[i]),
                    N_hat=n_hat[i],
                    N_star=n_star[i],
                    detected=N >= n_star[i],
                    eps_th=f[i] * (n_hat[i] / N) ** (1 / kappa[i]),
                )
            )
        ok = LAGS[n_hat <= N]
        h_n.append(dict(**key, N=N, H_N=int(ok.max()) if len(ok) else 0))
    window = pd.DataFrame(rows)
    master = pd.DataFrame(
        [
            dict(
                **key,
                slope=1.0,
                intercept=np.log(C),
                r2=0.98,
                slope_lo=0.9,
                slope_hi=1.1,
                n_points=int(np.isfinite(window.drop_duplicates("lag")["N_hat"]).sum()),
                n_significant=len(LAGS),
                flag="",
            )
        ]
    )
    exponents = pd.DataFrame(
        [dict(**key, b=1.0, b_lo=0.9, b_hi=1.1, a=0.0, a_lo=-0.1, a_hi=0.1, n_points=len(LAGS) - 1,
              n_significant=len(LAGS), flag="")]
    )
    return dict(
        envelope=envelope,
        units=units,
        # the exact transport's Lyapunov time scales (docs/method.md §4c): the units' spectrum
        lyapunov=pd.DataFrame(dict(**run, mode=np.arange(UNITS), **{"lambda": -1 / np.array(unit_tau)},
                                   tau=unit_tau, leading=True)),
        alpha=alpha_t,
        window=_per_noise(window),
        H_N=_per_noise(pd.DataFrame(h_n)),
        master=_per_noise(master),
        exponents=_per_noise(exponents),
        memory=pd.DataFrame(dict(**run, lag=LAGS, m_mem=0.5 * np.exp(-LAGS / tau),
                                 m_mem_abs=0.6 * np.exp(-LAGS / tau))),
    )


def _per_noise(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` once per noise definition, with the ``noise`` column after the run keys."""
    out = pd.concat([df.assign(noise=n) for n in NOISES], ignore_index=True)
    front = ["model", "optimizer", "seed", "epoch", "transport", "noise"]
    return out[front + [c for c in out.columns if c not in front]]


def _decay(opt: str, model: str, epoch: str) -> pd.DataFrame:
    rows = []
    scopes = {"mean": float(np.mean([tau_of(model, s, epoch) for s in SEEDS]))}
    scopes.update({f"seed{s}": tau_of(model, s, epoch) for s in SEEDS})
    for scope, tau in scopes.items():
        for law, selected in (("exp", True), ("power", False)):
            rows.append(
                dict(
                    model=model,
                    optimizer=opt,
                    epoch=epoch,
                    transport="diagonal",
                    functional="gamma",
                    scope=scope,
                    law=law,
                    n_params=2,
                    aic=-100.0 if selected else -50.0,
                    bic=-98.0 if selected else -48.0,
                    r2=0.999 if selected else 0.9,
                    weight=1.0 if selected else 0.0,
                    selected=selected,
                    ambiguous=False,
                    lag_min=1,
                    lag_max=16,
                    A=AMP[opt],
                    scale=tau if law == "exp" else 1.0,
                    scale_lo=0.9 * tau if law == "exp" else 0.8,
                    scale_hi=1.1 * tau if law == "exp" else 1.2,
                    l_c=np.nan,
                    k=np.nan,
                    floor=np.nan,
                )
            )
    return pd.DataFrame(rows)


def _curve(opt: str, model: str, seed: int) -> pd.DataFrame:
    epoch = np.arange(CURVE_EPOCHS)
    return pd.DataFrame(
        dict(
            model=model,
            optimizer=opt,
            seed=seed,
            epoch=epoch,
            train_mse=1 / (1 + epoch),
            train_r2=1 - 1 / (1 + epoch),
            val_mse=1.1 / (1 + epoch),
            val_r2=0.5 + 0.05 * epoch + 0.01 * seed,
            seconds=0.1,
        )
    )


def _agg(h_n: pd.DataFrame, decay: pd.DataFrame) -> pd.DataFrame:
    keys = ["model", "optimizer", "epoch", "transport", "noise", "N"]
    g = h_n.groupby(keys)["H_N"]
    agg = g.agg(n_seeds="count", mean="mean", std="std", median="median").reset_index()
    agg["q25"] = g.quantile(0.25).to_numpy()
    agg["q75"] = g.quantile(0.75).to_numpy()
    tau = decay[(decay["scope"] == "mean") & decay["selected"]].set_index(
        ["model", "optimizer", "epoch"]
    )["scale"]
    kappa = {m: ALPHA[m] / (ALPHA[m] - 1) for m in MODELS}
    agg["predicted"] = [
        max(0.0, tau[(m, o, e)] / kappa[m] * np.log(n / C))
        for m, o, e, n in agg[["model", "optimizer", "epoch", "N"]].itertuples(index=False)
    ]
    agg["law"] = "exp"
    return agg


def write_artifacts(root: str | Path) -> dict[str, pd.DataFrame]:
    """Write every artifact under ``root/results`` and return each one's stacked table."""
    res = Path(root) / "results"
    stacked: dict[str, list[pd.DataFrame]] = {}
    for opt in OPTIMIZERS:
        for model in MODELS:
            for seed in SEEDS:
                curve = _curve(opt, model, seed)
                write_table(curve, res / f"train/{opt}/{model}/seed{seed}/curve.parquet", "curve")
                stacked.setdefault("curve", []).append(curve)
                for epoch in EPOCHS:
                    for name, df in _run_tables(opt, model, seed, epoch).items():
                        write_table(
                            df,
                            res / f"snapshots/{opt}/{model}/seed{seed}/epoch{epoch}/{name}.parquet",
                            name,
                        )
                        stacked.setdefault(name, []).append(df)
            for epoch in EPOCHS:
                decay = _decay(opt, model, epoch)
                write_table(decay, res / f"decay/{opt}/{model}/epoch{epoch}.parquet", "decay")
                stacked.setdefault("decay", []).append(decay)
    tables = {name: pd.concat(dfs, ignore_index=True) for name, dfs in stacked.items()}
    tables["H_N_agg"] = _agg(tables["H_N"], tables["decay"])
    write_table(tables["H_N"], res / "stats/H_N.parquet", "H_N")
    write_table(tables["H_N_agg"], res / "stats/H_N_agg.parquet", "H_N")
    write_table(tables["master"], res / "stats/master.parquet", "master")
    write_table(tables["exponents"], res / "stats/exponents.parquet", "exponents")
    return tables
