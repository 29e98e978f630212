#!/usr/bin/env bash
# The quick matrix on one local GPU with Snakemake, in two passes so a lent box's minutes go far:
# correctness jobs N_PAR at a time (their results do not depend on quiet), then everything else one job at
# a time (timing needs the GPU to itself), then the report. Same rules and outputs as any Snakemake run.
#   usage: workflow/scripts/device_quick.sh [gpu type, default h200] [extra snakemake args...]
set -uo pipefail
gpu=${1:-h200}; shift || true
N_PAR=${N_PAR:-6}
snakemake --cores "$N_PAR" --set-threads correctness=1 --config matrix=quick gpu="$gpu" --until correctness "$@"
snakemake --cores all --config matrix=quick gpu="$gpu" "$@"
