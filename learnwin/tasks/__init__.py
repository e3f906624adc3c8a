"""The tasks the networks learn (docs/method.md §1): each task's draws (:mod:`learnwin.tasks.synthetic`,
the default ``task.kind``, with the single-lag stream of the ground-truth protocols, §10, §10b) and
the splits every task writes and every job reads (:mod:`learnwin.tasks.splits`). The table of tasks
is :mod:`learnwin.infra.tasks`."""
