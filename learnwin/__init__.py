"""learnwin: how far back in time a recurrent network can learn.

Reproduces and extends L. Livi, "Learnability Window in Gated Recurrent Neural Networks"
(arXiv:2512.05790). The specification is docs/method.md; modules cite its sections.

The public face, for use on your own cells and checkpoints:

- :func:`build_model` -- one of the registered cells with its readout (``learnwin.models.cells``);
- :class:`Trace` -- what a cell's ``trace`` returns to the probe (docs/method.md §4);
- :class:`GatedCell`, :class:`StepOut`, :class:`CellSpec` and :func:`register` -- a cell of your
  own on the public interface, registered in one place for the workflow by its import path
  (``learnwin.infra.registry``, docs/method.md §2a);
- :class:`BlockSpec` and :func:`register_block` -- a block of your own that stacks any cell
  (``learnwin.infra.blocks``, docs/method.md §2c), registered as a cell is;
- :func:`probe` -- envelope, per-unit rates, psi and the total gradient of a cell on data (§4-5);
- :func:`snapshot_checkpoint` -- the same for a trained checkpoint, as the workflow runs it;
- :func:`measure_window` -- the window of any sequence model (a plain ``nn.Module``) under a
  training budget, by the workflow's budget protocol (``learnwin.recovery.measure``, §10b).

The stages live in subpackages (docs/architecture.md): ``models`` (data, cells, stacks,
training), ``probing`` (envelope, transports, psi), ``stats`` (tails, decay classes, window,
claims), ``recovery`` (the ground truth's trainings), ``report`` and ``plots`` (what a run shows),
``infra`` (config, layout, I/O, resources, the cell and block registries). Importing the package is
cheap: torch is loaded only when one of the names below that needs it is first used (``CellSpec``,
``register``, ``BlockSpec`` and ``register_block`` do not).
"""

__version__ = "0.1.0"

_PUBLIC = {
    "build_model": "learnwin.models.cells",
    "Trace": "learnwin.models.cells",
    "GatedCell": "learnwin.models.cells",
    "StepOut": "learnwin.models.recurrence",
    "CellSpec": "learnwin.infra.registry",
    "register": "learnwin.infra.registry",
    "BlockSpec": "learnwin.infra.blocks",
    "register_block": "learnwin.infra.registry",
    "probe": "learnwin.probing.snapshot",
    "snapshot_checkpoint": "learnwin.probing.snapshot",
    "measure_window": "learnwin.recovery.measure",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    """Load a public name's module on first use (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'learnwin' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)
