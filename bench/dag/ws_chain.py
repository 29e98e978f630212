"""What one link of a dependency chain costs in a warp-specialized Gluon task loop, against the `tl` loop of today's kernel.

The `dag` kernel's cases 2–4 are bound by the per-layer chain of dependent tasks ("What bounds it" in docs/dag.md):
each chain task pays ~2.6 µs besides its MMA work and each link ~0.6 µs, and the simulator says 6× needs ~1.0 µs and
~0.2 µs with tiles 1.5× faster. The warp-specialized design of the prior art (a loader warp that loads the next task's
weights while the consumer warps compute, a warp that does the release) is the candidate. This probe measures the
chain it would run, on one synthetic graph, before any of the megakernel is rewritten:

    X_{s+1} = X_s · W_s,  s = 0 … L-1,  X_s [M, K] and W_s [K, K] as bf16 hi/lo pairs, bf16x3 products,

cut into 64 × 64 output tiles over K; tile (s + 1, m, n) waits for a counter of (s, m) to reach every column tile of
row block m (epochs as in the kernel: launch e waits for e × goal). Program p runs tile p of every stage (grid = tiles
per stage, static lists): time per stage is the chain's link, work included. Forms:

- ``tl``: a ``@triton.jit`` loop as today's kernel runs a GEMM task: thread 0 polls ``ld.acquire.gpu``, CTA barrier,
  the pointer K loop (cp.async, 3 stages, ``.cg`` for A), the split epilogue, CTA barrier, ``red.release.gpu``.
- ``ws0``: Gluon, a 1-warp TMA loader, one MMA warpgroup (consumer), a 1-warp signaller; the loader starts a task only
  once the previous task's release is done (serial, as ``tl``), polls, then issues the A and W tiles.
- ``ws1``: the same, the loader starting the next task as soon as it has issued the current task's loads (the release
  and the epilogue overlap the next task's wait).
- ``ws2``: ``ws1`` with the weights of the task's first ``STAGES`` K steps issued before its wait: after the acquire
  only A is still to come.
- ``ws0q``, ``ws1q``, ``ws2q``: the same with the kernel's ticket queue in place of static lists: the loader takes
  tickets from one atomic head (epochs: the head advances by every task and one empty ticket per program a launch)
  and hands each task id to the consumer, which hands it to the signaller (2-slot rings in shared memory, mbarriers).
- ``tla``, ``ws2a``, ``ws2qa``: ``tl``, ``ws2``, ``ws2q`` with the residual GEMMs' epilogue added to every task: the
  fp32 tile also added into a residual R [M, K] with relaxed gpu-scope atomics (``red.global.add.f32``, as the
  kernel's output projection and FFN2 do) before the release; R = X_1 + … + X_L is checked too. The difference to the
  form without ``a`` is what the atomics cost on the chain beside the stores and the proxy fence.
- ``ws2c``, ``ws2ca``: ``ws2``, ``ws2a`` with two consumer warpgroups per program running two tasks at the same time
  (the tensor core, shared-memory bandwidth and L2 shared): ``chain_ws2c`` holds two copies of ``ws2``'s pipeline,
  pipeline c ∈ {0, 1} a loader warp, consumer warpgroup c and a signaller warp, with its own ring (``--stages2c``
  slots, default 3) and its own ``ready`` / ``empty`` / ``done`` / ``sig_free`` mbarriers. The program's static list
  is the other forms' (pid, pid + grid, …, so a grid compares with the same grid of ``ws2``) taken alternately:
  pipeline c runs its c-th, (c + 2)-th, … task; with grid = tiles per stage / 2, consumer c runs tile pid + c · grid
  of every stage. One loader warp per consumer rather than one for both: a loader stays inside a task until it has
  issued its last K step, i.e. until its consumer has freed all but STAGES slots of it, and it waits on the
  task's dependency in between, so one loader would feed the second consumer only once the first is nearly done
  (the tasks serialized again); a signaller per consumer so that neither release waits for the other task's
  epilogue. Warps: consumer 0 is the default partition (4 warps), the workers consumer 1 (4 warps) and the four
  1-warp partitions, which fill exactly one warpgroup (Triton pads worker warps to whole warpgroups: one shared
  loader and signaller would take the same 4 warps' registers). 12 warps; Triton sets ``.maxnreg`` 168 (64K / 384
  threads), then ``setmaxnreg`` 40 for the 1-warp group and ``WS2C_REGS`` = 232 for each consumer warpgroup
  (the default partition gets the rest: 168 · 3 − 232 − 40 = 232): 2 · 128 · 232 + 128 · 40 = 64512 ≤ 65536.
  Shared memory: two rings of 3 × 32 KB, two epilogue scratch buffers of 8 KB and the barriers: 213192 bytes
  (208 KB, one CTA per SM); 4 slots each would need 256 KB. The traced split is the other forms' (each pipeline
  stamps its own tasks): ``mma`` of ``ws2c`` is one task's MMA time while the other consumer's task shares the
  tensor core.
  Memory ordering: each pipeline is ``ws2``'s protocol unchanged (``kernels/dag/ws_kernel.py``'s docstring, points
  1–3): consumer c's stores and atomics, its ``fence.proxy.async.global``, its own named CTA barrier (Triton gives
  the two consumer warpgroups different ``bar.sync`` ids) and elected arrive on ``done`` c, signaller c's wait on it
  (CTA-scope release / acquire) and then its ``red.release.gpu``; a loader's lane-parallel ``ld.acquire.gpu`` poll,
  then ``fence.proxy.async.global`` before its TMA. The pipelines share no barrier and no slot; a counter may be
  released by both signallers of one CTA (``red.add`` is atomic, the goal counts every column tile once).
  Deadlock freedom: within a pipeline, ``ws2``'s (its loader issues every load of a task before it waits for the
  next task's dependency, the weight slots it claims early are freed by the K loops of tasks already handed over).
  Across pipelines and programs: every pipeline runs its tasks in increasing stage; by induction on the stage, if
  every task of stage s − 1 is released, every task of stage s has its dependency met and its pipeline's earlier
  tasks (stage ≤ s) complete, so it completes too; no pipeline waits on the other pipeline's barriers, so one blocked
  on a dependency never stops the other. As for the other Gluon forms, every program must be resident (grid ≤ SMs,
  which ``measure`` checks; one CTA per SM by shared memory).
- ``ws2s``, ``ws2qs``: ``ws2``, ``ws2q`` with the consumer's side of LayerNorm folded into a GEMM (``SPLIT``): before
  each K step's products the consumer reads the slot's A pair (16 KB, the bytes of a 64 × 64 fp32 tile) into registers,
  writes bf16(x) and bf16(x − bf16(x)) of x = hi + lo back into the slot (the same values: the result is unchanged and
  checked as for ``ws2``), adds x and x² into per-row sums that the epilogue turns into a mean and rstd (applied times
  0), then ``fence.proxy.async.shared`` and the warpgroup's barrier before wgmma reads the slot. What splitting the
  residual's fp32 rows into the products' operands in the consumer would cost (``docs/dag-results.md``, "Results" 37).
- ``ws2qx``: ``ws2qs``'s work off the consumer's path, on a warpgroup of its own (FA3's transform warpgroup;
  ``XSPLIT``): the splitter (4 warps, ``XSPLIT_REGS`` registers) gets each task id from the loader on a second
  hand-over ring, waits for each K step's TMA, splits the slot's A pair in place and adds the row sums of x − m₀
  (m₀: the rows' means over the task's first step, the mean-robust fold's shift), then the proxy fence, its barrier
  and an arrive on the slot's ``split`` mbarrier, which the consumer waits on in place of
  ``ready``; at a task's last step it leaves the row sums in one of two turns of a shared buffer for the consumer's
  epilogue (applied times 0, as ``ws2qs``). 12 warps (the 1-warp partitions padded to a warpgroup). The traced
  ``data`` includes the first step's split. What the LayerNorm fold would cost a QKV or FFN1 tile with the split off
  the consumer: the slot's shared memory is read and written once more a K step (16 + 16 KB beside the products'
  48 KB).
- ``ws2qr``: the split in the consumer's registers instead of shared memory (``REGA``): the stages' activations are
  fp32 rows (``act_f``; the epilogue stores the fp32 tile, 16 KB as the split pair), loaded by TMA as two 64 × 32
  boxes a K step (a descriptor over the rows and one over the view 32 columns on, so both take the step's
  coordinates); the consumer loads them into wgmma's register A-operand layout, splits them into bf16 hi / lo there
  and issues six products of K = 32 with A from registers (B: the slot's weight tiles, sliced along K), keeps
  per-element sums of x − m₀ and (x − m₀)² reduced once a task (applied times 0), and carries a step's A registers to
  the next step's wait so that wgmma reads them live. No write-back, no proxy fence, no barrier on the split: what the
  LayerNorm fold's K loop costs with the fewest shared-memory bytes (``docs/dag-results.md``, "Results" 40). Its
  conversions are ``x.to(bf16)``, one F2F an element in the SASS (``REGA`` 1).
- ``ws2qrp``: ``ws2qr`` with the conversions two elements an instruction (``cvt.rn.bf16x2.f32``, F2FP.PACK_AB;
  ``REGA`` 2), as the kernel's splits since ``PACK_HI``.
- ``ws2qb``: ``ws2q`` with the slot's bf16 A pair read into registers once a step (``ldmatrix``) and the products
  issued with A from registers (``REGA`` 3): whether a K step is bound by shared memory's bandwidth. Per 64 × 64 step
  ``ws2q`` moves ~80 KB through shared memory (the TMA writes 32 KB, the three products read 48 KB: ~0.32 µs at
  128 B a clock, against ~0.19 µs for the products at the tensor peak); this form reads 8 KB less. On the H200 its
  MMA time was ``ws2q``'s at K = 768 and 0.5 µs longer at 1024 (docs/dag-results.md "Results" 41): it is not.
- ``ws2qf``: ``ws2q`` with the proxy fence (which waits for the consumer's stores to drain) in the signaller before its
  release, as the kernel runs it since ``FENCE_AT_SIGNAL`` (``OUT`` 1; ``ws2q`` has it in the consumer).
- ``ws2qt``: the output tile stored by TMA from the signaller (``OUT`` 2): the consumer writes the split tile into a
  staging buffer in shared memory (two, one per hand-over turn, 32 KB), ``fence.proxy.async.shared``, and hands it
  over; the signaller issues the two TMA stores, waits for them to complete (``cp.async.bulk.wait_group 0``), then the
  proxy fence and the release; a staging buffer is written again only after the signaller's ``sig_free`` arrive of
  the task two turns before, which follows that wait.

``python -m bench.dag.ws_chain --out DIR`` (GPU): checks every form against a float64 chain on a launch after zeroing
the activations (a missed dependency reads zeros), times back-to-back launches for two chain lengths and reports the
cost per stage (the difference over the extra stages) with the traced split of one stage. Without a GPU,
``python -m bench.dag.ws_chain --compile`` compiles the Gluon kernels for sm_90a and prints their resources, with
ptxas's spills and wgmma serialization notes (a CI test).

H200, K = 1024, M = 512 (128 tiles a stage), L 16 → 48, µs per stage: ``ws2`` 7.11 at grid 128 (one tile per
program), 10.19 at grid 64 (two); ``ws2c`` 10.59 at grid 64 (3 slots per consumer), ``ws2`` with 3 slots 12.73 at
grid 64; ``ws2a`` 11.95, ``ws2ca`` 11.96; at grid 128 ``ws2c`` (its consumers take alternate stages) 9.22, as ``ws2``
with 3 slots (9.15). K = 512, M = 512 (64 tiles): ``ws2`` 4.29 at grid 64, 6.01 at grid 32, ``ws2c`` 6.16 at grid 32.
The traced MMA of two concurrent tasks is 7.94 µs against 2 × 4.35 run
one after the other: a 64 × 64 bf16x3 tile over K = 1024 (192 wgmma m64n64k16, both operands in shared memory) takes
≈ 3.1 µs at the SM's tensor-core and shared-memory peak, so one consumer already runs its MMA at ≈ 70 % of it; two
consumers hide the other task's link, epilogue and release, and lose about as much to the shallower rings.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import time

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from bench.seqres.gluon_gemm import operand_ring
from kernels.common import task_sync
from kernels.dag.ws_kernel import _to_bf16   # the kernel's fp32 -> bf16 (PACK_HI: two an instruction)

TILE = 64  # rows, columns and K step of every tile (host side)
BM = tl.constexpr(TILE)
BN = tl.constexpr(TILE)
BK = tl.constexpr(TILE)

# lane-parallel poll of one counter ($1) until >= $2, at most $3 polls; $0 = 1 on timeout
_POLL = tl.constexpr("{ .reg .pred q; .reg .b32 v, n;\n\tmov.b32 $0, 0;\n\t" + task_sync._POLL_LOOP)
_RELEASE_LANE0 = tl.constexpr("{ .reg .pred p; .reg .b32 t; mov.u32 t, %laneid; setp.eq.u32 p, t, 0;\n\t"
                  "@p red.release.gpu.global.add.s32 [$1], 1; }\n\tmov.b32 $0, 0;")
_FENCE_PROXY = tl.constexpr("fence.proxy.async.global;\n\tmov.b32 $0, 0;")
_NOW = tl.constexpr("mov.u64 $0, %globaltimer;")


@gluon.jit
def _stamp(trace_ptr, idx, col: gl.constexpr, TRACE: gl.constexpr, lay: gl.constexpr):
    if TRACE:
        n: gl.constexpr = lay.warps_per_cta[0] * 32
        o = gl.arange(0, n, layout=lay)
        now = gl.inline_asm_elementwise(_NOW, "=l,r", [o], dtype=gl.int64, is_pure=False, pack=1)
        gl.store(trace_ptr + idx * 4 + col + o * 0, now, mask=o == 0)


@gluon.jit
def _task(t, TPS, NTN):
    """Task t: (stage, row block, column tile)."""
    j = t % TPS
    return t // TPS, j // NTN, j % NTN


@gluon.jit
def _load_w(whi_d, wlo_d, w_hi, w_lo, ready, empty, step, row, col, nbytes: gl.constexpr, STAGES: gl.constexpr):
    """Claim the ring slot of global K step ``step`` (once the consumer freed it), expect all four tiles' bytes on its
    ready barrier and issue the weight tiles [row, col]; the A tiles follow on the same barrier."""
    slot = step % STAGES
    mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(slot), nbytes)
    tma.async_copy_global_to_shared(whi_d, [row, col], ready.index(slot), w_hi.index(slot))
    tma.async_copy_global_to_shared(wlo_d, [row, col], ready.index(slot), w_lo.index(slot))


@gluon.jit
def _send(tids, full, free, i, t, lay: gl.constexpr):
    """Hand task id t to the partition that waits on ``full``: turn i of the 2-slot ring (its slot free first)."""
    mbarrier.wait(free.index(i % 2), ((i // 2) & 1) ^ 1)
    tids.index(i % 2).store(gl.full([1], 0, gl.int32, lay) + t)
    mbarrier.arrive(full.index(i % 2))


@gluon.jit
def _recv(tids, full, free, i, lay: gl.constexpr):
    """The task id of turn i (``_send``), its slot handed back."""
    mbarrier.wait(full.index(i % 2), (i // 2) & 1)
    t = gl.max(tids.index(i % 2).load(lay), axis=0)
    mbarrier.arrive(free.index(i % 2))
    return t


@gluon.jit
def _ticket(head_ptr, base):
    """The next task of the queue: one atomic ticket, less the tickets of earlier launches (epochs, as the kernel)."""
    return gl.atomic_add(head_ptr, 1) - base


@gluon.jit
def _load_task(descs, bufs, ready, empty, sig_free, ctr_ptr, err_ptr, trace_ptr, t, i, g, TPS, NTN, MB, M,
               K: gl.constexpr, goal, spin_limit, STAGES: gl.constexpr, MODE: gl.constexpr, TRACE: gl.constexpr):
    """The loader's part of task t (the program's i-th; its K steps start at global step g)."""
    ahi_d, alo_d, whi_d, wlo_d = descs
    a_hi, a_lo, w_hi, w_lo = bufs
    KT: gl.constexpr = K // BK
    PRE: gl.constexpr = STAGES if STAGES < KT else KT
    nbytes: gl.constexpr = 2 * ahi_d.block_type.nbytes + 2 * whi_d.block_type.nbytes
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    lane = gl.arange(0, 32, layout=lay)
    s, m, n = _task(t, TPS, NTN)
    if MODE == 0:  # serial: the previous task released first
        if i > 0:
            mbarrier.wait(sig_free.index((i - 1) % 2), ((i - 1) // 2) & 1)
    if MODE == 2:  # the first steps' weights before the wait
        for kk in gl.static_range(PRE):
            _load_w(whi_d, wlo_d, w_hi, w_lo, ready, empty, g + kk, s * K + kk * BK, n * BN, nbytes, STAGES)
    if s > 0:
        bad = gl.inline_asm_elementwise(_POLL, "=r,l,r,r", [ctr_ptr + (s - 1) * MB + m + lane * 0,
                                                            goal + lane * 0, spin_limit + lane * 0],
                                        dtype=gl.int32, is_pure=False, pack=1)
        gl.atomic_add(err_ptr + lane * 0, bad, mask=(bad > 0) & (lane == 0))
        gl.inline_asm_elementwise(_FENCE_PROXY, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
    _stamp(trace_ptr, t, 0, TRACE, lay)
    for kk in range(KT):
        slot = (g + kk) % STAGES
        if (MODE != 2) | (kk >= PRE):
            _load_w(whi_d, wlo_d, w_hi, w_lo, ready, empty, g + kk, s * K + kk * BK, n * BN, nbytes, STAGES)
        tma.async_copy_global_to_shared(ahi_d, [s * M + m * BM, kk * BK], ready.index(slot), a_hi.index(slot))
        tma.async_copy_global_to_shared(alo_d, [s * M + m * BM, kk * BK], ready.index(slot), a_lo.index(slot))


@gluon.jit
def _loader(descs, bufs, ready, empty, sig_free, tid_ring, ctr_ptr, err_ptr, trace_ptr, head_ptr, base, pid, nprog,
            n_tasks, TPS, NTN, MB, M, K: gl.constexpr, goal, spin_limit, STAGES: gl.constexpr, MODE: gl.constexpr,
            QUEUE: gl.constexpr, TRACE: gl.constexpr, x_ring=None):
    KT: gl.constexpr = K // BK
    g = 0
    i = 0
    if QUEUE:  # tickets of one atomic head; each task id handed to the consumer, -1 when the queue is empty
        tids, tid_full, tid_free = tid_ring
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        t = _ticket(head_ptr, base)
        while t < n_tasks:
            _send(tids, tid_full, tid_free, i, t, lay)
            if x_ring is not None:  # ``XSPLIT``: the splitter warpgroup's copy of the id
                _send(x_ring[0], x_ring[1], x_ring[2], i, t, lay)
            _load_task(descs, bufs, ready, empty, sig_free, ctr_ptr, err_ptr, trace_ptr, t, i, g, TPS, NTN, MB, M, K,
                       goal, spin_limit, STAGES, MODE, TRACE)
            g += KT
            i += 1
            if MODE == 0:  # serial: no ticket before the previous task's release
                mbarrier.wait(sig_free.index((i - 1) % 2), ((i - 1) // 2) & 1)
            t = _ticket(head_ptr, base)
        _send(tids, tid_full, tid_free, i, -1, lay)
        if x_ring is not None:
            _send(x_ring[0], x_ring[1], x_ring[2], i, -1, lay)
    else:  # static lists: tasks pid, pid + grid, ...
        for t in range(pid, n_tasks, nprog):
            _load_task(descs, bufs, ready, empty, sig_free, ctr_ptr, err_ptr, trace_ptr, t, i, g, TPS, NTN, MB, M, K,
                       goal, spin_limit, STAGES, MODE, TRACE)
            g += KT
            i += 1


@gluon.jit
def _split_slot(a_hi, a_lo, slot, sl: gl.constexpr):
    """The slot's A pair read as x = hi + lo (16 KB, the bytes of a 64 × 64 fp32 tile) and written back as bf16(x)
    and bf16(x − bf16(x)) (the same values); returns x."""
    x = a_hi.index(slot).load(sl).to(gl.float32) + a_lo.index(slot).load(sl).to(gl.float32)
    h2 = x.to(gl.bfloat16)
    a_hi.index(slot).store(h2)
    a_lo.index(slot).store((x - h2.to(gl.float32)).to(gl.bfloat16))
    return x


@gluon.jit
def _resplit(a_hi, a_lo, slot, rsum, rsq, sl: gl.constexpr):
    """``SPLIT``: the consumer's side of LayerNorm folded into a GEMM (an fp32 A tile split into bf16 hi / lo in shared
    memory before the products): read the slot's A pair (16 KB, the bytes of a 64 × 64 fp32 tile), x = hi + lo, write
    bf16(x) and bf16(x − bf16(x)) back (16 KB; the same values), add x and x² into the row sums; then the proxy fence
    and the warpgroup's barrier before wgmma reads the slot."""
    x = _split_slot(a_hi, a_lo, slot, sl)
    rsum += gl.sum(x, axis=1)
    rsq += gl.sum(x * x, axis=1)
    fence_async_shared()
    gl.thread_barrier()
    return rsum, rsq


