"""Session fixtures: one smoke run of the whole workflow, shared by the end-to-end tests."""

import sys
from pathlib import Path

import pytest
from workflow_helpers import copy_workflow, snakemake


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke config run once end to end (``snakemake --cores 2``); returns its folder."""
    work = copy_workflow(tmp_path_factory.mktemp("smoke"))
    snakemake(work, "--cores", "2", "--configfile", "config/smoke.yaml")
    return work


@pytest.fixture
def fresh_registry(monkeypatch):
    """The cell registry (:mod:`learnwin.infra.registry`, the module yielded), restored after the
    test, and tests/toy_cell.py importable (not yet imported) as ``toy_cell``: what it registers
    is gone after the test."""
    from learnwin.infra import registry

    saved = dict(registry.CELLS)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    sys.modules.pop("toy_cell", None)
    yield registry
    sys.modules.pop("toy_cell", None)
    registry.CELLS.clear()
    registry.CELLS.update(saved)
