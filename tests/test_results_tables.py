"""The experiments/ scripts on the synthetic run of tests/synthetic_claims.py: results_tables.py
prints the values the run was built with, and sweep.py scores it with learnwin.stats.claims."""

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import synthetic as syn
from scipy import stats
from synthetic_claims import VAL_R2, expected_claims, write_claim_run, write_claims
from workflow_helpers import experiment_script

from learnwin.infra import io, layout
from learnwin.report.formatting import table_after
from learnwin.stats import budget
from learnwin.stats.claims import decay_length
from learnwin.tasks.synthetic import LEARNS_R2

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _run(capsys, *argv) -> str:
    experiment_script("results_tables").main([str(a) for a in argv])
    return capsys.readouterr().out


def test_results_tables_print_the_run(tmp_path, capsys):
    spec = write_claim_run(tmp_path)
    out = _run(capsys, tmp_path / "results", "--epoch", "best")
    lines = out.splitlines()

    # overview: val R² over seeds 1, 2; the exp row of synthetic.py (tau = mean of 4 and 4.4, CI
    # +- 10 %); tau_env from a brute-force log-linear fit of the seed-mean envelope
    r2 = np.array([VAL_R2["adamw"] + 0.02 * s for s in syn.SEEDS])
    f = np.mean([np.exp(-syn.LAGS / syn.tau_of("const", s, "best")) for s in syn.SEEDS], axis=0)
    tau_env = -1 / np.polyfit(syn.LAGS, np.log(f), 1)[0]
    last = syn.CURVE_EPOCHS - 1  # val MSE falls every epoch: each seed's best epoch is its last
    best = f"{last}/{last} ({last})"
    assert (f"| const | adamw | 2 | {r2.mean():.2f} ± {r2.std(ddof=1):.2f} | {best} | diagonal | exp | τ = 4.20 [3.78, 4.62] | "
            f"{tau_env:.2f} |") in lines
    assert any(line.startswith(f"| gru | adamw | 2 | 0.53 ± 0.01 | {best} | diagonal | power | β = 1.50 [") for line in lines)

    # H_N at the smallest, middle and largest N of the grid, per noise, from the designed curves
    H = spec["H_N"]
    H = H[(H["epoch"] == "best") & (H["model"] == "const") & (H["optimizer"] == "sgd") & (H["noise"] == "per_lag")]
    cells = [f"{g.mean():.1f} ± {g.std(ddof=1):.1f}" for _, g in H.groupby("N")["H_N"] if _ in (16, 1024, 65536)]
    assert "| const | sgd | diagonal | per_lag | " + " | ".join(cells) + " | 16.0 |" in lines
    assert "| const | sgd | diagonal | per_lag | 4.0 ± 0.0 | 9.5 ± 0.7 | 14.5 ± 0.7 | 16.0 |" in lines  # by hand
    assert "| gru | adamw | diagonal | pooled | 0.0 ± 0.0 | 8.0 ± 0.0 | 8.0 ± 0.0 | 16.0 |" in lines

    # master slope per noise with every seed's CI
    assert "| gru | sgd | diagonal | pooled | 1.36 ± 0.48 | 1/2 | 1.02 [0.92, 1.12]; 1.70 [1.60, 1.80] |" in lines
    assert "| const | adamw | diagonal | per_lag | 0.30 ± 0.00 | 0/2 | 0.30 [0.20, 0.40]; 0.30 [0.20, 0.40] |" in lines

    # exponents: a = 0.9 + 0.1 seed, b = 1.2 + 0.1 seed, n_significant = 10 + seed
    assert "| gru | sgd | diagonal | pooled | 1.05 ± 0.07 | 1.35 ± 0.07 | 0.30 ± 0.00 | 0/2 | 11.5 ± 0.7 |" in lines

    # claims: the log-tau spread 3.5 log 2 (wide) against 3.5 log 1.1 (narrow)
    wide, narrow = 3.5 * np.log(2.0), 3.5 * np.log(1.1)
    assert any(line.startswith("| c | log tau_q IQR | gru | adamw vs sgd | - | diagonal | gamma | adamw broader | adamw broader | "
                               f"2/2 | yes | 2 of 2 seeds; AdamW {wide:.2f} ± 0.00 vs sgd {narrow:.2f}")
               for line in lines)
    assert any(line.startswith("| b | H_N growth | const | adamw | pooled | diagonal | gamma | logarithmic | censored | 0/2 | no |")
               for line in lines)
    # the rows come in the models' canonical order (const before gru)
    assert out.index("| const | adamw | diagonal | per_lag | 0.30") < out.index("| gru | adamw | diagonal | per_lag | 0.30")


