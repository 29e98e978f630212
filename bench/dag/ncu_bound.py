"""What bounds the dag kernel, from hardware counters (lab; docs/dag.md, "What bounds it"): one `_dag_fwd` (form
tl) or `dag_ws_fwd` (form ws) launch per case under Nsight Compute with the metrics that tell a throughput limit from
a latency chain — the tensor pipe's busy share, L2 and DRAM traffic and their share of peak, the atomics into L2,
issue activity.

    python -m bench.dag.ncu_bound --out $OUT --cases 2 3 4 12 [--param name=value ...]

Runs itself under ``ncu`` (one child per case; ``--child`` is the profiled process: prepare, two warm-up calls,
one call between cudaProfilerStart/Stop), parses ``--csv --page raw`` and writes ``$OUT/ncu_bound.json`` plus a
table. Needs a GPU and ncu (``--clock-control none``, as the pipeline's ncu stage).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

METRICS = {
    "duration_us": "gpu__time_duration.sum",
    "tensor_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "issue_pct": "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_read_sectors": "lts__t_sectors_srcunit_tex_op_read.sum",
    "l2_red_sectors": "lts__t_sectors_srcunit_tex_op_red.sum",
    "l2_atom_sectors": "lts__t_sectors_srcunit_tex_op_atom.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1_to_sm_pct": "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_clock_ghz": "sm__cycles_elapsed.avg.per_second",   # the SMs' clock over the launch (the tensor peak scales)
}


KERNELS = ("_dag_fwd", "dag_ws_fwd")   # the two forms' kernels
CLOCK_TO_GHZ = {"cycle/nsecond": 1.0, "cycle/usecond": 1e-3, "cycle/msecond": 1e-6, "cycle/second": 1e-9,
                "ghz": 1.0, "mhz": 1e-3, "khz": 1e-6, "hz": 1e-9}


def child(case_name: str, params: dict) -> int:
    import torch

    from kernels import load_case, make_input, make_weights
    from kernels.dag import host
    case = load_case(case_name)
    w = make_weights(case, device=torch.device("cuda"))
    p = host.prepare(case, w, **params)
    x = make_input(case, 0.1, 0, device=torch.device("cuda"))
    for _ in range(2):
        host.run(p, x)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    host.run(p, x)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def parse(raw: str) -> list[dict]:
    """The ``_dag_fwd`` / ``dag_ws_fwd`` launches of ``ncu --import R --csv --page raw`` (read by the pipeline's ncu
    stage's ``raw_table``): one dict per launch, ``METRICS``' names, durations in µs, sector counts also as GB
    (``*_gb``)."""
    from workflow.stages.ncu import SIZE_TO_B, TIME_TO_US, number, raw_table
    table, units = raw_table(raw)
    recs = []
    for d in table:
        if not any(k in d.get("Kernel Name", "") for k in KERNELS):
            continue
        rec = {"kernel": d.get("Kernel Name")}
        for k, m in METRICS.items():
            v = number(d.get(m))
            unit = units.get(m, "").strip().lower()
            if v is not None and k == "duration_us":
                v *= TIME_TO_US.get(unit, 1.0)
            if v is not None and k == "sm_clock_ghz":
                v *= CLOCK_TO_GHZ.get(unit, 1.0)
            if v is not None and k.endswith("_bytes"):
                v *= SIZE_TO_B.get(unit, 1)
            rec[k] = v
        for k in [k for k in rec if k.endswith("_sectors")]:  # 32-byte sectors -> GB
            rec[k[:-len("_sectors")] + "_gb"] = None if rec[k] is None else rec[k] * 32 / 1e9
        recs.append(rec)
    return recs


def profile(exe: str, case_name: str, params: list[str], out: Path) -> dict:
    rep = out / f"ncu_bound_{case_name}"
    cmd = [exe, "--clock-control", "none", "--profile-from-start", "off", "--force-overwrite",
           "--metrics", ",".join(METRICS.values()), "--export", str(rep),
           sys.executable, "-m", "bench.dag.ncu_bound", "--child", case_name] + sum((["--param", p] for p in params), [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"case": case_name, "error": (r.stderr or r.stdout)[-2000:]}
    raw = subprocess.run([exe, "--import", str(rep) + ".ncu-rep", "--csv", "--page", "raw"],
                         capture_output=True, text=True).stdout
    recs = parse(raw)
    return {"case": case_name, "launches": len(recs), "kernels": recs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cases", nargs="+", default=["2", "3", "4", "12"])
    ap.add_argument("--param", action="append", default=[])
    ap.add_argument("--child")
    a = ap.parse_args(argv)
    from kernels.dag.host import parse_value
    if a.child:
        return child(a.child, {k: parse_value(v) for k, v in (p.split("=", 1) for p in a.param)})
    from workflow.stages.ncu import find_ncu
    exe = find_ncu("ncu")
    if exe is None:
        raise SystemExit("error: Nsight Compute (ncu) is not on PATH nor in the usual CUDA locations; install it "
                         "(it ships with the CUDA toolkit: <cuda>/bin/ncu) or add it to PATH")
    a.out.mkdir(parents=True, exist_ok=True)
    results = []
    for c in a.cases:
        res = profile(exe, c, a.param, a.out)
        results.append(res)
        print(json.dumps(res), flush=True)
    tmp = a.out / "ncu_bound.json.tmp"
    tmp.write_text(json.dumps({"params": a.param, "results": results}, indent=1))
    os.replace(tmp, a.out / "ncu_bound.json")
    cols = (("duration_us", "us"), ("tensor_pct", "tensor%"), ("sm_pct", "sm%"), ("issue_pct", "issue%"),
            ("l2_pct", "L2%"), ("l2_read_gb", "L2rd GB"), ("l2_red_gb", "red GB"), ("l2_atom_gb", "atom GB"),
            ("l2_hit_pct", "hit%"), ("dram_read_bytes", "DRAM B"), ("dram_pct", "DRAM%"), ("l1_to_sm_pct", "L1%"),
            ("sm_clock_ghz", "GHz"))
    print(f"{'case':6} " + " ".join(f"{h:>8}" for _, h in cols))
    for res in results:
        for k in res.get("kernels", []):
            print(f"{res['case']:6} " + " ".join(f"{'-' if k.get(n) is None else format(k[n], '.3g'):>8}" for n, _ in cols))
        if "error" in res:
            print(f"{res['case']:6} error: {res['error'][-400:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
