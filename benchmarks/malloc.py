"""The snapshot stage's kernel time at long T: glibc's default malloc and the memory curve's old
2 GB chunks, against learnwin.infra.runtime.keep_freed_memory and 256 MB chunks.

Run: python benchmarks/malloc.py [--model mingru] [--T 512]

Each variant runs in its own process (mallopt is process-wide), 1 thread, on an untrained model
and one batch of 128 sequences: ``learnwin.probe`` (diagonal transport, psi at every lag and
receiving time, lag grid step T / 32) and the memory curve's batched backward
(``learnwin.probing.memory.input_sensitivity``). Variants:
- before: default malloc, memory-curve chunks within 2^31 bytes (the code before);
- keep only: keep_freed_memory, 2^31-byte chunks (its arrays are above glibc's 32 MB heap limit);
- after: keep_freed_memory, chunks within :data:`learnwin.infra.resources.MEMORY_CURVE_BYTES`.
Prints wall, user and system seconds (getrusage) per part and variant, and before / after.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

VARIANTS = {"before": (False, 2**31), "keep only": (True, 2**31), "after": (True, None)}


def _timed(fn) -> dict:
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    return dict(wall=w1 - w0, user=r1.ru_utime - r0.ru_utime, system=r1.ru_stime - r0.ru_stime)


def child(model_name: str, T: int, variant: str) -> dict:
    from learnwin.infra import runtime

    keep, budget = VARIANTS[variant]
    if keep:
        runtime.keep_freed_memory()
    import torch

    import learnwin.probing.memory as memory
    from learnwin.models.cells import build_model
    from learnwin.probing.detect import random_directions
    from learnwin.probing.snapshot import probe

    if budget is not None:
        memory.MEMORY_CURVE_BYTES = budget
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(model_name, 8, 32)
    x, y, u = torch.randn(128, T, 8), torch.randn(128, T), torch.randn(8)
    with torch.no_grad():
        y_hat = model(x)
    dirs = {n.removeprefix("cell."): d for n, d in random_directions(model, 8, 0).items() if n.startswith("cell.")}
    lags = list(range(1, T, max(1, T // 32)))
    return {"psi": _timed(lambda: probe(model.cell, model.W_out.detach(), [(x, y, y_hat)], lags, lr=1e-3,
                                         directions=dirs)),
            "memory curve": _timed(lambda: memory.input_sensitivity(model, x, u))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mingru")
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--child", choices=list(VARIANTS))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.T, args.child)))
        return
    out = {v: json.loads(subprocess.run([sys.executable, __file__, "--model", args.model, "--T", str(args.T),
                                         "--child", v], check=True, capture_output=True, text=True).stdout)
           for v in VARIANTS}
    print(f"model={args.model} T={args.T} H=32, one batch of 128 sequences, 1 thread")
    for part in ("psi", "memory curve"):
        for variant, r in out.items():
            t = r[part]
            print(f"  {part:12s} {variant:9s} wall {t['wall']:7.2f} s  user {t['user']:7.2f} s  system {t['system']:7.2f} s")
        b, a = out["before"][part], out["after"][part]
        print(f"  {part:12s} before / after: wall {b['wall'] / a['wall']:.2f}x, system {b['system'] / max(a['system'], 1e-3):.1f}x")


if __name__ == "__main__":
    main()
