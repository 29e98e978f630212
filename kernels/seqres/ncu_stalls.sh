#!/usr/bin/env bash
# Warp stall reasons of one seqres launch per case (Nsight Compute WarpStateStats + SchedulerStats, hardware
# counters): where the warps wait, kernel-wide. GPU only.
#   usage: kernels/seqres/ncu_stalls.sh OUT_DIR CASE "PARAMS..." [CASE "PARAMS..." ...]
# writes OUT_DIR/ncu_stalls_caseN.csv (raw page) and a sorted summary OUT_DIR/ncu_stalls.txt
set -uo pipefail
out=$1; shift
mkdir -p "$out"
tmp=$(mktemp -d)
while [ $# -ge 2 ]; do
  c=$1; params=$2; shift 2
  args=(); for kv in $params; do args+=(--param "$kv"); done
  ncu --clock-control none --section WarpStateStats --section SchedulerStats --section LaunchStats \
      -k _seqres_fwd --launch-skip 3 --launch-count 1 -o "$tmp/c$c" \
      python -m kernels.seqres.profile_one "$c" --no-tune "${args[@]}" > "$tmp/c$c.log" 2>&1
  echo "case $c rc=$?"
  ncu --import "$tmp/c$c.ncu-rep" --page raw --csv > "$out/ncu_stalls_case$c.csv" 2>>"$tmp/c$c.log"
  python3 - "$out/ncu_stalls_case$c.csv" "$c" "$params" >> "$out/ncu_stalls.txt" <<'PY'
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
h, u, v = r[0], r[1], r[2]
rows = []
for i, n in enumerate(h):
    if n.startswith("smsp__average_warp_latency_issue_stalled_") or n.startswith("smsp__average_warps_issue_stalled_"):
        if n.endswith("_per_issue_active.ratio"):
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
done
rm -rf "$tmp"
