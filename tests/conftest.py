"""Session fixtures: one smoke run of the whole workflow, shared by the end-to-end tests."""

import pytest
from workflow_helpers import copy_workflow, snakemake


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke config run once end to end (``snakemake --cores 2``); returns its folder."""
    work = copy_workflow(tmp_path_factory.mktemp("smoke"))
    snakemake(work, "--cores", "2", "--configfile", "config/smoke.yaml")
    return work
