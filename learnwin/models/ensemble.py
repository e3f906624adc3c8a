"""Networks of one shape trained together along a leading ensemble dimension (docs/method.md §3).

E networks of one architecture (the seeds and optimizers of a cell, the lags of a budget job) take
one step together, each member on its own inputs or shared ones, with its own targets, and one
backward of the summed losses gives each member its own gradient. The forward of the single-layer
gated cells is their hand-written recurrence with a member dimension (:class:`_MemberScan`: each
step's matmuls batched over the members; bptt's eager driver on the CPU, the compiled and graphed
fused step on CUDA); that of other cells (linear cells, stacks, user cells) is ``vmap`` of
``functional_call`` over the stacked parameters, their step-by-step reference scan. The members of one optimizer (name and config) form a group:
one stacked leaf per parameter (``torch.func.stack_module_state``) and one torch optimizer over
those leaves, whose updates (AdamW, Adam, SGD, momentum, RMSprop) are elementwise, so each member's
slice follows its own state. The groups' leaves are concatenated (``torch.cat``, differentiable)
into the stack the forward runs on, so the backward fills each group's leaves. The clip is
``clip_grad_norm_``'s global norm per member. An ensemble step equals E separate
:func:`learnwin.models.train.train_step` calls to rounding (tests/test_ensemble.py: 1e-10 in
float64), not bit for bit: the members' matmuls are batched, and under ``vmap`` the cells run
their reference scan.

The members stay real modules and optimizers (``nets``, ``opts``): :meth:`Ensemble.sync` copies
the stacked state back into them (copies, never views into the stack: a kept or saved view would
follow later steps, and ``torch.save`` of a view writes the whole stack), so checkpoints, best
epochs and curves are made per member exactly as for a separate run.

Speed (benchmarks/ensemble.py, docs/performance.md "Ensembles"): on CPU the member step trains
1.2-2.1x the networks per second of separate trainings at E = 4 and 1.5-2.5x at E = 16, and beats
vmap at every E; the workflow still trains one network per job there
(:func:`learnwin.infra.resources.ensemble_training` says why).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from learnwin.infra.resources import EVAL_BATCH
from learnwin.models import fused
from learnwin.models.train import Run, curve_row, divergence, epoch_order, load_splits, make_optimizer

log = logging.getLogger(__name__)


class Ensemble:
    """The members ``nets`` (one architecture, one device) with their optimizers ``opts``, member
    i's made by :func:`learnwin.models.train.make_optimizer` from ``optimizers[i]`` and
    ``optim_configs[i]`` (fresh or with state), stacked for joint steps. ``groups``: the members of
    each (optimizer, config), in order of first appearance; ``leaves``: each group's stacked
    parameters; ``group_opts``: each group's optimizer over them. ``member_step`` False runs every
    cell under vmap, the fallback (benchmarks/ensemble.py compares the two)."""

    def __init__(self, nets: Sequence, opts: Sequence, optimizers: Sequence[str], optim_configs: Sequence[Mapping],
                 *, member_step: bool = True):
        if not len(nets) == len(opts) == len(optimizers) == len(optim_configs):
            raise ValueError(f"Ensemble: {len(nets)} nets, {len(opts)} optimizers, {len(optimizers)} optimizer "
                             f"names and {len(optim_configs)} optimizer configs; one of each per member")
        self.nets, self.opts = list(nets), list(opts)
        self.names = [name for name, _ in nets[0].named_parameters()]
        keys = [(name, json.dumps(dict(cfg), sort_keys=True)) for name, cfg in zip(optimizers, optim_configs)]
        self.groups = [[i for i, k in enumerate(keys) if k == key] for key in dict.fromkeys(keys)]
        self.leaves, self.group_opts = [], []
        for members in self.groups:
            params, _ = stack_module_state([self.nets[i] for i in members])
            opt = make_optimizer(optimizers[members[0]], [params[n] for n in self.names], optim_configs[members[0]])
            opt.load_state_dict(_stack_states([self.opts[i].state_dict() for i in members]))
            self.leaves.append(params)
            self.group_opts.append(opt)
        self.buffers = {name: torch.stack([dict(net.named_buffers())[name] for net in self.nets])
                        for name, _ in nets[0].named_buffers()}
        order = [i for members in self.groups for i in members]  # the members along the concatenated leaves
        self._inverse = None if order == sorted(order) else torch.argsort(torch.tensor(order)).to(
            self.leaves[0][self.names[0]].device)
        self.base = copy.deepcopy(nets[0]).to("meta")

        def loss(p, b, x, y):
            return torch.mean((functional_call(self.base, (p, b), (x,)) - y) ** 2)

        self._losses = {dims: vmap(loss, in_dims=(0, 0, *dims)) for dims in ((0, 0), (None, 0))}
        self._outputs = {dims: vmap(lambda p, b, x: functional_call(self.base, (p, b), (x,)), in_dims=(0, 0, dims))
                         for dims in (0, None)}
        self._scan = _MemberScan.of(self.base) if member_step else None

    def __len__(self) -> int:
        return len(self.nets)

    def params(self) -> dict[str, torch.Tensor]:
        """Every member's parameters stacked in member order: the groups' leaves concatenated
        (differentiable, so a backward through them fills each group's leaves)."""
        if len(self.leaves) == 1:
            return self.leaves[0]
        out = {n: torch.cat([leaves[n] for leaves in self.leaves]) for n in self.names}
        return out if self._inverse is None else {n: t[self._inverse] for n, t in out.items()}

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each member's MSE (E,) on its targets y (E, B, T), inputs x (E, B, T, D) or shared (B, T, D)."""
        if self._scan is not None:
            params = self.params()
            return self._scan.losses(params, self.buffers, self._scan.hidden(params, self.buffers, x), y)
        return self._losses[(0 if x.dim() == y.dim() + 1 else None, 0)](self.params(), self.buffers, x, y)

    @torch.no_grad()
    def outputs(self, x: torch.Tensor) -> torch.Tensor:
        """Each member's readout (E, B, T) on x (E, B, T, D), or on shared inputs (B, T, D)."""
        if self._scan is not None:
            params = self.params()
            return self._scan.readouts(params, self.buffers, self._scan.hidden(params, self.buffers, x))
        return self._outputs[0 if x.dim() == 4 else None](self.params(), self.buffers, x)

    def step(self, x: torch.Tensor, y: torch.Tensor, grad_clip: float) -> torch.Tensor:
        """One joint gradient step (each member's MSE, global-norm clip when ``grad_clip > 0``, its
        optimizer's update); returns the members' losses before the step. A member whose loss is not
        finite gets a non-finite update: the caller stops using it."""
        for opt in self.group_opts:
            opt.zero_grad(set_to_none=True)
        losses = self.losses(x, y)
        losses.sum().backward()
        if grad_clip > 0:
            for leaves in self.leaves:
                grads = [leaves[n].grad for n in self.names]
                norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], 1)
                scale = (grad_clip / (torch.linalg.vector_norm(norms, dim=1) + 1e-6)).clamp(max=1.0)
                for g in grads:  # torch.nn.utils.clip_grad_norm_, per member
                    g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
        for opt in self.group_opts:
            opt.step()
        return losses.detach()

    def sync(self) -> None:
        """Copy the stacked parameters, buffers and optimizer state into the members' own modules
        and optimizers (copies: the members share no storage with the stack)."""
        with torch.no_grad():
            for members, leaves, group_opt in zip(self.groups, self.leaves, self.group_opts):
                state = group_opt.state_dict()
                for j, i in enumerate(members):
                    for name, t in self.nets[i].named_parameters():
                        t.copy_(leaves[name][j])
                    for name, t in self.nets[i].named_buffers():
                        t.copy_(self.buffers[name][i])
                    self.opts[i].load_state_dict(_member_state(state, j))


