"""A synthetic run whose claim verdicts (docs/method.md §8b) are known, on top of tests/synthetic.py.

Changes to the `best` snapshot of synthetic.write_artifacts (lags 1..16, seeds 1 and 2):

- decay: gru's per-seed fits are learnwin.stats.decay fits of f = l^-1.5 (3 % noise): power-law-like;
  const keeps synthetic.py's exponential rows (weight 1 on exp);
- units: 8 units, tau = tau_0 r^(u - 3) for u < 7 and inf, so the IQR of log tau is 3.5 log r
  (r = 2 "wide", 1.1 "narrow"): gru AdamW wide / SGD narrow, const the other way round;
- envelope: SGD's tau is 2x AdamW's for const (SGD slower), 0.5x for gru;
- H_N.parquet with noise: per_lag const = round(1 + 1.2 s log N), gru = round(0.3 s N^0.35)
  (s = 1 + 0.05 (seed - 1)); pooled const reaches the lag-grid maximum 16 after two points
  (censored), gru is flat at 8;
- master.parquet with noise: per_lag slope 0.3 [0.2, 0.4]; pooled slope 1 + 0.02 seed with CI
  +- 0.1, except gru/sgd seed 2, slope 1.3 [1.2, 1.4];
- summary.parquet: val_r2 = VAL_R2[optimizer] + 0.02 seed; exponents.parquet: a = 0.9 + 0.1 seed,
  b = 1.2 + 0.1 seed (CIs +- 0.05), n_significant = 10 + seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import synthetic as syn
import yaml

from learnwin.infra import io, layout
from learnwin.report import findings
from learnwin.stats import claims
from learnwin.stats.decay import fit_envelopes

N_GRID = 2 ** np.arange(4, 17)
VAL_R2 = {"adamw": 0.5, "sgd": 0.2}
SPREAD = {("adamw", "gru"): 2.0, ("sgd", "gru"): 1.1, ("adamw", "const"): 1.1, ("sgd", "const"): 2.0}
SGD_TAU = {"const": 2.0, "gru": 0.5}
TRANSPORT = "diagonal"  # the transport of the run's tables (their `transport` column, as the stages write it)
FUNCTIONAL = "gamma"  # its envelope functional (learnwin.stats.decay.PRIMARY)


def seed_scale(seed: int) -> float:
    return 1 + 0.05 * (seed - 1)


def h_n(model: str, noise: str, seed: int) -> np.ndarray:
    N = N_GRID.astype(float)
    if noise == "per_lag":
        h = 1 + 1.2 * seed_scale(seed) * np.log(N) if model == "const" else 0.3 * seed_scale(seed) * N ** 0.35
        return np.round(h).astype(np.int64)
    if model == "const":
        return np.select([N < 256, N == 256, N == 512], [0, 6, 12], 16)
    return np.where(N < 64, 0, 8)


def master_row(model: str, opt: str, seed: int, noise: str) -> tuple[float, float, float]:
    if noise == "per_lag":
        return 0.3, 0.2, 0.4
    slope = 1.7 if (model, opt, seed) == ("gru", "sgd", 2) else 1 + 0.02 * seed  # 1.7: outside the band
    return slope, slope - 0.1, slope + 0.1


def write_claim_run(root: str | Path, layers: int = 1) -> dict:
    """Write the run under ``root/results``; return its models, optimizers, seeds and tables.
    ``layers``: the model config's layers in its provenance (units layer-major: a stack of that many)."""
    res = Path(root) / "results"
    syn.write_artifacts(root)
    layout.under(res, layout.PROVENANCE).write_text(yaml.safe_dump({"config": {"model": {"layers": layers}}}))
    keys = [(m, o, s) for o in syn.OPTIMIZERS for m in syn.MODELS for s in syn.SEEDS]
    io.write_table(pd.DataFrame([dict(model=m, optimizer=o, seed=s, epoch="best", status="ok",
                                      val_r2=VAL_R2[o] + 0.02 * s) for m, o, s in keys]),
                   res / "summary.parquet", "summary")
    lag = syn.LAGS.astype(float)
    for o in syn.OPTIMIZERS:
        env = pd.concat([pd.DataFrame(dict(
            model="gru", optimizer=o, epoch="best", seed=s, transport=TRANSPORT, lag=lag,
            f=lag ** -1.5 * np.exp(0.03 * np.random.default_rng(s).standard_normal(lag.size))))
            for s in syn.SEEDS])
        io.write_table(fit_envelopes(env, min_points=8, trim=0, bootstrap=20, block=5, seed=0), res / f"decay/{o}/gru/epochbest.parquet", "decay")
    for m, o, s in keys:
        snap = res / f"snapshots/{o}/{m}/seed{s}/epochbest"
        tau0 = syn.tau_of(m, s, "best")
        unit_tau = np.r_[tau0 * SPREAD[(o, m)] ** (np.arange(7) - 3.0), np.inf]
        units = pd.DataFrame([dict(model=m, optimizer=o, seed=s, epoch="best", transport=TRANSPORT, unit=u, lag=int(l),
                                   mu_abs=np.exp(-l / t), tau=t) for u, t in enumerate(unit_tau) for l in syn.LAGS])
        io.write_table(units, snap / "units.parquet", "units")
        mode_tau = np.r_[unit_tau[::-1], np.full(8, 1e-3)]  # the claims' input; (c) reads it under exact only
        io.write_table(pd.DataFrame(dict(model=m, optimizer=o, seed=s, epoch="best", mode=np.arange(16),
                                         **{"lambda": -1 / mode_tau}, tau=mode_tau, leading=np.arange(16) < 8)),
                       snap / "lyapunov.parquet", "lyapunov")
        if o == "sgd":
            env = io.read_table(snap / "envelope.parquet", "envelope")
            env["f"] = syn.AMP[o] * np.exp(-env["lag"] / (SGD_TAU[m] * tau0))
            io.write_table(env, snap / "envelope.parquet", "envelope")
    rows = [dict(model=m, optimizer=o, seed=s, epoch=e, transport=TRANSPORT, noise=nz, N=n, H_N=h)
            for m, o, s in keys for nz in ("per_lag", "pooled") for e in ("0", "best")
            for n, h in zip(N_GRID, h_n(m, nz, s) if e == "best" else np.full(N_GRID.size, 3))]
    H = pd.DataFrame(rows)
    io.write_table(H, res / "stats/H_N.parquet", "H_N")
    g = H.groupby(["model", "optimizer", "epoch", "transport", "noise", "N"])["H_N"]
    agg = g.agg(n_seeds="count", mean="mean", std="std", median="median").reset_index()
    agg = agg.assign(q25=g.quantile(0.25).to_numpy(), q75=g.quantile(0.75).to_numpy(),
                     predicted=agg["N"].map(lambda n: np.log2(n)), law="exp")
    io.write_table(agg, res / "stats/H_N_agg.parquet", "H_N")
    master = pd.DataFrame([dict(model=m, optimizer=o, seed=s, epoch="best", transport=TRANSPORT, noise=nz,
                                **dict(zip(["slope", "slope_lo", "slope_hi"], master_row(m, o, s, nz))),
                                intercept=0.0, r2=0.9, n_points=10, flag="")
                           for m, o, s in keys for nz in ("per_lag", "pooled")])
    io.write_table(master, res / "stats/master.parquet", "master")
    exps = pd.DataFrame([dict(model=m, optimizer=o, seed=s, epoch="best", transport=TRANSPORT, noise=nz, a=0.9 + 0.1 * s,
                              a_lo=0.85 + 0.1 * s, a_hi=0.95 + 0.1 * s, b=1.2 + 0.1 * s, b_lo=1.15 + 0.1 * s,
                              b_hi=1.25 + 0.1 * s, n_significant=10 + s)
                         for m, o, s in keys for nz in ("per_lag", "pooled")])
    if "exponents" in io.SCHEMA_VERSIONS:
        io.write_table(exps, res / "stats/exponents.parquet", "exponents")
    else:
        exps.to_parquet(res / "stats/exponents.parquet")
    spec = dict(models=list(syn.MODELS), optimizers=list(syn.OPTIMIZERS), seeds=list(syn.SEEDS),
                H_N=H, H_N_agg=agg, master=master, exponents=exps)
    write_claims(res, spec)
    return spec


