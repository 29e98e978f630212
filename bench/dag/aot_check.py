"""Compile the dag kernel for sm_90 on a machine without a GPU (no launch): compile errors, registers, spills,
shared memory, wgmma instructions and the co-resident programs per SM they allow, before device time is spent.

    python -m bench.dag.aot_check 2 3 4 12 [--param block_k=32 ...]
"""
from __future__ import annotations

import argparse
import re
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels import load_case
from kernels.common.occupancy import ctas_per_sm_limit
from bench.common.sm90_report import report
from kernels.dag import graph as G
from kernels.dag.host import (_dag_fwd, _part_dtype, check_envelope, check_params, compile_context, kernel_meta,
                              parse_value, task_table, tiling_for)

_TORCH_TO_TRITON = {"torch.bfloat16": "*bf16", "torch.float16": "*fp16", "torch.float32": "*fp32"}


def signature(case, t: G.Tiling) -> dict:
    """Triton argument types of ``_dag_fwd``'s runtime arguments as ``prepare`` passes them on a GPU."""
    sig = {}
    part = {"ln1": t.scheme_qkv, "qkv": "bf16x3", "att": t.scheme_o, "ln2": t.scheme_ffn1, "f": t.scheme_ffn2,
            "wqkv": t.scheme_qkv, "wo": t.scheme_o, "w1": t.scheme_ffn1, "w2": t.scheme_ffn2}
    names = _dag_fwd.arg_names
    for n in names[:names.index("B")]:
        stem = n.rsplit("_", 2)[0]
        if n.endswith(("_hi_ptr", "_lo_ptr")):
            sig[n] = _TORCH_TO_TRITON[str(_part_dtype(part[stem], True))]
        elif n in ("tab_ptr", "order_ptr", "ctr_ptr", "goal_ptr", "head_ptr", "err_ptr"):
            sig[n] = "*i32"
        elif n in ("n_tasks", "epoch", "spin_limit"):
            sig[n] = "i32"
        elif n == "qk_scale":
            sig[n] = "fp32"
        else:
            sig[n] = "*fp32"
    return sig


def sass_counts(kernel) -> dict:
    """Instruction counts in the SASS of ``kernel`` (bundled nvdisasm): all, HGMMA (wgmma), LDGSTS (cp.async),
    STL / LDL (local memory: spills)."""
    import os
    import subprocess
    import tempfile
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True).stdout
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    count = lambda op: sum(1 for i in ins if i.split(".")[0] == op)
    return dict(instructions=len(ins), hgmma=count("HGMMA"), ldgsts=count("LDGSTS"), stl=count("STL"),
                ldl=count("LDL"))


def compile_case(case, params: dict, n_sm: int = 132, maxnreg: int | None = None):
    """(CompiledKernel, seconds, meta, graph, tiling) for ``case`` with ``params`` as prepare would build it on an
    H200; ``maxnreg`` caps ptxas's registers per thread (Triton's ``maxnreg`` option)."""
    o = check_params(params)
    grid = o["grid"] or n_sm * o["ctas_per_sm"]
    t = tiling_for(case, o, grid)
    check_envelope(case, t)
    g = G.build(case, t, o["order"], grid)
    _, width = task_table(g, goals=o["wait"] == "parallel")
    meta = kernel_meta(case, t, g, o, grid, True, width)
    sig = signature(case, t)
    names = list(_dag_fwd.arg_names)
    full = dict(sig, **{k: "constexpr" for k in meta})
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if full[n].startswith("*")}
    src = ASTSource(_dag_fwd, full, constexprs={(names.index(k),): v for k, v in meta.items()}, attrs=attrs)
    t0 = time.time()
    with compile_context(o):
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=o["num_warps"], num_stages=o["num_stages"],
                                        **({"maxnreg": maxnreg} if maxnreg else {})))
    return k, time.time() - t0, meta, g, t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--param", action="append", default=[], help="name=value (config/variant/dag.yaml names)")
    ap.add_argument("--maxnreg", type=int, default=None, help="cap on registers per thread (ptxas)")
    a = ap.parse_args(argv)
    params = {k: parse_value(v) for k, v in (kv.split("=", 1) for kv in a.param)}
    for c in a.cases:
        case = load_case(c)
        k, dt, meta, g, t = compile_case(case, params, maxnreg=a.maxnreg)
        r = report(k)
        occ = ctas_per_sm_limit(r["registers"], r["shared"], check_params(params)["num_warps"])
        sc = sass_counts(k)
        print(f"{case.name}: compiled in {dt:.1f}s registers={r['registers']} spills={r['spill_stores']}/"
              f"{r['spill_loads']} shared={r['shared']} wgmma={r['wgmma']} serialized={r['wgmma_serialized']} "
              f"ctas/SM={occ} grid={meta['GRID']} tasks={len(g.tasks)} split_k_o={t.split_k_o} "
              f"split_k_ffn2={t.split_k_ffn2} gemm_sites={meta['N_SITES']} sass={sc['instructions']} "
              f"HGMMA={sc['hgmma']} LDGSTS={sc['ldgsts']} STL/LDL={sc['stl']}/{sc['ldl']}", flush=True)


if __name__ == "__main__":
    main()
