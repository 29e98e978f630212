"""How precisely the tensor cores accumulate each scheme's K steps into fp32 (lab; docs/dag-results.md "Results" 43).

One warpgroup computes a [64, 128] tile of a @ w over ``K`` (64-wide K steps, operands from global memory through
shared memory, wgmma) in four forms, and the host compares each with the fp64 product:

- ``bf16x3``: a_lo·w_hi + a_hi·w_lo + a_hi·w_hi on bf16 parts into one accumulator (form ws's scheme);
- ``f16f8_two``: f16f8 as "Results" 42 built it: a_hi·w_hi on fp16 into one accumulator, both correction terms as one
  fp8 e4m3 product of depth 128, [a_lo·2¹¹ | a_hi] · [w_hi·s ; w_lo·2¹¹·s], into a second, added at the end;
- ``f16f8_one``: the same products into ONE accumulator, the fp16 product's operands scaled by powers of two so both
  products carry 2¹¹·s (a_hi·2³, w_hi·s·2⁸; ≤ 57344, in fp16's range): what a 128-row tile on one warpgroup would need
  (two accumulators a tile, not four);
- ``f16f8_h``: as ``f16f8_two`` with the correction accumulator in fp16 (half the registers).

    python -m bench.dag.mma_accum --out DIR            # GPU: one JSON, a line per form, K and seed
    python -m bench.dag.mma_accum --compile            # CPU: each form's sm_90a wgmma (tests/test_dag.py)

The error is reported as max |out − ref| over max |ref| and over the fp64 product of |a| and |w| (the scale an fp32
dot product's rounding follows).
"""
from __future__ import annotations

import argparse
import json
import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

FORMS = ("bf16x3", "f16f8_two", "f16f8_one", "f16f8_h")
ONE_A = 2.0 ** 3        # f16f8_one: a_hi's scale in the fp16 product (w_hi's: s · 2^8)


@gluon.jit
def _tile(ptr, R: gl.constexpr, C: gl.constexpr, lay: gl.constexpr, dst):
    """The [R, C] row-major tile at ``ptr`` into shared memory ``dst``."""
    r = gl.arange(0, R, layout=gl.SliceLayout(1, lay))
    c = gl.arange(0, C, layout=gl.SliceLayout(0, lay))
    dst.store(gl.load(ptr + r[:, None] * C + c[None, :]))


