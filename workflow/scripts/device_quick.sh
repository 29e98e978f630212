#!/usr/bin/env bash
# A matrix on one local GPU with Snakemake, so a lent box's minutes go far: correctness jobs run N_PAR at a
# time (`--set-threads correctness=1`; their results do not depend on quiet) while every timing and ncu job
# claims all cores (rules/common.smk job_threads), so it runs alone on the GPU. Snakemake 9 keeps sibling
# rules under `--until`, so the first pass may already run the whole matrix; the second pass then finds
# nothing to do. The correctness rule's priority makes the ready correctness jobs start first, so they fill
# the compile cache that the lone timing and ncu jobs reuse (without it one run took 9 min instead of 4.5).
# Same rules and outputs as any Snakemake run.
#   usage: workflow/scripts/device_quick.sh [gpu type, default h200] [extra snakemake args...]
#   env:   MATRIX (default quick; e.g. families), CASES (e.g. '[case08,case13]': replaces the matrix's cases),
#          N_PAR (default 6), MKH_GIT_COMMIT (the commit to record when the box's .git is not the tree's)
set -uo pipefail
gpu=${1:-h200}; shift || true
N_PAR=${N_PAR:-6}
cfg=(matrix="${MATRIX:-quick}" gpu="$gpu")
[ -n "${CASES:-}" ] && cfg+=(cases="$CASES")
# --config last: it takes every word after it
snakemake --cores "$N_PAR" --set-threads correctness=1 --until correctness "$@" --config "${cfg[@]}"
snakemake --cores all "$@" --config "${cfg[@]}"
