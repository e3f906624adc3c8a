"""The full state z of a network's cell and the questions a probe asks of it (docs/method.md §4b, §2b, §2c).

z is what the exact transport differentiates: h, (h, c) for a cell transported along its cell
state, the real view of a diagonal linear cell's state, or a stack's every layer (§2c). Each
kind of cell answers for its own layout through its methods (:class:`learnwin.models.cells.GatedCell`,
:class:`learnwin.models.linear_cells.DiagonalLinear`, :class:`learnwin.models.stack.Stack`):

* ``state_width`` (n), ``state_blocks`` (S: z is S blocks of the units' values; a cell's only)
  and ``per_unit_state`` (True where unit q owns its own consecutive components of z, §2b);
* ``full_state(hidden, transported)`` -> z, and ``transported(v)``, the transported state's
  tangent (..., P) from the full state's;
* ``step_input(x)`` and ``state_step(xp, z)``: z_{t-1} -> z_t at the step input ``xp``, the map
  the exact transport differentiates; a one-layer cell's ``cell_step(xp, z)`` -> (hidden_t, z_t)
  and ``hidden_of(xp, z)``, what a stack's layer reads of it;
* ``copied()``, ``layer_states()``, ``top_down()``, ``rate_groups()`` and
  ``output_sources(x, z, error, w_out)``, which :class:`CellState` answers for one layer.

A probe asks these and never tests what kind of cell it holds.
"""

from __future__ import annotations

import torch
from torch import Tensor


def real_view(state: Tensor) -> Tensor:
    """A complex state (..., P) as reals (..., 2 P), (Re, Im) per component; a real one unchanged."""
    return torch.view_as_real(state.resolve_conj()).flatten(-2) if state.is_complex() else state


def complex_view(z: Tensor) -> Tensor:
    """The inverse of :func:`real_view` for a complex state: (..., 2 P) reals as (..., P)."""
    return torch.view_as_complex(z.unflatten(-1, (-1, 2)).contiguous())


def output_error(error: Tensor, w_out: Tensor) -> Tensor:
    """delta_t = (y_hat_t - y_t) W_out^T, shape (B, T, H), of the error ``error`` = y_hat - y (B, T)
    for a (1, H) readout weight."""
    return error[..., None] * w_out.reshape(1, 1, -1)


class CellState:
    """The layout answers of a one-layer cell, whose z is its own state (docs/method.md §4b): the
    class implements ``state_width``, ``cell_step`` and ``recurrent_weights``; a stack answers
    each of these itself (docs/method.md §2c)."""

    state_blocks = 1
    per_unit_state = False

    def state_step(self, xp: Tensor, z: Tensor) -> Tensor:
        """z_t from the step input ``xp`` and z_{t-1}."""
        return self.cell_step(xp, z)[1]

    def copied(self) -> list[tuple[int, int, int]]:
        """(row, column, length) ranges of z that one step copies: none in a cell."""
        return []

    def layer_states(self) -> list[tuple[torch.nn.Module, slice, int]]:
        """(cell, its state's slice of z, the width of the window after it): the cell over all of z."""
        return [(self, slice(0, self.state_width), 0)]

    def top_down(self) -> Tensor | None:
        """None: z is one layer's, already in the order of docs/method.md §4c."""
        return None

    def rate_groups(self) -> list[list[str]]:
        """The weights whose rates make Lambda (docs/method.md §4), one group: the recurrent weights."""
        return [self.recurrent_weights()]

    def output_sources(self, x: Tensor, z: Tensor, error: Tensor, w_out: Tensor) -> tuple[Tensor, None]:
        """(delta (B, T, H), None) of the error ``error`` = y_hat - y (B, T): the readout's error
        on every unit; the probe places it on the units' own components of z (docs/method.md §4b)."""
        return output_error(error, w_out), None


class Traced(CellState):
    """The answers for a cell of the minimal interface (``hidden_size``, ``forward``, ``trace``;
    the README's library example), which has one layer and no exact transport: z is its hidden
    state, which it transports; the readout's error is :class:`CellState`'s."""

    def full_state(self, hidden: Tensor, transported: Tensor) -> Tensor:
        return hidden

    def transported(self, v: Tensor) -> Tensor:
        return v


def layout_of(cell: torch.nn.Module):
    """What answers the probe's questions for ``cell``: the cell itself where it implements the state
    layout (a registered cell, a stack), else :class:`Traced`."""
    return cell if hasattr(cell, "full_state") else Traced()