@gluon.jit
def _accum(a1_ptr, a2_ptr, b1_ptr, b2_ptr, a8_ptr, b8_ptr, out_ptr, inv, KS: gl.constexpr, FORM: gl.constexpr,
           num_warps: gl.constexpr):
    """KS K steps: per step the form's tiles (bf16x3: a_hi, a_lo [64, 64], w_hi, w_lo [64, 128]; f16f8: a16 [64, 64],
    w16 [64, 128], a8 [64, 128], w8 K-major [128, 128]) at step offsets, the products, then out = the [64, 128]
    result (f16f8_two / _h: acc + inv · acc8; f16f8_one: inv · acc)."""
    BN: gl.constexpr = 128
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BN, 16])
    mma8: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                   instr_shape=[16, BN, 32])
    acc = gl.zeros([64, BN], gl.float32, layout=mma)
    if FORM == "bf16x3":
        dt: gl.constexpr = gl.bfloat16
    else:
        dt: gl.constexpr = gl.float16
    la: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 64], dt)
    lb: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, BN], dt)
    a1 = gl.allocate_shared_memory(dt, [64, 64], la)
    b1 = gl.allocate_shared_memory(dt, [64, BN], lb)
    if FORM == "bf16x3":
        a2 = gl.allocate_shared_memory(dt, [64, 64], la)
        b2 = gl.allocate_shared_memory(dt, [64, BN], lb)
        for k in range(KS):
            _tile(a1_ptr + k * 64 * 64, 64, 64, ld, a1)
            _tile(a2_ptr + k * 64 * 64, 64, 64, ld, a2)
            _tile(b1_ptr + k * 64 * BN, 64, BN, ld, b1)
            _tile(b2_ptr + k * 64 * BN, 64, BN, ld, b2)
            fence_async_shared()
            acc = warpgroup_mma(a2, b1, acc, is_async=True)           # a_lo · w_hi
            acc = warpgroup_mma(a1, b2, acc, is_async=True)           # a_hi · w_lo
            acc = warpgroup_mma(a1, b1, acc, is_async=True)           # a_hi · w_hi
            acc = warpgroup_mma_wait(0, deps=(acc, ))
        res = acc
    else:
        l8a: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 128], gl.float8e4nv)
        l8b: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, 128], gl.float8e4nv)
        a8 = gl.allocate_shared_memory(gl.float8e4nv, [64, 128], l8a)
        b8 = gl.allocate_shared_memory(gl.float8e4nv, [BN, 128], l8b)
        if FORM == "f16f8_h":
            acc8 = gl.zeros([64, BN], gl.float16, layout=mma8)
        else:
            acc8 = gl.zeros([64, BN], gl.float32, layout=mma8)
        for k in range(KS):
            _tile(a1_ptr + k * 64 * 64, 64, 64, ld, a1)
            _tile(b1_ptr + k * 64 * BN, 64, BN, ld, b1)
            _tile(a8_ptr + k * 64 * 128, 64, 128, ld, a8)
            _tile(b8_ptr + k * BN * 128, BN, 128, ld, b8)
            fence_async_shared()
            acc = warpgroup_mma(a1, b1, acc, is_async=True)           # a_hi · w_hi (f16f8_one: · 2^11 s)
            if FORM == "f16f8_one":                                   # the corrections into the same accumulator
                acc = gl.convert_layout(warpgroup_mma_wait(0, deps=(acc, )), mma8)
                acc = warpgroup_mma(a8, b8.permute((1, 0)), acc, is_async=True)
                acc = gl.convert_layout(warpgroup_mma_wait(0, deps=(acc, )), mma)
            else:
                acc8 = warpgroup_mma(a8, b8.permute((1, 0)), acc8, is_async=True)
                acc, acc8 = warpgroup_mma_wait(0, deps=(acc, acc8))
        if FORM == "f16f8_one":
            res = acc * inv
        else:
            res = acc + gl.convert_layout(acc8.to(gl.float32), mma) * inv
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    gl.store(out_ptr + r[:, None] * BN + c[None, :], res)


def operands(a, w, form: str) -> tuple:
    """The form's operand tensors from fp32 a [64, K] and w [K, 128], laid out per 64-wide K step, and ``inv``."""
    import torch

    from kernels.common.split import F8_A_SCALE, f8_weight_scale   # (host._weight_parts' scales)
    K = a.shape[1]
    KS = K // 64
    steps_a = lambda t: t.reshape(64, KS, 64).permute(1, 0, 2).contiguous()          # [KS, 64, 64]
    steps_w = lambda t: t.reshape(KS, 64, 128).contiguous()                          # [KS, 64, 128]
    dummy = torch.zeros(1, device=a.device)
    if form == "bf16x3":
        a_hi = a.to(torch.bfloat16)
        a_lo = (a - a_hi.float()).to(torch.bfloat16)
        w_hi = w.to(torch.bfloat16)
        w_lo = (w - w_hi.float()).to(torch.bfloat16)
        return steps_a(a_hi), steps_a(a_lo), steps_w(w_hi), steps_w(w_lo), dummy, dummy, 1.0
    f8 = torch.float8_e4m3fn
    s = f8_weight_scale(w.abs().max()).item()
    a_hi = a.to(torch.float16)
    a_lo = a - a_hi.float()
    w_hi = w.to(torch.float16)
    w_lo = w - w_hi.float()
    # a8 per step [64, 128] = [a_lo · 2^11 | a_hi]; w8 per step K-major [128 (n), 128] = [w_hi · s ; w_lo · 2^11 · s]
    a8 = torch.cat([steps_a((a_lo * F8_A_SCALE)), steps_a(a_hi.float())], dim=2).to(f8)
    w8 = torch.cat([steps_w(w_hi.float() * s), steps_w(w_lo * F8_A_SCALE * s)], dim=1)
    w8 = w8.transpose(1, 2).contiguous().to(f8)
    if form == "f16f8_one":
        a16 = steps_a((a_hi.float() * ONE_A).to(torch.float16))
        w16 = steps_w((w_hi.float() * s * (F8_A_SCALE / ONE_A)).to(torch.float16))
    else:
        a16, w16 = steps_a(a_hi), steps_w(w_hi)
    return a16, dummy, w16, dummy, a8, w8, 1.0 / (F8_A_SCALE * s)


