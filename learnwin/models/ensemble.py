"""Networks of one shape trained together along a leading ensemble dimension (docs/method.md §3).

E networks of one architecture (the seeds of a cell, the lags of a budget job) take one step
together: their parameters are stacked along a leading dimension (``torch.func.stack_module_state``),
the forward is ``vmap`` of ``functional_call`` over the stack (each member its own inputs or
shared ones, its own targets), and one backward of the summed losses gives each member its own
gradient. The update is each member's own: the global-norm clip of ``clip_grad_norm_`` per
member, and one optimizer over the stacked tensors, whose updates (AdamW, Adam, SGD, momentum,
RMSprop) are elementwise, so each member's slice follows its own state. An ensemble step equals
E separate :func:`learnwin.models.train.train_step` calls to rounding (tests/test_ensemble.py:
1e-10 in float64); under ``vmap`` the cells run their step-by-step reference scan, not the
hand-written BPTT, so the bits differ.

The members stay real modules and optimizers (``nets``, ``opts``): :meth:`Ensemble.sync` copies
the stacked state back into them (copies, never views into the stack: a kept or saved view would
follow later steps, and ``torch.save`` of a view writes the whole stack), so checkpoints, best
epochs and curves are made per member exactly as for a separate run.

Speed (benchmarks/ensemble.py, docs/performance.md "Ensembles"): on CPU the ensemble is no faster
per network than separate trainings on the hand-written BPTT, so the workflow trains one
network per job there (:func:`learnwin.infra.resources.ensemble_seeds`).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.func import functional_call, stack_module_state, vmap

from learnwin.models.train import EVAL_BATCH, Run, curve_row, divergence, epoch_order, load_splits, make_optimizer

log = logging.getLogger(__name__)


class Ensemble:
    """The members ``nets`` (one architecture, one device) with their optimizers ``opts`` (all
    ``optimizer`` with ``optim_config``, as :func:`learnwin.models.train.make_optimizer` makes
    them, fresh or with state), stacked for joint steps."""

    def __init__(self, nets: list, opts: list, optimizer: str, optim_config: dict):
        self.nets, self.opts = list(nets), list(opts)
        self.optimizer, self.optim_config = optimizer, optim_config
        self.names = [name for name, _ in nets[0].named_parameters()]
        self.params, self.buffers = stack_module_state(self.nets)
        self.base = copy.deepcopy(nets[0]).to("meta")
        self.opt = make_optimizer(optimizer, [self.params[n] for n in self.names], optim_config)
        self.opt.load_state_dict(_stack_states([o.state_dict() for o in self.opts]))

        def loss(p, b, x, y):
            return torch.mean((functional_call(self.base, (p, b), (x,)) - y) ** 2)

        self._losses = {dims: vmap(loss, in_dims=(0, 0, *dims)) for dims in ((0, 0), (None, 0))}
        self._outputs = {dims: vmap(lambda p, b, x: functional_call(self.base, (p, b), (x,)), in_dims=(0, 0, dims))
                         for dims in (0, None)}

    def __len__(self) -> int:
        return len(self.nets)

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each member's MSE (E,) on its targets y (E, B, T), inputs x (E, B, T, D) or shared (B, T, D)."""
        return self._losses[(0 if x.dim() == y.dim() + 1 else None, 0)](self.params, self.buffers, x, y)

    @torch.no_grad()
    def outputs(self, x: torch.Tensor) -> torch.Tensor:
        """Each member's readout (E, B, T) on x (E, B, T, D), or on shared inputs (B, T, D)."""
        return self._outputs[0 if x.dim() == 4 else None](self.params, self.buffers, x)

    def step(self, x: torch.Tensor, y: torch.Tensor, grad_clip: float) -> torch.Tensor:
        """One joint gradient step (each member's MSE, global-norm clip when ``grad_clip > 0``, its
        optimizer update); returns the members' losses before the step. A member whose loss is not
        finite gets a non-finite update: the caller stops using it."""
        self.opt.zero_grad(set_to_none=True)
        losses = self.losses(x, y)
        losses.sum().backward()
        if grad_clip > 0:
            grads = [self.params[n].grad for n in self.names]
            norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], 1)
            scale = (grad_clip / (torch.linalg.vector_norm(norms, dim=1) + 1e-6)).clamp(max=1.0)
            for g in grads:  # torch.nn.utils.clip_grad_norm_, per member
                g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
        self.opt.step()
        return losses.detach()

    def sync(self) -> None:
        """Copy the stacked parameters, buffers and optimizer state into the members' own modules
        and optimizers (copies: the members share no storage with the stack)."""
        state = self.opt.state_dict()
        with torch.no_grad():
            for i, (net, opt) in enumerate(zip(self.nets, self.opts)):
                for name, t in net.named_parameters():
                    t.copy_(self.params[name][i])
                for name, t in net.named_buffers():
                    t.copy_(self.buffers[name][i])
                opt.load_state_dict(_member_state(state, i))