def test_results_tables_read_the_claims_artifacts(tmp_path, capsys):
    """The claims come from the run's claims.parquet and findings.md, not recomputed: a run whose
    stored verdicts differ from what its tables would give prints the stored ones."""
    spec = write_claim_run(tmp_path)
    results = tmp_path / "results"
    out = _run(capsys, results)
    findings = layout.under(results, layout.CLAIMS["findings"]).read_text()
    # the pivot and the sentences, verbatim (its headings one level down, under the page's own)
    assert findings.split("\n## Verdicts")[0].split("\n", 2)[2].replace("\n## ", "\n#### ") in out
    write_claims(results, spec, transport="exact")  # the stored table now says "exact"
    out = _run(capsys, results)
    assert "| a | envelope class | adamw | - | exact | gamma | 2/2 ✓ | 2/2 ✓ |" in out.splitlines()
    assert not any(line.startswith("| a |") and "| diagonal |" in line for line in out.splitlines())
    layout.under(results, layout.CLAIMS["parquet"]).unlink()
    with pytest.raises(Exception, match="claims.parquet: missing input artifact"):
        _run(capsys, results)


def test_results_tables_without_exponents(tmp_path, capsys):
    write_claim_run(tmp_path)
    (tmp_path / layout.STATS["exponents"]).unlink()
    out = _run(capsys, tmp_path / "results")
    assert "Exponents" not in out and "### Claims" in out
    # 4 verdict rows (2 models x 2 optimizers) and 2 rows in each table at a glance (one per optimizer:
    # every functional's, and the primary one's that opens findings.md)
    assert pd.Series(out.splitlines()).str.startswith("| a | envelope class |").sum() == 4 + 2 + 2


def test_sweep_scores_a_run(tmp_path, monkeypatch):
    write_claim_run(tmp_path / "variant")
    sweep = experiment_script("sweep")
    monkeypatch.setattr(sweep, "RUNS", tmp_path)
    row = sweep.score("variant")
    # from expected_claims(): a 4 of 4 rows hold, b 4/4 per_lag and 0/4 pooled, c 2/4 (gru only),
    # d 0/4 per_lag and 3/4 pooled (gru/sgd splits)
    assert row == {"variant": "variant", "val_r2": pytest.approx(0.38), "claim_a": "4/4", "claim_b:per_lag": "4/4",
                   "claim_b:pooled": "0/4", "claim_c": "2/4", "claim_d:per_lag": "0/4", "claim_d:pooled": "3/4"}
    saved = pd.read_csv(tmp_path / "variant" / "claims.csv")
    assert len(saved) == 24 and saved["holds"].sum() == 13


def test_results_tables_transport_and_cost(tmp_path, capsys):
    """Decay lengths of f, f_diagonal (= f e^{-l/10} in synthetic.py) and the memory curve, and the
    per-rule cost from benchmark TSVs."""
    write_claim_run(tmp_path)
    bench = tmp_path / "results" / "benchmarks" / "train_model" / "adamw"
    bench.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for name, (s, rss, cpu) in {"a.tsv": (10.0, 300.0, 9.0), "b.tsv": (14.0, 420.0, 13.0)}.items():
        (bench / name).write_text(header + f"{s}\t0:00:10\t{rss}\t0\t0\t0\t0\t0\t0\t{cpu}\n")
    lines = _run(capsys, tmp_path / "results").splitlines()
    taus = np.array([syn.tau_of("const", s, "best") for s in syn.SEEDS])
    start = next(i for i, line in enumerate(lines) if line.startswith("### Transport"))
    row = next(line for line in lines[start:] if line.startswith("| const | adamw | "))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    # a table without a transport column is the diagonal transport's: its gamma functional is f,
    # and the memory curve decays at the same tau in the synthetic run
    assert cells[2] == f"{taus.mean():.1f} ± {taus.std(ddof=1):.1f}"
    assert cells[3] == f"{taus.mean():.1f} ± {taus.std(ddof=1):.1f}"
    assert "| train_model | 2 | 12.0 | 11.0 | 420 |" in lines
    # claims at a glance: one column per model, k/n with a tick where the row holds
    assert "| c | log tau_q IQR | adamw vs sgd | - | diagonal | gamma | 0/2 | 2/2 ✓ |" in lines
    assert "| d | master slope CI | sgd | pooled | diagonal | gamma | 2/2 ✓ | 1/2 |" in lines


