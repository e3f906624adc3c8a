"""Adapter: rule aggregate_recovery, the ground-truth jobs' tables, the snapshots of their own
networks and the main run's H_N_agg and decay tables -> window, growth, slopes (each seed's log-N
slope), monotonicity, steps_check, network_H_N, network_decay, growth_prediction, prediction,
prediction_scores (learnwin.stats.groundtruth, growth, prediction). The growth fits per (model, threshold), the
snapshots and the prediction variants run in forked processes, as many as the rule's threads; the
tables do not depend on how many."""
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from learnwin.infra import io, layout, runtime
from learnwin.stats import groundtruth, growth, prediction

log = runtime.setup(snakemake.log[0], snakemake.threads)
inp, out, params = snakemake.input, snakemake.output, snakemake.params
scores = pd.concat([io.read_table(p, "recovery") for p in inp.scores], ignore_index=True)
window = pd.concat([io.read_table(p, "recovery") for p in inp.window], ignore_index=True)
main = window[window["arm"] == "main"]
own = {name: pd.concat([io.read_table(p, name) for p in inp[f"network_{name}"]], ignore_index=True)
       for name in ("envelope", "psi", "total")}
main_run = (io.read_table(inp.H_N_agg, "H_N"),
            pd.concat([io.read_table(p, "decay") for p in inp.decay], ignore_index=True), params.epoch)
with ProcessPoolExecutor(snakemake.threads, mp_context=multiprocessing.get_context("fork")) as pool:
    slopes = growth.seed_growth(main, map_fn=pool.map)
    fits = growth.growth_table(main, slopes, map_fn=pool.map)
    network_h_n, network_decay, _ = prediction.network_stats(own["envelope"], own["psi"], own["total"],
                                                             alpha_cfg=params.alpha, window_cfg=params.window,
                                                             decay_cfg=params.decay, map_fn=pool.map)
    growth_pred, levels, pred_scores = prediction.prediction_tables(
        prediction.measured_means(main), fits, {**{name: (network_h_n, network_decay, name) for name in prediction.NETWORKS},
                       "main_run": main_run}, optimizer=params.optimizer, map_fn=pool.map)
log.info("growth:\n%s\nslopes:\n%s\nscores:\n%s", fits.to_string(), slopes.to_string(),
         pred_scores.to_string())
tables = dict(scores=scores, window=window, growth=fits, slopes=slopes,
              monotonicity=groundtruth.monotonicity(scores, window),
              steps_check=groundtruth.steps_check(window), network_H_N=network_h_n,
              network_decay=network_decay, growth_prediction=growth_pred,
              prediction=levels, prediction_scores=pred_scores)
for name, table in tables.items():
    io.write_table(table, out[name], "seed_growth" if name in layout.SEED_GROWTH else "recovery")
