#!/usr/bin/env bash
# A matrix on one local GPU with Snakemake, in two passes so a lent box's minutes go far: correctness jobs
# N_PAR at a time (their results do not depend on quiet), then everything else one job at a time (timing
# needs the GPU to itself). Same rules and outputs as any Snakemake run.
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
