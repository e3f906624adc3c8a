"""Chunked parallel scan of a diagonal linear recurrence h_t = a_t h_{t-1} + b_t (docs/method.md §2b).

Within chunks of ``chunk`` steps the recurrence runs from a zero state, all chunks at once (a
loop of ``chunk`` vectorised steps), together with the running product of a. The state carried
into each chunk is the same recurrence one level up (decay = product over the chunk, input =
the chunk's last local state), solved by the same function, so the depth is log_chunk(T) and
the Python loop per level has ``chunk`` iterations. No division and no log: it is exact for
any sign of b and for complex a (the LRU), and products over one chunk only underflow where
the true transport is below the floating-point range anyway. Autograd differentiates it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

CHUNK = 16


def linear_scan(a: Tensor, b: Tensor, chunk: int = CHUNK) -> Tensor:
    """States h (B, T, P) of h_t = a_t h_{t-1} + b_t with h_{-1} = 0; a, b (B, T, P), real or complex."""
    B, T, P = b.shape
    a = a.expand_as(b)
    if T <= chunk:
        return _local(a[:, None], b[:, None])[0][:, 0]
    pad = -T % chunk
    n = (T + pad) // chunk
    a_c = F.pad(a, (0, 0, 0, pad), value=1.0).view(B, n, chunk, P)
    b_c = F.pad(b, (0, 0, 0, pad)).view(B, n, chunk, P)
    local, prod = _local(a_c, b_c)  # (B, n, C, P)
    ends = linear_scan(prod[:, :, -1], local[:, :, -1], chunk)  # (B, n, P): state at each chunk's end
    carry = F.pad(ends, (0, 0, 1, 0))[:, :-1]  # state entering each chunk
    h = local + prod * carry[:, :, None]
    return h.view(B, n * chunk, P)[:, :T]


def _local(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """States from zero and running products of a within each chunk: a, b (B, n, C, P), C <= chunk.

    The loop runs over the C steps of all chunks at once; unbind gives one backward stack, not
    a full-size zero gradient per step.
    """
    a_steps, b_steps = a.unbind(2), b.unbind(2)
    h, p = b_steps[0], a_steps[0]
    hs, ps = [h], [p]
    for a_i, b_i in zip(a_steps[1:], b_steps[1:]):
        h = a_i * h + b_i
        p = p * a_i
        hs.append(h)
        ps.append(p)
    return torch.stack(hs, 2), torch.stack(ps, 2)
