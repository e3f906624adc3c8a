"""End to end: `snakemake recovery` under the budget protocol (docs/method.md §10b) on the smoke
config at a tiny size (a fixed-gate and a learned-gate cell, budgets 16 .. 1024, batch 16): the
tables' keys and values against their definitions, early stop in the scores, the same networks'
snapshots, claims (b) and (d), the prediction and the confirmatory test recomputed from the
tables, the figures and their report entries, a re-run with nothing to do, the confirmatory
target, and the dataset protocol's DAG unchanged."""

import itertools
import math
import zipfile

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from workflow_helpers import copy_workflow, scheduled, scheduled_jobs, snakemake

from learnwin.infra import layout
from learnwin.infra.io import read_table
from learnwin.stats import growth, prediction

pytestmark = pytest.mark.slow

MODELS, SMOKE_MODELS = ["const", "gru"], 5
SEEDS, LAGS, THRESHOLDS, BUDGETS = [2, 3], [1, 3, 5, 7, 9, 11], [0.1, 0.2, 0.3], [16, 32, 64, 128, 256, 512, 1024]
SMOKE = ("--configfile", "config/smoke.yaml")
SIZE = f"budgets: {BUDGETS}, models: [const, gru]"
BUDGET = (*SMOKE, "--config", f"recovery={{protocol: budget, {SIZE}}}")
DATASET = (*SMOKE, "--config", "recovery={protocol: dataset}")
DATASET_RULES = {"train_recovery", "snapshot_recovery", "aggregate_recovery", "plot_recovery", "recovery"}
BUDGET_RULES = {"train_budget", "snapshot_budget", "aggregate_budget", "plot_budget"}
DEFAULT = yaml.safe_load(open("config/config.yaml"))  # the smoke config keeps these
LR, FRONTIER = DEFAULT["optim"]["adamw"]["lr"], DEFAULT["recovery"]["frontier_stop"]
CONFIRM_SEEDS = DEFAULT["recovery"]["confirm_seeds"]


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("budget") / "w")
    snakemake(work, "--cores", "2", *BUDGET, "--", "recovery")
    return work


@pytest.fixture(scope="module")
def tables(budget_run) -> dict[str, pd.DataFrame]:
    return {name: read_table(budget_run / path.format(seed_set="exploration"),
                             layout.budget_schema(name))
            for name, path in layout.BUDGET.items()}


def test_scores_hold_every_control_and_early_stopped_lags(tables):
    s = tables["scores"]
    assert set(zip(s["model"], s["seed"])) == set(itertools.product(MODELS, SEEDS)) and set(s["optimizer"]) == {"adamw"}
    ctrl = s[s["target"] == "control"]
    assert len(ctrl) == len(MODELS) * len(SEEDS) * len(LAGS) * len(BUDGETS)
    assert sorted(set(ctrl["lag"])) == LAGS and sorted(set(ctrl["N"])) == BUDGETS
    assert np.isfinite(s["r"]).all() and (s["r"].abs() <= 1).all()
    task = s[s["target"] == "task"].groupby(["model", "seed", "lag"])["N"].apply(sorted)
    assert all(ns == BUDGETS[:len(ns)] and len(ns) >= 2 for ns in task)  # a prefix of the budgets: early stop
    assert any(len(ns) < len(BUDGETS) for ns in task)  # a lag stopped before N_max
    lb = tables["learning_budget"].set_index(["model", "seed", "lag", "threshold"])
    top = lb.xs(np.float32(THRESHOLDS[-1]), level="threshold")
    for key, ns in task.items():  # a lag stops at the budget after its pair's first under the largest threshold
        row = top.loc[key]
        expect = BUDGETS[-1] if row["right_censored"] else BUDGETS[BUDGETS.index(int(row["N_hat_grid"])) + 1]
        assert ns[-1] == expect, key
    # the frontier recomputed: lags run in order until FRONTIER consecutive ones have no learned
    # pair by N_max under the smallest threshold (right-censored there), and none after them
    never = lb.xs(np.float32(THRESHOLDS[0]), level="threshold")["right_censored"].unstack("lag")[LAGS]
    for key, row in never.iterrows():
        streak = np.convolve(row.to_numpy(int), np.ones(FRONTIER, int))[:len(LAGS)]  # unlearned ending at each lag
        end = int(np.argmax(streak >= FRONTIER)) + 1 if (streak >= FRONTIER).any() else len(LAGS)
        run = s[(s["target"] == "task") & (s["model"] == key[0]) & (s["seed"] == key[1])]["lag"]
        assert sorted(set(run)) == LAGS[:end], key
    assert (never.sum(axis=1) > 0).any()  # some lag is never learned: the rule is exercised


