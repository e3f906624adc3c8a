"""Print the markdown tables of docs/results.md from a finished run's Parquet artifacts.

    python experiments/results_tables.py RESULTS_DIR [--epoch best]
    python experiments/results_tables.py RESULTS_DIR --keep data/runs/NAME   # keep its tables, print from them

``--keep`` copies the run's tables into a data folder (the results layout, without
:data:`NOT_KEPT`: the data, checkpoints, the snapshots' psi and total, figures, logs and HTML, none
of which the tables or the claims read; 4 MB for the default run), so that a page of its printout is
regenerated from the committed copy (experiments/data_pages.py).

RESULTS_DIR is a finished run's results folder (learnwin.infra.layout). The runs are the rows of summary.parquet with status
"ok". Tables, per (model, optimizer): val R^2 (mean ± sd over seeds), the decay class selected
for the seed-mean envelope (docs/method.md §8) with its scale and 95 % CI, tau_env of the seed-mean
envelope; H_N (seed mean ± sd) at the smallest, middle and largest N per noise definition, with
the closed-form prediction at the largest N; the master-law slope with each seed's 95 % CI per
noise definition; the exponents a and b when the run has stats/exponents.parquet (docs/method.md §7b);
the decay lengths of the envelope, the diagonal envelope and the memory curve when every run has a
memory.parquet (docs/method.md §4b); the claim verdicts (docs/method.md §8b) at a glance from the
run's claims.parquet, then its findings.md (sentences, tables per claim, verdicts), both written by the
workflow's claims rule, not recomputed here; and the cost per rule from the run's Snakemake
benchmark TSVs when present.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from learnwin.infra import io, layout
from learnwin.infra.registry import CELLS, shape
from learnwin.report.findings import claims_at_a_glance
from learnwin.report.formatting import SCALE_NAME
from learnwin.report.summary import budgets
from learnwin.stats.claims import (
    WITHIN_BAND,
    at_epoch,
    decay_length,
    markdown,
    master_label,
    mean_sd,
    number,
)
from learnwin.stats.decay import FUNCTIONALS, primary
from learnwin.stats.layers import layer_envelopes

KEYS = ["model", "optimizer"]
#: What ``--keep`` leaves out of a results folder (glob patterns on the path inside it, or the name):
#: the data, figures and logs folders of the layout, checkpoints, the snapshots' psi and total, HTML.
NOT_KEPT = (*(f"{Path(p).relative_to(layout.ROOT).parts[0]}{os.sep}*" for p in (layout.DATA, layout.FIGURE, layout.LOGS)),
            "*.pt", "psi.parquet", "total.parquet", "*.html")


def _pm(values, digits: int = 2) -> str:
    mean, sd = mean_sd(pd.Series(values, dtype=float))
    return number(mean, digits) + ("" if np.isnan(sd) else f" ± {number(sd, digits)}")


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in the models' canonical order, then by optimizer, transport, noise and seed where present."""
    rank = {m: i for i, m in enumerate(CELLS)}
    cols = [c for c in ("model", "optimizer", "transport", "noise", "seed") if c in df]
    return df.sort_values(cols, key=lambda s: s.map(rank).fillna(len(rank)) if s.name == "model" else s,
                          kind="stable", ignore_index=True)


def _read(path: Path, artifact: str) -> pd.DataFrame:
    """An artifact through learnwin.infra.io, or plain Parquet while its schema is not registered."""
    return io.read_table(path, artifact) if artifact in io.SCHEMA_VERSIONS else pd.read_parquet(path)


def _snap(results: Path, optimizer: str, model: str, seed, epoch: str) -> Path:
    return layout.under(results, layout.SNAP, optimizer=optimizer, model=model, seed=seed, epoch=epoch)


