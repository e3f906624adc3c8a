"""The networks and how they learn: the task data, the recurrent cells, their stacks, their full
state, their training scans and the training loop (docs/method.md §1-3, §2c, §4b)."""
