"""A GEMM K loop as form ws's consumer runs it, TMA feed and wgmma products together on every SM, bf16x3's operands
(4 bytes an element of each operand) against the int8 limb schemes' (2 bytes; docs/dag-results.md "Results" 52)
(lab). ``bench.dag.feed_rate`` times the feed alone and ``bench.dag.mma_rate`` the products alone; what the int8
lead needs to know is whether a K step that brings 16 KB in place of 32 takes about half the time once both run
at once on all SMs, and what the fold of its integer accumulators into fp32 costs inside the pipelined loop.

Each CTA (one an SM; ``--per-sm 2``: two, as form ws's two consumers; ``--programs n``: n CTAs, fewer SMs streaming)
streams ``--iters`` K steps of one 64-row output tile [64, N] through a ring of ``--stages`` slots, as a pipelined
Hopper GEMM does: wait for step i's slot, issue its products (async wgmma), wait until step i − 1's products are
done (step i's left in flight), then issue the TMA loads of step i + stages − 1 into the slot step i − 1 used. A
step's operands are two [64, KD] A boxes and two [N, KD] W boxes (K-major) of an L2-resident [rows, KD] tensor
(``--mb``; KD = 64, or 128 for ``…_k128``), CTA p starting at a different row, as ``feed_rate``'s. Forms
(``FORMS``):

- ``bf16x3_nN``: bf16 hi / lo boxes (32 KB a step at N = 64), a_lo·w_hi, a_hi·w_lo, a_hi·w_hi into one fp32
  accumulator (today's K step, ``ws_kernel._gemm_step_at``).
- ``i8x2_nN`` / ``i8x2c_nN``: int8 limb boxes (16 KB a step at N = 64), a0·w0 into one int32 accumulator, a0·w1 and
  a1·w0 into a second, a1·w1 into a third (``c``: left out), never folded (a scale over the whole K).
- ``i8x2b_nN`` / ``i8x2cb_nN``: the same folded into an fp32 accumulator at every step's end (a scale a row of A and
  column of W and 64-deep K block, ``i8b_all``): the step's products waited for, the integer accumulators times
  2^14 / 2^7 / 1 times the block's row and column scales (loaded from global memory: [blocks, 64] and [blocks, N]
  fp32, as a producer's epilogue would write them) added in; ``b4``: every fourth step (a 256-deep block,
  ``i8b256_all``).
- ``i8x2bo_n64_k128`` / ``i8x2cbo_n64_k128``: the fold split around the next step's issue (``OVERLAP``): the
  integers combined into fp32 before it, the scaled add after it, under its products.
- ``…_k128``: int8 steps 128 deep ([64, 128] and [N, 128] boxes, 128-byte rows as bf16's 64-deep boxes have: the
  same bytes a step as bf16x3 for twice its K), folded at each step's end (a 128-deep block).

The values are random; the accumulators' sum is stored so that no product is dead, and ``--check`` first runs each
form on 8 CTAs and 16 steps and compares their output tiles with ``reference`` (float64, the same boxes and scales).

    python -m bench.dag.kloop_rate --out DIR --check    # GPU: each form checked, then timed: one JSON
    python -m bench.dag.kloop_rate --compile            # CPU: each form's sm_90a wgmma, TMA copies, registers

Per form: the CTAs' median µs a step, the operand bytes a step, GB/s an SM and in all, and the SM clock.
"""
from __future__ import annotations

import argparse
import json
import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from bench.dag.mma_rate import _CLK, _NOW, _finish, _stamp, i8_combine, i8_products, save, show, third_launch
from kernels.dag.ws_kernel import SHARED_LIMIT

