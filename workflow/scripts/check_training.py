"""Adapter: fail with the divergence note of a run's curve, else mark the run converged."""
from learnwin.infra import io, runtime

log = runtime.setup(snakemake.log[0], snakemake.threads)
diverged = io.read_notes(snakemake.input.curve).get("diverged")
if diverged:
    raise SystemExit(f"training diverged: {diverged}")
with io.atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text("converged\n")
