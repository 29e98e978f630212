"""The dag forward pass as ONE warp-specialized Gluon persistent kernel: a first full draft of "the next kernel"
(docs/dag.md, "The next kernel, as the probe frames it"), beside today's ``@triton.jit`` megakernel. Lab code: not
in the registry; GPU only to run (Gluon has no interpreter), compiled for sm_90a by the CPU tests.

Same graph, task table, counters, epochs, queue order and precision schemes as ``kernels/dag`` — ``WsDag`` takes
today's ``DagPrepared`` (``kernels.dag.host.prepare``) and runs its task table on its weight slabs and buffers (TMA
descriptors over those same tensors); only the queue head, the counters, the error word, the trace and the epoch are
its own (its grid, one CTA per SM, differs from today's two per SM, and the epoch arithmetic depends on the grid).
Three partitions (``gl.warp_specialize``):

- **loader** (1 warp): takes a ticket (``atomic_add`` on the head, relaxed; the epoch base as today: every launch
  takes ``n_tasks + grid`` tickets), reads the task row; for a GEMM kind claims the first ``min(STAGES, steps)``
  ring slots and issues their weight tiles by TMA *before* the wait. GEMM and attention tasks are handed to the
  consumer (id and row fields, a 2-slot shared-memory ring with full/free mbarriers, as ``ws_chain``'s ``ws2q``)
  before the wait too: the consumer then waits on the ring's mbarriers, which only the loads issued after the wait
  complete. Then the poll: one lane per counter (``ld.acquire.gpu`` until goal x epoch, the goals from the row as
  today's ``wait: parallel``; bounded by ``spin_limit``; a timed-out wait adds 1 to ``err[0]`` and records the task in
  ``err[1]``), a warp barrier, ``fence.proxy.async.global``. LayerNorm tasks are handed over only now (the consumer
  reads r / x itself with ``.cg`` loads, so the hand-over must carry the acquire). Then the A tiles of the claimed
  slots and the rest of the K loop (claim a slot, weight tiles, A tiles: A's K column k in column block k // D of the
  [K // D * M, D] view, FFN2's [4, M, D]); attention: q hi/lo into a dedicated buffer (its own ready/empty
  mbarriers), then per key block k hi/lo and v hi/lo into one ring slot (k where a GEMM's A goes, v where its W
  goes; q/k/v are head-major [.., S, 64] blocks, so every tile is a 64 × 64 box of the [L*3*B*H*S, 64] view).
- **consumer** (the default partition: one warpgroup, 4 warps): per kind — the GEMM K loop on the ring with async
  wgmma (bf16x3: ``a_lo·w_hi + a_hi·w_lo + a_hi·w_hi`` per K step, in that order, as ``kernels/common/tl_helpers
  .dot_split`` with today's default DOT_PREC; ``f16_w1``: A as fp16 hi/lo, the weight's one fp16 part (``host.
  _weight_parts``: hi = lo = the fp16 rounding), ``a_lo·w + a_hi·w``), the previous step's slot freed after
  ``warpgroup_mma_wait(products)``, the first K step peeled (``_gemm_mma`` says why: ptxas serialized every wgmma of
  the kernel, note C7515, when both schemes' loops started from ``gl.zeros``); the epilogues of today's kernel with
  the same arithmetic (QKV: + bias, split bf16, head-major store; FFN1: + bias, GELU (``log2poly`` with
  ``ex2.approx.ftz``, or ``erf``), split by FFN2's scheme, stored into [4, M, D]; output projection / FFN2: + bias on
  K split 0, relaxed gpu-scope fp32 atomics into r); LayerNorm rows as ``_ln_task`` (two-pass fp32 statistics; layer
  0's LN1 also writes r = x); attention as ``_attn_task`` on ``bench.dag.ws_attn``'s helpers (``_overlap_blocks``:
  q·kᵀ = q_lo·k_hiᵀ + q_hi·k_loᵀ + q_hi·k_hiᵀ from shared memory, kᵀ a transposed view of the k tile; p·v = p_lo·v_hi
  + p_hi·v_lo + p_hi·v_hi with p split in registers as wgmma's register A operand, into ``acc * alpha``; the online
  softmax in exp2 with ``qk_scale``; FA3's overlap: block j's q·kᵀ issued with block j − 1's p·v). Then
  ``fence.proxy.async.global`` (its generic stores are read by TMA elsewhere), a barrier of its 128 threads, and the
  task into a 2-slot ring to the signaller (``done`` / ``sig_free`` mbarriers).
- **signaller** (1 warp): waits for the consumer's ``done``, frees the slot, then one ``red.release.gpu.add`` of 1 per
  counter the task signals (one lane per counter), and the trace stamps; the consumer meanwhile starts its next task.

Memory ordering (PTX memory model; the argument behind the protocol):

1. *Producer side.* Every consumer thread issues its task's global stores and relaxed atomics, then
   ``fence.proxy.async.global``, then a barrier of the consumer's 128 threads (``gl.thread_barrier`` = ``bar.sync
   0, 128``; Triton also puts one before every elected ``mbarrier.arrive``); one elected thread (tid % 128 == 0)
   arrives on ``done`` (``mbarrier.arrive``: release semantics at CTA scope by default). Every signaller lane waits on
   ``done`` itself (``mbarrier.try_wait``: acquire at CTA scope) and then issues its own ``red.release.gpu``.
   ``bar.sync`` synchronizes-with the other threads' ``bar.sync`` of the same barrier; the arrive synchronizes-with
   the wait that observes its phase; each pair is morally strong (same CTA, CTA scope). Base causality order is
   transitive through synchronizes-with and program order, whichever thread did the store, so every store and atomic
   of every consumer thread precedes the signaller's release in causality order, and the release pattern at gpu
   scope carries them to any thread whose ``ld.acquire.gpu`` observes the counter (morally strong: both gpu scope).
   That is the cumulativity today's kernel already relies on (CTA barrier, then thread 0's ``red.release.gpu``); the
   mbarrier hop is one more CTA-scope release/acquire pair in the chain, not a weaker link.
2. *Consumer side.* Loader lane j acquires counter j; a warp barrier (``bar.warp.sync``, which orders memory among
   the threads of the warp) brings every lane's acquire before every lane's later operations, among them the elected
   lane's TMA issue; ``fence.proxy.async.global`` after it orders the generic-proxy writes so observed before the
   async-proxy (TMA) reads the loader then issues (the writers fenced too, point 1). LayerNorm tasks read generic
   data in the consumer: the loader hands them over after the warp barrier (its elected arrive on ``full`` =
   release.cta, the consumer threads' waits = acquire.cta), causality again, and the loads are ``.cg`` as today's
   (L2, never a stale L1 line). GEMM and attention operands of other CTAs arrive only by TMA issued after the fence
   (biases and LayerNorm weights are constant).
3. *Write-after-read.* A task is released only after the consumer waited for every ring slot of it (its TMA reads
   landed in shared memory) and for its last wgmma: a later writer, ordered after the release by the graph
   (``graph.check_hazards``), cannot overwrite what the task still reads.

Deadlock freedom: the loader issues every load of task T before it takes ticket T + 1, and the ring slots it claims
early for T + 1's weights are freed by the K loops of T and earlier tasks, all handed over already; the q buffer of
an attention task is freed by the previous attention task, handed over already; so the lowest unfinished ticket
always progresses (the queue argument of docs/dag.md, with the loader at most one task ahead of the consumer).

Tiles are fixed: 64 × 64 GEMM tiles with 64-wide K steps, 64-row attention blocks, head dim 64 (the defaults of
``config/variant/dag.yaml`` and every dag case's head dim); ``WsDag`` raises naming the parameter otherwise (case
12's tuned 64 × 128 tiling, ``queue: static``, more programs than SMs). The ring has ``STAGES`` (2–4, default 4)
slots of four 8 KB tiles: 164 KB of shared memory with the q buffer and the epilogues' scratch, one CTA per SM.

Where it is simplest rather than fast (a draft): a task's hand-overs cost a few shared-memory round trips and CTA
barriers; the loader handles LayerNorm tasks' waits serially with the rest. The launch: the first goes through
Gluon's JIT path (it compiles); later ones through ``DirectLaunch``, Triton's launcher module called directly with
the 18 TMA descriptors encoded once (the JIT path binds ~75 arguments and encodes every descriptor on each call:
117–235 µs of host time a launch on the H200). The harness times both (``host_us_per_launch``; ``jit_path``).

GPU harness (one process per case, so a hung or faulted kernel takes only its own case down):

    python -m bench.dag.ws_dag --cases 2 3 4 12 --out DIR [--trace] [--stages 4] [--jit-launch] [--param name=value ...]

per case: ``prepare`` today's dag variant (``tune: off``: the defaults, so both kernels run one graph and one tiling;
``--param`` adds parameters for both), run today's kernel and the WS kernel on the same input after zeroing every
intermediate buffer, compare y and every buffer (r, ln1, att, ln2, f, q / k / v of every layer; ``buffers_vs_tl``),
check each kind of the last layer in isolation against float64 products of the launch's own operands (``kind_checks``:
qkv, attn, ffn1, lnf, ffn2+ln2, oproj+ln1 — which kind is wrong), the gate at the SPEC scales and seeds for both
forms, then time both (CUDA events around back-to-back launches, median of rounds); one JSON line per (case, form)
and DIR/ws_dag.json written atomically after each case. The WS kernel's first launch runs with a short
``--check-spin``: a dependency wait that times out is reported (``wait_timeout``: the count and the last task, and
the incomplete counters by stage); a launch that does not finish within ``--hang-s`` (an mbarrier deadlock cannot time
out) is reported with the queue head and the incomplete counters, read on a side stream while it runs, and its
process exits. Without a GPU:

    python -m bench.dag.ws_dag --compile [--cases 2 12] [--stages 4] [--trace] [--param name=value ...]

compiles for sm_90a (``GluonASTSource``, ``GPUTarget("cuda", 90, 32)``) on each case's meta and prints warps, shared
memory, registers / spills and whether ptxas serialized the wgmma (``wgmma_serialized``, notes C7514 / C7515: the
bundled ptxas) and the counts of wgmma, TMA, ``red.release``, ``ld.acquire``,
``fence.proxy.async`` and the mbarrier operations (``tests/test_dag_ws_kernel.py``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import triton
from triton import knobs
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from bench.dag.ws_attn import _overlap_blocks
from kernels.common import task_sync

TILE = 64                      # every tile edge (host side): GEMM rows / columns / K step, attention blocks, head dim
T64 = gl.constexpr(TILE)
LN_EPS = gl.constexpr(1e-5)
HEADER = gl.constexpr(8)       # kernels/dag/kernel.py TASK_HEADER: kind, layer, a, b, c, waits, signals, 0
FIELDS = gl.constexpr(8)       # int32 words per hand-over slot (t, kind, l, a, b, c, -, -)

# one lane per counter: ld.acquire.gpu of the counter ($1) until >= $2, at most $3 polls; $0 = 1 on timeout
_POLL = gl.constexpr("{ .reg .pred q; .reg .b32 v, n;\n\tmov.b32 $0, 0;\n\t" + task_sync._POLL_LOOP)
# the lanes with $2 != 0 add 1 to their counter ($1) with a release reduction (gpu scope)
_RELEASE = gl.constexpr("{ .reg .pred p; setp.ne.s32 p, $2, 0;\n\t"
                        "@p red.release.gpu.global.add.s32 [$1], 1; }\n\tmov.b32 $0, 0;")
_FENCE_PROXY = gl.constexpr("fence.proxy.async.global;\n\tmov.b32 $0, 0;")
_NOW = gl.constexpr("mov.u64 $0, %globaltimer;")
_SMID = gl.constexpr("mov.u32 $0, %smid;")
_EX2 = gl.constexpr("ex2.approx.ftz.f32 $0, $1;")

# kernels/common/tl_helpers.py GELU_Q*: log2 Phi(-u), highest power first
GELU_Q5 = gl.constexpr(-0.0003356065178156923)
GELU_Q4 = gl.constexpr(0.006050093726838906)
GELU_Q3 = gl.constexpr(-0.04913339793466209)
GELU_Q2 = gl.constexpr(-0.46296296401975784)
GELU_Q1 = gl.constexpr(-1.1494567479655073)
GELU_Q0 = gl.constexpr(-1.00021732392041)


# ----------------------------------------------------------------------------------------------------------------
# small helpers (every partition)

@gluon.jit
def _stamp(trace_ptr, t, col: gl.constexpr, TRACE: gl.constexpr, lay: gl.constexpr, NT: gl.constexpr):
    """TRACE: %globaltimer into trace[t, col] (one lane of the partition's ``lay`` over NT threads)."""
    if TRACE:
        o = gl.arange(0, NT, layout=lay)
        now = gl.inline_asm_elementwise(_NOW, "=l,r", [o], dtype=gl.int64, is_pure=False, pack=1)
        gl.store(trace_ptr + t.to(gl.int64) * 5 + col + o * 0, now, mask=o == 0)


@gluon.jit
def _proxy_fence(lay: gl.constexpr, NT: gl.constexpr):
    """``fence.proxy.async.global`` in every thread of the partition."""
    o = gl.arange(0, NT, layout=lay)
    gl.inline_asm_elementwise(_FENCE_PROXY, "=r,r", [o], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _field(v, idx, j: gl.constexpr):
    """Word j of a hand-over slot's vector ``v`` (max over the one matching lane: replicated lanes are harmless)."""
    return gl.max(gl.where(idx == j, v, -2147483647), axis=0)


@gluon.jit
def _put(ring, full, free, i, t, kind, l, a, b, c, lay: gl.constexpr):
    """Hand a task (id t and its row fields) over: turn i of a 2-slot ring, once its slot is free (an mbarrier
    starts with phase 1 complete: the first pass over the ring does not wait)."""
    mbarrier.wait(free.index(i % 2), ((i // 2) & 1) ^ 1)
    idx = gl.arange(0, FIELDS, layout=lay)
    v = gl.where(idx == 0, t, gl.where(idx == 1, kind, gl.where(idx == 2, l, gl.where(
        idx == 3, a, gl.where(idx == 4, b, gl.where(idx == 5, c, 0))))))
    ring.index(i % 2).store(v)
    gl.thread_barrier()  # every storing thread before the elected arrive (Triton adds one too)
    mbarrier.arrive(full.index(i % 2))


@gluon.jit
def _take(ring, full, free, i, lay: gl.constexpr):
    """The task of turn i of a 2-slot ring (``_put``): (t, kind, l, a, b, c); the slot handed back."""
    mbarrier.wait(full.index(i % 2), (i // 2) & 1)
    idx = gl.arange(0, FIELDS, layout=lay)
    v = ring.index(i % 2).load(lay)
    gl.thread_barrier()  # every thread has read the slot before it is handed back
    mbarrier.arrive(free.index(i % 2))
    return (_field(v, idx, 0), _field(v, idx, 1), _field(v, idx, 2), _field(v, idx, 3), _field(v, idx, 4),
            _field(v, idx, 5))


@gluon.jit
def _gemm_geom(kind, l, m, n, s, M: gl.constexpr, D: gl.constexpr, K_CHUNK_O: gl.constexpr,
               K_CHUNK_FFN2: gl.constexpr):
    """GEMM task (kind, layer l, tile (m, n), K split s): K of the GEMM, its split's first K column k0, its K steps
    and the first row of its weight slab's K range in the [L * N / 64 * K, 64] view of the slabs."""
    K = gl.where(kind == 6, 4 * D, D)
    N = gl.where(kind == 1, 3 * D, gl.where(kind == 5, 4 * D, D))
    kc = gl.where(kind == 3, K_CHUNK_O, gl.where(kind == 6, K_CHUNK_FFN2, K))
    k0 = s * kc
    k_end = gl.minimum(k0 + kc, K)
    steps = (k_end - k0 + T64 - 1) // T64
    wrow = (l * ((N + T64 - 1) // T64) + n) * K + k0
    return k0, steps, wrow


@gluon.jit
def _ring_views(ring, SCHEME: gl.constexpr):
    """The ring's four [STAGES, 64, 64] tiles as the scheme's element type (bf16; f16_w1: fp16, same bytes)."""
    a_hi, a_lo, w_hi, w_lo = ring
    if SCHEME == "f16_w1":
        a_hi = a_hi._reinterpret(gl.float16, a_hi.shape, a_hi.layout)
        a_lo = a_lo._reinterpret(gl.float16, a_lo.shape, a_lo.layout)
        w_hi = w_hi._reinterpret(gl.float16, w_hi.shape, w_hi.layout)
        w_lo = w_lo._reinterpret(gl.float16, w_lo.shape, w_lo.layout)
    return a_hi, a_lo, w_hi, w_lo


# ----------------------------------------------------------------------------------------------------------------
# loader (1 warp)

@gluon.jit
def _claim(ready, empty, step, nbytes: gl.constexpr, STAGES: gl.constexpr):
    """Claim the ring slot of global step ``step`` (once the consumer freed it) and expect its bytes."""
    slot = step % STAGES
    mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(slot), nbytes)
    return slot


@gluon.jit
def _load_w(w_hi_d, w_lo_d, w_hi, w_lo, ready, slot, row, SCHEME: gl.constexpr):
    tma.async_copy_global_to_shared(w_hi_d, [row, 0], ready.index(slot), w_hi.index(slot))
    if SCHEME == "bf16x3":
        tma.async_copy_global_to_shared(w_lo_d, [row, 0], ready.index(slot), w_lo.index(slot))


@gluon.jit
def _gemm_pre(w_hi_d, w_lo_d, ring, ready, empty, g, steps, wrow, SCHEME: gl.constexpr, STAGES: gl.constexpr):
    """Before the task's wait: claim its first min(STAGES, steps) slots and issue their weight tiles (the weights
    are written once by prepare: no dependency). Returns how many."""
    a_hi, a_lo, w_hi, w_lo = _ring_views(ring, SCHEME)
    NB: gl.constexpr = (4 if SCHEME == "bf16x3" else 3) * T64 * T64 * 2
    pre = gl.minimum(steps, STAGES)
    for kk in range(pre):
        slot = _claim(ready, empty, g + kk, NB, STAGES)
        _load_w(w_hi_d, w_lo_d, w_hi, w_lo, ready, slot, wrow + kk * T64, SCHEME)
    return pre


@gluon.jit
def _gemm_rest(a_hi_d, a_lo_d, w_hi_d, w_lo_d, ring, ready, empty, g, pre, steps, wrow, k0, row0,
               M: gl.constexpr, D: gl.constexpr, SCHEME: gl.constexpr, STAGES: gl.constexpr):
    """After the wait: the A tiles of the claimed slots, then the remaining K steps (claim, weights, A). A's K
    column k lives in column block k // D of the [K // D * M, D] view (FFN2's [4, M, D])."""
    a_hi, a_lo, w_hi, w_lo = _ring_views(ring, SCHEME)
    NB: gl.constexpr = (4 if SCHEME == "bf16x3" else 3) * T64 * T64 * 2
    for kk in range(steps):
        step = g + kk
        slot = step % STAGES
        if kk >= pre:
            slot = _claim(ready, empty, step, NB, STAGES)
            _load_w(w_hi_d, w_lo_d, w_hi, w_lo, ready, slot, wrow + kk * T64, SCHEME)
        k = k0 + kk * T64
        arow = (k // D) * M + row0
        acol = k % D
        tma.async_copy_global_to_shared(a_hi_d, [arow, acol], ready.index(slot), a_hi.index(slot))
        tma.async_copy_global_to_shared(a_lo_d, [arow, acol], ready.index(slot), a_lo.index(slot))
    return g + steps


@gluon.jit
def _attn_loads(qkv_hi_d, qkv_lo_d, ring, q_buf, ready, empty, q_ready, q_empty, g, na, l, b, h, qb,
                B: gl.constexpr, S: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """Attention task (layer l, batch b, head h, query block qb): q hi/lo into the q buffer (once the consumer is
    done with the previous attention task's), then k hi/lo and v hi/lo of each key block into one ring slot."""
    a_hi, a_lo, w_hi, w_lo = ring
    q_hi, q_lo = q_buf
    BHS: gl.constexpr = B * H * S
    qrow = l * (3 * BHS) + (b * H + h) * S          # [L, 3, B, H, S, 64] as [L*3*B*H*S, 64]: q of (b, h)
    mbarrier.wait(q_empty, (na & 1) ^ 1)
    mbarrier.expect(q_ready, 2 * T64 * T64 * 2)
    tma.async_copy_global_to_shared(qkv_hi_d, [qrow + qb * T64, 0], q_ready, q_hi)
    tma.async_copy_global_to_shared(qkv_lo_d, [qrow + qb * T64, 0], q_ready, q_lo)
    if CAUSAL:
        kv_end = gl.minimum((qb + 1) * T64, S)
    else:
        kv_end = qb * 0 + S
    nkv = (kv_end + T64 - 1) // T64
    krow = qrow + BHS
    vrow = qrow + 2 * BHS
    for j in range(nkv):
        slot = _claim(ready, empty, g + j, 4 * T64 * T64 * 2, STAGES)
        tma.async_copy_global_to_shared(qkv_hi_d, [krow + j * T64, 0], ready.index(slot), a_hi.index(slot))
        tma.async_copy_global_to_shared(qkv_lo_d, [krow + j * T64, 0], ready.index(slot), a_lo.index(slot))
        tma.async_copy_global_to_shared(qkv_hi_d, [vrow + j * T64, 0], ready.index(slot), w_hi.index(slot))
        tma.async_copy_global_to_shared(qkv_lo_d, [vrow + j * T64, 0], ready.index(slot), w_lo.index(slot))
    return g + nkv


@gluon.jit
def _wait_counters(row, tab_goal_off, ctr_ptr, goal_ptr, err_ptr, t, epoch, spin_limit, lane,
                   MAX_WAITS: gl.constexpr, GOALS_IN_ROW: gl.constexpr):
    """Every counter of the task polled at once, one lane each (the unused lanes poll the dummy counter 0, goal 0);
    then a warp barrier: every lane's acquire before any later operation of the warp."""
    on = lane < MAX_WAITS
    ids = gl.load(row + HEADER + lane, mask=on, other=0)
    if GOALS_IN_ROW:
        goals = gl.load(row + tab_goal_off + lane, mask=on, other=0) * epoch
    else:
        goals = gl.load(goal_ptr + ids) * epoch
    bad = gl.inline_asm_elementwise(_POLL, "=r,l,r,r", [ctr_ptr + ids, goals, spin_limit + lane * 0],
                                    dtype=gl.int32, is_pure=False, pack=1)
    nbad = gl.sum(bad, axis=0)
    if nbad > 0:
        gl.atomic_add(err_ptr, 1, sem="relaxed")
        gl.atomic_xchg(err_ptr + 1, t, sem="relaxed")
    gl.thread_barrier()


@gluon.jit
def _loader(descs, ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free,
            tab_ptr, ctr_ptr, goal_ptr, head_ptr, err_ptr, trace_ptr, n_tasks, epoch, spin_limit,
            B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr,
            K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
            SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
            MAX_WAITS: gl.constexpr, MAX_SIGNALS: gl.constexpr, TASK_WIDTH: gl.constexpr,
            GOALS_IN_ROW: gl.constexpr, STAGES: gl.constexpr, TRACE: gl.constexpr):
    (ln1_hi_d, ln1_lo_d, att_hi_d, att_lo_d, ln2_hi_d, ln2_lo_d, f_hi_d, f_lo_d,
     wqkv_hi_d, wqkv_lo_d, wo_hi_d, wo_lo_d, w1_hi_d, w1_lo_d, w2_hi_d, w2_lo_d, qkv_hi_d, qkv_lo_d) = descs
    M: gl.constexpr = B * S
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    lane = gl.arange(0, 32, layout=lay)
    nprog = gl.num_programs(0)
    base = (epoch - 1) * (n_tasks + nprog)   # every launch takes n_tasks + grid tickets (one empty per program)
    t = gl.atomic_add(head_ptr, 1, sem="relaxed") - base
    i = 0
    g = 0
    na = 0
    while t < n_tasks:
        row = tab_ptr + t * TASK_WIDTH
        kind = gl.load(row)
        l = gl.load(row + 1)
        a = gl.load(row + 2)
        b = gl.load(row + 3)
        c = gl.load(row + 4)
        _stamp(trace_ptr, t, 0, TRACE, lay, 32)
        ln = (kind == 0) | (kind == 4) | (kind == 7)
        k0, steps, wrow = _gemm_geom(kind, l, a, b, c, M, D, K_CHUNK_O, K_CHUNK_FFN2)
        pre = steps * 0
        if kind == 1:
            pre = _gemm_pre(wqkv_hi_d, wqkv_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_QKV, STAGES)
        elif kind == 3:
            pre = _gemm_pre(wo_hi_d, wo_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_O, STAGES)
        elif kind == 5:
            pre = _gemm_pre(w1_hi_d, w1_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_FFN1, STAGES)
        elif kind == 6:
            pre = _gemm_pre(w2_hi_d, w2_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_FFN2, STAGES)
        if not ln:  # GEMM / attention: handed over before the wait (the consumer then waits on the ring's data,
            _put(tids, tid_full, tid_free, i, t, kind, l, a, b, c, lay)   # which comes only after the wait)
        _wait_counters(row, HEADER + MAX_WAITS + MAX_SIGNALS, ctr_ptr, goal_ptr, err_ptr, t, epoch, spin_limit,
                       lane, MAX_WAITS, GOALS_IN_ROW)
        _proxy_fence(lay, 32)   # the acquired generic-proxy writes before this warp's TMA (async-proxy) reads
        _stamp(trace_ptr, t, 1, TRACE, lay, 32)
        if ln:      # LayerNorm: handed over after the wait (the consumer reads the producers' data itself)
            _put(tids, tid_full, tid_free, i, t, kind, l, a, b, c, lay)
        row0 = a * T64
        if kind == 1:
            g = _gemm_rest(ln1_hi_d, ln1_lo_d, wqkv_hi_d, wqkv_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_QKV, STAGES)
        elif kind == 3:
            g = _gemm_rest(att_hi_d, att_lo_d, wo_hi_d, wo_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_O, STAGES)
        elif kind == 5:
            g = _gemm_rest(ln2_hi_d, ln2_lo_d, w1_hi_d, w1_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_FFN1, STAGES)
        elif kind == 6:
            g = _gemm_rest(f_hi_d, f_lo_d, w2_hi_d, w2_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_FFN2, STAGES)
        elif kind == 2:
            g = _attn_loads(qkv_hi_d, qkv_lo_d, ring, q_buf, ready, empty, q_ready, q_empty, g, na, l, a, b, c,
                            B, S, H, CAUSAL, STAGES)
            na += 1
        i += 1
        t = gl.atomic_add(head_ptr, 1, sem="relaxed") - base
    _put(tids, tid_full, tid_free, i, -1, 0, 0, 0, 0, 0, lay)   # the end: the consumer passes it on


# ----------------------------------------------------------------------------------------------------------------
# consumer (one warpgroup): the arithmetic of kernels/dag/kernel.py

@gluon.jit
def _split(x, SCHEME: gl.constexpr):
    """fp32 -> (hi, lo): bf16 parts (bf16x3) or fp16 parts (f16_w1), round to nearest each (tl_helpers.split_bf16 /
    split_f16 with GPU=True)."""
    if SCHEME == "f16_w1":
        hi = x.to(gl.float16)
        lo = (x - hi.to(gl.float32)).to(gl.float16)
    else:
        hi = x.to(gl.bfloat16)
        lo = (x - hi.to(gl.float32)).to(gl.bfloat16)
    return hi, lo


@gluon.jit
def _store_split(hi_ptr, lo_ptr, offs, mask, x, SCHEME: gl.constexpr, out: gl.constexpr):
    """Store fp32 ``x`` split (``_split``), through the coalesced layout ``out`` (16-byte stores)."""
    hi, lo = _split(x, SCHEME)
    hi = gl.convert_layout(hi, out)
    lo = gl.convert_layout(lo, out)
    gl.store(hi_ptr + offs, hi, mask=mask)
    gl.store(lo_ptr + offs, lo, mask=mask)


@gluon.jit
def _gelu_log2poly(x):
    """tl_helpers.gelu_log2poly (PTX=True), the same operations in the same order."""
    u = gl.abs(x)
    q = u * GELU_Q5 + GELU_Q4
    q = q * u + GELU_Q3
    q = q * u + GELU_Q2
    q = q * u + GELU_Q1
    q = q * u + GELU_Q0
    c = gl.inline_asm_elementwise(_EX2, "=f,f", [q], dtype=gl.float32, is_pure=True, pack=1)
    return gl.maximum(x, 0.0) - u * c


@gluon.jit
def _gemm_step(a_hi, a_lo, w_hi, w_lo, slot, acc, FIRST: gl.constexpr, SCHEME: gl.constexpr):
    """One K step's products of the scheme, issued asynchronously on ``acc`` in kernel.py's order (bf16x3: a_lo·w_hi,
    a_hi·w_lo, a_hi·w_hi; f16_w1: a_lo·w, a_hi·w); FIRST: the first product ignores ``acc`` (use_acc=False)."""
    acc = warpgroup_mma(a_lo.index(slot), w_hi.index(slot), acc, use_acc=not FIRST, is_async=True)
    if SCHEME == "bf16x3":
        acc = warpgroup_mma(a_hi.index(slot), w_lo.index(slot), acc, is_async=True)
    return warpgroup_mma(a_hi.index(slot), w_hi.index(slot), acc, is_async=True)


@gluon.jit
def _gemm_mma(ring, ready, empty, g, steps, SCHEME: gl.constexpr, STAGES: gl.constexpr, mma: gl.constexpr):
    """acc [64, 64] fp32 of one GEMM task over its ``steps`` (>= 1) ring slots from global step g: per K step the
    scheme's products (``_gemm_step``), then a wait for the previous step's products, whose slot is freed.
    Returns (acc, g).

    The first K step is peeled (its first product with a constexpr use_acc=False) rather than the loop running from
    a ``gl.zeros`` accumulator with ``use_acc=kk != 0``: with both schemes' loops in one function LLVM merges their
    exits into one ``wgmma.wait_group 0`` block, which the zero-trip edges also reach with the accumulator defined by
    the zeros' ``mov`` — and ptxas then serializes every wgmma of the kernel (C7515). The products, their order and
    their accumulator are the same (kk = 0 ignored the zeros)."""
    a_hi, a_lo, w_hi, w_lo = _ring_views(ring, SCHEME)
    NP: gl.constexpr = 3 if SCHEME == "bf16x3" else 2   # products (wgmma groups) per K step
    acc = gl.zeros([T64, T64], gl.float32, layout=mma)
    slot = g % STAGES
    mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
    acc = _gemm_step(a_hi, a_lo, w_hi, w_lo, slot, acc, True, SCHEME)
    acc = warpgroup_mma_wait(NP, deps=(acc, ))   # (nothing earlier in flight: the loop-carried type is a tensor)
    g += 1
    for kk in range(1, steps):
        slot = g % STAGES
        mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
        acc = _gemm_step(a_hi, a_lo, w_hi, w_lo, slot, acc, False, SCHEME)
        acc = warpgroup_mma_wait(NP, deps=(acc, ))
        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
        g += 1
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
    return acc, g


@gluon.jit
def _qkv_epilogue(acc, l, row0, col0, b_ptr, q_hi_ptr, q_lo_ptr, B: gl.constexpr, S: gl.constexpr,
                  D: gl.constexpr, H: gl.constexpr, mma: gl.constexpr, out: gl.constexpr):
    """kernel.py ``_qkv_epilogue``: + bias, split bf16, stored head-major ([L, 3, B, H, S, 64])."""
    M: gl.constexpr = B * S
    N: gl.constexpr = 3 * D
    DH: gl.constexpr = T64
    cn = col0 + gl.arange(0, T64, layout=gl.SliceLayout(0, mma))
    acc = acc + gl.load(b_ptr + l * N + cn, mask=cn < N, other=0.0)[None, :]
    rows = row0 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))
    cols = col0 + gl.arange(0, T64, layout=gl.SliceLayout(0, out))
    part = cols // D
    hd = (cols - part * D) // DH
    col_off = part * (M * D) + hd * (S * DH) + (cols - part * D - hd * DH)
    bb = rows // S
    row_off = bb * (H * S * DH) + (rows - bb * S) * DH
    offs = l * (3 * M * D) + row_off[:, None] + col_off[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    _store_split(q_hi_ptr, q_lo_ptr, offs, mask, acc, "bf16x3", out)


@gluon.jit
def _ffn1_epilogue(acc, l, row0, col0, b_ptr, f_hi_ptr, f_lo_ptr, M: gl.constexpr, D: gl.constexpr,
                   SCHEME_FFN2: gl.constexpr, GELU: gl.constexpr, mma: gl.constexpr, out: gl.constexpr):
    """kernel.py ``_ffn1_epilogue``: + bias, GELU, split (FFN2's scheme), stored into [4, M, D] (column c in block
    c // D)."""
    F: gl.constexpr = 4 * D
    cn = col0 + gl.arange(0, T64, layout=gl.SliceLayout(0, mma))
    acc = acc + gl.load(b_ptr + l * F + cn, mask=cn < F, other=0.0)[None, :]
    if GELU == "log2poly":
        acc = _gelu_log2poly(acc)
    else:
        acc = 0.5 * acc * (1.0 + gl.erf(acc * 0.7071067811865476))
    rows = row0 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))
    cols = col0 + gl.arange(0, T64, layout=gl.SliceLayout(0, out))
    offs = rows[:, None] * D + ((cols // D) * (M * D) + cols % D)[None, :]
    mask = (rows < M)[:, None] & (cols < F)[None, :]
    _store_split(f_hi_ptr, f_lo_ptr, offs, mask, acc, SCHEME_FFN2, out)


@gluon.jit
def _residual_epilogue(acc, l, s, row0, col0, b_ptr, r_ptr, M: gl.constexpr, D: gl.constexpr,
                       acc_out: gl.constexpr):
    """kernel.py ``_residual_epilogue``: r[tile] += acc (+ bias on K split 0), relaxed gpu-scope fp32 atomics."""
    acc = gl.convert_layout(acc, acc_out)
    rows = row0 + gl.arange(0, T64, layout=gl.SliceLayout(1, acc_out))
    cols = col0 + gl.arange(0, T64, layout=gl.SliceLayout(0, acc_out))
    bias = gl.load(b_ptr + l * D + cols, mask=cols < D, other=0.0)
    acc = acc + gl.where(s == 0, bias, 0.0)[None, :]
    gl.atomic_add(r_ptr + rows[:, None] * D + cols[None, :], acc, mask=(rows < M)[:, None] & (cols < D)[None, :],
                  sem="relaxed", scope="gpu")


@gluon.jit
def _gemm_task(ring, ready, empty, g, kind, l, m, n, s, r_ptr, qkv_hi_ptr, qkv_lo_ptr, f_hi_ptr, f_lo_ptr,
               bqkv_ptr, bo_ptr, b1_ptr, b2_ptr,
               B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr,
               K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
               SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
               GELU: gl.constexpr, STAGES: gl.constexpr, mma: gl.constexpr, out: gl.constexpr,
               acc_out: gl.constexpr):
    """A GEMM task: the K loop of its scheme (one body per scheme in use), then its kind's epilogue."""
    M: gl.constexpr = B * S
    ANY_F16: gl.constexpr = ((SCHEME_QKV == "f16_w1") or (SCHEME_O == "f16_w1") or (SCHEME_FFN1 == "f16_w1")
                             or (SCHEME_FFN2 == "f16_w1"))
    ANY_BF: gl.constexpr = ((SCHEME_QKV == "bf16x3") or (SCHEME_O == "bf16x3") or (SCHEME_FFN1 == "bf16x3")
                            or (SCHEME_FFN2 == "bf16x3"))
    k0, steps, wrow = _gemm_geom(kind, l, m, n, s, M, D, K_CHUNK_O, K_CHUNK_FFN2)
    f16 = (((kind == 1) & (SCHEME_QKV == "f16_w1")) | ((kind == 3) & (SCHEME_O == "f16_w1"))
           | ((kind == 5) & (SCHEME_FFN1 == "f16_w1")) | ((kind == 6) & (SCHEME_FFN2 == "f16_w1")))
    if ANY_F16 and ANY_BF:
        if f16:
            acc, g = _gemm_mma(ring, ready, empty, g, steps, "f16_w1", STAGES, mma)
        else:
            acc, g = _gemm_mma(ring, ready, empty, g, steps, "bf16x3", STAGES, mma)
    elif ANY_F16:
        acc, g = _gemm_mma(ring, ready, empty, g, steps, "f16_w1", STAGES, mma)
    else:
        acc, g = _gemm_mma(ring, ready, empty, g, steps, "bf16x3", STAGES, mma)
    row0 = m * T64
    col0 = n * T64
    if kind == 1:
        _qkv_epilogue(acc, l, row0, col0, bqkv_ptr, qkv_hi_ptr, qkv_lo_ptr, B, S, D, H, mma, out)
    elif kind == 5:
        _ffn1_epilogue(acc, l, row0, col0, b1_ptr, f_hi_ptr, f_lo_ptr, M, D, SCHEME_FFN2, GELU, mma, out)
    else:
        b_ptr = b2_ptr
        if kind == 3:
            b_ptr = bo_ptr
        _residual_epilogue(acc, l, s, row0, col0, b_ptr, r_ptr, M, D, acc_out)
    return g


@gluon.jit
def _attn_task(ring, q_buf, ready, empty, q_ready, q_empty, g, na, l, b, h, qb, att_hi_ptr, att_lo_ptr, qk_scale,
               B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, CAUSAL: gl.constexpr, SCHEME_O: gl.constexpr,
               STAGES: gl.constexpr, mma: gl.constexpr, out: gl.constexpr):
    """kernel.py ``_attn_task`` / ``_attn_block`` on ``bench.dag.ws_attn``'s Gluon helpers: the online softmax over
    the key blocks (causal: up to the query block, keys past a query masked on that diagonal block — the only one
    that has any, S being a multiple of 64), q·kᵀ = q_lo·k_hiᵀ + q_hi·k_loᵀ + q_hi·k_hiᵀ from shared memory (kᵀ a
    transposed view of the k tile), p·v = p_lo·v_hi + p_hi·v_lo + p_hi·v_hi with p split in registers (wgmma's
    register A operand); o = acc / l stored split (the output projection's scheme) into att [M, D].
    ``_overlap_blocks``' FA3 order: block j's q·kᵀ and block j − 1's p·v issued together, block j's softmax while
    p·v of j − 1 runs, then acc · alpha_j; per block still acc_j = acc_{j−1} · alpha_j + p_j·v_j, the same operations
    on the same values as the serial order (block 0 starts from the zeros, which the serial order multiplied by
    alpha_0 = 0). A ring slot holds block j's k (the A tiles) and v (the W tiles) on one ready / empty pair; it is
    freed once block j's p·v is done (the consumer holds two slots at a time: STAGES >= 2)."""
    a_hi, a_lo, w_hi, w_lo = ring
    q_hi, q_lo = q_buf
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, mma)
    mbarrier.wait(q_ready, na & 1)
    if CAUSAL:
        kv_end = gl.minimum((qb + 1) * T64, S)
    else:
        kv_end = qb * 0 + S
    nkv = (kv_end + T64 - 1) // T64
    m_i = gl.full([T64], float("-inf"), gl.float32, layout=row_l)
    l_i = gl.zeros([T64], gl.float32, layout=row_l)
    acc = gl.zeros([T64, T64], gl.float32, layout=mma)
    zero = gl.zeros([T64, T64], gl.float32, layout=mma)
    mbarrier.wait(ready.index(g % STAGES), (g // STAGES) & 1)
    acc, l_i = _overlap_blocks(q_hi, q_lo, a_hi, a_lo, w_hi, w_lo, ready, empty, ready, empty, q_empty, g, nkv,
                               qk_scale, zero, m_i, l_i, acc, CAUSAL, STAGES, True, mma, dot_a)
    o = acc / l_i[:, None]
    rows = b * S + qb * T64 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))
    cols = h * T64 + gl.arange(0, T64, layout=gl.SliceLayout(0, out))
    qm = (qb * T64 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))) < S
    _store_split(att_hi_ptr, att_lo_ptr, rows[:, None] * D + cols[None, :], qm[:, None] & (cols >= 0)[None, :], o,
                 SCHEME_O, out)
    return g + nkv


@gluon.jit
def _ln_task(kind, l, i, x_ptr, r_ptr, y_ptr, ln1_hi_ptr, ln1_lo_ptr, ln2_hi_ptr, ln2_lo_ptr,
             ln1w_ptr, ln1b_ptr, ln2w_ptr, ln2b_ptr, lnfw_ptr, lnfb_ptr,
             M: gl.constexpr, D: gl.constexpr, BLOCK_M_LN: gl.constexpr, BD: gl.constexpr, ROWS: gl.constexpr,
             SCHEME_QKV: gl.constexpr, SCHEME_FFN1: gl.constexpr, lnl: gl.constexpr):
    """kernel.py ``_ln_task``: LayerNorm rows i * BLOCK_M_LN …, kind 0 → split LN1 (layer 0 reads x and writes
    r = x), kind 4 → split LN2, kind 7 → y (fp32); two-pass fp32 statistics (tl_helpers.layernorm_rows)."""
    first = (kind == 0) & (l == 0)
    src_ptr = r_ptr
    if first:
        src_ptr = x_ptr
    w_ptr = lnfw_ptr
    b_ptr = lnfb_ptr
    if kind == 0:
        w_ptr = ln1w_ptr + l * D
        b_ptr = ln1b_ptr + l * D
    elif kind == 4:
        w_ptr = ln2w_ptr + l * D
        b_ptr = ln2b_ptr + l * D
    offs_d = gl.arange(0, BD, layout=gl.SliceLayout(0, lnl))
    mask_d = offs_d < D
    w = gl.load(w_ptr + offs_d, mask=mask_d, other=0.0)
    bias = gl.load(b_ptr + offs_d, mask=mask_d, other=0.0)
    for ch in range(0, BLOCK_M_LN // ROWS):
        rows = i * BLOCK_M_LN + ch * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, lnl))
        mask = (rows < M)[:, None] & mask_d[None, :]
        offs = rows[:, None] * D + offs_d[None, :]
        x = gl.load(src_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
        if first:
            gl.store(r_ptr + offs, x, mask=mask)
        mean = gl.sum(gl.where(mask_d[None, :], x, 0.0), axis=1) / D
        xc = gl.where(mask_d[None, :], x - mean[:, None], 0.0)
        var = gl.sum(xc * xc, axis=1) / D
        rstd = 1.0 / gl.sqrt(var + LN_EPS)
        y = xc * rstd[:, None] * w[None, :] + bias[None, :]
        if kind == 0:
            hi, lo = _split(y, SCHEME_QKV)
            gl.store(ln1_hi_ptr + offs, hi, mask=mask)
            gl.store(ln1_lo_ptr + offs, lo, mask=mask)
        elif kind == 4:
            hi, lo = _split(y, SCHEME_FFN1)
            gl.store(ln2_hi_ptr + offs, hi, mask=mask)
            gl.store(ln2_lo_ptr + offs, lo, mask=mask)
        else:
            gl.store(y_ptr + offs, y, mask=mask)


@gluon.jit
def _consumer(ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free, sigs, done, sig_free,
              x_ptr, y_ptr, r_ptr, ln1_hi_ptr, ln1_lo_ptr, qkv_hi_ptr, qkv_lo_ptr, att_hi_ptr, att_lo_ptr,
              ln2_hi_ptr, ln2_lo_ptr, f_hi_ptr, f_lo_ptr, ln1w_ptr, ln1b_ptr, bqkv_ptr, bo_ptr, ln2w_ptr, ln2b_ptr,
              b1_ptr, b2_ptr, lnfw_ptr, lnfb_ptr, trace_ptr, qk_scale,
              B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr,
              BLOCK_M_LN: gl.constexpr, LN_ROWS: gl.constexpr, BD: gl.constexpr,
              K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
              SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
              GELU: gl.constexpr, STAGES: gl.constexpr, TRACE: gl.constexpr, num_warps: gl.constexpr):
    M: gl.constexpr = B * S
    NT: gl.constexpr = 32 * num_warps
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, T64, 16])
    out: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])      # 16-byte split stores
    acc_out: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [num_warps, 1], [1, 0])  # fp32 atomics
    lnl: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [1, num_warps], [1, 0])
    i = 0
    g = 0
    na = 0
    t, kind, l, a, b, c = _take(tids, tid_full, tid_free, 0, lay)
    while t >= 0:
        if (kind == 0) | (kind == 4) | (kind == 7):
            _ln_task(kind, l, a, x_ptr, r_ptr, y_ptr, ln1_hi_ptr, ln1_lo_ptr, ln2_hi_ptr, ln2_lo_ptr,
                     ln1w_ptr, ln1b_ptr, ln2w_ptr, ln2b_ptr, lnfw_ptr, lnfb_ptr, M, D, BLOCK_M_LN, BD, LN_ROWS,
                     SCHEME_QKV, SCHEME_FFN1, lnl)
        elif kind == 2:
            g = _attn_task(ring, q_buf, ready, empty, q_ready, q_empty, g, na, l, a, b, c, att_hi_ptr, att_lo_ptr,
                           qk_scale, B, S, D, CAUSAL, SCHEME_O, STAGES, mma, out)
            na += 1
        else:
            g = _gemm_task(ring, ready, empty, g, kind, l, a, b, c, r_ptr, qkv_hi_ptr, qkv_lo_ptr, f_hi_ptr,
                           f_lo_ptr, bqkv_ptr, bo_ptr, b1_ptr, b2_ptr, B, S, D, H, K_CHUNK_O, K_CHUNK_FFN2,
                           SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, GELU, STAGES, mma, out, acc_out)
        # the task's generic stores / atomics: proxy-fenced (TMA reads them elsewhere), then all 128 threads'
        # before the elected arrive (memory ordering, point 1 of the module docstring)
        _proxy_fence(lay, NT)
        gl.thread_barrier()
        _stamp(trace_ptr, t, 4, TRACE, lay, NT)
        _put(sigs, done, sig_free, i, t, kind, l, a, b, c, lay)
        i += 1
        t, kind, l, a, b, c = _take(tids, tid_full, tid_free, i, lay)
    _put(sigs, done, sig_free, i, -1, 0, 0, 0, 0, 0, lay)


