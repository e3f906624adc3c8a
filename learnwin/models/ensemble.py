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

Speed (benchmarks/ensemble.py, docs/performance.md "Ensembles"): on CPU the ensemble breaks even
with separate trainings on the hand-written BPTT near E = 4, above the default's 3 seeds, so
the workflow trains one network per job there (:func:`learnwin.infra.resources.ensemble_seeds`).
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


def _rows(ens: Ensemble, epoch: int, members: list[int], data: tuple) -> list[dict]:
    """The learning-curve rows after ``epoch`` of the runs ``members`` (the ensemble's, in order),
    as :func:`learnwin.models.train.train_run` records them, from batched forwards."""
    xtr, ytr, xva, yva, n_r2, variances = data
    mse = []
    for x, y in ((xtr[members, :n_r2], ytr[members, :n_r2]), (xva[members], yva[members])):
        total = sum(((ens.outputs(x[:, i:i + EVAL_BATCH]) - y[:, i:i + EVAL_BATCH]) ** 2).flatten(1).sum(1)
                    for i in range(0, x.shape[1], EVAL_BATCH))
        mse.append((total / y[0].numel()).tolist())
    return [curve_row(epoch, tr, va, *variances[k]) for k, tr, va in zip(members, *mse)]


def train_runs(
    *, data_dirs: Sequence[str | Path], out_dirs: Sequence[str | Path], model: str, optimizer: str,
    seeds: Sequence[int], model_config: dict, optim_config: dict, train_config: dict,
    snapshot_epochs: Sequence[int | str], device: str = "cpu",
) -> dict[int, str]:
    """Train the runs of ``seeds`` (one ``data_dirs`` and one ``out_dirs`` entry each: the seed's
    splits, all of one size, and its outputs) as one ensemble; write each run's outputs as
    :func:`learnwin.models.train.train_run` writes them (docs/method.md §3): its own data, init,
    epoch order, optimizer state, best epoch, resume state and divergence.

    A run that diverges stops (its outputs are tombstones, its curve carries the note) and the
    others go on. A run resumed at an earlier epoch than others trains alone until they meet.
    Returns the divergence message of each seed that diverged.
    """
    splits = [load_splits(d, train_config, device) for d in data_dirs]
    shapes = {tuple(t.shape for t in s[:4]) for s in splits}
    if len(shapes) > 1:
        raise ValueError(f"train_runs: the seeds' splits in {list(map(str, data_dirs))} differ in shape: {shapes}")
    runs = [Run(out_dir, model=model, optimizer=optimizer, seed=seed, model_config=model_config,
                optim_config=optim_config, train_config=train_config, snapshot_epochs=snapshot_epochs, xtr=s[0],
                ytr=s[1], device=device) for seed, out_dir, s in zip(seeds, out_dirs, splits)]
    data = (*(torch.stack([s[k] for s in splits]) for k in range(4)), splits[0][4], [s[5:] for s in splits])
    xtr, ytr = data[:2]
    bs, clip, n = train_config["batch_size"], train_config["grad_clip"], xtr.shape[1]

    def ensemble_of(members: list[int]) -> Ensemble:
        return Ensemble([runs[k].net for k in members], [runs[k].opt for k in members], optimizer, optim_config)

    fresh = [k for k, run in enumerate(runs) if run.start == 0]
    if fresh:
        for k, row in zip(fresh, _rows(ensemble_of(fresh), 0, fresh, data)):
            runs[k].begin(row)
    log.info("model=%s optimizer=%s: seeds %s as one ensemble", model, optimizer, list(seeds))
    members, ens = [], None
    for epoch in range(min(run.start for run in runs) + 1, train_config["epochs"] + 1):
        now = [k for k, run in enumerate(runs) if run.start < epoch and not run.diverged]
        if not now:
            break
        if now != members:  # a resumed run joins, or a diverged one left
            members, ens = now, ensemble_of(now)
        t0 = time.perf_counter()
        orders = torch.stack([epoch_order(n, runs[k].seed, epoch, device) for k in members])
        for i in range(0, n - bs + 1, bs):
            who, idx = torch.tensor(members, device=xtr.device)[:, None], orders[:, i:i + bs]
            losses = ens.step(xtr[who, idx], ytr[who, idx], clip)
            if not torch.isfinite(losses).all():  # one sync per step, as train_step's loss.item()
                ok = [j for j, loss in enumerate(losses.tolist()) if math.isfinite(loss)]
                for j in sorted(set(range(len(members))) - set(ok)):
                    run = runs[members[j]]
                    run.fail(divergence(run.name, losses[j].item(), f"epoch {epoch}", run.lr_key,
                                        run.opt.param_groups[0]["lr"]), epoch)
                if not ok:
                    break
                ens.sync()  # the others took this step; they go on without the diverged runs
                members, orders = [members[j] for j in ok], orders[ok]
                ens = ensemble_of(members)
        if not any(run.start < epoch and not run.diverged for run in runs):
            break
        ens.sync()
        seconds = time.perf_counter() - t0
        for k, row in zip(members, _rows(ens, epoch, members, data)):
            runs[k].end_epoch(row, seconds)
    for run in runs:
        run.finish()
    return {run.seed: run.diverged for run in runs if run.diverged}