@gluon.jit
def _splitter(a_hi, a_lo, ready, split, stats, tid_ring, K: gl.constexpr, STAGES: gl.constexpr,
              num_warps: gl.constexpr):
    """``XSPLIT`` (form ``ws2qx``): ``_resplit``'s work on a warpgroup of its own, FA3's transform warpgroup. For every
    K step of every task (ids from the loader's second hand-over ring) it waits for the slot's TMA (``ready``), splits
    the A pair in place as ``_resplit`` does and adds the row sums of d = x − m₀ (m₀: the row's mean over the task's
    first 64 columns, the mean-robust fold's shift), stores the task's row sums into turn i % 2 of ``stats`` at its last
    step, then the proxy fence, the warpgroup's barrier and one arrive on ``split``, which the consumer waits on in
    place of ``ready``. ``stats`` turn i % 2 is written again at task i + 2's last step, whose slot the loader filled
    only after the consumer freed a step of task i + 1 (K // 64 ≥ STAGES): after task i's epilogue read it."""
    KT: gl.constexpr = K // BK
    sl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    tids, tid_full, tid_free = tid_ring
    g = 0
    i = 0
    t = _recv(tids, tid_full, tid_free, 0, lay)
    while t >= 0:
        rsum = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, sl))
        rsq = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, sl))
        m0 = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, sl))
        for kk in range(KT):
            slot = g % STAGES
            mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
            x = _split_slot(a_hi, a_lo, slot, sl)
            if kk == 0:  # the mean-robust fold's row shift: the mean of the task's first 64 columns
                m0 = gl.sum(x, axis=1) / BK
            d = x - m0[:, None]
            rsum += gl.sum(d, axis=1)
            rsq += gl.sum(d * d, axis=1)
            if kk == KT - 1:
                stats.index(2 * (i % 2)).store(rsum)
                stats.index(2 * (i % 2) + 1).store(rsq)
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(split.index(slot))
            g += 1
        i += 1
        t = _recv(tids, tid_full, tid_free, i, lay)


