# Stage claims (docs/method.md §8b): the paper's four claims as verdicts over seeds, from the
# stored decay fits, envelopes, unit spectra, H_N and master-law tables and the summary's val R².
# One cheap local job; its inputs are learnwin.stats.claims.inputs, the files it reads.
from learnwin.stats import claims as lwclaims


rule claims:
    input:
        **lwclaims.inputs(layout.ROOT, MODELS, OPTIMIZERS, SEEDS, FIG_EPOCH),
    output:
        parquet=layout.CLAIMS["parquet"],
        findings=layout.CLAIMS["findings"],
        html=report(
            layout.CLAIMS["html"],
            caption="../report/claims.rst",
            category="Claims",
            labels={"figure": "0 · verdicts and findings", "epoch": FIG_EPOCH},
        ),
    log:
        f"{LOGS}/claims.log",
    benchmark:
        f"{BENCH}/claims.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        epoch=FIG_EPOCH,
        transport=", ".join(lwconfig.transports_of(config["snapshot"]["transport"])),
        default_config=f"{workflow.basedir}/config/config.yaml",  # the band's config (method.md §8c)
    script:
        "../scripts/write_claims.py"


CLAIMS_TARGETS = list(layout.CLAIMS.values())


localrules:
    claims,
