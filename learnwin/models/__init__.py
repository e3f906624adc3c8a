"""The networks and how they learn: the task data, the recurrent cells, their training scans and
the training loop (docs/method.md §1-3)."""
