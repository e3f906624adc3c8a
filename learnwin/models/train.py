"""Training with checkpoints, snapshots and resume (docs/method.md §3).

One call trains one (model, optimizer, seed). Loss: MSE over all T outputs. Each epoch
reshuffles with a generator seeded by (seed, epoch), so an epoch's batches do not depend on
what ran before it, and a resumed run is bitwise identical to an uninterrupted one on CPU.

Resume: after every epoch the full state (model, optimizer, best-so-far, learning curve) is
written atomically to ``<out_dir>/.resume/state.pt``, and snapshot checkpoints are written to
``.resume/`` first. Only when training finishes are the declared outputs (snapshot
checkpoints, ``best.pt``, ``final.pt``, ``curve.parquet``) moved into ``out_dir``. A killed job
that is re-run (Snakemake deletes the declared outputs of an incomplete job, not ``.resume/``)
continues from its last finished epoch. The resume state carries a fingerprint of the
settings and is ignored when they changed.
"""

from __future__ import annotations

import copy
import logging
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from learnwin.infra import io
from learnwin.infra.optimizers import spec_of
from learnwin.infra.resources import EVAL_BATCH
from learnwin.infra.resume import fingerprint
from learnwin.models.cells import build_model

log = logging.getLogger(__name__)

class DivergenceError(RuntimeError):
    """The training loss became NaN or infinite."""


def make_optimizer(name: str, params, hparams: dict) -> torch.optim.Optimizer:
    """The registered optimizer ``name`` (:data:`learnwin.infra.optimizers.OPTIMIZERS`, docs/method.md
    §3) with its entry's settings from ``hparams`` (its config section), the entry's default where
    absent; other keys are not its settings and are left out.

    All run their multi-tensor (foreach) update, also on CPU, where torch's default is one
    parameter at a time: the same numbers, bit for bit (tests/test_train.py), in a quarter of
    the time for the cells' 10-16 parameter tensors.
    """
    spec = spec_of(name)
    settings = {key: hparams.get(key, setting["default"]) for key, setting in spec.settings.items()}
    return spec.load()(params, foreach=True, **settings)


def r2_score(mse: float, y_var: float) -> float:
    """R^2 = 1 - MSE / Var(y) (variance pooled over sequences and steps)."""
    return 1.0 - mse / y_var if y_var > 0 else float("nan")




@torch.no_grad()
def evaluate(model, x: torch.Tensor, y: torch.Tensor, batch: int = EVAL_BATCH) -> float:
    """Mean squared error over all outputs of a split, in batches."""
    total = 0.0
    for i in range(0, x.shape[0], batch):
        total += torch.sum((model(x[i:i + batch]) - y[i:i + batch]) ** 2).item()
    return total / y.numel()


def train_epoch(
    net, opt, x: torch.Tensor, y: torch.Tensor, *, seed: int, epoch: int, batch_size: int,
    grad_clip: float, run_name: str, lr_key: str, max_steps: int | None = None,
) -> int:
    """One epoch of the docs/method.md §3 recipe; returns the number of gradient steps taken.

    Reshuffles with a generator seeded by (seed, epoch), takes full batches only (every step
    sees ``batch_size`` sequences), MSE over all outputs, global-norm clip when
    ``grad_clip > 0``. Stops early after ``max_steps`` steps. Raises :class:`DivergenceError`
    naming ``run_name``, the epoch and the config key ``lr_key`` when the loss is not finite.
    """
    n = x.shape[0]
    order = epoch_order(n, seed, epoch, x.device)
    starts = range(0, n - batch_size + 1, batch_size)
    if max_steps is not None:
        starts = starts[:max_steps]
    for i in starts:
        idx = order[i:i + batch_size]
        train_step(net, opt, x[idx], y[idx], grad_clip=grad_clip, run_name=run_name, lr_key=lr_key,
                   where=f"epoch {epoch}")
    return len(starts)


