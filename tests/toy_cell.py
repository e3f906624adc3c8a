"""A user's cell, registered in one place (docs/method.md §2a): the tests' ``model.cells_module``.

The entry names the class (tests/toy_cell_impl.py) by its import path, so importing this module,
as every Snakefile parse does, loads no torch. One gate block (W_h), state h (one component per
unit, the default), no expectation for the claims.
"""

from learnwin.infra.registry import CellSpec, register

register("toy", CellSpec("toy_cell_impl:Toy", gate_blocks=1, color="tab:brown"))