def overview(results: Path, runs: pd.DataFrame, epoch: str) -> pd.DataFrame:
    """val R², each seed's best-validation epoch (the `best` checkpoint), and per transport the
    seed-mean envelope's decay class (its primary functional, docs/method.md §4b) with its scale,
    and tau_env, per (model, optimizer)."""
    rows = []
    for (m, o), g in runs.groupby(KEYS, sort=False):
        env = pd.concat([io.read_table(_snap(results, o, m, s, epoch) / "envelope.parquet", "envelope")
                         for s in g["seed"]])
        decay = primary(io.read_table(layout.under(results, layout.DECAY, optimizer=o, model=m, epoch=epoch),
                                      "decay"))
        curves = [io.read_table(layout.under(results, layout.RUN, optimizer=o, model=m, seed=s) / "curve.parquet", "curve") for s in g["seed"]]
        best = "/".join(str(int(c["epoch"][c["val_mse"].idxmin()])) for c in curves)
        for transport, e in env.groupby("transport", sort=False):
            mean_f = e.groupby("lag")["f"].mean()
            law = decay[(decay["transport"] == transport) & (decay["scope"] == "mean")
                        & decay["selected"].astype(bool)]
            if law.empty:
                name, scale = "none", "–"
            else:
                r = law.iloc[0]
                name = r["law"]
                scale = f"{SCALE_NAME[name]} = {number(r['scale'])} [{number(r['scale_lo'])}, {number(r['scale_hi'])}]"
            rows.append({"model": m, "optimizer": o, "seeds": len(g), "val R²": _pm(g["val_r2"]),
                         "best epoch per seed (of last)": f"{best} ({int(curves[0]['epoch'].max())})",
                         "transport": transport, "decay class (seed mean)": name, "scale [95 % CI]": scale,
                         "τ_env": number(decay_length(mean_f.index, mean_f.to_numpy()))})
    return pd.DataFrame(rows)


def window_table(H_agg: pd.DataFrame) -> pd.DataFrame:
    """H_N mean ± sd over seeds at three N, and the prediction at the largest, per noise definition."""
    grid = budgets(H_agg)
    rows = []
    for (m, o, transport, noise), g in H_agg.groupby([*KEYS, "transport", "noise"], sort=False):
        g = g.set_index("N")
        row = {"model": m, "optimizer": o, "transport": transport, "noise": noise}
        for n in grid:
            sd = g.loc[n, "std"]
            row[f"H_N at N = {n}"] = number(g.loc[n, "mean"], 1) + ("" if pd.isna(sd) else f" ± {number(sd, 1)}")
        row[f"predicted at N = {grid[-1]}"] = number(g.loc[grid[-1], "predicted"], 1)
        rows.append(row)
    return pd.DataFrame(rows)


def master_table(master: pd.DataFrame) -> pd.DataFrame:
    """Master-law slope (mean ± sd over seeds), seeds whose CI lies within the band 1 ± 0.5 of claim
    (d) (learnwin.stats.claims.master_label, docs/method.md §8b), and every seed's CI."""
    rows = []
    for (m, o, transport, noise), g in master.groupby([*KEYS, "transport", "noise"], sort=False):
        within = master_label(g["slope_lo"], g["slope_hi"]) == WITHIN_BAND
        rows.append({"model": m, "optimizer": o, "transport": transport, "noise": noise, "slope": _pm(g["slope"]),
                     "CI within 1 ± 0.5": f"{int(within.sum())}/{len(g)}",
                     "per seed: slope [95 % CI]": "; ".join(
                         f"{number(r.slope)} [{number(r.slope_lo)}, {number(r.slope_hi)}]" for r in g.itertuples())})
    return pd.DataFrame(rows)


def exponents_table(exps: pd.DataFrame) -> pd.DataFrame:
    """Exponents a (sigma ~ f^a) and b (m ~ f^b) per (model, optimizer, noise), over seeds."""
    rows = []
    for (m, o, transport, noise), g in exps.groupby([*KEYS, "transport", "noise"], sort=False):
        covers = (g["b_lo"] <= 1) & (g["b_hi"] >= 1)
        rows.append({"model": m, "optimizer": o, "transport": transport, "noise": noise,
                     "a": _pm(g["a"]), "b": _pm(g["b"]),
                     "b − a": _pm(g["b"] - g["a"]), "b CI covers 1": f"{int(covers.sum())}/{len(g)}",
                     "significant lags": _pm(g["n_significant"], 1)})
    return pd.DataFrame(rows)


