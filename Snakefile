# The experiment pipeline (SPEC §1, §6-§8): correctness, timing and Nsight Compute jobs for a matrix of
# case x variant x GPU type composed by Hydra from config/matrix/<name>.yaml, then the gated report.
#
#   snakemake --cores all                                # matrix=auto: full on a GPU machine, smoke on CPU
#   snakemake --profile slurm                            # the full study on a Slurm cluster
#   snakemake --profile slurm case07                     # everything about case 7
#   snakemake outputs/timing/h200/case07/seqres.json     # one result
#   snakemake --config matrix=quick gpu=h200             # the quick matrix, every stage on a local H200
#   snakemake --config overrides='["variant.params.num_warps=4"]' variants='[seqres]'   # -> outputs/tag/...
#
# Helpers and --config keys: workflow/rules/common.smk. How to use and extend it: docs/pipeline.md.

from snakemake.utils import min_version

min_version("9.0")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/tune.smk"
include: "workflow/rules/correctness.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/ncu.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets(),


# Per-case targets: `snakemake case07` builds every result of case 7 in this run's matrix.
for _case in ALL_CASES:

    rule:
        name:
            _case
        input:
            case_targets(_case),