class _Split(nn.Module):
    """One member's network cut at its cell's hand-written recurrence, for ``functional_call`` under
    ``vmap``: without arguments, the tensors among the recurrence's inputs (``GatedCell.scan``); on
    hidden states, the readout."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, hidden: Tensor | None = None):
        if hidden is None:
            return tuple(t for t in self.net.cell.scan()[1] if isinstance(t, Tensor))
        return self.net.readout(hidden)


class _MemberScan:
    """The members' forward and backward through their cells' hand-written recurrence with a member
    dimension (:mod:`learnwin.models.recurrence`): each member's recurrence inputs made from its
    parameters by one vmapped call (the concatenations of ``scan``), the recurrence of all members
    in one Function, the one ``fused.pick`` gives for the inputs' device (the fused step on CUDA,
    bptt's eager driver on the CPU), each member's readout and loss vmapped again. For networks whose cell has a
    hand-written recurrence (``GatedCell.scan``: the single-layer gated cells); :meth:`of` gives
    None for others (linear cells, stacks, user cells), which run their scan under vmap."""

    def __init__(self, base: nn.Module, family: type, inputs: tuple):
        split = _Split(base)

        def call(p, b, *args):
            return functional_call(split, ({f"net.{k}": v for k, v in p.items()},
                                           {f"net.{k}": v for k, v in b.items()}), args)

        self.family, self.inputs = family, inputs
        self._parts = self.readouts = vmap(call)  # no hidden states: the recurrence's inputs; with them: readouts
        self.losses = vmap(lambda p, b, hidden, y: torch.mean((call(p, b, hidden) - y) ** 2))

    @staticmethod
    def of(base: nn.Module) -> _MemberScan | None:
        scan = getattr(base.cell, "scan", None)
        scan = scan() if scan is not None else None
        return None if scan is None else _MemberScan(base, *scan)

    def hidden(self, params: dict, buffers: dict, x: Tensor) -> Tensor:
        """Every member's hidden states (E, B, T, H) on x (E, B, T, D) or shared (B, T, D)."""
        parts = iter(self._parts(params, buffers))
        args = [_per_member(next(parts)) if isinstance(t, Tensor) else t for t in self.inputs]
        out = fused.pick(x).apply(self.family, x, *args)
        return out[0] if isinstance(out, tuple) else out


