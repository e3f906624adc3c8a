"""The online trainings of the window under a training budget (docs/method.md §10b): one process
runs the control and the lags of one (model, seed). The estimators are :mod:`learnwin.stats.budget`.

* **Online.** Step k trains on sequences kB .. (k+1)B - 1 of the seed's train stream, once each, in
  order, at a constant learning rate (:func:`online`): the network after k steps is the network
  trained with budget N = kB. The stream of N_max starts with the stream of any smaller N
  (:func:`learnwin.tasks.synthetic.make_split` draws sequence by sequence).
* **Paired.** The control and every lag start from the init of (model, seed) (``init_seed``).
* **Scores.** After the step that completes each budget, r and its null on the held-out sequences
  (``held_out_scores``, as in §10); scoring uses no random state and the network goes back to
  training mode, so it does not perturb the training.
* **Control.** The targets of the first grid lag under one permutation of the whole stream, trained
  to N_max and scored at every grid lag and budget.
* **Early stop.** A lag's training stops once it is learned at two consecutive budgets under the
  largest threshold: its N̂_emp is then known under every threshold.
* **Frontier.** Lags run in increasing order; after ``frontier_stop`` consecutive lags with no
  learned pair by N_max under the smallest threshold, the larger lags are not run (they have no
  task rows; :func:`learnwin.stats.budget.learning_budget` marks them).
* **Ensemble** (``ensemble`` = E > 0, where :func:`learnwin.infra.resources.ensemble_training`
  says so). The lags train in chunks of E along a leading ensemble dimension
  (:func:`online_ensemble`; the control rides with the first chunk): one forward and backward per
  step for the chunk, the inputs shared, each member its own targets. A member whose early stop
  fires leaves the ensemble. After each chunk the frontier rule runs over its lags in order, and
  the rows of lags past where it stops are dropped: the scores table has the sequential job's rows,
  its r and null equal to rounding (tests/test_budget.py), its ``seconds`` the chunk's.
* **Stream on the host.** The seed's stream (inputs, components, targets) stays in host memory, on
  CUDA too; each batch moves to the device as it is used (:func:`online`, :func:`online_ensemble`):
  the device holds the networks, a batch and the held-out set, the host what
  :func:`learnwin.infra.resources.budget_mem_mb` counts.
* **Resume.** Each finished training (the control, a lag) or, under an ensemble, each chunk keeps
  its score rows in the job's ``.resume/`` directory (``resume``, :class:`learnwin.infra.resume.Units`);
  a re-run with the same settings takes them from there. Every training starts from its own seeds
  (the paired init, the permutation of (init, N_max), the scores' permutations), so a skipped unit
  shifts nothing after it: the resumed job's table is the uninterrupted one's (tests/test_resume.py).
* **Same networks.** :func:`budget_networks` rebuilds a (model, seed)'s init and its first grid
  lag's training as checkpoints, for the prediction and claim (d), snapshotted by
  :func:`learnwin.recovery.task.groundtruth_snapshots`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from learnwin.infra.resume import Units
from learnwin.models import fused
from learnwin.models.ensemble import Ensemble
from learnwin.models.train import checkpoint, checkpoint_meta, divergence, train_step
from learnwin.recovery.plain import network_of
from learnwin.recovery.task import (
    PREDICT_BATCH,
    Network,
    check_recorded,
    held_out_scores,
    init_network,
    init_seed,
    initial,
    job_data,
    lag_task,
    scores_of,
)
from learnwin.stats.budget import budget_grid, first_pair
from learnwin.stats.groundtruth import margin

log = logging.getLogger(__name__)


def online(net, opt, x: torch.Tensor, y: torch.Tensor, *, budgets: Sequence[int], batch_size: int, grad_clip: float,
           run_name: str, lr_key: str, device: str = "cpu") -> Iterator[int]:
    """Train ``net`` (on ``device``) online on (x, y) (docs/method.md §10b): step k on sequences
    kB .. (k+1)B - 1, each batch moved to ``device`` as it is used (x and y may stay on the host).
    Yields each budget N of the increasing ``budgets`` (multiples of B, at most len(x)) after the
    step that completes it; the caller may score the network there, or stop."""
    done = 0
    for N in budgets:
        for start in range(done, N, batch_size):
            stop = start + batch_size
            train_step(net, opt, x[start:stop].to(device), y[start:stop].to(device), grad_clip=grad_clip,
                       run_name=run_name, lr_key=lr_key, where=f"N={stop}")
        done = N
        yield N


def online_ensemble(
    nets: Sequence, opts: Sequence, x: torch.Tensor, ys: Sequence[np.ndarray], *, optimizer: str,
    optim_config: Mapping, budgets: Sequence[int], batch_size: int, grad_clip: float, run_names: Sequence[str],
    lr_key: str, x_test: torch.Tensor, scored: Callable[[int, int, np.ndarray], bool], device: str = "cpu",
) -> None:
    """Train each ``nets[k]`` (with ``opts[k]``, all ``optimizer`` with ``optim_config``, on
    ``device``) online on (x, ``ys[k]``) as :func:`online` does, each batch of the inputs and of the
    active members' targets moved to ``device`` as it is used, all as one ensemble on the shared inputs
    (:class:`learnwin.models.ensemble.Ensemble`; docs/method.md §3, §10b). After the step that
    completes each budget N, ``scored(k, N, pred)`` gets each member's predictions (n, T) on
    ``x_test``, in member order, and returns whether its training ends there: the member then
    leaves the ensemble, whose smaller successor frees the fused step's graphs of the larger
    (:func:`learnwin.models.fused.release`: on CUDA only the current member count's are held). On return every net and optimizer holds its state at its last scored
    budget. Raises :class:`learnwin.models.train.DivergenceError` naming ``run_names[k]`` and the
    budget, as :func:`online` does, when member k's loss is not finite.
    """
    active = list(range(len(nets)))

    def ensemble_of(members: list[int]) -> Ensemble:
        fused.release()  # the graphs of another member count (an earlier chunk's, before a member left): freed
        return Ensemble([nets[k] for k in members], [opts[k] for k in members], [optimizer] * len(members),
                        [optim_config] * len(members))

    ens = ensemble_of(active)
    done = 0
    for N in budgets:
        for start in range(done, N, batch_size):
            stop = start + batch_size
            y = torch.from_numpy(np.stack([ys[k][start:stop] for k in active])).to(device)
            losses = ens.step(x[start:stop].to(device), y, grad_clip)
            if not torch.isfinite(losses).all():  # one sync per step, as train_step's loss.item()
                j = next(j for j, loss in enumerate(losses.tolist()) if not math.isfinite(loss))
                raise divergence(run_names[active[j]], losses[j].item(), f"N={stop}", lr_key,
                                 opts[active[j]].param_groups[0]["lr"])
        done = N
        pred = torch.cat([ens.outputs(x_test[i:i + PREDICT_BATCH]) for i in range(0, len(x_test), PREDICT_BATCH)], 1)
        left = [k for k, p in zip(active, pred.cpu().numpy()) if scored(k, int(N), p)]
        if left:
            ens.sync()
            active = [k for k in active if k not in left]
            if not active:
                return
            ens = ensemble_of(active)
    ens.sync()


@dataclass(frozen=True)
class Settings:
    """One (model, seed) of the budget protocol (docs/method.md §10b), as the workflow's rule gives
    it (its wildcards and params): ``budgets`` multiples of ``batch_size``; ``train_config["grad_clip"]``
    and ``gt`` (coef, n_test, n_perm, null_quantile) as in §10; ``thresholds`` the learned
    criterion's (its early stop and frontier rule)."""

    model: str
    optimizer: str
    seed: int
    lags: Sequence[int]
    budgets: Sequence[int]
    batch_size: int
    task: Mapping
    model_config: Mapping
    optim_config: Mapping
    train_config: Mapping
    gt: Mapping
    thresholds: Sequence[float] = ()
    device: str = "cpu"


@dataclass
class Member:
    """One training of a job (:meth:`BudgetJob.member`): its targets ``y`` (n, T), its ``label`` in the
    run's name, the ``lags`` it is scored at, ``stop(rows)`` that ends it early (None: never), and
    its score ``rows`` as they come."""

    y: np.ndarray
    label: str
    lags: list[int]
    stop: Callable[[list[dict]], bool] | None
    rows: list[dict]


class BudgetJob:
    """One (model, seed) of the budget protocol (docs/method.md §10b): its data, paired init and
    targets, the control's score rows as they come, the learned criterion, and its trainings, one
    at a time (:meth:`trained`) or as one ensemble (:meth:`together`), of ``network`` (None: the
    registered cell ``run.model`` or the plain module of ``run.model_config``,
    :func:`learnwin.recovery.plain.network_of`). ``early_stop`` and ``ensemble`` as
    :func:`budget_trainings` takes them; ``resume`` keeps the finished trainings (:meth:`lag_rows`;
    None: none kept)."""

    def __init__(self, run: Settings, network: Network | None = None, *, early_stop: bool = True,
                 ensemble: int = 0, resume: str | Path | None = None):
        self.run, self.early_stop, self.ensemble = run, early_stop, ensemble
        self.spec = network or network_of(run.model, run.model_config, run.task["T"])
        self.grad_clip = run.train_config["grad_clip"]
        self.budgets = budget_grid(run.budgets, run.batch_size)
        self.lags = np.asarray(sorted(run.lags), dtype=int)
        self.thr = np.array([min(run.thresholds), max(run.thresholds)], dtype=float)[:, None]  # frontier's, early stop's
        n_max = int(self.budgets[-1])
        self.init = init_seed(run.seed, run.model)
        self.data = job_data(run.seed, run.task, run.gt, n_max, run.device)
        self.x = torch.from_numpy(self.data["x_all"])  # on the host: online moves each batch to the device
        self.perm = np.random.default_rng([self.init, n_max]).permutation(n_max)
        self.name = f"model={run.model} optimizer={run.optimizer} seed={run.seed}"
        self.lr_key = f"optim.{run.optimizer}.lr"
        self.control: list[dict] = []  # the control's rows, budget by budget
        settings = {**asdict(run), "lags": self.lags.tolist(), "early_stop": early_stop, "ensemble": ensemble}
        self.units = Units(resume, settings, self.name)

    def network(self):
        """(network, optimizer) at the paired init."""
        return init_network(self.spec, self.run.optimizer, self.x.shape[-1], init=self.init,
                            optim_config=self.run.optim_config, device=self.run.device)

    def learned(self, rows: list[dict], i: int) -> np.ndarray:
        """(smallest, largest threshold) x budgets scored so far: grid lag ``i`` learned (the
        control's rows of those budgets are in)."""
        r, null = (np.array([row[k] for row in rows]) for k in ("r", "null"))
        r_ctrl = np.array([row["r"] for row in self.control[:len(rows) * self.lags.size]])
        return margin(r, r_ctrl.reshape(len(rows), self.lags.size)[:, i], null, self.thr) > 0

    def member(self, i: int | None) -> Member:
        """The control (``i`` None: the first grid lag's targets under one permutation of the
        stream, scored at every grid lag, its rows :attr:`control`) or grid lag i's training, which
        (with :attr:`early_stop`) stops once learned at two consecutive budgets under the largest
        threshold."""
        lag = int(self.lags[0 if i is None else i])
        y = lag_task(self.run.seed, self.run.task, self.data, lag, self.run.gt["coef"])
        if i is None:
            return Member(y[self.perm], "control", self.lags.tolist(), None, self.control)
        stop = (lambda rows: first_pair(self.learned(rows, i)[1]) >= 0) if self.early_stop else None
        return Member(y, f"lag={lag}", [lag], stop, [])

    def trained(self, member: Member) -> list[dict]:
        """One training, alone: its score rows, appended to ``member.rows``."""
        net, opt = self.network()
        t0, rows = time.perf_counter(), member.rows
        for N in online(net, opt, self.x, torch.from_numpy(member.y), budgets=self.budgets,
                        batch_size=self.run.batch_size, grad_clip=self.grad_clip,
                        run_name=f"{self.name} {member.label}", lr_key=self.lr_key, device=self.run.device):
            r, null = held_out_scores(net, self.data, member.lags, init=self.init, gt=self.run.gt)
            net.train()
            seconds = time.perf_counter() - t0
            rows += [dict(N=int(N), lag=int(lag), r=a, null=b, seconds=seconds) for lag, a, b in zip(member.lags, r, null)]
            if member.stop is not None and member.stop(rows):
                break
        return rows

    def together(self, members: Sequence[Member], budgets: Sequence[int]) -> list[tuple]:
        """The trainings ``members`` (the control first if in) to ``budgets`` as one ensemble
        (:func:`online_ensemble`): their score rows appended to their rows (``seconds``: the
        ensemble's wall time from the init); returns each one's (network, optimizer) at its last
        scored budget."""
        pairs = [self.network() for _ in members]
        t0 = time.perf_counter()

        def scored(k: int, N: int, pred: np.ndarray) -> bool:
            m = members[k]
            r, null = scores_of(pred, self.data, m.lags, init=self.init, gt=self.run.gt)
            seconds = time.perf_counter() - t0
            m.rows += [dict(N=N, lag=int(lag), r=a, null=b, seconds=seconds) for lag, a, b in zip(m.lags, r, null)]
            return m.stop is not None and m.stop(m.rows)

        online_ensemble([net for net, _ in pairs], [opt for _, opt in pairs], self.x, [m.y for m in members],
                        optimizer=self.run.optimizer, optim_config=self.run.optim_config, budgets=budgets,
                        batch_size=self.run.batch_size, grad_clip=self.grad_clip,
                        run_names=[f"{self.name} {m.label}" for m in members], lr_key=self.lr_key,
                        x_test=self.data["x_test"], scored=scored, device=self.run.device)
        return pairs

    def lag_rows(self) -> Iterator[list[dict]]:
        """Each grid lag's score rows, in lag order, the control's first (into :attr:`control`): one
        training at a time (:attr:`ensemble` 0), or in chunks of :attr:`ensemble` lags, the control
        with the first; a consumer that stops early trains no further chunk. Each training (each
        chunk) is one of :attr:`units`: a finished one's rows are taken from there."""
        if not self.ensemble:
            self.control[:] = self.units.run("control", partial(self.alone, None))
            for i in range(self.lags.size):
                yield self.units.run(f"lag={self.lags[i]}", partial(self.alone, i))
            return
        log.info("%s: the lags in chunks of %d as one ensemble each, the control with the first", self.name,
                 self.ensemble)
        for first in range(0, self.lags.size, self.ensemble):
            done = self.units.run(f"lags={self.lags[first]}..", partial(self.chunk_rows, first))
            if first == 0:
                self.control[:] = done["control"]
            yield from done["lags"]

    def task_rows(self, frontier_stop: int) -> Iterator[list[dict]]:
        """Each grid lag's score rows (:meth:`lag_rows`) until the frontier rule stops after
        ``frontier_stop`` consecutive lags with no learned pair by N_max under the smallest
        threshold (0: every lag)."""
        unlearned = 0
        for i, rows in enumerate(self.lag_rows()):
            yield rows
            unlearned = unlearned + 1 if first_pair(self.learned(rows, i)[0]) < 0 else 0
            if frontier_stop and unlearned >= frontier_stop:
                return

    def table(self, task: Sequence[dict]) -> pd.DataFrame:
        """The scores table of the control's rows and the lags' rows ``task``, keyed by the job."""
        keys = dict(model=self.run.model, optimizer=self.run.optimizer, seed=self.run.seed)
        rows = [dict(target="control", **row) for row in self.control] + [dict(target="task", **row) for row in task]
        out = pd.DataFrame(rows, columns=["target", "lag", "N", "r", "null", "seconds"]).assign(**keys)
        return out[[*keys, "target", "lag", "N", "r", "null", "seconds"]]

    def alone(self, i: int | None) -> list[dict]:
        """The score rows of the control (``i`` None) or of grid lag i trained alone (:meth:`member`,
        :meth:`trained`)."""
        return self.trained(self.member(i))

    def chunk_rows(self, first: int) -> dict:
        """The score rows of the chunk of :attr:`ensemble` grid lags from index ``first`` trained as
        one ensemble (the control with the first chunk): ``control`` (:attr:`control`) and ``lags``,
        one list per lag."""
        chunk = [self.member(i) for i in range(first, min(first + self.ensemble, self.lags.size))]
        self.together([self.member(None), *chunk] if first == 0 else chunk, self.budgets)
        return {"control": self.control, "lags": [member.rows for member in chunk]}


def budget_trainings(
    *, model: str, optimizer: str, seed: int, lags: Sequence[int], thresholds: Sequence[float],
    budgets: Sequence[int], batch_size: int, frontier_stop: int, task: Mapping, model_config: Mapping,
    optim_config: Mapping, train_config: Mapping, gt: Mapping, early_stop: bool = True, ensemble: int = 0,
    device: str = "cpu", resume: str | Path | None = None,
) -> pd.DataFrame:
    """The scores of one (model, seed): one row per (target, lag, N) scored, target "control" (at
    every grid lag and budget) or "task" (the lag's own training, at its lag, at each budget until
    it stopped), with r, null and seconds (the training's wall time from its init to that score).

    The keywords are :class:`Settings`'; ``frontier_stop`` = 0 runs every lag; ``early_stop`` =
    False runs every lag to N_max (a check); ``ensemble`` = E > 0 trains the lags in chunks of E as
    one ensemble each (the same rows, r and null to rounding). ``resume``: the job's ``.resume/``
    directory, where each finished training (chunk) keeps its rows and from which a re-run with the
    same settings goes on (None: nothing kept).
    """
    run = Settings(model=model, optimizer=optimizer, seed=seed, lags=lags, budgets=budgets, batch_size=batch_size,
                   task=task, model_config=model_config, optim_config=optim_config, train_config=train_config, gt=gt,
                   thresholds=thresholds, device=device)
    job = BudgetJob(run, early_stop=early_stop, ensemble=ensemble, resume=resume)
    return job.table([row for rows in job.task_rows(frontier_stop) for row in rows])


def budget_networks(
    *, model: str, optimizer: str, seed: int, lags: Sequence[int], budgets: Sequence[int], task: Mapping,
    model_config: Mapping, optim_config: Mapping, train_config: Mapping, gt: Mapping, recorded: pd.DataFrame,
    ensemble: int = 0, thresholds: Sequence[float] = (), device: str = "cpu",
) -> dict[str, dict]:
    """The networks of one (model, seed) of the budget protocol as checkpoints (docs/method.md
    §10b), named as :data:`learnwin.stats.prediction.NETWORKS`: the shared init, and the first grid
    lag's online training at its last scored budget (where early stop ended it, else N_max). Both
    record that lag as ``task_lag``.

    The trained network is trained again as :func:`budget_trainings` trained it (``ensemble`` and
    ``thresholds`` as there), so on one device it is bitwise the network the protocol scored: its
    held-out score, taken as the job took it, must equal the ``recorded`` one (the job's scores
    table) or this raises. Under an ensemble (``ensemble`` > 0) the job's first chunk (the control
    and the first ``ensemble`` lags, each leaving at its early stop) is trained again to that
    budget: a member's arithmetic may depend on the ensemble it is in.
    """
    lag = int(min(lags))
    rows = recorded[(recorded["target"] == "task") & (recorded["lag"] == lag)]
    if rows.empty:
        raise ValueError(f"model={model} seed={seed}: the scores have no task row at the first grid lag {lag}")
    batch_size = train_config["batch_size"]
    budgets = budget_grid(budgets, batch_size)
    n_stop = int(rows["N"].max())
    who = f"model={model} seed={seed}"
    kw = dict(model_config=model_config, optim_config=optim_config)
    meta = {**checkpoint_meta(model, optimizer, seed, input_size=task["D"], **kw), "task_lag": lag}
    init = init_seed(seed, model)
    net, opt = initial(model, optimizer, task["D"], init=init, device=device, **kw)
    nets = {"init": checkpoint(net, opt, "init", meta, float("nan"))}
    if ensemble:
        if not thresholds:
            raise ValueError(f"{who}: budget_networks under an ensemble needs the job's thresholds (its early stop)")
        job = BudgetJob(Settings(model=model, optimizer=optimizer, seed=seed, lags=lags, budgets=budgets,
                            batch_size=batch_size, task=task, train_config=train_config, gt=gt, thresholds=thresholds,
                            device=device, **kw), ensemble=ensemble)
        chunk = [job.member(i) for i in (None, *range(min(ensemble, job.lags.size)))]
        net, opt = job.together(chunk, budgets[budgets <= n_stop])[1]
        last = chunk[1].rows[-1]  # the first lag's last score row
        r = last["r"] if last["N"] == n_stop else float("nan")
    else:
        data = job_data(seed, task, gt, n_stop, device)
        y = torch.from_numpy(lag_task(seed, task, data, lag, gt["coef"]))
        for _ in online(net, opt, torch.from_numpy(data["x_all"]), y, budgets=budgets[budgets <= n_stop],
                        batch_size=batch_size, grad_clip=train_config["grad_clip"],
                        run_name=f"{who} lag={lag}", lr_key=f"optim.{optimizer}.lr", device=device):
            pass
        r = held_out_scores(net, data, [lag], init=init, gt=gt)[0][0]
    check_recorded(r, recorded, N=n_stop, lag=lag, who=who)
    nets["trained"] = checkpoint(net, opt, "trained", meta, float("nan"))
    return nets