def transport_table(results: Path, runs: pd.DataFrame, epoch: str) -> pd.DataFrame:
    """Decay lengths (tau_env, mean ± sd over seeds) of every functional of each transport the run
    computed (learnwin.stats.decay.FUNCTIONALS: the diagonal transport's gamma; the exact
    transport's signal, diagonal entries and norm, docs/method.md §4b) and of the memory curve
    mean |u . dy_t/dx_{t-l}| (memory.parquet)."""
    rows = []
    for (m, o), g in runs.groupby(KEYS, sort=False):
        per: dict[str, list] = {}
        for seed in g["seed"]:
            snap = _snap(results, o, m, seed, epoch)
            env = io.read_table(snap / "envelope.parquet", "envelope").sort_values("lag")
            for transport, e in env.groupby("transport", sort=False):
                for functional, col in FUNCTIONALS[transport].items():
                    per.setdefault(f"τ of {transport} {functional}", []).append(
                        decay_length(e["lag"], e[col].to_numpy()))
            mem = io.read_table(snap / "memory.parquet", "memory").sort_values("lag")
            per.setdefault("τ of memory curve", []).append(decay_length(mem["lag"], mem["m_mem_abs"].to_numpy()))
        rows.append({"model": m, "optimizer": o, **{k: _pm(v, 1) for k, v in per.items()}})
    return pd.DataFrame(rows)


def layer_table(results: Path, runs: pd.DataFrame, epoch: str, layers: int) -> pd.DataFrame:
    """Per (model, optimizer, transport) of a stack: the decay length tau_env (mean ± sd over seeds)
    of each layer's envelope, its units' mu_abs summed (learnwin.stats.layers.layer_envelopes),
    and of the stack's, their sum (docs/method.md §2c)."""
    rows = []
    for (m, o), g in runs.groupby(KEYS, sort=False):
        per: dict[str, dict[str, list]] = {}
        for seed in g["seed"]:
            units = io.read_table(_snap(results, o, m, seed, epoch) / "units.parquet", "units")
            for transport, u in layer_envelopes(units, layers).groupby("transport", sort=False):
                cols = per.setdefault(transport, {})
                for layer, e in u.groupby("layer"):
                    cols.setdefault(f"τ of layer {layer + 1}", []).append(decay_length(e["lag"], e["f"].to_numpy()))
                stack = u.groupby("lag")["f"].sum()
                cols.setdefault("τ of the stack", []).append(decay_length(stack.index, stack.to_numpy()))
        rows += [{"model": m, "optimizer": o, "transport": t, **{k: _pm(v, 1) for k, v in cols.items()}}
                 for t, cols in per.items()]
    return pd.DataFrame(rows)


def cost_table(results: Path) -> pd.DataFrame:
    """Per rule, from Snakemake's benchmark TSVs: jobs, mean wall and CPU seconds, max peak RSS."""
    rows = []
    for rule in sorted(p for p in layout.under(results, layout.BENCH).iterdir() if p.is_dir()):
        tsv = pd.concat([pd.read_csv(f, sep="\t") for f in sorted(rule.rglob("*.tsv"))])
        rows.append({"rule": rule.name, "jobs": len(tsv), "wall s per job": number(tsv["s"].mean(), 1),
                     "CPU s per job": number(tsv["cpu_time"].mean(), 1),
                     "peak RSS MB (max)": number(tsv["max_rss"].max(), 0)})
    return pd.DataFrame(rows)


def run_keys(results: Path) -> tuple[pd.DataFrame, list, list, list]:
    """The summary rows of the runs with status "ok" (canonical order), and their models,
    optimizers and seeds."""
    summary = io.read_table(layout.under(results, layout.SUMMARY["parquet"]), "summary")
    if "status" in summary:
        summary = summary[summary["status"] == "ok"]
    runs = _ordered(summary.drop_duplicates([*KEYS, "seed"]))  # one row per run (summary has one per transport)
    return runs, list(dict.fromkeys(runs["model"])), list(dict.fromkeys(runs["optimizer"])), sorted(set(runs["seed"]))