def epoch_order(n: int, seed: int, epoch: int, device) -> torch.Tensor:
    """The order of the n training sequences in ``epoch`` of run ``seed``: a permutation drawn by a
    generator seeded by (seed, epoch), so it does not depend on what ran before (docs/method.md §3)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch)).to(device)


def divergence(run_name: str, loss: float, where: str, lr_key: str, lr: float) -> DivergenceError:
    """The error of a run whose training loss became ``loss`` at ``where`` (the epoch or budget)."""
    return DivergenceError(f"{run_name}: training loss became {loss} at {where}; lower "
                           f"{lr_key} (now {lr}) or set train.grad_clip")


def train_step(net, opt, x: torch.Tensor, y: torch.Tensor, *, grad_clip: float, run_name: str, lr_key: str,
               where: str) -> None:
    """One gradient step of docs/method.md §3 on the batch (x, y): MSE over all outputs, global-norm
    clip when ``grad_clip > 0``. Raises :class:`DivergenceError` naming ``run_name``, ``where`` (the
    epoch or budget) and the config key ``lr_key`` when the loss is not finite."""
    opt.zero_grad(set_to_none=True)
    loss = torch.mean((net(x) - y) ** 2)
    if not math.isfinite(loss.item()):
        raise divergence(run_name, loss.item(), where, lr_key, opt.param_groups[0]["lr"])
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(net.parameters(), grad_clip)
    opt.step()


def _state(module) -> dict:
    """A deep copy of ``module.state_dict()`` (a model's or an optimizer's).

    ``state_dict()`` returns views of the live tensors, so a kept, unsaved one would follow every
    later ``opt.step()``: the best-so-far checkpoint would silently hold the final weights.
    """
    return copy.deepcopy(module.state_dict())


def checkpoint_meta(model: str, optimizer: str, seed: int, *, input_size: int, model_config: dict,
                    optim_config: dict) -> dict:
    """What a checkpoint records besides its weights: enough for
    :func:`learnwin.models.cells.checkpoint_model` and the snapshot's rates (docs/method.md §3-4)."""
    return {"cell": model, "optimizer_name": optimizer, "hparams": dict(optim_config),
            "model_config": {"input_size": input_size, **model_config}, "seed": seed}


def checkpoint(model, opt, epoch, meta, val_mse) -> dict:
    """A checkpoint: ``meta`` with copies of the model's and the optimizer's state at ``epoch``."""
    return {**meta, "model": _state(model), "optimizer": _state(opt), "epoch": epoch,
            "val_mse": val_mse}


class Run:
    """One (model, optimizer, seed) run: its network and optimizer, built (or resumed) as
    :func:`train_run` builds them, and its bookkeeping: learning curve, best-so-far and snapshot
    checkpoints, the resume state after each epoch, the declared outputs at the end. The seeds of
    an ensemble (:func:`learnwin.models.ensemble.train_runs`) are one Run each, so their files are
    a separate run's."""

    def __init__(self, out_dir: str | Path, *, model: str, optimizer: str, seed: int, model_config: dict,
                 optim_config: dict, train_config: dict, snapshot_epochs: Sequence[int | str], xtr: torch.Tensor,
                 ytr: torch.Tensor, device: str):
        self.out_dir = Path(out_dir)
        self.work = self.out_dir / ".resume"
        self.model, self.optimizer, self.seed, self.epochs = model, optimizer, seed, train_config["epochs"]
        self.int_epochs = sorted({int(e) for e in snapshot_epochs if str(e).isdigit()})
        self.name, self.lr_key = f"model={model} optimizer={optimizer} seed={seed}", f"optim.{optimizer}.lr"
        torch.manual_seed(seed)
        self.net = build_model(model, xtr.shape[-1], **model_config).to(device)
        self.opt = make_optimizer(optimizer, self.net.parameters(), optim_config)
        self.meta = checkpoint_meta(model, optimizer, seed, input_size=xtr.shape[-1], model_config=model_config,
                                    optim_config=optim_config)
        self.fingerprint = fingerprint(model, optimizer, seed, model_config, optim_config, train_config,
                                        self.int_epochs, xtr.shape, float(ytr.sum()))
        self.start, self.curve, self.best, self.diverged, self.diverged_at = 0, [], None, "", 0
        state_path = self.work / "state.pt"
        if state_path.exists():
            state = io.load_checkpoint(state_path, map_location=device)
            if state.get("fingerprint") == self.fingerprint:
                self.net.load_state_dict(state["model"])
                self.opt.load_state_dict(state["optimizer"])
                self.start, self.curve, self.best = state["epoch"], state["curve"], state["best"]
                log.info("%s: resuming after epoch %d from %s", self.name, self.start, state_path)
            else:
                log.info("%s: settings changed, ignoring stale resume state %s", self.name, state_path)

    def begin(self, row: dict) -> None:
        """The curve's epoch-0 ``row``: the init is the best so far (and a snapshot when asked)."""
        self.curve = [row]
        self.best = checkpoint(self.net, self.opt, 0, self.meta, row["val_mse"])
        if 0 in self.int_epochs:
            io.save_checkpoint(checkpoint(self.net, self.opt, 0, self.meta, row["val_mse"]), self.work / "epoch0.pt")

    def end_epoch(self, row: dict, seconds: float) -> None:
        """After an epoch's training: its curve ``row``, best and snapshot checkpoints, resume state."""
        epoch = row["epoch"]
        self.curve.append(row)
        if row["val_mse"] < self.best["val_mse"]:
            self.best = checkpoint(self.net, self.opt, epoch, self.meta, row["val_mse"])
        if epoch in self.int_epochs:
            io.save_checkpoint(checkpoint(self.net, self.opt, epoch, self.meta, row["val_mse"]),
                               self.work / f"epoch{epoch}.pt")
        io.save_checkpoint({"fingerprint": self.fingerprint, "epoch": epoch, "curve": self.curve,
                            "best": self.best, "model": _state(self.net), "optimizer": _state(self.opt)},
                           self.work / "state.pt")
        log.info("%s epoch %d/%d train_mse %.4f train_r2 %.3f val_mse %.4f val_r2 %.3f "
                 "%.2fs eta %.0fs", self.name, epoch, self.epochs, row["train_mse"], row["train_r2"],
                 row["val_mse"], row["val_r2"], seconds, seconds * (self.epochs - epoch))

    def fail(self, err: DivergenceError, epoch: int) -> None:
        """The training diverged in ``epoch``: it stops there, :meth:`finish` writes tombstones."""
        self.diverged, self.diverged_at = str(err), epoch
        log.error(self.diverged)

    def finish(self) -> pd.DataFrame:
        """Write the declared outputs (tombstones when the training diverged) and the curve."""
        if self.diverged:  # every declared checkpoint is a tombstone: the snapshot stage makes NaN tables
            names = [f"epoch{e}.pt" for e in self.int_epochs] + ["best.pt", "final.pt"]
            for name in names:
                io.save_checkpoint({**self.meta, "diverged": self.diverged, "epoch": self.diverged_at}, self.out_dir / name)
        else:
            for e in self.int_epochs:  # copy, not move: a kill here must leave the resume state whole
                with io.atomic_path(self.out_dir / f"epoch{e}.pt") as tmp:
                    shutil.copyfile(self.work / f"epoch{e}.pt", tmp)
            io.save_checkpoint(self.best, self.out_dir / "best.pt")
            io.save_checkpoint(checkpoint(self.net, self.opt, self.epochs, self.meta, self.curve[-1]["val_mse"]),
                               self.out_dir / "final.pt")
        df = pd.DataFrame(self.curve)
        df.insert(0, "seed", self.seed)
        df.insert(0, "optimizer", self.optimizer)
        df.insert(0, "model", self.model)
        io.write_table(df, self.out_dir / "curve.parquet", "curve",
                       notes={"diverged": self.diverged} if self.diverged else None)
        shutil.rmtree(self.work)
        return df


