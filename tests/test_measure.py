"""learnwin.measure_window (docs/method.md §10b, "Any model"): the budget protocol on a plain module
is the workflow's job (learnwin's LSTM as a plain module gives the job's scores bit for bit), a
module's features get a readout and a delay line of depth K has the window K, and each bad input
gets its error with nothing finished lost."""

import inspect
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from test_budget import GT, MODEL, OPTIM, THRESHOLDS, one_thread  # noqa: F401  (one_thread: autouse)
from torch import nn
from workflow_helpers import ROOT

from learnwin import build_model, measure_window
from learnwin.infra import resume
from learnwin.models.train import DivergenceError
from learnwin.recovery.budget_job import budget_trainings
from learnwin.recovery.measure import WindowError
from learnwin.recovery.plain import ModelError, build
from learnwin.stats.budget import learning_budget

T, D, LAGS, BUDGETS = 16, 2, [1, 3, 5, 7], [16, 32, 64, 128, 256]
KW = dict(T=T, D=D, noise_std=0.2, lags=LAGS, budgets=BUDGETS, batch_size=8, optim_config=OPTIM["adamw"],
          thresholds=THRESHOLDS, frontier_stop=2, coef=GT["coef"], n_test=GT["n_test"], n_perm=GT["n_perm"],
          null_quantile=GT["null_quantile"], progress=False)


def lstm(input_size):
    return build_model("lstm", input_size, **MODEL)


def job(model: str, seed: int) -> pd.DataFrame:
    """The workflow's budget job (rule train_budget) at KW's settings."""
    return budget_trainings(model=model, optimizer="adamw", seed=seed, lags=LAGS, thresholds=THRESHOLDS,
                            budgets=BUDGETS, batch_size=8, frontier_stop=2, task=dict(T=T, D=D, noise_std=0.2),
                            model_config=MODEL, optim_config=OPTIM["adamw"], train_config=dict(grad_clip=1.0), gt=GT)


def test_learnwins_lstm_as_a_plain_module_gives_the_budget_jobs_scores():
    """One protocol: measure_window on a factory of learnwin's LSTM named "lstm" gives, seed by
    seed, the workflow job's rows, r and null bit for bit; its tables are the aggregate's reading
    of them. Planted: the name seeds the paired init, so "gru" gives other scores."""
    w = measure_window(lstm, name="lstm", seeds=[3, 4], **KW)
    for seed in (3, 4):
        got = w.scores[w.scores["seed"] == seed].reset_index(drop=True)
        pd.testing.assert_frame_equal(got.drop(columns="seconds"), job("lstm", seed).drop(columns="seconds"))
    pd.testing.assert_frame_equal(w.learning_budget, learning_budget(w.scores, THRESHOLDS, BUDGETS))
    assert set(w.window["seed"]) == {3, 4} and list(w.growth["verdict"].unique()) == ["too few seeds"]
    other = measure_window(lstm, name="gru", seeds=[3], **KW)
    assert not np.array_equal(other.scores["r"].to_numpy()[:8], w.scores["r"].to_numpy()[:8])


class DelayLine(nn.Module):
    """Features (x_t, x_{t-1}, ..., x_{t-K+1}), zeros before the start: no module parameter, so
    only measure_window's readout learns, and only lags below K can be read."""

    def __init__(self, K: int):
        super().__init__()
        self.K = K

    def forward(self, x):
        shifted = [torch.nn.functional.pad(x, (0, 0, k, 0))[:, :x.shape[1]] for k in range(self.K)]
        return torch.cat(shifted, dim=-1)


def test_features_get_a_linear_readout_and_a_delay_line_of_depth_4_has_window_3():
    """A module giving features (B, T, F) gets nn.Linear(F, 1), a tuple its first element (torch's
    RNNs); a delay line of depth 4 learns lags 1 and 3 and never 5 or 7 (independent inputs: no
    information), so the frontier rule stops after 7 and H(N) = 3 once both are learned."""
    torch.manual_seed(0)
    net = build(lambda d: nn.LSTM(d, 5, batch_first=True), "torch_lstm", T, D)
    x = torch.randn(3, T, D)
    assert net.readout.in_features == 5
    torch.testing.assert_close(net(x), (net.module(x)[0] @ net.readout.weight.T + net.readout.bias).squeeze(-1))
    assert build(lstm, "lstm", T, D).readout is None
    w = measure_window(lambda d: DelayLine(4), name="delay", seeds=[3], **{**KW, "optim_config": dict(lr=0.05)})
    learned = w.learning_budget[np.isclose(w.learning_budget["threshold"], 0.2)].set_index("lag")
    assert not learned.loc[[1, 3], "right_censored"].any() and learned.loc[[5, 7], "right_censored"].all()
    assert w.window[np.isclose(w.window["threshold"], 0.2)]["H_emp"].iloc[-1] == 3


class Flat(nn.Module):
    """Predictions x.sum(-1) * scale, scale learned; ``shape`` reshapes the output (a planted fault)."""

    def __init__(self, shape=None):
        super().__init__()
        self.scale, self.shape = nn.Parameter(torch.ones(1)), shape

    def forward(self, x):
        out = x.sum(-1) * self.scale
        return out if self.shape is None else self.shape(out)