# ----------------------------------------------------------------------------------------------------------------
# signaller (1 warp)

@gluon.jit
def _signaller(sigs, done, sig_free, tab_ptr, ctr_ptr, trace_ptr, MAX_WAITS: gl.constexpr,
               MAX_SIGNALS: gl.constexpr, TASK_WIDTH: gl.constexpr, TRACE: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    lane = gl.arange(0, 32, layout=lay)
    pid = gl.program_id(0)
    i = 0
    t, kind, l, a, b, c = _take(sigs, done, sig_free, 0, lay)
    while t >= 0:
        row = tab_ptr + t * TASK_WIDTH
        n_sig = gl.load(row + 6)
        on = lane < MAX_SIGNALS
        ids = gl.load(row + HEADER + MAX_WAITS + lane, mask=on, other=0)
        gl.inline_asm_elementwise(_RELEASE, "=r,l,r", [ctr_ptr + ids, (on & (lane < n_sig)).to(gl.int32)],
                                  dtype=gl.int32, is_pure=False, pack=1)
        if TRACE:
            _stamp(trace_ptr, t, 2, TRACE, lay, 32)
            sm = gl.inline_asm_elementwise(_SMID, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
            gl.store(trace_ptr + t.to(gl.int64) * 5 + 3 + lane * 0, (pid.to(gl.int64) << 16) | sm.to(gl.int64),
                     mask=lane == 0)
        i += 1
        t, kind, l, a, b, c = _take(sigs, done, sig_free, i, lay)


# ----------------------------------------------------------------------------------------------------------------
# the kernel

@gluon.jit(do_not_specialize=["n_tasks", "epoch", "spin_limit"])
def dag_ws_fwd(
    ln1_hi_d, ln1_lo_d, att_hi_d, att_lo_d, ln2_hi_d, ln2_lo_d, f_hi_d, f_lo_d,   # A operands: [rows, D], box 64²
    wqkv_hi_d, wqkv_lo_d, wo_hi_d, wo_lo_d, w1_hi_d, w1_lo_d, w2_hi_d, w2_lo_d,   # weight slabs [L*N/64*K, 64]
    qkv_hi_d, qkv_lo_d,                                                           # q|k|v [L*3*B*H*S, 64]
    x_ptr, y_ptr, r_ptr, ln1_hi_ptr, ln1_lo_ptr, qkv_hi_ptr, qkv_lo_ptr, att_hi_ptr, att_lo_ptr,
    ln2_hi_ptr, ln2_lo_ptr, f_hi_ptr, f_lo_ptr,
    ln1w_ptr, ln1b_ptr, bqkv_ptr, bo_ptr, ln2w_ptr, ln2b_ptr, b1_ptr, b2_ptr, lnfw_ptr, lnfb_ptr,
    tab_ptr, ctr_ptr, goal_ptr, head_ptr, err_ptr, trace_ptr,
    n_tasks, epoch, spin_limit, qk_scale,
    B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr,
    BLOCK_M_LN: gl.constexpr, LN_ROWS: gl.constexpr, BD: gl.constexpr,
    K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
    SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
    GELU: gl.constexpr, MAX_WAITS: gl.constexpr, MAX_SIGNALS: gl.constexpr, TASK_WIDTH: gl.constexpr,
    GOALS_IN_ROW: gl.constexpr, STAGES: gl.constexpr, TRACE: gl.constexpr,
    LOADER_REGS: gl.constexpr, SIGNAL_REGS: gl.constexpr, num_warps: gl.constexpr,
):
    lt: gl.constexpr = ln1_hi_d.layout
    a_hi = gl.allocate_shared_memory(gl.bfloat16, [STAGES, T64, T64], lt)
    a_lo = gl.allocate_shared_memory(gl.bfloat16, [STAGES, T64, T64], lt)
    w_hi = gl.allocate_shared_memory(gl.bfloat16, [STAGES, T64, T64], lt)
    w_lo = gl.allocate_shared_memory(gl.bfloat16, [STAGES, T64, T64], lt)
    q_hi = gl.allocate_shared_memory(gl.bfloat16, [T64, T64], lt)
    q_lo = gl.allocate_shared_memory(gl.bfloat16, [T64, T64], lt)
    bl: gl.constexpr = mbarrier.MBarrierLayout()
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bl)
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bl)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], bl)
    q_empty = gl.allocate_shared_memory(gl.int64, [1], bl)
    tid_full = gl.allocate_shared_memory(gl.int64, [2, 1], bl)
    tid_free = gl.allocate_shared_memory(gl.int64, [2, 1], bl)
    done = gl.allocate_shared_memory(gl.int64, [2, 1], bl)
    sig_free = gl.allocate_shared_memory(gl.int64, [2, 1], bl)
    il: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    tids = gl.allocate_shared_memory(gl.int32, [2, FIELDS], il)
    sigs = gl.allocate_shared_memory(gl.int32, [2, FIELDS], il)
    for q in gl.static_range(STAGES):
        mbarrier.init(ready.index(q), count=1)
        mbarrier.init(empty.index(q), count=1)
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=1)
    for q in gl.static_range(2):
        mbarrier.init(tid_full.index(q), count=1)
        mbarrier.init(tid_free.index(q), count=1)
        mbarrier.init(done.index(q), count=1)
        mbarrier.init(sig_free.index(q), count=1)
    ring = (a_hi, a_lo, w_hi, w_lo)
    q_buf = (q_hi, q_lo)
    descs = (ln1_hi_d, ln1_lo_d, att_hi_d, att_lo_d, ln2_hi_d, ln2_lo_d, f_hi_d, f_lo_d,
             wqkv_hi_d, wqkv_lo_d, wo_hi_d, wo_lo_d, w1_hi_d, w1_lo_d, w2_hi_d, w2_lo_d, qkv_hi_d, qkv_lo_d)
    gl.warp_specialize([
        (_consumer, (ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free, sigs, done, sig_free,
                     x_ptr, y_ptr, r_ptr, ln1_hi_ptr, ln1_lo_ptr, qkv_hi_ptr, qkv_lo_ptr, att_hi_ptr, att_lo_ptr,
                     ln2_hi_ptr, ln2_lo_ptr, f_hi_ptr, f_lo_ptr, ln1w_ptr, ln1b_ptr, bqkv_ptr, bo_ptr, ln2w_ptr,
                     ln2b_ptr, b1_ptr, b2_ptr, lnfw_ptr, lnfb_ptr, trace_ptr, qk_scale, B, S, D, H, CAUSAL,
                     BLOCK_M_LN, LN_ROWS, BD, K_CHUNK_O, K_CHUNK_FFN2, SCHEME_QKV, SCHEME_O, SCHEME_FFN1,
                     SCHEME_FFN2, GELU, STAGES, TRACE, num_warps)),
        (_loader, (descs, ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free, tab_ptr, ctr_ptr,
                   goal_ptr, head_ptr, err_ptr, trace_ptr, n_tasks, epoch, spin_limit, B, S, D, H, CAUSAL,
                   K_CHUNK_O, K_CHUNK_FFN2, SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, MAX_WAITS, MAX_SIGNALS,
                   TASK_WIDTH, GOALS_IN_ROW, STAGES, TRACE)),
        (_signaller, (sigs, done, sig_free, tab_ptr, ctr_ptr, trace_ptr, MAX_WAITS, MAX_SIGNALS, TASK_WIDTH, TRACE)),
    ], [1, 1], [LOADER_REGS, SIGNAL_REGS])