def tables(results: str | Path, epoch: str = "best") -> str:
    """All tables as one markdown text."""
    results = Path(results)
    runs = run_keys(results)[0]

    def in_run(table):
        return _ordered(at_epoch(table, epoch).merge(runs[KEYS].drop_duplicates()))

    H_agg = in_run(io.read_table(layout.under(results, layout.STATS["H_N_agg"]), "H_N"))
    master = in_run(io.read_table(layout.under(results, layout.STATS["master"]), "master").merge(runs[[*KEYS, "seed"]]))
    out = [f"## Results of {results} at epoch {epoch}", "",
           "### Training and envelope (mean ± sd over seeds)", "", markdown(overview(results, runs, epoch)), "",
           "### Learnability window H_N (seed mean ± sd)", "", markdown(window_table(H_agg)), "",
           "### Master-law slope", "", markdown(master_table(master)), ""]
    exponents = layout.under(results, layout.STATS["exponents"])
    if exponents.exists():
        exps = in_run(_read(exponents, "exponents"))
        out += ["### Exponents: m ~ f^b, sigma ~ f^a (mean ± sd over seeds)", "",
                markdown(exponents_table(exps)), ""]
    if all((_snap(results, o, m, s, epoch) / "memory.parquet").exists()
           for m, o, s in runs[[*KEYS, "seed"]].itertuples(index=False)):
        out += ["### Transport: decay lengths of each transport's functionals and of the memory curve", "",
                markdown(transport_table(results, runs, epoch)), ""]
    layers, _ = shape(yaml.safe_load(layout.under(results, layout.PROVENANCE).read_text())["config"]["model"])
    if layers > 1:
        out += ["### Layers: decay length of each layer's envelope and of the stack's (mean ± sd over seeds)", "",
                markdown(layer_table(results, runs, epoch, layers)), ""]
    claims = io.read_table(layout.under(results, layout.CLAIMS["parquet"]), "claims")
    findings = layout.under(results, layout.CLAIMS["findings"]).read_text()
    out += ["### Claims at a glance, every functional (k/n seeds agree with the expectation; ✓ = holds; *italics*: "
            "not scored)", "",
            markdown(claims_at_a_glance(claims)), "",
            "### Claims (docs/method.md §8b; the run's findings.md, which opens with the table of each "
            "transport's primary functional)", "",
            findings.replace("# Findings\n", "", 1).replace("\n## ", "\n#### "), ""]
    if layout.under(results, layout.BENCH).is_dir():
        out += ["### Cost per job (Snakemake benchmark TSVs)", "", markdown(cost_table(results)), ""]
    return "\n".join(out)


def keep(results: Path, dest: Path) -> list[Path]:
    """Copy the files of the results folder ``results`` but :data:`NOT_KEPT` into ``dest``, in the
    same layout; the copies."""
    out = []
    for src in sorted(p for p in results.rglob("*") if p.is_file()):
        rel = src.relative_to(results)
        if any(fnmatch(str(rel), pattern) or fnmatch(rel.name, pattern) for pattern in NOT_KEPT):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        out.append(Path(shutil.copyfile(src, dest / rel)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a finished run's results folder")
    ap.add_argument("--epoch", default="best", help="snapshot epoch (default: best)")
    ap.add_argument("--keep", metavar="DEST", help="copy the run's tables into DEST first and print from there")
    args = ap.parse_args(argv)
    results = args.results
    if args.keep:
        kept = keep(Path(results), Path(args.keep))
        print(f"{len(kept)} files into {args.keep}, {sum(p.stat().st_size for p in kept) / 1e6:.1f} MB", file=sys.stderr)
        results = args.keep
    print(tables(results, args.epoch))


if __name__ == "__main__":
    main()
