# Stage report: the summary table (+ its reading for the report's landing page) and the
# run's provenance. Both are cheap local jobs reading stored artifacts only.


rule write_summary:
    input:
        curve=runs(f"{RUN}/curve.parquet"),
        alpha=FIG_RUNS["alpha"],
        decay=FIG_DECAY,
        H_N="results/stats/H_N.parquet",
        H_N_agg="results/stats/H_N_agg.parquet",
        master="results/stats/master.parquet",
        exponents="results/stats/exponents.parquet",
    output:
        parquet="results/summary.parquet",
        csv="results/summary.csv",
        html=report(
            "results/summary.html",
            caption="../report/summary.rst",
            category="Summary",
            labels={"table": "summary per run", "epoch": FIG_EPOCH},
        ),
        reading="results/reading.rst",
    params:
        epoch=FIG_EPOCH,
        models=MODELS,
        optimizers=OPTIMIZERS,
    log:
        f"{LOGS}/write_summary.log",
    benchmark:
        f"{BENCH}/write_summary.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
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
        "results/provenance.yaml",
    params:
        config=config,
    log:
        f"{LOGS}/write_provenance.log",
    benchmark:
        f"{BENCH}/write_provenance.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
        workflow_cores=lambda wc: workflow.resource_settings.cores or 0,
    script:
        "../scripts/write_provenance.py"


REPORT_TARGETS = [*rules.write_summary.output, *rules.write_provenance.output]


localrules:
    write_summary,
    write_provenance,
