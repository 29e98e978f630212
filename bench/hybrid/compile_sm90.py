"""Compile the hybrid Triton kernels for sm_90 (H100/H200) WITHOUT a GPU and report their resources.

Uses ``triton.compile`` with an explicit ``GPUTarget("cuda", 90, 32)`` and the bundled ptxas/cuobjdump:
catches compile errors and register spills before device time is spent. Run without TRITON_INTERPRET:

    python -m bench.hybrid.compile_sm90                 # attention tiles for dh 64 and 128 + the other kernels
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.hybrid.act_split import _act_split_kernel
from kernels.hybrid.attention import PRECISIONS, _attn_fwd
from kernels.hybrid.layernorm_split import _ln_split_kernel
from kernels.hybrid.qkv_split import _qkv_split_kernel
from kernels.hybrid.split_layout import TAIL

TARGET = GPUTarget("cuda", 90, 32)


def _compile(fn, sig: dict, constexprs: dict, num_warps: int, num_stages: int = 2):
    """Every run-time argument is marked divisible by 16, as the launcher specialises them for the cases
    8, 13, 14 (16-byte aligned pointers; S, plane and row strides multiples of 16). Without that mark the
    compiler cannot vectorise or pipeline the loads, and the report would describe another kernel."""
    runtime = [k for k, t in sig.items() if t.startswith("*") or t == "i32"]
    sig = dict(sig, **{k: "constexpr" for k in constexprs})
    names = list(sig)
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in runtime}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in constexprs.items()},
                    attrs=attrs)
    return triton.compile(src, target=TARGET, options={"num_warps": num_warps, "num_stages": num_stages})


def resources(kernel) -> dict:
    """Registers / stack (spills) from cuobjdump, shared memory from the metadata, MMA kind from the PTX."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(kernel.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    try:
        txt = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    res = {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK):(\d+)", txt)}
    ptx = kernel.asm.get("ptx", "")
    res["shared_bytes"] = kernel.metadata.shared
    res["mma"] = "wgmma" if "wgmma" in ptx else ("mma.sync" if "mma.sync" in ptx else "none")
    res["async_copies"] = len(re.findall(r"cp\.async\.(?:cg|ca|bulk)", ptx))  # pipelined loads
    res["vec_stores"] = len(re.findall(r"st\.global(?:\.\w+)*\.v[248]", ptx))
    return res


def attention_resources(dh: int, block_m: int, block_n: int, num_warps: int, num_stages: int,
                        causal: bool = True, qk_prec: str = "bf16x3", pv_prec: str = "bf16x3", H: int = 16):
    sig = {"planes_ptr": "*bf16", "out_ptr": "*bf16", "S": "i32", "stride_p": "i32", "stride_om": "i32"}
    (qa, qb), (pa, pb) = PRECISIONS[qk_prec], PRECISIONS[pv_prec]
    cx = dict(H=H, DH=dh, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal, QK_ALO=qa, QK_BLO=qb, PV_ALO=pa,
              PV_BLO=pb, SPLIT_OUT=True, BF16=True, PREC="tf32", TAIL_W=TAIL)
    return resources(_compile(_attn_fwd, sig, cx, num_warps, num_stages))


ATTN = [  # (dh, block_m, block_n, warps, stages)
    (64, 128, 64, 8, 2), (64, 128, 64, 4, 2), (64, 128, 128, 8, 2), (64, 64, 64, 4, 3), (64, 64, 128, 4, 2),
    (128, 128, 64, 8, 2), (128, 128, 32, 8, 2), (128, 64, 64, 4, 2), (128, 64, 32, 4, 3),
]


def main():
    print(f"{'kernel':34} {'regs':>5} {'stack':>6} {'shared':>8} {'cp.async':>8} {'st.v':>5} mma")
    for dh, bm, bn, w, st in ATTN:
        r = attention_resources(dh, bm, bn, w, st)
        print(f"{f'attn dh{dh} {bm}x{bn} w{w} s{st}':34} {r['reg']:5} {r['stack']:6} {r['shared_bytes']:8} {r['async_copies']:8} {r['vec_stores']:5} {r['mma']}")
    for D in (1024, 4096):
        sig = dict(x_ptr="*fp32", y_ptr="*fp32", xo_ptr="*fp32", w_ptr="*fp32", b_ptr="*fp32", out_ptr="*bf16",
                   stride_x="i32", stride_out="i32")
        r = resources(_compile(_ln_split_kernel, sig, dict(D=D, BLOCK_D=D, EPS=1e-5, HAS_Y=True, WRITE_X=True,
                                                             SPLIT=True, BF16=True, TAIL_W=TAIL), max(1, D // 256)))
        print(f"{f'ln_split D{D}':34} {r['reg']:5} {r['stack']:6} {r['shared_bytes']:8} {r['async_copies']:8} {r['vec_stores']:5}")
    r = resources(_compile(_act_split_kernel, dict(u_ptr="*fp32", out_ptr="*bf16", stride_u="i32", stride_out="i32"),
                           dict(N=4096, BLOCK_N=1024, GELU=True, BF16=True, TAIL_W=TAIL), 4))
    print(f"{'act_split gelu N4096':34} {r['reg']:5} {r['stack']:6} {r['shared_bytes']:8} {r['async_copies']:8} {r['vec_stores']:5}")
    for dh in (64, 128):
        r = resources(_compile(_qkv_split_kernel, dict(qkv_ptr="*fp32", planes_ptr="*bf16", S="i32", stride_t="i32",
                                                        stride_p="i32", qk_scale="fp32"),
                               dict(H=16, DH=dh, BLOCK_S=2048 // dh, BF16=True), 8))
        print(f"{f'qkv_split dh{dh}':34} {r['reg']:5} {r['stack']:6} {r['shared_bytes']:8} {r['async_copies']:8} {r['vec_stores']:5}")


if __name__ == "__main__":
    main()