@gluon.jit
def _ready_slot(bars, g, kk, trace_ptr, t, STAGES: gl.constexpr, TRACE: gl.constexpr, lay: gl.constexpr):
    """The consumer's wait for ring step ``g`` (``bars``: the slots' ready barriers, or the splitter's); on a task's
    first step (``kk`` 0) the trace's "data in" stamp. Returns the slot."""
    slot = g % STAGES
    mbarrier.wait(bars.index(slot), (g // STAGES) & 1)
    if kk == 0:
        _stamp(trace_ptr, t, 1, TRACE, lay)
    return slot


@gluon.jit
def _rega_k_loop(bufs, ready, empty, acc, g, trace_ptr, t, K: gl.constexpr, STAGES: gl.constexpr,
                 TRACE: gl.constexpr, mma: gl.constexpr, lay: gl.constexpr, PACK: gl.constexpr = False):
    """``REGA`` (form ``ws2qr``): the K loop with A as fp32 rows (the slot's A pair: columns 0–31 and 32–63 of the
    step, two 64 × 32 fp32 TMA boxes) split into bf16 hi / lo in registers, wgmma's A from registers (B: the slot's
    weight tiles, K halves). Step k's split runs while step k − 1's products are in flight: load and split step k,
    issue its six products, then wait for step k − 1's (its A registers, carried to that wait, stay live until then)
    and free its slot. PACK: the conversions two elements an instruction (``ws2qrp``, the kernel's ``_to_bf16``).
    Row sums of d = x − m₀ (m₀: the rows' mean over the first step) kept per element and reduced once, applied
    times 0 (the result unchanged): what the LayerNorm fold's QKV / FFN1 K loop would do."""
    a_c0, a_c1, w_hi, w_lo = bufs   # A: the step's columns 0–31 and 32–63, fp32
    KT: gl.constexpr = K // BK
    HK: gl.constexpr = BK // 2
    dl: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    ps = gl.zeros([BM, HK], gl.float32, layout=dl)
    pq = gl.zeros([BM, HK], gl.float32, layout=dl)
    m0 = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, dl))
    h0 = gl.zeros([BM, HK], gl.bfloat16, layout=dl)
    l0 = gl.zeros([BM, HK], gl.bfloat16, layout=dl)
    h1 = gl.zeros([BM, HK], gl.bfloat16, layout=dl)
    l1 = gl.zeros([BM, HK], gl.bfloat16, layout=dl)
    for kk in range(KT):
        slot = _ready_slot(ready, g, kk, trace_ptr, t, STAGES, TRACE, lay)
        x0 = a_c0.index(slot).load(dl)
        x1 = a_c1.index(slot).load(dl)
        if kk == 0:
            m0 = (gl.sum(x0, axis=1) + gl.sum(x1, axis=1)) / BK
        d0 = x0 - m0[:, None]
        d1 = x1 - m0[:, None]
        ps += d0 + d1
        pq += d0 * d0 + d1 * d1
        nh0 = _to_bf16(x0, PACK)
        nl0 = _to_bf16(x0 - nh0.to(gl.float32), PACK)
        nh1 = _to_bf16(x1, PACK)
        nl1 = _to_bf16(x1 - nh1.to(gl.float32), PACK)
        acc = warpgroup_mma(nl0, w_hi.index(slot).slice(0, HK), acc, use_acc=kk != 0, is_async=True)
        acc = warpgroup_mma(nh0, w_lo.index(slot).slice(0, HK), acc, is_async=True)
        acc = warpgroup_mma(nh0, w_hi.index(slot).slice(0, HK), acc, is_async=True)
        acc = warpgroup_mma(nl1, w_hi.index(slot).slice(HK, HK), acc, is_async=True)
        acc = warpgroup_mma(nh1, w_lo.index(slot).slice(HK, HK), acc, is_async=True)
        acc = warpgroup_mma(nh1, w_hi.index(slot).slice(HK, HK), acc, is_async=True)
        # step k - 1's products done (its A registers, carried to here, free): its slot back to the loader
        acc, h0, l0, h1, l1 = warpgroup_mma_wait(6, deps=(acc, h0, l0, h1, l1))
        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES), pred=kk > 0)
        h0, l0, h1, l1 = nh0, nl0, nh1, nl1
        g += 1
    acc, h0, l0, h1, l1 = warpgroup_mma_wait(0, deps=(acc, h0, l0, h1, l1))
    mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
    rsum = gl.sum(ps, axis=1)
    rsq = gl.sum(pq, axis=1)
    mean = rsum / K
    rstd = gl.rsqrt(gl.maximum(rsq / K - mean * mean, 0.0) + 1e-5)
    return acc + gl.convert_layout((mean + m0) * rstd * 0.0, gl.SliceLayout(1, mma))[:, None]