# ----------------------------------------------------------------------------------------------------------------
# host: meta, descriptors, launch

STAGES_DEFAULT = 4
LOADER_REGS_DEFAULT = 56
SIGNAL_REGS_DEFAULT = 40
A_BUFS = ("ln1", "att", "ln2", "f")                 # the GEMMs' A operands (QKV, output projection, FFN1, FFN2)
W_BUFS = ("wqkv", "wo", "w1", "w2")


class WsUnsupported(ValueError):
    """The prepared configuration is outside what the WS kernel implements; the message names the parameter."""


def check_supported(meta: dict, grid: int | None = None, n_sm: int | None = None) -> None:
    """Raise ``WsUnsupported`` naming the parameter for a ``kernel_meta`` the WS kernel does not run."""
    need = dict(BLOCK_M=TILE, BLOCK_K=TILE, BLOCK_Q=TILE, BLOCK_KV=TILE, DH=TILE)
    for k, v in need.items():
        if meta[k] != v:
            raise WsUnsupported(f"ws_dag: {k}={meta[k]}: the WS kernel's tiles are {TILE} (block_m, block_k, block_q, "
                                f"block_kv = 64 and head dim 64); prepare with the defaults (tune=off)")
    if any(bn != TILE for bn in meta["SITE_BLOCK_N"]):
        raise WsUnsupported(f"ws_dag: block_n={meta['SITE_BLOCK_N']}: every GEMM's block_n must be {TILE} "
                            "(prepare with tune=off: case 12's tuned file sets 128)")
    if meta["S"] % TILE or (meta["B"] * meta["S"]) % TILE or meta["D"] % TILE:
        raise WsUnsupported(f"ws_dag: S={meta['S']}, D={meta['D']}: must be multiples of {TILE}")
    if meta["MAX_WAITS"] > 32 or meta["MAX_SIGNALS"] > 32:
        raise WsUnsupported(f"ws_dag: a task waits for {meta['MAX_WAITS']} / signals {meta['MAX_SIGNALS']} counters: "
                            "the loader and the signaller take one lane each (at most 32)")
    if meta["QUEUE"] != "queue":
        raise WsUnsupported("ws_dag: queue=static is not implemented (the WS loader takes tickets); queue=queue")
    if grid is not None and n_sm is not None and not 1 <= grid <= n_sm:
        raise WsUnsupported(f"ws_dag: grid={grid} programs: the WS kernel runs one CTA per SM ({n_sm} SMs; its "
                            "shared memory allows one), so a grid above the SM count would deadlock; lower --grid")


