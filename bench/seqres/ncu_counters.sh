#!/usr/bin/env bash
# Hardware counters of one seqres launch per case (Nsight Compute, --clock-control none), for docs/seqres.md's
# binding-resource sections. GPU only. Each case runs `profile_one --no-tune` with the given parameters (the
# candidate a pipeline run chose) and Nsight Compute profiles the launch after 3 warm-up calls.
#   usage: bench/seqres/ncu_counters.sh MODE OUT_DIR CASE "PARAMS..." [CASE "PARAMS..." ...]
#     MODE l2:     L2 bytes (read/write/reduction sectors), L2 and DRAM throughput, tensor-pipe activity
#                  -> OUT_DIR/ncu_l2_caseN.csv (the raw page: every collected metric)
#     MODE stalls: warp stall reasons per issued instruction -> OUT_DIR/ncu_stalls_caseN.csv and a sorted
#                  summary in OUT_DIR/ncu_stalls.txt
#     MODE source: sampled warp stalls per SASS instruction (the SourceCounters section) -> OUT_DIR/ncu_source_caseN.csv
#                  (ncu's source page as CSV); `python -m bench.seqres.sass_regions` sums it by instruction class
#   e.g.:  bench/seqres/ncu_counters.sh l2 $OUT 1 "" 7 "gemm_loop=nested block_n=64 block_n_wide=64"
set -uo pipefail
mode=$1; out=$2; shift 2
case "$mode" in
  l2) sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
                --section ComputeWorkloadAnalysis
                --metrics lts__t_bytes.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,dram__bytes_read.sum,dram__bytes_write.sum) ;;
  stalls) sections=(--section WarpStateStats --section SchedulerStats --section LaunchStats) ;;
  source) sections=(--section SourceCounters --section WarpStateStats --import-source no) ;;
  *) echo "ncu_counters.sh: MODE must be l2, stalls or source, got '$mode'" >&2; exit 2 ;;
esac
command -v ncu >/dev/null || { echo "ncu_counters.sh: Nsight Compute (ncu) not on PATH" >&2; exit 2; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
while [ $# -ge 2 ]; do
  c=$1; params=$2; shift 2
  args=(); for kv in $params; do args+=(--param "$kv"); done
  ncu --clock-control none "${sections[@]}" -k _seqres_fwd --launch-skip 3 --launch-count 1 -o "$tmp/c$c" \
      python -m bench.seqres.profile_one "$c" --no-tune "${args[@]}" > "$out/ncu_${mode}_case$c.log" 2>&1
  echo "case $c rc=$?"
  if [ "$mode" = source ]; then
    ncu --import "$tmp/c$c.ncu-rep" --page source --csv --print-source sass > "$tmp/c$c.csv" \
        2>>"$out/ncu_${mode}_case$c.log" && mv "$tmp/c$c.csv" "$out/ncu_${mode}_case$c.csv"
  else
    ncu --import "$tmp/c$c.ncu-rep" --page raw --csv > "$tmp/c$c.csv" 2>>"$out/ncu_${mode}_case$c.log" \
      && mv "$tmp/c$c.csv" "$out/ncu_${mode}_case$c.csv"
  fi
  if [ "$mode" = stalls ] && [ -f "$out/ncu_stalls_case$c.csv" ]; then
    python3 - "$out/ncu_stalls_case$c.csv" "$c" "$params" >> "$out/ncu_stalls.txt" <<'PY'
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
h, u, v = r[0], r[1], r[2]
rows = []
for i, n in enumerate(h):
    if n.startswith("smsp__average_warps_issue_stalled_") and n.endswith("_per_issue_active.ratio"):
        try:
            rows.append((float(v[i]), n))
        except ValueError:
            pass
print(f"case {sys.argv[2]} [{sys.argv[3]}]: stall cycles per issued instruction, by reason")
for val, n in sorted(rows, reverse=True)[:14]:
    print(f"  {val:8.3f}  {n}")
for i, n in enumerate(h):
    if n in ("gpu__time_duration.sum", "smsp__issue_active.avg.pct_of_peak_sustained_active",
             "smsp__warps_active.avg.per_cycle_active", "smsp__warps_eligible.avg.per_cycle_active"):
        print(f"  {n} {v[i]} {u[i]}")
PY
  fi
done