@gluon.jit
def _regb_k_loop(bufs, ready, empty, acc, g, trace_ptr, t, K: gl.constexpr, STAGES: gl.constexpr,
                 TRACE: gl.constexpr, mma: gl.constexpr, lay: gl.constexpr):
    """``REGA`` 3 (form ``ws2qb``): ``ws2q``'s K loop with the slot's bf16 A pair read into wgmma's register A-operand
    layout (``ldmatrix``) once a step, the three products with A from registers (B: the slot's weight tiles). In
    ``ws2q`` each product reads its A tile from shared memory (a_hi twice, a_lo once: 24 KB a step at 64 × 64); here
    the pair is read once (16 KB). Step k's registers are carried to step k + 1's wait, so that wgmma reads them live."""
    a_hi, a_lo, w_hi, w_lo = bufs
    KT: gl.constexpr = K // BK
    dl: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    h = gl.zeros([BM, BK], gl.bfloat16, layout=dl)
    lo = gl.zeros([BM, BK], gl.bfloat16, layout=dl)
    for kk in range(KT):
        slot = _ready_slot(ready, g, kk, trace_ptr, t, STAGES, TRACE, lay)
        nh = a_hi.index(slot).load(dl)
        nl = a_lo.index(slot).load(dl)
        acc = warpgroup_mma(nl, w_hi.index(slot), acc, use_acc=kk != 0, is_async=True)
        acc = warpgroup_mma(nh, w_lo.index(slot), acc, is_async=True)
        acc = warpgroup_mma(nh, w_hi.index(slot), acc, is_async=True)
        acc, h, lo = warpgroup_mma_wait(3, deps=(acc, h, lo))
        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES), pred=kk > 0)
        h, lo = nh, nl
        g += 1
    acc, h, lo = warpgroup_mma_wait(0, deps=(acc, h, lo))
    mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
    return acc


