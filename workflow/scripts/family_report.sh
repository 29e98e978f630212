#!/usr/bin/env bash
# The family reports (issues 5 and 6): `auto` on the cases each kernel family owns, next to every peer,
# from the published H200 result tree. Peers come from the peer study (`python -m workflow.peers_table`),
# `auto` from the families matrix (config/matrix/families.yaml); each JSON names its commit, and the
# report lists them. Reads JSONs only, runs no kernel.
#   usage: workflow/scripts/family_report.sh [results root, default docs/results/h200/raw] [out parent, default docs/results/h200]
set -euo pipefail
root=${1:-docs/results/h200/raw}; out=${2:-docs/results/h200}
py=${PYTHON:-python}
peers="eager eager_sdpa nn compile_default_fp32 compile_reduce-overhead_fp32 compile_default_tf32 compile_reduce-overhead_tf32"
"$py" -m workflow.report --root "$root" --gpu h200 --ncu-gpu h200 --strict \
  --cases case01 case05 case06 case07 case09 case10 case11 --variants auto $peers \
  --out-dir "$out/seqres" --title "seqres family: cases 1, 5, 6, 7, 9, 10, 11"
"$py" -m workflow.report --root "$root" --gpu h200 --ncu-gpu h200 --strict \
  --cases case08 case13 case14 --variants auto $peers \
  --out-dir "$out/hybrid" --title "hybrid family: cases 8, 13, 14"