def write_claims(results: Path, spec: dict, transport: str = TRANSPORT) -> pd.DataFrame:
    """claims.parquet, findings.md and claims.html of the run in ``results``, as the claims rule
    writes them (workflow/scripts/write_claims.py); returns the verdict table."""
    files = claims.inputs(results, spec["models"], spec["optimizers"], spec["seeds"], "best")
    table = claims.claim_table(files, "best")
    table["transport"] = transport  # another label: a stored table that differs from what the run's tables give
    io.write_table(table, layout.under(results, layout.CLAIMS["parquet"]), "claims")
    findings.write(table, findings=layout.under(results, layout.CLAIMS["findings"]),
                   html_path=layout.under(results, layout.CLAIMS["html"]))
    return table


def expected_claims() -> pd.DataFrame:
    """The verdicts of the run above, worked out by hand from its design."""
    rows = []
    for o in syn.OPTIMIZERS:
        rows += [("a", "envelope class", "const", o, "-", "exponential", 2, 2, True),
                 ("a", "envelope class", "gru", o, "-", "power-law-like", 2, 2, True),
                 ("b", "H_N growth", "const", o, "per_lag", "logarithmic", 2, 2, True),
                 ("b", "H_N growth", "gru", o, "per_lag", "power", 2, 2, True),
                 ("b", "H_N growth", "const", o, "pooled", "censored", 0, 2, False),
                 ("b", "H_N growth", "gru", o, "pooled", "flat", 0, 2, False)]
        for m in syn.MODELS:
            rows.append(("d", "master slope CI", m, o, "per_lag", "excludes 1", 0, 2, False))
            split = (m, o) == ("gru", "sgd")
            rows.append(("d", "master slope CI", m, o, "pooled", "split" if split else "within band",
                         1 if split else 2, 2, not split))
    rows += [("c", "log tau_q IQR", "const", "adamw vs sgd", "-", "adamw not broader", 0, 2, False),
             ("c", "tau_env", "const", "adamw vs sgd", "-", "adamw not slower", 0, 2, False),
             ("c", "log tau_q IQR", "gru", "adamw vs sgd", "-", "adamw broader", 2, 2, True),
             ("c", "tau_env", "gru", "adamw vs sgd", "-", "adamw slower", 2, 2, True)]
    return pd.DataFrame(rows, columns=["claim", "check", "model", "optimizer", "noise", "verdict", "k", "n",
                                       "holds"]).assign(transport=TRANSPORT, functional=FUNCTIONAL)
