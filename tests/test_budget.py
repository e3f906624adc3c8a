"""The window under a training budget (docs/method.md §10b): the online training equals separate
shorter trainings bit for bit, early stopping and the frontier rule leave the estimates unchanged,
N̂_emp and H_emp on synthetic score surfaces with a known answer, and the null model's
false-positive rate."""

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from learnwin.models.train import DivergenceError, train_step
from learnwin.recovery import budget_job
from learnwin.recovery.budget_job import budget_trainings, online
from learnwin.recovery.task import held_out_scores, init_seed, initial, job_data
from learnwin.stats.budget import first_pair, learning_budget, window_by_budget
from learnwin.tasks.synthetic import lag_targets, make_split

TASK = dict(T=16, D=2, noise_std=0.2)
MODEL = dict(hidden=4, layer_norm=True, const_s=0.2, gru_init_update=0.2, lstm_init_forget=0.8, gate_init="official")
GT = dict(coef=0.5, n_test=64, n_perm=50, null_quantile=0.99)
OPTIM = {"adamw": dict(lr=0.05, weight_decay=1e-4), "sgd": dict(lr=0.2), "sgd_momentum": dict(lr=0.1, momentum=0.9)}
BUDGETS = [16, 32, 64, 128, 256]
B, SEED, THRESHOLDS = 8, 3, [0.1, 0.2, 0.3]
LAGS = [1, 3, 5, 7, 9, 11, 13, 15]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run(model="gru", optimizer="adamw", **over):
    kw = dict(model=model, optimizer=optimizer, seed=SEED, lags=LAGS[:4], thresholds=THRESHOLDS, budgets=BUDGETS,
              batch_size=B, frontier_stop=0, task=TASK, model_config=MODEL, optim_config=OPTIM[optimizer],
              train_config=dict(grad_clip=1.0), gt=GT)
    return budget_trainings(**{**kw, **over})


def states(net, opt) -> tuple[dict, dict]:
    return copy.deepcopy(net.state_dict()), copy.deepcopy(opt.state_dict())


