"""Adapter: envelope.parquet of all seeds -> decay/{optimizer}/{model}/epoch{E}.parquet (METHOD §8)."""

import pandas as pd

from learnwin import decay, io, runtime

DECAY_SEED = 8_000  # bootstrap seed; scopes are further keyed by their run seed inside fit_envelopes

log = runtime.setup(snakemake.log[0], snakemake.threads)
cfg = snakemake.params.decay
envelopes = pd.concat([io.read_table(p, "envelope") for p in snakemake.input.envelopes], ignore_index=True)
out = decay.fit_envelopes(envelopes, **cfg, seed=DECAY_SEED)  # section keys are the keywords
log.info("selected: %s", out.loc[out["selected"], ["scope", "law", "weight"]].to_dict("records"))
io.write_table(out, snakemake.output.decay, "decay")
