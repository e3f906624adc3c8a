"""Session fixtures: one smoke run of the whole workflow, shared by the end-to-end tests; and the
grouping that lets pytest-xdist run the suite in parallel (``-n auto --dist loadgroup``, pyproject.toml)
without running a shared fixture twice: every test of one file runs in one worker (its module
fixtures are built once), and every test that reads the smoke run joins one group, "smoke", so the
session's smoke run is made once."""

import os
import sys
from pathlib import Path

import pytest
from workflow_helpers import copy_workflow, snakemake

SMOKE_GROUP = "smoke"


def _group(item) -> str:
    return SMOKE_GROUP if "smoke_run" in item.fixturenames else item.nodeid.split("::")[0]


def pytest_itemcollected(item):
    """Group the tests (see the module docstring), as each is collected: before any
    pytest_collection_modifyitems, where xdist reads the groups."""
    item.add_marker(pytest.mark.xdist_group(_group(item)))


def pytest_collection_modifyitems(config, items):
    """The longest chains first: the smoke group, then the files that run workflows (a ``slow``
    test), then the rest, each in file order. xdist keeps this order (``--no-loadscope-reorder``,
    pyproject.toml; by default it would hand out the groups with the most tests first)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if _group(item) == SMOKE_GROUP else 1 if item.path in slow_files else 2)


def pytest_configure(config):
    """Under xdist, each worker's torch gets its share of the cores (workers x threads <= cores):
    oversubscribed OpenMP threads slow CPU training by orders of magnitude."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


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