def _stack_states(states: list[dict]) -> dict:
    """One optimizer state dict of the stacked parameters from the members' (same param_groups):
    per-parameter tensors stacked, the step counts (equal, since members step together) the first's."""
    out = {"param_groups": copy.deepcopy(states[0]["param_groups"]), "state": {}}
    for k, entry in states[0]["state"].items():
        out["state"][k] = {key: v.clone() if key == "step" or v is None else
                           torch.stack([s["state"][k][key] for s in states]) for key, v in entry.items()}
    return out


def _member_state(state: dict, i: int) -> dict:
    """Member ``i``'s optimizer state dict (copies) from the stacked one: what its own optimizer
    would hold after the same steps."""
    return {"param_groups": copy.deepcopy(state["param_groups"]),
            "state": {k: {key: v.clone() if key == "step" else None if v is None else v[i].clone()
                          for key, v in entry.items()}
                      for k, entry in state["state"].items()}}


def _rows(ens: Ensemble, epoch: int, splits: tuple) -> list[dict]:
    """The members' learning-curve rows after ``epoch`` (as :func:`learnwin.models.train.train_run`
    records them), from batched forwards over the shared evaluation sequences."""
    xtr, ytr, xva, yva, n_r2, var_tr, var_va = splits
    mse = []
    for x, y in ((xtr[:n_r2], ytr[:n_r2]), (xva, yva)):
        total = sum(((ens.outputs(x[i:i + EVAL_BATCH]) - y[i:i + EVAL_BATCH]) ** 2).flatten(1).sum(1)
                    for i in range(0, x.shape[0], EVAL_BATCH))
        mse.append((total / y.numel()).tolist())
    return [curve_row(epoch, tr, va, var_tr, var_va) for tr, va in zip(*mse)]


def train_runs(
    *, data_dir: str | Path, out_dirs: Sequence[str | Path], model: str, optimizer: str, seeds: Sequence[int],
    model_config: dict, optim_config: dict, train_config: dict, snapshot_epochs: Sequence[int | str],
    device: str = "cpu",
) -> dict[int, str]:
    """Train the runs of ``seeds`` (one ``out_dirs`` entry each) as one ensemble; write each run's
    outputs as :func:`learnwin.models.train.train_run` writes them (docs/method.md §3): its own
    init, epoch order, optimizer state, best epoch, resume state and divergence.

    A run that diverges stops (its outputs are tombstones, its curve carries the note) and the
    others go on. A run resumed at an earlier epoch than others trains alone until they meet.
    Returns the divergence message of each seed that diverged.
    """
    splits = load_splits(data_dir, train_config, device)
    xtr, ytr = splits[:2]
    runs = [Run(out_dir, model=model, optimizer=optimizer, seed=seed, model_config=model_config,
                optim_config=optim_config, train_config=train_config, snapshot_epochs=snapshot_epochs, xtr=xtr,
                ytr=ytr, device=device) for seed, out_dir in zip(seeds, out_dirs)]
    bs, clip, n = train_config["batch_size"], train_config["grad_clip"], xtr.shape[0]
    fresh = [run for run in runs if run.start == 0]
    if fresh:
        ens = Ensemble([run.net for run in fresh], [run.opt for run in fresh], optimizer, optim_config)
        for run, row in zip(fresh, _rows(ens, 0, splits)):
            run.begin(row)
    members, ens = [], None
    for epoch in range(min(run.start for run in runs) + 1, train_config["epochs"] + 1):
        now = [run for run in runs if run.start < epoch and not run.diverged]
        if not now:
            break
        if now != members:  # a resumed run joins, or a diverged one left
            members = now
            ens = Ensemble([run.net for run in members], [run.opt for run in members], optimizer, optim_config)
        t0 = time.perf_counter()
        orders = torch.stack([epoch_order(n, run.seed, epoch, device) for run in members])
        for i in range(0, n - bs + 1, bs):
            idx = orders[:, i:i + bs]
            losses = ens.step(xtr[idx], ytr[idx], clip)
            if not torch.isfinite(losses).all():  # one sync per step, as train_step's loss.item()
                ok = [k for k, loss in enumerate(losses.tolist()) if math.isfinite(loss)]
                for k in sorted(set(range(len(members))) - set(ok)):
                    run = members[k]
                    run.fail(divergence(run.name, losses[k].item(), f"epoch {epoch}", run.lr_key,
                                        run.opt.param_groups[0]["lr"]), epoch)
                if not ok:
                    break
                ens.sync()  # the others took this step; they go on without the diverged runs
                members, orders = [members[k] for k in ok], orders[ok]
                ens = Ensemble([run.net for run in members], [run.opt for run in members], optimizer, optim_config)
        if not any(run.start < epoch and not run.diverged for run in runs):
            break
        ens.sync()
        seconds = time.perf_counter() - t0
        for run, row in zip(members, _rows(ens, epoch, splits)):
            run.end_epoch(row, seconds)
    for run in runs:
        run.finish()
    return {run.seed: run.diverged for run in runs if run.diverged}
