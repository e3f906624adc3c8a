"""The results summary table and its one-paragraph reading (docs/method.md §3, §6-§8).

:func:`build_summary` joins the stored per-run results into one row per
(model, optimizer, seed, transport) at the figure epoch (docs/method.md §4b; the decay class is
that of the transport's primary functional, learnwin.stats.decay.PRIMARY): validation R^2 of that checkpoint and of the
last epoch, median tail index over
reliable lags, the decay class selected for that seed's envelope with its parameters, H_N
at the smallest, middle and largest budget of the grid per noise definition, the master-law
slope and the exponents a, b per noise definition (docs/method.md §7b). :func:`reading` states, in rst,
the decay class of each seed-mean envelope and H_N at the largest budget. Pure pandas.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from learnwin.infra.config import TRANSPORTS
from learnwin.infra.io import atomic_path, write_table
from learnwin.report.formatting import SCALE_NAME, fmt
from learnwin.stats.decay import primary
from learnwin.stats.window import NOISES

KEYS = ["model", "optimizer", "seed"]
ROW = [*KEYS, "transport"]  # one summary row per run and transport (docs/method.md §4b)
#: Columns of the selected decay law copied into the summary, as ``decay_<column>``.
DECAY_COLUMNS = ["law", "A", "scale", "scale_lo", "scale_hi", "l_c", "k", "floor", "r2", "ambiguous"]


def _at(df: pd.DataFrame, epoch) -> pd.DataFrame:
    return df[df["epoch"].astype(str) == str(epoch)]


def val_r2_at(curve: pd.DataFrame, epoch) -> pd.DataFrame:
    """Per run, the validation R^2 of the checkpoint ``epoch``.

    ``best`` is the epoch of lowest validation MSE, the first of equals, epoch 0 included, as
    training keeps it (docs/method.md §3); ``final`` the last; an integer that epoch (NaN when the
    curve lacks it, as for a run that diverged before it)."""
    curve = curve.sort_values("epoch", ignore_index=True)
    rows = []
    for key, g in curve.groupby(KEYS, sort=False):
        if str(epoch) == "best":
            at = g.loc[[g["val_mse"].idxmin()]] if g["val_mse"].notna().any() else g.iloc[:0]
        elif str(epoch) == "final":
            at = g.iloc[-1:]
        else:
            at = g[g["epoch"] == int(epoch)]
        rows.append(dict(zip(KEYS, key), val_r2=float(at["val_r2"].iloc[0]) if len(at) else np.nan))
    return pd.DataFrame(rows, columns=[*KEYS, "val_r2"])


def budgets(H_N: pd.DataFrame) -> list[int]:
    """Smallest, middle and largest N of the grid stored in the H_N table (deduplicated)."""
    grid = sorted(int(n) for n in pd.unique(H_N["N"]))
    if not grid:
        return []
    return sorted({grid[0], grid[len(grid) // 2], grid[-1]})


def build_summary(
    curve: pd.DataFrame, alpha: pd.DataFrame, decay: pd.DataFrame, H_N: pd.DataFrame, *, epoch,
    diverged: Iterable[tuple] = (), master: pd.DataFrame | None = None,
    exponents: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (model, optimizer, seed, transport) found in any input, at snapshot ``epoch``.

    ``diverged`` holds the (model, optimizer, seed) of the runs whose curve.parquet carries the
    training stage's divergence note (:func:`learnwin.infra.io.read_notes`).
    Columns: model, optimizer, seed, transport, epoch, status ("ok", or "diverged after epoch E" for the
    runs in ``diverged``, E = the last epoch of their curve), val_r2 (of the checkpoint
    ``epoch``, :func:`val_r2_at`), val_r2_final (last epoch of the curve),
    alpha_median (median alpha over reliable lags), decay_<law, A, scale, ...> (the selected
    law of scope ``seed{S}``), H_N_<noise>_<N> for the three budgets of :func:`budgets` and each
    noise definition (docs/method.md §7b), and, when given, slope_<noise> (master law) and b_<noise>,
    a_<noise> (exponents m ~ f^b, sigma ~ f^a). Missing inputs give NaN, never a missing row.
    """
    last = curve.sort_values("epoch").groupby(KEYS, as_index=False).last()
    bad = {(str(m), str(o), int(s)) for m, o, s in diverged}
    is_bad = [(m, o, int(s)) in bad for m, o, s in last[KEYS].itertuples(index=False)]
    last["status"] = np.where(is_bad, "diverged after epoch " + last["epoch"].astype(str), "ok")
    final = last[KEYS + ["status", "val_r2"]].rename(columns={"val_r2": "val_r2_final"})
    runs = val_r2_at(curve, epoch).merge(final, on=KEYS)[KEYS + ["status", "val_r2", "val_r2_final"]]
    decay = primary(decay)
    # runs without any alpha or H_N row keep one row, under the first transport
    names = [n for n in TRANSPORTS if n in set(alpha["transport"]) | set(H_N["transport"])] or list(TRANSPORTS[:1])
    parts = [runs.merge(pd.DataFrame({"transport": names}), how="cross")[ROW + ["status", "val_r2", "val_r2_final"]]]

    tails = _at(alpha, epoch)
    tails = tails[tails["reliable"].astype(bool) & np.isfinite(tails["alpha"].astype(float))]
    parts.append(
        tails.groupby(ROW, as_index=False)["alpha"]
        .median()
        .rename(columns={"alpha": "alpha_median"})
    )

    chosen = _at(decay, epoch)
    chosen = chosen[chosen["selected"].astype(bool) & chosen["scope"].str.fullmatch(r"seed\d+")]
    chosen = chosen.assign(seed=chosen["scope"].str.removeprefix("seed").astype("int64"))
    parts.append(
        chosen[ROW + DECAY_COLUMNS].rename(columns={c: f"decay_{c}" for c in DECAY_COLUMNS})
    )

    windows = _at(H_N, epoch)
    grid = budgets(windows)
    noises = sorted(pd.unique(windows["noise"]), key=_noise_order)
    wide = windows[windows["N"].isin(grid)].pivot_table(
        index=ROW, columns=["noise", "N"], values="H_N", aggfunc="first"
    )
    wide = wide.reindex(columns=pd.MultiIndex.from_product([noises, grid]))
    wide.columns = [f"H_N_{noise}_{n}" for noise, n in wide.columns]
    parts.append(wide.reset_index())
    for source, values in ((master, ["slope"]), (exponents, ["b", "a"])):
        if source is not None:
            per_noise = _at(source, epoch).pivot_table(index=ROW, columns="noise", values=values)
            per_noise.columns = [f"{v}_{noise}" for v, noise in per_noise.columns]
            parts.append(per_noise.reset_index())

    parts = [part.astype({"seed": "int64"}) for part in parts]
    table = functools.reduce(lambda a, b: a.merge(b, on=ROW, how="outer"), parts)
    for col in table.columns:
        if col.startswith("H_N_"):
            table[col] = table[col].astype("Int64")
    table.insert(4, "epoch", str(epoch))
    return table.sort_values(ROW, ignore_index=True)


