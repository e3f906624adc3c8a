# Stage figures (docs/method.md §9): one local job per figure, PNG + PDF under results/figures/.
# Every rule reads stored Parquet artifacts only and runs the shared adapter
# scripts/plot_figure.py, which calls learnwin.plots.FIGURES[<name>]. Params come from the
# figures config section (+ the model/optimizer/epoch lists), so a figures-only change
# re-runs figure jobs and nothing upstream.

FIG_EPOCH = str(config["figures"]["epoch"])
FIG_DECAY = expand(
    "results/decay/{optimizer}/{model}/epoch{epoch}.parquet",
    optimizer=OPTIMIZERS,
    model=MODELS,
    epoch=FIG_EPOCH,
)
FIG_RUNS = {
    name: runs(f"{SNAP}/{name}.parquet", epoch=FIG_EPOCH)
    for name in ("envelope", "units", "alpha", "window", "memory")
}
FIG_PARAMS = dict(models=MODELS, optimizers=OPTIMIZERS, dpi=config["figures"]["dpi"])


rule plot_H_N:
    input:
        H_N_agg="results/stats/H_N_agg.parquet",
    output:
        png=report(
            "results/figures/H_N.png",
            caption="../report/H_N.rst",
            category="Learnability window",
            labels={"figure": "1 · H_N vs N", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/H_N.pdf",
    params:
        **FIG_PARAMS,
        epoch=FIG_EPOCH,
    log:
        f"{LOGS}/figures/H_N.log",
    benchmark:
        f"{BENCH}/figures/H_N.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_envelope:
    input:
        envelope=FIG_RUNS["envelope"],
        decay=FIG_DECAY,
    output:
        png=report(
            "results/figures/envelope.png",
            caption="../report/envelope.rst",
            category="Envelope",
            labels={"figure": "2 · envelope f(l)", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/envelope.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/envelope.log",
    benchmark:
        f"{BENCH}/figures/envelope.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_envelope_decomposition:
    input:
        envelope=FIG_RUNS["envelope"],
    output:
        png=report(
            "results/figures/envelope_decomposition.png",
            caption="../report/envelope_decomposition.rst",
            category="Envelope",
            labels={"figure": "3 · f vs f_gates", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/envelope_decomposition.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/envelope_decomposition.log",
    benchmark:
        f"{BENCH}/figures/envelope_decomposition.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_tau_spectra:
    input:
        units=FIG_RUNS["units"],
    output:
        png=report(
            "results/figures/tau_spectra.png",
            caption="../report/tau_spectra.rst",
            category="Envelope",
            labels={"figure": "4 · tau_q spectra", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/tau_spectra.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/tau_spectra.log",
    benchmark:
        f"{BENCH}/figures/tau_spectra.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_N_hat_vs_f:
    input:
        window=FIG_RUNS["window"],
        master="results/stats/master.parquet",
    output:
        png=report(
            "results/figures/N_hat_vs_f.png",
            caption="../report/N_hat_vs_f.rst",
            category="Learnability window",
            labels={"figure": "5 · log N_hat vs -log f", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/N_hat_vs_f.pdf",
    params:
        **FIG_PARAMS,
        epoch=FIG_EPOCH,
    log:
        f"{LOGS}/figures/N_hat_vs_f.log",
    benchmark:
        f"{BENCH}/figures/N_hat_vs_f.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_alpha:
    input:
        alpha=FIG_RUNS["alpha"],
    output:
        png=report(
            "results/figures/alpha.png",
            caption="../report/alpha.rst",
            category="Tail index",
            labels={"figure": "6 · tail index alpha", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/alpha.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/alpha.log",
    benchmark:
        f"{BENCH}/figures/alpha.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_eps_th:
    input:
        window=FIG_RUNS["window"],
    output:
        png=report(
            "results/figures/eps_th.png",
            caption="../report/eps_th.rst",
            category="Learnability window",
            labels={"figure": "7 · f and eps_th", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/eps_th.pdf",
    params:
        **FIG_PARAMS,
        budgets=config["figures"]["budgets"],
    log:
        f"{LOGS}/figures/eps_th.log",
    benchmark:
        f"{BENCH}/figures/eps_th.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_learning_curves:
    input:
        curve=runs(f"{RUN}/curve.parquet"),
    output:
        png=report(
            "results/figures/learning_curves.png",
            caption="../report/learning_curves.rst",
            category="Data & training",
            labels={"figure": "8 · learning curves", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/learning_curves.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/learning_curves.log",
    benchmark:
        f"{BENCH}/figures/learning_curves.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_master_law:
    input:
        window=FIG_RUNS["window"],
        master="results/stats/master.parquet",
    output:
        png=report(
            "results/figures/master_law.png",
            caption="../report/master_law.rst",
            category="Learnability window",
            labels={"figure": "9 · master law", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/master_law.pdf",
    params:
        **FIG_PARAMS,
        epoch=FIG_EPOCH,
    log:
        f"{LOGS}/figures/master_law.log",
    benchmark:
        f"{BENCH}/figures/master_law.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_optimizers:
    input:
        envelope=FIG_RUNS["envelope"],
        units=FIG_RUNS["units"],
    output:
        png=report(
            "results/figures/optimizers.png",
            caption="../report/optimizers.rst",
            category="Optimizers",
            labels={"figure": "10 · optimizer comparison", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/optimizers.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/optimizers.log",
    benchmark:
        f"{BENCH}/figures/optimizers.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_decay_table:
    input:
        decay=FIG_DECAY,
    output:
        png=report(
            "results/figures/decay_table.png",
            caption="../report/decay_table.rst",
            category="Envelope",
            labels={"figure": "11 · decay-class table", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/decay_table.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/decay_table.log",
    benchmark:
        f"{BENCH}/figures/decay_table.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_epochs:
    input:
        envelope=snapshots("envelope.parquet"),
        alpha=snapshots("alpha.parquet"),
    output:
        png=report(
            "results/figures/epochs.png",
            caption="../report/epochs.rst",
            category="Envelope",
            labels={"figure": "12 · envelope and tails over training", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/epochs.pdf",
    params:
        **FIG_PARAMS,
        epochs=SNAPSHOT_EPOCHS,
    log:
        f"{LOGS}/figures/epochs.log",
    benchmark:
        f"{BENCH}/figures/epochs.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_exponents:
    input:
        exponents="results/stats/exponents.parquet",
    output:
        png=report(
            "results/figures/exponents.png",
            caption="../report/exponents.rst",
            category="Learnability window",
            labels={"figure": "13 · exponents a and b", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/exponents.pdf",
    params:
        **FIG_PARAMS,
        epoch=FIG_EPOCH,
    log:
        f"{LOGS}/figures/exponents.log",
    benchmark:
        f"{BENCH}/figures/exponents.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


rule plot_memory:
    input:
        envelope=FIG_RUNS["envelope"],
        memory=FIG_RUNS["memory"],
    output:
        png=report(
            "results/figures/memory.png",
            caption="../report/memory.rst",
            category="Envelope",
            labels={"figure": "14 · envelopes vs memory curve", "epoch": FIG_EPOCH},
        ),
        pdf="results/figures/memory.pdf",
    params:
        **FIG_PARAMS,
    log:
        f"{LOGS}/figures/memory.log",
    benchmark:
        f"{BENCH}/figures/memory.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        runtime=10,
    script:
        "../scripts/plot_figure.py"


FIGURE_NAMES = [
    "H_N",
    "envelope",
    "envelope_decomposition",
    "tau_spectra",
    "N_hat_vs_f",
    "alpha",
    "eps_th",
    "learning_curves",
    "master_law",
    "optimizers",
    "decay_table",
    "epochs",
    "exponents",
    "memory",
]
FIGURE_TARGETS = expand("results/figures/{name}.{ext}", name=FIGURE_NAMES, ext=["png", "pdf"])


localrules:
    plot_H_N,
    plot_envelope,
    plot_envelope_decomposition,
    plot_tau_spectra,
    plot_N_hat_vs_f,
    plot_alpha,
    plot_eps_th,
    plot_learning_curves,
    plot_master_law,
    plot_optimizers,
    plot_decay_table,
    plot_epochs,
    plot_exponents,
    plot_memory,
