"""Adapter: envelope.parquet of all seeds -> decay/{optimizer}/{model}/epoch{E}.parquet (docs/method.md §8)."""

import pandas as pd

from learnwin.infra import io, runtime
from learnwin.stats import decay

log = runtime.setup(snakemake.log[0], snakemake.threads)
cfg = snakemake.params.decay
envelopes = pd.concat([io.read_table(p, "envelope") for p in snakemake.input.envelopes], ignore_index=True)
out = decay.fit_envelopes(envelopes, **cfg)  # section keys are the keywords; seed: decay.SEED
log.info("selected: %s", out.loc[out["selected"], ["scope", "law", "weight"]].to_dict("records"))
io.write_table(out, snakemake.output.decay, "decay")
