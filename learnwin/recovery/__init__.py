"""The ground truth of the window (docs/method.md §10, §10b): the jobs that train networks on the
single-lag task and score them, under the dataset protocol (``groundtruth_job``) and the budget
protocol (``budget_job``), on the task both share (``task``). Their statistics are
:mod:`learnwin.stats.groundtruth`, :mod:`learnwin.stats.budget` and :mod:`learnwin.stats.growth`."""
