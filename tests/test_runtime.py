"""learnwin.infra.runtime.deterministic sets torch's deterministic-algorithms flag (warn only) without
importing torch's compiler stack, which would add about a second to every job's start-up."""

import subprocess
import sys

CHECK = """
import sys, torch
from learnwin.infra import runtime
assert not torch.are_deterministic_algorithms_enabled()
runtime.deterministic()
assert torch.are_deterministic_algorithms_enabled()
assert torch.is_deterministic_algorithms_warn_only_enabled()
print("inductor" if "torch._inductor" in sys.modules else "no inductor")
"""


def test_deterministic_flags_without_the_compiler_import():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "no inductor"
    # the check can fail: torch's own setter imports the compiler stack
    own = CHECK.replace("runtime.deterministic()", "torch.use_deterministic_algorithms(True, warn_only=True)")
    out = subprocess.run([sys.executable, "-c", own], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "inductor"