def test_results_tables_layer_envelopes_of_a_stack(tmp_path, capsys):
    """A two-layer run (its provenance says so) gains the layers table: each layer's envelope is its
    units' mu_abs summed (units layer-major, the synthetic units' exp(-l / tau_q)), and the stack's is
    all of them; a one-layer run has no such table."""
    write_claim_run(tmp_path / "one")
    assert "### Layers" not in _run(capsys, tmp_path / "one" / "results")
    write_claim_run(tmp_path / "two", layers=2)
    lines = _run(capsys, tmp_path / "two" / "results").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### Layers"))
    row = next(line for line in lines[start:] if line.startswith("| const | adamw | diagonal | "))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    units = pd.concat([io.read_table(tmp_path / "two" / "results" / f"snapshots/adamw/const/seed{s}/epochbest/units.parquet",
                                     "units") for s in syn.SEEDS])
    expected = []
    for part in (units[units["unit"] < 4], units[units["unit"] >= 4], units):
        taus = [decay_length(*zip(*sorted(g.groupby("lag")["mu_abs"].sum().items()))) for _, g in part.groupby("seed")]
        expected.append(f"{np.mean(taus):.1f} ± {np.std(taus, ddof=1):.1f}")
    assert cells[3:6] == expected and expected[0] != expected[1]


def test_ladder_puts_each_rungs_verdicts_and_cost_side_by_side(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))  # ladder.py imports results_tables, as when run as a script
    write_claim_run(tmp_path / "a")
    write_claim_run(tmp_path / "b")
    bench = layout.under(tmp_path / "a" / layout.ROOT, layout.BENCH)
    for rule, cpu in (("train_model", [10.0, 20.0]), ("take_snapshot", [3.0, 5.0]), ("memory_curve", [1.0, 1.0])):
        for i, c in enumerate(cpu):
            tsv = bench / rule / "adamw" / "gru" / f"seed{i}.tsv"
            tsv.parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame({"s": [c], "cpu_time": [c]}).to_csv(tsv, sep="\t", index=False)
    (tmp_path / "b" / layout.ROOT / "late.txt").write_text("x")
    os.utime(tmp_path / "b" / layout.ROOT / "late.txt", (2e9 + 125, 2e9 + 125))
    for p in (tmp_path / "b" / layout.ROOT).rglob("*"):
        if p.is_file() and p.name != "late.txt":
            os.utime(p, (2e9, 2e9))
    table = experiment_script("ladder").ladder({"small": tmp_path / "a" / layout.ROOT, "big": tmp_path / "b" / layout.ROOT})
    rows = table.set_index("")
    # the same run twice: the same verdicts, which are those of its claims.parquet
    claims = expected_claims()
    a = claims[claims["claim"] == "a"]
    assert rows.loc["a: envelope class", "small"].startswith(f"{int(a['holds'].sum())}/{len(a)}")
    assert (rows.loc[[r for r in rows.index if r[1] == ":"], "small"]
            == rows.loc[[r for r in rows.index if r[1] == ":"], "big"]).all()
    assert rows.loc["CPU s per train job", "small"] == "15.0"
    assert rows.loc["CPU s per snapshot job", "small"] == "5.0"  # (3 + 1 + 5 + 1) / 2
    assert rows.loc["jobs", "small"] == "6"
    assert rows.loc["wall time (first to last file)", "big"] == "2 min 5 s"
    assert rows.loc["CPU s per train job", "big"] == "–"  # no benchmark TSVs