def test_learning_budget_within_the_budgets_and_censoring_consistent(tables):
    lb = tables["learning_budget"]
    assert len(lb) == len(MODELS) * len(SEEDS) * len(LAGS) * len(THRESHOLDS)
    assert ((lb["N_hat"] >= BUDGETS[0]) & (lb["N_hat"] <= BUDGETS[-1])).all()
    right, left = lb["right_censored"], lb["left_censored"]
    assert (right == lb["N_hat_grid"].isna()).all() and not (right & left).any()
    assert (lb.loc[right, "N_hat"] == BUDGETS[-2]).all() and (lb.loc[left, "N_hat"] == BUDGETS[0]).all()  # §10c: censored at the last reported budget
    assert (left == (lb["N_hat_grid"] == BUDGETS[0])).all()
    inner = lb[~right & ~left]
    below = inner["N_hat_grid"].map(lambda g: BUDGETS[BUDGETS.index(int(g)) - 1])
    assert ((inner["N_hat"] >= below - 1e-3) & (inner["N_hat"] <= inner["N_hat_grid"] + 1e-3)).all()
    assert lb.loc[~lb["run"], "right_censored"].all()
    # a lower bar finds the pair no later: N_hat_grid never rises as the threshold falls
    grid = lb.set_index(["model", "seed", "lag", "threshold"])["N_hat_grid"].unstack("threshold")
    grid = grid.sort_index(axis=1).fillna(np.inf).to_numpy()
    assert (grid[:, 1:] >= grid[:, :-1]).all()
    assert (~right).sum() > 0  # something is learned at this size


def test_window_is_the_learning_budget_read_per_budget(tables):
    """H_emp (the learned prefix), H_max, holes, censoring and lags run recomputed lag by lag from
    the learning_budget table, at every budget but the last; H_emp does not fall as N grows or as
    the threshold falls."""
    lb, w = tables["learning_budget"], tables["window"]
    assert len(w) == len(MODELS) * len(SEEDS) * (len(BUDGETS) - 1) * len(THRESHOLDS)
    grid = lb.set_index(["model", "seed", "threshold", "lag"]).sort_index()
    for row in w.itertuples():
        g = grid.loc[(row.model, row.seed, row.threshold)]
        learned = [lag for lag in LAGS if g.loc[lag, "N_hat_grid"] <= row.N]  # NaN: never
        prefix = next((k for k, lag in enumerate(LAGS) if lag not in learned), len(LAGS))
        H, H_max = (LAGS[prefix - 1] if prefix else 0), max(learned, default=0)
        assert row.H_emp == H and row.H_max == H_max, row
        assert row.holes == sum(lag < H_max and lag not in learned for lag in LAGS), row
        assert row.censored == (prefix == len(LAGS)) and row.left_censored == (prefix == 0), row
        assert row.lags_run == g["run"].sum(), row
    assert w["left_censored"].any() and (w["H_emp"] > 0).any()  # the bookkeeping is exercised at this size
    by_n = w.sort_values("N").groupby(["model", "seed", "threshold"])["H_emp"]
    assert by_n.apply(lambda h: h.is_monotonic_increasing).all()
    by_t = w.sort_values("threshold").groupby(["model", "seed", "N"])["H_emp"]
    assert by_t.apply(lambda h: h.is_monotonic_decreasing).all()


def test_H_emp_over_seeds(tables):
    w, h = tables["window"], tables["H_emp"]
    assert len(h) == len(MODELS) * (len(BUDGETS) - 1) * len(THRESHOLDS) and (h["n_seeds"] == len(SEEDS)).all()
    keys = ["model", "optimizer", "N", "threshold"]
    ref = w.groupby(keys).agg(mean=("H_emp", "mean"), sd=("H_emp", "std"), cens=("censored", "sum"),
                              holes=("holes", "mean"))
    both = h.set_index(keys).join(ref)
    np.testing.assert_allclose(both["H_mean"], both["mean"], rtol=1e-6)
    np.testing.assert_allclose(both["H_sd"], both["sd"], rtol=1e-5, atol=1e-6)
    assert (both["n_censored"] == both["cens"]).all()
    np.testing.assert_allclose(both["holes_mean"], both["holes"], rtol=1e-6)


