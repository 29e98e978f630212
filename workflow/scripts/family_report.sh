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
cases_of() { "$py" -c "from kernels import list_cases; print(' '.join(list_cases(smoke=False, family='$1')))"; }
# the dag family's report also shows the dag kernel and the CUDA-graph hybrid side by side (auto runs one of them)
extra() { [ "$1" = dag ] && echo "dag hybrid" || true; }
for fam in seqres dag hybrid; do
  cs=$(cases_of $fam)
  "$py" -m workflow.report --root "$root" --gpu h200 --ncu-gpu h200 --strict --cases $cs --variants auto $(extra $fam) $peers \
    --out-dir "$out/$fam" --title "$fam family: cases $(echo $cs | sed 's/case0*//g; s/ /, /g')"
done
# every case in one report: auto's headline over the whole study
"$py" -m workflow.report --root "$root" --gpu h200 --ncu-gpu h200 --strict --cases $(cases_of seqres) $(cases_of dag) \
  $(cases_of hybrid) --variants auto $peers --out-dir "$out/all" --title "auto over all 14 cases"