def test_compare_claims_finds_exactly_the_cells_whose_verdict_differs(tmp_path, capsys):
    write_claim_run(tmp_path)
    page = _run(capsys, tmp_path / "results", "--epoch", "best")
    compare = experiment_script("compare_claims")
    a = compare.glance(page)
    n_rows = sum(1 for line in page.split("### Claims at a glance")[1].split("\n\n")[1].splitlines()) - 2
    assert len(a) == n_rows * a["model"].nunique() and not a["cell"].eq("").any()
    assert compare.verdict_changes(a, a)[1].empty
    holds = a["cell"].str.endswith("✓")
    assert holds.sum() >= 2 and (~holds).sum() >= 2
    (holding, kept_holding), (failing, kept_failing) = a[holds].index[:2], a[~holds].index[:2]
    b = a.copy()
    b.loc[holding, "cell"] = "0/2"  # holds in A, not in B
    b.loc[failing, "cell"] = "2/2 ✓"  # the other way round
    b.loc[kept_holding, "cell"] = "9/9 ✓"  # other counts, same verdicts
    b.loc[kept_failing, "cell"] = "0/9"
    holding, failing = a.loc[holding], a.loc[failing]
    n, changed = compare.verdict_changes(a, b)
    assert n == len(a)
    assert sorted(zip(changed["model"], changed["check"], changed["cell A"], changed["cell B"])) == sorted(
        [(holding["model"], holding["check"], holding["cell"], "0/2"),
         (failing["model"], failing["check"], failing["cell"], "2/2 ✓")])
    with pytest.raises(ValueError, match="Claims at a glance"):
        compare.glance("## no tables here\n")


def test_budget_window_means_per_model_and_N():
    """experiments/groundtruth_tables.py --budget: H_emp mean ± sd per model and N at one threshold
    from the H_emp table, censored seeds counted, other thresholds left out, registry order."""
    rows = [dict(model=m, optimizer="adamw", N=n, threshold=thr, n_seeds=5, H_mean=h, H_sd=0.5, n_censored=c,
                 holes_mean=0.0) for m, base in (("gru", 10.0), ("const", 20.0))
            for n, shift, c in ((64, 0.0, 0), (65536, 43.0, 2)) for thr, h in ((0.2, base + shift), (0.1, 99.0))]
    table = experiment_script("groundtruth_tables").budget_window_means(pd.DataFrame(rows), 0.2).set_index("model")
    assert table.index.tolist() == ["const", "gru"]
    assert table.loc["gru"].tolist() == ["10.0 ± 0.5", "53.0 ± 0.5 (2 cens.)"]
    assert table.columns.tolist() == ["N = 64", "N = 65536"]


def test_groundtruth_window_means_per_model_and_N():
    """experiments/groundtruth_tables.py: H mean ± sd over seeds of the main arm at one threshold,
    with the censored seeds counted; other arms and thresholds are left out."""
    rows = [dict(model=m, arm=arm, threshold=thr, N=n, seed=s, H=h, censored=h >= 63)
            for m, base in (("gru", 10.0), ("const", 20.0)) for n, shift in ((64, 0.0), (8192, 43.0))
            for s, d in ((1, -1.0), (2, 1.0))
            for arm, thr, h in (("main", 0.2, base + shift + d), ("main", 0.1, 99.0), ("full_grid", 0.2, 99.0))]
    table = experiment_script("groundtruth_tables").window_means(pd.DataFrame(rows), 0.2)
    assert table["model"].tolist() == ["const", "gru"]  # the registry's order
    assert table.set_index("model").loc["gru"].tolist() == ["10.0 ± 1.4", "53.0 ± 1.4"]
    assert table.set_index("model").loc["const"].tolist() == ["20.0 ± 1.4", "63.0 ± 1.4 (1 cens.)"]


