"""The cell registry: what the workflow knows of each cell without loading it (docs/method.md §2a).

An entry (:class:`CellSpec`) names the cell's class by its import path, ``"module:Class"``, and
carries the metadata the rest of the tool reads: the gate blocks of the cost law, the state
width of the exact transport, the figure colour and the paper's expectations for claims (a)
and (b). Reading the registry imports no torch: the config check, the job resources, the
figures and the claims need only the metadata, and :meth:`CellSpec.load` imports the class in
the jobs that build networks (:func:`learnwin.models.cells.build_model`). ``model.cells_module``
names a module whose import registers a user's cells (:func:`load_cells`); it stays torch-free
when its entries name classes that live in another module.

The block registry (:data:`BLOCKS`, :func:`register_block`) holds the shapes in which
``model.layers`` cells are stacked (docs/method.md §2c): each entry is a
:class:`learnwin.infra.blocks.BlockSpec`, the composition of the parts of
:class:`learnwin.models.stack.Block`, so a block is one registry entry.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from learnwin.infra.blocks import BlockSpec

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
    width is ``model.hidden`` times it (:meth:`state_width`); ``block``: the block its family is
    published in, what ``model.block: published`` stacks it in (:data:`BLOCKS`, docs/method.md §2c).
    """

    cls: str
    gate_blocks: int
    color: str
    expected_class: str | None = None
    expected_growth: str | None = None
    state_per_unit: int | str = 1
    block: str = "stacked"

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

    def state_width(self, model: Mapping, stored: bool = False) -> int:
        """Width n of the full state z for the ``model`` config section: every layer's, its W units
        times :attr:`state_per_unit` and what its block holds (the side of the one-step Jacobian,
        docs/method.md §4b, §2c; :meth:`learnwin.infra.blocks.BlockSpec.layer_state`). ``stored``: the
        rows of the one-step Jacobian the exact transport stores (:meth:`~learnwin.infra.blocks.BlockSpec.stored`)."""
        per_unit = self.state_per_unit
        per_unit = int(model[per_unit]) if isinstance(per_unit, str) else per_unit
        block, layers = block_of(model, self), shape(model)[0]
        width = model["hidden"] * block.expand
        per_layer = block.stored if stored else block.layer_state
        return layers * per_layer(width * per_unit, width)


#: The registry: model name -> :class:`CellSpec`, in the canonical order of tables and figures.
CELLS: dict[str, CellSpec] = {}


def register(name: str, spec: CellSpec) -> None:
    """Add a cell under ``name`` (a config ``models`` entry; lower case, digits, underscores).

    The one place a cell is declared: the config check, the job resources, the figure colours
    and the claims read the registry. Registering a name again with an equal spec does nothing
    (a module imported twice); with another spec it raises.
    """
    enter(CELLS, "cell", name, spec, "register", CellSpec)


def enter(table: dict, kind: str, name: str, spec, function: str, expected: type, pattern: re.Pattern = _NAME) -> None:
    """Put ``spec``, an ``expected`` instance, in ``table`` under ``name`` (matching ``pattern``), or
    raise naming what is wrong (:func:`register`, :func:`register_block`,
    :func:`learnwin.infra.optimizers.register_optimizer`, :func:`learnwin.infra.figures.register_figure`)."""
    if not isinstance(name, str) or not pattern.fullmatch(name) or name == "published":
        raise ValueError(f"{kind} name {name!r} must match {pattern.pattern} and not be 'published' "
                         "(it names result folders and model.block)")
    if not isinstance(spec, expected):
        raise TypeError(f"{function}({name!r}, ...) takes a {expected.__name__}, not {type(spec).__name__}")
    if table.get(name, spec) != spec:
        raise ValueError(f"{kind} {name!r} is already registered" + (f" as {table[name].cls}" if kind == "cell" else ""))
    table[name] = spec


#: The block registry: name -> :class:`BlockSpec` (``model.block``; "published": each cell's own).
BLOCKS: dict[str, BlockSpec] = {}


