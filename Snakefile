# learnwin: the learnability window of gated RNNs (Livi, arXiv:2512.05790).
# Thin entry point: config, validation, stage rules, targets. All logic lives in learnwin/.
import sys

from snakemake.utils import min_version, validate

import learnwin.infra.config as lwconfig

min_version("9.19")


configfile: "config/config.yaml"


for message in lwconfig.rename_deprecated(
    config, workflow.config_settings.overwrite_config
):
    print(f"Warning: {message}", file=sys.stderr)
lwconfig.coerce_strings(
    config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml"
)


validate(config, "workflow/schemas/config.schema.yaml", set_default=True)


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/snapshot.smk"
include: "workflow/rules/stats.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/recovery.smk"
include: "workflow/rules/budget.smk"


report: "workflow/report/workflow.rst"


# ---- targets: `snakemake <stage> --cores N` runs everything up to that stage ----
rule all:
    default_target: True
    input:
        TRAIN_TARGETS,
        SNAPSHOT_TARGETS,
        FIGURE_TARGETS,
        REPORT_TARGETS,
        CLAIMS_TARGETS,


rule data:
    input:
        DATA_TARGETS,


rule train:
    input:
        TRAIN_TARGETS,


rule snapshot:
    input:
        SNAPSHOT_TARGETS,


rule alpha:
    input:
        ALPHA_TARGETS,


rule decay:
    input:
        DECAY_TARGETS,


rule window:
    input:
        WINDOW_TARGETS,


rule figures:
    input:
        FIGURE_TARGETS,


rule summary:
    input:
        REPORT_TARGETS,


# direct measurement of the window (beyond the paper); not part of `all`. recovery.protocol picks
# the dataset protocol (docs/method.md §10) or the budget protocol (§10b, exploration seeds)
rule recovery:
    input:
        PROTOCOL_TARGETS[REC["protocol"]],


# the budget protocol on the confirmatory seeds recovery.confirm_seeds (docs/method.md §10b)
rule recovery_confirm:
    input:
        BUDGET_TARGETS["confirm"],


localrules:
    all,
    data,
    train,
    snapshot,
    alpha,
    decay,
    window,
    figures,
    summary,
    recovery,
    recovery_confirm,
