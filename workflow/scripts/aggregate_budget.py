"""Adapter: rule aggregate_budget, the budget protocol's scores and same-network snapshots of one
seed set (docs/method.md §10b) -> scores, learning_budget, window, H_emp (learnwin.stats.budget);
growth, slopes (each seed's log-N slope, learnwin.stats.growth), groups (claim (b) with the seed as
the unit, learnwin.stats.seedlevel); learning_slope (claim (d));
network_H_N, network_decay, growth_prediction, prediction, prediction_scores and confirm
(learnwin.stats.prediction). The fits and variants run in forked processes, as many as the rule's
threads; the tables do not depend on how many."""
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from learnwin.infra import io, layout, runtime
from learnwin.infra.registry import Column, load_cells
from learnwin.stats import budget, growth, prediction, seedlevel

log = runtime.setup(snakemake.log[0], snakemake.threads)
load_cells(snakemake.config["model"]["cells_module"])  # the expectations of a user's cells
inp, out, params = snakemake.input, snakemake.output, snakemake.params
scores = pd.concat([io.read_table(p, "budget") for p in inp.scores], ignore_index=True)
own = {name: pd.concat([io.read_table(p, name) for p in inp[f"network_{name}"]], ignore_index=True)
       for name in ("envelope", "psi", "total")}
learning_budget = budget.learning_budget(scores, params.thresholds, params.budgets)
window = budget.window_by_budget(learning_budget, params.budgets)
h_emp = budget.window_over_seeds(window)
truth = window.rename(columns={"H_emp": "H"})
cells = set(own["envelope"]["model"])  # a plain module (recovery.modules) has no snapshot: no prediction
if set(truth["model"]) - cells:
    log.info("no snapshots, so no prediction and no claim (d), for %s (recovery.modules)",
             sorted(set(truth["model"]) - cells))
with ProcessPoolExecutor(snakemake.threads, mp_context=multiprocessing.get_context("fork")) as pool:
    slopes = growth.seed_growth(truth, map_fn=pool.map)
    fits = growth.growth_table(truth, slopes, map_fn=pool.map)
    network_h_n, network_decay, network_alpha = prediction.network_stats(
        own["envelope"], own["psi"], own["total"], alpha_cfg=params.alpha, window_cfg=params.window,
        decay_cfg=params.decay, map_fn=pool.map)
    growth_pred, levels, pred_scores = prediction.prediction_tables(
        prediction.measured_means(truth[truth["model"].isin(cells)]), fits[fits["model"].isin(cells)],
        {name: (network_h_n, network_decay, name) for name in prediction.NETWORKS},
        optimizer=params.optimizer, primary=[tuple(prediction.CONFIRMATORY[k] for k in ("networks", "transport", "noise"))],
        map_fn=pool.map)
groups = seedlevel.groups_table(slopes, dict(Column("expected_growth")))
confirm = prediction.confirmatory_table(levels)
learning_slope = budget.learning_slope(learning_budget[learning_budget["model"].isin(cells)], own["envelope"],
                                      budget.kappa_inputs(network_h_n))
log.info("growth:\n%s\ngroups:\n%s\n(d):\n%s\nconfirm:\n%s", fits.to_string(), groups.to_string(),
         learning_slope.to_string(), confirm.to_string())
tables = dict(scores=scores, learning_budget=learning_budget, window=window, H_emp=h_emp, growth=fits, slopes=slopes,
              groups=groups, learning_slope=learning_slope, network_alpha=network_alpha, network_H_N=network_h_n,
              network_decay=network_decay, growth_prediction=growth_pred, prediction=levels,
              prediction_scores=pred_scores, confirm=confirm)
for name, table in tables.items():
    io.write_table(table, out[name], layout.budget_schema(name))