def register_block(name: str, spec: BlockSpec) -> None:
    """Add a block shape under ``name`` (a ``model.block`` value), as :func:`register` adds a cell."""
    enter(BLOCKS, "block", name, spec, "register_block", BlockSpec)


#: Defaults of every ``model`` key (docs/method.md §2, §2b, §2c), the library's only statement of
#: them: the schema states the same (workflow/schemas/config.schema.yaml, which fills them in the
#: workflow's config; tests/test_config.py holds the two equal), so
#: :func:`learnwin.models.cells.build_model` called with the shape alone builds the network the
#: workflow trains under the schema's defaults. The cells' constructors take them from there.
MODEL = {"hidden": 32, "layer_norm": True, "const_s": 0.05, "state_size": 16, "gru_init_update": 0.05,
         "lstm_init_forget": 0.5, "layers": 1, "block": "plain", "cells_module": None, "gate_init": "official"}


def shape(model: Mapping) -> tuple[int, str]:
    """(``model.layers``, ``model.block``) of a ``model`` section, :data:`MODEL`'s where absent."""
    return model.get("layers", MODEL["layers"]), model.get("block", MODEL["block"])


def block_name(model: Mapping, cell: CellSpec) -> str:
    """The block the ``model`` section stacks ``cell`` in: ``model.block``, or the cell's
    published one for "published" (docs/method.md §2c)."""
    name = shape(model)[1]
    return cell.block if name == "published" else name


def block_of(model: Mapping, cell: CellSpec) -> BlockSpec:
    """The :class:`BlockSpec` of :func:`block_name`."""
    return BLOCKS[block_name(model, cell)]


def units(model: Mapping, cell: CellSpec) -> int:
    """Hidden units of the whole network: ``model.layers`` times each cell's width W (docs/method.md §2c)."""
    return shape(model)[0] * model["hidden"] * block_of(model, cell).expand


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
    "mingru": CellSpec(f"{_LINEAR}:MinGRU", 0, "tab:brown", block="feng"),
    "minlstm": CellSpec(f"{_LINEAR}:MinLSTM", 0, "tab:pink", block="feng"),
    "rglru": CellSpec(f"{_LINEAR}:RGLRU", 2, "tab:gray", block="hawk"),
    "lru": CellSpec(f"{_LINEAR}:LRU", 0, "tab:olive", state_per_unit=2, block="lru"),  # complex state: (Re, Im)
    "s6": CellSpec(f"{_LINEAR}:S6", 0, "tab:cyan", state_per_unit="state_size", block="mamba"),  # N per channel
}.items():
    register(_name, _spec)
# docs/method.md §2c: the block shapes, each with its paper
for _name, _block in {
    "stacked": BlockSpec(embed=False, residual=False, cite="multi-layer RNN: layer i + 1 reads layer i's h"),
    "plain": BlockSpec(embed=False, cite="the cell, then a residual"),
    "mlp": BlockSpec(norm="layer", mlp="gelu", cite="pre-norm residual cell, then a pre-norm 4x GELU MLP"),
    "feng": BlockSpec(norm="rms", expand=2, in_proj=False, mlp="geglu", mlp_expand=2,
                      cite="Feng et al. 2024, arXiv:2410.01201, and its official code (BorealisAI/minRNNs)"),
    "hawk": BlockSpec(norm="rms", conv=4, gate="gelu", mlp="geglu", mlp_expand=3,
                      cite="De et al. 2024, arXiv:2402.19427, §2, Fig. 2"),
    "mamba": BlockSpec(norm="rms", expand=2, conv=4, conv_act="silu", gate="silu",
                       cite="Gu and Dao 2023, arXiv:2312.00752, §3.4"),
    "lru": BlockSpec(norm="layer", post="glu", cite="Orvieto et al. 2023, arXiv:2303.06349, Fig. 1, App. A"),
}.items():
    register_block(_name, _block)
#: The cells registered here (a ``model.cells_module`` adds more to :data:`CELLS`, not to this).
MODELS = tuple(CELLS)
