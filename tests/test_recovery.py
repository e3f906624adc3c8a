"""Direct measurement of the learnability window (learnwin/stats/recovery_job.py, learnwin/stats/recovery.py)."""

import ast
import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from learnwin.infra.config import ConfigError, check_recovery
from learnwin.stats import recovery, recovery_job

TASK = dict(T=16, D=2, noise_std=0.1)
MODEL = dict(hidden=8, layer_norm=True, const_s=0.5, gru_init_update=0.3, lstm_init_forget=0.5)
OPTIM = dict(lr=0.01, weight_decay=1e-4)
TRAIN = dict(batch_size=16, grad_clip=1.0)
REC = dict(steps=200, coef=1.0, n_test=64, n_perm=50, null_quantile=0.99)
LAGS, NS, SEEDS = (1, 2, 20), (16, 128), (3, 4)


def _job(seed, lag, n_train, control):
    return recovery_job.recovery_run(
        model="const", optimizer="adamw", seed=seed, lag=lag, n_train=n_train, control=control,
        task=TASK, model_config=MODEL, optim_config=OPTIM, train_config=TRAIN, recovery=REC)


@pytest.fixture(scope="module")
def rows():
    torch.set_num_threads(1)
    return pd.concat([_job(s, lag, n, control=n == NS[-1]) for s in SEEDS for lag in LAGS for n in NS],
                     ignore_index=True)


def test_tiny_grid_acceptance(rows):
    table = recovery.learned(rows, threshold=0.3)
    big = table[table["n_train"] == NS[-1]]
    # a short lag is learned at the largest N, with a clear margin over its shuffled control
    short = big[big["lag"] == 1]
    assert short["learned"].all()
    assert (short["recovery"] > 0.9).all() and (short["recovery"] > short["r_ctrl"] + 0.5).all()
    # a lag beyond the sequence (l > T) is never learned: there is no lagged component
    far = table[table["lag"] == 20]
    assert not far["learned"].any() and far["recovery"].isna().all()
    # the window grows with N on seed means, within noise
    window = recovery.empirical_window(table)
    agg = recovery.aggregate_window(window)
    assert agg["monotone"].all()
    means = agg.set_index("N")["emp_mean"]
    assert means[NS[-1]] >= 1 and means[NS[-1]] >= means[NS[0]]
    # every run took the same number of gradient steps, more epochs for fewer sequences
    true = rows[rows["target"] == "true"]
    assert (true["steps"] == REC["steps"]).all()
    assert true.groupby("n_train")["epochs"].first().to_dict() == {16: 200, 128: 25}


def test_same_job_same_numbers(rows):
    again = _job(SEEDS[0], 2, NS[0], control=False)
    first = rows[(rows["seed"] == SEEDS[0]) & (rows["lag"] == 2) & (rows["n_train"] == NS[0])]
    assert again["recovery"].iloc[0] == first["recovery"].iloc[0]
    assert again["null"].iloc[0] == first["null"].iloc[0]


def _rows(spec):
    """Synthetic rows: spec maps (seed, lag, n_train, target) -> (recovery, null)."""
    return pd.DataFrame([dict(model="gru", optimizer="adamw", seed=s, lag=l, n_train=n, target=t,
                              recovery=r, null=z) for (s, l, n, t), (r, z) in spec.items()])


def test_learned_rule_and_window_known_answer():
    spec = {
        (1, 4, 64, "true"): (0.9, 0.02),     # learned
        (1, 16, 64, "true"): (0.25, 0.02),   # beats threshold but not control + null
        (1, 4, 256, "true"): (0.9, 0.02),
        (1, 16, 256, "true"): (0.5, 0.02),   # learned
        (1, 64, 256, "true"): (0.15, 0.02),  # below the threshold
        (1, 64, 64, "true"): (np.nan, np.nan),
        (1, 4, 256, "shuffled"): (0.01, 0.02),
        (1, 16, 256, "shuffled"): (-0.24, 0.02),  # chance alignment counts by magnitude
        (1, 64, 256, "shuffled"): (0.0, 0.02),
    }
    table = recovery.learned(_rows(spec), threshold=0.2).set_index(["lag", "n_train"])
    assert table["learned"].to_dict() == {(4, 64): True, (4, 256): True, (16, 64): False,
                                          (16, 256): True, (64, 64): False, (64, 256): False}
    assert table.loc[(16, 64), "r_ctrl"] == pytest.approx(0.24)
    window = recovery.empirical_window(table.reset_index())
    assert window.set_index("N")["H_N_emp"].to_dict() == {64: 4, 256: 16}


def test_missing_control_is_an_error():
    with pytest.raises(ValueError, match="no shuffled-target control"):
        recovery.learned(_rows({(1, 4, 64, "true"): (0.9, 0.02)}), threshold=0.2)


def test_monotone_within_noise():
    assert recovery.nondecreasing_within_noise([4, 8, 7], [0, 2, 1])      # drop 1 <= std 2
    assert not recovery.nondecreasing_within_noise([4, 8, 5], [0, 1, 1])  # drop 3 > std 1
    assert recovery.nondecreasing_within_noise([4], [np.nan])


def _comparison(emp, pred):
    n = [64, 256, 1024]
    return pd.DataFrame([dict(model=m, optimizer="adamw", epoch="best", N=N, emp_mean=e,
                              H_N_snapshot=p, H_N_decay=np.nan)
                         for m in emp for N, e, p in zip(n, emp[m], pred[m])])


