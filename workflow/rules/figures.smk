# Stage figures (docs/method.md §9): one local job per entry of the figure table
# (learnwin.infra.figures.FIGURES), PNG + PDF. Every job reads stored Parquet artifacts only and runs
# the shared adapter scripts/plot_figure.py, which calls the entry's function with its inputs (read
# and stacked per artifact) and params. Params come from the figures config section (+ the
# model/optimizer/epoch lists), so a figures-only change re-runs figure jobs and nothing upstream.

FIG_PARAMS = dict(
    models=MODELS,
    optimizers=OPTIMIZERS,
    dpi=config["figures"]["dpi"],
    transport=config["figures"]["transport"],
)

for fig, fig_spec in lwfigures.FIGURES.items():

    rule:
        name:
            f"plot_{fig}"
        input:
            **figure_inputs(fig_spec),
        output:
            png=report(
                layout.figure(fig, "png"),
                caption=f"../report/{fig}.rst",
                category=fig_spec.category,
                labels={"figure": fig_spec.label, "epoch": FIG_EPOCH},
            ),
            pdf=layout.figure(fig, "pdf"),
        log:
            f"{LOGS}/figures/{fig}.log",
        benchmark:
            f"{BENCH}/figures/{fig}.tsv"
        localrule: True
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=1500,
            runtime=10,
        params:
            **FIG_PARAMS,
            **{key: FIG_SETTINGS[key] for key in fig_spec.settings},
        script:
            "../scripts/plot_figure.py"