def test_snapshots_are_the_init_and_the_first_lags_training(budget_run, tables):
    """Per (model, seed): the init network's rate is the plain lr, the trained one's AdamW's own;
    both under both transports at every snapshot lag; the same networks' window aggregate holds
    both epochs."""
    for model, seed in itertools.product(MODELS, SEEDS):
        path = layout.BUDGET_SNAPSHOT["envelope"].format(optimizer="adamw", model=model, seed=seed)
        env = read_table(budget_run / path, "envelope")
        assert set(env["epoch"]) == {"init", "trained"} and set(env["transport"]) == {"diagonal", "exact"}
        rate = env.groupby("epoch")["lambda_mean"]
        assert np.allclose(rate.min()["init"], LR) and np.allclose(rate.max()["init"], LR)
        assert not np.allclose(env.loc[env["epoch"] == "trained", "lambda_mean"], LR)
    assert set(tables["network_H_N"]["epoch"]) == {"init", "trained"}


def test_claim_b_growth_and_the_group_test(tables):
    g, groups, slopes = tables["growth"], tables["groups"], tables["slopes"]
    assert set(zip(g["model"], g["threshold"])) == set(itertools.product(MODELS, np.float32(THRESHOLDS)))
    assert set(g["verdict"]) <= {"log N", "power", "saturating", "undecided", "too few seeds"}
    n_cens = tables["window"].groupby(["model", "threshold"])["censored"].sum()
    assert (g.set_index(["model", "threshold"])["n_censored"] == n_cens.reindex(
        g.set_index(["model", "threshold"]).index)).all()
    # claim (b)'s group comparison with the seed as the unit (docs/method.md §10b): each seed's
    # log-N slope, recomputed from the window; the groups by the registry's expected growth
    assert set(zip(slopes["model"], slopes["seed"], slopes["threshold"])) == set(
        itertools.product(MODELS, SEEDS, np.float32(THRESHOLDS)))
    assert (slopes["n_points"] == len(BUDGETS) - 1).all()  # the last budget only confirms
    w = tables["window"]
    for r in slopes.itertuples():
        one = w[(w["model"] == r.model) & (w["seed"] == r.seed) & (w["threshold"] == r.threshold)]
        H = np.where(one["left_censored"], one["first_lag"], one["H_emp"])
        b = growth.fit_law("log", one["N"], H, one["censored"], one["left_censored"])["params"][1]
        assert r.b == pytest.approx(b, rel=1e-5, abs=1e-5)
    assert len(groups) == len(THRESHOLDS) and set(zip(groups["fixed"], groups["learned"])) == {("const", "gru")}
    assert (groups["n_pairs"] == 1).all() and (groups["n_assignments"] == 2).all()
    mean = slopes.groupby(["threshold", "model"])["b"].mean().unstack()
    np.testing.assert_allclose(groups.set_index("threshold")[["slope_fixed", "slope_learned"]].to_numpy(),
                               mean.loc[groups["threshold"], ["const", "gru"]].to_numpy(), rtol=1e-5)
    assert set(groups["verdict"]) <= {"holds", "reversed", "not supported"}