def test_groundtruth_steps_table_from_the_per_job_windows(tmp_path):
    """`groundtruth_tables.py --steps`: per (model, threshold) the seeds' H under the main budget
    and twice it, read from the jobs' window files (no aggregate), and the mean and largest change."""
    from learnwin.infra import io, layout

    for model, base in (("gru", 20.0), ("lstm", 10.0)):
        for seed, d in ((2, 0.0), (12, 4.0)):
            for arm, steps, shift in (("main", 1024, 0.0), ("double_steps", 2048, 1.0 + d)):
                rows = [dict(model=model, optimizer="adamw", seed=seed, arm=arm, steps=steps, N=8192,
                             threshold=thr, H=base + seed / 10 + shift, censored=False) for thr in (0.1, 0.2)]
                path = layout.under(tmp_path, layout.RECOVERY_RUN["window"], arm=arm, optimizer="adamw",
                                    model=model, seed=seed)
                path.parent.mkdir(parents=True)
                io.write_table(pd.DataFrame(rows), path, "recovery")
    text = experiment_script("groundtruth_tables").steps_table(tmp_path)
    assert "(8 jobs in" in text
    assert "| gru | 0.2 | 8192 | 1024 -> 2048 | 20.2, 21.2 | 21.2, 26.2 | 3.0 | 5.0 |" in text
    assert "| lstm | 0.1 | 8192 | 1024 -> 2048 | 10.2, 11.2 | 11.2, 16.2 | 3.0 | 5.0 |" in text
    assert text.index("| gru | 0.1") < text.index("| lstm | 0.1") < text.index("| gru | 0.2")


def test_groundtruth_cost_sums_the_benchmarks_per_rule(tmp_path):
    """`groundtruth_tables.py`: per ground-truth rule the jobs, total and largest wall seconds of its
    benchmark TSVs and the total over 2 cores, and the same of their CPU seconds; rules without
    TSVs are left out."""
    from learnwin.infra import layout

    bench = layout.under(tmp_path, layout.BENCH)
    for rule, seconds in (("train_recovery", [600.0, 1200.0, 300.0]), ("snapshot_recovery", [30.0, 90.0])):
        for i, s in enumerate(seconds):
            path = bench / rule / "adamw" / f"job{i}.tsv"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"s\tmax_rss\tcpu_time\n{s}\t100\t{s / 2}\n")
    table = experiment_script("groundtruth_tables").cost(tmp_path).set_index("rule")
    assert list(table.index) == ["train_recovery", "snapshot_recovery"]
    assert table.loc["train_recovery", "jobs"] == 3 and table.loc["snapshot_recovery", "jobs"] == 2
    assert table.loc["train_recovery", "wall s (largest job)"] == "1200"
    assert table.loc["train_recovery", "sum / 2 cores (min)"] == "17.5"  # 2100 s / 2 / 60
    assert table.loc["snapshot_recovery", "wall s (sum)"] == "120"
    assert table.loc["train_recovery", "CPU s (sum)"] == "1050" and table.loc["train_recovery", "CPU / 2 cores (min)"] == "8.8"


def _stack_runs(tmp_path, name, r2_by_model):
    """A results folder whose trainings reach the given best val R^2 per (model, seed)."""
    res = tmp_path / name / "results"
    for model, values in r2_by_model.items():
        for seed, r2 in zip((7001, 7011, 7021), values):
            curve = pd.DataFrame({"epoch": [1, 2, 3], "val_mse": [1.0, 0.5, 0.8], "val_r2": [0.0, r2, r2 - 0.1]})
            path = layout.under(res, layout.RUN, optimizer="adamw", model=model, seed=seed) / "curve.parquet"
            io.write_table(curve, path, "curve")
    return res


CONV_CRITERIA = ["mean with ≥ 0.30", "mean without ≤ 0.20", "every seed with > every seed without"]


