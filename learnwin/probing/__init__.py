"""What a checkpoint carries back in time: the effective-learning-rate envelope under the diagonal
and the exact transport, the detection statistic psi, the memory curve and the snapshot job that
writes them (docs/method.md §4-5)."""
