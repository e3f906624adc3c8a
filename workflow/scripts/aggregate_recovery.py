"""Adapter: recovery rows + the aggregated H_N table (H_N_agg) -> learned, window, comparison, agreement
(learnwin.stats.recovery, no torch)."""
import pandas as pd

from learnwin.infra import io, runtime
from learnwin.stats import recovery

log = runtime.setup(snakemake.log[0], snakemake.threads)
rows = pd.concat([io.read_table(p, "recovery") for p in snakemake.input.rows], ignore_index=True)
table = recovery.learned(rows, snakemake.params.threshold)
window = recovery.empirical_window(table)
comparison = recovery.compare(recovery.aggregate_window(window),
                              io.read_table(snakemake.input.H_N_agg, "H_N"))
agreement = recovery.agreement(comparison)
log.info("agreement:\n%s", agreement.to_string())
io.write_table(table, snakemake.output.table, "recovery")
io.write_table(window, snakemake.output.window, "recovery")
io.write_table(comparison, snakemake.output.comparison, "recovery")
io.write_table(agreement, snakemake.output.agreement, "recovery")
