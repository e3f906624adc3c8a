"""Summary table, its reading and provenance on synthetic artifacts (tests/synthetic.py)."""

from __future__ import annotations

import subprocess

import numpy as np
import pandas as pd
import pytest
import synthetic as S
import yaml

from learnwin.infra import provenance
from learnwin.infra.io import read_table
from learnwin.report import summary


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, pd.DataFrame]:
    return S.write_artifacts(tmp_path_factory.mktemp("artifacts"))


@pytest.fixture(scope="module")
def table(tables) -> pd.DataFrame:
    return summary.build_summary(
        tables["curve"], tables["alpha"], tables["decay"], tables["H_N"], epoch="best",
        master=tables["master"], exponents=tables["exponents"],
    )


def test_one_row_per_run_at_the_figure_epoch(table):
    assert len(table) == len(S.MODELS) * len(S.OPTIMIZERS) * len(S.SEEDS)
    assert not table.duplicated(["model", "optimizer", "seed"]).any()
    assert set(table["epoch"]) == {"best"}
    assert table["seed"].dtype == np.int64


def test_values_match_the_synthetic_truth(table, tables):
    for row in table.itertuples():
        assert row.val_r2 == pytest.approx(S.final_val_r2(row.seed))  # val MSE falls to the end: best = last
        assert row.val_r2_final == pytest.approx(S.final_val_r2(row.seed))
        assert row.alpha_median == pytest.approx(S.ALPHA[row.model])  # unreliable last lag excluded
        assert row.decay_law == "exp"
        assert row.decay_scale == pytest.approx(S.tau_of(row.model, row.seed, "best"))
        assert row.decay_A == pytest.approx(S.AMP[row.optimizer])


def test_H_N_at_smallest_middle_largest_budget(table, tables):
    names = [f"H_N_{noise}_{n}" for noise in S.NOISES for n in (16, 4096, 65536)]
    assert [c for c in table.columns if c.startswith("H_N_")] == names
    h = tables["H_N"]
    h = h[h["epoch"] == "best"].set_index(["model", "optimizer", "seed", "noise", "N"])["H_N"]
    for row in table.itertuples():
        for noise in S.NOISES:
            for n in (16, 4096, 65536):
                assert getattr(row, f"H_N_{noise}_{n}") == h[(row.model, row.optimizer, row.seed, noise, n)]
    assert table["H_N_per_lag_4096"].tolist() != table["H_N_per_lag_65536"].tolist()  # the columns differ


def test_master_slope_and_exponents_per_noise(table):
    for noise in S.NOISES:
        assert table[f"slope_{noise}"].tolist() == [1.0] * len(table)
        assert table[f"b_{noise}"].tolist() == [1.0] * len(table)
        assert table[f"a_{noise}"].tolist() == [0.0] * len(table)


def test_missing_inputs_give_nan_not_missing_rows(tables):
    alpha = tables["alpha"][tables["alpha"]["model"] != "gru"]
    out = summary.build_summary(
        tables["curve"], alpha, tables["decay"].iloc[:0], tables["H_N"], epoch="best"
    )
    assert len(out) == 8
    assert out.loc[out["model"] == "gru", "alpha_median"].isna().all()
    assert out["decay_law"].isna().all()


def test_status_follows_the_divergence_note_not_the_curve_length(tables):
    curve = tables["curve"]
    short = (curve["model"] == "const") & (curve["optimizer"] == "sgd") & (curve["seed"] == S.SEEDS[0])
    curve = curve[~short | (curve["epoch"] <= 1)]  # a shorter curve alone is not a divergence
    gru = ("gru", "adamw", S.SEEDS[1])  # a full-length curve with the note is one
    out = summary.build_summary(
        curve, tables["alpha"], tables["decay"], tables["H_N"], epoch="best", diverged=[gru]
    ).set_index(["model", "optimizer", "seed"])["status"]
    last = tables["curve"]["epoch"].max()
    assert out[gru] == f"diverged after epoch {last}"
    assert out[("const", "sgd", S.SEEDS[0])] == "ok"
    assert (out == "ok").sum() == len(out) - 1


