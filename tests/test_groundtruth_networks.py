"""The prediction from the ground truth's own networks (docs/method.md §10): the networks are the
ones the ground truth scored (learnwin.recovery.groundtruth_job.groundtruth_networks), their
snapshots carry each network's own rates, and the snapshot chain (learnwin.stats.prediction
.network_stats) recovers a known alpha and decay law, which then order the models."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from learnwin.infra import io
from learnwin.models.cells import build_model, checkpoint_model
from learnwin.models.train import checkpoint, make_optimizer
from learnwin.recovery.groundtruth_job import groundtruth_job, groundtruth_networks
from learnwin.recovery.task import groundtruth_snapshots, init_seed
from learnwin.stats import growth, prediction

TASK = dict(T=16, D=4, noise_std=0.2, n_diag=96)
MODEL = dict(hidden=8, layer_norm=True, const_s=0.2, gru_init_update=0.2, lstm_init_forget=0.8,
             gate_init="official")
OPTIM = dict(lr=0.005, weight_decay=1e-4)
GT = dict(coef=0.5, n_test=64, n_perm=20, null_quantile=0.99)
LAGS = [1, 3, 5, 7, 9, 11, 13, 15]
SNAP = dict(lag_start=1, lag_stop=15, lag_step=2, order=1, times_per_lag=4, directions=2, batch_size=64,
            keep_directions=False, transport=["diagonal", "exact"], exact_sequences=16)
RUN = dict(optimizer="adamw", seed=3, n_train=[32, 64], lags=LAGS, steps=12, task=TASK, model_config=MODEL,
           optim_config=OPTIM, train_config=dict(batch_size=16, grad_clip=1.0), gt=GT)


@pytest.fixture(scope="module")
def scored():
    torch.set_num_threads(1)
    scores, _ = groundtruth_job(model="gru", thresholds=[0.2], arm="main", **RUN)
    return scores


def test_networks_are_the_scored_ones(scored, tmp_path):
    io.write_table(scored, tmp_path / "scores.parquet", "recovery")  # as the workflow reads it: float32
    nets = groundtruth_networks(model="gru", recorded=io.read_table(tmp_path / "scores.parquet", "recovery"), **RUN)
    assert tuple(nets) == prediction.NETWORKS
    assert {n["task_lag"] for n in nets.values()} == {LAGS[0]} and {n["seed"] for n in nets.values()} == {RUN["seed"]}
    init, trained = nets["init"], nets["trained"]
    torch.manual_seed(init_seed(RUN["seed"], "gru"))
    fresh = build_model("gru", TASK["D"], **MODEL).state_dict()
    assert all(torch.equal(init["model"][k], v) for k, v in fresh.items())  # the shared init
    assert init["optimizer"]["state"] == {}
    assert not all(torch.equal(trained["model"][k], v) for k, v in fresh.items())
    steps = {int(s["step"]) for s in trained["optimizer"]["state"].values()}
    assert steps == {RUN["steps"]}  # the full budget, as the ground truth's trainings
    # the recorded score is the one check between a re-trained network and the scored one
    tampered = scored.assign(r=scored["r"] + 1e-3)
    with pytest.raises(ValueError, match="not the same network"):
        groundtruth_networks(model="gru", recorded=tampered, **RUN)
    with pytest.raises(ValueError, match="not the same network"):
        groundtruth_networks(model="gru", recorded=scored, **{**RUN, "steps": RUN["steps"] + 1})


def test_checkpoint_is_a_copy():
    net = build_model("gru", 4, **MODEL)
    opt = make_optimizer("adamw", net.parameters(), OPTIM)
    saved = checkpoint(net, opt, "init", {}, float("nan"))
    before = {k: v.clone() for k, v in saved["model"].items()}
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    assert all(torch.equal(saved["model"][k], v) for k, v in before.items())
    rebuilt = checkpoint_model({**saved, "cell": "gru", "model_config": {"input_size": 4, **MODEL}})
    assert torch.equal(rebuilt.W_out, before["W_out"]) and not torch.equal(rebuilt.W_out, net.W_out)


def test_snapshots_carry_each_networks_rates(scored):
    nets = groundtruth_networks(model="gru", recorded=scored, **RUN)
    env, psi, total = groundtruth_snapshots(nets, task=TASK, gt=GT, snapshot=SNAP)
    assert set(env["epoch"]) == set(prediction.NETWORKS) and set(env["transport"]) == {"diagonal", "exact"}
    lam = env.groupby("epoch")["lambda_mean"]
    assert np.allclose(lam.min()["init"], OPTIM["lr"]) and np.allclose(lam.max()["init"], OPTIM["lr"])  # no state: lr
    assert lam.min()["trained"] > 10 * OPTIM["lr"]  # AdamW's adaptive rate after its steps
    per = psi.groupby(["epoch", "transport", "lag"])["sequence"].nunique()
    assert (per == TASK["n_diag"]).all() and len(per) == 2 * 2 * len(LAGS)
    assert len(total) == 2 * 2 * TASK["n_diag"]


def synthetic_snapshots(taus: dict, epoch: str, alpha=1.5, n=1100) -> tuple:
    """Snapshots whose envelope is exp(-l / tau_model) and whose psi is that mean plus symmetric
    alpha-stable noise of scale 1 (times 1e-3), two seeds per model."""
    lags = np.arange(1, 32, 2)
    env, psi, total = [], [], []
    for model, tau in taus.items():
        for seed in (1, 2):
            keys = dict(model=model, optimizer="adamw", seed=seed, epoch=epoch, transport="diagonal")
            f = np.exp(-lags / tau)
            x = stats.levy_stable.rvs(alpha, 0, size=(len(lags), n), random_state=np.random.default_rng(seed))
            p = 1e-3 * (f[:, None] + x)
            env.append(pd.DataFrame(dict(**keys, lag=lags, f=f)))
            psi.append(pd.DataFrame(dict(**keys, lag=np.repeat(lags, n), sequence=np.tile(np.arange(n), len(lags)),
                                         psi=p.ravel())))
            total.append(pd.DataFrame(dict(**keys, sequence=np.arange(n), S=p.sum(0))))
    return tuple(pd.concat(t, ignore_index=True) for t in (env, psi, total))


CFG = dict(alpha_cfg=dict(bootstrap=50, min_samples=1000, max_samples=100000, ci_width_max=0.3),
           window_cfg=dict(eps=20, N_grid=[64, 128, 256, 512, 1024], noise=["per_lag", "pooled"], bootstrap=20),
           decay_cfg=dict(min_points=5, trim=0, bootstrap=20, block=3))


def test_network_stats_recover_alpha_and_law_and_order_the_models():
    taus = dict(const=3.0, diag=6.0, gru=9.0)
    trained = prediction.network_stats(*synthetic_snapshots(taus, "trained"), **CFG)[:2]
    init = prediction.network_stats(*synthetic_snapshots(dict(zip(taus, reversed(taus.values()))), "init"), **CFG)[:2]
    agg, decay = trained
    assert np.allclose(agg["pred_alpha"], 1.5, atol=0.1)
    chosen = decay[decay["selected"] & (decay["scope"] == "mean")].set_index("model")
    assert set(chosen["law"]) == {"exp"} and np.allclose(chosen.loc[list(taus), "scale"], list(taus.values()), rtol=0.02)
    # measured windows ordered as tau: the trained networks' prediction orders them, the reversed init's inverts
    N = [64, 128, 256, 512, 1024]
    window = pd.DataFrame([dict(arm="main", threshold=0.2, model=m, seed=s, N=n, H=tau * np.log(n) + s,
                                censored=False) for m, tau in taus.items() for s in (1, 2) for n in N])
    growth = pd.DataFrame(dict(model=list(taus), threshold=0.2, log_b=np.nan, power_c=np.nan, verdict="undecided"))
    _, levels, sc = prediction.prediction_tables(
        prediction.measured_means(window), growth, {"init": (*init, "init"), "trained": (*trained, "trained")},
        optimizer="adamw")
    sc = sc.set_index(["networks", "noise"])
    assert (sc.loc["trained", "tau_within_N"] == 1).all() and (sc.loc["init", "tau_within_N"] == -1).all()
    assert sc["primary"].to_dict() == {("init", "per_lag"): False, ("init", "pooled"): False,
                                       ("trained", "per_lag"): True, ("trained", "pooled"): False}
    assert set(levels["networks"]) == {"init", "trained"}


def test_a_process_pool_gives_the_same_tables():
    """The aggregate's parallel path (workflow/scripts/aggregate_recovery.py: forked processes)
    returns network_stats', growth_table's and prediction_tables' sequential tables, in order."""
    taus = dict(const=3.0, diag=6.0, gru=9.0)
    snaps = synthetic_snapshots(taus, "trained")
    rng = np.random.default_rng(1)
    window = pd.DataFrame([dict(arm="main", threshold=thr, model=m, seed=s, N=n, H=tau * np.log(n) + rng.normal(),
                                censored=False) for thr in (0.1, 0.2) for m, tau in taus.items() for s in (1, 2, 3)
                           for n in (64, 1024)])  # two N: no curvature bootstrap (slow, per block as the fits)

    def tables(map_fn):
        h_n, decay, _ = prediction.network_stats(*snaps, **CFG, map_fn=map_fn)
        fits = growth.growth_table(window, growth.seed_growth(window, map_fn=map_fn), map_fn=map_fn)
        return (h_n, decay, fits, *prediction.prediction_tables(prediction.measured_means(window), fits,
                                                                {"trained": (h_n, decay, "trained")},
                                                                optimizer="adamw", map_fn=map_fn))

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        parallel = tables(pool.map)
    sequential = tables(map)
    for a, b in zip(parallel, sequential, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    fits, sc = sequential[2], sequential[5]
    assert len(fits) == 6 and np.allclose(fits["log_b"], np.repeat(list(taus.values()), 2), rtol=0.1)
    assert len(sc) == 4 and (sc["tau_within_N"] == 1).all()  # the trained networks order the models
