"""The full state z of a cell and its one step on it (docs/method.md §4b, §2b, §2c).

z is what the exact transport differentiates: h, (h, c) for a cell transported along its cell
state, the real view of a diagonal linear cell's state, or a stack's every layer (§2c). These
helpers read only the cell interface of :mod:`learnwin.models.cells`, so the stacks of
:mod:`learnwin.models.stack` and the probes of :mod:`learnwin.probing` share them. They are the
questions a probe asks of a network's state (its step and the step's input, the rows a step
copies, its layers and their order, the groups of weights of its rates, the readout's error on
it): a probe asks them here and never tests what kind of cell it holds.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def linear_state(cell: torch.nn.Module) -> bool:
    """True for a diagonal linear cell (docs/method.md §2b): the full state z is the real view of
    its transported state, and ``hidden`` is a readout of it."""
    return getattr(cell, "transported_name", "hidden") == "state"


def stacked(cell: torch.nn.Module) -> bool:
    """True for a stack of layers (docs/method.md §2c): its ``forward`` returns z itself."""
    return getattr(cell, "transported_name", "hidden") == "stack"


def real_view(state: Tensor) -> Tensor:
    """A complex state (..., P) as reals (..., 2 P), (Re, Im) per component; a real one unchanged."""
    return torch.view_as_real(state.resolve_conj()).flatten(-2) if state.is_complex() else state


def complex_view(z: Tensor) -> Tensor:
    """The inverse of :func:`real_view` for a complex state: (..., 2 P) reals as (..., P)."""
    return torch.view_as_complex(z.unflatten(-1, (-1, 2)).contiguous())


def state_blocks(cell: torch.nn.Module) -> int:
    """S: the full state is h (S = 1) or (h, c) for a cell transported along its cell state."""
    return 2 if getattr(cell, "transported_name", "hidden") == "cell" else 1


def state_size(cell: torch.nn.Module) -> int:
    """Width n of the full state z: S H, a diagonal linear cell's real transported state, or a
    stack's ``state_width``."""
    if stacked(cell):
        return cell.state_width
    if linear_state(cell):
        return cell.hidden_size * cell.components * (2 if cell.complex_state else 1)
    return state_blocks(cell) * cell.hidden_size


def full_state(cell: torch.nn.Module) -> Callable[[Tensor, Tensor], Tensor]:
    """Map the cell's outputs (hidden, transported) to the full state z (B, T, n): h, (h, c), the
    real view of a diagonal linear cell's transported state, or a stack's z (docs/method.md §2c)."""
    if stacked(cell):
        return lambda hidden, z: z
    if linear_state(cell):
        return lambda hidden, moved: real_view(moved)
    if state_blocks(cell) == 2:
        return lambda hidden, moved: torch.cat([hidden, moved], -1)
    return lambda hidden, moved: hidden


def transported_tangent(cell: torch.nn.Module, v: Tensor) -> Tensor:
    """The tangent of the transported state (..., P) from that of the full state (:func:`full_state`)."""
    if stacked(cell):
        return cell.transported(v)
    if not linear_state(cell):
        return v[..., -cell.hidden_size:]
    return complex_view(v) if cell.complex_state else v


def input_projection(cell: torch.nn.Module, x: Tensor) -> Tensor:
    """What :func:`cell_step` takes as the input of step t: the fused projection
    xp = x W_in^T + b_in of a gated cell, or x itself for a diagonal linear cell (§2b)."""
    if linear_state(cell):
        return x
    return F.linear(x, torch.cat(cell.input_weights(), 0), torch.cat(cell.input_biases(), 0))


def cell_step(cell: torch.nn.Module, xp: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
    """(hidden_t, z_t) from the projected input ``xp`` (:func:`input_projection`) and z_{t-1}, through
    the cell's own ``step`` (``trace=False``) or a diagonal linear cell's ``_step`` and ``readout``."""
    if linear_state(cell):
        h = complex_view(z) if cell.complex_state else z
        s = cell._step(xp, h)
        return cell.readout(s, xp), real_view(s)
    H = cell.hidden_size
    h = z[..., :H]
    out = cell.step(xp, h @ cell.recurrent().T, cell.state_of(h, z[..., (state_blocks(cell) - 1) * H:]), False)
    return out.hidden, full_state(cell)(out.hidden, out.transported)


def step_input(cell: torch.nn.Module, x: Tensor) -> Tensor:
    """What :func:`step_map` takes as the input of step t: a stack's raw x_t (docs/method.md §2c),
    else :func:`input_projection`."""
    return x if stacked(cell) else input_projection(cell, x)


def step_map(cell: torch.nn.Module) -> Callable[[Tensor, Tensor], Tensor]:
    """z_{t-1} -> z_t of one step at input ``xp`` (:func:`step_input`), the map the exact transport
    differentiates (docs/method.md §4b, §2c)."""
    if stacked(cell):
        return cell.state_step
    return lambda xp, z: cell_step(cell, xp, z)[1]


def copied_rows(cell: torch.nn.Module) -> tuple[tuple[int, int, int], ...]:
    """(row, column, length) ranges of z that one step copies, z_t[row + i] = z_{t-1}[column + i]
    (a stack's convolution windows, docs/method.md §2c); none for a cell."""
    return tuple(cell.copied()) if stacked(cell) else ()


def layer_states(cell: torch.nn.Module) -> list[tuple[torch.nn.Module, slice, int]]:
    """(cell, its own state's slice of z, the width of the window after it) per layer, bottom to
    top: a stack's layers (docs/method.md §2c), or the cell itself over its whole state."""
    return cell.layer_states() if stacked(cell) else [(cell, slice(0, state_size(cell)), 0)]


def layer_order(cell: torch.nn.Module) -> Tensor | None:
    """Indices of z with the layers top to bottom, the order in which a stack's one-step Jacobian is
    block upper-triangular (docs/method.md §2c, §4c); None where z is one layer's, already in order."""
    return cell.top_down() if stacked(cell) else None


def rate_groups(cell: torch.nn.Module) -> list[list[str]]:
    """Per layer, the names (in the cell) of the weights whose rates make its Lambda (docs/method.md
    §4, §2c): a cell's recurrent weights, one group."""
    return cell.rate_groups() if stacked(cell) else [cell.recurrent_weights()]


def output_error(y_hat: Tensor, y: Tensor, w_out: Tensor) -> Tensor:
    """delta_t = (y_hat_t - y_t) W_out^T, shape (B, T, H) for a (1, H) readout weight."""
    return (y_hat - y)[..., None] * w_out.reshape(1, 1, -1)


def output_sources(cell: torch.nn.Module, x: Tensor, z: Tensor, y_hat: Tensor, y: Tensor,
                   w_out: Tensor) -> tuple[Tensor, Tensor | None]:
    """(delta (B, T, units), src (B, T, n) or None): the readout's error on every unit and on the full
    state z (docs/method.md §4b). A cell's delta is :func:`output_error` and its source is delta on
    the units' own components (None: the probe places it); a stack's are the readout's gradients
    with the rest of z_t held (docs/method.md §2c)."""
    if stacked(cell):
        return cell.output_sources(x, z, y_hat - y, w_out)
    return output_error(y_hat, y, w_out), None


def cell_hidden(cell: torch.nn.Module, xp: Tensor, z: Tensor) -> Tensor:
    """hidden_t of a full state z_t at projected input ``xp``: h_t, or a diagonal linear cell's readout."""
    if linear_state(cell):
        return cell.readout(complex_view(z) if cell.complex_state else z, xp)
    return z[..., :cell.hidden_size]
