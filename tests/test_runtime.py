"""learnwin.infra.runtime: deterministic sets torch's deterministic-algorithms flag (strict, not warn only) and
cuBLAS's workspace without importing torch's compiler stack (about a second of every job's start-up);
keep_freed_memory stops re-faulting."""

import os
import subprocess
import sys

import pytest

CHECK = """
import os, sys, torch
from learnwin.infra import runtime
assert not torch.are_deterministic_algorithms_enabled()
runtime.deterministic()
assert torch.are_deterministic_algorithms_enabled()
assert not torch.is_deterministic_algorithms_warn_only_enabled()
assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
print("inductor" if "torch._inductor" in sys.modules else "no inductor")
"""


def test_deterministic_flags_without_the_compiler_import():
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}  # set by the call checked
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=True, env=env)
    assert out.stdout.strip() == "no inductor"
    # the check can fail: torch's own setter imports the compiler stack
    own = CHECK.replace("runtime.deterministic()", "torch.use_deterministic_algorithms(True); runtime.setup(None)")
    out = subprocess.run([sys.executable, "-c", own], capture_output=True, text=True, timeout=120, check=True, env=env)
    assert out.stdout.strip() == "inductor"


_FAULTS = """
import ctypes, resource, sys
from learnwin.infra import runtime
if sys.argv[1] == "keep":
    assert runtime.keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size, count = 16 << 20, 8  # eight live 16 MB work arrays, as one step of a tensor computation
def round_trip():
    blocks = [libc.malloc(size) for _ in range(count)]
    for p in blocks:
        ctypes.memset(p, 1, size)  # touch every page, as a tensor op does
    for p in blocks:
        libc.free(p)
round_trip()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    round_trip()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_stops_refaulting_work_arrays():
    """Under glibc's defaults the heap's freed top (eight 16 MB arrays) is returned to the kernel
    and re-faulted page by page in every round; after keep_freed_memory it is reused without
    faults (docs/performance.md)."""
    faults = {mode: int(subprocess.run([sys.executable, "-c", _FAULTS, mode], check=True, capture_output=True,
                                       text=True).stdout) for mode in ("default", "keep")}
    pages = 10 * 8 * (16 << 20) // 4096
    assert faults["default"] > 0.5 * pages
    assert faults["keep"] < 0.01 * pages