def test_reading_states_class_and_largest_window(tables):
    text = summary.reading(
        tables["decay"], tables["H_N_agg"], epoch="best", models=S.MODELS, optimizers=S.OPTIMIZERS
    )
    tau = np.mean([S.tau_of("gru", s, "best") for s in S.SEEDS])
    assert "N = 65536" in text
    assert f"gru: exp (τ = {tau:.3g}" in text
    agg = tables["H_N_agg"]
    rows = agg[
        (agg.model == "const") & (agg.optimizer == "sgd") & (agg.epoch == "best") & (agg.N == 65536)
    ].set_index("noise")
    per_lag, pooled = rows.loc["per_lag"], rows.loc["pooled"]
    assert (f"const per_lag {per_lag['mean']:.3g} ± {per_lag['std']:.3g} (predicted "
            f"{per_lag['predicted']:.3g}), pooled {pooled['mean']:.3g}") in text
    assert text.count("**adamw, diagonal transport.**") == 1 and text.count("**sgd, diagonal transport.**") == 1


def test_write_outputs(table, tmp_path):
    paths = {
        k: tmp_path / f"summary.{ext}"
        for k, ext in (("parquet", "parquet"), ("csv", "csv"), ("html", "html"), ("rst", "rst"))
    }
    summary.write(table, "reading\n", **paths)
    back = read_table(paths["parquet"], "summary")
    assert back["H_N_pooled_65536"].tolist() == table["H_N_pooled_65536"].tolist()
    csv = pd.read_csv(paths["csv"])
    assert list(csv.columns) == list(table.columns)
    assert csv["val_r2"].tolist() == pytest.approx(table["val_r2"].tolist())
    assert paths["html"].read_text().count("<tr") == len(table) + 1
    assert paths["rst"].read_text() == "reading\n"


def test_provenance_records_versions_and_resolved_config(tmp_path):
    config = {"seeds": [1, 2], "device": "cpu", "figures": {"dpi": 150, "budgets": (256, 16384)}}
    record = provenance.collect(config, threads=2)
    assert record["config"] == {
        "seeds": [1, 2],
        "device": "cpu",
        "figures": {"dpi": 150, "budgets": [256, 16384]},
    }
    for pkg in ("python", "torch", "numpy", "scipy", "pyarrow", "pandas", "snakemake"):
        assert record["versions"][pkg] not in ("", None)
    assert record["versions"]["numpy"] == np.__version__
    assert record["learnwin"]["version"] == provenance.version("learnwin") != "not installed"
    assert record["device"] == "cpu" and record["threads"] == 2
    assert record["timestamp_utc"].endswith("+00:00")
    assert yaml.safe_load(yaml.safe_dump(record)) == record


def test_git_commit_of_checkout_and_outside(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    repo = tmp_path / "repo"
    (repo / "f").write_text("x")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "m"], check=True)
    head = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert provenance.git_commit(repo) == head
    (repo / "f").write_text("y")
    assert provenance.git_commit(repo) == head + "-dirty"
    (tmp_path / "plain").mkdir()
    assert provenance.git_commit(tmp_path / "plain") == "unknown"


