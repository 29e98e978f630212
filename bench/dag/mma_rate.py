"""The tensor-core rate one CTA per SM reaches with back-to-back wgmma from shared memory, fp16 against fp8 e4m3, one
warpgroup (64-row tiles, as form ws's consumer) against two (128 rows) (lab; docs/dag-results.md "Results" 42). No
loads, no epilogue: each CTA issues ``--iters`` K steps of async wgmma on one [rows, K] A tile and one B tile of N = 128
(fp16: K = 64, B [K, N]; fp8: K = 128, B K-major [N, K] viewed transposed, as form ws's f16f8 scheme held them), keeping
``--inflight`` steps in flight, and times them with ``%globaltimer`` and ``clock64`` (so the SM clock too). The tiles
are left uninitialized: the values do not change an MMA's time.

    python -m bench.dag.mma_rate --out DIR            # GPU: one JSON, a line per form
    python -m bench.dag.mma_rate --compile            # CPU: each form's sm_90a wgmma (tests/test_dag.py)
    python -m bench.dag.mma_rate --out DIR --forms bf16x3_n64 bf16x3_n128 f16w1_n64 f16w1_n128
    python -m bench.dag.mma_rate --out DIR --forms bf16x3_n64 i8x2_n64 i8x2c_n64 i8x2b_n64 i8x2cb_n64 \
        i8x2b4_n64 i8x2cb4_n64 bf16x3_n128 f16w1_n128 i8x2_n128 i8x2c_n128 i8x2cb_n128

The third: form ws's GEMM K steps on 64-row tiles alone (``STEPS``: the scheme's products of depth 64 on [64, 64] A
tiles and [64, N] W tiles, as its consumer issues them, one step's groups left in flight), the products' time of a
step the traced K steps are set against ("Results" 47). The fourth: the int8 limb schemes' K steps (``I8_STEPS``,
"Results" 52: four or three int8 products a step into int32 accumulators, folded into fp32 every step or every fourth
in the block-scaled forms), against bf16x3's and f16_w1's; not yet run.

Per form: TFLOP/s over all CTAs (the grid is the SM count), per SM and clock (dense fp16 peak: 4096 flops a clock an
SM, fp8 8192 by the datasheet's ratio), and the SM clock the kernel ran at. ``mix_m64`` is f16f8's K step (the fp16
product into one accumulator, the fp8 product into another): at the two rates 0.28 µs a step at 1.8 GHz;
``fp16x2_m64`` the control, two fp16 products of depth 64 into two accumulators.
"""
from __future__ import annotations

import argparse
import json
import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait

_NOW = gl.constexpr("mov.u64 $0, %globaltimer;")
_CLK = gl.constexpr("mov.u64 $0, %clock64;")


