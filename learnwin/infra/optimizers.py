"""The optimizer registry: each optimizer of docs/method.md §3 as one entry.

An entry (:class:`OptimizerSpec`) holds all the package reads of an optimizer: its torch class by
import path (``"module:Class"``, imported by :meth:`OptimizerSpec.load` in the jobs that train,
never by the registry: the config check imports no torch), its settings (the keys of its
``optim.<name>`` config section, each a JSON schema with its default), the envelope's
adaptive-rate rule (:class:`RateRule`, docs/method.md §4) and the words a sentence names it by.
:func:`learnwin.models.train.make_optimizer` builds it, :func:`learnwin.probing.envelope.rate_matrix`
applies its rule, and the config check (:func:`learnwin.infra.config.check_optimizers`) validates and
fills ``optim`` from :func:`schema` and refuses a configured optimizer whose entry has no rate rule
(its envelope would be computed with the wrong Lambda). A new optimizer is one
:func:`register_optimizer` entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from learnwin.infra.registry import enter


@dataclass(frozen=True)
class RateRule:
    """How the envelope's base rate Lambda reads the optimizer state (docs/method.md §4): the
    per-parameter rate lr / (sqrt(v_hat) + 1e-8) with v the state entry ``moment``, divided by
    (1 - beta2^step) where ``bias_corrected`` (Adam's v_hat); ``moment`` None: a plain rate,
    Lambda = lr."""

    moment: str | None
    bias_corrected: bool = False


#: The rule of an optimizer without an adaptive rate (SGD, with or without momentum): Lambda = lr.
PLAIN = RateRule(None)


@dataclass(frozen=True)
class OptimizerSpec:
    """One registry entry: ``cls``, the torch optimizer's import path ``"module:Class"``, called as
    ``cls(params, foreach=True, **settings)``; ``settings``: setting -> JSON schema with a
    ``default`` (the ``optim.<name>`` section; ``lr`` is required: the envelope's plain Lambda and
    the divergence message read it); ``rate``: the envelope's :class:`RateRule`, None where none is
    given (the config check refuses the optimizer); ``words``: how a sentence names it."""

    cls: str
    words: str
    rate: RateRule | None
    settings: Mapping[str, Mapping] = field(default_factory=dict)

    def __post_init__(self):
        if ":" not in self.cls:
            raise ValueError(f"OptimizerSpec.cls = {self.cls!r} must be the class's import path 'module:Class'")
        if "lr" not in self.settings:
            raise ValueError(f"OptimizerSpec of {self.cls}: settings must have lr (docs/method.md §4)")
        missing = [key for key, spec in self.settings.items() if "default" not in spec]
        if missing:
            raise ValueError(f"OptimizerSpec of {self.cls}: settings {missing} have no default")

    def load(self) -> type:
        """The torch optimizer class, imported from :attr:`cls`."""
        module, name = self.cls.split(":")
        return getattr(importlib.import_module(module), name)


#: The registry: optimizer name (a config ``optimizers`` entry) -> :class:`OptimizerSpec`.
OPTIMIZERS: dict[str, OptimizerSpec] = {}


def register_optimizer(name: str, spec: OptimizerSpec) -> None:
    """Add an optimizer under ``name``, as :func:`learnwin.infra.registry.register` adds a cell."""
    enter(OPTIMIZERS, "optimizer", name, spec, "register_optimizer", OptimizerSpec)


def spec_of(name: str) -> OptimizerSpec:
    """The entry of ``name``; a :class:`ValueError` naming the registered ones if there is none."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def rate_rule(name: str) -> RateRule:
    """The envelope's rate rule of ``name``; a :class:`ValueError` where its entry has none
    (the config check stops such a run before any job, docs/method.md §4)."""
    rule = spec_of(name).rate
    if rule is None:
        raise ValueError(f"optimizer {name!r} has no rate rule (OptimizerSpec.rate): the envelope's "
                         "Lambda (docs/method.md §4) is undefined for it; give its entry one, PLAIN for Lambda = lr")
    return rule


def schema() -> dict:
    """The JSON schema of the ``optim`` config section: one object per registered optimizer, its
    settings with their defaults (no other key), each defaulting to {}."""
    return {"type": "object", "additionalProperties": False, "default": {}, "properties": {
        name: {"type": "object", "additionalProperties": False, "default": {}, "properties": dict(spec.settings)}
        for name, spec in OPTIMIZERS.items()}}


def _rate(default: float) -> dict:
    return {"type": "number", "exclusiveMinimum": 0, "default": default}


def _decay(default: float) -> dict:
    return {"type": "number", "minimum": 0, "default": default}


_ADAM = RateRule("exp_avg_sq", bias_corrected=True)
for _name, _spec in {
    "adamw": OptimizerSpec("torch.optim:AdamW", "AdamW", _ADAM, {"lr": _rate(0.005), "weight_decay": _decay(0.0001)}),
    "adam": OptimizerSpec("torch.optim:Adam", "Adam", _ADAM, {"lr": _rate(0.002), "weight_decay": _decay(0.0)}),
    "sgd": OptimizerSpec("torch.optim:SGD", "plain SGD", PLAIN, {"lr": _rate(0.2), "weight_decay": _decay(0.0)}),
    "sgd_momentum": OptimizerSpec("torch.optim:SGD", "SGD with momentum", PLAIN, {
        "lr": _rate(0.01), "weight_decay": _decay(0.0),
        "momentum": {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": 0.9}}),
    "rmsprop": OptimizerSpec("torch.optim:RMSprop", "RMSprop", RateRule("square_avg"), {
        "lr": _rate(0.001), "weight_decay": _decay(0.0),
        "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.99}}),
}.items():
    register_optimizer(_name, _spec)
