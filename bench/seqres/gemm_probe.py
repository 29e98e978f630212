"""Can the GEMM phases hold more loads in flight? A GPU probe for docs/seqres.md (next step 1).

One presplit bf16x3 GEMM (c = a_lo·w_hi + a_hi·w_lo + a_hi·w_hi, fp32 accumulation; the megakernel's
operand format) over all B·S rows of one layer, as a persistent kernel (a program loops over output tiles,
like a megakernel phase), in these forms:

  ptr      tl.load of pointer tiles, software-pipelined with cp.async (today's megakernel loop)
  desc     tensor descriptors (TMA loads, mbarrier pipeline), no warp specialization
  desc_ws  tensor descriptors and ``tl.range(..., warp_specialize=True)``: Triton 3.6's Hopper
           warp specialization (a producer partition issues the TMA loads, two consumer warpgroups
           run the dots and the epilogue)
  ptr_lnfold  the pointer loop on the raw fp32 residual with the LayerNorm folded in (docs/seqres.md next
           steps): A loaded as fp32, split into bf16 hi/lo in registers at every K step, the row sums
           Σy, Σy² accumulated in the loop, out = rstd·acc − rstd·mean·s + c in the epilogue
  pair     the ptr loop with programs p and p + grid/2 on the same column tiles in lockstep (adjacent row blocks):
           in the megakernel the two programs an SM holds have the same rank in two groups, so they read the
           same weight tiles at about the same time
  pair_ca  the same with every cp.async compiled as ``cp.async.ca`` (cached in L1; Triton 3.6 emits ``.cg`` for every
           16-byte copy whatever the cache modifier, so the PTX is rewritten by a compile hook): can the second
           program of an SM take the weight tile from L1, as cuBLAS's 2-CTA clusters multicast one operand?
  k3       bf16x3 as ONE dot per K step over tripled K: A' = (a_lo, a_hi, a_hi) and W' = (w_hi, w_lo, w_hi) per
           K index (the megakernel's presplit_rows 3 weight rows), so no dot waits for another (ptxas serializes
           chained dots in a loop with an epilogue; one dot per step stays asynchronous), at 1.5x the bytes
  f16f8    the fp16 + fp8 scheme (``precision_probe f16f8``): a_hi·w_hi on fp16 operands (fp32 accumulator),
           the correction terms a_lo·w_hi + a_hi·w_lo on fp8 e4m3 operands scaled by powers of two into a
           second accumulator (fp8 wgmma runs at twice the fp16 rate: 2 units of MMA work instead of 3);
           the fp8 weight parts are stored [N, K] (K-major, as fp8 wgmma needs) and a_hi's fp8 copy is its
           own tensor (``f16f8r``: converted from the fp16 tile in registers, a register-operand wgmma)
  gluon    the same work written in Gluon (``gluon_gemm.mm3_gluon``): TMA into an mbarrier ring, the
           three wgmma of a K step asynchronous, one step in flight while the next is issued

against cuBLAS on the same work (bf16 over K tripled). Timed as 20 launches captured in a CUDA graph, replayed
between two CUDA events (no host launch cost, no cache flush: the megakernel's weights stay in L2 too), median
of 5 replays.

    python -m bench.seqres.gemm_probe 1 7 9 10 11 [--configs NAME ...] [--gemms ffn1 ...] [--out DIR]
    python -m bench.seqres.gemm_probe 1 --gemms ffn1 --configs ... --once   # one launch each, for ncu
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels.cases import load_case
from kernels.common.split import split_hi_lo
from kernels.common.tl_helpers import exp2_approx, split_bf16

# (name, form, BM, BN, BK, warps, stages)
CONFIGS = (
    ("ptr_64x128x32_s3", "ptr", 64, 128, 32, 4, 3),
    ("ptr_64x128x64_s3", "ptr", 64, 128, 64, 4, 3),
    ("nest_64x128x32_s3", "ptr_nest", 64, 128, 32, 4, 3),
    ("pair_64x128x32_s3", "pair", 64, 128, 32, 4, 3),
    ("pairca_64x128x32_s3", "pair_ca", 64, 128, 32, 4, 3),
    ("pair_64x128x32_s4", "pair", 64, 128, 32, 4, 4),
    ("pairca_64x128x32_s4", "pair_ca", 64, 128, 32, 4, 4),
    ("pairca_64x64x32_s4", "pair_ca", 64, 64, 32, 4, 4),
    ("k3_64x128x64_s3", "k3", 64, 128, 64, 4, 3),
    ("k3_64x128x64_s4", "k3", 64, 128, 64, 4, 4),
    ("k3_64x128x32_s6", "k3", 64, 128, 32, 4, 6),
    ("k3_64x128x128_s2", "k3", 64, 128, 128, 4, 2),
    ("k3_64x64x64_s4", "k3", 64, 64, 64, 4, 4),
    ("k3_64x64x128_s3", "k3", 64, 64, 128, 4, 3),
    ("nest_64x64x32_s3", "ptr_nest", 64, 64, 32, 4, 3),
    ("lnfold_64x128x32_s3", "ptr_lnfold", 64, 128, 32, 4, 3),
    ("lnfold_64x64x32_s3", "ptr_lnfold", 64, 64, 32, 4, 3),
    ("f16f8_64x128x32_s3", "f16f8", 64, 128, 32, 4, 3),
    ("f16f8_64x64x32_s3", "f16f8", 64, 64, 32, 4, 3),
    ("f16f8_64x64x64_s3", "f16f8", 64, 64, 64, 4, 3),
    ("f16f8_64x128x64_s3", "f16f8", 64, 128, 64, 4, 3),
    ("f16f8_64x128x64_s4", "f16f8", 64, 128, 64, 4, 4),
    ("f16f8_64x256x64_s3", "f16f8", 64, 256, 64, 4, 3),
    ("f16f8r_64x128x32_s3", "f16f8r", 64, 128, 32, 4, 3),
    ("f16f8r_64x128x64_s3", "f16f8r", 64, 128, 64, 4, 3),
    ("desc_64x128x64_s3", "desc", 64, 128, 64, 4, 3),
    ("desc_64x128x32_s4", "desc", 64, 128, 32, 4, 4),
    ("ws_64x128x64_s3", "desc_ws", 64, 128, 64, 4, 3),
    ("ws_64x128x32_s4", "desc_ws", 64, 128, 32, 4, 4),
    ("ws_64x64x64_s4", "desc_ws", 64, 64, 64, 4, 4),
    ("ws_64x128x64_s2", "desc_ws", 64, 128, 64, 4, 2),
    ("ws_64x64x32_s6", "desc_ws", 64, 64, 32, 4, 6),
    ("gl_64x128x32_s4", "gluon", 64, 128, 32, 4, 4),
    ("gl_64x128x64_s2", "gluon", 64, 128, 64, 4, 2),
    ("gl_64x128x64_s3", "gluon", 64, 128, 64, 4, 3),
    ("gl_64x64x32_s6", "gluon", 64, 64, 32, 4, 6),
    ("gl_64x256x32_s3", "gluon", 64, 256, 32, 4, 3),
    ("gl_128x128x32_s4_w8", "gluon", 128, 128, 32, 8, 4),
    ("gl_128x128x64_s3_w8", "gluon", 128, 128, 64, 8, 3),
    ("gl_128x256x32_s3_w8", "gluon", 128, 256, 32, 8, 3),
    ("glws_64x128x32_s4", "gluon_ws", 64, 128, 32, 4, 4),
    ("glws_64x128x64_s4", "gluon_ws", 64, 128, 64, 4, 4),
    ("glws_64x128x32_s4_2cta", "gluon_ws", 64, 128, 32, 4, 4),
    ("glws_64x256x32_s4", "gluon_ws", 64, 256, 32, 4, 4),
    ("glws_128x128x64_s3_w8", "gluon_ws", 128, 128, 64, 8, 3),
    ("glws_128x256x32_s3_w8", "gluon_ws", 128, 256, 32, 8, 3),
    ("glws_128x256x64_s2_w8", "gluon_ws", 128, 256, 64, 8, 2),
    # the split-output epilogue of QKV (bias) and FFN1 (bias + GELU) added (only on those GEMMs): the `tl`
    # loop, Gluon with the epilogue after the tile's last wait, and Gluon with the epilogue deferred behind the next
    # tile's first asynchronous wgmma (it runs while the tensor core works)
    ("ptre_64x128x32_s3", "ptr_epi", 64, 128, 32, 4, 3),
    ("gle_64x128x32_s4", "gluon_epi", 64, 128, 32, 4, 4),
    ("gle_64x128x64_s3", "gluon_epi", 64, 128, 64, 4, 3),
    ("gleo_64x128x32_s4", "gluon_epi_ov", 64, 128, 32, 4, 4),
    ("gleo_64x128x64_s3", "gluon_epi_ov", 64, 128, 64, 4, 3),
)


@triton.jit
def gelu_erf_poly(x, PTX: tl.constexpr):
    """Exact GELU, x * 0.5 * (1 + erf(x / sqrt(2))), with erf from Abramowitz & Stegun 7.1.26 (|error| of
    erf <= 1.5e-7, about one fp32 ulp of 1) instead of libdevice's erff: one polynomial with immediate
    coefficients, one reciprocal, one exp2 (PTX: the approximate ``rcp``/``ex2`` instructions, one MUFU each;
    else portable Triton ops, for the interpreter). The polynomial gives c = erfc(|x| / sqrt(2)) / 2 directly,
    so GELU = max(x, 0) - |x| c has no cancellation for x < 0 and no select."""
    d = 1.0 + 0.23164189906752 * tl.abs(x)   # 1 + p z, z = |x| / sqrt(2), p = 0.3275911
    e = x * (x * -0.7213475204444817)          # -z^2 log2(e)
    if PTX:
        t = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [d], dtype=tl.float32, is_pure=True,
                                      pack=1)
    else:
        t = 1.0 / d
    g = exp2_approx(e, PTX)
    # A&S coefficients a1..a5 halved, so c = erfc(z) / 2 = Phi(-|x|)
    p = t * (0.127414796 + t * (-0.142248368 + t * (0.7107068705 + t * (-0.7265760135 + t * 0.5307027145))))
    c = p * g
    # x >= 0: x - x c; x < 0: x c = -|x| c; both max(x, 0) - |x| c (one max and one fma, no select)
    return tl.maximum(x, 0.0) - tl.abs(x) * c


@triton.jit
def _tile_offsets(tm, tn, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Offsets of K step 0 of output tile (tm, tn): A [BM, BK] (row-major [M, K]) and W [BK, BN] (row-major [K, N])."""
    a_off = (tm * BM + tl.arange(0, BM))[:, None] * K + tl.arange(0, BK)[None, :]
    w_off = tl.arange(0, BK)[:, None] * N + (tn * BN + tl.arange(0, BN))[None, :]
    return a_off, w_off