FORMS = {   # name: (int8, products a step, N, fold every n-th step (0: never), K depth a step)
    "bf16x3_n64": (False, 3, 64, 0, 64),
    "bf16x3_n128": (False, 3, 128, 0, 64),
    "i8x2_n64": (True, 4, 64, 0, 64),
    "i8x2c_n64": (True, 3, 64, 0, 64),
    "i8x2b_n64": (True, 4, 64, 1, 64),
    "i8x2cb_n64": (True, 3, 64, 1, 64),
    "i8x2b4_n64": (True, 4, 64, 4, 64),
    "i8x2cb4_n64": (True, 3, 64, 4, 64),
    "i8x2_n128": (True, 4, 128, 0, 64),
    "i8x2cb_n128": (True, 3, 128, 1, 64),
    "i8x2cb4_n128": (True, 3, 128, 4, 64),
    "i8x2_n64_k128": (True, 4, 64, 0, 128),
    "i8x2b_n64_k128": (True, 4, 64, 1, 128),
    "i8x2cb_n64_k128": (True, 3, 64, 1, 128),
    "i8x2b2_n64_k128": (True, 4, 64, 2, 128),
    "i8x2cb2_n64_k128": (True, 3, 64, 2, 128),
    "i8x2bo_n64_k128": (True, 4, 64, 1, 128),
    "i8x2cbo_n64_k128": (True, 3, 64, 1, 128),
}
# folds overlapped: a block's integer accumulators combined into fp32 right after their wait (before the next step's
# products, which overwrite them), the scaled add into the fp32 accumulator only after the next step's products
# are issued, under them
OVERLAP = ("i8x2bo_n64_k128", "i8x2cbo_n64_k128")


@gluon.jit
def _issue(a_d, w_d, a_ring, w_ring, bar, step, slot, a_base, w_base, a_rows, w_rows, BN: gl.constexpr):
    """Step ``step``'s four boxes (A hi / lo or limbs 0 / 1, W the same) into ring slot ``slot``, on ``bar``."""
    mbarrier.expect(bar, 2 * a_d.block_type.nbytes + 2 * w_d.block_type.nbytes)
    for h in gl.static_range(2):
        tma.async_copy_global_to_shared(a_d, [(a_base + (2 * step + h) * 64) % a_rows, 0], bar,
                                        a_ring.index(2 * slot + h))
        tma.async_copy_global_to_shared(w_d, [(w_base + (2 * step + h) * BN) % w_rows, 0], bar,
                                        w_ring.index(2 * slot + h))