@gluon.jit
def _compute_task(bufs, ready, empty, done, sig_free, sig_tids, act_hi_ptr, act_lo_ptr, r_ptr, trace_ptr, t, i, g,
                  TPS, NTN, M, K: gl.constexpr, STAGES: gl.constexpr, QUEUE: gl.constexpr, ATOMIC: gl.constexpr,
                  TRACE: gl.constexpr, num_warps: gl.constexpr, SPLIT: gl.constexpr = False, OUT: gl.constexpr = 0,
                  stage=None, xsplit=None, REGA: gl.constexpr = 0):
    """The consumer's part of task t (the program's i-th, from global K step g): the MMA, the split epilogue's
    stores (``OUT`` 2: into the staging buffer of turn i for the signaller's TMA store), the hand-over to the
    signaller."""
    a_hi, a_lo, w_hi, w_lo = bufs
    KT: gl.constexpr = K // BK
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BN, 16])
    out: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // BN, BN // 8], [num_warps, 1], [1, 0])
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    lane = gl.arange(0, 32 * num_warps, layout=lay)
    om = gl.arange(0, BM, layout=gl.SliceLayout(1, out))
    on = gl.arange(0, BN, layout=gl.SliceLayout(0, out))
    s, m, n = _task(t, TPS, NTN)
    acc = gl.zeros([BM, BN], gl.float32, layout=mma)
    sl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])   # a 64 × 64 bf16 tile, 16 B a load
    rsum = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, sl))
    rsq = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, sl))
    if REGA == 3:
        acc = _regb_k_loop(bufs, ready, empty, acc, g, trace_ptr, t, K, STAGES, TRACE, mma, lay)
        g += KT
    elif REGA:
        acc = _rega_k_loop(bufs, ready, empty, acc, g, trace_ptr, t, K, STAGES, TRACE, mma, lay, REGA == 2)
        g += KT
    else:
        for kk in range(KT):
            if xsplit is None:
                slot = _ready_slot(ready, g, kk, trace_ptr, t, STAGES, TRACE, lay)
            else:  # ``XSPLIT``: the splitter warpgroup's arrive, after the TMA and its split of the slot
                slot = _ready_slot(xsplit[0], g, kk, trace_ptr, t, STAGES, TRACE, lay)
            if SPLIT:
                rsum, rsq = _resplit(a_hi, a_lo, slot, rsum, rsq, sl)
            acc = warpgroup_mma(a_lo.index(slot), w_hi.index(slot), acc, use_acc=kk != 0, is_async=True)
            acc = warpgroup_mma(a_hi.index(slot), w_lo.index(slot), acc, is_async=True)
            acc = warpgroup_mma(a_hi.index(slot), w_hi.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(3, deps=(acc, ))
            mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES), pred=kk > 0)
            g += 1
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
    _stamp(trace_ptr, t, 2, TRACE, lay)
    if REGA == 1 or REGA == 2:  # the output tile as fp32 rows (16 KB, the bytes of the split pair): the next stage's A
        offs = ((s + 1) * M + m * BM + om)[:, None] * K + (n * BN + on)[None, :]
        gl.store(act_hi_ptr + offs, gl.convert_layout(acc, out))
        gl.inline_asm_elementwise(_FENCE_PROXY, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
        mbarrier.wait(sig_free.index(i % 2), ((i // 2) & 1) ^ 1)
    else:
        hi = acc.to(gl.bfloat16)
        lo = (acc - hi.to(gl.float32)).to(gl.bfloat16)
        if OUT == 2:  # the split tile into staging buffer i % 2 (free once the signaller's store of task i - 2 read it)
            st_hi, st_lo = stage
            mbarrier.wait(sig_free.index(i % 2), ((i // 2) & 1) ^ 1)
            st_hi.index(i % 2).store(hi)
            st_lo.index(i % 2).store(lo)
            fence_async_shared()   # the generic writes before the signaller's TMA (async proxy) reads them
            gl.thread_barrier()
        else:
            hi = gl.convert_layout(hi, out)
            lo = gl.convert_layout(lo, out)
            if xsplit is not None:  # the splitter's row sums of this task (turn i % 2), as SPLIT's below
                rsum = xsplit[1].index(2 * (i % 2)).load(gl.SliceLayout(1, sl))
                rsq = xsplit[1].index(2 * (i % 2) + 1).load(gl.SliceLayout(1, sl))
            # the row statistics used as LayerNorm's epilogue would (times 0 here: the product is unchanged)
            if SPLIT or (xsplit is not None):
                mean = rsum / K
                rstd = gl.rsqrt(gl.maximum(rsq / K - mean * mean, 0.0) + 1e-5)
                lo = (lo.to(gl.float32) + gl.convert_layout(mean * rstd * 0.0, gl.SliceLayout(1, out))[:, None]).to(
                    gl.bfloat16)
            offs = ((s + 1) * M + m * BM + om)[:, None] * K + (n * BN + on)[None, :]
            gl.store(act_hi_ptr + offs, hi)
            gl.store(act_lo_ptr + offs, lo)
            if ATOMIC:  # the residual GEMMs' epilogue: R[tile] += acc
                r_offs = (m * BM + om)[:, None] * K + (n * BN + on)[None, :]
                gl.atomic_add(r_ptr + r_offs, gl.convert_layout(acc, out), sem="relaxed", scope="gpu")
            if OUT == 0:  # OUT 1: the proxy fence (the stores' drain) in the signaller, as the kernel's FENCE_AT_SIGNAL
                gl.inline_asm_elementwise(_FENCE_PROXY, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
            # the signaller took task i - 2's turn of this slot
            mbarrier.wait(sig_free.index(i % 2), ((i // 2) & 1) ^ 1)
    if QUEUE:
        sig_tids.index(i % 2).store(gl.full([1], 0, gl.int32, lay) + t)
    mbarrier.arrive(done.index(i % 2))


@gluon.jit
def _consumer(bufs, ready, empty, done, sig_free, tid_ring, sig_tids, act_hi_ptr, act_lo_ptr, r_ptr, trace_ptr, pid,
              nprog, n_tasks, TPS, NTN, M, K: gl.constexpr, STAGES: gl.constexpr, QUEUE: gl.constexpr,
              ATOMIC: gl.constexpr, TRACE: gl.constexpr, num_warps: gl.constexpr, SPLIT: gl.constexpr = False,
              OUT: gl.constexpr = 0, stage=None, xsplit=None, REGA: gl.constexpr = 0):
    KT: gl.constexpr = K // BK
    g = 0
    i = 0
    if QUEUE:
        tids, tid_full, tid_free = tid_ring
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        t = _recv(tids, tid_full, tid_free, 0, lay)
        while t >= 0:
            _compute_task(bufs, ready, empty, done, sig_free, sig_tids, act_hi_ptr, act_lo_ptr, r_ptr, trace_ptr, t, i,
                          g, TPS, NTN, M, K, STAGES, QUEUE, ATOMIC, TRACE, num_warps, SPLIT, OUT, stage, xsplit,
                          REGA)
            g += KT
            i += 1
            t = _recv(tids, tid_full, tid_free, i, lay)
        # the signaller's end
        mbarrier.wait(sig_free.index(i % 2), ((i // 2) & 1) ^ 1)
        sig_tids.index(i % 2).store(gl.full([1], -1, gl.int32, lay))
        mbarrier.arrive(done.index(i % 2))
    else:
        for t in range(pid, n_tasks, nprog):
            _compute_task(bufs, ready, empty, done, sig_free, sig_tids, act_hi_ptr, act_lo_ptr, r_ptr, trace_ptr, t, i,
                          g, TPS, NTN, M, K, STAGES, QUEUE, ATOMIC, TRACE, num_warps, SPLIT, OUT, stage)
            g += KT
            i += 1


@gluon.jit
def _release(ctr_ptr, trace_ptr, sig_free, t, i, TPS, NTN, MB, TRACE: gl.constexpr, M=0, OUT: gl.constexpr = 0,
             stage=None, out_descs=None):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    lane = gl.arange(0, 32, layout=lay)
    s, m, n = _task(t, TPS, NTN)
    if OUT == 2:  # the staged tile to X_{s+1} by TMA, complete (written) before the release
        st_hi, st_lo = stage
        ahi_d, alo_d = out_descs
        tma.async_copy_shared_to_global(ahi_d, [(s + 1) * M + m * BM, n * BN], st_hi.index(i % 2))
        tma.async_copy_shared_to_global(alo_d, [(s + 1) * M + m * BM, n * BN], st_lo.index(i % 2))
        tma.store_wait(0)
    if OUT != 0:  # the consumer's stores (OUT 1) or the TMA's writes (OUT 2) ordered before the release
        gl.inline_asm_elementwise(_FENCE_PROXY, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
    gl.inline_asm_elementwise(_RELEASE_LANE0, "=r,l", [ctr_ptr + s * MB + m + lane * 0], dtype=gl.int32,
                              is_pure=False, pack=1)
    _stamp(trace_ptr, t, 3, TRACE, lay)
    mbarrier.arrive(sig_free.index(i % 2))


@gluon.jit
def _signaller(done, sig_free, sig_tids, ctr_ptr, trace_ptr, pid, nprog, n_tasks, TPS, NTN, MB, QUEUE: gl.constexpr,
               TRACE: gl.constexpr, M=0, OUT: gl.constexpr = 0, stage=None, out_descs=None):
    i = 0
    if QUEUE:
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        mbarrier.wait(done.index(0), 0)
        t = gl.max(sig_tids.index(0).load(lay), axis=0)
        while t >= 0:
            _release(ctr_ptr, trace_ptr, sig_free, t, i, TPS, NTN, MB, TRACE, M, OUT, stage, out_descs)
            i += 1
            mbarrier.wait(done.index(i % 2), (i // 2) & 1)
            t = gl.max(sig_tids.index(i % 2).load(lay), axis=0)
    else:
        for t in range(pid, n_tasks, nprog):
            mbarrier.wait(done.index(i % 2), (i // 2) & 1)
            _release(ctr_ptr, trace_ptr, sig_free, t, i, TPS, NTN, MB, TRACE, M, OUT, stage, out_descs)
            i += 1


@gluon.jit
def _pipe_barriers(STAGES: gl.constexpr):
    """One pipeline's mbarriers, initialized: the ring's ``ready`` / ``empty`` (STAGES each) and the 2-slot hand-over
    to the signaller (``done`` / ``sig_free``); every count 1 (one elected arrive or one ``expect``)."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    done = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    sig_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for q in gl.static_range(STAGES):
        mbarrier.init(ready.index(q), count=1)
        mbarrier.init(empty.index(q), count=1)
    for q in gl.static_range(2):
        mbarrier.init(done.index(q), count=1)
        mbarrier.init(sig_free.index(q), count=1)
    return ready, empty, done, sig_free


XSPLIT_REGS = gl.constexpr(128)  # the splitter warpgroup's setmaxnreg (ws2qx): a 64 × 64 fp32 tile is 32 a thread


@gluon.jit
def chain_ws(ahi_d, alo_d, whi_d, wlo_d, act_hi_ptr, act_lo_ptr, r_ptr, ctr_ptr, err_ptr, trace_ptr, head_ptr, base,
             n_tasks, TPS, NTN, MB, M, goal, spin_limit, K: gl.constexpr, STAGES: gl.constexpr, MODE: gl.constexpr,
             QUEUE: gl.constexpr, ATOMIC: gl.constexpr, TRACE: gl.constexpr, num_warps: gl.constexpr,
             SPLIT: gl.constexpr = False, OUT: gl.constexpr = 0, XSPLIT: gl.constexpr = False,
             REGA: gl.constexpr = 0):
    if REGA == 1 or REGA == 2:  # ``ws2qr``: A as fp32 rows, two 64 × 32 boxes a step (ahi_d: columns 0–31,
        # alo_d: 32–63), 16 KB as the bf16 pair's
        a_hi = gl.allocate_shared_memory(gl.float32, [STAGES, BM, BK // 2], ahi_d.layout)
        a_lo = gl.allocate_shared_memory(gl.float32, [STAGES, BM, BK // 2], alo_d.layout)
        w_hi = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BK, BN], whi_d.layout)
        w_lo = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BK, BN], wlo_d.layout)
    else:
        a_hi, a_lo, w_hi, w_lo = operand_ring(ahi_d, alo_d, whi_d, wlo_d, STAGES)
    NSTG: gl.constexpr = 2 if OUT == 2 else 1   # OUT 2: a staging pair per hand-over turn (else unused: not kept)
    stage = (gl.allocate_shared_memory(gl.bfloat16, [NSTG, BM, BN], whi_d.layout),
             gl.allocate_shared_memory(gl.bfloat16, [NSTG, BM, BN], whi_d.layout))
    ready, empty, done, sig_free = _pipe_barriers(STAGES)
    tid_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    tid_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ids: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    tids = gl.allocate_shared_memory(gl.int32, [2, 1], ids)
    sig_tids = gl.allocate_shared_memory(gl.int32, [2, 1], ids)
    for q in gl.static_range(2):
        mbarrier.init(tid_full.index(q), count=1)
        mbarrier.init(tid_free.index(q), count=1)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    bufs = (a_hi, a_lo, w_hi, w_lo)
    tid_ring = (tids, tid_full, tid_free)
    if XSPLIT:  # the splitter warpgroup: its id ring from the loader, the per-slot ``split`` barriers, the row sums
        gl.static_assert(QUEUE, "XSPLIT: the splitter takes its task ids from the queue's loader")
        gl.static_assert(K // BK >= STAGES, "XSPLIT: K // 64 >= STAGES (the row sums' two turns)")
        x_tids = gl.allocate_shared_memory(gl.int32, [2, 1], ids)
        x_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        x_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        split = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        stats = gl.allocate_shared_memory(gl.float32, [4, BM], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        for q in gl.static_range(2):
            mbarrier.init(x_full.index(q), count=1)
            mbarrier.init(x_free.index(q), count=1)
        for q in gl.static_range(STAGES):
            mbarrier.init(split.index(q), count=1)
        gl.warp_specialize([
            (_consumer, (bufs, ready, empty, done, sig_free, tid_ring, sig_tids, act_hi_ptr, act_lo_ptr, r_ptr,
                         trace_ptr, pid, nprog, n_tasks, TPS, NTN, M, K, STAGES, QUEUE, ATOMIC, TRACE, num_warps,
                         False, OUT, stage, (split, stats))),
            (_loader, ((ahi_d, alo_d, whi_d, wlo_d), bufs, ready, empty, sig_free, tid_ring, ctr_ptr, err_ptr,
                       trace_ptr, head_ptr, base, pid, nprog, n_tasks, TPS, NTN, MB, M, K, goal, spin_limit, STAGES,
                       MODE, QUEUE, TRACE, (x_tids, x_full, x_free))),
            (_signaller, (done, sig_free, sig_tids, ctr_ptr, trace_ptr, pid, nprog, n_tasks, TPS, NTN, MB, QUEUE,
                          TRACE, M, OUT, stage, (ahi_d, alo_d))),
            (_splitter, (a_hi, a_lo, ready, split, stats, (x_tids, x_full, x_free), K, STAGES, 4)),
        ], [1, 1, 4], [40, 40, XSPLIT_REGS])
        return
    gl.warp_specialize([
        (_consumer, (bufs, ready, empty, done, sig_free, tid_ring, sig_tids, act_hi_ptr, act_lo_ptr, r_ptr, trace_ptr,
                     pid, nprog, n_tasks, TPS, NTN, M, K, STAGES, QUEUE, ATOMIC, TRACE, num_warps, SPLIT, OUT, stage,
                     None, REGA)),
        (_loader, ((ahi_d, alo_d, whi_d, wlo_d), bufs, ready, empty, sig_free, tid_ring, ctr_ptr, err_ptr, trace_ptr,
                   head_ptr, base, pid, nprog, n_tasks, TPS, NTN, MB, M, K, goal, spin_limit, STAGES, MODE, QUEUE,
                   TRACE)),
        (_signaller, (done, sig_free, sig_tids, ctr_ptr, trace_ptr, pid, nprog, n_tasks, TPS, NTN, MB, QUEUE, TRACE,
                      M, OUT, stage, (ahi_d, alo_d))),
    ], [1, 1], [40, 40])


WS2C_REGS = gl.constexpr(232)  # consumer 1's setmaxnreg; consumer 0, the default partition, gets as many (docstring)


@gluon.jit
def chain_ws2c(ahi_d, alo_d, whi_d, wlo_d, act_hi_ptr, act_lo_ptr, r_ptr, ctr_ptr, err_ptr, trace_ptr, n_tasks, TPS,
               NTN, MB, M, goal, spin_limit, K: gl.constexpr, STAGES: gl.constexpr, ATOMIC: gl.constexpr,
               TRACE: gl.constexpr, num_warps: gl.constexpr):
    """``ws2`` twice in one CTA: pipeline c (loader c, consumer warpgroup c, signaller c; its own ring of STAGES slots
    and its own barriers) runs the c-th, (c + 2)-th, … task of the program's static list pid, pid + grid, …"""
    descs = (ahi_d, alo_d, whi_d, wlo_d)
    bufs0 = operand_ring(ahi_d, alo_d, whi_d, wlo_d, STAGES)
    bufs1 = operand_ring(ahi_d, alo_d, whi_d, wlo_d, STAGES)
    ready0, empty0, done0, free0 = _pipe_barriers(STAGES)
    ready1, empty1, done1, free1 = _pipe_barriers(STAGES)
    pid = gl.program_id(0)
    step = 2 * gl.num_programs(0)  # the program's list with stride grid, taken alternately
    p1 = pid + gl.num_programs(0)
    gl.warp_specialize([
        (_consumer, (bufs0, ready0, empty0, done0, free0, None, None, act_hi_ptr, act_lo_ptr, r_ptr, trace_ptr, pid,
                     step, n_tasks, TPS, NTN, M, K, STAGES, False, ATOMIC, TRACE, num_warps)),
        (_consumer, (bufs1, ready1, empty1, done1, free1, None, None, act_hi_ptr, act_lo_ptr, r_ptr, trace_ptr, p1,
                     step, n_tasks, TPS, NTN, M, K, STAGES, False, ATOMIC, TRACE, num_warps)),
        (_loader, (descs, bufs0, ready0, empty0, free0, None, ctr_ptr, err_ptr, trace_ptr, None, 0, pid, step, n_tasks,
                   TPS, NTN, MB, M, K, goal, spin_limit, STAGES, 2, False, TRACE)),
        (_loader, (descs, bufs1, ready1, empty1, free1, None, ctr_ptr, err_ptr, trace_ptr, None, 0, p1, step, n_tasks,
                   TPS, NTN, MB, M, K, goal, spin_limit, STAGES, 2, False, TRACE)),
        (_signaller, (done0, free0, None, ctr_ptr, trace_ptr, pid, step, n_tasks, TPS, NTN, MB, False, TRACE)),
        (_signaller, (done1, free1, None, ctr_ptr, trace_ptr, p1, step, n_tasks, TPS, NTN, MB, False, TRACE)),
    ], [num_warps, 1, 1, 1, 1], [WS2C_REGS, 40, 40, 40, 40])


@triton.jit
def chain_tl(act_hi_ptr, act_lo_ptr, w_hi_ptr, w_lo_ptr, r_ptr, ctr_ptr, err_ptr, n_tasks, TPS, NTN, MB, M, goal,
             spin_limit, K: tl.constexpr, STAGES: tl.constexpr, ATOMIC: tl.constexpr):
    """The same chain as today's kernel runs a GEMM task (``kernels/dag/kernel.py``): wait, pointer K loop, split
    epilogue, barrier, release."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    for t in range(pid, n_tasks, nprog):
        s = t // TPS
        m = (t % TPS) // NTN
        n = t % NTN
        if s > 0:
            bad = task_sync.wait_counter(ctr_ptr + (s - 1) * MB + m, goal, spin_limit, True)
            if bad > 0:
                tl.atomic_add(err_ptr, 1)
        tl.debug_barrier()
        a_off = (s * M + m * BM + rm)[:, None] * K + rk[None, :]
        w_off = (s * K + rk)[:, None] * K + (n * BN + rn)[None, :]
        acc = tl.zeros([BM, BN], tl.float32)
        for kk in tl.range(0, K // BK, num_stages=STAGES):
            k = tl.multiple_of(kk * BK, BK)
            ah = tl.load(act_hi_ptr + a_off + k, cache_modifier=".cg")
            al = tl.load(act_lo_ptr + a_off + k, cache_modifier=".cg")
            wh = tl.load(w_hi_ptr + w_off + k * K)
            wl = tl.load(w_lo_ptr + w_off + k * K)
            acc = tl.dot(al, wh, acc)
            acc = tl.dot(ah, wl, acc)
            acc = tl.dot(ah, wh, acc)
        hi = acc.to(tl.bfloat16)
        lo = (acc - hi.to(tl.float32)).to(tl.bfloat16)
        o_off = ((s + 1) * M + m * BM + rm)[:, None] * K + (n * BN + rn)[None, :]
        tl.store(act_hi_ptr + o_off, hi)
        tl.store(act_lo_ptr + o_off, lo)
        if ATOMIC:  # the residual GEMMs' epilogue, as kernels/dag/kernel.py's _residual_epilogue
            r_off = (m * BM + rm)[:, None] * K + (n * BN + rn)[None, :]
            tl.atomic_add(r_ptr + r_off, acc, sem="relaxed", scope="gpu")
        tl.debug_barrier()
        task_sync.signal_counter(ctr_ptr + s * MB + m, True)


FORMS = ("tl", "ws0", "ws1", "ws2", "ws0q", "ws1q", "ws2q", "tla", "ws2a", "ws2qa", "ws2c", "ws2ca", "ws2s", "ws2qs",
         "ws2qx", "ws2qf", "ws2qt", "ws2qr", "ws2qrp", "ws2qb")
OUT_OF_SUFFIX = {"f": 1, "t": 2}   # a form's last letter -> ``OUT`` (0: the consumer's stores and proxy fence)


class Chain:
    """Operands of one chain (L stages of [M, K] · [K, K]) and a launcher per form."""

    def __init__(self, L: int, M: int, K: int, seed: int = 0, device: str = "cuda", stages: int = 4,
                 stages_2c: int = 3):
        import torch
        assert M % TILE == 0 and K % TILE == 0, "M, K must be multiples of 64"
        self.L, self.M, self.K, self.stages, self.stages_2c = L, M, K, stages, stages_2c
        gen = torch.Generator().manual_seed(seed)
        x0 = torch.randn(M, K, generator=gen, dtype=torch.float64)
        w = torch.randn(L, K, K, generator=gen, dtype=torch.float64) / math.sqrt(K)
        self.act_hi = torch.zeros((L + 1) * M, K, dtype=torch.bfloat16)
        self.act_lo = torch.zeros_like(self.act_hi)
        x0f = x0.float()
        self.act_hi[:M] = x0f.bfloat16()
        self.act_lo[:M] = (x0f - self.act_hi[:M].float()).bfloat16()
        wf = w.float().reshape(L * K, K)
        self.w_hi = wf.bfloat16()
        self.w_lo = (wf - self.w_hi.float()).bfloat16()
        # float64 reference from the split operands (what the kernel multiplies, up to a_lo·w_lo)
        x = self.act_hi[:M].double() + self.act_lo[:M].double()
        wd = (self.w_hi.double() + self.w_lo.double()).reshape(L, K, K)
        r = torch.zeros_like(x)
        for s in range(L):
            x = x @ wd[s]
            r += x
        self.ref, self.ref_r = x, r
        to = dict(device=device)
        self.act_hi, self.act_lo = self.act_hi.to(**to), self.act_lo.to(**to)
        self.w_hi, self.w_lo = self.w_hi.to(**to), self.w_lo.to(**to)
        self.MB, self.NTN = M // TILE, K // TILE
        self.TPS = self.MB * self.NTN
        self.n_tasks = L * self.TPS
        # ws2qr's activations: fp32 rows (stage 0: hi + lo, exact), split in the consumer's registers
        self.act_f = torch.zeros((L + 1) * M, K, dtype=torch.float32, device=device)
        self.act_f[:M] = self.act_hi[:M].float() + self.act_lo[:M].float()
        self.r = torch.zeros(M, K, dtype=torch.float32, device=device)  # the atomic forms' residual
        self.ctr = torch.zeros(L * self.MB, dtype=torch.int32, device=device)
        self.err = torch.zeros(1, dtype=torch.int32, device=device)
        self.head = torch.zeros(1, dtype=torch.int32, device=device)
        self.trace = torch.zeros(self.n_tasks, 4, dtype=torch.int64, device=device)
        self.epoch = {}
        self._descs = None
        self.kernel = None  # the last launch's compiled kernel (its shared memory is reported)
        self.form = ""      # the last launch's form (``error`` reads ws2qr's / ws2qrp's fp32 rows)

    def descs(self):
        if self._descs is None:
            from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
            la = gl.NVMMASharedLayout.get_default_for([TILE, TILE], gl.bfloat16)
            lw = gl.NVMMASharedLayout.get_default_for([TILE, TILE], gl.bfloat16)
            a = [TensorDescriptor(t, list(t.shape), list(t.stride()), [TILE, TILE], la) for t in (self.act_hi, self.act_lo)]
            w = [TensorDescriptor(t, list(t.shape), list(t.stride()), [TILE, TILE], lw) for t in (self.w_hi, self.w_lo)]
            self._descs = (*a, *w)
        return self._descs

    def descs_f(self):
        """ws2qr's descriptors: A as fp32 64 × 32 boxes (columns 0–31 of a step, and through a view 32 columns on,
        32–63: the same coordinates), the bf16 weight pair as the other forms'."""
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
        lf = gl.NVMMASharedLayout.get_default_for([TILE, TILE // 2], gl.float32)
        a = [TensorDescriptor(t, list(t.shape), list(t.stride()), [TILE, TILE // 2], lf)
             for t in (self.act_f, self.act_f[:, TILE // 2:])]
        return (*a, *self.descs()[2:])

    def reset(self, zero_acts: bool = False):
        self.ctr.zero_()
        self.err.zero_()
        self.head.zero_()
        self.epoch = 0
        if zero_acts:
            self.act_hi[self.M:].zero_()
            self.act_lo[self.M:].zero_()
            self.act_f[self.M:].zero_()
            self.r.zero_()

    def launch(self, form: str, trace: bool = False, spin_limit: int = 2_000_000, grid: int = 0):
        """One forward; ``grid`` programs (default: one per tile of a stage), program p running tasks p, p + grid, …"""
        self.epoch += 1
        goal = self.epoch * self.NTN
        grid = (grid or self.TPS,)
        atomic = form.endswith("a")
        if form.startswith("tl"):
            self.kernel = chain_tl[grid](self.act_hi, self.act_lo, self.w_hi, self.w_lo, self.r, self.ctr, self.err,
                                         self.n_tasks, self.TPS, self.NTN, self.MB, self.M, goal, spin_limit, K=self.K,
                                         STAGES=3, ATOMIC=atomic, num_warps=4)
        elif form.startswith("ws2c"):  # two consumers: ``stages_2c`` ring slots each
            self.kernel = chain_ws2c[grid](*self.descs(), self.act_hi, self.act_lo, self.r, self.ctr, self.err,
                                           self.trace, self.n_tasks, self.TPS, self.NTN, self.MB, self.M, goal,
                                           spin_limit, K=self.K, STAGES=self.stages_2c, ATOMIC=atomic, TRACE=trace,
                                           num_warps=4)
        else:
            # the queue's head advances by every task and one empty ticket per program each launch
            base = (self.epoch - 1) * (self.n_tasks + grid[0])
            rega = 2 if form.endswith("rp") else 3 if form.endswith("qb") else int(form.endswith("r"))
            f32 = rega in (1, 2)   # ws2qr / ws2qrp: fp32 rows
            self.kernel = chain_ws[grid](*(self.descs_f() if f32 else self.descs()),
                                         self.act_f if f32 else self.act_hi, self.act_lo, self.r, self.ctr, self.err,
                                         self.trace, self.head, base, self.n_tasks, self.TPS, self.NTN, self.MB,
                                         self.M, goal, spin_limit, K=self.K, STAGES=self.stages, MODE=int(form[2]),
                                         QUEUE="q" in form, ATOMIC=atomic, TRACE=trace, num_warps=4,
                                         SPLIT=form.endswith("s"), OUT=OUT_OF_SUFFIX.get(form[-1], 0),
                                         XSPLIT=form.endswith("x"), REGA=rega)
        self.form = form

    def error(self) -> float:
        """Max |out − ref| / max |ref| of the last stage."""
        if self.form.endswith(("r", "rp")):  # ws2qr's / ws2qrp's fp32 rows
            out = self.act_f[self.L * self.M:].double()
        else:
            out = self.act_hi[self.L * self.M:].double() + self.act_lo[self.L * self.M:].double()
        ref = self.ref.to(out.device)
        return float((out - ref).abs().max() / ref.abs().max())

    def error_r(self) -> float:
        """Max |R − ref| / max |ref| of the atomic forms' residual (after one launch from zero)."""
        ref = self.ref_r.to(self.r.device)
        return float((self.r.double() - ref).abs().max() / ref.abs().max())


def measure(form: str, L: int, M: int, K: int, reps: int, trace: bool, grid: int = 0, stages: int = 4,
            stages_2c: int = 3) -> dict:
    import torch
    c = Chain(L, M, K, stages=stages, stages_2c=stages_2c)
    grid = grid or c.TPS
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    if grid > n_sm:  # one CTA per SM (the Gluon form's shared memory): a program without an SM would deadlock
        raise ValueError(f"ws_chain: grid {grid} > {n_sm} SMs; pass --grid <= {n_sm} or a smaller --M / --K")
    c.reset(zero_acts=True)
    t0 = time.time()
    c.launch(form, grid=grid)
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    rec = dict(form=form, L=L, M=M, K=K, grid=grid, tasks=c.n_tasks, tiles_per_program=c.TPS / grid,
               compile_s=round(compile_s, 1), err_first=int(c.err.item()), rel_error=c.error())
    if not form.startswith("tl"):  # ring slots (per consumer for ws2c) and the shared memory they take
        rec.update(stages=c.stages_2c if form.startswith("ws2c") else c.stages,
                   shared=getattr(getattr(c.kernel, "metadata", None), "shared", None))
    if form.endswith("a"):
        rec["rel_error_r"] = c.error_r()
    for _ in range(3):
        c.launch(form, grid=grid)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        e0.record()
        for _ in range(reps):
            c.launch(form, grid=grid)
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1000 / reps)
    rec["us_per_launch"] = sorted(times)[len(times) // 2]
    rec["err"] = int(c.err.item())
    if trace and not form.startswith("tl"):
        c.launch(form, trace=True, grid=grid)
        torch.cuda.synchronize()
        tr = c.trace.cpu().double()
        t_start = tr[tr[:, 0] > 0].min().item() if (tr[:, 0] > 0).any() else tr.min().item()
        per = []
        for s in range(1, L):  # stage s, medians over its tasks (µs)
            blk = tr[s * c.TPS:(s + 1) * c.TPS].reshape(c.MB, c.NTN, 4)
            prev = tr[(s - 1) * c.TPS:s * c.TPS].reshape(c.MB, c.NTN, 4)
            last = prev[:, :, 3].max(dim=1).values[:, None]  # row block m's last release of stage s − 1
            per.append(dict(
                stage=s,
                link=float((blk[:, :, 0] - last).median() / 1000),  # that release → the dependency seen
                data=float((blk[:, :, 1] - blk[:, :, 0]).median() / 1000),  # dependency seen → first slot ready
                mma=float((blk[:, :, 2] - blk[:, :, 1]).median() / 1000),  # first slot → last MMA done
                release=float((blk[:, :, 3] - blk[:, :, 2]).median() / 1000),  # → released (epilogue, stores, fence)
                chain=float((blk[:, :, 3].max(dim=1).values[:, None] - last).median() / 1000)))  # release to release
        rec["trace_stages"] = per
        rec["trace_total_us"] = float((tr[:, 3].max() - t_start) / 1000)
    return rec


def _compile_ws(queue: bool, K: int, stages: int, atomic: bool = False, two: bool = False, split: bool = False,
                out: int = 0, xsplit: bool = False, rega: int = 0) -> dict:
    """Compile ``chain_ws`` (MODE 2; the ticket queue or static lists) or, with ``two``, ``chain_ws2c`` (``stages``
    slots per consumer) for sm_90a without a GPU; ptxas's report (registers, spills, wgmma serialization notes) too."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type
    from bench.common import sm90_report
    kern = chain_ws2c if two else chain_ws
    t = torch.empty(1024, 1024, dtype=torch.bfloat16)
    lay = gl.NVMMASharedLayout.get_default_for([TILE, TILE], gl.bfloat16)
    descs = [TensorDescriptor(t, [1024, 1024], [1024, 1], [TILE, TILE], lay)] * 4
    if rega in (1, 2):
        tf = torch.empty(1024, 1024, dtype=torch.float32)
        lf = gl.NVMMASharedLayout.get_default_for([TILE, TILE // 2], gl.float32)
        descs[:2] = [TensorDescriptor(tf, [1024, 1024], [1024, 1], [TILE, TILE // 2], lf)] * 2
    names = list(kern.arg_names)
    sig = {n: mangle_type(d) for n, d in zip(names[:4], descs)}
    sig.update(act_hi_ptr="*fp32" if rega in (1, 2) else "*bf16", act_lo_ptr="*bf16", r_ptr="*fp32", ctr_ptr="*i32",
               err_ptr="*i32", trace_ptr="*i64")
    sig.update({n: "i32" for n in ("n_tasks", "TPS", "NTN", "MB", "M", "goal", "spin_limit")})
    cex = dict(K=K, STAGES=stages, ATOMIC=atomic, TRACE=False, num_warps=4)
    if not two:
        sig.update(head_ptr="*i32", base="i32")
        cex.update(MODE=2, QUEUE=queue, SPLIT=split, OUT=out, XSPLIT=xsplit, REGA=rega)
    k = sm90_report.compile_gluon(kern, sig, cex, ("act_hi_ptr", "act_lo_ptr", "r_ptr", "M"), num_warps=4)
    ptx = k.asm["ptx"]
    rep = sm90_report.report(k)
    return dict(warps=k.metadata.num_warps, shared=k.metadata.shared, wgmma=ptx.count("wgmma.mma_async"),
                wgmma_reg_a=sum(1 for ln in ptx.splitlines() if "wgmma.mma_async" in ln and "}, {" in ln),
                tma=ptx.count("cp.async.bulk.tensor"), tma_store=ptx.count("cp.async.bulk.tensor.2d.global.shared"),
                release=ptx.count("red.release.gpu"), acquire=ptx.count("ld.acquire.gpu"),
                proxy_fence=ptx.count("fence.proxy.async.global"), shared_fence=ptx.count("fence.proxy.async.shared"),
                setmaxnreg=ptx.count("setmaxnreg"), atomics=ptx.count("atom.global"), f32_adds=_f32_adds(ptx),
                cvt_bf16=ptx.count("cvt.rn.bf16.f32"), cvt_bf16x2=ptx.count("cvt.rn.bf16x2.f32"),
                maxnreg=sorted({int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+);", ptx)}),
                **{key: rep[key] for key in ("spill_stores", "spill_loads", "wgmma_notes")})


def _f32_adds(ptx: str) -> int:
    """fp32 atomic adds into global memory (``red`` or ``atom``, scalar or vector) in a PTX listing."""
    return sum(1 for ln in ptx.splitlines() if (".global" in ln and ".add" in ln and "f32" in ln
                                                 and ("red." in ln or "atom." in ln)))


def _compile_tl(K: int, atomic: bool) -> dict:
    """Compile ``chain_tl`` for sm_90a without a GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = list(chain_tl.arg_names)
    sig = {n: "*bf16" for n in ("act_hi_ptr", "act_lo_ptr", "w_hi_ptr", "w_lo_ptr")}
    sig.update(r_ptr="*fp32", ctr_ptr="*i32", err_ptr="*i32", K="constexpr", STAGES="constexpr", ATOMIC="constexpr")
    sig.update({n: "i32" for n in ("n_tasks", "TPS", "NTN", "MB", "M", "goal", "spin_limit")})
    cex = dict(K=K, STAGES=3, ATOMIC=atomic)
    src = ASTSource(chain_tl, sig, constexprs={(names.index(k),): v for k, v in cex.items()},
                    attrs={(names.index(n),): [["tt.divisibility", 16]] for n in sig if n.endswith("_ptr")})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    ptx = k.asm["ptx"]
    return dict(warps=k.metadata.num_warps, shared=k.metadata.shared, wgmma=ptx.count("wgmma.mma_async"),
                cp_async=ptx.count("cp.async.cg.shared.global"), release=ptx.count("red.release.gpu"),
                acquire=ptx.count("ld.acquire.gpu"), f32_adds=_f32_adds(ptx))


def compile_report(K: int = 1024, stages: int = 4, stages_2c: int = 3) -> dict:
    """Compile ``chain_ws`` (MODE 2: static lists, the queue, the queue with the residual atomics; ``ws_s2c``: static
    lists with ``stages_2c`` slots, ``ws2c``'s one pipeline), ``chain_ws2c`` (with and without the atomics) and
    ``chain_tl`` (with and without the atomics) for sm_90a without a GPU; return warps, shared memory, the counts of
    the instructions they are measured with and (Gluon) ptxas's spills and wgmma serialization notes."""
    return dict(ws=_compile_ws(False, K, stages), ws_queue=_compile_ws(True, K, stages),
                ws_queue_atomic=_compile_ws(True, K, stages, atomic=True),
                ws_queue_split=_compile_ws(True, K, stages, split=True),
                ws_queue_xsplit=_compile_ws(True, K, stages, xsplit=True),
                ws_queue_rega=_compile_ws(True, K, stages, rega=1),
                ws_queue_rega_packed=_compile_ws(True, K, stages, rega=2),
                ws_queue_regb=_compile_ws(True, K, stages, rega=3),
                ws_queue_fence_at_signal=_compile_ws(True, K, stages, out=1),
                ws_queue_tma_store=_compile_ws(True, K, stages, out=2), ws_s2c=_compile_ws(False, K, stages_2c),
                ws2c=_compile_ws(False, K, stages_2c, two=True),
                ws2c_atomic=_compile_ws(False, K, stages_2c, atomic=True, two=True), tl=_compile_tl(K, False),
                tl_atomic=_compile_tl(K, True))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for ws_chain.json (GPU runs)")
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a without a GPU and print the resources")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    ap.add_argument("--M", type=int, default=256)
    ap.add_argument("--K", type=int, nargs="+", default=[1024, 512])
    ap.add_argument("--L", type=int, nargs=2, default=[4, 16], help="two chain lengths: cost per stage = difference")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--grid", type=int, default=0, help="programs (default: one per tile of a stage)")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--stages", type=int, default=4, help="ring slots of the one-consumer Gluon forms (2-4)")
    ap.add_argument("--stages2c", type=int, default=3, help="ring slots per consumer of ws2c / ws2ca (2 or 3)")
    a = ap.parse_args(argv)
    if a.compile:
        print(json.dumps(compile_report(stages=a.stages, stages_2c=a.stages2c)), flush=True)
        return
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("ws_chain: no CUDA device; without a GPU run `python -m bench.dag.ws_chain --compile`")
    rows = []
    for K in a.K:
        for form in a.forms:
            pair = []
            for L in a.L:
                try:
                    r = measure(form, L, a.M, K, a.reps, a.trace and L == a.L[-1], a.grid, a.stages,
                                a.stages2c)
                except Exception as e:  # a form that fails to compile or run is reported, the others go on
                    r = dict(form=form, L=L, M=a.M, K=K, error=f"{type(e).__name__}: {e}"[:400])
                print(json.dumps({k: v for k, v in r.items() if k != "trace_stages"}), flush=True)
                if r.get("trace_stages"):
                    keys = ("link", "data", "mma", "release", "chain")
                    med = {k: sorted(x[k] for x in r["trace_stages"])[len(r["trace_stages"]) // 2] for k in keys}
                    print(f"   trace {form} K={K} L={L} (µs, median stage): "
                          + " ".join(f"{k}={v:.2f}" for k, v in med.items()), flush=True)
                pair.append(r)
                rows.append(r)
            if all("us_per_launch" in r for r in pair):
                per = (pair[1]["us_per_launch"] - pair[0]["us_per_launch"]) / (a.L[1] - a.L[0])
                rows.append(dict(form=form, K=K, M=a.M, grid=pair[0]["grid"],
                                 tiles_per_program=pair[0]["tiles_per_program"], us_per_stage=per))
                print(f"== {form} K={K} grid={pair[0]['grid']} ({pair[0]['tiles_per_program']:g} tiles per program "
                      f"a stage): {per:.2f} us per stage", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        tmp = os.path.join(a.out, ".ws_chain.json.tmp")
        with open(tmp, "w") as f:
            json.dump(dict(rows=rows, device=torch.cuda.get_device_name()), f, indent=1)
        os.replace(tmp, os.path.join(a.out, "ws_chain.json"))


if __name__ == "__main__":
    main()