def test_claim_d_slope_recomputed_from_the_tables(budget_run, tables):
    """The seed mean of per-seed slopes of log N̂ on -log f by the censored likelihood (f > 0, at
    least three uncensored lags; docs/method.md §10c), beside kappa = alpha / (alpha - 1) of the
    networks' per_lag alpha; without censored lags the slope is least squares."""
    lb = tables["learning_budget"]
    env = pd.concat([read_table(budget_run / layout.BUDGET_SNAPSHOT["envelope"].format(
        optimizer="adamw", model=m, seed=s), "envelope") for m, s in itertools.product(MODELS, SEEDS)])
    d = tables["learning_slope"]
    assert set(d["epoch"]) == {"init", "trained"} and set(d["transport"]) == {"diagonal", "exact"}
    checked = 0
    for row in d.itertuples():
        slopes = []
        for seed in SEEDS:
            b = lb[(lb["model"] == row.model) & (lb["seed"] == seed) & np.isclose(lb["threshold"], row.threshold)]
            e = env[(env["model"] == row.model) & (env["seed"] == seed) & (env["epoch"] == row.epoch)
                    & (env["transport"] == row.transport) & (env["f"] > 0)]
            both = b.merge(e[["lag", "f"]], on="lag")
            exact = ~both["left_censored"] & ~both["right_censored"]
            if both.loc[exact, "f"].nunique() >= 3:
                x = -np.log(both["f"].to_numpy(float))
                fit = growth.fit_linear(np.stack([np.ones_like(x), x], axis=1), np.log(both["N_hat"]),
                                        both["right_censored"], both["left_censored"])
                slopes.append(fit["params"][1])
                if exact.all():
                    assert fit["params"][1] == pytest.approx(np.polyfit(x, np.log(both["N_hat"]), 1)[0], rel=1e-6)
        assert row.n_seeds == len(slopes)
        if slopes:
            assert np.isclose(row.slope, np.mean(slopes), rtol=1e-4), row
            lo, hi = (stats.t.interval(0.95, len(slopes) - 1, loc=np.mean(slopes), scale=stats.sem(slopes))
                      if len(slopes) > 1 else (np.nan, np.nan))  # the Student t-interval over seeds
            np.testing.assert_allclose([row.slope_t_lo, row.slope_t_hi], [lo, hi], rtol=1e-4, atol=1e-6)
            checked += 1
        alpha = tables["network_H_N"].query("model == @row.model and epoch == @row.epoch and "
                                            "transport == @row.transport and noise == 'per_lag'")["pred_alpha"].iloc[0]
        assert np.isclose(row.alpha, alpha) and (np.isclose(row.kappa, alpha / (alpha - 1)) if alpha > 1
                                                  else np.isnan(row.kappa))
    assert checked > 0  # some slope is defined at this size


def _confirm_recomputed(conf: pd.DataFrame, pred: pd.DataFrame) -> int:
    """Each row of the confirmatory table against its variant's mean tau-b within N and its exact
    permutation p, recomputed with scipy over every relabelling; the number of rows recomputed."""
    keys, checked = ["threshold", "networks", "transport", "noise"], 0
    for row in conf.itertuples():
        g = pred[(pred[keys] == pd.Series(row._asdict())[keys]).all(axis=1)]
        p_, m_ = (g.pivot(index="model", columns="N", values=c) for c in ("predicted", "measured"))
        ok = np.isfinite(p_).all(axis=1) & np.isfinite(m_).all(axis=1)
        p_, m_ = p_[ok].to_numpy(), m_[ok].to_numpy()
        means = [np.nanmean(taus) if np.isfinite(taus).any() else np.nan for taus in
                 ([stats.kendalltau(p_[list(perm), k], m_[:, k], variant="b").statistic for k in range(m_.shape[1])]
                  for perm in itertools.permutations(range(len(p_))))]
        assert row.n_models == len(p_)
        if len(p_) < 2 or np.isnan(means[0]):
            assert np.isnan(row.tau_mean) and not row.passes
            continue
        observed = means[0]
        assert np.isclose(row.tau_mean, observed) and row.n_perms == math.factorial(len(p_))
        assert row.p_perm == np.mean([m >= observed - 1e-12 for m in means])
        assert row.passes == (row.tau_mean > 0 and row.p_perm < 0.05)
        checked += 1
    return checked


def test_prediction_and_the_confirmatory_test_recomputed(tables):
    """Only the confirmatory variant is primary; each variant's mean tau-b within N and its exact
    permutation p recomputed with scipy from the prediction table (every row with a tau); one
    pre-registered row. The run has two models, so p >= 1/2 and nothing passes: the same
    recomputation on five models at the run's budgets, whose p reaches 1/120, passes where the
    prediction orders them as measured and fails where it reverses or scrambles them."""
    sc, conf, pred = tables["prediction_scores"], tables["confirm"], tables["prediction"]
    primary = sc[sc["primary"]]
    assert set(zip(primary["networks"], primary["transport"], primary["noise"])) == {("init", "diagonal", "per_lag")}
    assert set(pred["networks"]) == {"init", "trained"}
    keys = ["threshold", "networks", "transport", "noise"]
    assert len(conf) == len(pred.drop_duplicates(keys))
    assert _confirm_recomputed(conf, pred) == conf["tau_mean"].notna().sum() > 0
    pre = conf[conf["pre_registered"]]
    assert len(pre) == 1 and pre["networks"].item() == "init" and np.isclose(pre["threshold"].item(), 0.2)

    measured = np.outer(np.arange(1.0, 6.0), np.arange(1, len(BUDGETS) + 1))  # five models, H rising with N
    scrambled = measured[[2, 0, 4, 1, 3]]
    five = pd.concat([pd.DataFrame(dict(threshold=0.2, networks=net, transport="diagonal", noise="per_lag",
                                        model=np.repeat([f"m{i}" for i in range(5)], len(BUDGETS)),
                                        N=np.tile(BUDGETS, 5), measured=measured.ravel(), predicted=p.ravel()))
                      for net, p in (("init", 0.5 * measured + 1), ("trained", -measured), ("other", scrambled))],
                     ignore_index=True)
    conf5 = prediction.confirmatory_table(five)
    assert _confirm_recomputed(conf5, five) == 3
    assert conf5.set_index("networks")["passes"].to_dict() == {"init": True, "other": False, "trained": False}
    assert conf5.set_index("networks").loc["init", "p_perm"] == 1 / 120


