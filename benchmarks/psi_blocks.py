"""psi at every lag: the gathered kernel on whole-batch lag chunks against the package's.

Run: python benchmarks/psi_blocks.py [--model mingru] [--T 64 512 1024] [--batch 128] [--hidden 32]

``learnwin.probing.detect.psi_diagonal`` bounds its work arrays by ``budget`` elements. Before,
a lag chunk always held every sequence of the batch, so at long T one lag's arrays outgrew the
budget (B T H: 16 MB of float32 at T = 1024, 50 MB at the long-T rung's T = 3072), and every
time index was gathered (index_select copies of the prefix sums, Lambda, the error and the
tangent per chunk). Now the sequences come in blocks that fit, and the times are slices and
strided windows (no copies). "before" below is that earlier code (benchmarks/envelope.py's
psi_chunk on DiagonalTransport.gamma); both run on the same trace, Lambda, error and tangent of an
untrained model, 1 thread. Prints wall, user and system seconds (getrusage), before / after and
the largest difference relative to max |psi|. Last, torch.exp against
``learnwin.probing.detect.exp_flushed`` on float32 arguments in [-300, -88] (where a long lag's
Gamma underflows) and in [-50, 0], ns per element.
"""

import argparse
import resource
import time

import torch
from envelope import psi_chunk  # benchmarks/envelope.py

from learnwin.models.cells import build_model
from learnwin.models.state import output_error
from learnwin.probing.detect import exp_flushed, psi_diagonal, random_directions, tangents
from learnwin.probing.envelope import DiagonalTransport, base_rate, lag_chunks, receiving_times, take_times


def _timed(fn):
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    out = fn()
    r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    return out, (w1 - w0, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime)


def before(transport, lam, delta, v):
    """The earlier psi_diagonal: gathered times, every sequence of the batch in each lag chunk."""
    B, T, P = lam.shape
    lags = torch.arange(T)
    out = []
    for chunk in lag_chunks(range(T), B * T * P):
        first = chunk[0]
        t, k, mask = (a[:, first:] for a in receiving_times(lags[first:first + len(chunk)], T))
        _, gamma = transport.gamma(t, k, mask)
        out.append(psi_chunk(take_times(lam, k) * gamma, delta, v, t, k, mask))
    return torch.cat(out, -1)


def run(model_name: str, T: int, B: int, H: int, D: int = 8):
    torch.manual_seed(0)
    model = build_model(model_name, D, H)
    cell = model.cell
    x, y = torch.randn(B, T, D), torch.randn(B, T)
    with torch.no_grad():
        y_hat = model(x)
        trace = cell.trace(x)
    dirs = {n.removeprefix("cell."): d.mean(0, keepdim=True)
            for n, d in random_directions(model, 8, 0).items() if n.startswith("cell.")}
    v = cell.transported(tangents(cell, x, dirs, cell.full_state)[0])
    transport = DiagonalTransport(trace, 1, torch.float32)
    v = v.to(transport.dtype if v.is_complex() else torch.float32)
    lam = base_rate(trace.presynaptic, None, 1e-3, H).float()
    delta = output_error(y_hat - y, model.W_out.detach()).float()
    P = v.shape[-1]
    whole, t_whole = _timed(lambda: before(transport, lam, delta, v))
    blocks, t_blocks = _timed(lambda: psi_diagonal(transport, lam, delta, v))
    diff = ((blocks - whole).abs().max() / whole.abs().max()).item()
    print(f"model={model_name} T={T} H={H} batch={B}: one lag of the batch = {B * T * P * 4 / 2**20:.0f} MB")
    for label, (wall, user, system) in (("before", t_whole), ("after ", t_blocks)):
        print(f"  {label}  wall {wall:7.2f} s  user {user:7.2f} s  system {system:7.2f} s")
    print(f"  before / after: wall {t_whole[0] / t_blocks[0]:.2f}x, system {t_whole[2] / max(t_blocks[2], 1e-3):.1f}x;"
          f" largest difference {diff:.1e} of max |psi|")


def exp_speed(n: int = 1 << 22, repeat: int = 10):
    """ns per element of torch.exp and exp_flushed on underflowing and on ordinary arguments."""
    for lo, hi in ((-300.0, -88.0), (-50.0, 0.0)):
        x = torch.empty(n).uniform_(lo, hi, generator=torch.Generator().manual_seed(0))
        ns = {}
        for name, fn in (("torch.exp", torch.exp), ("exp_flushed", exp_flushed)):
            t0 = time.process_time()
            for _ in range(repeat):
                fn(x)
            ns[name] = 1e9 * (time.process_time() - t0) / repeat / n
        print(f"exp on [{lo:g}, {hi:g}]: torch.exp {ns['torch.exp']:.2f} ns, exp_flushed {ns['exp_flushed']:.2f} ns"
              f" per element ({ns['torch.exp'] / ns['exp_flushed']:.1f}x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mingru")
    ap.add_argument("--T", type=int, nargs="+", default=[64, 512, 1024])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for T in args.T:
        run(args.model, T, args.batch, args.hidden)
    exp_speed()


if __name__ == "__main__":
    main()
