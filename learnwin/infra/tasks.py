"""The task table: each task of docs/method.md §1 as one entry, chosen by ``task.kind``.

An entry (:class:`TaskSpec`) names, by import path (``"module:function"``, resolved in the data
job, never here: the Snakefile parse reads this floor only), the function that draws a split of a
seed, ``draw(seed, task, split, n) -> (x (n, T, D), y (n, T))`` float32, and the one that gives the
seed's unit vector u, ``direction(seed, task) -> (D,)``, along which the memory curve reads the
network (docs/method.md §4). :func:`learnwin.tasks.splits.write_splits` writes what they draw.
``task.module`` names a module whose import registers a user's task, as ``model.cells_module``
does a cell (docs/method.md §2a). A new task is its two functions and one :func:`register_task`
entry, here or in that module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass

from learnwin.infra.registry import enter


@dataclass(frozen=True)
class TaskSpec:
    """One task: ``draw`` and ``direction``, the import paths ``"module:function"`` of its functions."""

    draw: str
    direction: str

    def __post_init__(self):
        for key in ("draw", "direction"):
            if ":" not in getattr(self, key):
                raise ValueError(f"TaskSpec.{key} = {getattr(self, key)!r} must be the function's import path 'module:function'")

    def load(self, key: str):
        """The function ``key`` ("draw" or "direction"), imported from its path."""
        return pkgutil.resolve_name(getattr(self, key))


#: The table: task name (a ``task.kind`` value) -> :class:`TaskSpec`.
TASKS: dict[str, TaskSpec] = {}


def register_task(name: str, spec: TaskSpec) -> None:
    """Add a task under ``name``, as :func:`learnwin.infra.registry.register` adds a cell."""
    enter(TASKS, "task", name, spec, "register_task", TaskSpec)


def spec_of(task: Mapping) -> TaskSpec:
    """The entry of a ``task`` config section's ``kind``, after importing its ``module``; a
    :class:`ValueError` naming the key where either is wrong."""
    module = task.get("module")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(f"task.module = {module!r} cannot be imported: {err}") from err
    kind = task.get("kind", "synthetic")
    if kind not in TASKS:
        raise ValueError(f"task.kind = {kind!r} is not a registered task; allowed: {', '.join(TASKS)}"
                         + ("" if module else " (a task of your own: set task.module)"))
    return TASKS[kind]


register_task("synthetic", TaskSpec("learnwin.tasks.synthetic:draw", "learnwin.tasks.synthetic:direction"))
