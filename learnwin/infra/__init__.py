"""Plumbing shared by every stage: config checks, the results layout, atomic I/O, job resources,
process set-up and provenance."""