@triton.jit
def _tile_store(c, tm, tn, N, acc, BM: tl.constexpr, BN: tl.constexpr):
    tl.store(c + (tm * BM + tl.arange(0, BM))[:, None] * N + (tn * BN + tl.arange(0, BN))[None, :], acc)


@triton.jit
def _mm3_tile(ahi, alo, whi, wlo, c, tm, tn, N, K,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, NEST: tl.constexpr = False):
    """Output tile (tm, tn) of the presplit bf16x3 product, stored as fp32."""
    _tile_store(c, tm, tn, N, _mm3_acc(ahi, alo, whi, wlo, tm, tn, N, K, BM, BN, BK, STAGES, NEST), BM, BN)


@triton.jit
def _mm3_acc(ahi, alo, whi, wlo, tm, tn, N, K,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, NEST: tl.constexpr = False):
    """The accumulator of output tile (tm, tn): the K loop of the ``ptr`` form, one accumulator (NEST: the three
    terms in three accumulators, summed at the end, as the megakernel's ``gemm_loop: nested``)."""
    a_off, w_off = _tile_offsets(tm, tn, N, K, BM, BN, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    acc1 = tl.zeros([BM, BN], tl.float32)
    acc2 = tl.zeros([BM, BN], tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a_h = tl.load(ahi + a_off + k)
        a_l = tl.load(alo + a_off + k)
        w_h = tl.load(whi + w_off + k * N)
        w_l = tl.load(wlo + w_off + k * N)
        if NEST:
            acc1 = tl.dot(a_l, w_h, acc1)
            acc2 = tl.dot(a_h, w_l, acc2)
        else:
            acc = tl.dot(a_l, w_h, acc)
            acc = tl.dot(a_h, w_l, acc)
        acc = tl.dot(a_h, w_h, acc)
    if NEST:
        acc = acc + (acc1 + acc2)
    return acc


@triton.jit
def _mm3_ptr(ahi, alo, whi, wlo, c, M, N, K, NT,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, NEST: tl.constexpr = False):
    """Persistent loop over the output tiles (NEST: the ``ptr_nest`` form, three accumulators as the megakernel's
    ``gemm_loop: nested``)."""
    ntn = N // BN
    for t in range(tl.program_id(0), NT, tl.num_programs(0)):
        _mm3_tile(ahi, alo, whi, wlo, c, t // ntn, t % ntn, N, K, BM, BN, BK, STAGES, NEST)


@triton.jit
def _mm3_ptr_epi(ahi, alo, whi, wlo, bias, chi, clo, M, N, K, NT,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, EPI: tl.constexpr):
    """The ``ptr`` form with the megakernel's split-output epilogue (``*_epi`` forms): out = acc + bias, GELU of it
    when EPI == 2 (FFN1; the polynomial erf of ``gelu: poly``), split into bf16 hi/lo and stored (QKV, FFN1)."""
    ntn = N // BN
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    for t in range(tl.program_id(0), NT, tl.num_programs(0)):
        tm = t // ntn
        tn = t % ntn
        acc = _mm3_acc(ahi, alo, whi, wlo, tm, tn, N, K, BM, BN, BK, STAGES)
        acc += tl.load(bias + tn * BN + rn)[None, :]
        if EPI == 2:
            acc = gelu_erf_poly(acc, True)
        hi, lo = split_bf16(acc, True)
        offs = (tm * BM + rm)[:, None] * N + (tn * BN + rn)[None, :]
        tl.store(chi + offs, hi)
        tl.store(clo + offs, lo)


@triton.jit
def _mm3_pair_body(ahi, alo, whi, wlo, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   STAGES: tl.constexpr):
    """The ptr loop over the tiles of program p: with half = grid / 2 (the SM count: launched at 2 programs per
    SM, program p + half is the second program on program p's SM when the block scheduler fills the SMs in the
    same order twice), programs p and p + half take the same column tile tn at the same position of their tile
    sequence, on adjacent row blocks (2 tm' + p // half)."""
    half = tl.num_programs(0) // 2
    sub = tl.program_id(0) // half
    ntn = N // BN
    for t in range(tl.program_id(0) % half, (M // BM // 2) * ntn, half):
        _mm3_tile(ahi, alo, whi, wlo, c, 2 * (t // ntn) + sub, t % ntn, N, K, BM, BN, BK, STAGES)


@triton.jit
def _mm3_pair(ahi, alo, whi, wlo, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              STAGES: tl.constexpr):
    _mm3_pair_body(ahi, alo, whi, wlo, c, M, N, K, BM, BN, BK, STAGES)


@triton.jit
def _mm3_pair_ca(ahi, alo, whi, wlo, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 STAGES: tl.constexpr):
    """``_mm3_pair`` (its own function, so its cache entry is the rewritten one): compiled under ``ca_hook``."""
    _mm3_pair_body(ahi, alo, whi, wlo, c, M, N, K, BM, BN, BK, STAGES)


def ca_hook(backend, stages, options, language, capability):
    """Triton compile-stage hook: every ``cp.async.cg`` of the PTX becomes ``cp.async.ca`` (L1-allocating)."""
    make_ptx = stages["ptx"]
    stages["ptx"] = lambda src, metadata: make_ptx(src, metadata).replace("cp.async.cg.shared.global",
                                                                           "cp.async.ca.shared.global")


@contextlib.contextmanager
def _ca_compiles():
    """Every compile inside compiles afresh (no cached ``.cg`` binary is taken) under ``ca_hook``."""
    from triton import knobs
    old = knobs.runtime.add_stages_inspection_hook, knobs.compilation.always_compile
    knobs.runtime.add_stages_inspection_hook, knobs.compilation.always_compile = ca_hook, True
    try:
        yield
    finally:
        knobs.runtime.add_stages_inspection_hook, knobs.compilation.always_compile = old


def aot_pair_ca(bm: int = 64, bn: int = 128, bk: int = 32, stages: int = 3):
    """Compile ``_mm3_pair_ca`` under ``ca_hook`` for sm_90a without a GPU (tests: the hook still works with the
    installed Triton and leaves the PTX assemblable). Returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    fn = _mm3_pair_ca
    names = list(fn.arg_names)
    sig = {n: "*bf16" for n in ("ahi", "alo", "whi", "wlo")}
    sig.update(c="*fp32", M="i32", N="i32", K="i32", BM="constexpr", BN="constexpr", BK="constexpr",
               STAGES="constexpr")
    cex = dict(BM=bm, BN=bn, BK=bk, STAGES=stages)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("ahi", "alo", "whi", "wlo", "c", "M", "N", "K")}
    src = ASTSource(fn, sig, constexprs={(names.index(k),): v for k, v in cex.items()}, attrs=attrs)
    with _ca_compiles():
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


@triton.jit
def _mm1_ptr(a, w, c, M, N, K, NT,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """c = a @ w with one dot per K step (the k3 form: a, w are the tripled-K operands, K = 3 x the model's)."""
    ntn = N // BN
    for t in range(tl.program_id(0), NT, tl.num_programs(0)):
        tm = t // ntn
        tn = t % ntn
        a_off, w_off = _tile_offsets(tm, tn, N, K, BM, BN, BK)
        acc = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES):
            acc = tl.dot(tl.load(a + a_off + k), tl.load(w + w_off + k * N), acc)
        _tile_store(c, tm, tn, N, acc, BM, BN)


@triton.jit
def _mm_f16f8_ptr(ah, al8, ah8, wh, wh8t, wl8t, c, M, N, K, NT, inv_scale,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
                  A8_REG: tl.constexpr):
    """c = a_hi·w_hi (fp16) + (a_lo8·w_hi8 + a_hi8·w_lo8) · inv_scale (fp8 e4m3, w8 stored [N, K])."""
    ntn = N // BN
    for t in range(tl.program_id(0), NT, tl.num_programs(0)):
        tm = t // ntn
        tn = t % ntn
        a_off, w_off = _tile_offsets(tm, tn, N, K, BM, BN, BK)
        wt_off = (tn * BN + tl.arange(0, BN))[:, None] * K + tl.arange(0, BK)[None, :]
        acc = tl.zeros([BM, BN], tl.float32)
        acc8 = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES):
            a_h = tl.load(ah + a_off + k)
            a_l8 = tl.load(al8 + a_off + k)
            if A8_REG:
                a_h8 = a_h.to(tl.float8e4nv)
            else:
                a_h8 = tl.load(ah8 + a_off + k)
            w_h = tl.load(wh + w_off + k * N)
            w_h8 = tl.load(wh8t + wt_off + k)
            w_l8 = tl.load(wl8t + wt_off + k)
            acc = tl.dot(a_h, w_h, acc)
            acc8 = tl.dot(a_l8, tl.trans(w_h8), acc8)
            acc8 = tl.dot(a_h8, tl.trans(w_l8), acc8)
        _tile_store(c, tm, tn, N, acc + acc8 * inv_scale, BM, BN)


def f16f8_operands(a: torch.Tensor, w: torch.Tensor):
    """The f16f8 scheme's parts of a [M, K] and w [K, N] (fp32), and the exact value they represent (fp32).

    a_hi, w_hi fp16; a_lo8 = fp8(a_lo · 2^11); a_hi8 = fp8(a_hi); w_hi8 = fp8(w_hi · s), w_lo8 = fp8(w_lo · 2^11 · s)
    with s the power of two putting max|w| below 224; the fp8 weight parts transposed to [N, K]."""
    f8 = torch.float8_e4m3fn
    ah = a.half()
    al = a - ah.float()
    wh = w.half()
    wl = w - wh.float()
    sa = 2.0 ** 11
    sw = 2.0 ** int(torch.floor(torch.log2(224.0 / w.abs().max())))
    al8, ah8 = (al * sa).to(f8), ah.float().to(f8)
    wh8, wl8 = (wh.float() * sw).to(f8), (wl * sa * sw).to(f8)
    val = ah.float() @ wh.float() + (al8.float() @ wh8.float() + ah8.float() @ wl8.float()) / (sa * sw)
    return (ah.contiguous(), al8.contiguous(), ah8.contiguous(), wh.contiguous(), wh8.t().contiguous(),
            wl8.t().contiguous(), 1.0 / (sa * sw)), val


@triton.jit
def _mm3_ptr_lnfold(y, whi, wlo, s_ptr, c_ptr, c, M, N, K, NT,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """LN(y)·W + b as rstd ⊙ (y·W') − (rstd·mean) ⊙ s + c: y fp32, split per K step; W' presplit."""
    ntn = N // BN
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    for t in range(tl.program_id(0), NT, tl.num_programs(0)):
        tm = t // ntn
        tn = t % ntn
        a_off = (tm * BM + rm)[:, None] * K + rk[None, :]
        w_off = rk[:, None] * N + (tn * BN + rn)[None, :]
        acc = tl.zeros([BM, BN], tl.float32)
        s1 = tl.zeros([BM], tl.float32)
        s2 = tl.zeros([BM], tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES):
            a = tl.load(y + a_off + k)
            s1 += tl.sum(a, 1)
            s2 += tl.sum(a * a, 1)
            a_h, a_l = split_bf16(a, True)
            w_h = tl.load(whi + w_off + k * N)
            w_l = tl.load(wlo + w_off + k * N)
            acc = tl.dot(a_l, w_h, acc)
            acc = tl.dot(a_h, w_l, acc)
            acc = tl.dot(a_h, w_h, acc)
        mean = s1 / K
        rstd = tl.rsqrt(s2 / K - mean * mean + 1e-5)
        sv = tl.load(s_ptr + tn * BN + rn)
        cv = tl.load(c_ptr + tn * BN + rn)
        out = rstd[:, None] * acc - (rstd * mean)[:, None] * sv[None, :] + cv[None, :]
        tl.store(c + (tm * BM + rm)[:, None] * N + (tn * BN + rn)[None, :], out)


@triton.jit
def _mm3_desc(ahi, alo, whi, wlo, c, M, N, K, NT,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, WS: tl.constexpr):
    da_hi = tl.make_tensor_descriptor(ahi, [M, K], [K, 1], [BM, BK])
    da_lo = tl.make_tensor_descriptor(alo, [M, K], [K, 1], [BM, BK])
    dw_hi = tl.make_tensor_descriptor(whi, [K, N], [N, 1], [BK, BN])
    dw_lo = tl.make_tensor_descriptor(wlo, [K, N], [N, 1], [BK, BN])
    ntn = N // BN
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    for t in range(tl.program_id(0), NT, tl.num_programs(0)):
        tm = t // ntn
        tn = t % ntn
        acc = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES, warp_specialize=WS):
            a_h = da_hi.load([tm * BM, k])
            a_l = da_lo.load([tm * BM, k])
            w_h = dw_hi.load([k, tn * BN])
            w_l = dw_lo.load([k, tn * BN])
            acc = tl.dot(a_l, w_h, acc)
            acc = tl.dot(a_h, w_l, acc)
            acc = tl.dot(a_h, w_h, acc)
        tl.store(c + (tm * BM + rm)[:, None] * N + (tn * BN + rn)[None, :], acc)


def shapes(case):
    M, D = case.B * case.S, case.D
    return {"qkv": (M, 3 * D, D), "oproj": (M, D, D), "ffn1": (M, 4 * D, D), "ffn2": (M, D, 4 * D)}


def _time_ms(fn, n=20, reps=5) -> float:
    """GPU time per call: ``n`` calls captured in one CUDA graph, replayed ``reps`` times between events
    (the Python launch of a kernel with descriptor arguments costs more than the small GEMMs themselves)."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / n)
    return statistics.median(out)


def _kernel_names(fn) -> list[str]:
    """Names of the GPU kernels one call of ``fn`` launches (torch.profiler), e.g. cuBLAS's tile and cluster."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def _slots(kernel, n_sm: int, cap: int = 0) -> int:
    """Programs that fit at once: n_sm × CTAs per SM by shared memory, registers and threads (at most ``cap``
    per SM when cap > 0: the megakernel runs 2)."""
    smem = kernel.metadata.shared
    threads = 32 * kernel.metadata.num_warps
    per_sm = min(233472 // max(1, smem + 1024), 65536 // max(1, kernel.n_regs * threads), 2048 // threads)
    return n_sm * max(1, min(per_sm, cap) if cap > 0 else per_sm)


def run_config(form, bm, bn, bk, nw, ns, ops, n_sm, ctas=1, once=False, extra_ops=None, cap=0):
    ahi, alo, whi, wlo, c, M, N, K = ops
    NT = (M // bm) * (N // bn)
    if form in ("gluon_epi", "gluon_epi_ov"):
        from .gluon_gemm import descriptors, instr_n, mm3_gluon_epi
        descs = descriptors(ahi, alo, whi, wlo, bm, bn, bk)
        bias, chi, clo, epi = extra_ops
        launch = lambda g: mm3_gluon_epi[(g,)](*descs, bias, chi, clo, N, K, NT, STAGES=ns,  # noqa: E731
                                               INSTR_N=instr_n(bm, bn, nw), EPI=epi,
                                               OVERLAP=form == "gluon_epi_ov", num_warps=nw)
    elif form == "ptr_epi":
        bias, chi, clo, epi = extra_ops
        launch = lambda g: _mm3_ptr_epi[(g,)](ahi, alo, whi, wlo, bias, chi, clo, M, N, K, NT, BM=bm, BN=bn,  # noqa: E731
                                              BK=bk, STAGES=ns, EPI=epi, num_warps=nw)
    elif form in ("gluon", "gluon_ws"):
        from .gluon_gemm import descriptors, instr_n, mm3_gluon, mm3_gluon_ws, ws_maxnreg
        descs = descriptors(ahi, alo, whi, wlo, bm, bn, bk)
        inn = instr_n(bm, bn, nw)
        fn = mm3_gluon if form == "gluon" else mm3_gluon_ws
        extra = {} if form == "gluon" else {"maxnreg": ws_maxnreg(nw, ctas)}
        launch = lambda g: fn[(g,)](*descs, c, N, K, NT, STAGES=ns, INSTR_N=inn, num_warps=nw, **extra)  # noqa: E731
    elif form == "ptr_lnfold":
        y32, svec, cvec = extra_ops
        launch = lambda g: _mm3_ptr_lnfold[(g,)](y32, whi, wlo, svec, cvec, c, M, N, K, NT, BM=bm, BN=bn,  # noqa: E731
                                                 BK=bk, STAGES=ns, num_warps=nw)
    elif form in ("f16f8", "f16f8r"):
        ah, al8, ah8, wh, wh8t, wl8t, inv = extra_ops
        launch = lambda g: _mm_f16f8_ptr[(g,)](ah, al8, ah8, wh, wh8t, wl8t, c, M, N, K, NT, inv, BM=bm,  # noqa: E731
                                               BN=bn, BK=bk, STAGES=ns, A8_REG=form == "f16f8r", num_warps=nw)
    elif form in ("pair", "pair_ca"):
        fn = _mm3_pair_ca if form == "pair_ca" else _mm3_pair
        launch = lambda g: fn[(2 * n_sm,)](ahi, alo, whi, wlo, c, M, N, K, BM=bm, BN=bn, BK=bk,  # noqa: E731
                                            STAGES=ns, num_warps=nw)
        if form == "pair_ca":  # compile now, under the hook
            with _ca_compiles():
                k = launch(n_sm * 2)
            assert "cp.async.ca." in k.asm["ptx"] and "cp.async.cg." not in k.asm["ptx"]
    elif form == "k3":
        a3, w3 = extra_ops
        launch = lambda g: _mm1_ptr[(g,)](a3, w3, c, M, N, 3 * K, NT, BM=bm, BN=bn, BK=bk,  # noqa: E731
                                          STAGES=ns, num_warps=nw)
    elif form in ("ptr", "ptr_nest"):
        launch = lambda g: _mm3_ptr[(g,)](ahi, alo, whi, wlo, c, M, N, K, NT, BM=bm, BN=bn, BK=bk,  # noqa: E731
                                          STAGES=ns, NEST=form == "ptr_nest", num_warps=nw)
    else:
        ws = form == "desc_ws"
        launch = lambda g: _mm3_desc[(g,)](ahi, alo, whi, wlo, c, M, N, K, NT, BM=bm, BN=bn, BK=bk,  # noqa: E731
                                           STAGES=ns, WS=ws, num_warps=nw)
    k = launch(n_sm)
    grid = min(NT, _slots(k, n_sm, cap))
    launch(grid)
    torch.cuda.synchronize()
    ms = float("nan") if once else _time_ms(lambda: launch(grid))
    return ms, grid, k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", type=int)
    ap.add_argument("--out", default=None)
    ap.add_argument("--configs", nargs="*", default=None)
    ap.add_argument("--gemms", nargs="*", default=None, help="of qkv oproj ffn1 ffn2 (default: all four)")
    ap.add_argument("--ctas-per-sm", type=int, default=0,
                    help="at most this many programs per SM (default: as many as fit; the megakernel runs 2)")
    ap.add_argument("--once", action="store_true",
                    help="no timing: each kernel launched at its persistent grid once after its compile launch "
                         "(cuBLAS once), for Nsight Compute")
    args = ap.parse_args()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for n in args.cases:
        case = load_case(f"case{n:02d}")
        for name, (M, N, K) in shapes(case).items():
            if args.gemms and name not in args.gemms:
                continue
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g)
            w = torch.randn(K, N, device="cuda", generator=g) / K ** 0.5
            ahi, alo = split_hi_lo(a)
            whi, wlo = split_hi_lo(w)
            ref = alo.float() @ whi.float() + ahi.float() @ wlo.float() + ahi.float() @ whi.float()
            fold_ops = ref_ln = None
            if any(f == "ptr_lnfold" and (not args.configs or nm in args.configs) for nm, f, *_ in CONFIGS):
                # the folded LayerNorm's operands (ptr_lnfold): a raw residual y, W' = w (gamma 1, beta 0),
                # s = column sums of W', c = 0; checked against LN(y) @ W' in fp32
                y32 = (a * 3.0 + 0.5).contiguous()
                w_f = whi.float() + wlo.float()
                fold_ops = (y32, w_f.sum(0).contiguous(), torch.zeros(N, device="cuda"))
                ref_ln = torch.nn.functional.layer_norm(y32, (K,), eps=1e-5) @ w_f
            f8_ops = ref_f8 = None
            if any(f.startswith("f16f8") and (not args.configs or nm in args.configs) for nm, f, *_ in CONFIGS):
                f8_ops, ref_f8 = f16f8_operands(a, w)
            # the k3 form's operands, interleaved per K index as the megakernel would store them
            a3i = torch.stack([alo, ahi, ahi], 2).reshape(M, 3 * K).contiguous()
            w3i = torch.stack([whi, wlo, whi], 1).reshape(3 * K, N).contiguous()
            a3 = torch.cat([alo, ahi, ahi], 1)
            w3 = torch.cat([whi, wlo, whi], 0)
            c = torch.empty(M, N, device="cuda")
            epi = {"qkv": 1, "ffn1": 2}.get(name, 0)
            epi_ops = ref_epi = None
            if epi:  # the *_epi forms: bias (+ GELU) and the split store into hi/lo outputs
                bias = torch.randn(N, device="cuda", generator=g) * 0.1
                epi_ops = (bias, torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
                           torch.empty(M, N, device="cuda", dtype=torch.bfloat16), epi)
                ref_epi = ref + bias
                if epi == 2:
                    ref_epi = torch.nn.functional.gelu(ref_epi)
            if args.once:
                torch.matmul(a3, w3)
                r = dict(case=n, gemm=name, M=M, N=N, K=K, layers=case.L, cublas_us=float("nan"))
            else:
                r = dict(case=n, gemm=name, M=M, N=N, K=K, layers=case.L,
                         cublas_us=1e3 * _time_ms(lambda: torch.matmul(a3, w3)),
                         cublas_kernels=_kernel_names(lambda: torch.matmul(a3, w3)))
            for cname, form, bm, bn, bk, nw, ns in CONFIGS:
                if args.configs and cname not in args.configs:
                    continue
                if M % bm or N % bn or (3 * K if form == "k3" else K) % bk or (form.startswith("pair") and M % (2 * bm)):
                    continue
                if "epi" in form and not epi:
                    continue
                try:
                    c.zero_()
                    if epi_ops:
                        epi_ops[1].zero_()
                        epi_ops[2].zero_()
                    ms, grid, k = run_config(form, bm, bn, bk, nw, ns, (ahi, alo, whi, wlo, c, M, N, K), n_sm,
                                             ctas=2 if cname.endswith("_2cta") else 1, once=args.once,
                                             extra_ops=(f8_ops if form.startswith("f16f8") else
                                                        (a3i, w3i) if form == "k3" else
                                                        epi_ops if "epi" in form else fold_ops),
                                             cap=args.ctas_per_sm)
                    want = ref_ln if form == "ptr_lnfold" else ref_f8 if form.startswith("f16f8") else ref
                    if "epi" in form:
                        err = float((epi_ops[1].float() + epi_ops[2].float() - ref_epi).abs().max())
                    else:
                        err = float((c - want).abs().max())
                    r[cname] = dict(us=1e3 * ms, grid=grid, regs=k.n_regs, smem=k.metadata.shared,
                                    warps=k.metadata.num_warps, max_err=err,
                                    tflops=2 * M * N * 3 * K / (ms * 1e-3) / 1e12)
                except Exception as e:  # a config that does not compile or launch is reported, not fatal
                    r[cname] = dict(error=f"{type(e).__name__}: {str(e)[:300]}")
            rows.append(r)
            print(json.dumps(r), flush=True)
        for cname, *_ in CONFIGS:
            us = [r[cname]["us"] for r in rows if r["case"] == n and "us" in r.get(cname, {})]
            if len(us) == 4:
                print(f"case {n}: {cname} {sum(us):.1f} us/layer", flush=True)
        print(f"case {n}: cublas {sum(r['cublas_us'] for r in rows if r['case'] == n):.1f} us/layer", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "gemm_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
