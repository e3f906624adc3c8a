"""Adapter: fail with the divergence message of a run, else mark it converged."""
from learnwin import io, runtime

log = runtime.setup(snakemake.log[0], snakemake.threads)
state = io.load_checkpoint(snakemake.input.final)
if state.get("diverged"):
    raise SystemExit(f"training diverged: {state['diverged']}")
with io.atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(f"converged at epoch {state['epoch']}\n")