def ws_meta(meta: dict, stages: int = STAGES_DEFAULT, trace: bool = False, loader_regs: int = LOADER_REGS_DEFAULT,
            signal_regs: int = SIGNAL_REGS_DEFAULT) -> dict:
    """The WS kernel's constexprs from today's ``kernel_meta`` (``DagPrepared.meta``)."""
    check_supported(meta)
    if not 2 <= stages <= 4:
        raise WsUnsupported(f"ws_dag: stages={stages}: 2 to 4 ring slots (4 x 32 KB + the q buffer fit one CTA)")
    return dict(B=meta["B"], S=meta["S"], D=meta["D"], H=meta["H"], CAUSAL=bool(meta["CAUSAL"]),
                BLOCK_M_LN=meta["BLOCK_M_LN"], LN_ROWS=meta["LN_ROWS"], BD=meta["BD"],
                K_CHUNK_O=meta["K_CHUNK_O"], K_CHUNK_FFN2=meta["K_CHUNK_FFN2"],
                SCHEME_QKV=meta["SCHEME_QKV"], SCHEME_O=meta["SCHEME_O"], SCHEME_FFN1=meta["SCHEME_FFN1"],
                SCHEME_FFN2=meta["SCHEME_FFN2"], GELU=meta["GELU"], MAX_WAITS=meta["MAX_WAITS"],
                MAX_SIGNALS=meta["MAX_SIGNALS"], TASK_WIDTH=meta["TASK_WIDTH"],
                GOALS_IN_ROW=meta["WAIT"] == "parallel", STAGES=stages, TRACE=bool(trace),
                LOADER_REGS=loader_regs, SIGNAL_REGS=signal_regs, num_warps=4)