@pytest.mark.parametrize("conv, noconv, verdicts", [
    ((0.41, 0.38, 0.44), (0.12, 0.10, 0.15), ("yes", "yes", "yes")),
    ((0.26, 0.28, 0.29), (0.12, 0.10, 0.15), ("no", "yes", "yes")),  # only the mean with the convolution
    ((0.41, 0.38, 0.44), (0.25, 0.22, 0.24), ("yes", "no", "yes")),  # only the mean without it
    ((0.41, 0.38, 0.44), (0.05, 0.40, 0.10), ("yes", "yes", "no")),  # only one seed without beating one with
    ((0.52, 0.55, 0.60), (0.12, 0.10, 0.15), ("yes", "yes", "yes")),
])
def test_conv_test_reads_the_best_epoch_and_each_criterion_fails_alone(tmp_path, conv, noconv, verdicts):
    """The pre-registered convolution test (docs/method.md §2c) on known curves: each criterion
    fails alone and the verdict with it; the learning threshold of §3 is printed beside, deciding nothing."""
    hawk = _stack_runs(tmp_path, "hawk", {"mingru": conv})
    without = _stack_runs(tmp_path, "noconv", {"mingru": noconv})
    row = experiment_script("stack_depth").conv_test(hawk, without).iloc[0]
    assert row["val R², with conv"] == " ".join(f"{v:.2f}" for v in sorted(conv))  # the best-validation epoch's R^2
    assert tuple(row[CONV_CRITERIA]) == verdicts
    assert row["holds"] == ("yes" if verdicts == ("yes",) * 3 else "no")
    assert row[f"learns with conv (mean ≥ {LEARNS_R2})"] == ("yes" if np.mean(conv) >= LEARNS_R2 else "no")


def _budget_run(tmp_path, slopes, alpha=1.97):
    """A `snakemake recovery` results folder of the LRU stack whose learning budgets are
    N̂(l) = 64 f(l)^-s for each seed's s, under both transports (f = exp(-l / 5), uncensored)."""
    res, lags = tmp_path / "results", np.arange(1, 30, 4)
    f = np.exp(-lags / 5)
    lb, env = [], []
    for seed, s in zip((8803, 9907, 10601), slopes):
        keys = dict(model="lru", optimizer="adamw", seed=seed)
        lb.append(pd.DataFrame({**keys, "lag": lags, "threshold": 0.2, "N_hat": 64 * f ** -s, "N_hat_grid": np.nan,
                                "left_censored": False, "right_censored": False, "run": True}))
        env.append(pd.concat([pd.DataFrame({**keys, "epoch": e, "transport": t, "lag": lags, "f": f})
                              for e in ("init", "trained") for t in ("diagonal", "exact")], ignore_index=True))
        io.write_table(env[-1], layout.under(res, layout.BUDGET_SNAPSHOT["envelope"], optimizer="adamw",
                                             model="lru", seed=seed), "envelope")
    lb, env = pd.concat(lb, ignore_index=True), pd.concat(env, ignore_index=True)
    kappa = env[["model", "optimizer", "epoch", "transport"]].drop_duplicates().assign(alpha=alpha)
    for name, table in (("learning_budget", lb), ("learning_slope", budget.learning_slope(lb, env, kappa))):
        io.write_table(table, layout.under(res, layout.BUDGET[name], seed_set="exploration"), layout.budget_schema(name))
    return res


SLOPE_CRITERIA = ["mean in [0.85, 1.15]", "every seed in [0.7, 1.3]", "interval below kappa"]


@pytest.mark.parametrize("slopes, alpha, verdicts", [
    ((1.0, 0.95, 1.05), 1.97, ("yes", "yes", "yes")),
    ((2.0, 2.1, 1.9), 1.97, ("no", "no", "no")),  # N ∝ f^-kappa, the master law's
    ((0.75, 0.8, 0.8), 1.97, ("no", "yes", "yes")),  # only the mean
    ((1.0, 1.0, 1.4), 1.97, ("yes", "no", "yes")),  # only one seed outside [0.7, 1.3]
    ((0.8, 1.0, 1.2), 1.3 / 0.3, ("yes", "yes", "no")),  # only the t-interval (up to 1.50) reaching kappa 1.3
])
def test_slope_test_reads_each_seed_and_each_criterion_fails_alone(tmp_path, slopes, alpha, verdicts):
    """The pre-registered test of the LRU stack's learning budget (docs/method.md §2c) on budgets of
    known slope: it holds for N ∝ 1/f, fails for N ∝ f^-kappa on every criterion, and each criterion
    fails alone; the interval is the seeds' Student t-interval (wider than their range [0.8, 1.2],
    which a percentile bootstrap would give, below kappa)."""
    table = experiment_script("stack_depth").slope_test(_budget_run(tmp_path, slopes, alpha=alpha))
    row = table.set_index("transport").loc["diagonal"]
    assert row["slope per seed"] == " ".join(f"{s:.2f}" for s in slopes)  # each seed's OLS slope, recovered
    assert row["slope"] == f"{np.mean(slopes):.2f}" and row["kappa"] == f"{alpha / (alpha - 1):.2f}"
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(slopes), scale=stats.sem(slopes))
    assert row["95 % t-interval"] == f"[{lo:.2f}, {hi:.2f}]"
    assert tuple(row[SLOPE_CRITERIA]) == verdicts and row["decides"] == "yes"
    assert row["holds"] == ("yes" if verdicts == ("yes",) * 3 else "no")


