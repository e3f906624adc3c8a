"""A block's arithmetic, torch-free (docs/method.md §2c): which parts surround a layer's cell
(:class:`BlockSpec`), the state a layer holds, the rows of it one step copies, and the layer's
matrix products per step (the cost law's G, :func:`learnwin.infra.resources.mixing`).

The torch modules of the parts are :class:`learnwin.models.stack.Block`; the registry of named
blocks is :data:`learnwin.infra.registry.BLOCKS`. A new part is a field here (with its state and
cost, when it has any) and its module in :mod:`learnwin.models.stack`: the config check, the job
resources, the exact transport's stored rows and the stack all read this one home.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATIONS = ("gelu", "silu")


@dataclass(frozen=True)
class BlockSpec:
    """One block shape of a stack (docs/method.md §2c): which parts of
    :class:`learnwin.models.stack.Block` surround the cell, stream u (width H) in, stream out.

    ``norm``: the pre-norm of the mixer and of the MLP, and the stack's final norm ("layer",
    "rms" or None); ``embed``: a linear map D -> H before the first block (False: the first layer
    reads x itself and has no residual, so one layer is the bare cell); ``residual``: u + the
    block's output (else the output alone); ``expand``: the cell's width W = expand H, with in-
    and out-projections when W != H or a gate branch is present; ``conv``: the width k of a short
    causal depthwise convolution before the cell (0: none), its k inputs kept in the state;
    ``conv_act``: the activation after it; ``gate``: the activation of a gate branch that
    multiplies the cell's output; ``post``: "glu", GELU then a GLU back to width H (the LRU
    block); ``mlp``: a pre-norm channel MLP with residual after the mixer ("gelu": GELU, or
    "geglu": GELU-gated), of inner width ``mlp_expand`` H; ``cite``: the paper and section it follows.
    """

    norm: str | None = None
    embed: bool = True
    residual: bool = True
    expand: int = 1
    in_proj: bool = True
    conv: int = 0
    conv_act: str | None = None
    gate: str | None = None
    post: str | None = None
    mlp: str | None = None
    mlp_expand: int = 4
    cite: str = ""

    def __post_init__(self):
        for key, allowed in (("norm", ("layer", "rms")), ("conv_act", ACTIVATIONS), ("gate", ACTIVATIONS),
                             ("post", ("glu",)), ("mlp", ("gelu", "geglu"))):
            value = getattr(self, key)
            if value is not None and value not in allowed:
                raise ValueError(f"BlockSpec.{key} = {value!r}; allowed: {', '.join(allowed)} or None")
        for key in ("expand", "conv", "mlp_expand"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < (key == "expand"):
                raise ValueError(f"BlockSpec.{key} = {getattr(self, key)!r} must be an integer >= {int(key == 'expand')}")

    def bare(self, layers: int) -> bool:
        """One layer of a block without an embedding is the bare cell of §2 (docs/method.md §2c)."""
        return layers == 1 and not self.embed

    @property
    def projected(self) -> bool:
        """In- and out-projections around the cell: its width differs from the stream's, or a gate
        or GLU reads the block's input beside it."""
        return self.expand != 1 or self.gate is not None or self.post is not None


    def layer_state(self, cell_state: int, width: int) -> int:
        """Components of one layer's full state z_i (docs/method.md §2c): its cell's own
        (``cell_state``), then the last k inputs of the convolution, ``width`` (W) each."""
        return cell_state + self.conv * width

    def copied(self, cell_state: int, width: int) -> tuple[tuple[int, int, int], ...]:
        """(row, column, length) ranges of z_i, counted from the layer's first component, that one
        step copies, z_{i,t}[row + j] = z_{i,t-1}[column + j]: the window's k - 1 older inputs moving
        one slot (docs/method.md §2c). Their rows of the one-step Jacobian are unit rows, not stored."""
        k = self.conv
        return ((cell_state, cell_state + width, (k - 1) * width),) if k > 1 else ()

    def stored(self, cell_state: int, width: int) -> int:
        """Rows of one layer's one-step Jacobian the exact transport stores: all but :meth:`copied`."""
        return self.layer_state(cell_state, width) - sum(length for *_, length in self.copied(cell_state, width))

    def mixing(self, gate_blocks: int, layers: int) -> int:
        """G of the cost law (:func:`learnwin.infra.resources.mixing`): matrix products per step in
        units of H^2, the cell's ``gate_blocks`` for the bare cell; a stack's sums its ``layers``
        cells at width W = expand H and their blocks' projections, gate branch, GLU and MLP."""
        if self.bare(layers):
            return gate_blocks
        e = self.expand
        block = e * (int(self.projected and self.in_proj) + int(self.gate is not None)
                     + (2 if self.post else int(self.projected)))
        block += self.mlp_expand * (3 if self.mlp == "geglu" else 2) if self.mlp else 0
        return layers * (gate_blocks * e * e + block)
