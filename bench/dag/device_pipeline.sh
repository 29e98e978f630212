#!/usr/bin/env bash
# The dag cases through the pipeline on a lent H200 in one call (10 minutes): correctness (gate + SPEC §4 margin) of
# every variant in parallel, then every timing job alone on the GPU and the report, then Nsight Compute of the dag
# kernel while the call's time lasts. Results land in outputs/ as any Snakemake run writes them; $OUT gets a tarball
# of outputs/ and the logs. Carry the wheels (../shared/tools/device-wheels.sh .whl snakemake hydra-core ...).
#   MKH_GIT_COMMIT=<commit> bash bench/dag/device_pipeline.sh
# env: CASES (default [case02,case03,case04,case12]), VARIANTS (default [auto,dag,hybrid]: auto, the dag kernel and
#      the CUDA-graph hybrid side by side), NCU_VARIANTS (default [dag]), NCU_BUDGET (s, default 120; 0 = no ncu),
#      CORRECTNESS_JOBS (correctness jobs at once on the one GPU, default 8: right for the dag cases; cases 8, 13 and
#      14 need tens of GB each — eight of them at once ran case 8 out of memory, which its JSON records as `oom`)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs" outputs
CASES=${CASES:-[case02,case03,case04,case12]}
VARIANTS=${VARIANTS:-[auto,dag,hybrid]}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
# run "$@" for at most $1 s in its own process group, then stop the whole group: a plain `timeout snakemake` only
# signals Snakemake, which then waits for its running jobs (an ncu job ran 6 minutes past its budget that way)
run_for() { local s=$1; shift; setsid "$@" & local pid=$!
  ( sleep "$s"; kill -TERM -- "-$pid" 2>/dev/null; sleep 5; kill -KILL -- "-$pid" 2>/dev/null ) & local w=$!
  wait "$pid"; local rc=$?; kill "$w" 2>/dev/null; return $rc; }
# a lent machine runs one pipeline at a time: a lock left by a stopped run (above) is stale
rm -rf .snakemake/locks
pack() { tar czf "$OUT/results.tgz" outputs 2>/dev/null; cp -rf outputs/logs "$OUT/" 2>/dev/null; true; }
trap pack EXIT
cfg=(matrix=families gpu=h200 "cases=$CASES" "variants=$VARIANTS")
stamp "correctness $CASES x $VARIANTS"
snakemake --cores "${CORRECTNESS_JOBS:-8}" --set-threads correctness=1 --until correctness --keep-going --config "${cfg[@]}" ncu=false \
  > "$OUT/logs/snakemake-correctness.log" 2>&1
stamp "correctness rc=$?"
snakemake --cores all --keep-going --config "${cfg[@]}" ncu=false > "$OUT/logs/snakemake-timing.log" 2>&1
stamp "timing+report rc=$?"
pack
tail -30 outputs/report/h200/report.md
[ "${NCU_BUDGET:-120}" -gt 0 ] && run_for "${NCU_BUDGET:-120}" snakemake --cores all --keep-going --config "${cfg[@]}" \
  "ncu_variants=${NCU_VARIANTS:-[dag]}" > "$OUT/logs/snakemake-ncu.log" 2>&1
stamp "ncu rc=$?"
