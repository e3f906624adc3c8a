# Stage figures (docs/method.md §9): one local job per row of the FIGURES table (common.smk),
# PNG + PDF. Every job reads stored Parquet artifacts only and runs the shared adapter
# scripts/plot_figure.py, which calls learnwin.plots.FIGURES[<name>] with the row's inputs (read
# and stacked per artifact) and params. Params come from the figures config section (+ the
# model/optimizer/epoch lists), so a figures-only change re-runs figure jobs and nothing upstream.

FIG_PARAMS = dict(
    models=MODELS,
    optimizers=OPTIMIZERS,
    dpi=config["figures"]["dpi"],
    transport=config["figures"]["transport"],
)

for fig, (fig_inputs, fig_params, fig_category, fig_label) in FIGURES.items():

    rule:
        name:
            f"plot_{fig}"
        input:
            **fig_inputs,
        output:
            png=report(
                layout.figure(fig, "png"),
                caption=f"../report/{fig}.rst",
                category=fig_category,
                labels={"figure": fig_label, "epoch": FIG_EPOCH},
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
            **fig_params,
        script:
            "../scripts/plot_figure.py"