@gluon.jit
def _stamp(asm: gl.constexpr, lay: gl.constexpr, NT: gl.constexpr):
    z = gl.arange(0, NT, layout=lay)
    return gl.inline_asm_elementwise(asm, "=l,r", [z], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _finish(out_ptr, t0, c0, s, lay: gl.constexpr, NT: gl.constexpr):
    """The CTA's elapsed ns and clocks since (t0, c0), and the accumulators' sum ``s``, into out[program, 0:3]."""
    t1 = _stamp(_NOW, lay, NT)
    c1 = _stamp(_CLK, lay, NT)
    pid = gl.program_id(0)
    first = gl.arange(0, NT, layout=lay) == 0
    gl.store(out_ptr + pid * 4 + 0 + t1 * 0, t1 - t0, mask=first)
    gl.store(out_ptr + pid * 4 + 1 + t1 * 0, c1 - c0, mask=first)
    gl.store(out_ptr + pid * 4 + 2 + t1 * 0, s.to(gl.int64), mask=first)


@gluon.jit
def _rate_mix(out_ptr, ITERS: gl.constexpr, ROWS: gl.constexpr, INFLIGHT: gl.constexpr, SECOND8: gl.constexpr,
              num_warps: gl.constexpr):
    """f16f8's K step: an fp16 product of depth 64 into ``acc``, then an fp8 one of depth 128 into ``acc8``
    (``SECOND8`` false: a second fp16 product of depth 64 there instead, the control)."""
    BN: gl.constexpr = 128
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BN, 16])
    mma8: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                   instr_shape=[16, BN, 32 if SECOND8 else 16])
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    a8 = gl.allocate_shared_memory(gl.float8e4nv, [ROWS, 128],
                                   gl.NVMMASharedLayout.get_default_for([ROWS, 128], gl.float8e4nv))
    b8 = gl.allocate_shared_memory(gl.float8e4nv, [BN, 128],
                                   gl.NVMMASharedLayout.get_default_for([BN, 128], gl.float8e4nv)).permute((1, 0))
    a = gl.allocate_shared_memory(gl.float16, [ROWS, 64], gl.NVMMASharedLayout.get_default_for([ROWS, 64], gl.float16))
    b = gl.allocate_shared_memory(gl.float16, [64, BN], gl.NVMMASharedLayout.get_default_for([64, BN], gl.float16))
    a2 = gl.allocate_shared_memory(gl.float16, [ROWS, 64], gl.NVMMASharedLayout.get_default_for([ROWS, 64], gl.float16))
    acc = gl.zeros([ROWS, BN], gl.float32, layout=mma)
    acc8 = gl.zeros([ROWS, BN], gl.float32, layout=mma8)
    t0 = _stamp(_NOW, lay, 32 * num_warps)
    c0 = _stamp(_CLK, lay, 32 * num_warps)
    for i in range(ITERS):
        acc = warpgroup_mma(a, b, acc, is_async=True)
        if SECOND8:
            acc8 = warpgroup_mma(a8, b8, acc8, is_async=True)
        else:
            acc8 = warpgroup_mma(a2, b, acc8, is_async=True)
        acc, acc8 = warpgroup_mma_wait(2 * INFLIGHT, deps=(acc, acc8))
    acc, acc8 = warpgroup_mma_wait(0, deps=(acc, acc8))
    s = gl.sum(gl.sum(acc, axis=1), axis=0) + gl.sum(gl.sum(gl.convert_layout(acc8, mma), axis=1), axis=0)
    _finish(out_ptr, t0, c0, s, lay, 32 * num_warps)


@gluon.jit
def _rate(out_ptr, ITERS: gl.constexpr, FP8: gl.constexpr, ROWS: gl.constexpr, INFLIGHT: gl.constexpr,
          num_warps: gl.constexpr):
    BN: gl.constexpr = 128
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BN, 32 if FP8 else 16])
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    if FP8:
        la: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, 128], gl.float8e4nv)
        lb: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, 128], gl.float8e4nv)
        a = gl.allocate_shared_memory(gl.float8e4nv, [ROWS, 128], la)
        b = gl.allocate_shared_memory(gl.float8e4nv, [BN, 128], lb).permute((1, 0))
    else:
        la: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, 64], gl.float16)
        lb: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, BN], gl.float16)
        a = gl.allocate_shared_memory(gl.float16, [ROWS, 64], la)
        b = gl.allocate_shared_memory(gl.float16, [64, BN], lb)
    acc = gl.zeros([ROWS, BN], gl.float32, layout=mma)
    t0 = _stamp(_NOW, lay, 32 * num_warps)
    c0 = _stamp(_CLK, lay, 32 * num_warps)
    for i in range(ITERS):
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc = warpgroup_mma_wait(INFLIGHT, deps=(acc, ))
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    _finish(out_ptr, t0, c0, gl.sum(gl.sum(acc, axis=1), axis=0), lay, 32 * num_warps)   # (s: the products alive)


