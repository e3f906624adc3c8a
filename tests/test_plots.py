"""Figures of docs/method.md §9 on synthetic artifacts with known values (tests/synthetic.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import synthetic as S
from matplotlib.image import imread

from learnwin import plots
from learnwin.infra.figures import FIGURES
from learnwin.infra.io import read_table

ROOT = Path(__file__).resolve().parents[1]
MODELS, OPTIMIZERS = list(S.MODELS), list(S.OPTIMIZERS)


def _load(root: Path, artifact: str, pattern: str) -> pd.DataFrame:
    files = sorted((root / "results").glob(pattern))
    assert files, pattern
    return pd.concat([read_table(f, artifact) for f in files], ignore_index=True)


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """The synthetic artifacts written to disk and read back through learnwin.infra.io."""
    root = tmp_path_factory.mktemp("artifacts")
    S.write_artifacts(root)
    snap = "snapshots/*/*/seed*/epoch{}/{}.parquet"
    out = {
        name: _load(root, name, snap.format("best", name))
        for name in ("envelope", "units", "alpha", "window", "memory")
    }
    out["decay"] = _load(root, "decay", "decay/*/*/epochbest.parquet")
    out["curve"] = _load(root, "curve", "train/*/*/seed*/curve.parquet")
    out["H_N_agg"] = _load(root, "H_N", "stats/H_N_agg.parquet")
    out["master"] = _load(root, "master", "stats/master.parquet")
    out["exponents"] = _load(root, "exponents", "stats/exponents.parquet")
    out["envelope_all"] = _load(root, "envelope", snap.format("*", "envelope"))
    out["alpha_all"] = _load(root, "alpha", snap.format("*", "alpha"))
    return out


def _calls(t: dict, models=MODELS, optimizers=OPTIMIZERS) -> dict:
    """Arguments of each figure function."""
    common = dict(models=models, optimizers=optimizers)
    return {
        "H_N": dict(H_N_agg=t["H_N_agg"], epoch="best", **common),
        "envelope": dict(envelope=t["envelope"], decay=t["decay"], **common),
        "envelope_decomposition": dict(envelope=t["envelope"], **common),
        "tau_spectra": dict(units=t["units"], **common),
        "N_hat_vs_f": dict(window=t["window"], master=t["master"], epoch="best", **common),
        "alpha": dict(alpha=t["alpha"], **common),
        "eps_th": dict(window=t["window"], budgets=[300, 50000], **common),
        "learning_curves": dict(curve=t["curve"], **common),
        "master_law": dict(window=t["window"], master=t["master"], epoch="best", **common),
        "optimizers": dict(envelope=t["envelope"], units=t["units"], **common),
        "decay_table": dict(decay=t["decay"], **common),
        "epochs": dict(
            envelope=t["envelope_all"], alpha=t["alpha_all"], epochs=list(S.EPOCHS), **common
        ),
        "exponents": dict(exponents=t["exponents"], epoch="best", **common),
        "memory": dict(envelope=t["envelope"], memory=t["memory"], **common),
    }


@pytest.fixture(scope="module")
def drawn(tables, tmp_path_factory) -> dict:
    """Every figure drawn once: name -> (figure, png path, pdf path)."""
    out = tmp_path_factory.mktemp("figures")
    result = {}
    for name, kwargs in _calls(tables).items():
        png, pdf = out / f"{name}.png", out / f"{name}.pdf"
        result[name] = (FIGURES[name].load()(**kwargs, png=png, pdf=pdf, dpi=100), png, pdf)
    return result


def _lines(fig, ax_index=0):
    return fig.axes[ax_index].get_lines()


def _texts(fig) -> str:
    parts = [t.get_text() for ax in fig.axes for t in ax.texts]
    parts += [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    parts += [
        t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()
    ]
    parts += [ax.get_title() for ax in fig.axes]
    return "\n".join(parts)


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_files_are_real_images(drawn, name):
    _, png, pdf = drawn[name]
    image = imread(png)
    assert image.shape[0] > 200 and image.shape[1] > 200
    assert image[..., :3].std() > 0.05, "blank image"
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000
    assert not list(png.parent.glob(f".{name}.*")), "temp files left behind"


def test_figure_registry_matches_rules():
    """Every figure has a plot_<name> rule and a caption; every rule has a figure function."""
    listed = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, check=True).stdout.split()
    # plot_recovery and plot_budget each draw their stage's figures (learnwin.plots.recovery, .budget)
    rules = {r.removeprefix("plot_") for r in listed if r.startswith("plot_")} - {"recovery", "budget"}
    assert rules == set(FIGURES)
    for name in FIGURES:
        assert (ROOT / f"workflow/report/{name}.rst").exists()


def test_seed_band_mean_std_over_seeds():
    df = pd.DataFrame({"lag": [1, 1, 2, 2, 3], "f": [1.0, 3.0, 2.0, np.inf, 5.0]})
    band = plots.seed_band(df, "lag", "f")
    assert band["lag"].tolist() == [1, 2, 3]
    assert band["mean"].tolist() == [2.0, 2.0, 5.0]
    assert band["std"].tolist() == pytest.approx([np.sqrt(2.0), 0.0, 0.0])
    assert band["n"].tolist() == [2, 1, 1]
    assert plots.seed_band(df.iloc[:0], "lag", "f").empty


def test_envelope_draws_seed_mean_and_stored_fits(drawn):
    fig = drawn["envelope"][0]
    tau = [S.tau_of("const", s, "best") for s in S.SEEDS]
    expected = np.mean([np.exp(-S.LAGS / t) for t in tau], axis=0)
    const = _lines(fig, 0)[0]
    assert const.get_color() == "tab:blue"
    np.testing.assert_allclose(const.get_ydata(), expected, rtol=1e-5)
    semilog = fig.axes[1]
    assert semilog.get_yscale() == "log" and fig.axes[2].get_xscale() == "log"
    fit = [
        ln
        for ln in semilog.get_lines()
        if ln.get_linestyle() == "--" and ln.get_color() == "tab:blue"
    ][0]
    x = fit.get_xdata()
    np.testing.assert_allclose(fit.get_ydata(), np.exp(-x / np.mean(tau)), rtol=1e-5)


def test_memory_normalises_each_curve_at_the_first_lag(drawn):
    fig = drawn["memory"][0]
    tau = [S.tau_of("gru", s, "best") for s in S.SEEDS]
    lags = S.LAGS
    f, diag, mem = _lines(fig, 1)[:3]  # gru, adamw panel: f, f_diagonal, memory curve
    assert f.get_color() == "tab:red" and diag.get_linestyle() == "--"
    norm = lambda y: y / y[0]  # noqa: E731
    np.testing.assert_allclose(f.get_ydata(), np.mean([norm(np.exp(-lags / t)) for t in tau], 0), rtol=1e-5)
    np.testing.assert_allclose(diag.get_ydata(), np.mean(
        [norm(np.exp(-lags / t - lags / 10.0)) for t in tau], 0), rtol=1e-5)
    np.testing.assert_allclose(mem.get_ydata(), np.mean([norm(np.exp(-lags / t)) for t in tau], 0), rtol=1e-5)
    assert fig.axes[1].get_yscale() == "log"


def test_H_N_draws_mean_and_predicted(drawn, tables):
    fig = drawn["H_N"][0]
    agg = tables["H_N_agg"]
    rows = agg[
        (agg.model == "gru") & (agg.optimizer == "adamw") & (agg.epoch == "best")
        & (agg.noise == "per_lag")
    ].sort_values("N")
    lines = [ln for ln in _lines(fig, 0) if ln.get_color() == "tab:red"]
    solid = [ln for ln in lines if ln.get_linestyle() == "-"][0]
    dashed = [ln for ln in lines if ln.get_linestyle() == "--"][0]
    np.testing.assert_allclose(solid.get_xdata(), S.N_GRID)
    np.testing.assert_allclose(solid.get_ydata(), rows["mean"], rtol=1e-6)
    np.testing.assert_allclose(dashed.get_ydata(), rows["predicted"], rtol=1e-6)
    assert fig.axes[0].get_xscale() == "log"


def test_tau_spectra_ccdf_of_finite_values(drawn):
    fig = drawn["tau_spectra"][0]
    ccdf = _lines(fig, 1)[0]  # const, adamw
    taus = sorted(
        S.tau_of("const", s, "best") * (0.5 + 0.5 * u) for s in S.SEEDS for u in range(S.UNITS - 1)
    )
    np.testing.assert_allclose(ccdf.get_xdata(), taus, rtol=1e-5)
    assert ccdf.get_ydata()[0] == 1.0
    assert "const (2 inf)" in _texts(fig)
    assert fig.axes[1].get_xscale() == fig.axes[1].get_yscale() == "log"


def test_master_law_points_and_stored_fit(drawn, tables):
    fig = drawn["master_law"][0]
    ax = fig.axes[0]  # const, adamw
    x, y = ax.collections[0].get_offsets().T  # seed 1, filled: the regressed N*
    w = tables["window"]
    w = w[(w.model == "const") & (w.optimizer == "adamw") & (w.seed == 1) & (w.noise == "per_lag")]
    w = w.drop_duplicates("lag")
    fitted = np.isfinite(w["N_star"]) & (w["N_star"] > 0) & w["reliable"] & w["significant"]
    off = w[~fitted]
    w = w[fitted]
    assert len(w) == len(S.LAGS) - 1 and len(off) == 1  # the master fit leaves the unreliable lag out
    np.testing.assert_allclose(np.sort(x), np.sort(-w["kappa"] * np.log(w["f"])), rtol=1e-4)
    np.testing.assert_allclose(np.sort(y), np.sort(np.log(w["N_star"])), rtol=1e-5)
    _, y_hat = ax.collections[1].get_offsets().T  # hollow: the grid value N_hat (NaN off grid)
    np.testing.assert_allclose(np.sort(y_hat[np.isfinite(y_hat)]),
                               np.sort(np.log(w["N_hat"].dropna())), rtol=1e-5)
    crosses = ax.collections[-1].get_offsets()  # grey: lags the fit leaves out, every seed
    assert len(crosses) == len(S.SEEDS)
    np.testing.assert_allclose(crosses[0], [(-off["kappa"] * np.log(off["f"])).iloc[0],
                                            np.log(off["N_star"]).iloc[0]], rtol=1e-5)
    fit = ax.get_lines()[0]
    np.testing.assert_allclose(fit.get_ydata(), np.log(S.C) + fit.get_xdata(), rtol=1e-5)
    assert "slope 1.00" in _texts(fig)


def test_N_hat_vs_f_uses_minus_log_f(drawn, tables):
    x, _ = drawn["N_hat_vs_f"][0].axes[0].collections[0].get_offsets().T
    w = tables["window"]
    w = w[(w.model == "const") & (w.optimizer == "adamw") & (w.seed == 1) & (w.noise == "per_lag")]
    w = w.drop_duplicates("lag")
    np.testing.assert_allclose(
        np.sort(x), np.sort(-np.log(w.loc[np.isfinite(w["N_star"]) & (w["N_star"] > 0) & w["reliable"], "f"])),
        rtol=1e-4,
    )


def test_alpha_reliable_only(drawn):
    fig = drawn["alpha"][0]
    reliable_lags = len(S.LAGS) - 1
    assert f"n={reliable_lags * len(S.SEEDS)}" in "\n".join(
        t.get_text() for t in fig.axes[1].get_xticklabels()
    )
    const = _lines(fig, 0)[0]
    np.testing.assert_allclose(const.get_xdata(), S.LAGS[:-1])
    np.testing.assert_allclose(
        const.get_ydata(), S.ALPHA["const"] + 0.005 * (S.LAGS[:-1] - 8), rtol=1e-5
    )


def test_eps_th_nearest_budgets(drawn):
    text = _texts(drawn["eps_th"][0])
    assert "$N$=256" in text and "$N$=65536" in text and "$N$=4096" not in text


def test_learning_curve_final_val_r2(drawn):
    val = _lines(drawn["learning_curves"][0], 1)[0]
    assert val.get_ydata()[-1] == pytest.approx(
        np.mean([S.final_val_r2(s) for s in S.SEEDS]), rel=1e-6
    )


def test_decay_table_lists_selected_class(drawn):
    table = drawn["decay_table"][0].axes[0].tables[0]
    cells = {c.get_text().get_text() for c in table.get_celld().values()}
    assert "exp" in cells
    assert f"τ = {np.mean([S.tau_of('gru', s, 'best') for s in S.SEEDS]):.3g} [7.56, 9.24]" in cells


def test_epochs_one_colour_per_epoch(drawn):
    labels = [ln.get_label() for ln in _lines(drawn["epochs"][0], 0)]
    assert labels == ["epoch 0", "epoch best"]


def test_optimizers_line_style_per_optimizer(drawn):
    styles = [ln.get_linestyle() for ln in _lines(drawn["optimizers"][0], 0)]
    assert styles == ["-", "--"]


def _degenerate(t: dict) -> dict:
    """const missing entirely; gru with all-NaN envelope, alpha, eps_th and exponents, no
    detectable lag (N_hat NaN), H_N all 0 and every tau_q infinite."""
    out = {}
    for key, df in t.items():
        df = df[df["model"] != "const"].copy()
        for col in ("f", "f_gates", "ratio", "eps_th", "N_hat", "alpha", "predicted", "b", "a"):
            if col in df:
                df[col] = np.nan
        for col in ("H_N", "mean", "std", "median", "q25", "q75"):
            if col in df:
                df[col] = 0
        if "tau" in df:
            df["tau"] = np.inf
        out[key] = df
    return out


@pytest.mark.parametrize("case", ["empty", "degenerate"])
def test_figures_survive_missing_and_degenerate_inputs(tables, tmp_path, case):
    if case == "empty":  # one panel per figure keeps this test fast
        calls = _calls(
            {k: v.iloc[:0] for k, v in tables.items()}, models=["gru"], optimizers=["adamw"]
        )
    else:
        calls = _calls(_degenerate(tables), optimizers=["adamw"])
    for name, kwargs in calls.items():
        png = tmp_path / f"{name}.png"
        fig = FIGURES[name].load()(**kwargs, png=png, pdf=tmp_path / f"{name}.pdf", dpi=50)
        assert imread(png).shape[0] > 100
        if name == "decay_table":
            text = "\n".join(
                c.get_text().get_text() for c in fig.axes[0].tables[0].get_celld().values()
            )
        else:
            text = _texts(fig)
        drawn_anyway = case == "degenerate" and name in ("H_N", "learning_curves")
        assert ("no data" in text) != drawn_anyway, name
        if drawn_anyway and name == "H_N":  # H_N = 0 everywhere is drawn as zeros, not skipped
            np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_ydata(), 0)


def test_noise_definitions_get_their_own_rows(drawn):
    """H_N, master law and eps_th: one panel row per (optimizer, noise definition), docs/method.md §7b."""
    for name, per_row in (("H_N", 2), ("master_law", len(MODELS)), ("eps_th", len(MODELS))):
        titles = [ax.get_title() for ax in drawn[name][0].axes]
        assert len(titles) == len(OPTIMIZERS) * len(S.NOISES) * per_row, name
        assert "pooled" in titles[per_row] and "per_lag" in titles[0], name


def test_exponents_points_and_cis(drawn, tables):
    fig = drawn["exponents"][0]
    assert [ax.get_title() for ax in fig.axes[:2]] == ["adamw, per_lag noise", "adamw, pooled noise"]
    ax = fig.axes[0]
    # per model and seed: b then a, each an errorbar (a line with its CI caps and bar)
    points = [ln for ln in ax.get_lines() if ln.get_marker() in ("o", "s")]
    assert len(points) == 2 * len(MODELS) * len(S.SEEDS)
    b = [ln for ln in points if ln.get_marker() == "o"]
    assert all(ln.get_ydata()[0] == 1.0 for ln in b) and b[0].get_color() == "tab:blue"
    caps = [ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_marker() == "_"]
    assert pytest.approx(sorted(set(np.round(caps, 6)))) == [-0.1, 0.1, 0.9, 1.1]


def test_recovery_and_budget_windows_draw_the_primary_predictions(tmp_path):
    """The ground truth's window figures draw the measured seed means and, dashed or dotted, only
    the prediction rows flagged primary (the dataset protocol's two variants; the budget
    protocol's confirmatory one), with one legend entry per primary variant."""
    from learnwin.plots.budget import plot_budget_window
    from learnwin.plots.recovery import plot_recovery_window
    from learnwin.stats.prediction import PRIMARY

    N = [64, 128, 256]
    window = pd.DataFrame([dict(arm="main", threshold=0.2, model=m, seed=s, N=n, H=5.0 + s + i, censored=False)
                           for i, m in enumerate(["const", "gru"]) for s in (1, 2) for n in N])
    pred = pd.DataFrame([dict(threshold=0.2, model=m, N=n, predicted=p, networks=net, transport=t, noise=no,
                              primary=(net, t, no) in PRIMARY)
                         for m in ("const", "gru") for n in N
                         for (net, t, no), p in ((PRIMARY[0], 7.0), (PRIMARY[1], 8.0),
                                                 (("init", "diagonal", "per_lag"), 99.0))])
    fig = plot_recovery_window.__wrapped__(window, pred, threshold=0.2)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [lab for lab in labels if lab.startswith("predicted")] == [
        f"predicted, {t}, {no}" for _, t, no in PRIMARY]
    drawn = {round(float(y), 6) for ax in fig.axes for line in ax.get_lines() for y in line.get_ydata()}
    assert {7.0, 8.0} <= drawn and 99.0 not in drawn
    h_emp = window.groupby(["model", "N", "threshold"])["H"].agg(H_mean="mean", H_sd="std").reset_index().assign(
        n_censored=0, n_seeds=2)
    fig = plot_budget_window.__wrapped__(h_emp, pred.assign(primary=pred["predicted"] == 99.0))
    drawn = {round(float(y), 6) for ax in fig.axes for line in ax.get_lines() for y in line.get_ydata()}
    assert 99.0 in drawn and 7.0 not in drawn


def test_a_figure_is_one_entry_of_the_figure_table(monkeypatch):
    """A new figure is a drawing function and one FigureSpec entry (docs/architecture.md): the
    entry names the function by import path, which it loads; the table refuses an entry whose
    inputs name no known source or whose settings are unknown, naming the field."""
    from learnwin.infra import figures

    monkeypatch.setattr(figures, "FIGURES", dict(figures.FIGURES))
    spec = figures.FigureSpec("learnwin.plots.envelope:plot_envelope", {"envelope": "run:envelope"}, "Envelope", "x")
    figures.register_figure("envelope_again", spec)
    assert figures.FIGURES["envelope_again"].load() is plots.plot_envelope
    with pytest.raises(ValueError, match=r"FigureSpec.inputs \['table:envelope'\]: each a source kind:artifact"):
        figures.FigureSpec("m:f", {"envelope": "table:envelope"}, "Envelope", "x")
    with pytest.raises(ValueError, match=r"FigureSpec.settings \['dpi'\]; allowed: epoch, budgets, epochs"):
        figures.FigureSpec("m:f", {"envelope": "run:envelope"}, "Envelope", "x", ("dpi",))
    with pytest.raises(ValueError, match="figure 'envelope' is already registered"):
        figures.register_figure("envelope", spec)
