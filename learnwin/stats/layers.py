"""A stack's tables per layer (docs/method.md §2c): the probe's units are every layer's, layer-major,
so a layer's envelope is the sum over its own units."""

from __future__ import annotations

import pandas as pd


def layer_envelopes(units: pd.DataFrame, layers: int) -> pd.DataFrame:
    """Each layer's envelope from a units table (docs/method.md §2c): f_i(l) = the sum of mu_abs over
    layer i's units (units layer-major, W = units / ``layers`` each); the stack's f is their sum."""
    width = (int(units["unit"].max()) + 1) // layers
    df = units.assign(layer=units["unit"] // width)
    keys = [c for c in df.columns if c not in ("unit", "mu_abs", "tau", "layer", "lag")]
    return (df.groupby([*keys, "layer", "lag"], as_index=False, sort=True)["mu_abs"].sum()
            .rename(columns={"mu_abs": "f"}))