def _smem_layout():
    return gl.NVMMASharedLayout.get_default_for([TILE, TILE], gl.bfloat16)


def descriptors(tensors: dict) -> list:
    """TMA descriptors over today's buffers and weight slabs (``DagPrepared.tensors``), in the kernel's order: the
    A operands as [rows, D] (FFN2's [4, M, D] as [4M, D]), the weight slabs [L, N/64, K, 64] as [L*N/64*K, 64],
    q|k|v [L, 3, B, H, S, 64] as [L*3*B*H*S, 64]; every box 64 × 64 (one NVMMA layout: bf16 and fp16 alike)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    lay = _smem_layout()

    def desc(t):
        t2 = t.reshape(-1, t.shape[-1])
        return TensorDescriptor(t2, list(t2.shape), list(t2.stride()), [TILE, TILE], lay)
    out = []
    for n in A_BUFS:
        out += [desc(tensors[f"{n}_hi_ptr"]), desc(tensors[f"{n}_lo_ptr"])]
    for n in W_BUFS:
        out += [desc(tensors[f"{n}_hi_ptr"]), desc(tensors[f"{n}_lo_ptr"])]
    out += [desc(tensors["qkv_hi_ptr"]), desc(tensors["qkv_lo_ptr"])]
    return out


POINTERS = ("x_ptr", "y_ptr", "r_ptr", "ln1_hi_ptr", "ln1_lo_ptr", "qkv_hi_ptr", "qkv_lo_ptr", "att_hi_ptr",
            "att_lo_ptr", "ln2_hi_ptr", "ln2_lo_ptr", "f_hi_ptr", "f_lo_ptr", "ln1w_ptr", "ln1b_ptr", "bqkv_ptr",
            "bo_ptr", "ln2w_ptr", "ln2b_ptr", "b1_ptr", "b2_ptr", "lnfw_ptr", "lnfb_ptr")
CONTROL = ("tab_ptr", "ctr_ptr", "goal_ptr", "head_ptr", "err_ptr", "trace_ptr")
SCALARS = ("n_tasks", "epoch", "spin_limit", "qk_scale")
CONSTEXPRS = tuple(dag_ws_fwd.arg_names[len(A_BUFS) * 2 + len(W_BUFS) * 2 + 2 + len(POINTERS) + len(CONTROL)
                                        + len(SCALARS):])   # B … num_warps, in parameter order


def compile_for_sm90(meta_ws: dict, dtypes: dict, shapes: dict):
    """Compile ``dag_ws_fwd`` for sm_90a without a GPU (``GluonASTSource``, ``GPUTarget("cuda", 90, 32)``, as
    ``bench.dag.ws_chain._compile_ws``): ``dtypes`` / ``shapes`` give each buffer (``ln1_hi`` …, ``wqkv_hi`` …)
    its torch dtype and shape; the descriptors are built over empty CPU tensors of those."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type
    fake = {f"{n}_ptr": torch.empty(shapes[n], dtype=dtypes[n]) for n in shapes}
    descs = descriptors(fake)
    names = list(dag_ws_fwd.arg_names)
    sig = {n: mangle_type(d) for n, d in zip(names[:len(descs)], descs)}
    tname = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}
    for n in POINTERS:
        key = n[:-4]
        sig[n] = tname[dtypes[key]] if key in dtypes else "*fp32"
    sig.update(tab_ptr="*i32", ctr_ptr="*i32", goal_ptr="*i32", head_ptr="*i32", err_ptr="*i32", trace_ptr="*i64",
               n_tasks="i32", epoch="i32", spin_limit="i32", qk_scale="fp32")
    sig.update({n: "constexpr" for n in meta_ws})
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in (*POINTERS, *CONTROL)}
    src = GluonASTSource(dag_ws_fwd, sig, constexprs={(names.index(k),): v for k, v in meta_ws.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=meta_ws["num_warps"]))


