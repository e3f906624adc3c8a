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
import hashlib
import json
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
from learnwin.models.cells import build_model
from learnwin.models.data import load_split

log = logging.getLogger(__name__)

OPTIMIZERS = ("adamw", "adam", "sgd", "sgd_momentum", "rmsprop")


class DivergenceError(RuntimeError):
    """The training loss became NaN or infinite."""


def make_optimizer(name: str, params, hparams: dict) -> torch.optim.Optimizer:
    """The optimizers of docs/method.md §3 from their config section (lr, weight_decay, ...).

    All run their multi-tensor (foreach) update, also on CPU, where torch's default is one
    parameter at a time: the same numbers, bit for bit (tests/test_train.py), in a quarter of
    the time for the cells' 10-16 parameter tensors.
    """
    lr, wd = hparams["lr"], hparams.get("weight_decay", 0.0)
    common = dict(lr=lr, weight_decay=wd, foreach=True)
    if name == "adamw":
        return torch.optim.AdamW(params, **common)
    if name == "adam":
        return torch.optim.Adam(params, **common)
    if name == "sgd":
        return torch.optim.SGD(params, **common)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, momentum=hparams.get("momentum", 0.9), **common)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, alpha=hparams.get("alpha", 0.99), **common)
    raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}")


def r2_score(mse: float, y_var: float) -> float:
    """R^2 = 1 - MSE / Var(y) (variance pooled over sequences and steps)."""
    return 1.0 - mse / y_var if y_var > 0 else float("nan")


EVAL_BATCH = 256  # sequences per evaluation forward pass: bounds RAM (evaluation alone runs 3x
# faster than at batch 32; whole epochs of the default run did not change measurably)


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
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=gen).to(x.device)
    starts = range(0, n - batch_size + 1, batch_size)
    if max_steps is not None:
        starts = starts[:max_steps]
    for i in starts:
        idx = order[i:i + batch_size]
        train_step(net, opt, x[idx], y[idx], grad_clip=grad_clip, run_name=run_name, lr_key=lr_key,
                   where=f"epoch {epoch}")
    return len(starts)


def train_step(net, opt, x: torch.Tensor, y: torch.Tensor, *, grad_clip: float, run_name: str, lr_key: str,
               where: str) -> None:
    """One gradient step of docs/method.md §3 on the batch (x, y): MSE over all outputs, global-norm
    clip when ``grad_clip > 0``. Raises :class:`DivergenceError` naming ``run_name``, ``where`` (the
    epoch or budget) and the config key ``lr_key`` when the loss is not finite."""
    opt.zero_grad(set_to_none=True)
    loss = torch.mean((net(x) - y) ** 2)
    if not math.isfinite(loss.item()):
        raise DivergenceError(
            f"{run_name}: training loss became {loss.item()} at {where}; lower "
            f"{lr_key} (now {opt.param_groups[0]['lr']}) or set train.grad_clip"
        )
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(net.parameters(), grad_clip)
    opt.step()


