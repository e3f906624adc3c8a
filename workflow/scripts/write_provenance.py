"""Adapter: rule write_provenance -> learnwin.infra.provenance.collect -> the run's provenance.yaml."""

from learnwin.infra import io, provenance, runtime

log = runtime.setup(snakemake.log[0], snakemake.threads)
record = provenance.collect(snakemake.params.config, snakemake.resources.workflow_cores or None)
io.write_yaml(record, snakemake.output[0])
log.info(
    "provenance: learnwin %s at %s", record["learnwin"]["version"], record["learnwin"]["git_commit"]
)