def test_agreement_spearman_and_ordering():
    emp = {"const": [4, 4, 8], "gru": [8, 16, 32], "lstm": [4, 8, 16]}
    same = recovery.agreement(_comparison(emp, {"const": [5, 6, 9], "gru": [20, 40, 80],
                                                "lstm": [7, 12, 30]}))
    snap = same.set_index("source").loc["snapshot"]
    expected = pd.Series([4, 4, 8, 8, 16, 32, 4, 8, 16]).corr(
        pd.Series([5, 6, 9, 20, 40, 80, 7, 12, 30]), method="spearman")
    assert snap["spearman"] == pytest.approx(expected)
    assert snap["n_points"] == 9 and snap["order_agrees"]
    assert snap["order_empirical"] == "gru>lstm>const"
    decay = same.set_index("source").loc["decay"]
    assert decay["n_points"] == 0 and np.isnan(decay["spearman"]) and not decay["order_agrees"]
    swapped = recovery.agreement(_comparison(emp, {"const": [50, 60, 90], "gru": [20, 40, 80],
                                                   "lstm": [7, 12, 30]}))
    row = swapped.set_index("source").loc["snapshot"]
    assert not row["order_agrees"] and row["order_predicted"] == "const>gru>lstm"


def test_compare_joins_predictions_at_n_train():
    agg = pd.DataFrame(dict(model="gru", optimizer="adamw", N=[64, 256], emp_mean=[4.0, 8.0]))
    h_n = pd.DataFrame(dict(model="gru", optimizer="adamw", epoch="best", N=[16, 64, 256],
                            mean=[1.0, 2.0, 3.0], predicted=[0.5, 1.5, 2.5], law="exp"))
    out = recovery.compare(agg, h_n)
    assert out["H_N_snapshot"].tolist() == [2.0, 3.0] and out["H_N_decay"].tolist() == [1.5, 2.5]


CONFIG = dict(
    models=["const", "gru"], optimizers=["adamw"], train=dict(batch_size=16, snapshot_epochs=[0, "best"]),
    window=dict(N_grid=[16, 64, 256]),
    recovery=dict(n_train=[16, 64, 256], steps=20, control_n_train=None, models=None,
                  optimizers=None, epoch="best"),
)


@pytest.mark.parametrize("path, value, message", [
    (("recovery", "n_train"), [64, 16], "strictly increasing"),
    (("train", "batch_size"), 32, "must be <= min"),
    (("recovery", "steps"), 10, "sees all its sequences"),
    (("recovery", "control_n_train"), [32], "entries of recovery.n_train"),
    (("window", "N_grid"), [16, 64], "entries of window.N_grid"),
    (("recovery", "models"), ["lstm"], "entries of models"),
    (("recovery", "epoch"), 5, "train.snapshot_epochs"),
])
def test_check_config(path, value, message):
    check_recovery(CONFIG)
    bad = copy.deepcopy(CONFIG)
    bad[path[0]][path[1]] = value
    with pytest.raises(ConfigError, match=message):
        check_recovery(bad)


def test_plot_recovery_writes_png_and_pdf(tmp_path):
    from learnwin.plots.recovery import plot_recovery

    emp = {"const": [4, 4, 8], "gru": [8, 16, 32]}
    comp = _comparison(emp, {"const": [5, 6, 9], "gru": [20, 40, 80]}).assign(emp_std=1.0)
    fig = plot_recovery(comp, recovery.agreement(comp), epoch="best", png=tmp_path / "r.png",
                        pdf=tmp_path / "r.pdf", dpi=50)
    assert (tmp_path / "r.png").stat().st_size > 0 and (tmp_path / "r.pdf").stat().st_size > 0
    axes = fig.axes[:2]
    assert [ax.get_title() for ax in axes] == ["adamw / const", "adamw / gru"]
    assert axes[0].get_xscale() == "log" and axes[0].get_xlabel() == "training sequences $N$"
    assert list(axes[1].get_lines()[1].get_ydata()) == [20, 40, 80]  # snapshot H_N, dashed


def test_compare_and_agreement_keep_noise_definitions_apart():
    """With a noise column (docs/method.md §7b) each definition keeps its own rows and agreement."""
    agg = pd.DataFrame(dict(model="gru", optimizer="adamw", N=[64, 256], emp_mean=[4.0, 8.0]))
    h_n = pd.DataFrame(dict(model="gru", optimizer="adamw", epoch="best", N=[64, 256] * 2,
                            noise=["per_lag"] * 2 + ["pooled"] * 2, mean=[2.0, 3.0, 0.0, 1.0],
                            predicted=np.nan, law="exp"))
    out = recovery.compare(agg, h_n)
    assert out.groupby("noise")["H_N_snapshot"].apply(list).to_dict() == {
        "per_lag": [2.0, 3.0], "pooled": [0.0, 1.0]}
    agree = recovery.agreement(out)
    assert sorted(agree["noise"].unique()) == ["per_lag", "pooled"] and (agree["n_points"] <= 2).all()


ROOT = Path(__file__).resolve().parents[1]


def _adapter_imports(name: str) -> str:
    """The import statements of workflow/scripts/<name>.py, as source."""
    tree = ast.parse((ROOT / "workflow" / "scripts" / f"{name}.py").read_text())
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def _loads_torch(source: str) -> bool:
    """Whether running ``source`` in a fresh interpreter leaves torch in sys.modules."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", f"{source}\nimport sys\nprint('torch' in sys.modules)"],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return out.stdout.strip() == "True"


def test_recovery_statistics_and_their_adapter_do_not_import_torch():
    assert not _loads_torch("import learnwin.stats.recovery\n" + _adapter_imports("aggregate_recovery"))
    # the check sees torch where it is: the training job and its adapter import it
    assert _loads_torch("import learnwin.stats.recovery_job")
    assert _loads_torch(_adapter_imports("train_recovery"))