def measure(K: int, seed: int, a_std: float = 1.0, w_std: float = 0.02) -> list:
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(64, K, device="cuda", generator=g) * a_std
    w = torch.randn(K, 128, device="cuda", generator=g) * w_std
    ref = a.double() @ w.double()
    scale = a.double().abs() @ w.double().abs()
    rows = []
    for form in FORMS:
        a1, a2, b1, b2, a8, b8, inv = operands(a, w, form)
        out = torch.empty(64, 128, device="cuda")
        _accum[(1, )](a1, a2, b1, b2, a8, b8, out, inv, KS=K // 64, FORM=form, num_warps=4)
        err = (out.double() - ref).abs()
        rows.append(dict(form=form, K=K, seed=seed, a_std=a_std, w_std=w_std,
                         err_over_max_ref=(err.max() / ref.abs().max()).item(),
                         err_over_abs_product=(err / scale).max().item()))
    f32 = a @ w   # fp32 on CUDA cores (main() turns TF32 off)
    err = (f32.double() - ref).abs()
    rows.append(dict(form="fp32", K=K, seed=seed, a_std=a_std, w_std=w_std,
                     err_over_max_ref=(err.max() / ref.abs().max()).item(),
                     err_over_abs_product=(err / scale).max().item()))
    return rows


def compile_form(form: str, KS: int = 4) -> dict:
    """``form`` compiled for sm_90a without a GPU: its wgmma instructions (count by type in the PTX)."""
    import collections
    import re

    from bench.common.sm90_report import compile_gluon
    sig = {n: "*bf16" if form == "bf16x3" else "*fp16" for n in ("a1_ptr", "a2_ptr", "b1_ptr", "b2_ptr")}
    sig.update(a8_ptr="*fp8e4nv", b8_ptr="*fp8e4nv", out_ptr="*fp32", inv="fp32")
    ptx = compile_gluon(_accum, sig, dict(KS=KS, FORM=form, num_warps=4), num_warps=4).asm["ptx"]
    return dict(collections.Counter(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+\.\w+\.\w+\.\w+)", ptx)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for mma_accum.json (GPU)")
    ap.add_argument("--compile", action="store_true", help="compile each form for sm_90a (no GPU), print JSON")
    ap.add_argument("--K", nargs="+", type=int, default=[1024, 4096])
    ap.add_argument("--seeds", type=int, default=4)
    a = ap.parse_args(argv)
    if a.compile:
        print(json.dumps({f: compile_form(f) for f in FORMS}))
        return 0
    if not a.out:
        raise SystemExit("mma_accum: --out DIR (GPU) or --compile (CPU)")
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for K in a.K:
        for seed in range(a.seeds):
            for r in measure(K, seed):
                print(json.dumps({k: (round(v, 10) if isinstance(v, float) else v) for k, v in r.items()}),
                      flush=True)
                rows.append(r)
    tmp = os.path.join(a.out, ".mma_accum.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), fh, indent=1)
    os.replace(tmp, os.path.join(a.out, "mma_accum.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
