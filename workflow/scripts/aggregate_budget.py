"""Adapter: rule aggregate_budget, the budget protocol's scores of one seed set (docs/method.md §10b)
-> scores, learning_budget, window and H_emp (learnwin.stats.budget)."""
import pandas as pd

from learnwin.infra import io, runtime
from learnwin.stats import budget

log = runtime.setup(snakemake.log[0], snakemake.threads)
inp, out, params = snakemake.input, snakemake.output, snakemake.params
scores = pd.concat([io.read_table(p, "budget") for p in inp.scores], ignore_index=True)
learning_budget = budget.learning_budget(scores, params.thresholds, params.budgets)
window = budget.window_by_budget(learning_budget, params.budgets)
h_emp = budget.window_over_seeds(window)
log.info("H_emp over seeds:\n%s", h_emp.to_string())
tables = dict(scores=scores, learning_budget=learning_budget, window=window, H_emp=h_emp)
for name, table in tables.items():
    io.write_table(table, out[name], "budget")