def test_val_r2_is_that_of_the_analysed_checkpoint(tables):
    """Best epoch before the last (and a tie, where training keeps the first): val_r2 is the best
    epoch's; an integer epoch picks that row, a missing one is NaN; the summary keeps the last
    epoch's as val_r2_final."""
    run = dict(model="gru", optimizer="adamw", seed=2)
    curve = pd.DataFrame([dict(run, epoch=e, val_mse=m, val_r2=r) for e, m, r in
                          [(0, 1.0, 0.0), (1, 0.4, 0.6), (2, 0.3, 0.7), (3, 0.3, 0.71), (4, 0.5, 0.5)]])
    other = curve.assign(seed=12, val_mse=[0.2, 0.4, 0.3, 0.3, 0.5])  # best = epoch 0, before any step
    both = pd.concat([curve, other])
    best = summary.val_r2_at(both, "best").set_index("seed")
    assert best.loc[2, "val_r2"] == 0.7
    assert best.loc[12, "val_r2"] == 0.0
    assert summary.val_r2_at(both, "final")["val_r2"].tolist() == [0.5, 0.5]
    assert summary.val_r2_at(both, 1)["val_r2"].tolist() == [0.6, 0.6]
    assert summary.val_r2_at(both, 9)["val_r2"].isna().all()
    curves = tables["curve"].copy()
    first = curves[["model", "optimizer", "seed"]].iloc[0]
    run = (curves[["model", "optimizer", "seed"]] == first).all(axis=1)
    last = run & (curves["epoch"] == curves.loc[run, "epoch"].max())
    curves.loc[last, "val_mse"] = 10.0  # the last epoch got worse: best is the one before
    table = summary.build_summary(curves, tables["alpha"], tables["decay"], tables["H_N"], epoch="best")
    row = table[(table[["model", "optimizer", "seed"]] == first).all(axis=1)].iloc[0]
    before_last = curves.loc[run & (curves["epoch"] == curves.loc[run, "epoch"].max() - 1), "val_r2"].item()
    assert row["val_r2"] == pytest.approx(before_last)
    assert row["val_r2_final"] == pytest.approx(S.final_val_r2(int(first["seed"])))
    assert row["val_r2"] != pytest.approx(row["val_r2_final"])


def test_two_transports_give_a_row_each_with_their_own_values(tables):
    """alpha, decay, H_N and master of an exact transport next to the diagonal one (another decay
    scale, alpha and H_N): one row per run and transport, each carrying its own transport's values,
    val R² shared; the decay class is the exact transport's primary functional (signal), not norm."""
    def exact(df, **changes):
        return pd.concat([df.assign(transport="diagonal"), df.assign(transport="exact", **changes)],
                         ignore_index=True)

    decay = tables["decay"].assign(functional="gamma")
    decay = pd.concat([decay.assign(transport="diagonal"),
                       decay.assign(transport="exact", functional="signal", scale=2 * decay["scale"]),
                       decay.assign(transport="exact", functional="norm", scale=-1.0)], ignore_index=True)
    alpha = exact(tables["alpha"], alpha=np.minimum(tables["alpha"]["alpha"], 1.9) - 0.1)
    H_N = exact(tables["H_N"], H_N=tables["H_N"]["H_N"] + 1)
    two = summary.build_summary(tables["curve"], alpha, decay, H_N, epoch="best",
                                master=exact(tables["master"], slope=7.0), exponents=tables["exponents"])
    one = summary.build_summary(tables["curve"], tables["alpha"], tables["decay"], tables["H_N"], epoch="best",
                                master=tables["master"], exponents=tables["exponents"])
    assert len(two) == 2 * len(one) and list(two.columns[:5]) == [*summary.KEYS, "transport", "epoch"]
    d, e = (two[two["transport"] == t].reset_index(drop=True) for t in ("diagonal", "exact"))
    pd.testing.assert_frame_equal(d[one.columns], one)
    np.testing.assert_allclose(e["decay_scale"], 2 * d["decay_scale"])
    h = [c for c in one.columns if c.startswith("H_N_")]
    assert (e[h].to_numpy() == d[h].to_numpy() + 1).all() and (e["slope_per_lag"] == 7.0).all()
    assert not np.allclose(e["alpha_median"], d["alpha_median"], equal_nan=True)
    np.testing.assert_array_equal(e["val_r2"], d["val_r2"])
    text = summary.reading(decay, exact(tables["H_N_agg"]), epoch="best", models=S.MODELS,
                           optimizers=S.OPTIMIZERS)
    assert text.count("**adamw, exact transport.**") == 1 and text.count("**adamw, diagonal transport.**") == 1
