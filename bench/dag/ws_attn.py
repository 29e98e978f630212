"""What the `dag` kernel's attention task costs in a warp-specialized Gluon form, against today's `tl` task body.

"Results" 17 of docs/dag.md measured a GEMM chain link in the warp-specialized Gluon form (TMA loader warp, async
wgmma warpgroup, release warp: a 64 × 64 × 1024 tile's MMA 4.9–5.1 µs against ~8 in the `tl` loop) and left the
attention kind open ("The next kernel, as the probe frames it": "What the GPU has to show first: the attention kind
in this form (q once, k / v blocks through the ring)"). Today's attention task costs 5.4–10.2 µs of work per task in
the kernel's traces ("Results" 6: 6.6 / 5.4 / 10.2 / 9.1 µs on cases 2 / 3 / 4 / 12 with ``attn_stages: 2``), ~2 µs per
64-key block plus ~2.6 µs fixed. This probe runs one layer's attention tasks of each case of the family alone, in
both forms, on the same operands:

    task (b, h, qb): o[b, qb·64 : qb·64 + 64, h·dh : (h+1)·dh] = softmax(q kᵀ / √dh) v   (causal: keys ≤ queries)

q, k, v as bf16 hi/lo pairs in the kernel's head-major buffer (``[3, B, H, S, dh]``: q | k | v of one layer), q·kᵀ
and p·v each as the kernel's three bf16 products (``dot_split``: a_lo·b_hi + a_hi·b_lo + a_hi·b_hi), online
softmax on exp2 with ``qk_scale = log2(e)/√dh`` as ``_attn_block``, p split into bf16 hi/lo (``split_bf16``),
``acc / l`` stored split into the merged-heads ``[M, D]`` buffer (``_store_split``). 64-row query blocks, 64-key
blocks, dh = 64. Tasks are numbered longest first (query block descending, then b·H + h); program p runs tasks p,
p + grid, … (``--grid 0``: one program per task). Forms, one process each:

- ``tl``: a ``@triton.jit`` kernel whose program calls ``kernels.dag.kernel._attn_task`` (today's code) with the
  kernel's defaults: ``ATTN_STAGES`` 2, ``SCHEME_O`` bf16x3, ``DOT_PREC`` "ieee" (host.kernel_meta), 4 warps,
  compiled under the kernel's ``wgmma_chain: async_inflight`` passes.
- ``ws``: Gluon, warp-specialized. A 1-warp loader: TMA loads of the task's q hi/lo (once, into one of 2 q slots),
  then of k hi/lo and v hi/lo per 64-key block (causal: up to the query block) into a ring of ``STAGES`` slots, k and
  v on their own ready/empty mbarriers; it runs ahead into the next task of its program while the consumer computes
  (the q slots and the ring flow across tasks). One consumer warpgroup: S = q·kᵀ (q and k from shared memory, kᵀ a
  transposed view) on three async wgmma, the online softmax in the wgmma accumulator's layout, p split and handed to
  wgmma as the register A operand (``DotOperandLayout``: no shared-memory round trip), p·v on three async wgmma into
  the accumulator. Software-pipelined as FlashAttention-3 does it within one warpgroup: block j's q·kᵀ and block
  j − 1's p·v are issued together, the softmax of block j runs while p·v of j − 1 is in the tensor pipe, then the
  accumulator is rescaled. 2 ring slots and 2 q slots: 96 KB of buffers, 104 KB with the epilogue's layout
  conversion, and 128 registers a thread at launch (``maxnreg``; setmaxnreg gives the consumer 216, the loader 40):
  two programs fit an SM, as the kernel runs them.
- ``ws3``: ``ws`` with 3 ring slots (136 KB: one program per SM).
- ``ws0``: ``ws`` with the loader serial: a task's loads start only once the previous task is stored (as ``tl``).
- ``wsn``: ``ws`` without the FA3 overlap: per key block q·kᵀ, wait, softmax, rescale, p·v, wait (the order of
  ``_attn_block``).

``python -m bench.dag.ws_attn --cases 2 3 4 12 --forms tl --grid 0 --reps 20 --trace --out DIR`` (GPU): for each case
checks the form against a float64 softmax(q kᵀ/√dh) v of the split operands (q = hi + lo, …) on a launch into zeroed
outputs (relative error max|o − ref| / max|ref|, and the max |difference| to every other form whose output an earlier
process of the same ``--keep`` folder saved), then times back-to-back launches (CUDA events, median of 5 × reps; and
the same launches replayed from a CUDA graph, which leaves out the host's launch path — one layer's attention is
~10 µs of GPU time, less than an eager launch costs the host), and with ``--trace`` the per-task split from
``%globaltimer`` stamps (the consumer's task start, its first data, the task's stores issued; the loader's issue):
per case the median and the longest task, per query block for causal cases (the longest query block dominates a
layer's chain). One JSON line per (case, form); ``DIR/ws_attn.json`` collects the rows of every process (merged, written
atomically). Exceptions of one form are reported and the others go on. Tasks are independent (no waits between
programs), so any grid is safe; ``--grid N`` below the task count makes the ``ws`` forms persistent (the loader then
prefetches the next task's q / k / v while the consumer computes the current one). The relative error to expect:
that of ``emulate`` (the kernel's arithmetic on the CPU, reported as ``rel_error_emulated``; 4–7e-6 on the four cases
at ``--scale 1``).

The GPU call, one process per form (~10–20 s each)::

    for f in tl ws ws3 ws0 wsn; do timeout -k 5 90 python -m bench.dag.ws_attn --cases 2 3 4 12 --forms $f \
        --grid 0 --reps 20 --trace --out $OUT; done
    for f in tl ws ws3 ws0; do timeout -k 5 90 python -m bench.dag.ws_attn --cases 2 3 4 12 --forms $f \
        --grid 32 --reps 20 --trace --out $OUT; done

Without a GPU, ``python -m bench.dag.ws_attn --compile`` compiles the Gluon forms and the ``tl`` form for sm_90a and
prints warps, shared memory, registers, spills, whether ptxas serialized the wgmma, and the counts of wgmma
products (TTGIR ``warp_group_dot``), ``wgmma.mma_async``, ``cp.async.bulk.tensor`` and mbarrier operations (a CI
test runs it).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import time

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma_wait

from kernels.common.tl_helpers import globaltimer
from kernels.dag.kernel import _attn_task
from kernels.dag.ws_kernel import _overlap_blocks, _pv3, _qk3, _softmax  # (the product's form ws uses them)

BLOCK = 64  # query block, key block and dh (host side)
BQ = gl.constexpr(BLOCK)
BKV = gl.constexpr(BLOCK)
DH = gl.constexpr(BLOCK)
CASES = (2, 3, 4, 12)
# form -> Gluon options (STAGES: ring slots; AHEAD: the loader runs into the next task; OVERLAP: FA3 order)
WS_FORMS = {"ws": dict(STAGES=2, AHEAD=True, OVERLAP=True), "ws3": dict(STAGES=3, AHEAD=True, OVERLAP=True),
            "ws0": dict(STAGES=2, AHEAD=False, OVERLAP=True), "wsn": dict(STAGES=2, AHEAD=True, OVERLAP=False)}
# ptxas's registers per thread at launch: 128 lets two programs share an SM (256 threads each: the consumer
# warpgroup raised to 216 by setmaxnreg, the loader's warpgroup lowered to LOADER_REGS); ws3's 128 KB of ring and
# q slots allow one program per SM anyway, so it keeps Triton's default (256)
WS_MAXNREG = {"ws": 128, "ws3": None, "ws0": 128, "wsn": 128}
FORMS = ("tl", *WS_FORMS)
LOADER_REGS = gl.constexpr(40)  # the loader warp's registers (setmaxnreg); the consumer warpgroup gets the rest
# today's kernel: kernels/dag/host.kernel_meta and config/variant/dag.yaml
TL_META = dict(BLOCK_Q=BLOCK, BLOCK_KV=BLOCK, BDH=BLOCK, SCHEME_O="bf16x3", DOT_PREC="ieee", ATTN_STAGES=2, GPU=True,
               WGMMA_CHAIN="async_inflight")
TL_OPTIONS = dict(num_warps=4, num_stages=3)

_NOW = gl.constexpr("mov.u64 $0, %globaltimer;")


# --------------------------------------------------------------------------------------------------- Gluon form


@gluon.jit
def _stamp(trace_ptr, t, col: gl.constexpr, TRACE: gl.constexpr, lay: gl.constexpr):
    """trace[t, col] = %globaltimer (one lane of the partition stores it)."""
    if TRACE:
        n: gl.constexpr = lay.warps_per_cta[0] * 32
        o = gl.arange(0, n, layout=lay)
        now = gl.inline_asm_elementwise(_NOW, "=l,r", [o], dtype=gl.int64, is_pure=False, pack=1)
        gl.store(trace_ptr + t * 4 + col + o * 0, now, mask=o == 0)


@gluon.jit
def _task(t, B: gl.constexpr, S: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr):
    """Task t, longest first: (b·H + h, query block, key blocks it sees)."""
    NQB: gl.constexpr = S // BQ
    qb = NQB - 1 - t // (B * H)
    bh = t % (B * H)
    if CAUSAL:
        nkv = qb + 1
    else:
        nkv = qb * 0 + NQB
    return bh, qb, nkv


@gluon.jit
def _loader(qkv_hi_d, qkv_lo_d, q_hi, q_lo, k_hi, k_lo, v_hi, v_lo, bars, trace_ptr, pid, nprog, n_tasks,
            B: gl.constexpr, S: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
            QSLOTS: gl.constexpr, AHEAD: gl.constexpr, TRACE: gl.constexpr):
    """The TMA warp: per task q hi/lo into q slot i % QSLOTS, then k and v hi/lo of every key block it sees into the
    ring (global block counter g: slot g % STAGES, its empty barrier's phase from g // STAGES)."""
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, t_done = bars
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    nbytes: gl.constexpr = 2 * qkv_hi_d.block_type.nbytes
    PART: gl.constexpr = B * H * S  # rows of q (then k, then v) in the [3 · B·H·S, dh] view
    i = 0
    g = 0
    for t in range(pid, n_tasks, nprog):
        bh, qb, nkv = _task(t, B, S, H, CAUSAL)
        qs = i % QSLOTS
        if AHEAD:  # the q slot of task i - QSLOTS is free once that task's last q·kᵀ is done
            mbarrier.wait(q_empty.index(qs), ((i // QSLOTS) & 1) ^ 1)
        else:  # serial: task i - 1 stored first
            mbarrier.wait(t_done.index(0), (i - 1) & 1, pred=i > 0)
        mbarrier.expect(q_ready.index(qs), nbytes)
        tma.async_copy_global_to_shared(qkv_hi_d, [bh * S + qb * BQ, 0], q_ready.index(qs), q_hi.index(qs))
        tma.async_copy_global_to_shared(qkv_lo_d, [bh * S + qb * BQ, 0], q_ready.index(qs), q_lo.index(qs))
        _stamp(trace_ptr, t, 0, TRACE, lay)
        krow = PART + bh * S
        for j in range(nkv):
            slot = g % STAGES
            ph = ((g // STAGES) & 1) ^ 1
            mbarrier.wait(k_empty.index(slot), ph)
            mbarrier.expect(k_ready.index(slot), nbytes)
            tma.async_copy_global_to_shared(qkv_hi_d, [krow + j * BKV, 0], k_ready.index(slot), k_hi.index(slot))
            tma.async_copy_global_to_shared(qkv_lo_d, [krow + j * BKV, 0], k_ready.index(slot), k_lo.index(slot))
            mbarrier.wait(v_empty.index(slot), ph)
            mbarrier.expect(v_ready.index(slot), nbytes)
            tma.async_copy_global_to_shared(qkv_hi_d, [PART + krow + j * BKV, 0], v_ready.index(slot),
                                            v_hi.index(slot))
            tma.async_copy_global_to_shared(qkv_lo_d, [PART + krow + j * BKV, 0], v_ready.index(slot),
                                            v_lo.index(slot))
            g += 1
        i += 1


@gluon.jit
def _consumer(q_hi, q_lo, k_hi, k_lo, v_hi, v_lo, bars, o_hi_ptr, o_lo_ptr, trace_ptr, pid, nprog, n_tasks, qk_scale,
              B: gl.constexpr, S: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
              QSLOTS: gl.constexpr, OVERLAP: gl.constexpr, TRACE: gl.constexpr, num_warps: gl.constexpr):
    """The wgmma warpgroup: per task the key blocks' products and the online softmax, then acc / l stored split."""
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, t_done = bars
    D: gl.constexpr = H * DH
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BKV, 16])
    dot: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    out: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // DH, DH // 8], [num_warps, 1], [1, 0])
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    row_l: gl.constexpr = gl.SliceLayout(1, mma)
    om = gl.arange(0, BQ, layout=gl.SliceLayout(1, out))
    on = gl.arange(0, DH, layout=gl.SliceLayout(0, out))
    zero = gl.zeros([BQ, BKV], gl.float32, layout=mma)
    i = 0
    g = 0
    for t in range(pid, n_tasks, nprog):
        bh, qb, nkv = _task(t, B, S, H, CAUSAL)
        qs = i % QSLOTS
        _stamp(trace_ptr, t, 1, TRACE, lay)
        mbarrier.wait(q_ready.index(qs), (i // QSLOTS) & 1)
        qh = q_hi.index(qs)
        ql = q_lo.index(qs)
        m_i = gl.full([BQ], float("-inf"), gl.float32, layout=row_l)
        l_i = gl.zeros([BQ], gl.float32, layout=row_l)
        acc = gl.zeros([BQ, DH], gl.float32, layout=mma)
        if OVERLAP:
            # key block 0: q·kᵀ and the softmax; its p·v goes out with block 1's q·kᵀ (``_overlap_blocks``)
            mbarrier.wait(k_ready.index(g % STAGES), (g // STAGES) & 1)
            _stamp(trace_ptr, t, 2, TRACE, lay)
            acc, l_i = _overlap_blocks(qh, ql, k_hi, k_lo, v_hi, v_lo, k_ready, k_empty, v_ready, v_empty,
                                       q_empty.index(qs), g, nkv, qk_scale, zero, m_i, l_i, acc, CAUSAL, STAGES, False,
                                       mma, dot, 1)
        else:  # _attn_block's order: q·kᵀ, wait, softmax, rescale, p·v, wait
            for j in range(nkv):
                cur = (g + j) % STAGES
                ph = ((g + j) // STAGES) & 1
                mbarrier.wait(k_ready.index(cur), ph)
                if j == 0:
                    _stamp(trace_ptr, t, 2, TRACE, lay)
                s = _qk3(qh, ql, k_hi.index(cur), k_lo.index(cur), zero)
                s = warpgroup_mma_wait(0, deps=(s, ))
                mbarrier.arrive(k_empty.index(cur))
                mbarrier.arrive(q_empty.index(qs), pred=j == nkv - 1)
                m_i, alpha, l_i, p_hi, p_lo = _softmax(s, m_i, l_i, qk_scale, j == nkv - 1, CAUSAL, mma, dot)
                acc = acc * alpha[:, None]
                mbarrier.wait(v_ready.index(cur), ph)
                acc = _pv3(p_hi, p_lo, v_hi.index(cur), v_lo.index(cur), acc)
                acc, p_hi, p_lo = warpgroup_mma_wait(0, deps=(acc, p_hi, p_lo))
                mbarrier.arrive(v_empty.index(cur))
        g += nkv
        o = acc / l_i[:, None]
        hi = o.to(gl.bfloat16)
        lo = (o - hi.to(gl.float32)).to(gl.bfloat16)
        b = bh // H
        h = bh % H
        offs = (b * S + qb * BQ + om)[:, None] * D + (h * DH + on)[None, :]
        gl.store(o_hi_ptr + offs, gl.convert_layout(hi, out))
        gl.store(o_lo_ptr + offs, gl.convert_layout(lo, out))
        _stamp(trace_ptr, t, 3, TRACE, lay)
        mbarrier.arrive(t_done.index(0))
        i += 1


@gluon.jit
def attn_ws(qkv_hi_d, qkv_lo_d, o_hi_ptr, o_lo_ptr, trace_ptr, n_tasks, qk_scale, B: gl.constexpr, S: gl.constexpr,
            H: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr, AHEAD: gl.constexpr, OVERLAP: gl.constexpr,
            TRACE: gl.constexpr, num_warps: gl.constexpr):
    """One layer's attention tasks, warp-specialized: the consumer warpgroup (default partition) and the TMA
    loader warp. ``qkv_*_d``: TMA descriptors over the head-major q | k | v buffer as [3·B·H·S, dh], 64 × 64 blocks."""
    QSLOTS: gl.constexpr = 2 if AHEAD else 1
    sl: gl.constexpr = qkv_hi_d.layout
    q_hi = gl.allocate_shared_memory(gl.bfloat16, [QSLOTS, BQ, DH], sl)
    q_lo = gl.allocate_shared_memory(gl.bfloat16, [QSLOTS, BQ, DH], sl)
    k_hi = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BKV, DH], sl)
    k_lo = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BKV, DH], sl)
    v_hi = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BKV, DH], sl)
    v_lo = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BKV, DH], sl)
    q_ready = gl.allocate_shared_memory(gl.int64, [QSLOTS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [QSLOTS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    t_done = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    for q in gl.static_range(QSLOTS):
        mbarrier.init(q_ready.index(q), count=1)
        mbarrier.init(q_empty.index(q), count=1)
    for q in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(q), count=1)
        mbarrier.init(k_empty.index(q), count=1)
        mbarrier.init(v_ready.index(q), count=1)
        mbarrier.init(v_empty.index(q), count=1)
    mbarrier.init(t_done.index(0), count=1)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    bars = (q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, t_done)
    gl.warp_specialize([
        (_consumer, (q_hi, q_lo, k_hi, k_lo, v_hi, v_lo, bars, o_hi_ptr, o_lo_ptr, trace_ptr, pid, nprog, n_tasks,
                     qk_scale, B, S, H, CAUSAL, STAGES, QSLOTS, OVERLAP, TRACE, num_warps)),
        (_loader, (qkv_hi_d, qkv_lo_d, q_hi, q_lo, k_hi, k_lo, v_hi, v_lo, bars, trace_ptr, pid, nprog, n_tasks, B, S,
                   H, CAUSAL, STAGES, QSLOTS, AHEAD, TRACE)),
    ], [1], [LOADER_REGS])


# ------------------------------------------------------------------------------------------------------ tl form


@triton.jit
def attn_tl(qkv_hi_ptr, qkv_lo_ptr, o_hi_ptr, o_lo_ptr, trace_ptr, n_tasks, qk_scale,
            B: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
            CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BDH: tl.constexpr,
            SCHEME_O: tl.constexpr, DOT_PREC: tl.constexpr, ATTN_STAGES: tl.constexpr, GPU: tl.constexpr,
            WGMMA_CHAIN: tl.constexpr, TRACE: tl.constexpr):
    """Today's attention task body (``kernels.dag.kernel._attn_task``, layer 0) on the same task numbering."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    NQB: tl.constexpr = S // BLOCK_Q
    for t in range(pid, n_tasks, nprog):
        qb = NQB - 1 - t // (B * H)
        bh = t % (B * H)
        if TRACE:
            tl.store(trace_ptr + 4 * t, globaltimer(pid))
        _attn_task(0, bh // H, bh % H, qb, qkv_hi_ptr, qkv_lo_ptr, o_hi_ptr, o_lo_ptr, qk_scale, B, S, D, H, DH, CAUSAL,
                   BLOCK_Q, BLOCK_KV, BDH, SCHEME_O, DOT_PREC, ATTN_STAGES, GPU)
        if TRACE:
            tl.store(trace_ptr + 4 * t + 3, globaltimer(pid))


def _tl_context():
    """The kernel's compile-time wgmma passes (``host.compile_context`` with the default ``wgmma_chain``)."""
    from kernels.dag.host import compile_context
    return compile_context(dict(wgmma_chain=TL_META["WGMMA_CHAIN"]))


# ----------------------------------------------------------------------------------------------- host / reference


def case_shape(n: int) -> dict:
    """B, S, H, dh, D, causal of case ``n`` (config/case)."""
    from kernels import load_case
    c = load_case(n)
    return dict(B=c.B, S=c.S, H=c.H, DH=c.dh, D=c.D, causal=bool(c.causal), name=c.name)


def split_bf16(x):
    """hi, lo bf16 parts of an fp32 tensor (round to nearest each, as ``split_bf16`` on the GPU)."""
    import torch
    hi = x.to(torch.bfloat16)
    lo = (x - hi.float()).to(torch.bfloat16)
    return hi, lo


def make_qkv(B: int, S: int, H: int, DH: int, seed: int = 0, scale: float = 1.0):
    """q | k | v of one layer, head-major [3, B, H, S, dh], as bf16 hi/lo parts (CPU)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(3, B, H, S, DH, generator=gen, dtype=torch.float64) * scale).float()
    return split_bf16(x)


def reference(qkv_hi, qkv_lo, causal: bool):
    """float64 softmax(q kᵀ / √dh) v from the split operands (q = hi + lo, …), merged heads: [B·S, H·dh]."""
    import torch
    x = qkv_hi.double() + qkv_lo.double()
    q, k, v = x[0], x[1], x[2]  # [B, H, S, dh]
    B, H, S, DH = q.shape
    s = q @ k.transpose(-1, -2) / math.sqrt(DH)
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.permute(0, 2, 1, 3).reshape(B * S, H * DH)


def emulate(qkv_hi, qkv_lo, causal: bool):
    """The kernel's arithmetic on the CPU (fp32): the online softmax over 64-key blocks with q·kᵀ and p·v on the
    three bf16 products, p split as ``split_bf16``, acc / l split as ``_store_split``; merged heads [B·S, H·dh]
    (float64 of hi + lo). The GPU forms' relative error should be of the size of this one's (fp32 sums in another
    order, ex2.approx)."""
    import torch
    qh, kh, vh = (t.float() for t in qkv_hi)
    ql, kl, vl = (t.float() for t in qkv_lo)
    B, H, S, DH = qh.shape
    scale = math.log2(math.e) / math.sqrt(DH)
    part = lambda x: (x.to(torch.bfloat16).float(), (x - x.to(torch.bfloat16).float()).to(torch.bfloat16).float())
    out = torch.empty(B, H, S, DH)
    nqb = S // BLOCK
    for qb in range(nqb):
        r = slice(qb * BLOCK, (qb + 1) * BLOCK)
        m = torch.full((B, H, BLOCK), float("-inf"))
        l = torch.zeros(B, H, BLOCK)
        acc = torch.zeros(B, H, BLOCK, DH)
        for j in range(qb + 1 if causal else nqb):
            c = slice(j * BLOCK, (j + 1) * BLOCK)
            kt_h, kt_l = kh[:, :, c].transpose(-1, -2), kl[:, :, c].transpose(-1, -2)
            s = ql[:, :, r] @ kt_h + qh[:, :, r] @ kt_l + qh[:, :, r] @ kt_h
            if causal and j == qb:
                s = s.masked_fill(torch.ones(BLOCK, BLOCK, dtype=torch.bool).triu(1), float("-inf"))
            m_new = torch.maximum(m, s.amax(-1) * scale)
            alpha = torch.exp2(m - m_new)
            p = torch.exp2(s * scale - m_new[..., None])
            l = l * alpha + p.sum(-1)
            p_hi, p_lo = part(p)
            acc = acc * alpha[..., None] + (p_lo @ vh[:, :, c] + p_hi @ vl[:, :, c] + p_hi @ vh[:, :, c])
            m = m_new
        out[:, :, r] = acc / l[..., None]
    o_hi, o_lo = part(out)
    return (o_hi.double() + o_lo.double()).permute(0, 2, 1, 3).reshape(B * S, H * DH)


class Problem:
    """One layer's attention of a case on the GPU: operands, outputs, trace, and a launcher per form."""

    def __init__(self, case: int, seed: int = 0, scale: float = 1.0, device: str = "cuda"):
        import torch
        sh = case_shape(case)
        self.case, self.name = case, sh["name"]
        self.B, self.S, self.H, self.DH, self.D, self.causal = (sh[k] for k in ("B", "S", "H", "DH", "D", "causal"))
        if self.DH != BLOCK or self.S % BLOCK:
            raise ValueError(f"ws_attn: case {case} has dh={self.DH}, S={self.S}; the probe needs dh = 64 and S a "
                             "multiple of 64")
        hi, lo = make_qkv(self.B, self.S, self.H, self.DH, seed, scale)
        self.ref = reference(hi, lo, self.causal)
        emu = emulate(hi, lo, self.causal)
        self.rel_error_emulated = float((emu - self.ref).abs().max() / self.ref.abs().max())
        self.qkv_hi, self.qkv_lo = hi.to(device).contiguous(), lo.to(device).contiguous()
        self.M = self.B * self.S
        self.o_hi = torch.zeros(self.M, self.D, dtype=torch.bfloat16, device=device)
        self.o_lo = torch.zeros_like(self.o_hi)
        self.n_tasks = self.B * self.H * (self.S // BLOCK)
        self.trace = torch.zeros(self.n_tasks, 4, dtype=torch.int64, device=device)
        self.qk_scale = math.log2(math.e) / math.sqrt(self.DH)
        self._descs = None

    def descs(self):
        if self._descs is None:
            from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
            lay = gl.NVMMASharedLayout.get_default_for([BLOCK, BLOCK], gl.bfloat16)
            self._descs = [TensorDescriptor(t.view(-1, self.DH), [t.numel() // self.DH, self.DH], [self.DH, 1],
                                            [BLOCK, BLOCK], lay) for t in (self.qkv_hi, self.qkv_lo)]
        return self._descs

    def launch(self, form: str, grid: int = 0, trace: bool = False):
        grid = (min(grid, self.n_tasks) if grid else self.n_tasks,)
        if form == "tl":
            attn_tl[grid](self.qkv_hi, self.qkv_lo, self.o_hi, self.o_lo, self.trace, self.n_tasks, self.qk_scale,
                          B=self.B, S=self.S, D=self.D, H=self.H, DH=self.DH, CAUSAL=self.causal, TRACE=trace,
                          **TL_META, **TL_OPTIONS)
        else:
            reg = {"maxnreg": WS_MAXNREG[form]} if WS_MAXNREG[form] else {}
            attn_ws[grid](*self.descs(), self.o_hi, self.o_lo, self.trace, self.n_tasks, self.qk_scale, B=self.B,
                          S=self.S, H=self.H, CAUSAL=self.causal, TRACE=trace, num_warps=4, **WS_FORMS[form], **reg)

    def output(self):
        return self.o_hi.double() + self.o_lo.double()

    def rel_error(self) -> float:
        out = self.output().cpu()
        return float((out - self.ref).abs().max() / self.ref.abs().max())


def _trace_stats(p: Problem, tr) -> dict:
    """Per-task durations (µs) from the stamps [issue, consumer start, first data, stored]: ``task`` = consumer start
    → stored (what a program spends on it), ``from_issue`` = the loader's issue → stored, ``first_data`` = consumer
    start → first q/k ready; median and max over the tasks, and per query block (causal: the last dominates)."""
    tr = tr.double()
    task = (tr[:, 3] - tr[:, 1]) / 1000
    issue = (tr[:, 3] - tr[:, 0]) / 1000
    first = (tr[:, 2] - tr[:, 1]) / 1000
    med = lambda x: float(x.median())
    nqb = p.S // BLOCK
    per_qb = {}
    for qb in range(nqb):  # task t has query block nqb - 1 - t // (B·H)
        lo = (nqb - 1 - qb) * p.B * p.H
        sel = task[lo:lo + p.B * p.H]
        per_qb[str(qb)] = dict(median=round(med(sel), 3), max=round(float(sel.max()), 3))
    return dict(task_median_us=round(med(task), 3), task_max_us=round(float(task.max()), 3),
                from_issue_median_us=round(med(issue), 3), from_issue_max_us=round(float(issue.max()), 3),
                first_data_median_us=round(med(first), 3),
                span_us=round(float((tr[:, 3].max() - tr[:, 0].min()) / 1000), 3), per_query_block=per_qb)


def measure(case: int, form: str, grid: int, reps: int, trace: bool, keep: str | None, seed: int = 0,
            scale: float = 1.0) -> dict:
    import torch
    p = Problem(case, seed, scale)
    rec = dict(case=case, form=form, grid=min(grid, p.n_tasks) if grid else p.n_tasks, tasks=p.n_tasks, B=p.B,
               S=p.S, H=p.H, causal=p.causal, rel_error_emulated=p.rel_error_emulated)
    t0 = time.time()
    if form == "tl":
        with _tl_context():
            p.launch(form, grid)
    else:
        p.launch(form, grid)
    torch.cuda.synchronize()
    rec["compile_s"] = round(time.time() - t0, 1)
    p.o_hi.zero_()
    p.o_lo.zero_()
    p.launch(form, grid)
    torch.cuda.synchronize()
    rec["rel_error"] = p.rel_error()
    out = p.output().float().cpu()
    if keep:  # the other forms' outputs of this input (earlier processes), then this one's for the later ones
        os.makedirs(keep, exist_ok=True)
        stem, me = f"case{case:02d}_s{seed}_x{scale:g}_", f"{form}_g{rec['grid']}"
        diffs = {}
        for f in sorted(glob.glob(os.path.join(keep, stem + "*.pt"))):
            other = os.path.basename(f)[len(stem):-3]
            if other != me:
                diffs[other] = float((torch.load(f) - out).abs().max())
        rec["max_abs_diff_vs"] = diffs
        tmp = os.path.join(keep, f".{stem}{me}.tmp")
        torch.save(out, tmp)
        os.replace(tmp, os.path.join(keep, f"{stem}{me}.pt"))
    for _ in range(3):
        p.launch(form, grid)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        e0.record()
        for _ in range(reps):
            p.launch(form, grid)
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1000 / reps)
    rec["us_per_launch"] = round(sorted(times)[len(times) // 2], 3)
    try:  # the same launches from a CUDA graph: no host launch path between them
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            p.launch(form, grid)
        torch.cuda.current_stream().wait_stream(s)
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            for _ in range(reps):
                p.launch(form, grid)
        cg.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            e0.record()
            cg.replay()
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) * 1000 / reps)
        rec["us_per_launch_graph"] = round(sorted(times)[len(times) // 2], 3)
    except Exception as e:  # noqa: BLE001 (reported; the eager timing stands)
        rec["graph_error"] = f"{type(e).__name__}: {e}"[:300]
    rec["rel_error_after_timing"] = p.rel_error()
    if trace:
        p.trace.zero_()
        if form == "tl":
            with _tl_context():
                p.launch(form, grid, trace=True)
        else:
            p.launch(form, grid, trace=True)
        torch.cuda.synchronize()
        tr = p.trace.cpu()
        if form == "tl":  # one stamp at the task's start: issue = consumer start = first data
            tr[:, 1] = tr[:, 0]
            tr[:, 2] = tr[:, 0]
        rec["trace"] = _trace_stats(p, tr)
        rec["rel_error_traced"] = p.rel_error()
    return rec


# ------------------------------------------------------------------------------------------ compile (no GPU)


def _ptx_counts(ptx: str, ttgir: str) -> dict:
    return dict(products=ttgir.count("ttng.warp_group_dot "), wgmma=ptx.count("wgmma.mma_async"),
                tma=ptx.count("cp.async.bulk.tensor"), mbarrier_wait=ptx.count("mbarrier.try_wait"),
                mbarrier_arrive=ptx.count("mbarrier.arrive"), mbarrier_expect=ptx.count("expect_tx"),
                setmaxnreg=ptx.count("setmaxnreg"), cp_async=ptx.count("cp.async.cg.shared.global"),
                globaltimer=ptx.count("%globaltimer"))


def _resources(k) -> dict:
    from bench.common.sm90_report import report
    r = report(k)
    out = dict(warps=k.metadata.num_warps, shared=k.metadata.shared, registers=r["registers"],
               spills=f"{r['spill_stores']}/{r['spill_loads']}", wgmma_serialized=r["wgmma_serialized"])
    try:
        from bench.dag.aot_check import sass_counts
        sc = sass_counts(k)
        out.update(sass=sc["instructions"], hgmma=sc["hgmma"])
    except Exception as e:  # noqa: BLE001 (no nvdisasm: the PTX counts stand)
        out["sass_error"] = str(e)[:200]
    return out


def compile_ws(case: int, form: str = "ws", trace: bool = False) -> dict:
    """Compile ``attn_ws`` for sm_90a without a GPU with case ``case``'s shape and ``form``'s options."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from bench.common.sm90_report import compile_gluon
    sh = case_shape(case)
    rows = 3 * sh["B"] * sh["H"] * sh["S"]
    t = torch.empty(rows, BLOCK, dtype=torch.bfloat16)
    lay = gl.NVMMASharedLayout.get_default_for([BLOCK, BLOCK], gl.bfloat16)
    descs = [TensorDescriptor(t, [rows, BLOCK], [BLOCK, 1], [BLOCK, BLOCK], lay)] * 2
    names = list(attn_ws.arg_names)
    sig = {n: mangle_type(d) for n, d in zip(names[:2], descs)}
    sig.update(o_hi_ptr="*bf16", o_lo_ptr="*bf16", trace_ptr="*i64", n_tasks="i32", qk_scale="fp32")
    cex = dict(B=sh["B"], S=sh["S"], H=sh["H"], CAUSAL=sh["causal"], TRACE=trace, num_warps=4, **WS_FORMS[form])
    t0 = time.time()
    reg = {"maxnreg": WS_MAXNREG[form]} if WS_MAXNREG[form] else {}
    k = compile_gluon(attn_ws, sig, cex, ("o_hi_ptr", "o_lo_ptr", "trace_ptr", "n_tasks"), num_warps=4, **reg)
    rec = dict(case=case, form=form, compile_s=round(time.time() - t0, 1))
    rec.update(_resources(k))
    rec.update(_ptx_counts(k.asm["ptx"], k.asm["ttgir"]))
    rec["setmaxnreg_values"] = sorted({int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)",
                                                                  k.asm["ptx"])})
    return rec


def compile_tl(case: int, trace: bool = False) -> dict:
    """Compile ``attn_tl`` (today's ``_attn_task``) for sm_90a without a GPU, under the kernel's wgmma passes."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sh = case_shape(case)
    names = list(attn_tl.arg_names)
    sig = dict(qkv_hi_ptr="*bf16", qkv_lo_ptr="*bf16", o_hi_ptr="*bf16", o_lo_ptr="*bf16", trace_ptr="*i64",
               n_tasks="i32", qk_scale="fp32")
    cex = dict(B=sh["B"], S=sh["S"], D=sh["D"], H=sh["H"], DH=sh["DH"], CAUSAL=sh["causal"], TRACE=trace, **TL_META)
    sig.update({n: "constexpr" for n in cex})
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in sig if n.endswith("_ptr") or n == "n_tasks"}
    src = ASTSource(attn_tl, sig, constexprs={(names.index(k),): v for k, v in cex.items()}, attrs=attrs)
    t0 = time.time()
    with _tl_context():
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(TL_OPTIONS))
    rec = dict(case=case, form="tl", compile_s=round(time.time() - t0, 1))
    rec.update(_resources(k))
    rec.update(_ptx_counts(k.asm["ptx"], k.asm["ttgir"]))
    return rec


def compile_report(cases=(4, 3), forms=FORMS) -> list[dict]:
    """Every form compiled for sm_90a for a causal and a non-causal case (``cases``); the first also traced."""
    rows = []
    for c in cases:
        for f in forms:
            rows.append(compile_tl(c) if f == "tl" else compile_ws(c, f))
    c = cases[0]
    rows.append(dict(compile_ws(c, "ws", trace=True), form="ws+trace"))
    return rows


# ------------------------------------------------------------------------------------------------------- main


def _write(out_dir: str, rows: list[dict], device: str):
    """Merge ``rows`` into ``out_dir/ws_attn.json`` (rows of earlier processes kept unless the same case, form and
    grid), written atomically."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "ws_attn.json")
    old = []
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f).get("rows", [])
        except (OSError, ValueError):
            old = []
    key = lambda r: (r.get("case"), r.get("form"), r.get("grid_arg"))
    new = {key(r) for r in rows}
    merged = [r for r in old if key(r) not in new] + rows
    tmp = os.path.join(out_dir, f".ws_attn.json.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(dict(rows=merged, device=device), f, indent=1)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for ws_attn.json (GPU runs; merged across processes)")
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a without a GPU and print the resources")
    ap.add_argument("--cases", type=int, nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    ap.add_argument("--grid", type=int, default=0, help="programs (0: one per task; fewer: persistent programs)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--trace", action="store_true", help="per-task durations from %%globaltimer stamps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="standard deviation of q, k, v")
    ap.add_argument("--keep", default="/tmp/ws_attn_outputs",
                    help="folder for each form's outputs (the max |difference| between forms across processes)")
    a = ap.parse_args(argv)
    if a.compile:
        for r in compile_report(forms=a.forms):
            print(json.dumps(r), flush=True)
        return
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("ws_attn: no CUDA device; without a GPU run `python -m bench.dag.ws_attn --compile`")
    if torch.cuda.get_device_capability()[0] != 9:
        raise SystemExit(f"ws_attn: the Gluon form needs sm_90 (Hopper); this is {torch.cuda.get_device_name()}")
    rows = []
    for case in a.cases:
        for form in a.forms:
            try:
                r = measure(case, form, a.grid, a.reps, a.trace, a.keep, a.seed, a.scale)
            except Exception as e:  # noqa: BLE001 (a form that fails to compile or run is reported, the others go on)
                r = dict(case=case, form=form, grid=a.grid, error=f"{type(e).__name__}: {e}"[:600])
            r["grid_arg"] = a.grid
            print(json.dumps(r), flush=True)
            rows.append(r)
    if a.out:
        _write(a.out, rows, torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
