"""Statistics on the probe's tables: tail indices, envelope decay classes, the learnability window,
the claim checks and the statistics of the ground truth of the window (docs/method.md §6-8, §10);
the jobs that train its networks are :mod:`learnwin.recovery`. It imports only
:mod:`learnwin.infra` (tests/test_imports.py) and loads no torch."""
