"""Plumbing shared by every stage: config checks, the cell and block registries' metadata, a block's
arithmetic, the results layout, atomic I/O, job resources, process set-up and provenance. It
imports no higher stage (``models``, ``probing``: tests/test_imports.py) and no torch at import."""
