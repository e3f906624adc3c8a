# Stage report: the summary table (+ its reading for the report's landing page) and the
# run's provenance. Both are cheap local jobs reading stored artifacts only.


rule write_summary:
    input:
        **STATS,
        curve=CURVES,
        alpha=fig_runs("alpha"),
        decay=FIG_DECAY,
    output:
        parquet=layout.SUMMARY["parquet"],
        csv=layout.SUMMARY["csv"],
        html=report(
            layout.SUMMARY["html"],
            caption="../report/summary.rst",
            category="Summary",
            labels={"table": "summary per run", "epoch": FIG_EPOCH},
        ),
        reading=layout.SUMMARY["reading"],
    log:
        f"{LOGS}/write_summary.log",
    benchmark:
        f"{BENCH}/write_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        epoch=FIG_EPOCH,
        models=MODELS,
        optimizers=OPTIMIZERS,
    script:
        "../scripts/write_summary.py"


# Written after every figure and the summary, so it describes the run that made them.
# params: the resolved config (schema defaults applied). The run's core count travels as a
# resource, not a param, so a later call with other --cores does not rewrite provenance alone.
rule write_provenance:
    input:
        figures=FIGURE_TARGETS,
        summary=rules.write_summary.output.parquet,
    output:
        layout.PROVENANCE,
    log:
        f"{LOGS}/write_provenance.log",
    benchmark:
        f"{BENCH}/write_provenance.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
        workflow_cores=lambda wc: workflow.resource_settings.cores or 0,
    params:
        config=config,
    script:
        "../scripts/write_provenance.py"


REPORT_TARGETS = [*rules.write_summary.output, *rules.write_provenance.output]


localrules:
    write_summary,
    write_provenance,