@gluon.jit
def _kloop(a_d, w_d, sa_ptr, sw_ptr, out_ptr, tile_ptr, a_rows, w_rows, ITERS: gl.constexpr, STAGES: gl.constexpr,
           BN: gl.constexpr, I8: gl.constexpr, NP: gl.constexpr, FOLD: gl.constexpr, KD: gl.constexpr,
           CHECK: gl.constexpr, num_warps: gl.constexpr, OVL: gl.constexpr = False):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    NT: gl.constexpr = 32 * num_warps
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BN, 32 if I8 else 16])
    a_ring = gl.allocate_shared_memory(a_d.dtype, [2 * STAGES, 64, KD], a_d.layout)
    w_ring = gl.allocate_shared_memory(w_d.dtype, [2 * STAGES, BN, KD], w_d.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(STAGES):
        mbarrier.init(bars.index(b), count=1)
    pid = gl.program_id(0)
    a_base = (pid * 977 * 64) % a_rows
    w_base = (pid * 331 * 64) % w_rows
    acc = gl.zeros([64, BN], gl.float32, layout=mma)
    hh = gl.zeros([64, BN], gl.int32, layout=mma)
    mix = gl.zeros([64, BN], gl.int32, layout=mma)
    ll = gl.zeros([64, BN], gl.int32, layout=mma)
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    t0 = _stamp(_NOW, lay, NT)
    c0 = _stamp(_CLK, lay, NT)
    for p in gl.static_range(STAGES - 1):   # the ring's first steps
        _issue(a_d, w_d, a_ring, w_ring, bars.index(p), p, p, a_base, w_base, a_rows, w_rows, BN)
    EVERY: gl.constexpr = FOLD if FOLD else 1
    sa = gl.load(sa_ptr + rows)             # the first block's scales; each fold loads the next block's
    sw = gl.load(sw_ptr + cols)
    part = gl.zeros([64, BN], gl.float32, layout=mma)   # OVL: the last block's combined integers, not yet added
    for i0 in range(0, ITERS, EVERY):
        for j in gl.static_range(EVERY):
            i = i0 + j
            s = i % STAGES
            mbarrier.wait(bars.index(s), (i // STAGES) & 1)
            a0 = a_ring.index(2 * s)
            a1 = a_ring.index(2 * s + 1)
            w0 = w_ring.index(2 * s).permute((1, 0))
            w1 = w_ring.index(2 * s + 1).permute((1, 0))
            if I8:   # the first step after a fold starts the integers from zero
                hh, mix, ll = i8_products(a0, a1, w0, w1, hh, mix, ll, (FOLD == 0) or (j > 0), NP)
                if OVL:   # the previous block's scaled add under this step's products, then this block's scales
                    acc = acc + part * gl.expand_dims(sa, 1) * gl.expand_dims(sw, 0)
                    blk = i % 64
                    sa = gl.load(sa_ptr + blk * 64 + rows)
                    sw = gl.load(sw_ptr + blk * BN + cols)
                if FOLD > 0 and j == EVERY - 1:
                    hh, mix, ll = warpgroup_mma_wait(0, deps=(hh, mix, ll))
                else:
                    hh, mix, ll = warpgroup_mma_wait(NP, deps=(hh, mix, ll))
            else:   # bf16x3: limb 0 the hi part, 1 the lo part
                acc = warpgroup_mma(a1, w0, acc, is_async=True)
                acc = warpgroup_mma(a0, w1, acc, is_async=True)
                acc = warpgroup_mma(a0, w0, acc, is_async=True)
                acc = warpgroup_mma_wait(3, deps=(acc, ))
            # step i - 1's products are done: its slot takes step i + STAGES - 1 (before a fold's arithmetic)
            n = i + STAGES - 1
            if n < ITERS:
                _issue(a_d, w_d, a_ring, w_ring, bars.index(n % STAGES), n, n % STAGES, a_base, w_base, a_rows,
                       w_rows, BN)
            if I8 and FOLD > 0 and j == EVERY - 1:
                part = i8_combine(hh, mix, ll, NP)
                if not OVL:
                    acc = acc + part * gl.expand_dims(sa, 1) * gl.expand_dims(sw, 0)
                    blk = (i // EVERY + 1) % 64
                    sa = gl.load(sa_ptr + blk * 64 + rows)
                    sw = gl.load(sw_ptr + blk * BN + cols)
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    hh, mix, ll = warpgroup_mma_wait(0, deps=(hh, mix, ll))
    if OVL:   # the last block's add
        acc = acc + part * gl.expand_dims(sa, 1) * gl.expand_dims(sw, 0)
    if CHECK:   # the CTA's output tile: the folded accumulator, or the integer ones combined (fp32)
        res = acc
        if I8 and FOLD == 0:
            res = i8_combine(hh, mix, ll, NP)
        offs = gl.expand_dims(rows, 1) * BN + gl.expand_dims(cols, 0)
        gl.store(tile_ptr + pid * (64 * BN) + offs, res)
    tot = gl.sum(gl.sum(acc, axis=1), axis=0) + gl.sum(gl.sum(hh + mix + ll, axis=1), axis=0).to(gl.float32)
    _finish(out_ptr, t0, c0, tot, lay, NT)


def _descs(i8: bool, bn: int, rows: int, device: str, kd: int = 64):
    """TMA descriptors over one [rows, kd] source (random; L2-resident on the GPU) for A's and W's boxes, the scale
    tensors, and the source."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    dt, gdt = (torch.int8, gl.int8) if i8 else (torch.bfloat16, gl.bfloat16)
    if device == "cuda":
        src = torch.randint(-64, 64, (rows, kd), device=device).to(dt) if i8 else \
            torch.randn(rows, kd, device=device).to(dt)
    else:
        src = torch.empty(rows, kd, dtype=dt)
    a_d = TensorDescriptor(src, [rows, kd], [kd, 1], [64, kd], gl.NVMMASharedLayout.get_default_for([64, kd], gdt))
    w_d = TensorDescriptor(src, [rows, kd], [kd, 1], [bn, kd], gl.NVMMASharedLayout.get_default_for([bn, kd], gdt))
    sa = torch.rand(64 * 64, device=device) + 0.5
    sw = torch.rand(64 * bn, device=device) + 0.5
    return a_d, w_d, sa, sw, src


def _constexprs(name: str, iters: int, stages: int) -> dict:
    i8, np_, bn, fold, kd = FORMS[name]
    if fold and iters % fold:
        raise SystemExit(f"kloop_rate: {name} folds every {fold} steps: --iters must be a multiple of it")
    return dict(ITERS=iters, STAGES=stages, BN=bn, I8=i8, NP=np_, FOLD=fold, KD=kd, num_warps=4,
                OVL=name in OVERLAP)


def measure(name: str, iters: int, stages: int, mb: int, per_sm: int = 1, programs: int = 0) -> dict:
    """``name`` on ``programs`` CTAs (0: ``per_sm`` an SM on every SM): µs a step, the CTAs' median."""
    import torch
    n_sm = programs or torch.cuda.get_device_properties(0).multi_processor_count * per_sm
    i8, np_, bn, fold, kd = FORMS[name]
    rows = mb * 2**20 // (kd * (1 if i8 else 2))
    a_d, w_d, sa, sw, _ = _descs(i8, bn, rows, "cuda", kd)
    cst = _constexprs(name, iters, stages)
    step = 2 * (64 + bn) * kd * (1 if i8 else 2)
    if n_sm > torch.cuda.get_device_properties(0).multi_processor_count and (stages * step + 1024) * per_sm > \
            SHARED_LIMIT:   # the CTAs would run in waves, each alone on its SM: a row that looked like one CTA an SM's
        raise ValueError(f"{per_sm} CTAs an SM need {per_sm} x {stages * step} bytes of ring: fewer --stages")
    _, ns, cyc = third_launch(lambda out: _kloop[(n_sm, )](a_d, w_d, sa, sw, out, out, rows, rows, CHECK=False,
                                                           **cst), n_sm)
    return dict(form=name, stages=stages, per_sm=per_sm, programs=n_sm, iters=iters, step_kb=step / 1024,
                products=np_, fold_every=fold, us_per_step=ns / iters / 1e3, ghz=cyc / ns, gbs_per_sm=step * iters / ns,
                gbs_all=step * iters / ns * n_sm)


def reference(name: str, src, sa, sw, programs: int, iters: int):
    """The output tiles [programs, 64, N] the CTAs compute (float64 from the same source boxes and scales): what
    ``check`` compares ``_kloop``'s with. A box that runs past the source's end reads zeros there, as TMA does."""
    import torch
    i8, np_, bn, fold, kd = FORMS[name]
    rows = src.shape[0]
    srcp = torch.cat([src.double(), torch.zeros(bn, kd, dtype=torch.float64, device=src.device)])
    out = torch.zeros(programs, 64, bn, dtype=torch.float64, device=src.device)
    for p in range(programs):
        a_base, w_base = (p * 977 * 64) % rows, (p * 331 * 64) % rows
        acc = torch.zeros(64, bn, dtype=torch.float64, device=src.device)
        ints = torch.zeros_like(acc)    # the integer accumulators combined (hh 2^14 + mix 2^7 + ll): exact in float64
        for i in range(iters):
            a0, a1 = (srcp[(a_base + (2 * i + h) * 64) % rows:][:64] for h in range(2))
            w0, w1 = (srcp[(w_base + (2 * i + h) * bn) % rows:][:bn] for h in range(2))
            if not i8:
                acc += a1 @ w0.T + a0 @ w1.T + a0 @ w0.T
                continue
            ints += 16384 * (a0 @ w0.T) + 128 * (a0 @ w1.T + a1 @ w0.T) + (a1 @ w1.T if np_ == 4 else 0)
            if fold and (i + 1) % fold == 0:
                blk = (i // fold) % 64
                acc += ints * sa[blk * 64:(blk + 1) * 64, None].double() * sw[None, blk * bn:(blk + 1) * bn].double()
                ints.zero_()
        out[p] = acc if (fold or not i8) else ints
    return out


def check(name: str, iters: int = 16, stages: int = 4, programs: int = 8) -> dict:
    """``_kloop``'s output tiles on the GPU against ``reference``: the largest difference over the largest
    |reference| (int8 forms unfolded: exact integers, so 0 up to fp32's rounding of the combination)."""
    import torch
    i8, _, bn, _, kd = FORMS[name]
    rows = 8192
    a_d, w_d, sa, sw, src = _descs(i8, bn, rows, "cuda", kd)
    tiles = torch.zeros(programs, 64, bn, device="cuda")
    out = torch.zeros(programs, 4, dtype=torch.int64, device="cuda")
    _kloop[(programs, )](a_d, w_d, sa, sw, out, tiles, rows, rows, CHECK=True, **_constexprs(name, iters, stages))
    torch.cuda.synchronize()
    ref = reference(name, src, sa, sw, programs, iters)
    err = ((tiles.double() - ref).abs().max() / ref.abs().max()).item()
    return dict(form=name, check_iters=iters, stages=stages, rel_err=err, ok=err < 1e-5)


def compile_form(name: str, iters: int = 16, stages: int = 4) -> dict:
    """``name`` compiled for sm_90a without a GPU: its wgmma (shape and types), TMA copies, registers, spills,
    shared memory and ptxas's serialization notes."""
    import collections
    import re

    from triton.runtime.jit import mangle_type

    from bench.common.sm90_report import compile_gluon, report
    i8, _, bn, _, kd = FORMS[name]
    a_d, w_d, _, _, _ = _descs(i8, bn, 65536, "cpu", kd)
    sig = {"a_d": mangle_type(a_d), "w_d": mangle_type(w_d), "sa_ptr": "*fp32", "sw_ptr": "*fp32",
           "out_ptr": "*i64", "tile_ptr": "*fp32", "a_rows": "i32", "w_rows": "i32"}
    k = compile_gluon(_kloop, sig, dict(_constexprs(name, iters, stages), CHECK=False), num_warps=4)
    ptx = k.asm["ptx"]
    r = report(k)
    return dict(wgmma=dict(collections.Counter(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+\.\w+\.\w+\.\w+)",
                                                           ptx))),
                tma=ptx.count("cp.async.bulk.tensor"), registers=r["registers"], spill_stores=r["spill_stores"],
                shared=r["shared"], serialized=r["wgmma_notes"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for kloop_rate.json (GPU)")
    ap.add_argument("--compile", action="store_true", help="compile each form for sm_90a (no GPU), print JSON")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    ap.add_argument("--stages", nargs="+", type=int, default=[4])
    ap.add_argument("--iters", type=int, default=2048)
    ap.add_argument("--per-sm", nargs="+", type=int, default=[1], help="CTAs an SM (2: two tiles' K loops an SM, "
                                                                       "as form ws's two consumers)")
    ap.add_argument("--programs", nargs="+", type=int, default=[0], help="CTAs in all (0: --per-sm an SM; fewer: "
                                                                         "fewer SMs streaming, as in a launch)")
    ap.add_argument("--mb", type=int, default=8, help="MB of each L2-resident source")
    ap.add_argument("--check", action="store_true", help="GPU: each form's output tiles against the float64 "
                                                          "reference first (a row per form; a failed one is named)")
    a = ap.parse_args(argv)
    if a.compile:
        print(json.dumps({f"{f}/s{s}": compile_form(f, stages=s) for f in a.forms for s in a.stages}))
        return 0
    if not a.out:
        raise SystemExit("kloop_rate: --out DIR (GPU) or --compile (CPU)")
    os.makedirs(a.out, exist_ok=True)
    rows = []
    if a.check:
        rows += [show(check(f)) for f in a.forms]
    for per_sm, progs in [(q, 0) for q in a.per_sm] + [(1, p) for p in a.programs if p]:
        for s in a.stages:
            for f in a.forms:
                try:
                    rows.append(show(measure(f, a.iters, s, a.mb, per_sm, progs)))
                except Exception as e:   # a ring too deep for shared memory (OutOfResources): the row says so
                    rows.append(show(dict(form=f, stages=s, per_sm=per_sm, error=f"{type(e).__name__}: {e}"[:120])))
    save(a.out, "kloop_rate.json", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
