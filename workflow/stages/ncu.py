"""Nsight Compute stage: one prepared call of the variant, after warm-up, profiled per kernel.

The job entry has composed the config and prepared the variant (so an unsupported case is recorded
before ncu starts). This stage saves the composed config beside the result and runs

    ncu --clock-control none --set <set> --metrics <metrics> --profile-from-start off
        --export <out>.ncu-rep python -m workflow.ncu_target <config.yaml>

where the child prepares the variant, warms it up (compilation, autotuning) and brackets exactly one call
with cudaProfilerStart/Stop (plus an NVTX range ``mkh_profile``), so only that call's kernels are
profiled. Then ``ncu --import <rep> --csv --page raw`` is parsed into a summary per kernel: duration, SM
and DRAM throughput (% of peak), achieved occupancy, registers per thread, shared memory per block.
A missing GPU stops the job (no result file). Missing ncu or an ncu failure (e.g. ERR_NVGPUCTRPERM or
LibraryNotLoaded: no access to the counters) stops it too with a clear error, unless ``ncu.required=false``
(the quick matrix sets it): then the failure is recorded as the result (status "error", the reason
spelled out), so the rest of the run and the report still complete.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .common import log

# summary field -> ncu metrics to read it from (first one present wins)
FIELDS = {
    "duration_us": ("gpu__time_duration.sum",),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_throughput_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory_throughput_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "registers": ("launch__registers_per_thread",),
}
SMEM = ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")
TIME_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
              "second": 1e6, "s": 1e6}
SIZE_TO_B = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "kibyte": 1024, "mibyte": 1024 ** 2, "gbyte": 1e9}


def number(s: str):
    s = (s or "").strip().strip('"')
    if re.fullmatch(r"-?[\d,]+(\.\d+)?([eE][-+]?\d+)?", s):
        s = s.replace(",", "")
    try:
        return float(s)
    except ValueError:
        return None


def raw_table(text: str) -> tuple[list[dict], dict]:
    """``ncu --import R --csv --page raw`` as (one dict per profiled launch: column -> cell, column -> unit)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]  # drop ==PROF== and warning lines
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return [], {}
    header, body = rows[0], rows[1:]
    units = {}
    if body and not (body[0][0].strip().isdigit() if body[0] else False):
        units = dict(zip(header, body[0]))
        body = body[1:]
    return [dict(zip(header, r)) for r in body], units


def parse_raw_csv(text: str) -> list[dict]:
    """One dict per profiled launch from ``ncu --import R --csv --page raw`` (header row, units row, data)."""
    table, units = raw_table(text)
    out = []
    for d in table:
        rec = {"id": int(number(d.get("ID")) or 0), "name": d.get("Kernel Name") or d.get("Function Name", ""),
               "grid": d.get("Grid Size"), "block": d.get("Block Size"), "stream": d.get("Stream")}
        for fld, metrics in FIELDS.items():
            for m in metrics:
                if m in d and number(d[m]) is not None:
                    v = number(d[m])
                    if fld == "duration_us":
                        v *= TIME_TO_US.get(units.get(m, "nsecond").strip().lower(), 1e-3)
                    rec[fld] = v
                    break
            else:
                rec[fld] = None
        smem = [(number(d[m]) or 0.0) * SIZE_TO_B.get(units.get(m, "byte").strip().lower(), 1) for m in SMEM if m in d]
        if "launch__shared_mem_per_block" in d and not smem:
            smem = [number(d["launch__shared_mem_per_block"]) or 0.0]
        rec["shared_mem_bytes"] = sum(smem) if smem else None
        out.append(rec)
    return out


def summarize_kernels(launches: list[dict]) -> list[dict]:
    """Launches grouped by kernel name: launch count, total duration, duration-weighted means."""
    groups: dict[str, list[dict]] = {}
    for r in launches:
        groups.setdefault(r["name"], []).append(r)
    out = []
    for name, rs in groups.items():
        dur = [r.get("duration_us") or 0.0 for r in rs]
        total = sum(dur)

        def wmean(k):
            xs = [(r.get(k), d) for r, d in zip(rs, dur) if r.get(k) is not None]
            if not xs:
                return None
            w = sum(d for _, d in xs)
            return sum(v * d for v, d in xs) / w if w > 0 else sum(v for v, _ in xs) / len(xs)

        out.append({"name": name, "launches": len(rs), "duration_us": total,
                    "sm_throughput_pct": wmean("sm_throughput_pct"),
                    "dram_throughput_pct": wmean("dram_throughput_pct"),
                    "memory_throughput_pct": wmean("memory_throughput_pct"),
                    "achieved_occupancy_pct": wmean("achieved_occupancy_pct"),
                    "registers": max((r["registers"] for r in rs if r.get("registers") is not None), default=None),
                    "shared_mem_bytes": max((r["shared_mem_bytes"] for r in rs
                                             if r.get("shared_mem_bytes") is not None), default=None)})
    return sorted(out, key=lambda k: -k["duration_us"])