def unwrap_launcher(launch):
    """The launcher module's C ``launch`` under triton 3.6's ``CudaLauncher.launch``: with TensorDescriptor arguments
    that is ``wrap_handle_tensordesc``'s closure, which encodes every descriptor into a CUtensorMap
    (``make_tensordesc_arg``: ``cuTensorMapEncodeTiled``) on every call before calling it. None when ``launch`` is not
    such a closure (another Triton: the caller keeps the JIT path)."""
    code, cells = getattr(launch, "__code__", None), getattr(launch, "__closure__", None)
    if code is None or not cells or "tensordesc_meta" not in code.co_freevars:
        return None
    raw = dict(zip(code.co_freevars, (c.cell_contents for c in cells))).get("launcher")
    return raw if callable(raw) else None


class DirectLaunch:
    """A compiled ``dag_ws_fwd`` launched straight through Triton's launcher module: what the JIT path
    (``dag_ws_fwd[grid](...)``) does per call, done once — binding and specializing ~75 arguments, the cache key, and
    encoding the 18 TMA descriptors (``make_tensordesc_arg``) — leaving per call one C call with the descriptors'
    CUtensorMaps (encoded once here: the descriptors are over ``DagPrepared``'s fixed buffers and weight slabs), the
    pointers as ints (no ``data_ptr`` / ``cuPointerGetAttribute`` per pointer) and the scalars. Argument order and
    expansion are ``wrap_handle_tensordesc``'s (a descriptor becomes its ``make_tensordesc_arg`` list; constexprs are
    passed and ignored). ``encode`` / ``raw`` replace ``make_tensordesc_arg`` / the C launch (CPU tests)."""

    def __init__(self, kernel, descs, constexprs: list, encode=None, raw=None):
        md = kernel.metadata
        if md.global_scratch_size or md.profile_scratch_size or md.num_ctas != 1:
            raise WsUnsupported("ws_dag: the direct launch passes no scratch buffers and one CTA per program")
        if encode is None:
            from triton.backends.nvidia.driver import make_tensordesc_arg as encode
        metas = getattr(md, "tensordesc_meta", None) or [None] * len(descs)
        self.desc_args = [a for d, m in zip(descs, metas, strict=True) for a in encode(d, m)]
        self.raw = raw if raw is not None else unwrap_launcher(kernel.run.launch)
        if self.raw is None:
            raise WsUnsupported("ws_dag: this Triton's launcher is not the one the direct launch unwraps")
        self.head = (kernel.function, md.launch_cooperative_grid, md.launch_pdl, None, None, kernel.packed_metadata,
                     None, None, None)   # function, cooperative, pdl, scratch x2, metadata, launch metadata, hooks
        self.constexprs = list(constexprs)

    def args(self, ptrs: list, scalars: list) -> list:
        """The launcher's arguments after (grid x, y, z, stream): every kernel parameter in order, flattened."""
        return [*self.head, *self.desc_args, *ptrs, *scalars, *self.constexprs]

    def __call__(self, grid: int, stream: int, ptrs: list, scalars: list):
        self.raw(grid, 1, 1, stream, *self.args(ptrs, scalars))