def test_figures_and_their_report_entries(budget_run):
    for fig in layout.BUDGET_FIGURES:
        assert (budget_run / layout.figure(f"{fig}_exploration", "png")).stat().st_size > 10_000, fig
        assert (budget_run / layout.figure(f"{fig}_exploration", "pdf")).stat().st_size > 5_000, fig
    # the report's landing page embeds the claims page and the reading of `snakemake all`, not run here
    (budget_run / layout.CLAIMS["html"]).write_text("<p>not run</p>")
    (budget_run / layout.SUMMARY["reading"]).write_text("Not run.\n")
    report = budget_run / "report.zip"
    snakemake(budget_run, "--report", str(report), *BUDGET, "--", "recovery")
    names = "\n".join(zipfile.ZipFile(report).namelist())
    for fig in layout.BUDGET_FIGURES:
        assert f"{fig}_exploration.png" in names, fig


def test_the_jobs_leave_no_resume_state(budget_run):
    """Each train_budget job kept its finished trainings in its .resume/ directory while it ran
    (learnwin.infra.resume) and removed it once its scores were written."""
    scores = list(budget_run.rglob(layout.BUDGET_RUN.rsplit("/", 1)[-1]))
    assert len(scores) >= len(MODELS) * len(SEEDS) and list(budget_run.rglob(".resume")) == []


def test_rerun_has_nothing_to_do_and_the_dataset_dag_is_unchanged(budget_run):
    assert scheduled(budget_run, "recovery", *BUDGET) == {}
    assert scheduled(budget_run, "recovery", *SMOKE) != {}  # the budget protocol is the default
    dataset = scheduled(budget_run, "recovery", *DATASET)
    assert not BUDGET_RULES & set(dataset) and DATASET_RULES <= set(dataset)
    assert dataset["train_recovery"] == SMOKE_MODELS * (len(SEEDS) + 2)  # main; full_grid, double_steps: first seed
    assert dataset["snapshot_recovery"] == SMOKE_MODELS * len(SEEDS)
    # the budget protocol's keys do not reach the dataset protocol's jobs
    other = "recovery={protocol: dataset, budgets: [32, 64], frontier_stop: 0, confirm_seeds: [7]}"
    assert scheduled(budget_run, "recovery", *SMOKE, "--config", other) == dataset


def test_confirm_target_runs_the_budget_protocol_on_the_confirm_seeds(tmp_path):
    """Whatever recovery.protocol says, `recovery_confirm` on a fresh copy schedules the budget
    protocol's training and snapshot of every model on each confirmatory seed of config/config.yaml,
    by name, and on no other seed; one aggregate and one figure job, of the confirm seed set."""
    work = copy_workflow(tmp_path / "w")
    jobs = scheduled_jobs(work, "recovery_confirm", *SMOKE, "--config", f"recovery={{protocol: dataset, {SIZE}}}")
    runs = {(m, int(s)) for m, s in itertools.product(MODELS, CONFIRM_SEEDS)}
    for rule in ("train_budget", "snapshot_budget"):
        got = [(w["model"], int(w["seed"])) for r, w in jobs if r == rule]
        assert sorted(got) == sorted(runs) and all(w["optimizer"] == "adamw" for r, w in jobs if r == rule), rule
    assert [w for r, w in jobs if r in ("aggregate_budget", "plot_budget")] == [{"seed_set": "confirm"}] * 2
    assert {r for r, _ in jobs} == {"train_budget", "snapshot_budget", "aggregate_budget", "plot_budget",
                                    "recovery_confirm"}