def ncu_command(exe: str, ncfg, rep: Path, target_cfg: Path) -> list[str]:
    cmd = [exe, "--clock-control", str(ncfg.clock_control), "--profile-from-start", "off",
           "--target-processes", "all", "--nvtx", "--force-overwrite", "--export", str(rep.with_suffix(""))]
    if ncfg.get("set"):
        cmd += ["--set", str(ncfg.set)]
    if ncfg.get("metrics"):
        cmd += ["--metrics", ",".join(str(m) for m in ncfg.metrics)]
    cmd += [str(a) for a in (ncfg.get("extra_args") or [])]
    return cmd + [sys.executable, "-m", "workflow.ncu_target", str(target_cfg)]


class NcuError(RuntimeError):
    """ncu missing or failing; recorded as the job's result when ncu.required is false."""


def find_ncu(executable: str) -> str | None:
    """``executable`` on PATH (or as a path), else the usual install locations of Nsight Compute."""
    exe = shutil.which(executable)
    if exe or os.sep in executable:
        return exe
    import glob
    for pattern in (os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ncu"),
                    "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/bin/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits and os.access(hits[-1], os.X_OK):
            return hits[-1]
    return None


def _fail(ncfg, msg: str):
    if ncfg.get("required", True):
        raise SystemExit(msg)
    raise NcuError(msg.removeprefix("error: "))


def job(ctx, out_path) -> dict:
    """The ncu job for one case x variant (``ctx``: workflow.run.JobContext); returns the JSON body."""
    from omegaconf import OmegaConf
    ncfg = ctx.cfg.ncu
    if ctx.device.type != "cuda":
        raise SystemExit("error: the ncu stage needs a CUDA GPU (gpu=local|h200|h100_96|...)")
    exe = find_ncu(str(ncfg.executable))
    if exe is None:
        _fail(ncfg, f"error: Nsight Compute ({ncfg.executable!r}) is not on PATH. Install Nsight "
                         "Compute (it ships with the CUDA toolkit: <cuda>/bin/ncu), set ncu.executable=<path>, "
                         "or leave the ncu stage out: snakemake --config ncu=false")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    rep = out_path.with_suffix(".ncu-rep")
    target_cfg = out_path.with_name(f"{out_path.stem}.ncu-config.yaml")
    OmegaConf.save(ctx.cfg, target_cfg, resolve=True)
    cmd = ncu_command(exe, ncfg, rep, target_cfg)
    log("ncu: " + " ".join(cmd))
    t0 = time.time()
    env = dict(os.environ)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    tail = (p.stdout[-3000:] + "\n" + p.stderr[-3000:]).strip()
    sys.stderr.write(tail + "\n")
    if p.returncode != 0 or not rep.exists():
        hint = ""
        if "LibraryNotLoaded" in tail:
            hint = " ncu could not load its profiling library here (seen on gVisor sandboxes: no counters)."
        if "ERR_NVGPUCTRPERM" in tail:
            hint = (" The GPU's performance counters are restricted to admin users (ERR_NVGPUCTRPERM): "
                    "run as root or set NVreg_RestrictProfilingToAdminUsers=0.")
        _fail(ncfg, f"error: ncu failed (exit {p.returncode}) for {ctx.case.name} x {ctx.cfg.variant.name}."
                         f"{hint}\n--- ncu output (tail) ---\n{tail[-2000:]}")
    imp = subprocess.run([exe, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"],
                         capture_output=True, text=True)
    if imp.returncode != 0:
        _fail(ncfg, f"error: ncu --import {rep} failed (exit {imp.returncode}): {imp.stderr[-2000:]}")
    launches = parse_raw_csv(imp.stdout)
    if not launches:
        _fail(ncfg, f"error: ncu profiled no kernels in the marked call ({rep}); "
                         f"output tail:\n{tail[-2000:]}")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    kernels = summarize_kernels(launches)
    return {
        "passed": True,
        "ncu_rep": str(rep),
        "ncu_version": version[-1] if version else None,
        "command": cmd,
        "profile_s": time.time() - t0,
        "n_launches": len(launches),
        "total_duration_us": sum(k["duration_us"] for k in kernels),
        "kernels": kernels,
        "launches": launches,
    }
