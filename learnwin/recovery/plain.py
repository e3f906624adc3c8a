"""Any sequence model as a network of the budget protocol (docs/method.md §10b, "Any model").

The protocol needs two things from a network: train it online on the task's stream and score its
predictions against each lagged component. ``make_model(input_size)`` returns any ``nn.Module``
that maps inputs (B, T, D) to one prediction per step, (B, T), or to features (B, T, F) (a tuple's
first element, as torch's RNNs return it) that a linear readout F -> 1, added here, maps. The
module trains by plain autograd (no fused path). Its output's shape is checked at every forward:
a wrong one is a :class:`ModelError` naming the model, never a silent broadcast against the
targets; a factory that raises is one too.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Mapping
from functools import partial

import torch
from torch import Tensor, nn

from learnwin.recovery.task import Network, registered


class ModelError(ValueError):
    """A user's model cannot be trained by the protocol: its factory failed or its output's shape is wrong."""


class Predictions(nn.Module):
    """The protocol's network around a user's ``module`` named ``name``: its predictions (B, T), or
    ``readout`` (F -> 1) of its features (B, T, F)."""

    def __init__(self, module: nn.Module, name: str, features: int | None):
        super().__init__()
        self.module, self.name = module, name
        self.readout = None if features is None else nn.Linear(features, 1)

    def forward(self, x: Tensor) -> Tensor:
        out = self.module(x)
        out = out[0] if isinstance(out, tuple) else out
        want = 2 if self.readout is None else 3
        if not isinstance(out, Tensor) or out.ndim != want or out.shape[:2] != x.shape[:2]:
            raise ModelError(f"model {self.name!r}: output {describe(out)} for inputs {tuple(x.shape)}; expected "
                             f"{'(batch, T)' if want == 2 else '(batch, T, features)'} = {tuple(x.shape[:2])}"
                             f"{'' if want == 2 else ' + (F,)'}, as its first forward gave")
        return out if self.readout is None else self.readout(out).squeeze(-1)


def describe(out) -> str:
    """A module output's shape, or its type where it is no tensor."""
    return str(tuple(out.shape)) if isinstance(out, Tensor) else f"of type {type(out).__name__}"


def plain_network(make_model: Callable[[int], nn.Module], name: str, T: int) -> Network:
    """``make_model`` as a :class:`learnwin.recovery.task.Network` named ``name`` on sequences of
    length ``T``: each build checks the module and its output (:func:`build`)."""
    return Network(name, partial(build, make_model, name, T))


def network_of(model: str, model_config: Mapping, T: int) -> Network:
    """What a budget job named ``model`` trains: the plain module whose factory's import path
    ``model_config["module"]`` names (a ``recovery.modules`` entry), else the registered cell."""
    path = model_config.get("module")
    if path is None:
        return registered(model, model_config)
    try:
        make_model = pkgutil.resolve_name(path)
    except (ImportError, AttributeError, ValueError) as err:
        raise ModelError(f"model {model!r}: recovery.modules path {path!r} cannot be imported: {err}") from err
    return plain_network(make_model, model, T)


def build(make_model: Callable[[int], nn.Module], name: str, T: int, input_size: int) -> Predictions:
    """``make_model(input_size)`` wrapped in :class:`Predictions`: one forward in eval mode without
    gradients on zeros (2, T, input_size) reads whether it gives predictions (B, T) or features
    (B, T, F), which get a readout; any other output, a factory that raises or returns no module is
    a :class:`ModelError` naming ``name``."""
    try:
        module = make_model(input_size)
    except Exception as err:
        raise ModelError(f"model {name!r}: make_model({input_size}) raised {type(err).__name__}: {err}") from err
    if not isinstance(module, nn.Module):
        raise ModelError(f"model {name!r}: make_model({input_size}) returned a {type(module).__name__}, "
                         "not an nn.Module")
    x = torch.zeros(2, T, input_size)
    module.eval()
    with torch.no_grad():
        out = module(x)
    module.train()
    out = out[0] if isinstance(out, tuple) else out
    if isinstance(out, Tensor) and out.shape == (2, T):
        return Predictions(module, name, None)
    if isinstance(out, Tensor) and out.ndim == 3 and out.shape[:2] == (2, T):
        return Predictions(module, name, out.shape[-1])
    raise ModelError(f"model {name!r}: output {describe(out)} for inputs (batch, T, D) = {tuple(x.shape)}; expected "
                     f"predictions (batch, T) = (2, {T}) or features (batch, T, F)")
