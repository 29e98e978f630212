#!/usr/bin/env bash
# Hardware counters of the GEMM probe's kernels (Nsight Compute, --clock-control none): one launch of each
# selected configuration and of cuBLAS on one case's GEMM, for docs/seqres.md. GPU only.
#   usage: bench/seqres/ncu_gemm_probe.sh OUT_DIR CASE GEMM CONFIG...
#   e.g.:  bench/seqres/ncu_gemm_probe.sh $OUT 1 ffn1 ptr_64x128x32_s3 gl_64x128x32_s4
# -> OUT_DIR/ncu_gemm_probe_caseN_GEMM.csv (one row per kernel launch and metric) and a summary .txt
set -uo pipefail
out=$1; c=$2; g=$3; shift 3
command -v ncu >/dev/null || { echo "ncu_gemm_probe.sh: Nsight Compute (ncu) not on PATH" >&2; exit 2; }
mkdir -p "$out"
m=gpu__time_duration.sum,launch__grid_size,launch__block_size,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,dram__bytes_read.sum
ncu --clock-control none --csv --metrics "$m" -k 'regex:_mm3_ptr|mm3_gluon|nvjet' \
    python -m bench.seqres.gemm_probe "$c" --gemms "$g" --once --configs "$@" \
    > "$out/ncu_gemm_probe_case${c}_$g.csv" 2> "$out/ncu_gemm_probe_case${c}_$g.log"
echo "case $c $g rc=$?"
python3 - "$out/ncu_gemm_probe_case${c}_$g.csv" > "$out/ncu_gemm_probe_case${c}_$g.txt" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]  # the probe's own prints are shorter
h = next(r for r in rows if r[0] == "ID")
rows = rows[rows.index(h):]
i_id, i_name, i_metric, i_unit, i_val = (h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
by = {}
for r in rows[1:]:
    by.setdefault((int(r[i_id]), r[i_name][:60]), {})[r[i_metric]] = f"{r[i_val]} {r[i_unit]}".strip()
for (i, name), ms in sorted(by.items()):
    print(i, name)
    for k, v in sorted(ms.items()):
        print(f"    {k:70s} {v}")
PY
cat "$out/ncu_gemm_probe_case${c}_$g.txt" | head -80