def _per_member(t: Tensor) -> Tensor:
    """A stacked recurrence input in the member convention of :mod:`learnwin.models.recurrence`:
    matrices (E, rows, cols) as they are, a network's scalar or vector (E,) or (E, n) as (E, 1, 1) or (E, 1, n)."""
    return t if t.dim() == 3 else t.view(t.shape[0], *(1,) * (3 - t.dim()), *t.shape[1:])


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
    would hold after the same steps, in the standard layout (a stacked buffer cloned from the
    vmapped gradient may carry other strides on its size-1 dimensions; a checkpoint writes them)."""
    return {"param_groups": copy.deepcopy(state["param_groups"]),
            "state": {k: {key: v.clone() if key == "step" else None if v is None else
                          v[i].clone(memory_format=torch.contiguous_format)
                          for key, v in entry.items()}
                      for k, entry in state["state"].items()}}


def _rows(ens: Ensemble, epoch: int, members: list[int], data: tuple) -> list[dict]:
    """The learning-curve rows after ``epoch`` of the runs ``members`` (the ensemble's, in order),
    as :func:`learnwin.models.train.train_run` records them, from batched forwards."""
    xtr, ytr, xva, yva, n_r2, variances, src = data
    rows = torch.tensor([src[k] for k in members]).to(xtr.device)
    mse = []
    for x, y in ((xtr[rows, :n_r2], ytr[rows, :n_r2]), (xva[rows], yva[rows])):
        total = sum(((ens.outputs(x[:, i:i + EVAL_BATCH]) - y[:, i:i + EVAL_BATCH]) ** 2).flatten(1).sum(1)
                    for i in range(0, x.shape[1], EVAL_BATCH))
        mse.append((total / y[0].numel()).tolist())
    return [curve_row(epoch, tr, va, *variances[src[k]]) for k, tr, va in zip(members, *mse)]


def train_runs(
    *, data_dirs: Sequence[str | Path], out_dirs: Sequence[str | Path], model: str, optimizers: Sequence[str],
    seeds: Sequence[int], model_config: dict, optim_configs: Mapping[str, dict], train_config: dict,
    snapshot_epochs: Sequence[int | str], device: str = "cpu",
) -> dict[tuple[str, int], str]:
    """Train the runs (``optimizers[k]``, ``seeds[k]``) of one model as one ensemble, run k on the
    splits in ``data_dirs[k]`` (all of one size; runs of one seed share theirs) into ``out_dirs[k]``,
    each optimizer with its config ``optim_configs[optimizer]``; write each run's outputs as
    :func:`learnwin.models.train.train_run` writes them (docs/method.md §3): its own data, init,
    epoch order, optimizer state, best epoch, resume state and divergence.

    A run that diverges stops (its outputs are tombstones, its curve carries the note) and the
    others go on. A run resumed at an earlier epoch than others trains alone until they meet.
    Returns the divergence message of each (optimizer, seed) that diverged.
    """
    if not len(data_dirs) == len(out_dirs) == len(optimizers) == len(seeds):
        raise ValueError(f"train_runs: {len(data_dirs)} data_dirs, {len(out_dirs)} out_dirs, {len(optimizers)} "
                         f"optimizers and {len(seeds)} seeds; one of each per run")
    sources = list(dict.fromkeys(map(str, data_dirs)))
    src = [sources.index(str(d)) for d in data_dirs]
    splits = [load_splits(d, train_config, device) for d in sources]
    shapes = {tuple(t.shape for t in s[:4]) for s in splits}
    if len(shapes) > 1:
        raise ValueError(f"train_runs: the splits in {sources} differ in shape: {shapes}")
    runs = [Run(out_dir, model=model, optimizer=opt, seed=seed, model_config=model_config,
                optim_config=optim_configs[opt], train_config=train_config, snapshot_epochs=snapshot_epochs,
                xtr=splits[i][0], ytr=splits[i][1], device=device)
            for opt, seed, out_dir, i in zip(optimizers, seeds, out_dirs, src)]
    data = (*(torch.stack([s[k] for s in splits]) for k in range(4)), splits[0][4], [s[5:] for s in splits], src)
    xtr, ytr = data[:2]
    bs, clip, n = train_config["batch_size"], train_config["grad_clip"], xtr.shape[1]

    def ensemble_of(members: list[int]) -> Ensemble:
        fused.release()  # the graphs of another member count (before a run left or joined): freed
        return Ensemble([runs[k].net for k in members], [runs[k].opt for k in members],
                        [runs[k].optimizer for k in members], [optim_configs[runs[k].optimizer] for k in members])

    fresh = [k for k, run in enumerate(runs) if run.start == 0]
    if fresh:
        for k, row in zip(fresh, _rows(ensemble_of(fresh), 0, fresh, data)):
            runs[k].begin(row)
    log.info("model=%s: runs %s as one ensemble", model, [f"{run.optimizer} seed {run.seed}" for run in runs])
    members, ens = [], None
    for epoch in range(min(run.start for run in runs) + 1, train_config["epochs"] + 1):
        now = [k for k, run in enumerate(runs) if run.start < epoch and not run.diverged]
        if not now:
            break
        if now != members:  # a resumed run joins, or a diverged one left
            members, ens = now, ensemble_of(now)
        t0 = time.perf_counter()
        orders = torch.stack([epoch_order(n, runs[k].seed, epoch, device) for k in members])
        who = torch.tensor([src[k] for k in members]).to(xtr.device)[:, None]  # each member's splits
        for i in range(0, n - bs + 1, bs):
            idx = orders[:, i:i + bs]
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
                kept = torch.tensor(ok).to(orders.device)
                members, orders, who = [members[j] for j in ok], orders[kept], who[kept]
                ens = ensemble_of(members)
        if not any(run.start < epoch and not run.diverged for run in runs):
            break
        ens.sync()
        seconds = time.perf_counter() - t0
        for k, row in zip(members, _rows(ens, epoch, members, data)):
            runs[k].end_epoch(row, seconds)
    for run in runs:
        run.finish()
    return {(run.optimizer, run.seed): run.diverged for run in runs if run.diverged}
