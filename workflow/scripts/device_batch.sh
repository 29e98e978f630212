#!/usr/bin/env bash
# Correctness then timing for CASES x VARIANTS on this machine's GPU, without Snakemake or Slurm (for a
# lent GPU box with a time limit). Correctness: one process per case (a Hydra -m sweep over the variants),
# N_PAR cases at a time. Timing: one process per case, strictly one after another (nothing else on the GPU).
# Results land in outputs/ exactly as the Snakemake jobs write them.
#   usage: workflow/scripts/device_batch.sh "case05,case01" "eager,eager_sdpa" h200 [hydra overrides...]
#   env:   N_PAR (default 6), DEADLINE_S (stop starting new processes after this many seconds; default 540),
#          STAGES (default "correctness timing"), PACK (a .tar.gz to refresh with outputs/ after each step),
#          MKH_GIT_COMMIT (the commit to record when the box's copied .git is not the tree's)
set -uo pipefail
cases=$1; variants=$2; gpu=$3; shift 3
N_PAR=${N_PAR:-6}; DEADLINE_S=${DEADLINE_S:-540}; STAGES=${STAGES:-correctness timing}
start=$(date +%s)
left() { echo $(( DEADLINE_S - ($(date +%s) - start) )); }
pack() { [ -n "${PACK:-}" ] && tar czf "$PACK.tmp" outputs 2>/dev/null && mv "$PACK.tmp" "$PACK"; true; }
mkdir -p outputs/logs
IFS=, read -ra CASES <<< "$cases"
if [[ " $STAGES " == *" correctness "* ]]; then
  printf '%s\n' "${CASES[@]}" | xargs -P "$N_PAR" -I{} bash -c '
    [ $(( '"$DEADLINE_S"' - ($(date +%s) - '"$start"') )) -gt 30 ] || { echo "skip correctness {}: deadline"; exit 0; }
    python -m workflow.run -m stage=correctness case={} variant='"$variants"' gpu='"$gpu"' "$@" \
      > outputs/logs/correctness-{}.log 2>&1; echo "correctness {}: rc=$? [$(( $(date +%s) - '"$start"' ))s]"' _ "$@"
  pack
fi
if [[ " $STAGES " == *" timing "* ]]; then
  for c in "${CASES[@]}"; do
    [ "$(left)" -gt 30 ] || { echo "skip timing $c: deadline"; continue; }
    python -m workflow.run -m stage=timing case="$c" variant="$variants" gpu="$gpu" "$@" \
      > "outputs/logs/timing-$c.log" 2>&1
    echo "timing $c: rc=$? [$(( $(date +%s) - start ))s]"
    pack
  done
fi