def curve_row(epoch: int, train_mse: float, val_mse: float, var_tr: float, var_va: float) -> dict:
    """One learning-curve row: the MSEs and their R^2 (:func:`r2_score`)."""
    return {"epoch": epoch, "train_mse": train_mse, "train_r2": r2_score(train_mse, var_tr),
            "val_mse": val_mse, "val_r2": r2_score(val_mse, var_va)}


def load_splits(data_dir: str | Path, train_config: dict, device: str) -> tuple:
    """(xtr, ytr, xva, yva, n_r2, var_tr, var_va): the splits on ``device``, the training sequences
    the curve's train R^2 uses and the two R^2 variances."""
    xtr, ytr = (torch.from_numpy(np.array(a)).to(device) for a in io.load_split(data_dir, "train"))
    xva, yva = (torch.from_numpy(np.array(a)).to(device) for a in io.load_split(data_dir, "val"))
    n_r2 = min(train_config["r2_subset"], xtr.shape[0])
    return xtr, ytr, xva, yva, n_r2, ytr[:n_r2].var(unbiased=False).item(), yva.var(unbiased=False).item()


def train_run(
    *,
    data_dir: str | Path,
    out_dir: str | Path,
    model: str,
    optimizer: str,
    seed: int,
    model_config: dict,
    optim_config: dict,
    train_config: dict,
    snapshot_epochs: Sequence[int | str],
    device: str = "cpu",
) -> pd.DataFrame:
    """Train one run; write snapshot checkpoints, ``best.pt``, ``final.pt`` and ``curve.parquet``.

    Returns the learning curve. When the loss stops being finite, training stops, the outputs
    are still written (every checkpoint a tombstone carrying the error message, so the run is
    left out downstream) and :class:`DivergenceError`, naming the run and epoch, is raised.
    """
    xtr, ytr, xva, yva, n_r2, var_tr, var_va = load_splits(data_dir, train_config, device)
    run = Run(out_dir, model=model, optimizer=optimizer, seed=seed, model_config=model_config,
              optim_config=optim_config, train_config=train_config, snapshot_epochs=snapshot_epochs,
              xtr=xtr, ytr=ytr, device=device)
    net = run.net

    def record(epoch: int) -> dict:
        net.eval()
        row = curve_row(epoch, evaluate(net, xtr[:n_r2], ytr[:n_r2]), evaluate(net, xva, yva), var_tr, var_va)
        net.train()
        return row

    if run.start == 0:
        run.begin(record(0))
    for epoch in range(run.start + 1, run.epochs + 1):
        t0 = time.perf_counter()
        try:
            train_epoch(net, run.opt, xtr, ytr, seed=seed, epoch=epoch, batch_size=train_config["batch_size"],
                        grad_clip=train_config["grad_clip"], run_name=run.name, lr_key=run.lr_key)
        except DivergenceError as err:
            run.fail(err, epoch)
            break
        run.end_epoch(record(epoch), time.perf_counter() - t0)
    df = run.finish()
    if run.diverged:
        raise DivergenceError(run.diverged)
    return df
