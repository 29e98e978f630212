#!/usr/bin/env bash
# L2 and tensor-pipe counters of one seqres launch per case (Nsight Compute, hardware counters), for the
# traffic model in docs/seqres.md (python -m kernels.seqres.traffic). GPU only.
#   usage: kernels/seqres/ncu_l2.sh OUT_DIR CASE "PARAMS..." [CASE "PARAMS..." ...]
#   e.g.:  kernels/seqres/ncu_l2.sh $OUT 1 "" 7 "gemm_loop=nested block_n=64 block_n_wide=64"
# writes OUT_DIR/ncu_l2_caseN.csv (the raw page: every collected metric) and OUT_DIR/ncu_l2_caseN.log
set -uo pipefail
out=$1; shift
mkdir -p "$out"
tmp=$(mktemp -d)
while [ $# -ge 2 ]; do
  c=$1; params=$2; shift 2
  args=(); for kv in $params; do args+=(--param "$kv"); done
  ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
      --metrics lts__t_bytes.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      -k _seqres_fwd --launch-skip 3 --launch-count 1 -o "$tmp/c$c" \
      python -m kernels.seqres.profile_one "$c" --no-tune "${args[@]}" > "$out/ncu_l2_case$c.log" 2>&1
  echo "case $c rc=$?"
  ncu --import "$tmp/c$c.ncu-rep" --page raw --csv > "$out/ncu_l2_case$c.csv.tmp" 2>>"$out/ncu_l2_case$c.log" \
    && mv "$out/ncu_l2_case$c.csv.tmp" "$out/ncu_l2_case$c.csv"
done
rm -rf "$tmp"
