#!/usr/bin/env bash
# The families run on a lent H200 (one GPU, 10 minutes a call), in two calls on the same warm box:
#   bash bench/device_families.sh tune     seqres re-choice (search over SEARCH_SPACE for SEARCH_CASES, written to
#                                          config/tuned/h200/), then correctness of every case but 14, in parallel
#   bash bench/device_families.sh timing   case 14's correctness (margin inputs reduced: its chunked reference takes
#                                          ~1 s an input), then every timing job alone on the GPU, then the report
# Results land in outputs/ as any Snakemake run writes them; $OUT gets a tarball of outputs/ + config/tuned/ and logs.
# env: MKH_GIT_COMMIT (the commit run), SEARCH_CASES (default "01 05 07 09 11"), SEARCH_SPACE (default seqres-winners),
#      CASES (the matrix's cases; default all), CASE14_MARGIN (default "32 8": inputs, inputs per other weight seed)
set -uo pipefail
phase=${1:?tune|timing}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs" outputs
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$OUT/results.tgz" outputs config/tuned 2>/dev/null; cp -f outputs/logs -r "$OUT/" 2>/dev/null; true; }
trap pack EXIT
all14="[case01,case02,case03,case04,case05,case06,case07,case08,case09,case10,case11,case12,case13,case14]"
CASES=${CASES:-$all14}
if [ "$phase" = tune ]; then
  space=${SEARCH_SPACE:-seqres-winners}
  sc=${SEARCH_CASES:-"01 05 07 09 11"}
  stamp "precompile $sc ($space)"
  python -m bench.seqres.precompile $(for c in $sc; do echo $((10#$c)); done) --space "$space" > "$OUT/logs/precompile.log" 2>&1
  stamp "precompile rc=$?"
  for c in $sc; do
    python -m workflow.run stage=tune case=case$c variant=auto gpu=h200 variant.params.tune=search \
      variant.params.search_space="$space" out=config/tuned/h200/case$c.yaml > "$OUT/logs/tune-case$c.log" 2>&1
    stamp "tune case$c rc=$? $(grep -o 'chose .*' "$OUT/logs/tune-case$c.log" | tail -1)"
  done
  cases_c=$(echo "$CASES" | sed 's/,case14//; s/case14,//')
  stamp "correctness $cases_c"
  snakemake --cores 6 --set-threads correctness=1 --until correctness --config matrix=families gpu=h200 ncu=false \
    cases="$cases_c" > "$OUT/logs/snakemake-correctness.log" 2>&1
  stamp "correctness rc=$?"
elif [ "$phase" = rest ]; then
  # correctness of what is missing (carried outputs/ hold the rest), case 14 by hand; the committed choices of
  # the timing-only cases compiled meanwhile; then every timing job alone
  read -r m_in m_w <<< "${CASE14_MARGIN:-32 8}"
  ( python -m workflow.run stage=tune case=case14 variant=auto gpu=h200 out=outputs/tuned/h200/case14/auto.yaml \
      > "$OUT/logs/tune-case14.log" 2>&1
    python -m workflow.run stage=correctness case=case14 variant=auto gpu=h200 gate.margin.inputs=$m_in \
      gate.margin.inputs_per_weight_seed=$m_w variant.params.tuned_file=outputs/tuned/h200/case14/auto.yaml \
      out=outputs/correctness/h200/case14/auto.json > "$OUT/logs/correctness-case14.log" 2>&1
    stamp "correctness case14 rc=$?" ) &
  python -m bench.seqres.precompile ${WARM:-1 5 10} --space committed > "$OUT/logs/warm.log" 2>&1 &
  cases_c=$(echo "$CASES" | sed 's/,case14//; s/case14,//')
  snakemake --cores 12 --set-threads correctness=1 --until correctness --config matrix=families gpu=h200 ncu=false \
    cases="$cases_c" > "$OUT/logs/snakemake-correctness2.log" 2>&1
  stamp "correctness rc=$?"
  wait
  pack
  snakemake --cores all --config matrix=families gpu=h200 ncu=false cases="$CASES" --keep-going \
    > "$OUT/logs/snakemake-timing.log" 2>&1
  stamp "timing+report rc=$?"
  tail -40 outputs/report/h200/report.md
else
  read -r m_in m_w <<< "${CASE14_MARGIN:-32 8}"
  if [[ "$CASES" == *case14* ]] && [ ! -f outputs/correctness/h200/case14/auto.json ]; then
    python -m workflow.run stage=tune case=case14 variant=auto gpu=h200 out=outputs/tuned/h200/case14/auto.yaml \
      > "$OUT/logs/tune-case14.log" 2>&1
    python -m workflow.run stage=correctness case=case14 variant=auto gpu=h200 gate.margin.inputs=$m_in \
      gate.margin.inputs_per_weight_seed=$m_w variant.params.tuned_file=outputs/tuned/h200/case14/auto.yaml \
      out=outputs/correctness/h200/case14/auto.json > "$OUT/logs/correctness-case14.log" 2>&1
    stamp "correctness case14 rc=$?"
  fi
  snakemake --cores all --config matrix=families gpu=h200 ncu=false cases="$CASES" --keep-going \
    > "$OUT/logs/snakemake-timing.log" 2>&1
  stamp "timing+report rc=$?"
  tail -40 outputs/report/h200/report.md
fi