def _no_launch_hooks() -> bool:
    """No Triton launch enter / exit hook is set (a profiler's: the direct launch would skip it). Triton 3.6's
    knobs hold them as ``HookChain``s, empty by default (the JIT path calls the empty chains on every launch)."""
    return all(h is None or not getattr(h, "calls", True)
               for h in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def _epoch_limit(goals: list, n_tasks: int, grid: int) -> int:
    """Launches before a counter (epoch x goal) or the head (epoch x (tasks + grid)) would pass int32 (host.py's)."""
    return (2**31 - 1) // max(max(goals), n_tasks + grid) - 1


class WsDag:
    """The WS kernel on a ``DagPrepared`` (today's graph, task table, buffers and weight slabs; its own queue head,
    counters, error word, trace and epoch). ``launch(x, y)`` runs one forward; ``check()`` raises for a timed-out
    dependency wait."""

    def __init__(self, p, stages: int = STAGES_DEFAULT, grid: int = 0, trace: bool = False,
                 spin_limit: int | None = None, direct: bool = True):
        import torch
        dev = p.ctr.device
        if dev.type != "cuda":
            raise WsUnsupported("ws_dag: the WS kernel runs on CUDA only (Gluon has no interpreter)")
        n_sm = torch.cuda.get_device_properties(dev).multi_processor_count
        self.grid = grid or n_sm
        check_supported(p.meta, self.grid, n_sm)
        self.p = p
        self.meta = ws_meta(p.meta, stages=stages, trace=trace)
        self.descs = descriptors(p.tensors)
        T = p.tensors
        self.ptrs = [T[n] for n in POINTERS[3:]]                         # after x, y, r (filled per launch / r)
        self.r = T["r_ptr"]
        self.tab = p.tab
        self.goal = p.goal
        self.ctr = torch.zeros_like(p.ctr)
        self.head = torch.zeros_like(p.head)
        self.err = torch.zeros_like(p.err)
        self.trace = torch.zeros(*((len(p.graph.tasks), 5) if trace else (1,)), dtype=torch.int64, device=dev)
        self.n_tasks = len(p.graph.tasks)
        self.spin_limit = p.spin_limit if spin_limit is None else spin_limit
        self.epoch = 0
        self.epoch_limit = _epoch_limit(p.graph.goals, self.n_tasks, self.grid)
        self.err_seen = 0
        self.kernel = None
        self.direct = direct          # launches after the first through ``DirectLaunch`` (False: the JIT path)
        self.direct_launch = None     # DirectLaunch, built by the first launch (None: not possible; the JIT path)
        self.direct_error = None      # why not, when it could not be built
        self._ptr_objs = ()           # the tensors whose data_ptr ints the direct launch passes (rebuilt if replaced)
        self._ptr_vals = []

    def args(self, x, y, spin_limit: int | None = None) -> list:
        return [*self.descs, x, y, self.r, *self.ptrs, self.tab, self.ctr, self.goal, self.head, self.err, self.trace,
                self.n_tasks, max(1, self.epoch), self.spin_limit if spin_limit is None else spin_limit,
                self.p.qk_scale]

    def launch(self, x, y, spin_limit: int | None = None):
        """One forward y = f(x) (the counters zeroed first only at the int32 wrap limit, as host.launch). The first
        launch compiles through the JIT path; later ones go through ``DirectLaunch`` when ``direct`` (x and y CUDA
        fp32 tensors of the first launch's dtypes and 16-byte alignment, which the kernel was specialized for; no
        Triton launch hook set), else the JIT path again."""
        if self.epoch + 1 > self.epoch_limit:
            self.ctr.zero_()
            self.head.zero_()
            self.epoch = 0
        self.epoch += 1
        d = self.direct_launch
        if (d is not None and self.direct and x.is_cuda and y.is_cuda and x.dtype == y.dtype == self._xy_dtype
                and _no_launch_hooks()):
            xp, yp = x.data_ptr(), y.data_ptr()
            if not (xp | yp) & 15:
                d(self.grid, self._stream(self._dev), [xp, yp, *self._fixed_ptrs()],
                  [self.n_tasks, self.epoch, self.spin_limit if spin_limit is None else spin_limit, self.p.qk_scale])
                return self.kernel
        k = dag_ws_fwd[(self.grid,)](*self.args(x, y, spin_limit), **self.meta)
        if self.kernel is None:
            self.kernel = k
            self._xy_dtype = x.dtype if x.dtype == y.dtype else None
            self._dev = x.device.index
            if self.direct and (x.data_ptr() | y.data_ptr()) & 15 == 0:
                try:
                    self.direct_launch = DirectLaunch(k, self.descs, [self.meta[n] for n in CONSTEXPRS])
                    self._stream = triton.runtime.driver.active.get_current_stream
                except (WsUnsupported, AttributeError, TypeError, ValueError) as e:
                    self.direct_error = f"{type(e).__name__}: {e}"
        return k

    def _fixed_ptrs(self) -> list:
        """data_ptr ints of r, the other buffers and the control tensors (cached; rebuilt when one was replaced, as
        the harness's traced instance takes the timed instance's counters)."""
        objs = (self.r, *self.ptrs, self.tab, self.ctr, self.goal, self.head, self.err, self.trace)
        if len(objs) != len(self._ptr_objs) or any(a is not b for a, b in zip(objs, self._ptr_objs)):
            self._ptr_objs = objs
            self._ptr_vals = [t.data_ptr() for t in objs]
        return self._ptr_vals

    def check_shared(self) -> dict:
        """Shared memory of the compiled kernel against the device's per-block limit (one CTA per SM)."""
        import torch
        props = torch.cuda.get_device_properties(self.ctr.device)
        limit = getattr(props, "shared_memory_per_block_optin", None)
        shared = self.kernel.metadata.shared if self.kernel is not None else None
        if limit is not None and shared is not None and shared > limit:
            raise WsUnsupported(f"ws_dag: {shared} bytes of shared memory > the device's {limit} per block; "
                                "lower --stages")
        return dict(shared=shared, shared_limit=limit, num_warps=getattr(self.kernel.metadata, "num_warps", None))

    def check(self) -> None:
        """Raise if a dependency wait gave up since the last check (synchronises)."""
        bad, task = self.err.tolist()
        if bad > self.err_seen:
            new, self.err_seen = bad - self.err_seen, bad
            name = self.p.graph.tasks[task].name if 0 <= task < self.n_tasks else f"#{task}"
            raise WaitTimeout(f"ws_dag: {new} dependency wait(s) TIMED OUT after spin_limit polls (last: task {task}, "
                              f"{name}); the output is wrong")


class WaitTimeout(RuntimeError):
    pass


def stall_report(ws: WsDag, ctr, head: int, err) -> dict:
    """What a launch that did not finish had done: tickets taken, the waits that gave up, and the counters below
    epoch x goal grouped by stage (the first stage with incomplete counters is where the chain stopped)."""
    g = ws.p.graph
    goals = g.goals
    e = ws.epoch
    base = (e - 1) * (ws.n_tasks + ws.grid)
    short = [(c, int(ctr[c]), goals[c] * e) for c in range(1, len(goals)) if int(ctr[c]) < goals[c] * e]
    by_stage: dict = {}
    for c, have, want in short:
        name = g.counter_names[c]
        by_stage.setdefault(f"{name[0]}[l{name[1]}]", []).append((name, have, want))
    # the first incomplete counters in queue order of their first waiter
    first_waiter = {}
    for i, tk in enumerate(g.tasks):
        for c in tk.waits:
            first_waiter.setdefault(c, i)
    short.sort(key=lambda s: first_waiter.get(s[0], 1 << 30))
    return dict(epoch=e, tickets_taken=head - base, tickets_per_launch=ws.n_tasks + ws.grid,
                waits_timed_out=int(err[0]), last_timeout_task=int(err[1]),
                incomplete_counters=len(short),
                incomplete_by_stage={k: len(v) for k, v in sorted(by_stage.items())},
                first_incomplete=[dict(counter=list(g.counter_names[c]), have=have, want=want,
                                       first_waiter=g.tasks[first_waiter[c]].name if c in first_waiter else None)
                                  for c, have, want in short[:12]])


def finish_or_report(ws: WsDag, timeout_s: float) -> dict | None:
    """Wait for the launches queued so far; None when they finished within ``timeout_s``, else the stall report
    (the counters, head and err read on a side stream while the launch is still running)."""
    import torch
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > timeout_s:
            side = torch.cuda.Stream()
            ctr = torch.empty(ws.ctr.shape, dtype=ws.ctr.dtype, pin_memory=True)
            head = torch.empty(1, dtype=torch.int32, pin_memory=True)
            err = torch.empty(2, dtype=torch.int32, pin_memory=True)
            with torch.cuda.stream(side):
                ctr.copy_(ws.ctr, non_blocking=True)
                head.copy_(ws.head, non_blocking=True)
                err.copy_(ws.err, non_blocking=True)
                done = torch.cuda.Event()
                done.record(side)
            t1 = time.time()
            while not done.query() and time.time() - t1 < 10:
                time.sleep(0.01)
            if not done.query():
                return dict(hang=True, note="the side-stream copy of the counters did not finish either")
            return dict(hang=True, after_s=round(time.time() - t0, 1), **stall_report(ws, ctr, int(head[0]), err))
        time.sleep(0.002)
    return None


# ----------------------------------------------------------------------------------------------------------------
# checks: buffers against today's kernel, each kind against float64 products of the WS kernel's own inputs

SPLIT = ("ln1", "att", "ln2", "f")


def buffer_values(p) -> dict:
    """The intermediate buffers' values as float64 (split buffers: hi + lo), by name; q|k|v per layer and part."""
    T = p.tensors
    out = {"r": T["r_ptr"].double()}
    for n in SPLIT:
        out[n] = T[f"{n}_hi_ptr"].double() + T[f"{n}_lo_ptr"].double()
    qkv = T["qkv_hi_ptr"].double() + T["qkv_lo_ptr"].double()
    for l in range(qkv.shape[0]):
        for j, part in enumerate("qkv"):
            out[f"{part}[l{l}]"] = qkv[l, j]
    return out


def snapshot(p) -> dict:
    return {k: v.clone() for k, v in buffer_values(p).items()}


def zero_buffers(p) -> None:
    """Zero every intermediate buffer (a task that reads before its producer wrote would read zeros)."""
    for k, t in p.tensors.items():
        if k == "r_ptr" or any(k.startswith(f"{n}_") for n in ("ln1", "qkv", "att", "ln2", "f")):
            if not k.startswith(("ln1w", "ln1b", "ln2w", "ln2b")):
                t.zero_()


def _diff(a, b) -> dict:
    d = (a - b).abs()
    scale = float(b.abs().max())
    return dict(max_abs=float(d.max()), rel_to_max=float(d.max()) / max(scale, 1e-30),
                bitwise_equal=float((a == b).double().mean()))


def compare(ws_vals: dict, tl_vals: dict, tol: float = 1e-3) -> dict:
    """Per buffer: max |ws − today| and that over max |today|; ``ok`` when below ``tol`` (the two kernels run the same
    products in the same order, so differences are the LayerNorm reductions' and the atomics' order, ~1e-6)."""
    out = {}
    for k in tl_vals:
        r = _diff(ws_vals[k], tl_vals[k])
        r["ok"] = r["rel_to_max"] <= tol
        out[k] = r
    return out


def _weight(p, name: str, n_cols: int):
    """W^T [L, K, N] float64 from the prepared slabs [L, N/64, K, 64] (hi + lo for bf16x3, the fp16 part once for
    f16_w1): exactly the operands the kernels multiply."""
    T = p.tensors
    hi = T[f"{name}_hi_ptr"].double()
    scheme = p.meta[{"wqkv": "SCHEME_QKV", "wo": "SCHEME_O", "w1": "SCHEME_FFN1", "w2": "SCHEME_FFN2"}[name]]
    w = hi if scheme == "f16_w1" else hi + T[f"{name}_lo_ptr"].double()
    L, NT, K, BN = w.shape
    return w.permute(0, 2, 1, 3).reshape(L, K, NT * BN)[:, :, :n_cols]


def _ln64(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / (var + eps).sqrt() * w + b


def kind_checks(p, x, y, tol: float = 1e-3) -> dict:
    """Each task kind of the last layer checked in isolation on the buffers of one launch (float64 products of the
    launch's own operands; ``rel`` = max |error| / max |expected|, ``ok`` below ``tol``):
    qkv (q|k|v of the last layer from its ln1), attn (att from q|k|v), ffn1 (f from ln2), lnf (y from r), ffn2+ln2
    (ln2 from r less the FFN2 product of f), oproj+ln1 (ln1 from r less both residual products of the last layer:
    the residual before it; x itself when L = 1)."""
    import torch
    c = p.case
    B, S, D, H, L, dh = c.B, c.S, c.D, c.H, c.L, c.dh
    M = B * S
    T = p.tensors
    v = buffer_values(p)
    l = L - 1
    out = {}

    def rec(name, got, want):
        d = (got - want).abs()
        out[name] = dict(rel=float(d.max()) / max(float(want.abs().max()), 1e-30), max_abs=float(d.max()))
        out[name]["ok"] = out[name]["rel"] <= tol

    wqkv, wo = _weight(p, "wqkv", 3 * D)[l], _weight(p, "wo", D)[l]
    w1, w2 = _weight(p, "w1", 4 * D)[l], _weight(p, "w2", D)[l]
    bq, bo, b1, b2 = (T[k][l].double() for k in ("bqkv_ptr", "bo_ptr", "b1_ptr", "b2_ptr"))
    # QKV: [M, 3D] -> head-major [3, B, H, S, dh]
    qkv = (v["ln1"] @ wqkv + bq).reshape(B, S, 3, H, dh).permute(2, 0, 3, 1, 4)
    got = torch.stack([v[f"{part}[l{l}]"] for part in "qkv"])
    rec("qkv", got, qkv)
    # attention from the kernel's own q|k|v
    q, k, vv = got[0], got[1], got[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if c.causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ vv                                   # [B, H, S, dh]
    rec("attn", v["att"], o.permute(0, 2, 1, 3).reshape(M, D))
    # FFN1 (+ GELU, exact erf) from ln2; f is [4, M, D] (column c of 4D in block c // D)
    h1 = v["ln2"] @ w1 + b1
    h1 = 0.5 * h1 * (1.0 + torch.erf(h1 / math.sqrt(2.0)))
    f = v["f"].permute(1, 0, 2).reshape(M, 4 * D)
    rec("ffn1", f, h1)
    # final LayerNorm from r
    rec("lnf", y.double().reshape(M, D), _ln64(v["r"], T["lnfw_ptr"].double(), T["lnfb_ptr"].double()))
    # the residual before FFN2, and before the output projection, from r less the products of f and att
    r_mid = v["r"] - (f @ w2 + b2)
    rec("ffn2+ln2", v["ln2"], _ln64(r_mid, T["ln2w_ptr"][l].double(), T["ln2b_ptr"][l].double()))
    r_pre = r_mid - (v["att"] @ wo + bo)
    rec("oproj+ln1", v["ln1"], _ln64(r_pre, T["ln1w_ptr"][l].double(), T["ln1b_ptr"][l].double()))
    if L == 1:
        rec("oproj(r=x)", r_pre, x.double().reshape(M, D))
    return out


# ----------------------------------------------------------------------------------------------------------------
# the harness

def _time_us(fn, reps: int, rounds: int = 5) -> dict:
    """CUDA events around ``reps`` back-to-back launches, ``rounds`` times: the median µs per launch (and the range)."""
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per, host = [], []
    for _ in range(rounds):
        e0.record()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        host.append((time.perf_counter() - t0) * 1e6 / reps)
        e1.record()
        torch.cuda.synchronize()
        per.append(e0.elapsed_time(e1) * 1000 / reps)
    per.sort()
    host.sort()
    med = per[len(per) // 2]
    # the launches' host time: when it reaches the GPU time the queue drains and the median times the host
    return dict(median_us=med, min_us=per[0], max_us=per[-1], reps=reps, rounds=rounds,
                host_us_per_launch=host[len(host) // 2], host_bound=host[len(host) // 2] > 0.8 * med)


def _gate_all(case, w, run, refs: dict) -> dict:
    """The gate (kernels.gate, config/gate/default.yaml's atol / rtol) at the SPEC scales x seeds of the default gate
    config, as check_gpu runs it (the fp32 references cached in ``refs`` for the other form)."""
    from kernels import default_gate_config, gate, make_input, reference_forward
    cfg = default_gate_config()
    rows, worst, passed = [], 0.0, True
    for scale in cfg.scales:
        for seed in cfg.seeds:
            x = make_input(case, scale, seed, device=w.device)
            if (scale, seed) not in refs:
                refs[(scale, seed)] = reference_forward(case, w, x)
            r = gate(run(x), refs[(scale, seed)])
            rows.append(dict(scale=scale, seed=seed, passed=r.passed, max_over_tol=r.max_over_tol))
            worst = max(worst, r.max_over_tol)
            passed = passed and r.passed
    return dict(passed=passed, worst_over_tol=worst, runs=rows)


def run_case(case_id: str, args, recs: list) -> None:
    """Both forms on one case; their records (today's ``tl``, then ``ws``) are appended to ``recs`` as soon as they
    exist and filled in step by step, so a failure later in the case keeps what was measured before it."""
    import torch
    from kernels import load_case, make_input, make_weights
    from kernels.dag import host
    case = load_case(case_id)
    w = make_weights(case, device="cuda")
    params = dict(tune="off")   # the defaults: both kernels on one graph and one tiling (no tuned file)
    for kv in args.param:
        k, _, v = kv.partition("=")
        params[k] = host.parse_value(v)
    t0 = time.time()
    p = host.prepare(case, w, **params)
    tl = dict(case=case.name, form="tl", tasks=len(p.graph.tasks), counters=p.graph.n_counters, grid=p.grid,
              prepare_s=round(time.time() - t0, 1), registers=p.info.get("registers"), shared=p.info.get("shared"))
    recs.append(tl)
    ws = WsDag(p, stages=args.stages, grid=args.grid, direct=not args.jit_launch)
    rec = dict(case=case.name, form="ws", tasks=len(p.graph.tasks), grid=ws.grid, stages=args.stages)
    recs.append(rec)
    x = make_input(case, 1.0, 0, device="cuda")

    # today's kernel, from zeroed buffers
    zero_buffers(p)
    y_tl = host.run(p, x)
    torch.cuda.synchronize()
    host.check(p)
    tl_vals = snapshot(p)
    tl["kind_checks"] = kind_checks(p, x, y_tl)

    # the WS kernel, from zeroed buffers (the first launch compiles; a short spin limit surfaces missing signals)
    zero_buffers(p)
    y_ws = torch.empty_like(x)
    t0 = time.time()
    ws.launch(x, y_ws, spin_limit=args.check_spin)
    stall = finish_or_report(ws, args.hang_s)
    rec["first_launch_s"] = round(time.time() - t0, 1)
    if stall is not None:
        rec.update(error="HANG: the first WS launch did not finish (stall: the queue head and the incomplete "
                         "counters, read while it ran)", stall=stall)
        return
    rec.update(ws.check_shared())
    rec["launch_path"] = "direct" if ws.direct_launch is not None else f"jit ({ws.direct_error or 'not built'})"
    try:
        ws.check()
    except WaitTimeout as e:
        rec["wait_timeout"] = str(e)
        rec["stall"] = stall_report(ws, ws.ctr.cpu(), int(ws.head.item()), ws.err.cpu())
    ws_vals = snapshot(p)
    rec["y_vs_tl"] = _diff(y_ws.double(), y_tl.double())
    rec["buffers_vs_tl"] = compare(ws_vals, tl_vals)
    rec["kind_checks"] = kind_checks(p, x, y_ws)
    rec["mismatch"] = dict(buffers=[k for k, r in rec["buffers_vs_tl"].items() if not r["ok"]],
                           kinds=[k for k, r in rec["kind_checks"].items() if not r["ok"]])
    del ws_vals, tl_vals
    if ws.direct_launch is not None:  # the direct launch on the same input (a wrong argument faults or hangs here)
        y_d = torch.empty_like(x)
        ws.launch(x, y_d, spin_limit=args.check_spin)
        if finish_or_report(ws, args.hang_s) is not None:
            raise RuntimeError("ws_dag: the first direct launch hung")
        ws.check()
        rec["direct_vs_jit"] = _diff(y_d.double(), y_ws.double())   # r's atomics: rounding order only

    # the gate, both forms
    refs: dict = {}
    tl["gate"] = _gate_all(case, w, lambda xx: host.run(p, xx), refs)

    def run_ws(xx):
        yy = torch.empty_like(xx)
        ws.launch(xx, yy)
        if finish_or_report(ws, args.hang_s) is not None:
            raise RuntimeError("ws_dag: a gate launch hung")
        return yy
    rec["gate"] = _gate_all(case, w, run_ws, refs)
    del refs
    ws.check()

    # timing: back-to-back launches
    y1 = torch.empty_like(x)
    tl.update(_time_us(lambda: host.launch(p, x, y1), args.reps))
    host.check(p)
    rec.update(_time_us(lambda: ws.launch(x, y1), args.reps))
    if finish_or_report(ws, args.hang_s) is not None:
        raise RuntimeError("ws_dag: a timed launch hung")
    ws.check()
    rec["speedup_vs_tl"] = tl["median_us"] / rec["median_us"]
    # the same launches through Gluon's JIT path (what the direct launch saves the host)
    ws.direct = False
    jit = _time_us(lambda: ws.launch(x, y1), args.reps)
    ws.direct = not args.jit_launch
    if finish_or_report(ws, args.hang_s) is not None:
        raise RuntimeError("ws_dag: a timed launch hung")
    ws.check()
    rec["jit_path"] = {k: jit[k] for k in ("median_us", "host_us_per_launch", "host_bound")}

    if args.trace:  # traced launches of each (host.task_profile's per-kind split of the last one)
        tr = WsDag(p, stages=args.stages, grid=args.grid, trace=True, direct=not args.jit_launch)
        tr.ctr, tr.head, tr.epoch = ws.ctr, ws.head, ws.epoch   # continue the epochs of the timed kernel
        for _ in range(2):
            tr.launch(x, y1)
        if finish_or_report(tr, args.hang_s) is not None:
            raise RuntimeError("ws_dag: the traced launch hung")
        tr.check()
        ws.epoch = tr.epoch
        rec["profile"] = _profile(p, tr.trace, tr.grid)
        pt = host.prepare(case, w, **dict(params, trace=True))
        for _ in range(2):
            host.run(pt, x)
        torch.cuda.synchronize()
        host.check(pt)
        tl["profile"] = _profile(pt, pt.trace, pt.grid)


def _profile(p, trace, grid) -> dict:
    """``host.task_profile`` of a trace tensor ([tasks, 5] int64, the same columns as today's kernel's)."""
    from types import SimpleNamespace
    from kernels.dag import host
    prof = host.task_profile(SimpleNamespace(meta=dict(TRACE=True), trace=trace, graph=p.graph, grid=grid))
    prof["kinds"] = {k: {kk: round(vv, 3) for kk, vv in d.items()} for k, d in prof["kinds"].items()}
    return prof


def _summary(r: dict) -> dict:
    """The one-line JSON of a record (the big nested parts summarised)."""
    keep = {k: v for k, v in r.items() if k not in ("buffers_vs_tl", "kind_checks", "gate", "profile", "stall")}
    if "gate" in r:
        keep["gate_passed"] = r["gate"]["passed"]
        keep["gate_worst_over_tol"] = round(r["gate"]["worst_over_tol"], 4)
    if "kind_checks" in r:
        keep["kind_rel"] = {k: float(f"{v['rel']:.3g}") for k, v in r["kind_checks"].items()}
    if "buffers_vs_tl" in r:
        keep["worst_buffer"] = max(r["buffers_vs_tl"].items(), key=lambda kv: kv[1]["rel_to_max"])[0]
        keep["worst_buffer_rel"] = float(f"{max(v['rel_to_max'] for v in r['buffers_vs_tl'].values()):.3g}")
    if "stall" in r:
        keep["stall"] = {k: r["stall"][k] for k in ("tickets_taken", "tickets_per_launch", "waits_timed_out",
                                                    "incomplete_by_stage") if k in r["stall"]}
    if "profile" in r:
        keep["kernel_us_traced"] = round(r["profile"]["kernel_us"], 1)
        keep["busy"] = round(r["profile"]["busy"], 3)
    return keep


def _write(out_dir: str, rows: list, extra: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, ".ws_dag.json.tmp")
    with open(tmp, "w") as f:
        json.dump(dict(rows=rows, **extra), f, indent=1, default=str)
    os.replace(tmp, os.path.join(out_dir, "ws_dag.json"))


def _child(args) -> int:
    """One case in this process (``--one-case``): its records as JSON lines prefixed ``@@REC `` for the parent (and a
    one-line summary each)."""
    recs: list = []
    try:
        run_case(args.one_case, args, recs)
    except Exception as e:  # report, never hang the parent
        import traceback
        err = dict(error=f"{type(e).__name__}: {e}"[:2000], traceback=traceback.format_exc()[-3000:])
        if recs and recs[-1].get("form") == "ws":
            recs[-1].update(err)
        else:
            recs.append(dict(case=args.one_case, form="ws" if recs else "setup", **err))
    for r in recs:
        print("@@REC " + json.dumps(r, default=str), flush=True)
        print(json.dumps(_summary(r), default=str), flush=True)
    if any("HANG" in str(r.get("error", "")) for r in recs):
        os._exit(3)  # a hung kernel holds the context: leave at once (the driver tears it down)
    return 0


def _run_child(cmd: list, timeout_s: float) -> tuple[list, object]:
    """Run one case's process, echo its output as it comes, collect its records; kill it after ``timeout_s``."""
    import queue
    import threading
    got, lines = [], queue.Queue()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=root)

    def pump():
        for ln in proc.stdout:
            lines.put(ln)
        lines.put(None)
    threading.Thread(target=pump, daemon=True).start()
    t_end = time.time() + timeout_s
    while True:
        try:
            ln = lines.get(timeout=max(0.1, t_end - time.time()))
        except queue.Empty:
            proc.kill()
            return got, f"killed after {timeout_s:.0f} s (--case-timeout)"
        if ln is None:
            break
        if ln.startswith("@@REC "):
            got.append(json.loads(ln[6:]))
        else:
            print(ln, end="", flush=True)
        if time.time() > t_end:
            proc.kill()
            return got, f"killed after {timeout_s:.0f} s (--case-timeout)"
    return got, proc.wait(timeout=60)


def compile_case(cid, stages: int = STAGES_DEFAULT, params: dict | None = None, trace: bool = False):
    """``dag_ws_fwd`` compiled for sm_90a without a GPU on case ``cid``'s meta (the graph ``prepare`` would build for
    264 programs on an H200: today's defaults, tune off). Returns (kernel, case, graph, tiling, ws meta, buffer
    dtypes, buffer shapes) — ``compile_for_sm90``'s ``dtypes`` / ``shapes``."""
    import torch
    from kernels import load_case
    from kernels.dag import graph as G
    from kernels.dag import host
    case = load_case(cid)
    o = host.check_params(dict(params or {}))
    t = host.tiling_for(case, o, 264)
    g = G.build(case, t, o["order"], 264)
    _, width = host.task_table(g, goals=o["wait"] == "parallel")
    meta = host.kernel_meta(case, t, g, o, 264, True, width)
    mw = ws_meta(meta, stages=stages, trace=trace)
    M, D, L = case.tokens, case.D, case.L
    dt = {"bf16x3": torch.bfloat16, "f16_w1": torch.float16}
    dtypes, shapes = {}, {}
    for n, sch, shp in (("ln1", t.scheme_qkv, (M, D)), ("att", t.scheme_o, (M, D)),
                        ("ln2", t.scheme_ffn1, (M, D)), ("f", t.scheme_ffn2, (4, M, D)),
                        ("qkv", "bf16x3", (L, 3, case.B, case.H, case.S, case.dh))):
        for part in ("hi", "lo"):
            dtypes[f"{n}_{part}"], shapes[f"{n}_{part}"] = dt[sch], shp
    for n, sch, N, K in (("wqkv", t.scheme_qkv, 3 * D, D), ("wo", t.scheme_o, D, D),
                         ("w1", t.scheme_ffn1, 4 * D, D), ("w2", t.scheme_ffn2, D, 4 * D)):
        for part in ("hi", "lo"):
            dtypes[f"{n}_{part}"], shapes[f"{n}_{part}"] = dt[sch], (L, N // TILE, K, TILE)
    return compile_for_sm90(mw, dtypes, shapes), case, g, t, mw, dtypes, shapes


def compile_report(cases=("2", "12"), stages: int = STAGES_DEFAULT, params: dict | None = None,
                   trace: bool = False) -> dict:
    """Compile the WS kernel for sm_90a without a GPU for each case's meta (``compile_case``) and count the
    protocol's instructions in the PTX; ptxas -v for registers, spills and whether it serialized the wgmma."""
    out = {}
    for cid in cases:
        t0 = time.time()
        k, case, g, t, mw, dtypes, shapes = compile_case(cid, stages, params, trace)
        ptx = k.asm["ptx"]
        rec = dict(case=case.name, compile_s=round(time.time() - t0, 1), warps=k.metadata.num_warps,
                   shared=k.metadata.shared, tasks=len(g.tasks), max_waits=g.max_waits, max_signals=g.max_signals,
                   schemes=[t.scheme_qkv, t.scheme_o, t.scheme_ffn1, t.scheme_ffn2],
                   wgmma=ptx.count("wgmma.mma_async"), tma=ptx.count("cp.async.bulk.tensor"),
                   red_release=ptx.count("red.release.gpu"), ld_acquire=ptx.count("ld.acquire.gpu"),
                   fence_proxy=ptx.count("fence.proxy.async"), mbarrier_wait=ptx.count("mbarrier.try_wait"),
                   mbarrier_arrive=ptx.count("mbarrier.arrive"), setmaxnreg=ptx.count("setmaxnreg"),
                   f32_atomics=sum(1 for ln in ptx.splitlines() if ".global" in ln and ".add" in ln and "f32" in ln
                                   and ("red." in ln or "atom." in ln)),
                   ex2=ptx.count("ex2.approx"))
        rec.update(_ptxas(ptx))
        out[case.name] = rec
    return out


def _ptxas(ptx: str) -> dict:
    """Registers and spills of the PTX for sm_90a by the bundled ptxas (``bench.common.sm90_report.ptxas_verbose``),
    and whether ptxas serialized the wgmma (its performance notes C7514 / C7515, which serialize every wgmma of the
    function; ``wgmma_notes`` the codes it gave); {} when it cannot run."""
    from bench.common.sm90_report import ptxas_verbose
    try:
        txt = ptxas_verbose(ptx)
    except (OSError, subprocess.SubprocessError):
        return {}
    regs = re.search(r"Used (\d+) registers", txt)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", txt)
    notes = sorted(set(re.findall(r"\((C751[45])\)", txt)))
    return dict(registers=int(regs.group(1)) if regs else None,
                spill_stores=int(spill.group(1)) if spill else None, spill_loads=int(spill.group(2)) if spill else None,
                wgmma_serialized=bool(notes) if regs else None, wgmma_notes=notes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for ws_dag.json (GPU)")
    ap.add_argument("--cases", nargs="+", default=["2", "3", "4", "12"])
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a without a GPU; print the counts")
    ap.add_argument("--trace", action="store_true", help="also one traced launch of each form (task_profile)")
    ap.add_argument("--stages", type=int, default=STAGES_DEFAULT, help="ring slots (2-4)")
    ap.add_argument("--grid", type=int, default=0, help="WS programs (default: one per SM; at most the SM count)")
    ap.add_argument("--jit-launch", action="store_true",
                    help="every WS launch through Gluon's JIT path (default: the first; then DirectLaunch)")
    ap.add_argument("--param", nargs="*", default=[], help="name=value for prepare (both kernels), e.g. ctas_per_sm=1")
    ap.add_argument("--reps", type=int, default=20, help="back-to-back launches per timing round")
    ap.add_argument("--check-spin", type=int, default=200_000,
                    help="spin_limit of the WS kernel's first (checked) launch: a missing signal surfaces in ~0.1 s")
    ap.add_argument("--hang-s", type=float, default=20.0, help="s before a launch counts as hung (then reported)")
    ap.add_argument("--case-timeout", type=float, default=200.0, help="s per case (its process) before it is killed")
    ap.add_argument("--one-case", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.compile:
        params = {}
        for kv in a.param:
            k, _, v = kv.partition("=")
            params[k] = v if not v.lstrip("-").isdigit() else int(v)
        for name, rec in compile_report(a.cases if a.cases != ["2", "3", "4", "12"] else ("2", "12"), a.stages,
                                        params, a.trace).items():
            print(json.dumps(rec), flush=True)
        return
    if a.one_case:
        sys.exit(_child(a))
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("ws_dag: no CUDA device; without a GPU run `python -m bench.dag.ws_dag --compile`")
    if not a.out:
        raise SystemExit("ws_dag: --out DIR is required")
    rows = []
    extra = dict(device=torch.cuda.get_device_name(), argv=sys.argv[1:])
    for c in a.cases:  # one process per case: a hung or faulted kernel takes only its own case down
        cmd = [sys.executable, "-m", "bench.dag.ws_dag", "--one-case", c, "--stages", str(a.stages), "--grid",
               str(a.grid), "--reps", str(a.reps), "--check-spin", str(a.check_spin), "--hang-s", str(a.hang_s)]
        if a.trace:
            cmd.append("--trace")
        if a.jit_launch:
            cmd.append("--jit-launch")
        if a.param:
            cmd += ["--param", *a.param]
        got, rc = _run_child(cmd, a.case_timeout)
        if rc != 0:
            note = dict(case=c, form="process", error=f"the case's process: {rc}")
            print(json.dumps(note), flush=True)
            got.append(note)
        rows += got
        _write(a.out, rows, extra)
    bad = [r for r in rows if r.get("form") == "ws" and (r.get("error") or r.get("wait_timeout")
                                                          or (r.get("mismatch") or {}).get("kinds")
                                                          or not (r.get("gate") or {}).get("passed", False))]
    print(f"ws_dag: {len(rows)} records in {os.path.join(a.out, 'ws_dag.json')}; "
          f"{'all WS rows pass' if not bad else f'{len(bad)} WS row(s) with an error, a mismatch or a failed gate'}",
          flush=True)


if __name__ == "__main__":
    main()