def _fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


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
    out_dir = Path(out_dir)
    work = out_dir / ".resume"
    epochs, bs, clip = train_config["epochs"], train_config["batch_size"], train_config["grad_clip"]
    int_epochs = sorted({int(e) for e in snapshot_epochs if str(e).isdigit()})
    run_name = f"model={model} optimizer={optimizer} seed={seed}"

    xtr, ytr = (torch.from_numpy(np.array(a)).to(device) for a in load_split(data_dir, "train"))
    xva, yva = (torch.from_numpy(np.array(a)).to(device) for a in load_split(data_dir, "val"))
    n_r2 = min(train_config["r2_subset"], xtr.shape[0])
    var_tr, var_va = ytr[:n_r2].var(unbiased=False).item(), yva.var(unbiased=False).item()

    torch.manual_seed(seed)
    net = build_model(model, xtr.shape[-1], **model_config).to(device)
    opt = make_optimizer(optimizer, net.parameters(), optim_config)
    meta = checkpoint_meta(model, optimizer, seed, input_size=xtr.shape[-1], model_config=model_config,
                           optim_config=optim_config)
    fingerprint = _fingerprint(model, optimizer, seed, model_config, optim_config, train_config,
                               int_epochs, xtr.shape, float(ytr.sum()))

    state_path = work / "state.pt"
    start, curve, best = 0, [], None
    if state_path.exists():
        state = io.load_checkpoint(state_path, map_location=device)
        if state.get("fingerprint") == fingerprint:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start, curve, best = state["epoch"], state["curve"], state["best"]
            log.info("%s: resuming after epoch %d from %s", run_name, start, state_path)
        else:
            log.info("%s: settings changed, ignoring stale resume state %s", run_name, state_path)

    def record(epoch: int) -> dict:
        net.eval()
        tr = evaluate(net, xtr[:n_r2], ytr[:n_r2])
        va = evaluate(net, xva, yva)
        net.train()
        return {"epoch": epoch, "train_mse": tr, "train_r2": r2_score(tr, var_tr),
                "val_mse": va, "val_r2": r2_score(va, var_va)}

    if start == 0:
        curve = [record(0)]
        best = checkpoint(net, opt, 0, meta, curve[0]["val_mse"])
        if 0 in int_epochs:
            io.save_checkpoint(checkpoint(net, opt, 0, meta, curve[0]["val_mse"]), work / "epoch0.pt")

    diverged = ""
    for epoch in range(start + 1, epochs + 1):
        t0 = time.perf_counter()
        try:
            train_epoch(net, opt, xtr, ytr, seed=seed, epoch=epoch, batch_size=bs, grad_clip=clip,
                        run_name=run_name, lr_key=f"optim.{optimizer}.lr")
        except DivergenceError as err:
            diverged = str(err)
            log.error(diverged)
            break
        row = record(epoch)
        curve.append(row)
        seconds = time.perf_counter() - t0
        if row["val_mse"] < best["val_mse"]:
            best = checkpoint(net, opt, epoch, meta, row["val_mse"])
        if epoch in int_epochs:
            io.save_checkpoint(checkpoint(net, opt, epoch, meta, row["val_mse"]), work / f"epoch{epoch}.pt")
        io.save_checkpoint({"fingerprint": fingerprint, "epoch": epoch, "curve": curve,
                            "best": best, "model": _state(net), "optimizer": _state(opt)},
                           state_path)
        log.info("%s epoch %d/%d train_mse %.4f train_r2 %.3f val_mse %.4f val_r2 %.3f "
                 "%.2fs eta %.0fs", run_name, epoch, epochs, row["train_mse"], row["train_r2"],
                 row["val_mse"], row["val_r2"], seconds, seconds * (epochs - epoch))

    if diverged:  # every declared checkpoint is a tombstone: the snapshot stage makes NaN tables
        names = [f"epoch{e}.pt" for e in int_epochs] + ["best.pt", "final.pt"]
        for name in names:
            io.save_checkpoint({**meta, "diverged": diverged, "epoch": epoch}, out_dir / name)
    else:
        for e in int_epochs:  # copy, not move: a kill here must leave the resume state whole
            with io.atomic_path(out_dir / f"epoch{e}.pt") as tmp:
                shutil.copyfile(work / f"epoch{e}.pt", tmp)
        io.save_checkpoint(best, out_dir / "best.pt")
        io.save_checkpoint(checkpoint(net, opt, epochs, meta, curve[-1]["val_mse"]), out_dir / "final.pt")
    df = pd.DataFrame(curve)
    df.insert(0, "seed", seed)
    df.insert(0, "optimizer", optimizer)
    df.insert(0, "model", model)
    io.write_table(df, out_dir / "curve.parquet", "curve", notes={"diverged": diverged} if diverged else None)
    shutil.rmtree(work)
    if diverged:
        raise DivergenceError(diverged)
    return df