def assert_equal_states(a, b):
    """Model and optimizer states equal bit for bit (tensors by torch.equal, the rest by ==)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_equal_states(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            assert_equal_states(u, v)
    else:
        assert a == b


def test_train_stream_is_prefix_consistent():
    x, y = make_split(SEED, "train", 64, TASK["T"], TASK["D"], [3], [0.5], 0.2)
    x16, y16 = make_split(SEED, "train", 16, TASK["T"], TASK["D"], [3], [0.5], 0.2)
    assert np.array_equal(x[:16], x16) and np.array_equal(y[:16], y16)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd", "sgd_momentum"])
def test_network_after_k_online_steps_is_a_separate_k_step_training(optimizer):
    """The online run, scored at N = 16 and 32 on the way, holds after k steps (k = 2, 8) the network
    and optimizer state of a separate k-step training on the first kB sequences, drawn on their own
    (make_split of kB sequences with the lag's targets), bit for bit; so do its scores."""
    lag, init = 3, init_seed(SEED, "gru")
    data = job_data(SEED, TASK, GT, 64)
    y = lag_targets(data["y0_all"], data["comp_train"], lag, GT["coef"])
    net, opt = initial("gru", optimizer, TASK["D"], init=init, model_config=MODEL, optim_config=OPTIM[optimizer])
    seen, scores = {}, {}
    for N in online(net, opt, torch.from_numpy(data["x_all"]), torch.from_numpy(y), budgets=[16, 32, 64],
                    batch_size=B, grad_clip=1.0, run_name="online", lr_key="lr"):
        scores[N] = held_out_scores(net, data, [lag], init=init, gt=GT)
        net.train()
        seen[N] = states(net, opt)
    for N in (16, 64):
        x_k, y_k = make_split(SEED, "train", N, TASK["T"], TASK["D"], [lag], [GT["coef"]], TASK["noise_std"])
        ref, ref_opt = initial("gru", optimizer, TASK["D"], init=init, model_config=MODEL,
                               optim_config=OPTIM[optimizer])
        for i in range(0, N, B):
            train_step(ref, ref_opt, torch.from_numpy(x_k[i:i + B]), torch.from_numpy(y_k[i:i + B]), grad_clip=1.0,
                       run_name="ref", lr_key="lr", where="ref")
        assert_equal_states(seen[N], states(ref, ref_opt))
        if optimizer == "adamw":
            assert {int(s["step"]) for s in ref_opt.state_dict()["state"].values()} == {N // B}
        r = held_out_scores(ref, data, [lag], init=init, gt=GT)
        assert np.array_equal(r[0], scores[N][0]) and np.array_equal(r[1], scores[N][1])
    assert not torch.equal(seen[16][0]["W_out"], seen[64][0]["W_out"])
    table = run(optimizer=optimizer, lags=[lag], budgets=[16, 32, 64], early_stop=False)
    task = table[table["target"] == "task"].set_index("N")
    assert [task.loc[N, "r"] for N in (16, 32, 64)] == [float(scores[N][0][0]) for N in (16, 32, 64)]


def test_early_stop_leaves_the_learning_budget_unchanged():
    """At lr 0.05 the GRU learns lag 1 early: its training stops (fewer rows), the scores both runs
    have are equal, and N̂_emp, its grid value, the censoring and H_emp are equal under every threshold."""
    tables = {stop: run(early_stop=stop) for stop in (True, False)}
    rows = {stop: t.groupby(["target", "lag"]).size() for stop, t in tables.items()}
    assert rows[False].loc["task"].eq(len(BUDGETS)).all()
    stopped = rows[True].loc["task"] < len(BUDGETS)
    assert stopped.loc[1] and rows[True].loc[("task", 1)] == 3  # learned at 32 and 64 under 0.3: stop at 64
    assert rows[True].loc["control"].equals(rows[False].loc["control"])
    keys = ["target", "lag", "N"]
    both = tables[True].merge(tables[False], on=keys, suffixes=("", "_full"))
    assert len(both) == len(tables[True]) and np.array_equal(both["r"], both["r_full"])
    assert np.array_equal(both["null"], both["null_full"], equal_nan=True)
    lb = {stop: learning_budget(t, THRESHOLDS, BUDGETS) for stop, t in tables.items()}
    cols = ["lag", "threshold", "N_hat", "N_hat_grid", "left_censored", "right_censored", "run"]
    pd.testing.assert_frame_equal(lb[True][cols], lb[False][cols])
    assert (~lb[True]["right_censored"]).sum() >= 3  # the comparison covers learned lags
    pd.testing.assert_frame_equal(window_by_budget(lb[True], BUDGETS), window_by_budget(lb[False], BUDGETS))
    again = run(early_stop=True)  # same seed, same numbers
    assert again.drop(columns="seconds").equals(tables[True].drop(columns="seconds"))


def surface(task_r: dict, *, ctrl_r=0.0, null=0.05, budgets=BUDGETS, lags=LAGS, keys=None) -> pd.DataFrame:
    """A scores table: task r per lag over ``budgets`` (NaN: not scored; a lag absent: not run), the
    control's r (scalar or (budgets, lags)) and a constant null."""
    ctrl = np.broadcast_to(np.asarray(ctrl_r, dtype=float), (len(budgets), len(lags)))
    rows = [dict(target="control", lag=lag, N=N, r=ctrl[j, i], null=null)
            for j, N in enumerate(budgets) for i, lag in enumerate(lags)]
    rows += [dict(target="task", lag=lag, N=N, r=r, null=null)
             for lag, rs in task_r.items() for N, r in zip(budgets, rs) if not np.isnan(r)]
    return pd.DataFrame(rows).assign(**(keys or dict(model="gru", optimizer="adamw", seed=0)))


def test_learning_budget_interpolates_and_censors():
    """Threshold 0.2, control 0, null 0.05: the margin is r - 0.2 (r - max(theta, |r_ctrl| + null))."""
    nan = np.nan
    ctrl = np.zeros((5, len(LAGS)))
    ctrl[:2, LAGS.index(13)] = -0.5  # a control score raises the bar to 0.55 at N = 16, 32
    scores = surface({1: [0.1, 0.15, 0.3, 0.4, 0.5],   # crossing between 32 and 64 at 1/3 of the log step
                      3: [0.3, 0.3, nan, nan, nan],    # learned from the first budget (and stopped)
                      5: [0.0, 0.0, 0.0, 0.0, 0.5],    # learned only at N_max: not yet "stays learned"
                      7: [0.0, 0.3, 0.1, 0.3, 0.3],    # a dip: the later pair counts
                      9: [0.0, nan, 0.3, 0.3, 0.3],    # the bracket's lower score is missing: N_j
                      11: [0.0, 0.3, 0.3, nan, nan],   # stopped after its pair
                      13: [0.4, 0.4, 0.4, 0.4, 0.4]},  # the control's bar: margins -0.15, -0.15, 0.2
                     ctrl_r=ctrl)
    out = learning_budget(scores, [0.2, 0.35], BUDGETS).set_index(["threshold", "lag"])
    expect = {1: (32 * 2 ** (1 / 3), 64, False, False), 3: (16, 16, True, False), 5: (128, nan, False, True),
              7: (64 * 2 ** 0.5, 128, False, False), 9: (64, 64, False, False), 11: (16 * 2 ** (2 / 3), 32, False, False),
              13: (32 * 2 ** (3 / 7), 64, False, False), 15: (128, nan, False, True)}
    for lag, (n_hat, n_grid, left, right) in expect.items():
        row = out.loc[(0.2, lag)]
        assert row["N_hat"] == pytest.approx(n_hat, rel=1e-12), lag
        assert np.array_equal(row["N_hat_grid"], n_grid, equal_nan=True), lag
        assert (row["left_censored"], row["right_censored"], row["run"]) == (left, right, lag != 15), lag
    # a larger threshold: lag 1's margins -0.25, -0.2, -0.05, 0.05, 0.15 cross between 64 and 128 at half
    assert out.loc[(0.35, 1), "N_hat"] == pytest.approx(64 * 2 ** 0.5, rel=1e-12)
    assert out.loc[(0.35, 1), "N_hat_grid"] == 128 and out.loc[(0.35, 3), "right_censored"]
    assert first_pair(np.array([[1, 0, 1, 1], [1, 0, 1, 0], [1, 1, 1, 1]])).tolist() == [2, -1, 0]
    with pytest.raises(ValueError, match="no scores at budgets"):
        learning_budget(scores, [0.2], [*BUDGETS, 512])


def test_window_by_budget_holes_and_censoring():
    """Seed 0: lags 1 (from 16), 3 (from 32), 7 (from 64) and 9 (from 128) learned, 5 never: the
    learned prefix stops at 3, H_max and its holes go on. Seed 1: every lag learned from 64 on, the
    last from 128: censored there. Seed 2: nothing learned: left-censored at the first lag. The last
    budget, 256, only confirms and has no row (docs/method.md §10b, "Corrections")."""
    grid = {0: {1: 16, 3: 32, 7: 64, 9: 128}, 1: {lag: 64 for lag in LAGS} | {15: 128}, 2: {}}
    rows = [dict(model="gru", optimizer="adamw", seed=s, lag=lag, threshold=0.2, N_hat_grid=float(g.get(lag, np.nan)),
                 run=lag <= 11) for s, g in grid.items() for lag in LAGS]
    out = window_by_budget(pd.DataFrame(rows), BUDGETS).set_index(["seed", "N"])
    assert sorted(set(out.index.get_level_values("N"))) == BUDGETS[:-1]
    assert out.loc[0, "H_emp"].tolist() == [1, 3, 3, 3] and out.loc[0, "H_max"].tolist() == [1, 3, 7, 9]
    assert out.loc[0, "holes"].tolist() == [0, 0, 1, 1]
    assert out.loc[1, "H_emp"].tolist() == [0, 0, 13, 15] and out.loc[1, "censored"].tolist() == [False] * 3 + [True]
    assert out.loc[0, "censored"].sum() == 0 and out.loc[2, "left_censored"].all() and (out.loc[2, "H_emp"] == 0).all()
    assert out.loc[1, "left_censored"].tolist() == [True, True, False, False] and set(out["first_lag"]) == {1}


def test_a_learned_boundary_lag_does_not_carry_the_window():
    """The last grid lag learned from the first budget (recall of the sequence's first inputs) with
    every lag below it unlearned: H_emp stays 0 (left-censored), only H_max shows the lag, with its
    holes."""
    rows = [dict(model="shared", optimizer="adamw", seed=0, lag=lag, threshold=0.2,
                 N_hat_grid=16.0 if lag == LAGS[-1] else np.nan, run=True) for lag in LAGS]
    out = window_by_budget(pd.DataFrame(rows), BUDGETS)
    assert (out["H_emp"] == 0).all() and out["left_censored"].all() and not out["censored"].any()
    assert (out["H_max"] == LAGS[-1]).all() and (out["holes"] == len(LAGS) - 1).all()


def test_a_lag_first_learned_at_the_last_budget_stays_out_of_the_window():
    """Margins above the threshold at 256 only (the last budget): no pair, so the lag is
    right-censored at the last reported budget (the data show only N̂ > 128), and the window has no
    row at 256 where it would repeat 128's: the window's last reported budget is the one before."""
    scores = surface({1: [0.5] * 5, 3: [0.0, 0.0, 0.0, 0.0, 0.5]})
    lb = learning_budget(scores, [0.2], BUDGETS).set_index("lag")
    assert lb.loc[3, "right_censored"] and lb.loc[3, "N_hat"] == BUDGETS[-2]
    window = window_by_budget(lb.reset_index(), BUDGETS)
    assert window["N"].max() == BUDGETS[-2] and window.set_index("N").loc[128, "H_emp"] == 1
    assert not lb.loc[1, "right_censored"]


@pytest.mark.parametrize("model", ["gru", "const"])
def test_no_lagged_signal_gives_an_empty_window(model):
    """Targets of pure noise (coef 0): the lags' trainings are controls of the control; H_emp = 0 at
    every budget and threshold, and the frontier rule stops after frontier_stop lags."""
    table = run(model=model, lags=LAGS, frontier_stop=3, gt={**GT, "coef": 0.0})
    assert sorted(set(table.loc[table["target"] == "task", "lag"])) == LAGS[:3]
    window = window_by_budget(learning_budget(table, THRESHOLDS, BUDGETS), BUDGETS)
    assert len(window) == (len(BUDGETS) - 1) * len(THRESHOLDS)
    assert (window["H_emp"] == 0).all() and (window["holes"] == 0).all() and (window["lags_run"] == 3).all()


def pair_probability(p: float, n: int) -> float:
    """P(two consecutive successes among n iid Bernoulli(p) trials): a three-state chain."""
    none0, none1 = 1.0, 0.0  # no pair yet, last trial a failure / a success
    for _ in range(n):
        none0, none1 = (none0 + none1) * (1 - p), none0 * p
    return 1 - none0 - none1


def null_surface(r: np.ndarray, ctrl: np.ndarray, null: float, lags, budgets) -> tuple[np.ndarray, pd.Series]:
    """(learned at N, per (group x lag, budget); groups with H_emp(N) > 0, per N) of task and control
    scores (group, budget, lag) with a constant null, at threshold 0."""
    g, j, i = (a.ravel() for a in np.meshgrid(*map(np.arange, r.shape), indexing="ij"))
    common = dict(model="gru", optimizer="adamw", seed=g, lag=lags[i], N=budgets[j], null=null)
    scores = pd.concat([pd.DataFrame(dict(common, target="task", r=r.ravel())),
                        pd.DataFrame(dict(common, target="control", r=ctrl.ravel()))], ignore_index=True)
    lb = learning_budget(scores, [0.0], budgets)
    learned = budgets[None, :] >= lb["N_hat_grid"].to_numpy()[:, None]
    window = window_by_budget(lb, budgets).groupby("N")
    return learned, window["H_emp"].apply(lambda h: int((h > 0).sum())), window["H_max"].apply(lambda h: int((h > 0).sum()))


def test_null_scores_false_positive_rate():
    """Scores drawn from the permutation null (Gaussian, sd s; null = its 0.99 quantile), threshold
    0, 32 lags, 11 doublings. Without a control the margin is positive at rate 1 - 0.99 per (lag, N);
    a lag is learned at N_k (a pair starting by then) and H_emp(N_k) > 0 at the rates that iid
    Bernoulli(0.01) trials give, within binomial 99.9 % intervals (H_emp > 0 at the first lag's rate,
    H_max > 0 at the rate of any of the 32). The control only lowers every rate."""
    rng, groups, q, s = np.random.default_rng(11), 2000, 0.99, 0.03
    lags, budgets = np.arange(1, 64, 2), 64 * 2 ** np.arange(11)
    null = s * stats.norm.ppf(q)
    r = s * rng.standard_normal((groups, budgets.size, lags.size))
    ctrl = s * rng.standard_normal(r.shape)
    ci = stats.binomtest(int((r > null).sum()), r.size).proportion_ci(0.999)
    assert ci.low <= 1 - q <= ci.high
    learned, window, window_max = null_surface(r, np.zeros_like(r), null, lags, budgets)
    for k in (0, 5, 9):  # learned at N_k: a pair among the first k + 2 budgets (the last, N_10, only confirms)
        p_lag = pair_probability(1 - q, k + 2)
        assert p_lag < 1 - q
        ci = stats.binomtest(int(learned[:, k].sum()), learned.shape[0]).proportion_ci(0.999)
        assert ci.low <= p_lag <= ci.high
        ci = stats.binomtest(int(window.iloc[k]), groups).proportion_ci(0.999)
        assert ci.low <= p_lag <= ci.high  # H_emp > 0: the first grid lag learned
        ci = stats.binomtest(int(window_max.iloc[k]), groups).proportion_ci(0.999)
        assert ci.low <= 1 - (1 - p_lag) ** lags.size <= ci.high  # H_max > 0: any of the 32
    assert stats.binomtest(int((r > np.abs(ctrl) + null).sum()), r.size).proportion_ci(0.999).high < 1 - q
    learned_ctrl, window_ctrl, window_max_ctrl = null_surface(r, ctrl, null, lags, budgets)
    assert not (learned_ctrl & ~learned).any() and (window_max_ctrl <= window_max).all()
    assert learned_ctrl.mean() < learned.mean() and window_max_ctrl.iloc[-1] < window_max.iloc[-1]


@pytest.mark.parametrize("learned, frontier_stop, run_lags", [
    ({1, 3, 5}, 2, [1, 3, 5, 7, 9]),          # two unlearned lags after the last learned one
    ({1, 3, 7}, 2, [1, 3, 5, 7, 9, 11]),      # one unlearned lag does not stop: the count restarts
    ({1, 3, 5}, 0, LAGS),                     # off
])
def test_frontier_runs_frontier_stop_lags_beyond_the_learned(monkeypatch, learned, frontier_stop, run_lags):
    """A scorer that learns the lags of ``learned`` at every budget: learned lags stop after two
    budgets, the others run to N_max, and lags beyond frontier_stop unlearned ones are not run."""
    def fake_scores(net, data, lags, *, init, gt):
        if len(lags) > 1:  # the control, at every lag
            return np.zeros(len(lags)), np.full(len(lags), 0.05)
        return np.array([0.9 if lags[0] in learned else 0.0]), np.array([0.05])

    monkeypatch.setattr(budget_job, "held_out_scores", fake_scores)
    table = run(lags=LAGS, frontier_stop=frontier_stop)
    task = table[table["target"] == "task"].groupby("lag").size()
    assert task.index.tolist() == run_lags
    assert all(task[lag] == (2 if lag in learned else len(BUDGETS)) for lag in run_lags)
    lb = learning_budget(table, THRESHOLDS, BUDGETS)
    assert lb.groupby("lag")["run"].first().to_dict() == {lag: lag in run_lags for lag in LAGS}
    window = window_by_budget(lb, BUDGETS)
    prefix = max(lag for lag in LAGS if all(g in learned for g in LAGS if g <= lag))
    assert (window["H_emp"] == prefix).all() and (window["H_max"] == max(learned)).all()
    assert (window["lags_run"] == len(run_lags)).all()
    assert (window["holes"] == len([lag for lag in LAGS if lag < max(learned) and lag not in learned])).all()


def test_divergence_names_the_run_and_budgets_are_checked():
    with pytest.raises(DivergenceError, match=r"model=gru optimizer=sgd seed=3 control: .* at N=\d+; lower optim.sgd.lr"):
        run(optimizer="sgd", optim_config=dict(lr=1e12), train_config=dict(grad_clip=0.0))
    with pytest.raises(ValueError, match="multiples of batch_size=8"):
        run(budgets=[12, 24])


def test_budget_networks_are_the_init_and_the_first_lags_scored_training():
    """The init equals a fresh init and has no optimizer state; the trained network is the first
    grid lag's training at its last scored budget (early stop: 64 here), bitwise the network that
    budget_trainings scored: its state equals a separate online training to that budget, and a
    tampered record raises."""
    scores = run()
    kw = dict(model="gru", optimizer="adamw", seed=SEED, lags=LAGS[:4], budgets=BUDGETS, task=TASK, model_config=MODEL,
              optim_config=OPTIM["adamw"], train_config=dict(grad_clip=1.0, batch_size=B), gt=GT)
    nets = budget_job.budget_networks(recorded=scores, **kw)
    assert list(nets) == ["init", "trained"] and {n["task_lag"] for n in nets.values()} == {1}
    init = init_seed(SEED, "gru")
    fresh, fresh_opt = initial("gru", "adamw", TASK["D"], init=init, model_config=MODEL, optim_config=OPTIM["adamw"])
    assert_equal_states(nets["init"]["model"], fresh.state_dict())
    assert nets["init"]["optimizer"]["state"] == {}
    n_stop = int(scores.loc[(scores["target"] == "task") & (scores["lag"] == 1), "N"].max())
    assert n_stop == 64  # early stop: learned at 32 and 64 under the largest threshold
    data = job_data(SEED, TASK, GT, n_stop)
    y = torch.from_numpy(lag_targets(data["y0_all"], data["comp_train"], 1, GT["coef"]))
    for _ in online(fresh, fresh_opt, torch.from_numpy(data["x_all"]), y, budgets=[16, 32, 64], batch_size=B,
                    grad_clip=1.0, run_name="check", lr_key="optim.adamw.lr"):
        pass
    assert_equal_states(nets["trained"]["model"], fresh.state_dict())
    assert_equal_states(nets["trained"]["optimizer"], fresh_opt.state_dict())
    assert nets["trained"]["optimizer"]["state"][0]["step"] == n_stop // B
    tampered = scores.copy()
    tampered.loc[(tampered["target"] == "task") & (tampered["lag"] == 1) & (tampered["N"] == n_stop), "r"] += 1e-3
    with pytest.raises(ValueError, match="not the same network"):
        budget_job.budget_networks(recorded=tampered, **kw)


@pytest.fixture
def float64(monkeypatch):
    """Torch's default dtype and the job's data (so its networks and targets) in float64."""
    real = budget_job.job_data

    def job_data64(*args, **kw):
        return {k: v.double() if isinstance(v, torch.Tensor) else v.astype(np.float64) for k, v in real(*args, **kw).items()}

    monkeypatch.setattr(budget_job, "job_data", job_data64)
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("model", ["gru", "lstm"])
def test_lags_in_an_ensemble_give_the_sequential_scores(float64, model):
    """The lags in chunks of 3 along an ensemble dimension (the control with the first chunk): the
    scores table has the one-at-a-time job's rows, r and null to 1e-10 (float64). Both stops fire:
    lag 1 stops early, and the frontier rule stops inside a chunk (after lag 9 for the GRU, lag 7
    for the LSTM), so the chunk's later lags were trained and their rows dropped."""
    seq, ens = (run(model=model, lags=LAGS, frontier_stop=2, ensemble=E) for E in (0, 3))
    task = seq[seq["target"] == "task"].groupby("lag").size()
    assert task.loc[1] < len(BUDGETS)  # early stop
    assert len(task) < len(LAGS) and len(task) % 3 and task.index[-1] == {"gru": 9, "lstm": 7}[model]  # frontier
    pd.testing.assert_frame_equal(ens.drop(columns=["r", "null", "seconds"]), seq.drop(columns=["r", "null", "seconds"]))
    np.testing.assert_allclose(ens["r"], seq["r"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(ens["null"], seq["null"], rtol=0, atol=1e-10)
    assert np.abs(ens["r"]).max() > max(THRESHOLDS)  # scores of learned lags


def test_a_diverging_lag_ensemble_names_the_run():
    with pytest.raises(DivergenceError, match=r"model=gru optimizer=sgd seed=3 control: .* at N=\d+; lower optim.sgd.lr"):
        run(optimizer="sgd", optim_config=dict(lr=1e12), train_config=dict(grad_clip=0.0), ensemble=3)


def test_budget_networks_under_an_ensemble_train_its_first_chunk_again():
    """Scored by a lag ensemble, the trained network is rebuilt by training the job's first chunk
    (control and first 3 lags, with their early stops) again to the first lag's last budget: in
    float32 bitwise the network scored (the check at float32 equality passes; a tampered record
    raises), and close (rtol 1e-4) to the network a one-at-a-time rebuild gives."""
    kw = dict(model="gru", optimizer="adamw", seed=SEED, lags=LAGS, budgets=BUDGETS, task=TASK, model_config=MODEL,
              optim_config=OPTIM["adamw"], train_config=dict(grad_clip=1.0, batch_size=B), gt=GT)
    scores = run(lags=LAGS, frontier_stop=2, ensemble=3)
    nets = budget_job.budget_networks(recorded=scores, ensemble=3, thresholds=THRESHOLDS, **kw)
    alone = budget_job.budget_networks(recorded=run(lags=LAGS, frontier_stop=2), **kw)
    assert_equal_states(nets["init"]["model"], alone["init"]["model"])
    assert nets["trained"]["optimizer"]["state"][0]["step"] == 64 // B  # early stop: learned at 32 and 64
    for name, t in nets["trained"]["model"].items():
        torch.testing.assert_close(t, alone["trained"]["model"][name], rtol=1e-4, atol=1e-5, msg=name)
    tampered = scores.copy()
    tampered.loc[(tampered["target"] == "task") & (tampered["lag"] == 1) & (tampered["N"] == 64), "r"] += 1e-6
    with pytest.raises(ValueError, match="not the same network"):
        budget_job.budget_networks(recorded=tampered, ensemble=3, thresholds=THRESHOLDS, **kw)
    with pytest.raises(ValueError, match="needs the job's thresholds"):
        budget_job.budget_networks(recorded=scores, ensemble=3, **kw)
