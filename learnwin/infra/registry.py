"""The cell registry: what the workflow knows of each cell without loading it (docs/method.md §2a).

An entry (:class:`CellSpec`) names the cell's class by its import path, ``"module:Class"``, and
carries the metadata the rest of the tool reads: the gate blocks of the cost law, the state
width of the exact transport, the figure colour and the paper's expectations for claims (a)
and (b). Reading the registry imports no torch: the config check, the job resources, the
figures and the claims need only the metadata, and :meth:`CellSpec.load` imports the class in
the jobs that build networks (:func:`learnwin.models.cells.build_model`). ``model.cells_module``
names a module whose import registers a user's cells (:func:`load_cells`); it stays torch-free
when its entries name classes that live in another module.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

#: Expected decay classes of the envelope (claim (a)) and growth laws of H_N (claim (b), docs/method.md §8b).
DECAY_CLASSES = ("exponential", "power-law-like")
GROWTH_LAWS = ("logarithmic", "power")
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


@dataclass(frozen=True)
class CellSpec:
    """One registry entry: where the cell class lives and what the rest of the package needs to know of it.

    ``cls``: the class's import path, ``"module:Class"`` (imported by :meth:`load`, never by the
    registry); ``gate_blocks``: rows of ``recurrent()`` over H, the arithmetic per step of the
    cost law (:data:`learnwin.infra.resources.GATES`); ``color``: a matplotlib colour, the
    model's in every figure (:data:`learnwin.plots.style.MODEL_COLORS`); ``expected_class`` and
    ``expected_growth``: the paper's expectation for claims (a) and (b)
    (:mod:`learnwin.stats.claims`), one of :data:`DECAY_CLASSES` and :data:`GROWTH_LAWS`, or None
    where the paper has none (the claims then report the cell's verdict without scoring it);
    ``state_per_unit``: real components of the full state z per hidden unit (docs/method.md §4b),
    an integer or the name of a ``model`` config key (S6: ``state_size``), so that the state
    width is ``model.hidden`` times it (:meth:`state_width`).
    """

    cls: str
    gate_blocks: int
    color: str
    expected_class: str | None = None
    expected_growth: str | None = None
    state_per_unit: int | str = 1

    def __post_init__(self):
        if not (isinstance(self.cls, str) and _PATH.fullmatch(self.cls)):
            raise ValueError(f"CellSpec.cls = {self.cls!r} must be the class's import path 'module:Class' "
                             "(the registry imports no cell: docs/method.md §2a)")
        if not isinstance(self.gate_blocks, int) or self.gate_blocks < 0:
            raise ValueError(f"CellSpec.gate_blocks = {self.gate_blocks!r} must be an integer >= 0")
        for key, value, allowed in (("expected_class", self.expected_class, DECAY_CLASSES),
                                    ("expected_growth", self.expected_growth, GROWTH_LAWS)):
            if value is not None and value not in allowed:
                raise ValueError(f"CellSpec.{key} = {value!r}; allowed: {', '.join(allowed)} or None")
        per_unit = self.state_per_unit
        if not ((isinstance(per_unit, str) and per_unit.isidentifier()) or (isinstance(per_unit, int) and per_unit >= 1)):
            raise ValueError(f"CellSpec.state_per_unit = {per_unit!r} must be an integer >= 1 or a model config key")

    def load(self) -> type:
        """The cell class, imported from :attr:`cls` (the first call imports its module)."""
        module, name = self.cls.split(":")
        return getattr(importlib.import_module(module), name)

    def state_width(self, model: Mapping) -> int:
        """Width n of the full state z for the ``model`` config section: ``hidden`` times
        :attr:`state_per_unit` (the side of the one-step Jacobian, docs/method.md §4b)."""
        per_unit = self.state_per_unit
        return model["hidden"] * (int(model[per_unit]) if isinstance(per_unit, str) else per_unit)


#: The registry: model name -> :class:`CellSpec`, in the canonical order of tables and figures.
CELLS: dict[str, CellSpec] = {}


def register(name: str, spec: CellSpec) -> None:
    """Add a cell under ``name`` (a config ``models`` entry; lower case, digits, underscores).

    The one place a cell is declared: the config check, the job resources, the figure colours
    and the claims read the registry. Registering a name again with an equal spec does nothing
    (a module imported twice); with another spec it raises.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"cell name {name!r} must match {_NAME.pattern} (it names result folders)")
    if not isinstance(spec, CellSpec):
        raise TypeError(f"register({name!r}, ...) takes a CellSpec, not {type(spec).__name__}")
    if CELLS.get(name, spec) != spec:
        raise ValueError(f"cell {name!r} is already registered as {CELLS[name].cls}")
    CELLS[name] = spec


def load_cells(module: str | None) -> None:
    """Import ``module`` (a dotted module path, or None for none), whose import registers cells.

    The config key ``model.cells_module`` names it; the config check, every model build and the
    jobs that colour or score models call this, so a user's cell reaches every job of the workflow.
    """
    if module:
        importlib.import_module(module)


class Column(Mapping):
    """A live, read-only view model name -> one :class:`CellSpec` field over the registry (cells
    whose field is None are absent): the per-model tables of the other modules."""

    def __init__(self, field: str):
        self.field = field

    def __getitem__(self, name: str):
        value = getattr(CELLS[name], self.field)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self):
        return (name for name, spec in CELLS.items() if getattr(spec, self.field) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


_GATED, _LINEAR = "learnwin.models.cells", "learnwin.models.linear_cells"
for _name, _spec in {
    "const": CellSpec(f"{_GATED}:ConstGate", 1, "tab:blue", "exponential", "logarithmic"),
    "shared": CellSpec(f"{_GATED}:SharedGate", 1, "tab:orange", "exponential", "logarithmic"),
    "diag": CellSpec(f"{_GATED}:DiagGate", 2, "tab:green", "power-law-like", "power"),
    "gru": CellSpec(f"{_GATED}:GRU", 3, "tab:red", "power-law-like", "power"),
    "lstm": CellSpec(f"{_GATED}:LSTM", 4, "tab:purple", "power-law-like", "power", state_per_unit=2),  # (h, c)
    # docs/method.md §2b: no recurrent matrix (RG-LRU's two H x H gate layers act on its input),
    # and no expectation in the paper: their claims are reported, not scored
    "mingru": CellSpec(f"{_LINEAR}:MinGRU", 0, "tab:brown"),
    "minlstm": CellSpec(f"{_LINEAR}:MinLSTM", 0, "tab:pink"),
    "rglru": CellSpec(f"{_LINEAR}:RGLRU", 2, "tab:gray"),
    "lru": CellSpec(f"{_LINEAR}:LRU", 0, "tab:olive", state_per_unit=2),  # complex state: (Re, Im)
    "s6": CellSpec(f"{_LINEAR}:S6", 0, "tab:cyan", state_per_unit="state_size"),  # N states per channel
}.items():
    register(_name, _spec)
#: The cells registered here (a ``model.cells_module`` adds more to :data:`CELLS`, not to this).
MODELS = tuple(CELLS)
