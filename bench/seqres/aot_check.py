"""Compile the seqres kernel for sm_90 on a machine without a GPU (no launch): catches compile errors and
reports registers / spills / shared memory before spending device time.

    python -m bench.seqres.aot_check 1 5 6 7 9 10 11 [--param block_m=128 ...]
"""
from __future__ import annotations

import argparse
import re
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from bench.common.sm90_report import serialization_notes
from kernels.cases import load_case
from kernels.seqres.megakernel import _seqres_fwd



def compile_case(case, params: dict, arch: int = 90):
    """Compile for ``arch`` with the constexprs prepare() would pick (device-independent parts)."""
    import torch  # noqa: F401
    from kernels.seqres.host import DEFAULTS, prepare_meta
    # the R a GPU run starts from: ctas_per_sm programs per SM (prepare then checks the compiled occupancy)
    cps = max(1, int(params.get("ctas_per_sm", DEFAULTS["ctas_per_sm"])))
    meta, launch, _ = prepare_meta(case, n_sm=132, n_slots=132 * cps, **params)
    sig = {}
    names = list(_seqres_fwd.arg_names)
    for n in names:
        if n in meta:
            sig[n] = "constexpr"
        elif meta["PRESPLIT"] == 1 and ((n == "w2_ptr" and meta["FFN2_SCHEME"] == "f16_w1")
                                        or (n == "w1_ptr" and meta["FFN1_SCHEME"] == "f16_w1")):
            sig[n] = "*fp16"
        elif n in ("wqkv_ptr", "wo_ptr", "w1_ptr", "w2_ptr") and meta["PRESPLIT"] == 1:
            sig[n] = "*bf16"
        elif n in ("xhi_ptr", "xlo_ptr", "fhi_ptr", "flo_ptr") and meta["PRESPLIT"] == 1:
            sig[n] = "*bf16"
        elif n in ("flags_ptr", "cnt_ptr", "err_ptr"):
            sig[n] = "*i32"
        elif n in ("epoch", "cepoch", "spin_limit"):
            sig[n] = "i32"
        elif n == "qk_scale":
            sig[n] = "fp32"
        else:
            sig[n] = "*fp32"
    # pointers 16-byte aligned, as Triton specializes torch tensors at a real launch (without it the
    # TTGIR would under-vectorize and, e.g., not pipeline bf16 loads)
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n].startswith("*")}
    src = ASTSource(_seqres_fwd, sig, constexprs={(names.index(k),): v for k, v in meta.items()}, attrs=attrs)
    t = time.time()
    from kernels.seqres.host import compile_context
    with compile_context(meta):
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                           options=dict(launch))
    return k, time.time() - t, meta


def ptxas_info(ptx: str, arch: int) -> str:
    """``ptxas -v`` output (stdout + stderr) for the kernel's PTX (``bench.common.sm90_report.ptxas_verbose``)."""
    from bench.common.sm90_report import ptxas_verbose
    return ptxas_verbose(ptx, arch)


def ptxas_usage(txt: str) -> tuple[int, int]:
    """(registers per thread, spill store bytes) from ``ptxas -v`` output (``ptxas_info``)."""
    regs = re.search(r"Used (\d+) registers", txt)
    spill = re.search(r"(\d+) bytes spill stores", txt)
    return (int(regs.group(1)) if regs else -1, int(spill.group(1)) if spill else -1)


def wgmma_serialized(ptxas_text: str) -> bool:
    """ptxas serialized every wgmma of the kernel (each instruction waits for the previous one): its C7514 note when
    something reads a wgmma accumulator before the wait for it (docs/seqres.md), or another of its serialization notes
    (``sm90_report.serialization_notes``)."""
    return bool(serialization_notes(ptxas_text))


def sass_of(k) -> str:
    """SASS of a compiled kernel (the bundled ``cuobjdump`` on its cubin)."""
    import os
    import subprocess
    import tempfile
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as d:
        fn = os.path.join(d, "k.cubin")
        with open(fn, "wb") as f:
            f.write(k.asm["cubin"])
        return subprocess.run([tool, "-sass", fn], capture_output=True, text=True, check=True).stdout


def mma_loops(sass: str) -> list[dict]:
    """Loops (backward branches) of ``sass`` that contain MMA instructions: start address, body size, and
    the per-step path (head to the loop end with the body's epilogue skipped: the first forward conditional
    branch that lands near the loop end), plus MMA and cp.async counts of the body."""
    ins = [(int(m.group(1), 16), m.group(2)) for m in
           (re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", ln) for ln in sass.splitlines()) if m]
    idx = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA\s.*?0x([0-9a-f]+)", t)
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in idx:
            continue
        head = idx[int(m.group(1), 16)]
        body = ins[head:i + 1]
        ops = [re.sub(r"^@!?U?P\w+\s+", "", x).split()[0] for _, x in body]
        n_mma = sum(o.startswith(("HGMMA", "HMMA")) for o in ops)
        if not n_mma:
            continue
        path = len(body)
        for j, (b, x) in enumerate(body):
            f = re.match(r"@!?P\d+\s+BRA\s+0x([0-9a-f]+)", x)
            if f and int(f.group(1), 16) > b and int(f.group(1), 16) >= a - 0x100:
                path = j + 1 + (i - idx[int(f.group(1), 16)] + 1)
                break
        out.append(dict(start=body[0][0], body=len(body), step_path=path, mma=n_mma,
                        cp_async=sum(o.startswith("LDGSTS") for o in ops)))
    return out


def parse_params(items: list[str]) -> dict:
    """``name=value`` strings -> parameters (ints, true/false, else strings)."""
    params = {}
    for kv in items:
        if "=" not in kv:
            raise SystemExit(f"--param {kv!r}: expected name=value, e.g. block_n=128")
        k, v = kv.split("=", 1)
        params[k] = int(v) if re.fullmatch(r"-?\d+", v) else (v == "true" if v in ("true", "false") else v)
    return params


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--param", action="append", default=[], help="name=value (int/bool/str)")
    ap.add_argument("--sass", metavar="PATH", help="write the SASS there (one case) and list its MMA loops")
    a = ap.parse_args(argv)
    params = parse_params(a.param)
    for c in a.cases:
        case = load_case(c)
        k, dt, meta = compile_case(case, params)
        ptx = k.asm.get("ptx", "")
        sass_info = k.metadata
        txt = ptxas_info(ptx, k.metadata.target.arch)
        regs, spills = ptxas_usage(txt)
        print(f"{case.name}: compiled in {dt:.1f}s regs={regs} spill_bytes={spills} shared={sass_info.shared} "
              f"wgmma_serialized={wgmma_serialized(txt)} "
              f"G={meta['SEQS_PER_PROGRAM']} R={meta['SPLIT']} BLOCK_M={meta['BLOCK_M']} BLOCK_N={meta['BLOCK_N']} "
              f"BLOCK_K={meta['BLOCK_K']} "
              f"wgmma={'wgmma' in ptx} mma={'mma.sync' in ptx}")
        if a.sass:
            sass = sass_of(k)
            with open(a.sass, "w") as f:
                f.write(sass)
            for lp in mma_loops(sass):
                print(f"  loop @{lp['start']:#x}: body {lp['body']} instr, per-step path {lp['step_path']}, "
                      f"MMA {lp['mma']}, cp.async {lp['cp_async']}")


if __name__ == "__main__":
    main()