def _confirm_page(name: str) -> pd.DataFrame:
    """The confirmatory table of a committed budget page (docs/NAME), its p exact (k / n_perms)."""
    t = table_after((EXPERIMENTS.parent / "docs" / name).read_text(), "### The confirmatory test")
    t = t.astype({"threshold": float, "tau_mean": float, "p_perm": float, "n_perms": int})
    return t.assign(pre_registered=t["pre_registered"] == "True",
                    p_perm=np.round(t["p_perm"] * t["n_perms"]) / t["n_perms"])


def test_holm_over_the_secondary_rows_as_results_md_quotes_it():
    """`groundtruth_tables.py --budget`'s p_holm: Holm within each family (the pre-registered row
    alone, the 23 secondary rows together), recomputed from the committed pages' tables; the values
    docs/results.md quotes for the best secondary rows (0.19 on the exploration seeds, 0.96-1.00 for
    the pooled-noise rows on the confirmatory ones)."""
    with_holm = experiment_script("groundtruth_tables").with_holm
    results = (EXPERIMENTS.parent / "docs" / "results.md").read_text()
    explo = with_holm(_confirm_page("results-budget-exploration.md"))
    assert (~explo["pre_registered"]).sum() == 23
    pre = explo[explo["pre_registered"]]
    assert (pre["p_holm"] == pre["p_perm"]).all()  # a family of one
    best = explo[~explo["pre_registered"]].sort_values(["p_perm", "tau_mean"], ascending=[True, False]).iloc[0]
    assert (best["networks"], best["transport"], best["tau_mean"]) == ("trained", "diagonal", 0.574)
    assert best["p_holm"] == pytest.approx(23 / 120)  # the smallest of 23 p = 1/120, times 23
    assert f"tau-b 0.57, p = 0.008 at threshold 0.2; Holm-adjusted over the 23 secondary rows\n  {best['p_holm']:.2f}" \
        in results
    conf = with_holm(_confirm_page("results-budget-confirm.md"))
    pooled = conf[(conf["transport"] == "diagonal") & (conf["noise"] == "pooled")]
    lo, hi = pooled["p_holm"].min(), pooled["p_holm"].max()
    assert f"over the 23 secondary rows {lo:.2f}-{hi:.2f}" in results
    assert (lo, hi) == pytest.approx((23 * 5 / 120, 1.0))


def test_keep_copies_what_the_tables_read_and_not_the_bulk(tmp_path, capsys):
    """--keep: the kept copy prints the same tables as the run (but its own folder name in the
    header); a checkpoint, the snapshots' psi and total, the data, figures, logs and HTML stay out."""
    write_claim_run(tmp_path)
    results, dest = tmp_path / "results", tmp_path / "data" / "runs" / "toy"
    bulk = ["train/adamw/const/seed1/best.pt", "snapshots/adamw/const/seed1/epochbest/psi.parquet",
            "snapshots/adamw/const/seed1/epochbest/total.parquet", "data/seed1/train_x.npy", "figures/a.png",
            "logs/claims.log", "claims.html"]
    for name in bulk:
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_bytes(b"x")
    whole = _run(capsys, results)
    kept = _run(capsys, results, "--keep", dest)
    assert kept == whole.replace(f"Results of {results}", f"Results of {dest}", 1) and kept != whole
    assert not any((dest / name).exists() for name in bulk)
    assert (dest / "summary.parquet").is_file() and (dest / "claims.parquet").is_file()
