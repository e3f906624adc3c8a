"""Process set-up shared by the workflow adapters: logging, threads, device, determinism."""

from __future__ import annotations

import logging
import os
import sys

CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's workspace configuration under which its matmuls are reproducible (``CUBLAS_WORKSPACE_CONFIG``;
torch's deterministic mode raises on a CUDA matmul without it). Read when CUDA starts, so it is set
where the runtime starts (:func:`setup`)."""


def setup(log_path: str | None, threads: int = 1) -> logging.Logger:
    """Send logging (and stderr) to ``log_path``, cap OpenMP/MKL/BLAS threads at ``threads``, set
    cuBLAS's workspace (:data:`CUBLAS_WORKSPACE`) and let malloc keep freed memory (:func:`keep_freed_memory`).

    Torch is not imported here, so the numpy-only stages stay torch-free; the torch stages
    call :func:`set_torch_threads` themselves.
    """
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    keep_freed_memory()
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        stream = open(log_path, "a", buffering=1)
        sys.stderr = stream
        handlers = [logging.StreamHandler(stream)]
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    return logging.getLogger("learnwin")


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)


def keep_freed_memory(mmap_limit: int = 32 << 20, trim: int = 1 << 30) -> bool:
    """Let glibc's malloc keep freed memory for reuse (docs/performance.md, "Snapshots at long T").

    Torch allocates a CPU tensor per operation and frees it after. By default glibc maps large
    blocks fresh and returns them on free, and trims the heap's free top, so every new work
    array faults its pages in again: at long T the snapshot spent more time in the kernel than
    computing. Here blocks up to ``mmap_limit`` bytes (glibc's largest allowed) come from the
    heap, which is trimmed only above ``trim`` free bytes. Returns False where the C library has
    no ``mallopt`` (not glibc: nothing changes).
    """
    import ctypes

    try:  # the process's own symbols, libc's among them (find_library would run ldconfig: 3 ms a job)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_limit)) and bool(mallopt(M_TRIM_THRESHOLD, trim))


def set_torch_threads(threads: int) -> None:
    """``torch.set_num_threads`` (and one inter-op thread) so parallel jobs do not oversubscribe."""
    import torch

    torch.set_num_threads(max(1, int(threads)))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu`` (config key ``device``)."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but no CUDA device is visible")
    return device


def deterministic() -> None:
    """Torch flags for bitwise-reproducible runs on one device (docs/reliability.md): strict, so an op
    without a deterministic implementation on its device raises (on CUDA: a float cumsum, which
    learnwin.probing.envelope.prefix_sum avoids); cuBLAS's workspace (:data:`CUBLAS_WORKSPACE`) where
    :func:`setup` did not set it, which must happen before CUDA starts. Inductor's deterministic mode
    is set where the fused step compiles (learnwin.models.fused.compiled)."""
    import torch

    if "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        if torch.cuda.is_initialized():
            raise RuntimeError("CUBLAS_WORKSPACE_CONFIG is unset and CUDA has started: call runtime.setup (or "
                               "runtime.deterministic) before the first CUDA operation")
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    # torch.use_deterministic_algorithms would also import torch._inductor to set its flag (1.3 s of
    # every job's start-up); only the operator flag is set here.
    torch._C._set_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
