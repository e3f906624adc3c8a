"""Adapter: rule aggregate_recovery, the ground-truth jobs' tables + the main run's H_N_agg and
decay tables -> window, growth, slopes, monotonicity, steps_check, growth_prediction, prediction,
prediction_scores (learnwin.stats.groundtruth, growth, prediction; no torch)."""
import pandas as pd

from learnwin.infra import io, runtime
from learnwin.stats import groundtruth, growth, prediction

log = runtime.setup(snakemake.log[0], snakemake.threads)
inp, out, params = snakemake.input, snakemake.output, snakemake.params
scores = pd.concat([io.read_table(p, "recovery") for p in inp.scores], ignore_index=True)
window = pd.concat([io.read_table(p, "recovery") for p in inp.window], ignore_index=True)
main = window[window["arm"] == "main"]
fits = growth.growth_table(main)
slopes = growth.slopes_differ(main)
growth_pred, levels, pred_scores = prediction.prediction_tables(
    window, fits, io.read_table(inp.H_N_agg, "H_N"),
    pd.concat([io.read_table(p, "decay") for p in inp.decay], ignore_index=True),
    optimizer=params.optimizer, epoch=params.epoch)
log.info("growth:\n%s\nslopes:\n%s\nscores:\n%s", fits.to_string(), slopes.to_string(),
         pred_scores.to_string())
tables = dict(scores=scores, window=window, growth=fits, slopes=slopes,
              monotonicity=groundtruth.monotonicity(scores, window),
              steps_check=groundtruth.steps_check(window), growth_prediction=growth_pred,
              prediction=levels, prediction_scores=pred_scores)
for name, table in tables.items():
    io.write_table(table, out[name], "recovery")