@gluon.jit
def _rate_step(out_ptr, ITERS: gl.constexpr, BN: gl.constexpr, NP: gl.constexpr, num_warps: gl.constexpr):
    """form ws's GEMM K step on 64-row tiles as its consumer issues it (``ws_kernel._gemm_step_at``): NP = 3, bf16x3
    (a_lo·w_hi, a_hi·w_lo, a_hi·w_hi, bf16) or NP = 2, f16_w1 (a_lo·w, a_hi·w, fp16), each of depth 64 into one
    accumulator [64, BN], then a wait leaving this step's NP groups in flight (the previous step's done)."""
    dt: gl.constexpr = gl.bfloat16 if NP == 3 else gl.float16
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BN, 16])
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    la: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 64], dt)
    lb: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, BN], dt)
    a_hi = gl.allocate_shared_memory(dt, [64, 64], la)
    a_lo = gl.allocate_shared_memory(dt, [64, 64], la)
    w_hi = gl.allocate_shared_memory(dt, [64, BN], lb)
    w_lo = gl.allocate_shared_memory(dt, [64, BN], lb)
    acc = gl.zeros([64, BN], gl.float32, layout=mma)
    t0 = _stamp(_NOW, lay, 32 * num_warps)
    c0 = _stamp(_CLK, lay, 32 * num_warps)
    for i in range(ITERS):
        acc = warpgroup_mma(a_lo, w_hi, acc, is_async=True)
        if NP == 3:
            acc = warpgroup_mma(a_hi, w_lo, acc, is_async=True)
        acc = warpgroup_mma(a_hi, w_hi, acc, is_async=True)
        acc = warpgroup_mma_wait(NP, deps=(acc, ))
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    _finish(out_ptr, t0, c0, gl.sum(gl.sum(acc, axis=1), axis=0), lay, 32 * num_warps)


@gluon.jit
def i8_products(a0, a1, w0, w1, hh, mix, ll, fresh, NP: gl.constexpr):
    """One int8 limb K step's async products (``precision_probe.I8_SCHEMES``): a0·w0 into ``hh``, a0·w1 and a1·w0
    into ``mix`` (the same weight, 2^7), a1·w1 into ``ll`` with NP = 4 (NP = 3: left out); ``fresh`` false starts
    the integer accumulators from zero (the first step after a fold)."""
    hh = warpgroup_mma(a0, w0, hh, use_acc=fresh, is_async=True)
    mix = warpgroup_mma(a0, w1, mix, use_acc=fresh, is_async=True)
    mix = warpgroup_mma(a1, w0, mix, is_async=True)
    if NP == 4:
        ll = warpgroup_mma(a1, w1, ll, use_acc=fresh, is_async=True)
    return hh, mix, ll


@gluon.jit
def i8_combine(hh, mix, ll, NP: gl.constexpr):
    """The integer accumulators of ``i8_products`` (waited for) as one fp32 tile: hh · 2^14 + mix · 2^7 (+ ll)."""
    part = hh.to(gl.float32) * 16384.0 + mix.to(gl.float32) * 128.0
    if NP == 4:
        part = part + ll.to(gl.float32)
    return part