def _noise_order(noise: str) -> tuple:
    """The order of :data:`learnwin.stats.window.NOISES`, anything else after (docs/method.md §7b)."""
    return (NOISES.index(noise) if noise in NOISES else len(NOISES), noise)


def reading(
    decay: pd.DataFrame,
    H_N_agg: pd.DataFrame,
    *,
    epoch,
    models: Sequence[str],
    optimizers: Sequence[str],
    missing: Sequence[str] = (),
) -> str:
    """An rst paragraph per optimizer and transport (docs/method.md §4b): the decay class selected for each model's seed-mean
    envelope (with its scale and 95 % CI) and H_N (mean ± std over seeds) at the largest N, per
    noise definition (docs/method.md §7b);
    then the runs left out of the statistics (``missing``, e.g. diverged runs)."""
    decay, agg = _at(primary(decay), epoch), _at(H_N_agg, epoch)
    n_max = int(agg["N"].max()) if len(agg) else None
    lines = [
        f"Reading of the results at snapshot epoch **{epoch}**"
        + (f" and the largest budget N = {n_max}." if n_max else " (no H_N results).")
    ]
    names = [n for n in TRANSPORTS if n in set(agg["transport"]) | set(decay["transport"])] or ["diagonal"]
    for opt in optimizers:
        for transport in names:
            classes, windows = [], []
            for model in models:
                sel = decay[
                    (decay["optimizer"] == opt)
                    & (decay["model"] == model)
                    & (decay["transport"] == transport)
                    & (decay["scope"] == "mean")
                    & decay["selected"].astype(bool)
                ]
                if sel.empty:
                    classes.append(f"{model}: no fit")
                else:
                    r = sel.iloc[0]
                    name = SCALE_NAME.get(r["law"], "scale")
                    flag = ", ambiguous" if bool(r["ambiguous"]) else ""
                    classes.append(
                        f"{model}: {r['law']} ({name} = {fmt(r['scale'])}, 95 % CI "
                        f"[{fmt(r['scale_lo'])}, {fmt(r['scale_hi'])}]{flag})"
                    )
                rows = agg[(agg["optimizer"] == opt) & (agg["model"] == model)
                           & (agg["transport"] == transport) & (agg["N"] == n_max)]
                if rows.empty:
                    windows.append(f"{model}: no data")
                else:
                    per_noise = []
                    for _, r in sorted(rows.iterrows(), key=lambda item: _noise_order(item[1]["noise"])):
                        spread = f" ± {fmt(r['std'])}" if math.isfinite(float(r["std"])) else ""
                        per_noise.append(
                            f"{r['noise']} {fmt(r['mean'])}{spread} (predicted {fmt(r['predicted'])})"
                        )
                    windows.append(f"{model} {', '.join(per_noise)}")
            lines.append(
                f"\n**{opt}, {transport} transport.** Decay class of the seed-mean envelope (docs/method.md §8): "
                f"{'; '.join(classes)}. Learnability window H_N at N = {n_max} in lags, mean ± std over "
                f"seeds: {'; '.join(windows)}."
            )
    if missing:
        lines.append(f"\n**Missing runs** (left out of every statistic and figure): {'; '.join(missing)}.")
    return "\n".join(lines) + "\n"



def write(
    table: pd.DataFrame,
    text: str,
    *,
    parquet: str | os.PathLike,
    csv: str | os.PathLike,
    html: str | os.PathLike,
    rst: str | os.PathLike,
) -> None:
    """Write the summary as Parquet (``summary:1``), CSV and an HTML table, and the reading
    as rst, each atomically."""
    write_table(table, parquet, "summary")
    with atomic_path(csv) as tmp:
        table.to_csv(tmp, index=False)
    with atomic_path(html) as tmp:
        tmp.write_text(
            table.to_html(index=False, na_rep="–", float_format=lambda v: f"{v:.4g}", border=0)
        )
    with atomic_path(rst) as tmp:
        tmp.write_text(text)
