#!/usr/bin/env bash
# The pipeline on a lent H200 within one call's time (10 minutes), resumable: correctness (gate + SPEC §4 margin) of
# every case x variant, several jobs at once on the one GPU, then every timing job alone on the GPU and the report,
# then Nsight Compute while the budget lasts. Each stage is stopped when the budget runs out; call the script again
# (same outputs/: the machine still warm — a lent machine goes back after 30 s idle, so call again at once — or
# outputs/ carried back with CARRIED=1) and it goes on where it stopped — Snakemake skips
# the finished jobs and a stopped correctness job resumes its margin inputs (docs/pipeline.md, "The margin check").
# A call made at once can still find a fresh machine (at 0be4fd3 the second call did and ran the correctness stage
# again): unpacking each call's results.tgz here and carrying outputs/ with CARRIED=1 loses nothing then.
# Results land in outputs/ as any Snakemake run writes them; $OUT gets a tarball of outputs/ and the logs (publish it
# from the sending side: python -m workflow.publish results.tgz, docs/pipeline.md "Provenance"). Carry the
# wheels (../shared/tools/device-wheels.sh .whl snakemake hydra-core ...).
#   MKH_GIT_COMMIT=<commit> bash bench/device_pipeline.sh
# <commit>: the full hash of the tree sent, taken on the sending side (`git rev-parse HEAD` there). On a lent machine
# the copy's own git metadata is the checkout's base, not the tree sent: `$(git rev-parse HEAD)` run there names the
# wrong commit (it did once, at 410a1d6's run).
# env: CASES (default [case02,case03,case04,case12]; `all` = the 14 cases), VARIANTS (default [auto,dag,hybrid]:
#      auto, the dag kernel and the CUDA-graph hybrid side by side), NCU_VARIANTS (default [dag]), NCU_BUDGET (s,
#      default 120; 0 = no ncu), CORRECTNESS_JOBS (correctness jobs at once on the one GPU, default 8: right for the
#      dag cases; cases 8, 13 and 14 need tens of GB each — eight at once ran case 8 out of memory — so use 4 with
#      them), BUDGET (s for the whole call, default 560), CARRIED (1: outputs/ was carried back from an earlier call of
#      this run, see below), TUNE (committed (default) | search: the tune stage searches each case x variant on the
#      GPU first, one job at a time, and every later job of the case reads what it chose: outputs/tuned/; copy those
#      over config/tuned/h200/ to commit them; minutes per case: use VARIANTS=[auto])
set -uo pipefail
t0=$(date +%s); deadline=$(( t0 + ${BUDGET:-560} ))
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs" outputs
CASES=${CASES:-[case02,case03,case04,case12]}
[ "$CASES" = all ] && CASES="[$(python3 -c "from kernels import list_cases; print(','.join(list_cases(smoke=False)))")]"
VARIANTS=${VARIANTS:-[auto,dag,hybrid]}
# outputs/ carried back from an earlier call lands with fresh mtimes, the tuned files among them, and Snakemake then
# re-runs every finished job whose tuned input looks newer than its result ("Updated input files": eight finished
# correctness jobs re-ran that way at d05fcbe). CARRIED=1 touches the carried files in the DAG's order — tuned first,
# then the results and the hidden progress files — so finished jobs stay finished. Only for outputs/ of this same run.
if [ "${CARRIED:-0}" = 1 ]; then
  find outputs/tuned -type f -exec touch {} + 2>/dev/null; sleep 1
  find outputs/correctness outputs/timing outputs/ncu -type f -exec touch {} + 2>/dev/null
fi
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $(( deadline - $(date +%s) )); }
spent() { [ "$(left)" -gt 5 ] || echo " (BUDGET spent: call again, with the same outputs/, to go on)"; }
# run "$@" for at most $1 s in its own process group, then stop the whole group: a plain `timeout snakemake` only
# signals Snakemake, which then waits for its running jobs (an ncu job ran 6 minutes past its budget that way)
run_for() { local s=$1; shift; [ "$s" -gt 5 ] || { stamp "no time left for: $*"; return 124; }
  setsid "$@" & local pid=$!
  ( sleep "$s"; kill -TERM -- "-$pid" 2>/dev/null; sleep 5; kill -KILL -- "-$pid" 2>/dev/null ) & local w=$!
  wait "$pid"; local rc=$?; kill "$w" 2>/dev/null; return $rc; }
# a lent machine runs one pipeline at a time: a lock left by a stopped run is stale
unlock() { rm -rf .snakemake/locks; }
pack() { tar czf "$OUT/results.tgz" outputs 2>/dev/null; cp -rf outputs/logs "$OUT/" 2>/dev/null; true; }
trap pack EXIT
cfg=(matrix=families gpu=h200 "cases=$CASES" "variants=$VARIANTS" "tune=${TUNE:-committed}")
# the longest correctness jobs first (case 14's margin alone takes ~15 minutes; started last, it would hold up
# every timing job for a further call)
first=()
for c in case14 case13 case08; do
  case "$CASES" in *"$c"*) for v in $(echo "$VARIANTS" | tr -d '[]' | tr ',' ' '); do
    first+=("outputs/correctness/h200/$c/$v.json"); done;; esac
done
stamp "correctness $CASES x $VARIANTS (budget $(left)s)${first:+; first: ${first[*]}}"
unlock; run_for "$(left)" snakemake --cores "${CORRECTNESS_JOBS:-8}" --set-threads correctness=1 --until correctness \
  ${first:+--prioritize "${first[@]}"} --keep-going --config "${cfg[@]}" ncu=false \
  >> "$OUT/logs/snakemake-correctness.log" 2>&1
rc=$?; stamp "correctness rc=$rc$(spent)"
# a job that ran out of GPU memory beside the others wrote an `oom` result (case 9 beside cases 8, 13 and 14 at
# 6a01225, four at once): those run again, one at a time; an `oom` then is the job's own
oom=$(python3 -c "import glob, json
fs = sorted(glob.glob('outputs/correctness/h200/*/*.json'))
print(' '.join(f for f in fs if json.load(open(f)).get('status') == 'oom'))")
if [ -n "$oom" ]; then
  stamp "out of GPU memory beside other jobs, again alone: $oom"; rm -f $oom
  unlock; run_for "$(left)" snakemake --cores 1 --set-threads correctness=1 --until correctness --keep-going \
    --config "${cfg[@]}" ncu=false >> "$OUT/logs/snakemake-correctness.log" 2>&1
  rc=$?; stamp "correctness (alone) rc=$rc$(spent)"
fi
unlock; run_for "$(left)" snakemake --cores all --keep-going --config "${cfg[@]}" ncu=false \
  >> "$OUT/logs/snakemake-timing.log" 2>&1
rc=$?; stamp "timing+report rc=$rc$(spent)"
pack
[ $rc = 0 ] && tail -30 outputs/report/h200/report.md
nb=$(( $(left) < ${NCU_BUDGET:-120} ? $(left) : ${NCU_BUDGET:-120} ))
if [ "${NCU_BUDGET:-120}" -gt 0 ]; then
  unlock; run_for "$nb" snakemake --cores all --keep-going --config "${cfg[@]}" "ncu_variants=${NCU_VARIANTS:-[dag]}" \
    >> "$OUT/logs/snakemake-ncu.log" 2>&1
  rc=$?; stamp "ncu rc=$rc$(spent)"
fi
