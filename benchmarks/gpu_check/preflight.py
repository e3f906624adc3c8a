"""The GPU check's preflight (benchmarks/gpu_check.sh, part 0): what the fused step's compilation needs.

Run: python benchmarks/gpu_check/preflight.py DEVICE [--versions]

Prints the Python, torch, CUDA and cuDNN versions and the device, a C compiler (inductor builds
Triton's kernel launchers and its CPU kernels with it), Python's headers (Python.h, for the same
launchers), triton's version, then compiles one tiny function for DEVICE with torch.compile
(inductor's whole chain: on CUDA a Triton kernel and its launcher) and checks it against eager.
Exit 1 where that compilation fails: the jobs then run the fused step's eager kernels
(learnwin.models.fused.Compiled, one warning naming the cause), so the rest of the check goes on.
``--versions``: the first line alone (the versions and the device; the check's first answer).
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import time

import torch


def first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"fails: {error}"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "?"


def main() -> int:
    device = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cuda")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"preflight: python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}, device {name}", flush=True)
    if "--versions" in sys.argv[2:]:
        return 0
    cc = os.environ.get("CC") or next(filter(None, map(shutil.which, ("gcc", "cc", "clang"))), None)
    print(f"preflight: C compiler {cc}: {first_line([cc, '--version']) if cc else 'none on PATH'}", flush=True)
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    print(f"preflight: Python.h {'at ' + header if os.path.exists(header) else 'missing (looked at ' + header + ')'}",
          flush=True)
    try:
        import triton

        print(f"preflight: triton {triton.__version__}", flush=True)
    except ImportError as error:
        print(f"preflight: triton missing ({error})", flush=True)
    x = torch.linspace(-3, 3, 1000, device=device)
    start = time.perf_counter()
    try:
        fn = torch.compile(lambda v: torch.tanh(v) * torch.sigmoid(2 * v) + 1, fullgraph=True, dynamic=False)
        diff = (fn(x) - (torch.tanh(x) * torch.sigmoid(2 * x) + 1)).abs().max().item()
    except Exception as error:  # what inductor raised: the jobs fall back to eager kernels
        from learnwin.models.fused import cause

        print(f"preflight: torch.compile on {device.type} FAILED after {time.perf_counter() - start:.1f} s: "
              f"{cause(error)}", flush=True)
        return 1
    print(f"preflight: torch.compile on {device.type}: {time.perf_counter() - start:.1f} s cold, "
          f"max |compiled - eager| {diff:.1e}", flush=True)
    return 0 if diff < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