@pytest.mark.parametrize("shape, error", [
    (lambda out: out[:, 0], r"output \(2,\) for inputs \(batch, T, D\) = \(2, 16, 2\); expected predictions"),
    (lambda out: out.T, r"output \(16, 2\) for inputs"),
    (lambda out: out.tolist(), r"output of type list"),
])
def test_a_module_with_the_wrong_output_is_refused_before_training(shape, error):
    with pytest.raises(ModelError, match=r"model 'flat': " + error):
        measure_window(lambda d: Flat(shape), name="flat", seeds=[3], **KW)


def test_the_same_module_unfaulted_trains():
    """Flat with its output as it is: measured, learning no lag (x_t's sum carries no past input)."""
    w = measure_window(lambda d: Flat(), name="flat", seeds=[3], **{**KW, "lags": [1, 3]})
    assert w.learning_budget["right_censored"].all() and set(w.scores["lag"]) == {1, 3}


def test_a_factory_that_raises_or_returns_no_module_is_named():
    def broken(d):
        raise RuntimeError("no such layer")

    with pytest.raises(ModelError, match=r"model 'model': make_model\(2\) raised RuntimeError: no such layer"):
        measure_window(broken, seeds=[3], **KW)
    with pytest.raises(ModelError, match=r"make_model\(2\) returned a str, not an nn.Module"):
        measure_window(lambda d: "lstm", seeds=[3], **KW)


def test_an_output_whose_shape_changes_in_training_is_refused():
    """Right in eval mode (the first forward), features in training: the forward names it."""
    class Moody(Flat):
        def forward(self, x):
            out = super().forward(x)
            return out[..., None].expand(-1, -1, 3) if self.training else out

    with pytest.raises(WindowError) as err:
        measure_window(lambda d: Moody(), name="moody", seeds=[3], **KW)
    assert isinstance(err.value.__cause__, ModelError)
    assert "model 'moody': output (8, 16, 3) for inputs (8, 16, 2); expected (batch, T)" in str(err.value.__cause__)


BUILDS = {"n": 0, "nan_at": None}


def flaky(input_size):
    """learnwin's LSTM; its ``BUILDS["nan_at"]``-th build (1: the check, 2: the control, 3: the first
    lag, ...) predicts NaN (a planted divergence)."""
    BUILDS["n"] += 1
    net, bad = lstm(input_size), BUILDS["n"] == BUILDS["nan_at"]
    net.register_forward_hook(lambda module, args, out: out * float("nan") if bad else out)
    return net


def test_a_nan_loss_keeps_the_finished_trainings(tmp_path, monkeypatch):
    """Lag 3's training diverges (its network predicts NaN): WindowError from the DivergenceError
    naming the run, holding the control's and lag 1's rows, equal to the clean run's; with
    ``resume`` the re-run takes those two from there and trains the rest to the clean run's table."""
    BUILDS.update(n=0, nan_at=None)
    clean = measure_window(flaky, name="lstm", seeds=[3], **KW).scores
    BUILDS.update(n=0, nan_at=4)
    with pytest.raises(WindowError, match=r"seed 3 failed \(DivergenceError: model=lstm optimizer=adamw seed=3 "
                                          r"lag=3: training loss became nan at N=8") as err:
        measure_window(flaky, name="lstm", seeds=[3], resume=tmp_path, **KW)
    assert isinstance(err.value.__cause__, DivergenceError)
    kept = err.value.scores
    assert set(kept["target"]) == {"control", "task"} and set(kept.loc[kept["target"] == "task", "lag"]) == {1}
    pd.testing.assert_frame_equal(kept.drop(columns="seconds"),
                                  clean[clean["lag"].isin([1]) | (clean["target"] == "control")]
                                  .reset_index(drop=True).drop(columns="seconds"))
    computed, real = [], resume.Units.run
    monkeypatch.setattr(resume.Units, "run", lambda self, key, fn: real(self, key, lambda: computed.append(key) or fn()))
    again = measure_window(flaky, name="lstm", seeds=[3], resume=tmp_path, **KW).scores
    assert "control" not in computed and "lag=1" not in computed and "lag=3" in computed
    pd.testing.assert_frame_equal(again.drop(columns="seconds"), clean.drop(columns="seconds"))


def test_the_defaults_are_the_configs():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    rec, task = cfg["recovery"], cfg["task"]
    defaults = {k: p.default for k, p in inspect.signature(measure_window).parameters.items()}
    want = dict(D=task["D"], noise_std=task["noise_std"], coef=rec["coef"], optimizer=rec["optimizer"],
                batch_size=cfg["train"]["batch_size"], grad_clip=cfg["train"]["grad_clip"],
                thresholds=tuple(rec["thresholds"]), frontier_stop=rec["frontier_stop"], n_test=rec["n_test"],
                n_perm=rec["n_perm"], null_quantile=rec["null_quantile"])
    assert {k: defaults[k] for k in want} == want
    assert cfg["optim"]["adamw"] == dict(lr=0.005, weight_decay=0.0001)  # measure_window's optim_config None


def test_the_any_model_page_regenerates_from_its_committed_tables():
    """docs/results-any-model.md is what its command prints from data/runs/any-model-t64."""
    page = subprocess.run([sys.executable, "experiments/any_model_window.py", "page", "data/runs/any-model-t64"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert page == (ROOT / "docs" / "results-any-model.md").read_text()