@gluon.jit
def _rate_step_i8(out_ptr, ITERS: gl.constexpr, BN: gl.constexpr, NP: gl.constexpr, num_warps: gl.constexpr,
                  DRAIN: gl.constexpr = 0):
    """The int8 limb schemes' K step on 64-row tiles (``precision_probe.I8_SCHEMES``; docs/dag-results.md "Results"
    52): A as limbs a0, a1 [64, 64] and W as w0, w1 [BN, 64] (K-major, as 8-bit wgmma takes its B operand), int8;
    a0·w0 into one int32 accumulator, a0·w1 and a1·w0 into a second (the same weight, 2^7), and with NP = 4 a1·w1
    into a third (NP = 3: ``i8x2c``, left out); each product of depth 64, then a wait leaving this step's NP groups
    in flight. 16 KB of operands a step at BN = 64 where bf16x3's take 32. ``DRAIN`` n: the block-scaled forms
    (``i8x2b``: A's scale per row and 64-deep K block, n = 1; ``i8x2b256``: 256-deep, n = 4): every n-th step waits
    for its products, adds the integer accumulators times 2^14 / 2^7 / 1 and the rows' scales into an fp32
    accumulator, and the next step starts them from zero (what a K loop pays for A from a producer that holds only
    part of a row's columns; ITERS a multiple of n). A form with two sets of integer accumulators, one step's
    products in flight while the other's are folded, compiles with every wgmma serialized (ptxas C7514: the fold
    reads accumulator registers inside the pipeline stage) and spills at NP = 4."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BN, 32])
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    la: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 64], gl.int8)
    lb: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, 64], gl.int8)
    a0 = gl.allocate_shared_memory(gl.int8, [64, 64], la)
    a1 = gl.allocate_shared_memory(gl.int8, [64, 64], la)
    w0 = gl.allocate_shared_memory(gl.int8, [BN, 64], lb).permute((1, 0))
    w1 = gl.allocate_shared_memory(gl.int8, [BN, 64], lb).permute((1, 0))
    hh = gl.zeros([64, BN], gl.int32, layout=mma)
    mix = gl.zeros([64, BN], gl.int32, layout=mma)
    ll = gl.zeros([64, BN], gl.int32, layout=mma)
    t0 = _stamp(_NOW, lay, 32 * num_warps)
    c0 = _stamp(_CLK, lay, 32 * num_warps)
    acc = gl.zeros([64, BN], gl.float32, layout=mma)
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    scale = gl.expand_dims(1.0 + rows.to(gl.float32) * 1e-3, 1)       # a row's scale (any value: the time is the same)
    EVERY: gl.constexpr = DRAIN if DRAIN else 1
    for i in range(ITERS // EVERY):
        for j in gl.static_range(EVERY):
            # the first step after a fold starts the integer accumulators from zero
            hh, mix, ll = i8_products(a0, a1, w0, w1, hh, mix, ll, (DRAIN == 0) or (j > 0), NP)
            if DRAIN > 0 and j == EVERY - 1:
                hh, mix, ll = warpgroup_mma_wait(0, deps=(hh, mix, ll))
                acc = acc + i8_combine(hh, mix, ll, NP) * scale
            else:
                hh, mix, ll = warpgroup_mma_wait(NP, deps=(hh, mix, ll))
    hh, mix, ll = warpgroup_mma_wait(0, deps=(hh, mix, ll))
    s = gl.sum(gl.sum(hh + mix + ll, axis=1), axis=0).to(gl.float32) + gl.sum(gl.sum(acc, axis=1), axis=0)
    _finish(out_ptr, t0, c0, s, lay, 32 * num_warps)


I8_STEPS = {   # name: (products a step, N, drained every n-th step: _rate_step_i8's DRAIN): the int8 limb schemes'
    "i8x2_n64": (4, 64, 0),     # K steps on 64-row tiles ("Results" 52)
    "i8x2c_n64": (3, 64, 0),
    "i8x2_n128": (4, 128, 0),
    "i8x2c_n128": (3, 128, 0),
    "i8x2b_n64": (4, 64, 1),
    "i8x2cb_n64": (3, 64, 1),
    "i8x2cb_n128": (3, 128, 1),
    "i8x2b4_n64": (4, 64, 4),
    "i8x2cb4_n64": (3, 64, 4),
}

STEPS = {   # name: (products a step, N): form ws's K steps on 64-row tiles (docs/dag-results.md "Results" 46)
    "bf16x3_n64": (3, 64),
    "bf16x3_n128": (3, 128),
    "f16w1_n64": (2, 64),
    "f16w1_n128": (2, 128),
}

FORMS = {   # name: (fp8, rows, warps); fp8 "mix": f16f8's K step (an fp16 product of depth 64, an fp8 one of 128)
    "fp16_m64": (False, 64, 4),
    "mix_m64": ("mix", 64, 4),
    "fp16x2_m64": ("fp16x2", 64, 4),
    "fp8_m64": (True, 64, 4),
    "fp16_m128": (False, 128, 8),
    "fp8_m128": (True, 128, 8),
}


def step_kernel(name: str, iters: int) -> tuple:
    """A K-step form of ``STEPS`` or ``I8_STEPS``: its kernel and constexprs (one warpgroup, 64-row tiles)."""
    if name in STEPS:
        np_, bn = STEPS[name]
        return _rate_step, dict(ITERS=iters, BN=bn, NP=np_, num_warps=4)
    np_, bn, drain = I8_STEPS[name]
    if drain and iters % drain:
        raise SystemExit(f"mma_rate: {name} folds every {drain} steps: --iters must be a multiple of it")
    return _rate_step_i8, dict(ITERS=iters, BN=bn, NP=np_, num_warps=4, DRAIN=drain)


def third_launch(launch, ctas: int) -> tuple:
    """``launch(out)`` three times (compile, warm the L2 and the clocks; the third is kept) on a zeroed int64
    ``out`` [ctas, 4] whose rows the kernel fills with its elapsed ns and clocks (``_finish``'s layout). Returns
    (out, the CTAs' median ns, median clocks)."""
    import torch
    out = torch.zeros(ctas, 4, dtype=torch.int64, device="cuda")
    for _ in range(3):
        launch(out)
        torch.cuda.synchronize()
    return out, out[:, 0].double().median().item(), out[:, 1].double().median().item()


def measure(name: str, iters: int, inflight: int) -> dict:
    """A form of ``FORMS`` (``inflight`` steps left in flight) or of ``STEPS`` (a step's products left in flight)
    on every SM: its µs a K step and its products' rate."""
    import torch
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    if name in STEPS or name in I8_STEPS:
        fn, cst = step_kernel(name, iters)
        rows, n, k, inflight = 64, cst["BN"], 64 * cst["NP"], cst["NP"]
        launch = lambda out: fn[(n_sm, )](out, **cst)   # noqa: E731
    else:
        fp8, rows, warps = FORMS[name]
        n, k = 128, {"mix": 64 + 128, "fp16x2": 128, True: 128, False: 64}[fp8]
        args = dict(ITERS=iters, ROWS=rows, INFLIGHT=inflight, num_warps=warps)
        if fp8 in ("mix", "fp16x2"):
            launch = lambda out: _rate_mix[(n_sm, )](out, SECOND8=fp8 == "mix", **args)   # noqa: E731
        else:
            launch = lambda out: _rate[(n_sm, )](out, FP8=fp8, **args)   # noqa: E731
    _, ns, cyc = third_launch(launch, n_sm)
    flops = 2.0 * rows * n * k * iters
    return dict(form=name, iters=iters, inflight=inflight, rows=rows, k_step=k, ns=ns, cycles=cyc,
                ghz=cyc / ns, tflops=flops * n_sm / ns / 1e3, flops_per_clk_sm=flops / cyc,
                us_per_step=ns / iters / 1e3)


def show(r: dict) -> dict:
    """Print one result as a JSON line (floats to 4 places) and return it."""
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
    return r


def save(out: str, name: str, rows: list) -> None:
    """``rows`` as ``out/name``, written atomically."""
    tmp = os.path.join(out, f".{name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(rows, fh, indent=1)
    os.replace(tmp, os.path.join(out, name))


def compile_form(name: str, iters: int = 4, inflight: int = 1) -> dict:
    """``name`` compiled for sm_90a without a GPU: its wgmma instructions (shape and types: count in the PTX) and
    wgmma waits."""
    import collections
    import re

    from bench.common.sm90_report import compile_gluon
    if name in STEPS or name in I8_STEPS:
        (fn, cst), warps = step_kernel(name, iters), 4
    else:
        fp8, rows, warps = FORMS[name]
        mix = fp8 in ("mix", "fp16x2")
        fn = _rate_mix if mix else _rate
        cst = dict(ITERS=iters, ROWS=rows, INFLIGHT=inflight, num_warps=warps)
        cst.update(SECOND8=fp8 == "mix") if mix else cst.update(FP8=fp8)
    ptx = compile_gluon(fn, {"out_ptr": "*i64"}, cst, num_warps=warps).asm["ptx"]
    return dict(wgmma=dict(collections.Counter(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+\.\w+\.\w+\.\w+)",
                                                           ptx))),
                waits=re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for mma_rate.json (GPU)")
    ap.add_argument("--compile", action="store_true", help="compile each form for sm_90a (no GPU), print JSON")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS) + list(STEPS) + list(I8_STEPS),
                    help=f"default: the single-product forms; the K steps of form ws: {' '.join(STEPS)}; of the "
                         f"int8 limb schemes: {' '.join(I8_STEPS)}")
    ap.add_argument("--iters", type=int, default=4096)
    ap.add_argument("--inflight", type=int, default=1, help="wgmma groups left in flight after each issue")
    a = ap.parse_args(argv)
    if a.compile:
        print(json.dumps({f: compile_form(f) for f in a.forms}))
        return 0
    if not a.out:
        raise SystemExit("mma_rate: --out DIR (GPU) or --compile (CPU)")
    os.makedirs(a.out, exist_ok=True)
    save(a.out, "mma_rate.json", [show(measure(f, a.iters, a.inflight)) for f in a.forms])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
