"""``form: ws`` of the dag variant: the forward pass as ONE warp-specialized Gluon persistent kernel
(``dag_ws_fwd``), beside today's ``@triton.jit`` megakernel (``form: tl``, ``kernel.py``); docs/dag-results.md,
"Results" 19. GPU only to run (sm_90: Gluon has no interpreter); compiled for sm_90a on the CPU by the tests
(``tests/test_dag_ws_kernel.py``). The lab harness that compares it with today's kernel is ``bench/dag/ws_dag.py``.

Same graph, task table, counters, epochs, queue order and precision schemes as ``form: tl`` — ``WsRunner`` runs a
``DagPrepared``'s task table (``host.prepare_one``) on its weight slabs and buffers (TMA descriptors over those same
tensors) with the control tensors it is given: ``host`` passes the prepared ``ctr``, ``head``, ``err`` and ``trace``
(so ``run``, ``check``, ``spin_limit`` and ``task_profile`` are the same for both forms); the lab's ``WsDag`` its own.
Its grid is one CTA per SM (the epoch arithmetic uses the launch grid).
Three partitions (``gl.warp_specialize``):

- **loader** (1 warp): takes a ticket (``atomic_add`` on the head, relaxed; the epoch base as today: every launch
  takes ``n_tasks + grid`` tickets), reads the task row; for a GEMM kind claims the first ``min(PRE_W, steps)`` ring
  slots (``ws_pre``, default 2: each claim waits for the consumer to free a slot of the task before, so fewer start
  the poll sooner; docs/dag-results.md "Results" 35) and issues their weight tiles by TMA *before* the wait. GEMM and
  attention tasks are handed to the consumer (id and row fields, a 2-slot shared-memory ring with full/free mbarriers,
  as ``ws_chain``'s ``ws2q``) before the wait too: the consumer then waits on the ring's mbarriers, which only the
  loads issued after the wait complete. Then the poll: one lane per counter (``ld.acquire.gpu`` until goal x epoch,
  the goals from the row as today's ``wait: parallel``; bounded by ``spin_limit``; a timed-out wait adds 1 to
  ``err[0]`` and records the task in ``err[1]``), a warp barrier, ``fence.proxy.async.global``. LayerNorm tasks are
  handed over only now (the consumer reads r / x itself with ``.cg`` loads, so the hand-over must carry the acquire).
  Then the A tiles of the claimed slots and the rest of the K loop (claim a slot, weight tiles (64 × block_n), A
  tiles: A's K column k in column block k // D of the [K // D * M, D] view, FFN2's [4, M, D]); attention: q hi/lo into
  a dedicated buffer (its own ready/empty mbarriers), then per key block k hi/lo and v hi/lo into one ring slot (k
  where a GEMM's A goes, v where its W goes: its first 64 × 64 tile; q/k/v are head-major [.., S, 64] blocks, so every
  tile is a 64 × 64 box of the [L*3*B*H*S, 64] view).
- **consumer** (the default partition: one warpgroup, 4 warps): per kind — the GEMM K loop on the ring with async
  wgmma (n = block_n; bf16x3: ``a_lo·w_hi + a_hi·w_lo + a_hi·w_hi`` per K step, in that order, as
  ``kernels/common/tl_helpers.dot_split`` with today's default DOT_PREC; ``f16_w1``: A as fp16 hi/lo, the weight's
  one fp16 part (``host._weight_parts``: hi = lo = the fp16 rounding), ``a_lo·w + a_hi·w``), the previous step's
  slot freed after ``warpgroup_mma_wait(products)``, the first K step peeled (``_gemm_mma`` says why: ptxas
  serialized every wgmma of the kernel, note C7515, when both schemes' loops started from ``gl.zeros``); the
  epilogues of today's kernel with the same arithmetic (QKV: + bias, split bf16, head-major store; FFN1: + bias,
  GELU (``log2poly`` with ``ex2.approx.ftz``, or ``erf``), split by FFN2's scheme, stored into [4, M, D]; output
  projection / FFN2: + bias on K split 0, relaxed gpu-scope fp32 atomics into r); LayerNorm rows as ``_ln_task``
  (two-pass fp32 statistics, one row a warp: ``LN_ROW_WARPS``; layer 0's LN1 also writes r = x); attention as
  ``_attn_task`` on the attention helpers
  (``_overlap_blocks``: q·kᵀ = q_lo·k_hiᵀ + q_hi·k_loᵀ + q_hi·k_hiᵀ from shared memory, kᵀ a transposed view of the
  k tile; p·v = p_lo·v_hi + p_hi·v_lo + p_hi·v_hi with p split in registers as wgmma's register A operand, into
  ``acc * alpha``; the online softmax in exp2 with ``qk_scale``; FA3's overlap: block j's q·kᵀ issued with block
  j − 1's p·v). Every bf16 split converts its hi part two elements an instruction (``PACK_HI``: ``cvt.rn.bf16x2.f32``;
  ``x.to(bf16)`` compiles to one F2F an element, 0.9–1.5% of the forward pass, docs/dag-results.md "Results" 40). Then a
  barrier of its 128 threads and the task into a 2-slot ring to the signaller (``done`` /
  ``sig_free`` mbarriers); the consumer goes on to its next task while its stores drain.
- **signaller** (1 warp): waits for the consumer's ``done``, frees the slot, then ``fence.proxy.async.global`` (the
  task's generic stores are read by TMA elsewhere) and one ``red.release.gpu.add`` of 1 per counter the task signals
  (one lane per counter), and the trace stamps. The proxy fence waits for the task's stores to drain, off the
  consumer's path here (``FENCE_AT_SIGNAL``; issued by the consumer before its barrier it made the forward pass
  1.5–3.3% slower: docs/dag-results.md "Results" 32).

Two consumers (``ws_consumers: 2``, ``CONSUMERS``): the loader hands its i-th task to consumer i % 2 (its own 2-slot
hand-over ring, at slots 2c and 2c + 1 of the hand-over arrays), with the task's first ring step g in the hand-over
(one ring, slots claimed in ticket order: consumer c frees the slots of its own tasks), and the attention's q
buffer, its two mbarriers and the signaller are per consumer. One consumer's epilogue, LayerNorm rows or softmax
then run beside the other's wgmma (a task's K loop can start once the task before it, on the other consumer, has
freed its last ring slots). 12 warps: consumer 0 the default partition, consumer 1 a worker warpgroup, the loader and
the two signallers one padded warpgroup; ``REGS``: 232 registers for each consumer, 40 for the 1-warp partitions.

The int8 limb scheme (``I8``: ``scheme_qkv`` / ``scheme_ffn1: i8x2cb128``, 64-row tiles, one consumer; docs/dag.md
"Precision"): the LayerNorm task stores its rows as two int8 limbs a 128-column block and each block's row scale
(``_store_i8``); the GEMM's K step is 128 deep and fills the same slot: A's two [64, 128] limb boxes in the A tiles'
bytes, W's two K-major [BN, 128] limb tiles in the W tiles', and the rows' scales, a [1, 64] box, in a 256-byte scale
row beside the slot, all on the slot's ``ready`` barrier (data of other CTAs by TMA after the acquire, as every
operand: the argument below is unchanged); the consumer (``_gemm_mma_i8``) folds each step's integer products into
fp32 with those row scales and the weight's column scales (written by ``prepare``, constant, as the biases).

Memory ordering (PTX memory model; the argument behind the protocol):

1. *Producer side.* Every consumer thread issues its task's global stores and relaxed atomics, then a barrier of
   the consumer's 128 threads (``gl.thread_barrier`` = ``bar.sync 0, 128``; Triton also puts one before every
   elected ``mbarrier.arrive``); one elected thread (tid % 128 == 0) arrives on ``done`` (``mbarrier.arrive``:
   release semantics at CTA scope by default). Every signaller lane waits on ``done`` itself (``mbarrier.try_wait``:
   acquire at CTA scope), then issues ``fence.proxy.async.global`` and its own ``red.release.gpu``.
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
   async-proxy (TMA) reads the loader then issues (the writers' side fenced too, by the signaller: point 1).
   LayerNorm tasks read generic data in the consumer: the loader hands them over after the warp barrier (its elected
   arrive on ``full`` = release.cta, the consumer threads' waits = acquire.cta), causality again, and the loads are
   ``.cg`` as today's (L2, never a stale L1 line). GEMM and attention operands of other CTAs arrive only by TMA
   issued after the fence (biases and LayerNorm weights are constant).
3. *Write-after-read.* A task is released only after the consumer waited for every ring slot of it (its TMA reads
   landed in shared memory) and for its last wgmma: a later writer, ordered after the release by the graph
   (``graph.check_hazards``), cannot overwrite what the task still reads.

Deadlock freedom: the loader issues every load of task T before it takes ticket T + 1, and the ring slots it claims
early for T + 1's weights are freed by the K loops of T and earlier tasks, all handed over already; the q buffer of
an attention task is freed by the previous attention task, handed over already; so the lowest unfinished ticket
always progresses (the queue argument of docs/dag.md, with the loader at most one task ahead of the consumer).
With two consumers the same holds: a consumer waits only on ring slots and a q buffer whose loads the loader issued
before it moved on (task T's loads all precede T + 1's claims), frees them without waiting on the other consumer,
and the loader's claim of step g waits for the free of step g − STAGES, a step of a task handed over already; the
loader's hand-over to consumer c waits only for c to take its previous task, which c finishes on its own.
The cooperative consumers (block_m 128 with two consumers, docs/dag-results.md "Results" 44) take every task in the same
order and each frees every ring slot it passes (a slot's ``empty`` counts two arrivals; a slot of a task only one of
them runs is freed by that one with count 2), so a slot is freed once both have passed it, and each waits only on
slots of tasks handed to both already and, at the hand-over to signaller 0 (its ``done`` counting both), on the
other's arrival for a task two back, which the other reached first or reaches without waiting on this one.

Tiles: GEMM tiles of 64 rows × ``BLOCK_N`` columns, BLOCK_N = block_n 64 (the default) or 128 (case 12's tuned
tiling), one width for the output projection and the FFN, QKV's ``BLOCK_N_QKV`` 64 or 128 of its own (case 2's
tuned 64 beside 128: its own K-loop body and accumulator layout), with 64-wide K steps; 64-row attention blocks, head
dim 64 (the defaults of ``config/variant/dag.yaml`` and every dag case's head dim); ``check_ws_params`` /
``check_supported`` raise naming the parameter otherwise (another width, the output projection's and the FFN's
widths mixed, ``queue: static``, more programs than SMs). A ring slot holds A hi/lo (64 × 64 each) and W hi/lo
(64 × ``RING_N`` each, the wider of the two widths; the weight descriptors' boxes are 64 × their GEMM's width, which
Triton issues as 64-column TMA boxes): 32 KB at 64, 48 KB at 128; an attention key block puts k in the A tiles and v
in the first 64 × 64 tile of the W part (``_w_views``: the same bytes of the same slot, so the ring protocol, the
memory ordering and the deadlock argument above are unchanged: a slot is still claimed, filled, consumed and freed
as one), and a GEMM narrower than the ring does the same with its weight tiles (``_ring_views``).
The ring has ``STAGES`` (``ws_stages``: 2–6, default 4) slots: with the q buffer (16 KB) and the epilogues' scratch
164228 / 229764 bytes of shared memory at block_n 64 and 4 / 6 slots, 180612 / 229764 at 128 and 3 / 4 slots (of
232448, one CTA per SM; ``ws_shared_bytes``, checked at prepare naming ``ws_stages``). GEMM accumulators are [64,
BLOCK_N] fp32 (64 registers a thread at 128; ptxas: no spills, no wgmma serialization); the QKV epilogue's head-major
store maps each column to its part and head, so a 128-wide tile spans two heads.

Where it is simplest rather than fast (a draft): a task's hand-overs cost a few shared-memory round trips and CTA
barriers (every thread reads a slot whole, ``PACKED_HANDOFF``: read a word a lane and reduced across the lanes they
made the forward pass 2.6–8.5% slower, docs/dag-results.md "Results" 34); the loader handles LayerNorm tasks' waits
serially with the rest. The launch: the first goes through
the kernel is compiled once (``WsRunner.compile``: ``host.prepare_one`` on CUDA; else the first launch, through Gluon's
JIT path), then every launch goes through ``DirectLaunch``, Triton's launcher module called directly with the 18 TMA
descriptors encoded once (the JIT path binds ~75 arguments and encodes every descriptor on each call: 117–235 µs of
host time a launch on the H200; the lab harness times both, ``host_us_per_launch`` / ``jit_path``).
"""
from __future__ import annotations

import triton
from triton import knobs
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                            warpgroup_mma_wait)

from ..cases import variant_params
from ..common import split, task_sync
from ..common.tl_helpers import GELU_Q0, GELU_Q1, GELU_Q2, GELU_Q3, GELU_Q4, GELU_Q5  # log2 Phi(-u): the one fit
from ..registry import Unsupported
from .kernel import TRACE_COLS   # the trace's row width, one for both forms
from ..validate import ParameterError

TILE = 64                      # every tile edge (host side): GEMM rows / columns / K step, attention blocks, head dim
T64 = gl.constexpr(TILE)
F8_A_SCALE = gl.constexpr(split.F8_A_SCALE)   # f16f8: A's lo part stored as fp8(lo * 2^11)
I8 = gl.constexpr(split.I8_SCHEME)   # the int8 limb scheme (QKV and FFN1: their A comes whole-row from an LN task)
I8_Q = gl.constexpr(split.I8_Q)   # its largest integer 128 · l0 + l1 (split.i8_limbs)
I8_K = gl.constexpr(split.I8_BLOCK)   # its K step and scale block
LN_EPS = gl.constexpr(1e-5)
HEADER = gl.constexpr(8)       # kernels/dag/kernel.py TASK_HEADER: kind, layer, a, b, c, waits, signals, 0
FIELDS = gl.constexpr(8)       # int32 words per hand-over slot (t, kind, l, a, b, c, g: first ring step, sg:
#                                the counter the task signals, -1 none: read by the loader when MAX_SIGNALS is 1)

# one lane per counter: ld.acquire.gpu of the counter ($1) until >= $2, at most $3 polls; $0 = 1 on timeout
_POLL = gl.constexpr("{ .reg .pred q; .reg .b32 v, n;\n\tmov.b32 $0, 0;\n\t" + task_sync._POLL_LOOP)
# the lanes with $2 != 0 add 1 to their counter ($1) with a release reduction (gpu scope)
_RELEASE = gl.constexpr("{ .reg .pred p; setp.ne.s32 p, $2, 0;\n\t"
                        "@p red.release.gpu.global.add.s32 [$1], 1; }\n\tmov.b32 $0, 0;")
_FENCE_PROXY = gl.constexpr("fence.proxy.async.global;\n\tmov.b32 $0, 0;")
_NOW = gl.constexpr("mov.u64 $0, %globaltimer;")
_SMID = gl.constexpr("mov.u32 $0, %smid;")
_EX2 = gl.constexpr("ex2.approx.ftz.f32 $0, $1;")
# fp32 -> bf16, round to nearest even, two elements an instruction ($1 the low half, $2 the high)
_CVT_BF16X2 = gl.constexpr("cvt.rn.bf16x2.f32 $0, $2, $1;")
_CVT_RNI = gl.constexpr("cvt.rni.s32.f32 $0, $1;")   # fp32 -> int32, round to nearest even



# ----------------------------------------------------------------------------------------------------------------
# attention (FA3's overlap within one warpgroup; also the lab's bench.dag.ws_attn)

@gluon.jit
def _to_bf16(x, PACK_HI: gl.constexpr):
    """fp32 -> bf16, round to nearest even. ``PACK_HI``: two elements an instruction (``cvt.rn.bf16x2.f32``, SASS
    F2FP.PACK_AB) where ``x.to(bf16)`` on its own compiles to one F2F an element (the same bits either way); the lab's
    A/B (``@PACK_HI=0``). The attention helpers default to the kernel's choice (``bench.dag.ws_attn`` calls them)."""
    if PACK_HI:
        return gl.inline_asm_elementwise(_CVT_BF16X2, "=r,r,r", [x], dtype=gl.bfloat16, is_pure=True, pack=2)
    else:
        return x.to(gl.bfloat16)


@gluon.jit
def _qk3(q_hi, q_lo, k_hi, k_lo, s0):
    """S = q_lo·k_hiᵀ + q_hi·k_loᵀ + q_hi·k_hiᵀ (``dot_split``'s order), three async wgmma from shared memory; the
    first ignores ``s0`` (zero-accumulator flag)."""
    kt_hi = k_hi.permute((1, 0))
    s = warpgroup_mma(q_lo, kt_hi, s0, use_acc=False, is_async=True)
    s = warpgroup_mma(q_hi, k_lo.permute((1, 0)), s, is_async=True)
    return warpgroup_mma(q_hi, kt_hi, s, is_async=True)


@gluon.jit
def _pv3(p_hi, p_lo, v_hi, v_lo, acc):
    """acc + p_lo·v_hi + p_hi·v_lo + p_hi·v_hi, three async wgmma with p from registers (the A operand)."""
    acc = warpgroup_mma(p_lo, v_hi, acc, is_async=True)
    acc = warpgroup_mma(p_hi, v_lo, acc, is_async=True)
    return warpgroup_mma(p_hi, v_hi, acc, is_async=True)


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, diag, CAUSAL: gl.constexpr, mma: gl.constexpr, dot: gl.constexpr,
             PACK_HI: gl.constexpr = True):
    """One key block of ``_attn_block``'s online softmax, in the wgmma accumulator's layout: keys past the query
    masked on the diagonal block (causal), m and l updated, p = exp2(s·scale − m) split into bf16 hi/lo in the
    wgmma A-operand layout. Returns (m, alpha, l, p_hi, p_lo)."""
    if CAUSAL:
        if diag:  # the query block's own key block (the only one with keys past a query)
            rows = gl.arange(0, T64, layout=gl.SliceLayout(1, mma))
            cols = gl.arange(0, T64, layout=gl.SliceLayout(0, mma))
            s = gl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    p_hi = _to_bf16(p, PACK_HI)
    p_lo = (p - p_hi.to(gl.float32)).to(gl.bfloat16)
    return m_new, alpha, l_i, gl.convert_layout(p_hi, dot), gl.convert_layout(p_lo, dot)


@gluon.jit
def _overlap_blocks(qh, ql, k_hi, k_lo, v_hi, v_lo, k_ready, k_empty, v_ready, v_empty, q_empty, g, nkv, qk_scale,
                    zero, m_i, l_i, acc, CAUSAL: gl.constexpr, STAGES: gl.constexpr, KV_ONE_BARRIER: gl.constexpr,
                    mma: gl.constexpr, dot: gl.constexpr, V_SLOT: gl.constexpr, PACK_HI: gl.constexpr = True,
                    K_SLOT: gl.constexpr = 1, REG_Q: gl.constexpr = False, RELEASE: gl.constexpr = 1):
    """The key blocks g … g + nkv − 1 of a ring of ``STAGES`` slots (slot = block % STAGES) in FlashAttention-3's
    order within one warpgroup: block 0's q·kᵀ and softmax, then per block j ≥ 1 q·kᵀ of j and p·v of j − 1 issued
    together, the softmax of j while p·v of j − 1 runs, acc · alpha_j; the last block's p·v. Block 0's k must have
    landed (the caller waits on its ready barrier). ``q_empty`` is arrived on once the last q·kᵀ is done; a slot's k
    is released after its q·kᵀ (``k_empty``), its v after its p·v (``v_empty``). KV_ONE_BARRIER: k and v of a slot
    land and are released together (``k_ready`` / ``v_empty`` only; ``k_empty`` and ``v_ready`` are not used).
    V_SLOT: slot s's v tiles are ``v_hi`` / ``v_lo`` index s * V_SLOT (1: their own [STAGES, 64, 64] rings; the dag
    kernel's 128-wide weight ring viewed as 64 × 64 tiles: 2, the first half of the slot's bytes); K_SLOT the same for
    k (the dag kernel's A tiles at 128-row GEMM tiles: 2). REG_Q: q is in registers (wgmma's A-operand layout, kept
    live to each wait) and ``q_empty`` is not used; RELEASE: the count a slot's release arrives with (the dag kernel's
    cooperative consumers: 2, the one consumer that runs the task frees the slot for both).
    Starts from the running state (m_i, l_i, acc); returns (acc, l_i)."""
    slot = g % STAGES
    s = _qk3(qh, ql, k_hi.index(slot * K_SLOT), k_lo.index(slot * K_SLOT), zero)
    if REG_Q:
        s, qh, ql = warpgroup_mma_wait(0, deps=(s, qh, ql))
    else:
        s = warpgroup_mma_wait(0, deps=(s, ))
    if not KV_ONE_BARRIER:
        mbarrier.arrive(k_empty.index(slot))
    if not REG_Q:
        mbarrier.arrive(q_empty, pred=nkv == 1)
    m_i, alpha, l_i, p_hi, p_lo = _softmax(s, m_i, l_i, qk_scale, nkv == 1, CAUSAL, mma, dot, PACK_HI)
    for j in range(1, nkv):
        cur = (g + j) % STAGES
        prev = (g + j - 1) % STAGES
        mbarrier.wait(k_ready.index(cur), ((g + j) // STAGES) & 1)
        s = _qk3(qh, ql, k_hi.index(cur * K_SLOT), k_lo.index(cur * K_SLOT), zero)
        if not KV_ONE_BARRIER:
            mbarrier.wait(v_ready.index(prev), ((g + j - 1) // STAGES) & 1)
        acc = _pv3(p_hi, p_lo, v_hi.index(prev * V_SLOT), v_lo.index(prev * V_SLOT), acc)
        if REG_Q:
            s, qh, ql = warpgroup_mma_wait(3, deps=(s, qh, ql))  # block j's q·kᵀ done (groups complete in order)
        else:
            s = warpgroup_mma_wait(3, deps=(s, ))
        if not KV_ONE_BARRIER:
            mbarrier.arrive(k_empty.index(cur))
        if not REG_Q:
            mbarrier.arrive(q_empty, pred=j == nkv - 1)
        m_i, alpha, l_i, pn_hi, pn_lo = _softmax(s, m_i, l_i, qk_scale, j == nkv - 1, CAUSAL, mma, dot,
                                                  PACK_HI)
        acc, p_hi, p_lo = warpgroup_mma_wait(0, deps=(acc, p_hi, p_lo))  # block j - 1's p·v done
        mbarrier.arrive(v_empty.index(prev), count=RELEASE)
        acc = acc * alpha[:, None]
        p_hi = pn_hi
        p_lo = pn_lo
    last = (g + nkv - 1) % STAGES
    if not KV_ONE_BARRIER:
        mbarrier.wait(v_ready.index(last), ((g + nkv - 1) // STAGES) & 1)
    acc = _pv3(p_hi, p_lo, v_hi.index(last * V_SLOT), v_lo.index(last * V_SLOT), acc)
    acc, p_hi, p_lo = warpgroup_mma_wait(0, deps=(acc, p_hi, p_lo))
    mbarrier.arrive(v_empty.index(last), count=RELEASE)
    return acc, l_i


# ----------------------------------------------------------------------------------------------------------------
# small helpers (every partition)

@gluon.jit
def _stamp(trace_ptr, t, col: gl.constexpr, TRACE: gl.constexpr, lay: gl.constexpr, NT: gl.constexpr):
    """TRACE: %globaltimer into trace[t, col] (one lane of the partition's ``lay`` over NT threads)."""
    if TRACE:
        o = gl.arange(0, NT, layout=lay)
        now = gl.inline_asm_elementwise(_NOW, "=l,r", [o], dtype=gl.int64, is_pure=False, pack=1)
        gl.store(trace_ptr + t.to(gl.int64) * TRACE_COLS + col + o * 0, now, mask=o == 0)


@gluon.jit
def _proxy_fence(lay: gl.constexpr, NT: gl.constexpr):
    """``fence.proxy.async.global`` in every thread of the partition."""
    o = gl.arange(0, NT, layout=lay)
    gl.inline_asm_elementwise(_FENCE_PROXY, "=r,r", [o], dtype=gl.int32, is_pure=False, pack=1)


@gluon.constexpr_function
def _slot_layout(warps, packed):
    """The layout of a hand-over slot's FIELDS words in a partition of ``warps`` warps: ``packed``, every thread holds
    the whole slot (one 32-byte shared-memory read, each word a register select: no cross-lane reduction), else one
    word a lane (``_field`` then reduces across lanes)."""
    if packed:
        return gl.BlockedLayout([FIELDS.value], [32], [warps], [0])
    return gl.BlockedLayout([1], [32], [warps], [0])


@gluon.constexpr_function
def _ln_layout(warps, row_warps):
    """The LayerNorm rows' layout: ``row_warps``, the warps along the rows (a row's reductions stay in its warp:
    shuffles only), else along the columns (a row spans the warps: its reductions go through shared memory)."""
    if row_warps:
        return gl.BlockedLayout([1, 4], [1, 32], [warps, 1], [1, 0])
    return gl.BlockedLayout([1, 4], [1, 32], [1, warps], [1, 0])


@gluon.jit
def _field(v, idx, j: gl.constexpr):
    """Word j of a hand-over slot's vector ``v`` (max over the one matching lane: replicated lanes are harmless)."""
    return gl.max(gl.where(idx == j, v, -2147483647), axis=0)


@gluon.jit
def _put(ring, full, free, base, i, t, kind, l, a, b, c, g, sg, lay: gl.constexpr):
    """Hand a task (id t, its row fields, its first ring step g and the counter it signals sg) over: turn i of the
    2-slot ring at slots base, base + 1 (one per consumer), once its slot is free (an mbarrier starts with phase 1
    complete: the first pass over the ring does not wait). ``lay``: the slot's layout (``_slot_layout``)."""
    q = base + i % 2
    mbarrier.wait(free.index(q), ((i // 2) & 1) ^ 1)
    idx = gl.arange(0, FIELDS, layout=lay)
    v = gl.where(idx == 0, t, gl.where(idx == 1, kind, gl.where(idx == 2, l, gl.where(
        idx == 3, a, gl.where(idx == 4, b, gl.where(idx == 5, c, gl.where(idx == 6, g, sg)))))))
    ring.index(q).store(v)
    gl.thread_barrier()  # every storing thread before the elected arrive (Triton adds one too)
    mbarrier.arrive(full.index(q))


@gluon.jit
def _take(ring, full, free, base, i, lay: gl.constexpr):
    """The task of turn i of the 2-slot ring at slots base, base + 1 (``_put``): (t, kind, l, a, b, c, g, sg); the
    slot handed back. ``lay``: the slot's layout (``_slot_layout``)."""
    q = base + i % 2
    mbarrier.wait(full.index(q), (i // 2) & 1)
    idx = gl.arange(0, FIELDS, layout=lay)
    v = ring.index(q).load(lay)
    gl.thread_barrier()  # every thread has read the slot before it is handed back
    mbarrier.arrive(free.index(q))
    return (_field(v, idx, 0), _field(v, idx, 1), _field(v, idx, 2), _field(v, idx, 3), _field(v, idx, 4),
            _field(v, idx, 5), _field(v, idx, 6), _field(v, idx, 7))


@gluon.jit
def _gemm_geom(kind, l, m, n, s, M: gl.constexpr, D: gl.constexpr, K_CHUNK_O: gl.constexpr,
               K_CHUNK_FFN2: gl.constexpr, BN: gl.constexpr, BN_Q: gl.constexpr, SCHEME_QKV: gl.constexpr,
               SCHEME_FFN1: gl.constexpr):
    """GEMM task (kind, layer l, tile (m, n), K split s): K of the GEMM, its split's first K column k0, its K steps
    (64 deep; ``I8`` on QKV / FFN1: 128 deep) and the first row of its weight slab's K range in the
    [L * N / bn * K, bn] view of the slabs (bn = the kind's block_n: BN_Q for QKV, BN for the others; column tile n
    is slab n, host._slabs)."""
    K = gl.where(kind == 6, 4 * D, D)
    N = gl.where(kind == 1, 3 * D, gl.where(kind == 5, 4 * D, D))
    kc = gl.where(kind == 3, K_CHUNK_O, gl.where(kind == 6, K_CHUNK_FFN2, K))
    k0 = s * kc
    k_end = gl.minimum(k0 + kc, K)
    steps = (k_end - k0 + T64 - 1) // T64
    if SCHEME_QKV == I8 or SCHEME_FFN1 == I8:   # (host: D a multiple of 128 then)
        i8 = ((kind == 1) & (SCHEME_QKV == I8)) | ((kind == 5) & (SCHEME_FFN1 == I8))
        steps = gl.where(i8, steps // 2, steps)
    if BN_Q == BN:
        wrow = (l * ((N + BN - 1) // BN) + n) * K + k0
    else:
        bn = gl.where(kind == 1, BN_Q, BN)
        wrow = (l * ((N + bn - 1) // bn) + n) * K + k0
    return k0, steps, wrow


@gluon.jit
def _ring_views(ring, SCHEME: gl.constexpr, STAGES: gl.constexpr, RN: gl.constexpr, BN: gl.constexpr):
    """The ring's four tiles ([STAGES, 64, 64] A, [STAGES, 64, RN] W) as the scheme's element type (bf16; f16_w1:
    fp16, same bytes; ``I8``: int8 limbs 128 deep, A [64, 128] and W K-major [BN, 128] in the same bytes: a 64-deep
    bf16 tile's 128-byte rows, one swizzle); a GEMM of tiles narrower than the ring (BN < RN: QKV at 64 beside
    128-wide others) sees the W part as [STAGES * RN / BN, 64, BN] tiles and uses the first of each slot's
    (``_w_views``, as the attention's v: the loader's TMA and the consumer's wgmma go through the same view)."""
    a_hi, a_lo, w_hi, w_lo, a_sc = ring
    if SCHEME == I8:   # (A's limbs l0, l1 [64, 128] int8, W's l0, l1 [BN, 128] int8 K-major: the same bytes a slot)
        l8i: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
        a_hi = a_hi._reinterpret(gl.int8, [a_hi.shape[0], T64, I8_K], l8i)
        a_lo = a_lo._reinterpret(gl.int8, [a_lo.shape[0], T64, I8_K], l8i)
        w_hi = w_hi._reinterpret(gl.int8, [STAGES * (RN // BN), BN, I8_K], l8i)   # slot s: s * RN / BN
        w_lo = w_lo._reinterpret(gl.int8, [STAGES * (RN // BN), BN, I8_K], l8i)
    elif SCHEME == "f16f8":   # (a_hi fp16, A's fp8 [lo | hi] pair, w_hi fp16, W's fp8 [hi | lo] pair K-major)
        l8: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
        a_lo = a_lo._reinterpret(gl.float8e4nv, [a_lo.shape[0], T64, 2 * T64], l8)   # (STAGES * 64-row halves)
        w_lo = w_lo._reinterpret(gl.float8e4nv, [STAGES * (RN // BN), BN, 2 * T64], l8)   # slot s: s * RN / BN
        w_hi, w_unused = _w_views(w_hi, w_hi, STAGES, RN, BN)
        a_hi = a_hi._reinterpret(gl.float16, a_hi.shape, a_hi.layout)
        w_hi = w_hi._reinterpret(gl.float16, w_hi.shape, w_hi.layout)
    else:
        w_hi, w_lo = _w_views(w_hi, w_lo, STAGES, RN, BN)
        if SCHEME == "f16_w1":
            a_hi = a_hi._reinterpret(gl.float16, a_hi.shape, a_hi.layout)
            a_lo = a_lo._reinterpret(gl.float16, a_lo.shape, a_lo.layout)
            w_hi = w_hi._reinterpret(gl.float16, w_hi.shape, w_hi.layout)
            w_lo = w_lo._reinterpret(gl.float16, w_lo.shape, w_lo.layout)
    return a_hi, a_lo, w_hi, w_lo


@gluon.jit
def _w_views(w_hi, w_lo, STAGES: gl.constexpr, RN: gl.constexpr, BN: gl.constexpr):
    """The W ring ([STAGES, 64, RN] bf16) as tiles BN wide: BN = RN the ring itself; BN < RN the ring's bytes as
    [STAGES * RN / BN, 64, BN] tiles, slot s's at index s * RN / BN (the first 8 KB of a 16 KB slot at 64 in 128:
    the attention's v, a 64-wide QKV beside 128-wide others), written by TMA and read by wgmma through this one view,
    so the result does not depend on how a wider tile is laid out."""
    if BN != RN:
        w_hi = w_hi._reinterpret(gl.bfloat16, [STAGES * (RN // BN), T64, BN], w_hi.layout)
        w_lo = w_lo._reinterpret(gl.bfloat16, [STAGES * (RN // BN), T64, BN], w_lo.layout)
    return w_hi, w_lo


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
def _load_w(w_hi_d, w_lo_d, w_hi, w_lo, ready, slot, row, SCHEME: gl.constexpr, R: gl.constexpr, BN: gl.constexpr):
    """The weight tile(s) of K step ``row`` into ring slot ``slot`` (W view index slot * R: ``_ring_views``). f16f8:
    the step's K-major fp8 [BN, 128] tile, row (row // 64) * BN of the [L*N/BN*K/64*BN, 128] view. ``I8``: the
    step's K-major limb tiles [BN, 128] (l0 and l1), row (row // 128) * BN of the [L*N/BN*K/128*BN, 128] views."""
    if SCHEME == I8:
        r8 = (row // I8_K) * BN
        tma.async_copy_global_to_shared(w_hi_d, [r8, 0], ready.index(slot), w_hi.index(slot * R))
        tma.async_copy_global_to_shared(w_lo_d, [r8, 0], ready.index(slot), w_lo.index(slot * R))
    else:
        tma.async_copy_global_to_shared(w_hi_d, [row, 0], ready.index(slot), w_hi.index(slot * R))
    if SCHEME == "bf16x3":
        tma.async_copy_global_to_shared(w_lo_d, [row, 0], ready.index(slot), w_lo.index(slot * R))
    elif SCHEME == "f16f8":
        tma.async_copy_global_to_shared(w_lo_d, [(row // T64) * BN, 0], ready.index(slot), w_lo.index(slot * R))


@gluon.constexpr_function
def _step_bytes(scheme, mb, bn):
    """Bytes a K step brings into its ring slot: A hi / lo (mb 64-row boxes each) and W hi / lo 64 deep (f16_w1 one
    W part), 2 bytes an element; ``I8``: A's and W's int8 limbs 128 deep (the same 16 KB and 8 · BN bytes) and A's
    64 row scales."""
    scheme = getattr(scheme, "value", scheme)
    if scheme == I8.value:
        return 2 * mb * TILE * 2 * TILE + 2 * bn * 2 * TILE + TILE * 4
    return (2 * mb * TILE * TILE + (1 if scheme == "f16_w1" else 2) * TILE * bn) * 2


@gluon.jit
def _k_step(SCHEME: gl.constexpr):
    """K columns a step of the scheme covers: 64, ``I8`` 128."""
    return I8_K if SCHEME == I8 else T64


@gluon.jit
def _gemm_pre(w_hi_d, w_lo_d, ring, ready, empty, g, steps, wrow, SCHEME: gl.constexpr, STAGES: gl.constexpr,
              BN: gl.constexpr, RN: gl.constexpr, PRE: gl.constexpr, MB: gl.constexpr):
    """Before the task's wait: claim its first min(PRE, steps) slots (PRE <= STAGES: ``ws_meta`` checks) and issue
    their weight tiles (the weights are written once by prepare: no dependency). Returns how many. BN the GEMM's tile
    width, RN the ring's, MB the tile's 64-row halves (block_m / 64: A's boxes a slot)."""
    a_hi, a_lo, w_hi, w_lo = _ring_views(ring, SCHEME, STAGES, RN, BN)
    NB: gl.constexpr = _step_bytes(SCHEME, MB, BN)
    KS: gl.constexpr = _k_step(SCHEME)
    pre = gl.minimum(steps, PRE)
    for kk in range(pre):
        slot = _claim(ready, empty, g + kk, NB, STAGES)
        _load_w(w_hi_d, w_lo_d, w_hi, w_lo, ready, slot, wrow + kk * KS, SCHEME, RN // BN, BN)
    return pre


@gluon.jit
def _gemm_rest(a_hi_d, a_lo_d, w_hi_d, w_lo_d, ring, ready, empty, g, pre, steps, wrow, k0, row0,
               M: gl.constexpr, D: gl.constexpr, SCHEME: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr,
               RN: gl.constexpr, MB: gl.constexpr):
    """After the wait: the A tiles of the claimed slots, then the remaining K steps (claim, weights, A). A's K
    column k lives in column block k // D of the [K // D * M, D] view (FFN2's [4, M, D]). A weight tile is one
    64 × BN box of its slab (BN = 128: Triton issues it as two 64-column TMA boxes, one expect for both). A 128-row
    tile (MB = 2) takes two 64 × 64 A boxes a slot, rows row0 and row0 + 64, into A tiles slot * 2 and slot * 2 + 1.
    ``I8`` (QKV / FFN1, 64-row tiles, K from 0): A's [M, 2D] limbs, per 128 columns l0 then l1 (``_store_i8``), two
    [64, 128] boxes a step into the A tiles, and the block's 64 row scales, a [1, 64] box of A's [D / 128, M] scales
    (the lo descriptor), into the slot's scale row."""
    a_hi, a_lo, w_hi, w_lo = _ring_views(ring, SCHEME, STAGES, RN, BN)
    a_sc = ring[4]
    NB: gl.constexpr = _step_bytes(SCHEME, MB, BN)
    KS: gl.constexpr = _k_step(SCHEME)
    for kk in range(steps):
        step = g + kk
        slot = step % STAGES
        if kk >= pre:
            slot = _claim(ready, empty, step, NB, STAGES)
            _load_w(w_hi_d, w_lo_d, w_hi, w_lo, ready, slot, wrow + kk * KS, SCHEME, RN // BN, BN)
        k = k0 + kk * KS
        if SCHEME == I8:
            tma.async_copy_global_to_shared(a_hi_d, [row0, 2 * k], ready.index(slot), a_hi.index(slot))
            tma.async_copy_global_to_shared(a_hi_d, [row0, 2 * k + I8_K], ready.index(slot), a_lo.index(slot))
            tma.async_copy_global_to_shared(a_lo_d, [k // I8_K, row0], ready.index(slot), a_sc.index(slot))
        else:
            _load_a(a_hi_d, a_lo_d, a_hi, a_lo, ready, slot, (k // D) * M + row0, k % D, SCHEME, MB)
    return g + steps


@gluon.jit
def _load_a(a_hi_d, a_lo_d, a_hi, a_lo, ready, slot, arow, acol, SCHEME: gl.constexpr, MB: gl.constexpr):
    """A's hi / lo boxes of one 64-deep K step (MB 64-row halves) into ring slot ``slot``."""
    for hh in gl.static_range(MB):
        tma.async_copy_global_to_shared(a_hi_d, [arow + hh * T64, acol], ready.index(slot), a_hi.index(slot * MB + hh))
        if SCHEME == "f16f8":   # A's fp8 [lo | hi] pair of these 64 columns: [rows, 2D] columns 2 acol ...
            tma.async_copy_global_to_shared(a_lo_d, [arow + hh * T64, 2 * acol], ready.index(slot),
                                            a_lo.index(slot * MB + hh))
        else:
            tma.async_copy_global_to_shared(a_lo_d, [arow + hh * T64, acol], ready.index(slot),
                                            a_lo.index(slot * MB + hh))


@gluon.jit
def _attn_loads(qkv_hi_d, qkv_lo_d, ring, q_buf, ready, empty, q_ready, q_empty, g, na, l, b, h, qb,
                B: gl.constexpr, S: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                BN: gl.constexpr, MB: gl.constexpr):
    """Attention task (layer l, batch b, head h, query block qb): q hi/lo into the q buffer (once the consumer is
    done with the previous attention task's), then the key blocks (``_kv_loads``). Returns g + the key blocks."""
    q_hi, q_lo = q_buf
    qrow = _q_row(l, b, h, B, S, H)
    mbarrier.wait(q_empty, (na & 1) ^ 1)
    mbarrier.expect(q_ready, 2 * T64 * T64 * 2)
    tma.async_copy_global_to_shared(qkv_hi_d, [qrow + qb * T64, 0], q_ready, q_hi)
    tma.async_copy_global_to_shared(qkv_lo_d, [qrow + qb * T64, 0], q_ready, q_lo)
    return _kv_loads(qkv_hi_d, qkv_lo_d, ring, ready, empty, g, qrow, _n_key_blocks(qb, S, CAUSAL), B, S, H, STAGES,
                     BN, MB)


@gluon.jit
def _attn_loads_ring(qkv_hi_d, qkv_lo_d, ring, ready, empty, g, l, b, h, qb,
                     B: gl.constexpr, S: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                     BN: gl.constexpr, MB: gl.constexpr):
    """``_attn_loads`` for the cooperative consumers (no q buffers): q hi/lo into the first A tile of the task's first
    ring slot, then the key blocks in the slots after it. Returns g + 1 + the key blocks."""
    a_hi, a_lo, w_hi, w_lo, a_sc = ring
    qrow = _q_row(l, b, h, B, S, H)
    slot = _claim(ready, empty, g, 2 * T64 * T64 * 2, STAGES)
    tma.async_copy_global_to_shared(qkv_hi_d, [qrow + qb * T64, 0], ready.index(slot), a_hi.index(slot * MB))
    tma.async_copy_global_to_shared(qkv_lo_d, [qrow + qb * T64, 0], ready.index(slot), a_lo.index(slot * MB))
    return _kv_loads(qkv_hi_d, qkv_lo_d, ring, ready, empty, g + 1, qrow, _n_key_blocks(qb, S, CAUSAL), B, S, H,
                     STAGES, BN, MB)


@gluon.jit
def _q_row(l, b, h, B: gl.constexpr, S: gl.constexpr, H: gl.constexpr):
    """The first row of (b, h)'s q in q|k|v [L, 3, B, H, S, 64] viewed as [L*3*B*H*S, 64] (k and v B·H·S further)."""
    return l * (3 * B * H * S) + (b * H + h) * S


@gluon.jit
def _kv_loads(qkv_hi_d, qkv_lo_d, ring, ready, empty, g, qrow, nkv, B: gl.constexpr, S: gl.constexpr,
              H: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr, MB: gl.constexpr):
    """k hi/lo and v hi/lo of key blocks 0 … nkv − 1 of the attention whose q starts at ``qrow``, one ring slot each
    from step g (v in the first 64 × 64 tile of the slot's W part: ``_w_views``; k in the first of the slot's MB A
    tiles). Returns g + nkv."""
    a_hi, a_lo, w_hi, w_lo, a_sc = ring
    VS: gl.constexpr = BN // T64
    w_hi, w_lo = _w_views(w_hi, w_lo, STAGES, BN, T64)
    BHS: gl.constexpr = B * H * S
    krow = qrow + BHS
    vrow = qrow + 2 * BHS
    for j in range(nkv):
        slot = _claim(ready, empty, g + j, 4 * T64 * T64 * 2, STAGES)
        tma.async_copy_global_to_shared(qkv_hi_d, [krow + j * T64, 0], ready.index(slot), a_hi.index(slot * MB))
        tma.async_copy_global_to_shared(qkv_lo_d, [krow + j * T64, 0], ready.index(slot), a_lo.index(slot * MB))
        tma.async_copy_global_to_shared(qkv_hi_d, [vrow + j * T64, 0], ready.index(slot), w_hi.index(slot * VS))
        tma.async_copy_global_to_shared(qkv_lo_d, [vrow + j * T64, 0], ready.index(slot), w_lo.index(slot * VS))
    return g + nkv


@gluon.jit
def _n_key_blocks(qb, S: gl.constexpr, CAUSAL: gl.constexpr):
    """Key blocks of query block qb's attention: up to the query block (causal), else all."""
    if CAUSAL:
        kv_end = gl.minimum((qb + 1) * T64, S)
    else:
        kv_end = qb * 0 + S
    return (kv_end + T64 - 1) // T64


@gluon.jit
def _put_task(tids, tid_full, tid_free, cid, turn, t, kind, l, a, b, c, g, sg, hl: gl.constexpr,
              COOP: gl.constexpr):
    """Hand a task to its consumer (``_put``); the cooperative consumers each get every task."""
    if COOP:
        _put(tids, tid_full, tid_free, 0, turn, t, kind, l, a, b, c, g, sg, hl)
        _put(tids, tid_full, tid_free, 2, turn, t, kind, l, a, b, c, g, sg, hl)
    else:
        _put(tids, tid_full, tid_free, 2 * cid, turn, t, kind, l, a, b, c, g, sg, hl)


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
            GOALS_IN_ROW: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_N_QKV: gl.constexpr,
            RING_N: gl.constexpr, TRACE: gl.constexpr, CONSUMERS: gl.constexpr, PACKED_HANDOFF: gl.constexpr,
            PRE_W: gl.constexpr, BLOCK_M: gl.constexpr, COOP: gl.constexpr = False):
    (ln1_hi_d, ln1_lo_d, att_hi_d, att_lo_d, ln2_hi_d, ln2_lo_d, f_hi_d, f_lo_d,
     wqkv_hi_d, wqkv_lo_d, wo_hi_d, wo_lo_d, w1_hi_d, w1_lo_d, w2_hi_d, w2_lo_d, qkv_hi_d, qkv_lo_d) = descs
    M: gl.constexpr = B * S
    MB: gl.constexpr = BLOCK_M // T64
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    hl: gl.constexpr = _slot_layout(1, PACKED_HANDOFF)
    lane = gl.arange(0, 32, layout=lay)
    nprog = gl.num_programs(0)
    base = (epoch - 1) * (n_tasks + nprog)   # every launch takes n_tasks + grid tickets (one empty per program)
    t = gl.atomic_add(head_ptr, 1, sem="relaxed") - base
    q_hi, q_lo = q_buf
    i = 0       # tasks taken: task i goes to consumer i % CONSUMERS, its turn i // CONSUMERS there
    g = 0       # ring steps issued
    na0 = 0     # attention tasks handed to consumer 0 (1): the phases of its q buffer
    na1 = 0
    while t < n_tasks:
        cid = i % CONSUMERS
        turn = i // CONSUMERS
        if COOP:   # every task to both consumers, at their turn i
            cid = i * 0
            turn = i
        g0 = g
        row = tab_ptr + t * TASK_WIDTH
        kind = gl.load(row)
        l = gl.load(row + 1)
        a = gl.load(row + 2)
        b = gl.load(row + 3)
        c = gl.load(row + 4)
        sg = kind * 0
        if MAX_SIGNALS == 1:   # the one counter it signals, for the signaller (no table load on the release path)
            sg = gl.where(gl.load(row + 6) > 0, gl.load(row + HEADER + MAX_WAITS), -1)
        _stamp(trace_ptr, t, 0, TRACE, lay, 32)
        ln = (kind == 0) | (kind == 4) | (kind == 7)
        k0, steps, wrow = _gemm_geom(kind, l, a, b, c, M, D, K_CHUNK_O, K_CHUNK_FFN2, BLOCK_N, BLOCK_N_QKV,
                                     SCHEME_QKV, SCHEME_FFN1)
        pre = steps * 0
        if kind == 1:
            pre = _gemm_pre(wqkv_hi_d, wqkv_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_QKV, STAGES,
                           BLOCK_N_QKV, RING_N, PRE_W, MB)
        elif kind == 3:
            pre = _gemm_pre(wo_hi_d, wo_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_O, STAGES, BLOCK_N,
                           RING_N, PRE_W, MB)
        elif kind == 5:
            pre = _gemm_pre(w1_hi_d, w1_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_FFN1, STAGES, BLOCK_N,
                           RING_N, PRE_W, MB)
        elif kind == 6:
            pre = _gemm_pre(w2_hi_d, w2_lo_d, ring, ready, empty, g, steps, wrow, SCHEME_FFN2, STAGES, BLOCK_N,
                           RING_N, PRE_W, MB)
        if not ln:  # GEMM / attention: handed over before the wait (the consumer then waits on the ring's data,
            _put_task(tids, tid_full, tid_free, cid, turn, t, kind, l, a, b, c, g0, sg, hl, COOP)   # which comes only
            #                                                                         after the wait)
        _wait_counters(row, HEADER + MAX_WAITS + MAX_SIGNALS, ctr_ptr, goal_ptr, err_ptr, t, epoch, spin_limit,
                       lane, MAX_WAITS, GOALS_IN_ROW)
        _proxy_fence(lay, 32)   # the acquired generic-proxy writes before this warp's TMA (async-proxy) reads
        _stamp(trace_ptr, t, 1, TRACE, lay, 32)
        if ln:      # LayerNorm: handed over after the wait (the consumer reads the producers' data itself)
            _put_task(tids, tid_full, tid_free, cid, turn, t, kind, l, a, b, c, g0, sg, hl, COOP)
        row0 = a * BLOCK_M
        if kind == 1:
            g = _gemm_rest(ln1_hi_d, ln1_lo_d, wqkv_hi_d, wqkv_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_QKV, STAGES, BLOCK_N_QKV, RING_N, MB)
        elif kind == 3:
            g = _gemm_rest(att_hi_d, att_lo_d, wo_hi_d, wo_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_O, STAGES, BLOCK_N, RING_N, MB)
        elif kind == 5:
            g = _gemm_rest(ln2_hi_d, ln2_lo_d, w1_hi_d, w1_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_FFN1, STAGES, BLOCK_N, RING_N, MB)
        elif kind == 6:
            g = _gemm_rest(f_hi_d, f_lo_d, w2_hi_d, w2_lo_d, ring, ready, empty, g, pre, steps, wrow, k0,
                           row0, M, D, SCHEME_FFN2, STAGES, BLOCK_N, RING_N, MB)
        elif kind == 2:
            if COOP:
                g = _attn_loads_ring(qkv_hi_d, qkv_lo_d, ring, ready, empty, g, l, a, b, c, B, S, H, CAUSAL, STAGES,
                                     RING_N, MB)
            else:
                na = na0 + (na1 - na0) * cid
                g = _attn_loads(qkv_hi_d, qkv_lo_d, ring, (q_hi.index(cid), q_lo.index(cid)), ready, empty,
                                q_ready.index(cid), q_empty.index(cid), g, na, l, a, b, c, B, S, H, CAUSAL,
                                STAGES, RING_N, MB)
                na0 += 1 - cid
                na1 += cid
        i += 1
        t = gl.atomic_add(head_ptr, 1, sem="relaxed") - base
    for cc in gl.static_range(CONSUMERS):   # the end: each consumer passes it on to its signaller
        if COOP:
            _put(tids, tid_full, tid_free, 2 * cc, i, -1, 0, 0, 0, 0, 0, 0, 0, hl)
        else:
            _put(tids, tid_full, tid_free, 2 * cc, (i - cc + CONSUMERS - 1) // CONSUMERS, -1, 0, 0, 0, 0, 0, 0, 0,
                 hl)


# ----------------------------------------------------------------------------------------------------------------
# consumer (one warpgroup): the arithmetic of kernels/dag/kernel.py

@gluon.jit
def _split(x, SCHEME: gl.constexpr, PACK_HI: gl.constexpr):
    """fp32 -> (hi, lo): bf16 parts (bf16x3) or fp16 parts (f16_w1), round to nearest each (tl_helpers.split_bf16 /
    split_f16 with GPU=True)."""
    if SCHEME == "f16_w1":
        hi = x.to(gl.float16)
        lo = (x - hi.to(gl.float32)).to(gl.float16)
    else:
        hi = _to_bf16(x, PACK_HI)
        lo = (x - hi.to(gl.float32)).to(gl.bfloat16)
    return hi, lo


@gluon.jit
def _split8(x):
    """fp32 -> f16f8's A parts: hi fp16 (round to nearest), fp8 e4m3 of the rest times 2^11 and fp8 of hi (round to
    nearest, saturating: ``bench/seqres/precision_probe`` f16f8)."""
    hi = x.to(gl.float16)
    lo8 = ((x - hi.to(gl.float32)) * F8_A_SCALE).to(gl.float8e4nv)
    return hi, lo8, hi.to(gl.float8e4nv)


@gluon.jit
def _off8(offs):
    """f16f8: where A's element at ``offs`` (row R, column c of a [.., D] buffer: R * D + c) has its fp8 lo part in the
    [.., 2D] lo buffer — per 64 columns 64 lo parts, then their 64 hi parts: R * 2D + (c // 64) * 128 + c % 64 =
    2 offs − c % 64 (D a multiple of 64); the hi part 64 further. ``offs`` is a [rows, cols] tile whose threads hold
    8 consecutive columns from a multiple of 8 (the stores' layouts): stated, so each thread's 8 fp8 parts go out as
    one 8-byte store (the axis analysis does not see through the modulo)."""
    o8 = 2 * offs - (offs % T64)
    return gl.max_contiguous(gl.multiple_of(o8, [1, 8]), [1, 8])


@gluon.jit
def _store8(hi_ptr, lo_ptr, offs, mask, hi, lo8, hi8):
    """f16f8's A parts of the elements at ``offs``: hi into the [.., D] hi buffer, the fp8 pair into the [.., 2D] lo
    buffer (``_off8``)."""
    gl.store(hi_ptr + offs, hi, mask=mask)
    o8 = _off8(offs)
    gl.store(lo_ptr + o8, lo8, mask=mask)
    gl.store(lo_ptr + o8 + T64, hi8, mask=mask)


@gluon.jit
def _store_split(hi_ptr, lo_ptr, offs, mask, x, SCHEME: gl.constexpr, out: gl.constexpr,
                 PACK_HI: gl.constexpr):
    """Store fp32 ``x`` split (``_split``), through the coalesced layout ``out`` (16-byte stores). f16f8: hi, then
    the fp8 pair into the [..., 2D] lo buffer (``_off8``)."""
    if SCHEME == "f16f8":
        hi, lo8, hi8 = _split8(x)
        gl.store(hi_ptr + offs, gl.convert_layout(hi, out), mask=mask)   # (each part converted as it is stored:
        o8 = _off8(offs)                                                 # fewer registers live than ``_store8``)
        gl.store(lo_ptr + o8, gl.convert_layout(lo8, out), mask=mask)
        gl.store(lo_ptr + o8 + T64, gl.convert_layout(hi8, out), mask=mask)
    else:
        hi, lo = _split(x, SCHEME, PACK_HI)
        hi = gl.convert_layout(hi, out)
        lo = gl.convert_layout(lo, out)
        gl.store(hi_ptr + offs, hi, mask=mask)
        gl.store(lo_ptr + offs, lo, mask=mask)


@gluon.jit
def _store_rows(hi_ptr, lo_ptr, offs, mask, y, SCHEME: gl.constexpr, PACK_HI: gl.constexpr):
    """A LayerNorm task's rows stored split for their GEMM's scheme, in their own layout."""
    if SCHEME == "f16f8":
        hi, lo8, hi8 = _split8(y)
        _store8(hi_ptr, lo_ptr, offs, mask, hi, lo8, hi8)
    else:
        hi, lo = _split(y, SCHEME, PACK_HI)
        gl.store(hi_ptr + offs, hi, mask=mask)
        gl.store(lo_ptr + offs, lo, mask=mask)


@gluon.jit
def _store_i8(hi_ptr, lo_ptr, y, rows, cols, mask, M: gl.constexpr, D: gl.constexpr):
    """A LayerNorm task's rows ``y`` [rows, BD] (fp32; ``cols`` its column indices, D a multiple of 128) as ``I8``'s
    A (``bench/seqres/precision_probe`` i8x2cb128): per row and 128-column block the scale s = max |y| / I8_Q (1 /
    I8_Q for a block of zeros) into the [D / 128, M] scales at ``lo_ptr`` (block-major: a GEMM's step loads 64 rows'
    scales of one block as one box), q = rint(y / s) (|q| <= I8_Q) as two int8 limbs q = 128 · l0 + l1 (l0 =
    floor(q / 128 + 1/2) in [-127, 127], l1 in [-64, 63]) into the [M, 2D] limbs at ``hi_ptr``, per 128 columns the
    block's l0 then its l1."""
    blk = cols // I8_K
    ay = gl.abs(y)
    inv = gl.zeros_like(y)
    for kb in gl.static_range(D // I8_K):
        mx = gl.max(gl.where((blk == kb)[None, :], ay, 0.0), axis=1)
        mx = gl.where(mx > 0.0, mx, 1.0)
        gl.store(lo_ptr + kb * M + rows, mx / I8_Q, mask=rows < M)
        inv = gl.where((blk == kb)[None, :], (I8_Q / mx)[:, None], inv)
    q = gl.inline_asm_elementwise(_CVT_RNI, "=r,f", [y * inv], dtype=gl.int32, is_pure=True, pack=1)
    q = gl.minimum(gl.maximum(q, -I8_Q), I8_Q)
    l0 = (q + 64) >> 7
    l1 = q - l0 * 128
    offs = rows[:, None] * (2 * D) + (cols + blk * I8_K)[None, :]
    gl.store(hi_ptr + offs, l0.to(gl.int8), mask=mask)
    gl.store(hi_ptr + offs + I8_K, l1.to(gl.int8), mask=mask)


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
def _gemm_step_at(a_hi, a_lo, w_hi, w_lo, ai, wi, acc, FIRST: gl.constexpr, SCHEME: gl.constexpr):
    """One K step's products of the scheme on A tile ``ai`` and W tile ``wi`` of the ring's views (``_ring_views``),
    issued asynchronously on ``acc`` in kernel.py's order (bf16x3: a_lo·w_hi, a_hi·w_lo, a_hi·w_hi; f16_w1: a_lo·w,
    a_hi·w); FIRST: the first product ignores ``acc`` (use_acc=False)."""
    acc = warpgroup_mma(a_lo.index(ai), w_hi.index(wi), acc, use_acc=not FIRST, is_async=True)
    if SCHEME == "bf16x3":
        acc = warpgroup_mma(a_hi.index(ai), w_lo.index(wi), acc, is_async=True)
    return warpgroup_mma(a_hi.index(ai), w_hi.index(wi), acc, is_async=True)


@gluon.jit
def _gemm_step8(a_hi, a8, w_hi, w8, ai, wi, acc, acc8, FIRST: gl.constexpr):
    """One K step of f16f8 on A tile ``ai`` and W tile ``wi`` of the ring's views: a_hi·w_hi on fp16 operands into
    ``acc``, then both correction terms as ONE fp8 e4m3 product of depth 128 into ``acc8``: [a_lo8 | a_hi8] ·
    [w_hi8 ; w_lo8] (the weight tile K-major: a transposed view), whose scale the K loop's end undoes
    (``_gemm_mma8``). fp8 wgmma runs at twice the fp16 rate: 2 products' time against bf16x3's 3."""
    acc = warpgroup_mma(a_hi.index(ai), w_hi.index(wi), acc, use_acc=not FIRST, is_async=True)
    acc8 = warpgroup_mma(a8.index(ai), w8.index(wi).permute((1, 0)), acc8, use_acc=not FIRST, is_async=True)
    return acc, acc8


@gluon.jit
def _gemm_mma8(ring, ready, empty, g, steps, inv, STAGES: gl.constexpr, BN: gl.constexpr, RN: gl.constexpr,
               mma: gl.constexpr, AM: gl.constexpr = 1, AH: gl.constexpr = 0):
    """``_gemm_mma`` for f16f8: two fp32 accumulators, the fp16 products' and the fp8 correction products' (at
    2^11 · s of their value), two wgmma groups a K step, the previous step's slot freed as there; returns
    (acc + acc8 · inv, g) with ``inv`` = 1 / (2^11 s) of the layer's weight (``host._weight_parts``). The fp8 products
    accumulate apart: the tensor core adds an fp8 product into its accumulator at reduced precision (into the fp16
    products' one, 50-100 times bf16x3's error, where apart they match it: ``bench.dag.mma_accum``, docs/dag-results.md
    "Results" 43), and what they add is ~2^-11 of the result. (An fp16 correction accumulator is as precise by the
    probe, but Triton unpacks it after each wgmma and ptxas then serializes every wgmma of the kernel.) A tile
    ``slot * AM + AH`` (the cooperative consumers' 64-row half AH of a 128-row tile: AM 2)."""
    a_hi, a8, w_hi, w8 = _ring_views(ring, "f16f8", STAGES, RN, BN)
    R: gl.constexpr = RN // BN
    mma8: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=mma.warps_per_cta,
                                                   instr_shape=[16, BN, 32])   # fp8 wgmma: k = 32
    acc = gl.zeros([T64, BN], gl.float32, layout=mma)
    acc8 = gl.zeros([T64, BN], gl.float32, layout=mma8)
    slot = g % STAGES
    mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
    acc, acc8 = _gemm_step8(a_hi, a8, w_hi, w8, slot * AM + AH, slot * R, acc, acc8, True)
    acc, acc8 = warpgroup_mma_wait(2, deps=(acc, acc8))
    g += 1
    for kk in range(1, steps):
        slot = g % STAGES
        mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
        acc, acc8 = _gemm_step8(a_hi, a8, w_hi, w8, slot * AM + AH, slot * R, acc, acc8, False)
        acc, acc8 = warpgroup_mma_wait(2, deps=(acc, acc8))
        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
        g += 1
    acc, acc8 = warpgroup_mma_wait(0, deps=(acc, acc8))
    mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
    return acc + gl.convert_layout(acc8.to(gl.float32) * inv, mma), g


@gluon.jit
def _gemm_mma_i8(ring, ready, empty, g, steps, sw_ptr, NW, STAGES: gl.constexpr, BN: gl.constexpr, RN: gl.constexpr,
                 mma: gl.constexpr):
    """``_gemm_mma`` for ``I8`` (``bench/seqres/precision_probe`` i8x2cb128; docs/dag-results.md "Results" 52-54):
    per 128-deep K step (one scale block) three int8 products of the limbs, l0·w0 into ``hh`` and l0·w1 + l1·w0 into
    ``mix`` (int32, exact; l1·w1 left out), waited for, then folded into the fp32 accumulator as (hh · 2^14 + mix ·
    2^7) · s_a · s_w with the step's row scales s_a (the slot's scale row, by TMA with A) and column scales s_w
    (``sw_ptr`` + step · ``NW``: the weight's [K / 128, N] scales from its tile's first column, constant, loaded
    before the step's wait); the slot is freed once its products and scales are read. The fold waits for the step's
    last product, so a step's products do not overlap the next's (a K loop at 0.64-0.84 × bf16x3's time a unit of
    K on an H100, bench.dag.kloop_rate ``i8x2cb_n64_k128``). A 128-wide tile goes as two 64-column halves a step,
    each its products then its fold into an accumulator of its own: the fp32 accumulator and both integer ones 128
    wide at once spilled (ptxas: 128 bytes). Returns (acc in ``mma``, g)."""
    a0, a1, w0, w1 = _ring_views(ring, I8, STAGES, RN, BN)
    sc = ring[4]._reinterpret(gl.float32, [STAGES, T64], gl.SwizzledSharedLayout(1, 1, 1, [0]))   # (a row a slot)
    R: gl.constexpr = RN // BN
    NH: gl.constexpr = BN // T64   # 64-column halves (1 or 2)
    mma8: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=mma.warps_per_cta,
                                                   instr_shape=[16, T64, 32])   # int8 wgmma: k = 32
    cols = gl.arange(0, T64, layout=gl.SliceLayout(0, mma8))
    acc0 = gl.zeros([T64, T64], gl.float32, layout=mma8)
    acc1 = gl.zeros([T64, T64], gl.float32, layout=mma8)
    hh = gl.zeros([T64, T64], gl.int32, layout=mma8)
    mix = gl.zeros([T64, T64], gl.int32, layout=mma8)
    for kk in range(steps):
        slot = g % STAGES
        sw0 = gl.load(sw_ptr + kk * NW + cols)
        mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
        sa = sc.index(slot).load(gl.SliceLayout(1, mma8))
        acc0, hh, mix = _i8_step(a0.index(slot), a1.index(slot), w0.index(slot * R), w1.index(slot * R), 0, acc0,
                                 hh, mix, sa, sw0)
        if NH == 2:
            sw1 = gl.load(sw_ptr + kk * NW + T64 + cols)
            acc1, hh, mix = _i8_step(a0.index(slot), a1.index(slot), w0.index(slot * R), w1.index(slot * R), 1,
                                     acc1, hh, mix, sa, sw1)
        mbarrier.arrive(empty.index(slot))
        g += 1
    acc = acc0
    if NH == 2:   # the halves side by side: column h · 64 + c
        acc = gl.reshape(gl.permute(gl.join(acc0, acc1), (0, 2, 1)), [T64, BN])
    return gl.convert_layout(acc, mma), g


@gluon.jit
def _i8_step(a0, a1, w0, w1, h: gl.constexpr, acc, hh, mix, sa, sw):
    """One 128-deep ``I8`` step on the 64 columns h · 64 … of the K-major weight tiles ``w0``, ``w1`` ([BN, 128]):
    the three products (``hh``, ``mix``: use_acc false, their old values unread), waited for, and their fold into
    ``acc`` with the rows' scales ``sa`` and these columns' ``sw``. Returns (acc, hh, mix)."""
    w0t = w0.slice(h * T64, T64).permute((1, 0))
    w1t = w1.slice(h * T64, T64).permute((1, 0))
    hh = warpgroup_mma(a0, w0t, hh, use_acc=False, is_async=True)
    mix = warpgroup_mma(a0, w1t, mix, use_acc=False, is_async=True)
    mix = warpgroup_mma(a1, w0t, mix, is_async=True)
    hh, mix = warpgroup_mma_wait(0, deps=(hh, mix))
    part = hh.to(gl.float32) * 16384.0 + mix.to(gl.float32) * 128.0
    return acc + part * sa[:, None] * sw[None, :], hh, mix


@gluon.jit
def _gemm_mma(ring, ready, empty, g, steps, SCHEME: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr,
              RN: gl.constexpr, mma: gl.constexpr, AM: gl.constexpr = 1, AH: gl.constexpr = 0):
    """acc [64, BN] fp32 of one GEMM task over its ``steps`` (>= 1) ring slots from global step g: per K step the
    scheme's products (``_gemm_step_at``), then a wait for the previous step's products, whose slot is freed.
    Returns (acc, g).

    The first K step is peeled (its first product with a constexpr use_acc=False) rather than the loop running from
    a ``gl.zeros`` accumulator with ``use_acc=kk != 0``: with both schemes' loops in one function LLVM merges their
    exits into one ``wgmma.wait_group 0`` block, which the zero-trip edges also reach with the accumulator defined by
    the zeros' ``mov`` — and ptxas then serializes every wgmma of the kernel (C7515). The products, their order and
    their accumulator are the same (kk = 0 ignored the zeros). A tile ``slot * AM + AH`` (``_gemm_mma8``)."""
    a_hi, a_lo, w_hi, w_lo = _ring_views(ring, SCHEME, STAGES, RN, BN)
    R: gl.constexpr = RN // BN
    NP: gl.constexpr = 3 if SCHEME == "bf16x3" else 2   # products (wgmma groups) per K step
    acc = gl.zeros([T64, BN], gl.float32, layout=mma)
    slot = g % STAGES
    mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
    acc = _gemm_step_at(a_hi, a_lo, w_hi, w_lo, slot * AM + AH, slot * R, acc, True, SCHEME)
    acc = warpgroup_mma_wait(NP, deps=(acc, ))   # (nothing earlier in flight: the loop-carried type is a tensor)
    g += 1
    for kk in range(1, steps):
        slot = g % STAGES
        mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
        acc = _gemm_step_at(a_hi, a_lo, w_hi, w_lo, slot * AM + AH, slot * R, acc, False, SCHEME)
        acc = warpgroup_mma_wait(NP, deps=(acc, ))
        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
        g += 1
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
    return acc, g


@gluon.jit
def _gemm_mma2(ring, ready, empty, g, steps, SCHEME: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr,
               RN: gl.constexpr, mma: gl.constexpr):
    """``_gemm_mma`` for a 128-row tile (block_m 128): a slot's A tiles 2 · slot (rows 0–63) and 2 · slot + 1 (rows
    64–127) on two [64, BN] accumulators, each K step both halves' products against the slot's one W tile (read
    from L2 once for both), then the wait for the previous step's. Returns (acc0, acc1, g)."""
    a_hi, a_lo, w_hi, w_lo = _ring_views(ring, SCHEME, STAGES, RN, BN)
    R: gl.constexpr = RN // BN
    NP: gl.constexpr = 3 if SCHEME == "bf16x3" else 2
    acc0 = gl.zeros([T64, BN], gl.float32, layout=mma)
    acc1 = gl.zeros([T64, BN], gl.float32, layout=mma)
    slot = g % STAGES
    mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
    acc0 = _gemm_step_at(a_hi, a_lo, w_hi, w_lo, 2 * slot, slot * R, acc0, True, SCHEME)
    acc1 = _gemm_step_at(a_hi, a_lo, w_hi, w_lo, 2 * slot + 1, slot * R, acc1, True, SCHEME)
    acc0, acc1 = warpgroup_mma_wait(2 * NP, deps=(acc0, acc1))
    g += 1
    for kk in range(1, steps):
        slot = g % STAGES
        mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
        acc0 = _gemm_step_at(a_hi, a_lo, w_hi, w_lo, 2 * slot, slot * R, acc0, False, SCHEME)
        acc1 = _gemm_step_at(a_hi, a_lo, w_hi, w_lo, 2 * slot + 1, slot * R, acc1, False, SCHEME)
        acc0, acc1 = warpgroup_mma_wait(2 * NP, deps=(acc0, acc1))
        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
        g += 1
    acc0, acc1 = warpgroup_mma_wait(0, deps=(acc0, acc1))
    mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES))
    return acc0, acc1, g


@gluon.jit
def _qkv_epilogue(acc, bias, l, row0, col0, q_hi_ptr, q_lo_ptr, B: gl.constexpr, S: gl.constexpr,
                  D: gl.constexpr, H: gl.constexpr, BN: gl.constexpr, mma: gl.constexpr, out: gl.constexpr,
                  PACK_HI: gl.constexpr):
    """kernel.py ``_qkv_epilogue``: + bias, split bf16, stored head-major ([L, 3, B, H, S, 64]); per column its part
    and head (a 128-wide tile spans two heads, or the end of one part and the start of the next)."""
    M: gl.constexpr = B * S
    N: gl.constexpr = 3 * D
    DH: gl.constexpr = T64
    acc = acc + bias[None, :]
    rows = row0 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))
    cols = col0 + gl.arange(0, BN, layout=gl.SliceLayout(0, out))
    part = cols // D
    hd = (cols - part * D) // DH
    col_off = part * (M * D) + hd * (S * DH) + (cols - part * D - hd * DH)
    bb = rows // S
    row_off = bb * (H * S * DH) + (rows - bb * S) * DH
    offs = l * (3 * M * D) + row_off[:, None] + col_off[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    _store_split(q_hi_ptr, q_lo_ptr, offs, mask, acc, "bf16x3", out, PACK_HI)


@gluon.jit
def _ffn1_epilogue(acc, bias, l, row0, col0, f_hi_ptr, f_lo_ptr, M: gl.constexpr, D: gl.constexpr,
                   SCHEME_FFN2: gl.constexpr, GELU: gl.constexpr, BN: gl.constexpr, mma: gl.constexpr,
                   out: gl.constexpr, PACK_HI: gl.constexpr):
    """kernel.py ``_ffn1_epilogue``: + bias, GELU, split (FFN2's scheme), stored into [4, M, D] (column c in block
    c // D)."""
    F: gl.constexpr = 4 * D
    acc = acc + bias[None, :]
    if GELU == "log2poly":
        acc = _gelu_log2poly(acc)
    else:
        acc = 0.5 * acc * (1.0 + gl.erf(acc * 0.7071067811865476))
    rows = row0 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))
    cols = col0 + gl.arange(0, BN, layout=gl.SliceLayout(0, out))
    offs = rows[:, None] * D + ((cols // D) * (M * D) + cols % D)[None, :]
    mask = (rows < M)[:, None] & (cols < F)[None, :]
    _store_split(f_hi_ptr, f_lo_ptr, offs, mask, acc, SCHEME_FFN2, out, PACK_HI)


@gluon.jit
def _residual_epilogue(acc, bias, s, row0, col0, r_ptr, M: gl.constexpr, D: gl.constexpr, BN: gl.constexpr,
                       acc_out: gl.constexpr):
    """kernel.py ``_residual_epilogue``: r[tile] += acc (+ bias on K split 0), relaxed gpu-scope fp32 atomics."""
    acc = acc + gl.where(s == 0, bias, 0.0)[None, :]   # (in the wgmma layout: the same fp32 sums)
    acc = gl.convert_layout(acc, acc_out)
    rows = row0 + gl.arange(0, T64, layout=gl.SliceLayout(1, acc_out))
    cols = col0 + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_out))
    gl.atomic_add(r_ptr + rows[:, None] * D + cols[None, :], acc, mask=(rows < M)[:, None] & (cols < D)[None, :],
                  sem="relaxed", scope="gpu")


@gluon.jit
def _gemm_task(ring, ready, empty, g, kind, l, m, n, s, ptrs,
               B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr,
               K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
               SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
               GELU: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr, BN_Q: gl.constexpr, RN: gl.constexpr,
               mma: gl.constexpr, mma_q: gl.constexpr, out: gl.constexpr, acc_out: gl.constexpr,
               trace_ptr, t, TRACE: gl.constexpr, lay: gl.constexpr, NT: gl.constexpr, PACK_HI: gl.constexpr,
               MB: gl.constexpr, HALF: gl.constexpr = -1):
    """A GEMM task: a 64 × BN tile (QKV: 64 × BN_Q; RN the ring's width, the larger). One width: ``_gemm_body`` on
    every kind. QKV narrower or wider than the others: its own body (its scheme, BN_Q, its accumulator layout
    ``mma_q``) and one for the other three kinds (the schemes they use, BN). ``ptrs``: the residual, QKV and FFN1
    outputs and the four biases (``_gemm_body``)."""
    if BN_Q == BN:
        g = _gemm_body(ring, ready, empty, g, kind, l, m, n, s, ptrs, B, S, D, H, K_CHUNK_O, K_CHUNK_FFN2,
                       SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, GELU, STAGES, BN, RN, "all", mma, out, acc_out,
                       trace_ptr, t, TRACE, lay, NT, PACK_HI, MB, HALF)
    elif kind == 1:
        g = _gemm_body(ring, ready, empty, g, kind, l, m, n, s, ptrs, B, S, D, H, K_CHUNK_O, K_CHUNK_FFN2,
                       SCHEME_QKV, SCHEME_QKV, SCHEME_QKV, SCHEME_QKV, GELU, STAGES, BN_Q, RN, "qkv", mma_q, out,
                       acc_out, trace_ptr, t, TRACE, lay, NT, PACK_HI, MB, HALF)
    else:
        g = _gemm_body(ring, ready, empty, g, kind, l, m, n, s, ptrs, B, S, D, H, K_CHUNK_O, K_CHUNK_FFN2,
                       SCHEME_O, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, GELU, STAGES, BN, RN, "rest", mma, out, acc_out,
                       trace_ptr, t, TRACE, lay, NT, PACK_HI, MB, HALF)
    return g


@gluon.jit
def _gemm_body(ring, ready, empty, g, kind, l, m, n, s, ptrs,
               B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr,
               K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
               SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
               GELU: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr, RN: gl.constexpr, EPI: gl.constexpr,
               mma: gl.constexpr, out: gl.constexpr, acc_out: gl.constexpr,
               trace_ptr, t, TRACE: gl.constexpr, lay: gl.constexpr, NT: gl.constexpr, PACK_HI: gl.constexpr,
               MB: gl.constexpr, HALF: gl.constexpr = -1):
    """A GEMM task's (64 · MB) × BN tile: the K loop of its scheme (one body per scheme in use), then its kind's
    epilogue (EPI: "all" any kind's, "qkv" QKV's only, "rest" FFN1's or the residual's). ``mma``: the [64, BN]
    accumulator's wgmma layout; RN the ring's width. The epilogues store through the blocked layouts ``out``
    (16-byte split stores) and ``acc_out`` (4-wide atomics): stored straight from ``mma`` (4-byte stores, 2-wide
    atomics, no conversion through shared memory) the forward pass took 9–12% longer (docs/dag-results.md "Results" 32).
    HALF >= 0: the cooperative consumers' form (``dag_ws_fwd``), this consumer's 64-row half HALF of a 128-row tile
    (MB = 2): its A tiles, one accumulator, its rows' epilogue."""
    (r_ptr, qkv_hi_ptr, qkv_lo_ptr, f_hi_ptr, f_lo_ptr, bqkv_ptr, bo_ptr, b1_ptr, b2_ptr, f8s_ptr, wqkv_s_ptr,
     w1_s_ptr) = ptrs
    M: gl.constexpr = B * S
    ANY_F16: gl.constexpr = ((SCHEME_QKV == "f16_w1") or (SCHEME_O == "f16_w1") or (SCHEME_FFN1 == "f16_w1")
                             or (SCHEME_FFN2 == "f16_w1"))
    ANY_BF: gl.constexpr = ((SCHEME_QKV == "bf16x3") or (SCHEME_O == "bf16x3") or (SCHEME_FFN1 == "bf16x3")
                            or (SCHEME_FFN2 == "bf16x3"))
    k0, steps, wrow = _gemm_geom(kind, l, m, n, s, M, D, K_CHUNK_O, K_CHUNK_FFN2, BN, BN, SCHEME_QKV, SCHEME_FFN1)
    # the epilogue's bias, loaded before the K loop (its latency under the MMA instead of after it)
    NB = gl.where(kind == 1, 3 * D, gl.where(kind == 5, 4 * D, D))
    b_ptr = b2_ptr
    if kind == 1:
        b_ptr = bqkv_ptr
    elif kind == 5:
        b_ptr = b1_ptr
    elif kind == 3:
        b_ptr = bo_ptr
    cn = n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    bias = gl.load(b_ptr + l * NB + cn, mask=cn < NB, other=0.0)
    f16 = (((kind == 1) & (SCHEME_QKV == "f16_w1")) | ((kind == 3) & (SCHEME_O == "f16_w1"))
           | ((kind == 5) & (SCHEME_FFN1 == "f16_w1")) | ((kind == 6) & (SCHEME_FFN2 == "f16_w1")))
    ANY_F8: gl.constexpr = ((SCHEME_QKV == "f16f8") or (SCHEME_O == "f16f8") or (SCHEME_FFN1 == "f16f8")
                            or (SCHEME_FFN2 == "f16f8"))
    row0 = m * (MB * T64)
    col0 = n * BN
    # the K loop of the task's scheme, one body per scheme in use (a 128-row tile, MB = 2: two accumulators on one W
    # tile a step, acc1 the rows 64-127)
    inv = 1.0
    if ANY_F8:   # f16f8: the layer's 1 / (2^11 s) of this GEMM's weight ([L, 4]: QKV, O, FFN1, FFN2)
        inv = gl.load(f8s_ptr + l * 4 + gl.where(kind == 1, 0, gl.where(kind == 3, 1, gl.where(kind == 5, 2, 3))))
    f8 = (((kind == 1) & (SCHEME_QKV == "f16f8")) | ((kind == 3) & (SCHEME_O == "f16f8"))
          | ((kind == 5) & (SCHEME_FFN1 == "f16f8")) | ((kind == 6) & (SCHEME_FFN2 == "f16f8")))
    ANY_I8: gl.constexpr = (SCHEME_QKV == I8) or (SCHEME_FFN1 == I8)
    ONLY_I8: gl.constexpr = ANY_I8 and not (ANY_F8 or ANY_F16 or ANY_BF)
    i8 = ((kind == 1) & (SCHEME_QKV == I8)) | ((kind == 5) & (SCHEME_FFN1 == I8))
    sw_ptr = w1_s_ptr
    NW = gl.where(kind == 1, 3 * D, 4 * D)
    if ANY_I8:   # I8: the weight's [L, D / 128, N] column scales, this layer's from the tile's first column
        if kind == 1:
            sw_ptr = wqkv_s_ptr
        sw_ptr = sw_ptr + l * (D // I8_K) * NW + col0
    if MB == 2 and HALF < 0:   # one consumer on a 128-row tile (no f16f8: its four accumulators need the
        #                        cooperative form)
        acc, acc1, g = _mma_nf8_2(ring, ready, empty, g, steps, f16, ANY_F16, ANY_BF, STAGES, BN, RN, mma)
    else:   # a 64-row tile, or the cooperative consumers' half HALF of a 128-row one (A tiles slot * MB + HALF)
        AM: gl.constexpr = MB if HALF >= 0 else 1
        AH: gl.constexpr = HALF if HALF >= 0 else 0
        if ONLY_I8:
            acc, g = _gemm_mma_i8(ring, ready, empty, g, steps, sw_ptr, NW, STAGES, BN, RN, mma)
        elif ANY_I8:
            if i8:
                acc, g = _gemm_mma_i8(ring, ready, empty, g, steps, sw_ptr, NW, STAGES, BN, RN, mma)
            else:
                acc, g = _mma_64(ring, ready, empty, g, steps, inv, f8, f16, ANY_F8, ANY_F16, ANY_BF, STAGES, BN,
                                 RN, mma, AM, AH)
        else:
            acc, g = _mma_64(ring, ready, empty, g, steps, inv, f8, f16, ANY_F8, ANY_F16, ANY_BF, STAGES, BN, RN,
                             mma, AM, AH)
        row0 = row0 + AH * T64
    _stamp(trace_ptr, t, 6, TRACE, lay, NT)   # the K loop done: the epilogue starts
    _gemm_epilogue(acc, bias, kind, l, s, row0, col0, ptrs, B, S, D, H, SCHEME_FFN2, GELU, BN, EPI, mma, out,
                   acc_out, PACK_HI)
    if MB == 2 and HALF < 0:   # the epilogue once a 64-row half
        _gemm_epilogue(acc1, bias, kind, l, s, row0 + T64, col0, ptrs, B, S, D, H, SCHEME_FFN2, GELU, BN, EPI, mma,
                       out, acc_out, PACK_HI)
    return g


@gluon.jit
def _mma_64(ring, ready, empty, g, steps, inv, f8, f16, ANY_F8: gl.constexpr, ANY_F16: gl.constexpr,
            ANY_BF: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr, RN: gl.constexpr, mma: gl.constexpr,
            AM: gl.constexpr, AH: gl.constexpr):
    """The K loop of a task on 64-deep steps (f16f8, bf16x3 or f16_w1: ``f8`` / ``f16`` say this task's), one body
    for each scheme in use. Returns (acc, g)."""
    if ANY_F8 and (ANY_F16 or ANY_BF):
        if f8:
            acc, g = _gemm_mma8(ring, ready, empty, g, steps, inv, STAGES, BN, RN, mma, AM, AH)
        else:
            acc, g = _mma_nf8(ring, ready, empty, g, steps, f16, ANY_F16, ANY_BF, STAGES, BN, RN, mma, AM, AH)
    elif ANY_F8:
        acc, g = _gemm_mma8(ring, ready, empty, g, steps, inv, STAGES, BN, RN, mma, AM, AH)
    else:
        acc, g = _mma_nf8(ring, ready, empty, g, steps, f16, ANY_F16, ANY_BF, STAGES, BN, RN, mma, AM, AH)
    return acc, g


@gluon.jit
def _mma_nf8(ring, ready, empty, g, steps, f16, ANY_F16: gl.constexpr, ANY_BF: gl.constexpr, STAGES: gl.constexpr,
             BN: gl.constexpr, RN: gl.constexpr, mma: gl.constexpr, AM: gl.constexpr = 1, AH: gl.constexpr = 0):
    """The K loop (``_gemm_mma``) of a bf16x3 or f16_w1 task (``f16``: this task's is f16_w1), a body for each in use.
    Returns (acc, g)."""
    if ANY_F16 and ANY_BF:
        if f16:
            acc, g = _gemm_mma(ring, ready, empty, g, steps, "f16_w1", STAGES, BN, RN, mma, AM, AH)
        else:
            acc, g = _gemm_mma(ring, ready, empty, g, steps, "bf16x3", STAGES, BN, RN, mma, AM, AH)
    elif ANY_F16:
        acc, g = _gemm_mma(ring, ready, empty, g, steps, "f16_w1", STAGES, BN, RN, mma, AM, AH)
    else:
        acc, g = _gemm_mma(ring, ready, empty, g, steps, "bf16x3", STAGES, BN, RN, mma, AM, AH)
    return acc, g


@gluon.jit
def _mma_nf8_2(ring, ready, empty, g, steps, f16, ANY_F16: gl.constexpr, ANY_BF: gl.constexpr, STAGES: gl.constexpr,
               BN: gl.constexpr, RN: gl.constexpr, mma: gl.constexpr):
    """``_mma_nf8`` for a 128-row tile (``_gemm_mma2``). Returns (acc0, acc1, g)."""
    if ANY_F16 and ANY_BF:
        if f16:
            acc, acc1, g = _gemm_mma2(ring, ready, empty, g, steps, "f16_w1", STAGES, BN, RN, mma)
        else:
            acc, acc1, g = _gemm_mma2(ring, ready, empty, g, steps, "bf16x3", STAGES, BN, RN, mma)
    elif ANY_F16:
        acc, acc1, g = _gemm_mma2(ring, ready, empty, g, steps, "f16_w1", STAGES, BN, RN, mma)
    else:
        acc, acc1, g = _gemm_mma2(ring, ready, empty, g, steps, "bf16x3", STAGES, BN, RN, mma)
    return acc, acc1, g


@gluon.jit
def _gemm_epilogue(acc, bias, kind, l, s, row0, col0, ptrs, B: gl.constexpr, S: gl.constexpr, D: gl.constexpr,
                   H: gl.constexpr, SCHEME_FFN2: gl.constexpr, GELU: gl.constexpr, BN: gl.constexpr,
                   EPI: gl.constexpr, mma: gl.constexpr, out: gl.constexpr, acc_out: gl.constexpr,
                   PACK_HI: gl.constexpr):
    """The epilogue of a GEMM task's 64 × BN accumulator at rows row0 … (``_gemm_body``'s EPI)."""
    (r_ptr, qkv_hi_ptr, qkv_lo_ptr, f_hi_ptr, f_lo_ptr, bqkv_ptr, bo_ptr, b1_ptr, b2_ptr, f8s_ptr, wqkv_s_ptr,
     w1_s_ptr) = ptrs
    M: gl.constexpr = B * S
    if EPI == "qkv":
        _qkv_epilogue(acc, bias, l, row0, col0, qkv_hi_ptr, qkv_lo_ptr, B, S, D, H, BN, mma, out, PACK_HI)
    elif EPI == "rest":
        _ffn1_or_residual_epilogue(acc, bias, kind, l, s, row0, col0, ptrs, M, D, SCHEME_FFN2, GELU, BN, mma, out,
                                   acc_out, PACK_HI)
    elif kind == 1:
        _qkv_epilogue(acc, bias, l, row0, col0, qkv_hi_ptr, qkv_lo_ptr, B, S, D, H, BN, mma, out, PACK_HI)
    else:
        _ffn1_or_residual_epilogue(acc, bias, kind, l, s, row0, col0, ptrs, M, D, SCHEME_FFN2, GELU, BN, mma, out,
                                   acc_out, PACK_HI)


@gluon.jit
def _ffn1_or_residual_epilogue(acc, bias, kind, l, s, row0, col0, ptrs, M: gl.constexpr, D: gl.constexpr,
                               SCHEME_FFN2: gl.constexpr, GELU: gl.constexpr, BN: gl.constexpr, mma: gl.constexpr,
                               out: gl.constexpr, acc_out: gl.constexpr, PACK_HI: gl.constexpr):
    """FFN1's epilogue (kind 5) or the residual one (output projection, FFN2)."""
    (r_ptr, qkv_hi_ptr, qkv_lo_ptr, f_hi_ptr, f_lo_ptr, bqkv_ptr, bo_ptr, b1_ptr, b2_ptr, f8s_ptr, wqkv_s_ptr,
     w1_s_ptr) = ptrs
    if kind == 5:
        _ffn1_epilogue(acc, bias, l, row0, col0, f_hi_ptr, f_lo_ptr, M, D, SCHEME_FFN2, GELU, BN, mma, out,
                       PACK_HI)
    else:
        _residual_epilogue(acc, bias, s, row0, col0, r_ptr, M, D, BN, acc_out)


@gluon.jit
def _attn_rest(qh, ql, ring, ready, empty, q_empty, g, nkv, b, h, qb, att_hi_ptr, att_lo_ptr, qk_scale,
               S: gl.constexpr, D: gl.constexpr, CAUSAL: gl.constexpr, SCHEME_O: gl.constexpr, STAGES: gl.constexpr,
               BN: gl.constexpr, mma: gl.constexpr, out: gl.constexpr, PACK_HI: gl.constexpr, MB: gl.constexpr,
               REG_Q: gl.constexpr, RELEASE: gl.constexpr):
    """An attention task once its q is at hand (``qh`` / ``ql``: shared memory, or registers with REG_Q): the online
    softmax over the key blocks at ring steps g … g + nkv − 1 (``_overlap_blocks``, each slot's release counting
    RELEASE), then o = acc / l stored split (the output projection's scheme) into att [M, D]."""
    a_hi, a_lo, w_hi, w_lo, a_sc = ring
    w_hi, w_lo = _w_views(w_hi, w_lo, STAGES, BN, T64)
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, mma)
    m_i = gl.full([T64], float("-inf"), gl.float32, layout=row_l)
    l_i = gl.zeros([T64], gl.float32, layout=row_l)
    acc = gl.zeros([T64, T64], gl.float32, layout=mma)
    zero = gl.zeros([T64, T64], gl.float32, layout=mma)
    mbarrier.wait(ready.index(g % STAGES), (g // STAGES) & 1)
    acc, l_i = _overlap_blocks(qh, ql, a_hi, a_lo, w_hi, w_lo, ready, empty, ready, empty, q_empty, g, nkv,
                               qk_scale, zero, m_i, l_i, acc, CAUSAL, STAGES, True, mma, dot_a, BN // T64,
                               PACK_HI, MB, REG_Q, RELEASE)
    o = acc / l_i[:, None]
    rows = b * S + qb * T64 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))
    cols = h * T64 + gl.arange(0, T64, layout=gl.SliceLayout(0, out))
    qm = (qb * T64 + gl.arange(0, T64, layout=gl.SliceLayout(1, out))) < S
    _store_split(att_hi_ptr, att_lo_ptr, rows[:, None] * D + cols[None, :], qm[:, None] & (cols >= 0)[None, :], o,
                 SCHEME_O, out, PACK_HI)


@gluon.jit
def _attn_task(ring, q_buf, ready, empty, q_ready, q_empty, g, na, l, b, h, qb, att_hi_ptr, att_lo_ptr, qk_scale,
               B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, CAUSAL: gl.constexpr, SCHEME_O: gl.constexpr,
               STAGES: gl.constexpr, BN: gl.constexpr, mma: gl.constexpr, out: gl.constexpr,
               PACK_HI: gl.constexpr, MB: gl.constexpr):
    """kernel.py ``_attn_task`` / ``_attn_block`` on the attention helpers (``_overlap_blocks``): the online softmax
    over the key blocks (causal: up to the query block, keys past a query masked on that diagonal block — the only one
    that has any, S being a multiple of 64), q·kᵀ = q_lo·k_hiᵀ + q_hi·k_loᵀ + q_hi·k_hiᵀ from shared memory (kᵀ a
    transposed view of the k tile), p·v = p_lo·v_hi + p_hi·v_lo + p_hi·v_hi with p split in registers (wgmma's
    register A operand); o = acc / l stored split (the output projection's scheme) into att [M, D].
    ``_overlap_blocks``' FA3 order: block j's q·kᵀ and block j − 1's p·v issued together, block j's softmax while
    p·v of j − 1 runs, then acc · alpha_j; per block still acc_j = acc_{j−1} · alpha_j + p_j·v_j, the same operations
    on the same values as the serial order (block 0 starts from the zeros, which the serial order multiplied by
    alpha_0 = 0). A ring slot holds block j's k (the A tiles) and v (the W tiles) on one ready / empty pair; it is
    freed once block j's p·v is done (the consumer holds two slots at a time: STAGES >= 2); with 128-wide GEMM tiles
    v is the first 64 × 64 tile of the slot's W part (``_w_views``, the loader's view too). q is in this consumer's
    q buffer (``q_buf``), freed by the last q·kᵀ."""
    q_hi, q_lo = q_buf
    mbarrier.wait(q_ready, na & 1)
    nkv = _n_key_blocks(qb, S, CAUSAL)
    _attn_rest(q_hi, q_lo, ring, ready, empty, q_empty, g, nkv, b, h, qb, att_hi_ptr, att_lo_ptr, qk_scale, S, D,
               CAUSAL, SCHEME_O, STAGES, BN, mma, out, PACK_HI, MB, False, 1)
    return g + nkv


@gluon.jit
def _attn_task_ring(ring, ready, empty, g, nkv, b, h, qb, att_hi_ptr, att_lo_ptr, qk_scale,
                    S: gl.constexpr, D: gl.constexpr, CAUSAL: gl.constexpr, SCHEME_O: gl.constexpr,
                    STAGES: gl.constexpr, BN: gl.constexpr, mma: gl.constexpr, out: gl.constexpr,
                    PACK_HI: gl.constexpr, MB: gl.constexpr):
    """``_attn_task`` for the cooperative consumers, run by one of them: q from the task's first ring slot into
    registers (wgmma's A operand; the slot freed for both consumers at once, count 2), then the key blocks from the
    slots after it, each freed for both as well (``_attn_rest``' RELEASE 2)."""
    a_hi, a_lo, w_hi, w_lo, a_sc = ring
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    slot = g % STAGES
    mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
    qh = a_hi.index(slot * MB).load(dot_a)
    ql = a_lo.index(slot * MB).load(dot_a)
    fence_async_shared()   # these generic reads before the loader's next TMA into the slot
    gl.thread_barrier()    # every thread's reads before the elected arrive
    mbarrier.arrive(empty.index(slot), count=2)
    _attn_rest(qh, ql, ring, ready, empty, empty.index(0), g + 1, nkv, b, h, qb, att_hi_ptr, att_lo_ptr, qk_scale,
               S, D, CAUSAL, SCHEME_O, STAGES, BN, mma, out, PACK_HI, MB, True, 2)


@gluon.jit
def _ln_task(kind, l, i, x_ptr, r_ptr, y_ptr, ln1_hi_ptr, ln1_lo_ptr, ln2_hi_ptr, ln2_lo_ptr,
             ln1w_ptr, ln1b_ptr, ln2w_ptr, ln2b_ptr, lnfw_ptr, lnfb_ptr,
             M: gl.constexpr, D: gl.constexpr, BLOCK_M_LN: gl.constexpr, BD: gl.constexpr, ROWS: gl.constexpr,
             SCHEME_QKV: gl.constexpr, SCHEME_FFN1: gl.constexpr, lnl: gl.constexpr, PACK_HI: gl.constexpr,
             CH0: gl.constexpr = 0, CHS: gl.constexpr = 1):
    """kernel.py ``_ln_task``: LayerNorm rows i * BLOCK_M_LN …, kind 0 → split LN1 (layer 0 reads x and writes
    r = x), kind 4 → split LN2, kind 7 → y (fp32); two-pass fp32 statistics (tl_helpers.layernorm_rows). The
    task's chunks of ROWS rows CH0, CH0 + CHS, … (the cooperative consumers: one of every two each)."""
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
    for ch in range(CH0, BLOCK_M_LN // ROWS, CHS):
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
            if SCHEME_QKV == I8:
                _store_i8(ln1_hi_ptr, ln1_lo_ptr, y, rows, offs_d, mask, M, D)
            else:
                _store_rows(ln1_hi_ptr, ln1_lo_ptr, offs, mask, y, SCHEME_QKV, PACK_HI)
        elif kind == 4:
            if SCHEME_FFN1 == I8:
                _store_i8(ln2_hi_ptr, ln2_lo_ptr, y, rows, offs_d, mask, M, D)
            else:
                _store_rows(ln2_hi_ptr, ln2_lo_ptr, offs, mask, y, SCHEME_FFN1, PACK_HI)
        else:
            gl.store(y_ptr + offs, y, mask=mask)


@gluon.jit
def _consumer(smem, bufs, qk_scale,
              B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr,
              BLOCK_M_LN: gl.constexpr, LN_ROWS: gl.constexpr, BD: gl.constexpr,
              K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
              SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
              GELU: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_N_QKV: gl.constexpr,
              RING_N: gl.constexpr, TRACE: gl.constexpr, FENCE_AT_SIGNAL: gl.constexpr,
              PACKED_HANDOFF: gl.constexpr, LN_ROW_WARPS: gl.constexpr, num_warps: gl.constexpr,
              CID: gl.constexpr, PACK_HI: gl.constexpr, BLOCK_M: gl.constexpr, COOP: gl.constexpr = False):
    """Consumer CID: ``smem`` the kernel's shared-memory handles, ``bufs`` its buffer pointers (``dag_ws_fwd``).
    COOP: one of the two cooperative consumers (``dag_ws_fwd``): every task comes to both; a GEMM task's 64-row
    half CID is this one's, a LayerNorm task is run by consumer (turn % 2), an attention task by consumer (its
    attention count % 2), the other passing it by (its ring slots freed by the one that runs it); both hand every
    task to signaller 0, whose ``done`` counts two arrivals; consumer 0 alone stamps the trace."""
    ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free, sigs, done, sig_free = smem
    (x_ptr, y_ptr, r_ptr, ln1_hi_ptr, ln1_lo_ptr, qkv_hi_ptr, qkv_lo_ptr, att_hi_ptr, att_lo_ptr, ln2_hi_ptr,
     ln2_lo_ptr, f_hi_ptr, f_lo_ptr, ln1w_ptr, ln1b_ptr, bqkv_ptr, bo_ptr, ln2w_ptr, ln2b_ptr, b1_ptr, b2_ptr,
     lnfw_ptr, lnfb_ptr, f8s_ptr, wqkv_s_ptr, w1_s_ptr, trace_ptr) = bufs
    M: gl.constexpr = B * S
    NT: gl.constexpr = 32 * num_warps
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, T64, 16])   # attention (n = 64)
    mma_g: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, BLOCK_N, 16])  # GEMM tiles (n = block_n)
    mma_q: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, BLOCK_N_QKV, 16])  # QKV tiles
    out: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])      # 16-byte split stores
    acc_out: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [num_warps, 1], [1, 0])  # fp32 atomics
    lnl: gl.constexpr = _ln_layout(num_warps, LN_ROW_WARPS)
    hl: gl.constexpr = _slot_layout(num_warps, PACKED_HANDOFF)
    gemm_ptrs = (r_ptr, qkv_hi_ptr, qkv_lo_ptr, f_hi_ptr, f_lo_ptr, bqkv_ptr, bo_ptr, b1_ptr, b2_ptr, f8s_ptr,
                 wqkv_s_ptr, w1_s_ptr)
    q_hi, q_lo = q_buf
    q_mine = (q_hi.index(CID), q_lo.index(CID))     # this consumer's q buffer and its barriers
    q_ready_c = q_ready.index(CID)
    q_empty_c = q_empty.index(CID)
    TR: gl.constexpr = TRACE and (CID == 0 or not COOP)
    SIG: gl.constexpr = 0 if COOP else 2 * CID      # the signaller's hand-over slots
    i = 0
    na = 0
    t, kind, l, a, b, c, g, sg = _take(tids, tid_full, tid_free, 2 * CID, 0, hl)
    while t >= 0:
        _stamp(trace_ptr, t, 5, TR, lay, NT)
        if (kind == 0) | (kind == 4) | (kind == 7):
            if COOP and (BLOCK_M_LN // LN_ROWS >= 2):   # the task's row chunks shared out
                _ln_task(kind, l, a, x_ptr, r_ptr, y_ptr, ln1_hi_ptr, ln1_lo_ptr, ln2_hi_ptr, ln2_lo_ptr,
                         ln1w_ptr, ln1b_ptr, ln2w_ptr, ln2b_ptr, lnfw_ptr, lnfb_ptr, M, D, BLOCK_M_LN, BD, LN_ROWS,
                         SCHEME_QKV, SCHEME_FFN1, lnl, PACK_HI, CID, 2)
            else:   # one chunk: COOP's consumer (turn % 2) runs it
                run = (i % 2 == CID) | (not COOP)
                if run:
                    _ln_task(kind, l, a, x_ptr, r_ptr, y_ptr, ln1_hi_ptr, ln1_lo_ptr, ln2_hi_ptr, ln2_lo_ptr,
                             ln1w_ptr, ln1b_ptr, ln2w_ptr, ln2b_ptr, lnfw_ptr, lnfb_ptr, M, D, BLOCK_M_LN, BD,
                             LN_ROWS, SCHEME_QKV, SCHEME_FFN1, lnl, PACK_HI)
        elif kind == 2:
            if COOP:
                nkv = _n_key_blocks(c, S, CAUSAL)
                if na % 2 == CID:
                    _attn_task_ring(ring, ready, empty, g, nkv, a, b, c, att_hi_ptr, att_lo_ptr, qk_scale, S, D,
                                    CAUSAL, SCHEME_O, STAGES, RING_N, mma, out, PACK_HI, BLOCK_M // T64)
                g = g + 1 + nkv
            else:
                g = _attn_task(ring, q_mine, ready, empty, q_ready_c, q_empty_c, g, na, l, a, b, c, att_hi_ptr,
                               att_lo_ptr, qk_scale, B, S, D, CAUSAL, SCHEME_O, STAGES, RING_N, mma, out, PACK_HI,
                               BLOCK_M // T64)
            na += 1
        else:
            g = _gemm_task(ring, ready, empty, g, kind, l, a, b, c, gemm_ptrs, B, S, D, H, K_CHUNK_O, K_CHUNK_FFN2,
                           SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, GELU, STAGES, BLOCK_N, BLOCK_N_QKV,
                           RING_N, mma_g, mma_q, out, acc_out, trace_ptr, t, TR, lay, NT, PACK_HI,
                           BLOCK_M // T64, CID if COOP else -1)
        # the task's generic stores / atomics: proxy-fenced by the signaller (TMA reads them elsewhere; the lab's
        # FENCE_AT_SIGNAL=False fences them here), then all 128 threads'
        # before the elected arrive (memory ordering, point 1 of the module docstring)
        if not FENCE_AT_SIGNAL:
            _proxy_fence(lay, NT)
        gl.thread_barrier()
        _stamp(trace_ptr, t, 4, TR, lay, NT)
        _put(sigs, done, sig_free, SIG, i, t, kind, l, a, b, c, g, sg, hl)
        i += 1
        t, kind, l, a, b, c, g, sg = _take(tids, tid_full, tid_free, 2 * CID, i, hl)
    _put(sigs, done, sig_free, SIG, i, -1, 0, 0, 0, 0, 0, 0, 0, hl)
    if COOP and CID == 1:   # signaller 1 has no tasks in this form: its end
        _put(sigs, done, sig_free, 2, 0, -1, 0, 0, 0, 0, 0, 0, 0, hl)


# ----------------------------------------------------------------------------------------------------------------
# signaller (1 warp)

@gluon.jit
def _signaller(sigs, done, sig_free, tab_ptr, ctr_ptr, trace_ptr, MAX_WAITS: gl.constexpr,
               MAX_SIGNALS: gl.constexpr, TASK_WIDTH: gl.constexpr, TRACE: gl.constexpr,
               FENCE_AT_SIGNAL: gl.constexpr, PACKED_HANDOFF: gl.constexpr, CID: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    hl: gl.constexpr = _slot_layout(1, PACKED_HANDOFF)
    lane = gl.arange(0, 32, layout=lay)
    pid = gl.program_id(0)
    i = 0
    t, kind, l, a, b, c, g, sg = _take(sigs, done, sig_free, 2 * CID, 0, hl)
    while t >= 0:
        _stamp(trace_ptr, t, 7, TRACE, lay, 32)
        if FENCE_AT_SIGNAL:
            _proxy_fence(lay, 32)
        if MAX_SIGNALS == 1:   # the counter came with the task (the loader read it): lane 0 releases it
            on = (lane == 0) & (sg >= 0)
            ids = gl.where(on, sg, 0)
        else:
            row = tab_ptr + t * TASK_WIDTH
            n_sig = gl.load(row + 6)
            on = lane < MAX_SIGNALS
            ids = gl.load(row + HEADER + MAX_WAITS + lane, mask=on, other=0)
            on = on & (lane < n_sig)
        gl.inline_asm_elementwise(_RELEASE, "=r,l,r", [ctr_ptr + ids, on.to(gl.int32)],
                                  dtype=gl.int32, is_pure=False, pack=1)
        if TRACE:
            _stamp(trace_ptr, t, 2, TRACE, lay, 32)
            sm = gl.inline_asm_elementwise(_SMID, "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
            gl.store(trace_ptr + t.to(gl.int64) * TRACE_COLS + 3 + lane * 0,
                     (pid.to(gl.int64) << 16) | sm.to(gl.int64), mask=lane == 0)
        i += 1
        t, kind, l, a, b, c, g, sg = _take(sigs, done, sig_free, 2 * CID, i, hl)


# ----------------------------------------------------------------------------------------------------------------
# the kernel

@gluon.jit(do_not_specialize=["n_tasks", "epoch", "spin_limit"])
def dag_ws_fwd(
    ln1_hi_d, ln1_lo_d, att_hi_d, att_lo_d, ln2_hi_d, ln2_lo_d, f_hi_d, f_lo_d,   # A operands: [rows, D], box 64²
    wqkv_hi_d, wqkv_lo_d, wo_hi_d, wo_lo_d, w1_hi_d, w1_lo_d, w2_hi_d, w2_lo_d,   # slabs [L*N/BN*K, BN], box 64×BN
    qkv_hi_d, qkv_lo_d,                                                           # q|k|v [L*3*B*H*S, 64]
    x_ptr, y_ptr, r_ptr, ln1_hi_ptr, ln1_lo_ptr, qkv_hi_ptr, qkv_lo_ptr, att_hi_ptr, att_lo_ptr,
    ln2_hi_ptr, ln2_lo_ptr, f_hi_ptr, f_lo_ptr,
    ln1w_ptr, ln1b_ptr, bqkv_ptr, bo_ptr, ln2w_ptr, ln2b_ptr, b1_ptr, b2_ptr, lnfw_ptr, lnfb_ptr, f8s_ptr,
    wqkv_s_ptr, w1_s_ptr,                                                         # I8: the weights' column scales
    tab_ptr, ctr_ptr, goal_ptr, head_ptr, err_ptr, trace_ptr,
    n_tasks, epoch, spin_limit, qk_scale,
    B: gl.constexpr, S: gl.constexpr, D: gl.constexpr, H: gl.constexpr, CAUSAL: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_M_LN: gl.constexpr, LN_ROWS: gl.constexpr, BD: gl.constexpr,
    K_CHUNK_O: gl.constexpr, K_CHUNK_FFN2: gl.constexpr,
    SCHEME_QKV: gl.constexpr, SCHEME_O: gl.constexpr, SCHEME_FFN1: gl.constexpr, SCHEME_FFN2: gl.constexpr,
    GELU: gl.constexpr, MAX_WAITS: gl.constexpr, MAX_SIGNALS: gl.constexpr, TASK_WIDTH: gl.constexpr,
    GOALS_IN_ROW: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_N_QKV: gl.constexpr,
    RING_N: gl.constexpr, TRACE: gl.constexpr, LOADER_REGS: gl.constexpr, SIGNAL_REGS: gl.constexpr,
    CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr, FENCE_AT_SIGNAL: gl.constexpr,
    PACKED_HANDOFF: gl.constexpr, LN_ROW_WARPS: gl.constexpr, PRE_W: gl.constexpr, PACK_HI: gl.constexpr,
    num_warps: gl.constexpr,
):
    lt: gl.constexpr = att_hi_d.layout       # (the output projection's A: bf16 / fp16 64 × 64 boxes in every scheme)
    lw: gl.constexpr = wo_hi_d.layout        # the weight tiles' 64 × BLOCK_N boxes (the same NVMMA layout as lt, and
    #                                          as QKV's 64 × BLOCK_N_QKV: 128-byte swizzle at 64 and 128 columns)
    # A: a slot's 64 × 64 tile (block_m 128: two, the tile's row halves at 2 · slot and 2 · slot + 1)
    a_hi = gl.allocate_shared_memory(gl.bfloat16, [STAGES * (BLOCK_M // T64), T64, T64], lt)
    a_lo = gl.allocate_shared_memory(gl.bfloat16, [STAGES * (BLOCK_M // T64), T64, T64], lt)
    w_hi = gl.allocate_shared_memory(gl.bfloat16, [STAGES, T64, RING_N], lw)   # RING_N: the wider of the two
    w_lo = gl.allocate_shared_memory(gl.bfloat16, [STAGES, T64, RING_N], lw)
    # the cooperative consumers (two on a 128-row tile's halves): q through the ring, no q buffers (shared memory)
    # and no q mbarriers: an mbarrier initialized and then never used is dead to the allocator, which gave its bytes
    # to consumer 0's layout-conversion scratch; ordinary stores to a valid mbarrier's memory are undefined (PTX
    # ISA, mbarrier), and one launch in thousands read back values that were not the ones stored (odd fp32 elements
    # of the scratch's first 32 bytes: docs/dag-results.md "Results" 50)
    COOP: gl.constexpr = (CONSUMERS == 2) and (BLOCK_M == 2 * T64)
    if COOP:
        q_hi = a_hi   # (not used)
        q_lo = a_lo
    else:
        q_hi = gl.allocate_shared_memory(gl.bfloat16, [CONSUMERS, T64, T64], lt)   # a q buffer per consumer
        q_lo = gl.allocate_shared_memory(gl.bfloat16, [CONSUMERS, T64, T64], lt)
    bl: gl.constexpr = mbarrier.MBarrierLayout()
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bl)
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bl)
    if COOP:
        q_ready = ready   # (not used)
        q_empty = empty
    else:
        q_ready = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], bl)
        q_empty = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], bl)
    # the hand-over rings: loader -> consumer c and consumer c -> signaller c at slots 2c, 2c + 1
    tid_full = gl.allocate_shared_memory(gl.int64, [2 * CONSUMERS, 1], bl)
    tid_free = gl.allocate_shared_memory(gl.int64, [2 * CONSUMERS, 1], bl)
    done = gl.allocate_shared_memory(gl.int64, [2 * CONSUMERS, 1], bl)
    sig_free = gl.allocate_shared_memory(gl.int64, [2 * CONSUMERS, 1], bl)
    il: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    tids = gl.allocate_shared_memory(gl.int32, [2 * CONSUMERS, FIELDS], il)
    sigs = gl.allocate_shared_memory(gl.int32, [2 * CONSUMERS, FIELDS], il)
    FREES: gl.constexpr = 2 if COOP else 1   # arrivals that free a ring slot (COOP: both consumers')
    for q in gl.static_range(STAGES):
        mbarrier.init(ready.index(q), count=1)
        mbarrier.init(empty.index(q), count=FREES)
    if not COOP:
        for q in gl.static_range(CONSUMERS):
            mbarrier.init(q_ready.index(q), count=1)
            mbarrier.init(q_empty.index(q), count=1)
    for q in gl.static_range(2 * CONSUMERS):
        mbarrier.init(tid_full.index(q), count=1)
        mbarrier.init(tid_free.index(q), count=1)
        mbarrier.init(done.index(q), count=FREES if q < 2 else 1)   # (COOP: signaller 0's from both consumers)
        mbarrier.init(sig_free.index(q), count=1)
    if (SCHEME_QKV == I8) or (SCHEME_FFN1 == I8):   # I8: a slot's 64 row scales (TMA: a [1, 64] box of A's)
        a_sc = gl.allocate_shared_memory(gl.float32, [STAGES, 1, T64], ln2_lo_d.layout if SCHEME_FFN1 == I8
                                         else ln1_lo_d.layout)
    else:
        a_sc = a_hi   # (not used)
    ring = (a_hi, a_lo, w_hi, w_lo, a_sc)
    q_buf = (q_hi, q_lo)
    descs = (ln1_hi_d, ln1_lo_d, att_hi_d, att_lo_d, ln2_hi_d, ln2_lo_d, f_hi_d, f_lo_d,
             wqkv_hi_d, wqkv_lo_d, wo_hi_d, wo_lo_d, w1_hi_d, w1_lo_d, w2_hi_d, w2_lo_d, qkv_hi_d, qkv_lo_d)
    smem = (ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free, sigs, done, sig_free)
    bufs = (x_ptr, y_ptr, r_ptr, ln1_hi_ptr, ln1_lo_ptr, qkv_hi_ptr, qkv_lo_ptr, att_hi_ptr, att_lo_ptr, ln2_hi_ptr,
            ln2_lo_ptr, f_hi_ptr, f_lo_ptr, ln1w_ptr, ln1b_ptr, bqkv_ptr, bo_ptr, ln2w_ptr, ln2b_ptr, b1_ptr, b2_ptr,
            lnfw_ptr, lnfb_ptr, f8s_ptr, wqkv_s_ptr, w1_s_ptr, trace_ptr)
    # (Gluon takes the partitions as a list literal of (function, arguments): one list per consumer count)
    if CONSUMERS == 1:
        gl.warp_specialize([
            (_consumer, (smem, bufs, qk_scale, B, S, D, H, CAUSAL, BLOCK_M_LN, LN_ROWS, BD, K_CHUNK_O, K_CHUNK_FFN2,
                          SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, GELU, STAGES, BLOCK_N, BLOCK_N_QKV, RING_N,
                          TRACE, FENCE_AT_SIGNAL, PACKED_HANDOFF, LN_ROW_WARPS, num_warps, 0, PACK_HI, BLOCK_M)),
            (_loader, (descs, ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free, tab_ptr, ctr_ptr,
                       goal_ptr, head_ptr, err_ptr, trace_ptr, n_tasks, epoch, spin_limit, B, S, D, H, CAUSAL,
                       K_CHUNK_O, K_CHUNK_FFN2, SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, MAX_WAITS,
                       MAX_SIGNALS, TASK_WIDTH, GOALS_IN_ROW, STAGES, BLOCK_N, BLOCK_N_QKV, RING_N, TRACE,
                       CONSUMERS, PACKED_HANDOFF, PRE_W, BLOCK_M)),
            (_signaller, (sigs, done, sig_free, tab_ptr, ctr_ptr, trace_ptr, MAX_WAITS, MAX_SIGNALS, TASK_WIDTH, TRACE,
                           FENCE_AT_SIGNAL, PACKED_HANDOFF, 0)),
        ], [1, 1], [LOADER_REGS, SIGNAL_REGS])
    else:   # consumer 1 a worker warpgroup; the three 1-warp partitions padded to one warpgroup (``REGS``)
        gl.warp_specialize([
            (_consumer, (smem, bufs, qk_scale, B, S, D, H, CAUSAL, BLOCK_M_LN, LN_ROWS, BD, K_CHUNK_O, K_CHUNK_FFN2,
                          SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, GELU, STAGES, BLOCK_N, BLOCK_N_QKV, RING_N,
                          TRACE, FENCE_AT_SIGNAL, PACKED_HANDOFF, LN_ROW_WARPS, num_warps, 0, PACK_HI, BLOCK_M,
                          COOP)),
            (_consumer, (smem, bufs, qk_scale, B, S, D, H, CAUSAL, BLOCK_M_LN, LN_ROWS, BD, K_CHUNK_O, K_CHUNK_FFN2,
                          SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, GELU, STAGES, BLOCK_N, BLOCK_N_QKV, RING_N,
                          TRACE, FENCE_AT_SIGNAL, PACKED_HANDOFF, LN_ROW_WARPS, num_warps, 1, PACK_HI, BLOCK_M,
                          COOP)),
            (_loader, (descs, ring, q_buf, ready, empty, q_ready, q_empty, tids, tid_full, tid_free, tab_ptr, ctr_ptr,
                       goal_ptr, head_ptr, err_ptr, trace_ptr, n_tasks, epoch, spin_limit, B, S, D, H, CAUSAL,
                       K_CHUNK_O, K_CHUNK_FFN2, SCHEME_QKV, SCHEME_O, SCHEME_FFN1, SCHEME_FFN2, MAX_WAITS,
                       MAX_SIGNALS, TASK_WIDTH, GOALS_IN_ROW, STAGES, BLOCK_N, BLOCK_N_QKV, RING_N, TRACE,
                       CONSUMERS, PACKED_HANDOFF, PRE_W, BLOCK_M, COOP)),
            (_signaller, (sigs, done, sig_free, tab_ptr, ctr_ptr, trace_ptr, MAX_WAITS, MAX_SIGNALS, TASK_WIDTH, TRACE,
                           FENCE_AT_SIGNAL, PACKED_HANDOFF, 0)),
            (_signaller, (sigs, done, sig_free, tab_ptr, ctr_ptr, trace_ptr, MAX_WAITS, MAX_SIGNALS, TASK_WIDTH, TRACE,
                           FENCE_AT_SIGNAL, PACKED_HANDOFF, 1)),
        ], [num_warps, 1, 1, 1], [CONSUMER_REGS, LOADER_REGS, SIGNAL_REGS, SIGNAL_REGS])


# ----------------------------------------------------------------------------------------------------------------
# host: meta, descriptors, launch

_DEFAULTS = variant_params("dag")        # config/variant/dag.yaml, as host.DEFAULTS
STAGES_DEFAULT = _DEFAULTS["ws_stages"]  # ring slots
PRE_DEFAULT = _DEFAULTS["ws_pre"]        # weight steps a GEMM task claims before its wait
# setmaxnreg of the partitions, by consumers: (loader, signaller, consumer 1). One consumer: 8 warps (the two 1-warp
# partitions padded to a warpgroup), the consumer (default partition) gets the rest. Two: 12 warps, Triton's .maxnreg
# 168 (64K / 384 threads); consumer 1 224 and the 1-warp group (loader, two signallers) 56, so the default partition,
# consumer 0, gets 168 * 3 - 224 - 56 = 224: 2 * 128 * 224 + 128 * 56 = 64512 <= 65536
REGS = {1: (56, 40, 0), 2: (40, 40, 232)}
A_BUFS = ("ln1", "att", "ln2", "f")                 # the GEMMs' A operands (QKV, output projection, FFN1, FFN2)
W_BUFS = ("wqkv", "wo", "w1", "w2")


class WsUnsupported(Unsupported, ValueError):
    """The configuration or the case is outside what the WS kernel implements; the message names the parameter (or
    the case's shape) and the fix. An ``Unsupported`` (the workflow records the case as not run by the variant;
    ``tuning.search`` skips the candidate) and, as it always was, a ``ValueError``."""


# the tile parameters the WS kernel fixes at 64 (``check_ws_params``)
TILE_PARAMS = ("block_m", "block_k", "block_q", "block_kv")
BLOCK_MS = (TILE, 2 * TILE)    # GEMM tile rows: 64, or 128 (one consumer: two accumulators on one W tile a K step;
#                                two: the cooperative form, a 64-row half each)
# the GEMM tile widths: 64 or 128; the output projection's, FFN1's and FFN2's the same (one accumulator shape),
# QKV's its own (a second accumulator shape and K-loop body when it differs); the weight ring is the wider
BLOCK_N_PARAMS = ("block_n_qkv", "block_n_o", "block_n_ffn1", "block_n_ffn2")
SAME_N_PARAMS = BLOCK_N_PARAMS[1:]
BLOCK_NS = (TILE, 2 * TILE)
WS_STAGES = (2, 3, 4, 5, 6)    # ring slots ``ws_stages`` may ask for (shared memory permitting: ``max_ws_stages``)
SHARED_LIMIT = 232448          # bytes of shared memory one CTA may use on an sm_90 SM (227 KB)
# shared memory besides the ring and the q buffer (the epilogues' layout-conversion scratch, the mbarriers, the
# hand-over rings): measured on the sm_90a compile, the same at block_n 64 and 128 (tests/test_dag_ws_kernel.py)
SHARED_OTHER = 16772
SHARED_OTHER_2 = 16512   # a second consumer: its epilogues' layout-conversion scratch and barriers (sm_90a compile)


def ws_shared_bytes(stages: int, block_n: int, consumers: int = 1, block_m: int = TILE, i8: bool = False) -> int:
    """Shared memory of the WS kernel: ``stages`` ring slots of A hi/lo 64 × 64 and W hi/lo 64 × block_n (bf16 or
    fp16: 32 KB at block_n 64, 48 KB at 128), the q buffer (16 KB) and ``SHARED_OTHER``: what the sm_90a compile
    reports at 3 and 4 slots (164228 at block_n 64 and 4 slots, 229764 at 128 and 4 slots; 2 slots: 128 bytes
    less). ``block_m`` 128: a slot's A pair is 128 × 64 (64 KB a slot at block_n 128); with two consumers there (the
    cooperative form) q goes through the ring: no q buffers. ``i8`` (``I8`` on QKV or FFN1): a slot's 64 row scales
    more (256 bytes a slot)."""
    q_bufs = 0 if (consumers == 2 and block_m == 2 * TILE) else consumers * 2 * TILE * TILE * 2
    return (stages * (2 * block_m * TILE + 2 * TILE * block_n) * 2 + q_bufs + SHARED_OTHER
            + (consumers - 1) * SHARED_OTHER_2 + (stages * TILE * 4 if i8 else 0))


def max_ws_stages(block_n: int, consumers: int = 1, block_m: int = TILE, i8: bool = False) -> int:
    """The most ring slots (2-6) that fit one CTA per SM at this block_n and consumers (6 at 64 and 4 at 128 with one
    consumer; with two 5 at 64, 3 at 128)."""
    return max(s for s in WS_STAGES if ws_shared_bytes(s, block_n, consumers, block_m, i8) <= SHARED_LIMIT)


def _check_consumers(consumers, err) -> None:
    if consumers not in REGS:
        raise err(f"dag: form ws: ws_consumers={consumers!r}: 1 or 2 consumer warpgroups")


def _check_stages(stages: int, block_n: int, err, consumers: int = 1, block_m: int = TILE, i8: bool = False) -> None:
    if stages not in WS_STAGES:
        raise err(f"dag: form ws: ws_stages={stages}: 2 to 6 ring slots")
    need = ws_shared_bytes(stages, block_n, consumers, block_m, i8)
    if need > SHARED_LIMIT:
        two = f" and {consumers} consumers" if consumers > 1 else ""
        rows = f" and block_m {block_m}" if block_m != TILE else ""
        raise err(f"dag: form ws: ws_stages={stages} with block_n {block_n}{rows}{two}: {need} "
                  f"bytes of shared memory > {SHARED_LIMIT} (one CTA per SM; a ring slot is "
                  f"{(2 * block_m * TILE + 2 * TILE * block_n) * 2 // 1024} KB): set ws_stages: "
                  f"{max_ws_stages(block_n, consumers, block_m, i8)} or less")


def check_ws_params(o: dict) -> None:
    """``form: ws``: raise ``ParameterError`` naming the parameter and the fix for a dag parameter set (``host.
    check_params``'s) the WS kernel does not run: block_m, block_k, block_q, block_kv 64; the four block_n 64 or 128,
    block_n_o, block_n_ffn1, block_n_ffn2 the same (block_n_qkv may differ); ``ws_stages`` that fit shared memory at
    the wider width (``ws_shared_bytes`` <= ``SHARED_LIMIT``: 2-6 at 64, 2-4 at 128, where 4 slots leave 2.6 KB);
    ``queue: queue``. Pure Python: the CPU refuses a wrong configuration before it refuses the form itself."""
    for k in TILE_PARAMS:
        if o[k] != TILE and not (k == "block_m" and o[k] in BLOCK_MS):
            also = " or 128" if k == "block_m" else ""
            raise ParameterError(f"dag: form ws needs {k} {TILE}{also} (got {o[k]!r}): set form: tl or {k}: {TILE}")
    for k in BLOCK_N_PARAMS:
        if o[k] not in BLOCK_NS:
            raise ParameterError(f"dag: form ws needs {k} 64 or 128 (got {o[k]!r}): set form: tl or {k}: 64 "
                                 "(or 128)")
    widths = [o[k] for k in SAME_N_PARAMS]
    common = max(widths, key=widths.count)          # the most common width (a tie: block_n_o's)
    for k in SAME_N_PARAMS:
        if o[k] != common:
            raise ParameterError(f"dag: form ws needs {k} {common} as the other GEMMs' (got {o[k]!r}; one width for "
                                 f"the output projection and the FFN, 64 or 128: {dict(zip(SAME_N_PARAMS, widths))}"
                                 f"; block_n_qkv may differ): set form: tl or {k}: {common}")
    _check_stages(o["ws_stages"], max(common, o["block_n_qkv"]), ParameterError,
                  o["ws_consumers"], o["block_m"], I8.value in (o["scheme_qkv"], o["scheme_ffn1"]))
    if o["queue"] != "queue":
        raise ParameterError(f"dag: form ws needs queue: queue (got {o['queue']!r}; the WS loader takes tickets, "
                             "there are no static lists): set form: tl or queue: queue")


def _check_coop_ring(meta: dict, stages: int, consumers: int) -> None:
    """The cooperative consumers (block_m 128, two consumers) take attention tasks in turn, and the runner frees each
    of the task's ring slots for both. The consumer that skipped the task next waits on a slot's ``ready`` barrier
    ``STAGES`` steps on, where an attention task of at most ``STAGES`` key blocks can leave that slot two phases
    behind, still being filled by the skipped task's TMA; ``try_wait.parity`` cannot tell that phase from the one it
    wants, so the wait passes and the consumer reads a slot of other bytes (fp8 read from bf16 bytes: NaN). The
    protocol's model (``bench.dag.ring_model``) finds it in random schedules with tasks of up to ``STAGES`` key blocks
    (every causal case: the first query block has one) and in none with more; refused there until the protocol is
    fixed (docs/dag.md, "Where it stands")."""
    if consumers != 2 or meta["BLOCK_M"] != 2 * TILE:
        return
    nkv = 1 if meta["CAUSAL"] else meta["S"] // TILE   # the fewest key blocks an attention task has
    if nkv <= stages:
        kind = "causal: the first query block has 1" if meta["CAUSAL"] else f"S={meta['S']}: {nkv}"
        raise WsUnsupported(f"dag: form ws: the cooperative consumers (block_m 128, ws_consumers 2) with ws_stages="
                            f"{stages} on attention tasks of {nkv} key block(s) ({kind}): the consumer that skips an "
                            "attention task can pass a ring slot's ready barrier two phases behind and read a slot "
                            "still being filled (bench.dag.ring_model). Set block_m: 64 and ws_consumers: 1"
                            + (f", or ws_stages below {nkv}" if nkv > 2 else ""))


def check_supported(meta: dict, grid: int | None = None, n_sm: int | None = None) -> None:
    """Raise ``WsUnsupported`` naming the parameter (or the case's shape) for a ``kernel_meta`` the WS kernel does not
    run: after ``check_ws_params`` only a case whose shape clamps a tile below 64 (or one of the output projection's
    and FFN's block_n below the others) or is not a multiple of 64."""
    need = dict(BLOCK_K=TILE, BLOCK_Q=TILE, BLOCK_KV=TILE, DH=TILE)
    if meta["BLOCK_M"] not in BLOCK_MS:
        raise WsUnsupported(f"dag: form ws: BLOCK_M={meta['BLOCK_M']} after the case's clamp (B·S = "
                            f"{meta['B'] * meta['S']}): the WS kernel's GEMM tiles are 64 or 128 rows; set block_m: "
                            f"{TILE} or form: tl")
    for k, v in need.items():
        if meta[k] != v:
            raise WsUnsupported(f"dag: form ws: {k}={meta[k]}: the WS kernel's tiles are {TILE} (block_m, block_k, "
                                f"block_q, block_kv = {TILE} and head dim {TILE}; S={meta['S']}, D={meta['D']}, "
                                f"H={meta['H']}); set form: tl")
    bns = [meta["SITE_BLOCK_N"][meta[site]] for site in ("SITE_QKV", "SITE_O", "SITE_FFN1", "SITE_FFN2")]
    common = max(bns[1:], key=bns[1:].count)   # the output projection's and the FFN's (a tie: block_n_o's)
    for name, bn in zip(BLOCK_N_PARAMS, bns):
        if bn not in BLOCK_NS or (name != "block_n_qkv" and bn != common):
            raise WsUnsupported(f"dag: form ws: {name}={bn} (block_n {dict(zip(BLOCK_N_PARAMS, bns))} after the "
                                f"case's clamp, D={meta['D']}): every GEMM's block_n must be 64 or 128, the output "
                                f"projection's and the FFN's the same: set form: tl or {name}: "
                                f"{common if common in BLOCK_NS else TILE}")
    if meta["S"] % TILE or (meta["B"] * meta["S"]) % TILE or meta["D"] % TILE:
        raise WsUnsupported(f"dag: form ws: S={meta['S']}, D={meta['D']}: must be multiples of {TILE}; set form: tl")
    if meta["MAX_WAITS"] > 32 or meta["MAX_SIGNALS"] > 32:
        raise WsUnsupported(f"dag: form ws: a task waits for {meta['MAX_WAITS']} / signals {meta['MAX_SIGNALS']} "
                            "counters: the loader and the signaller take one lane each (at most 32); set form: tl")
    if meta["QUEUE"] != "queue":
        raise WsUnsupported("dag: form ws: queue=static is not implemented (the WS loader takes tickets): set form: "
                            "tl or queue: queue")
    if grid is not None and n_sm is not None and not 1 <= grid <= n_sm:
        raise WsUnsupported(f"dag: form ws: grid={grid} programs: the WS kernel runs one CTA per SM ({n_sm} SMs; its "
                            "shared memory allows one), so a grid above the SM count would deadlock: set grid: 0 "
                            f"(= {n_sm}) or at most {n_sm}")


def ws_meta(meta: dict, stages: int = STAGES_DEFAULT, trace: bool = False, consumers: int = 1,
            pre: int = PRE_DEFAULT) -> dict:
    """The WS kernel's constexprs from today's ``kernel_meta`` (``DagPrepared.meta``); ``BLOCK_N`` the output
    projection's and the FFN's tile width (``check_supported``: one for the three), ``BLOCK_N_QKV`` QKV's, ``RING_N``
    the weight ring's (the wider), ``stages`` checked against shared memory at it and the
    ``consumers`` warpgroups (``ws_consumers``: 1 or 2), whose partitions' registers are ``REGS[consumers]``."""
    check_supported(meta)
    block_n = meta["SITE_BLOCK_N"][meta["SITE_O"]]
    block_n_qkv = meta["SITE_BLOCK_N"][meta["SITE_QKV"]]
    ring_n = max(block_n, block_n_qkv)
    _check_consumers(consumers, WsUnsupported)
    _check_stages(stages, ring_n, WsUnsupported, consumers, meta["BLOCK_M"],
                  I8.value in (meta["SCHEME_QKV"], meta["SCHEME_FFN1"]))
    _check_coop_ring(meta, stages, consumers)
    if not 1 <= pre <= stages:
        raise WsUnsupported(f"dag: form ws: ws_pre={pre}: 1 to ws_stages ({stages}): the loader claims at most the "
                            "ring's slots before a wait")
    loader_regs, signal_regs, consumer_regs = REGS[consumers]
    return dict(B=meta["B"], S=meta["S"], D=meta["D"], H=meta["H"], CAUSAL=bool(meta["CAUSAL"]),
                BLOCK_M=meta["BLOCK_M"], BLOCK_M_LN=meta["BLOCK_M_LN"], LN_ROWS=meta["LN_ROWS"], BD=meta["BD"],
                K_CHUNK_O=meta["K_CHUNK_O"], K_CHUNK_FFN2=meta["K_CHUNK_FFN2"],
                SCHEME_QKV=meta["SCHEME_QKV"], SCHEME_O=meta["SCHEME_O"], SCHEME_FFN1=meta["SCHEME_FFN1"],
                SCHEME_FFN2=meta["SCHEME_FFN2"], GELU=meta["GELU"], MAX_WAITS=meta["MAX_WAITS"],
                MAX_SIGNALS=meta["MAX_SIGNALS"], TASK_WIDTH=meta["TASK_WIDTH"],
                GOALS_IN_ROW=meta["WAIT"] == "parallel", STAGES=stages, BLOCK_N=block_n, BLOCK_N_QKV=block_n_qkv,
                RING_N=ring_n, TRACE=bool(trace),
                LOADER_REGS=loader_regs, SIGNAL_REGS=signal_regs, CONSUMERS=consumers, CONSUMER_REGS=consumer_regs,
                FENCE_AT_SIGNAL=True,   # the proxy fence in the signaller (False: in the consumer; the lab's A/B)
                PACKED_HANDOFF=True,    # a hand-over slot whole in every thread (False: a word a lane; the lab's A/B)
                LN_ROW_WARPS=True,      # LayerNorm rows one a warp (False: a row across the warps; the lab's A/B)
                PRE_W=pre,              # weight steps a GEMM task claims before its wait (ws_pre, <= stages)
                PACK_HI=True,           # bf16 hi parts two a conversion (False: one F2F a element; the lab's A/B)
                num_warps=4)


def _smem_layout(cols: int = TILE, rows: int = TILE, dtype=None):
    """The NVMMA layout of a [rows, cols] box (bf16 unless ``dtype``: an 8-bit box 128 wide has bf16's 128-byte rows
    and swizzle); fp32 (``I8``'s [1, 64] scale boxes: 256-byte rows, more than a 128-byte swizzle holds)
    unswizzled."""
    if dtype == gl.float32:
        return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype or gl.bfloat16)


def descriptors(tensors: dict) -> list:
    """TMA descriptors over today's buffers and weight slabs (``DagPrepared.tensors``), in the kernel's order: the
    A operands as [rows, D] (FFN2's [4, M, D] as [4M, D]), the weight slabs [L, N/BN, K, BN] as [L*N/BN*K, BN]
    (BN = block_n, the slabs' last dim), q|k|v [L, 3, B, H, S, 64] as [L*3*B*H*S, 64]; every box 64 × 64 but the
    weights' 64 × BN (one NVMMA layout, 128-byte swizzle: bf16 and fp16 alike, 64 or 128 columns)."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    gdt = {torch.float8_e4m3fn: gl.float8e4nv, torch.int8: gl.int8, torch.float32: gl.float32}

    def desc(t, cols=TILE, rows=TILE):
        t2 = t.reshape(-1, t.shape[-1])
        return TensorDescriptor(t2, list(t2.shape), list(t2.stride()), [rows, cols],
                                _smem_layout(cols, rows, gdt.get(t.dtype)))
    out = []
    f8, i8 = torch.float8_e4m3fn, torch.int8
    for n in A_BUFS:   # (f16f8: lo [.., 2D] fp8, box 64 x 128; I8: hi the [M, 2D] limbs, box 64 x 128, lo the
        hi, lo = tensors[f"{n}_hi_ptr"], tensors[f"{n}_lo_ptr"]   # [D / 128, M] fp32 row scales, box 1 x 64)
        if hi.dtype == i8:
            out += [desc(hi, 2 * TILE), desc(lo, TILE, 1)]
        else:
            out += [desc(hi), desc(lo, 2 * TILE) if lo.dtype == f8 else desc(lo)]
    for n in W_BUFS:   # (f16f8: lo [L, N/BN, K/64, BN, 128] fp8 as [L*N/BN*K/64*BN, 128], box BN x 128: K-major;
        hi, lo = tensors[f"{n}_hi_ptr"], tensors[f"{n}_lo_ptr"]   # I8: hi / lo the limbs l0 / l1 [L, N/BN, K/128,
        if hi.dtype == i8:                                        # BN, 128], box BN x 128)
            out += [desc(hi, 2 * TILE, hi.shape[-2]), desc(lo, 2 * TILE, hi.shape[-2])]
            continue
        bn = hi.shape[-1]
        out += [desc(hi, bn), desc(lo, 2 * TILE, bn) if lo.dtype == f8 else desc(lo, bn)]
    out += [desc(tensors["qkv_hi_ptr"]), desc(tensors["qkv_lo_ptr"])]
    return out


POINTERS = ("x_ptr", "y_ptr", "r_ptr", "ln1_hi_ptr", "ln1_lo_ptr", "qkv_hi_ptr", "qkv_lo_ptr", "att_hi_ptr",
            "att_lo_ptr", "ln2_hi_ptr", "ln2_lo_ptr", "f_hi_ptr", "f_lo_ptr", "ln1w_ptr", "ln1b_ptr", "bqkv_ptr",
            "bo_ptr", "ln2w_ptr", "ln2b_ptr", "b1_ptr", "b2_ptr", "lnfw_ptr", "lnfb_ptr", "f8s_ptr", "wqkv_s_ptr",
            "w1_s_ptr")
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
    tname = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32",
             torch.float8_e4m3fn: "*fp8e4nv", torch.int8: "*i8"}
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
            raise WsUnsupported("dag: form ws: the direct launch passes no scratch buffers and one CTA per program")
        if encode is None:
            from triton.backends.nvidia.driver import make_tensordesc_arg as encode
        metas = getattr(md, "tensordesc_meta", None) or [None] * len(descs)
        self.desc_args = [a for d, m in zip(descs, metas, strict=True) for a in encode(d, m)]
        self.raw = raw if raw is not None else unwrap_launcher(kernel.run.launch)
        if self.raw is None:
            raise WsUnsupported("dag: form ws: this Triton's launcher is not the one the direct launch unwraps")
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


class WsRunner:
    """``dag_ws_fwd`` on a ``DagPrepared`` ``p`` (its graph, task table, buffers and weight slabs) with the control
    tensors given (``ctr``, ``head``, ``err``, ``trace``: ``host`` passes ``p``'s own; the lab's ``WsDag`` its own),
    ``meta`` (``ws_meta``) and ``grid`` programs (one CTA per SM at most: ``check_supported``). The epoch and the
    spin limit are the caller's (``host.launch`` keeps the bookkeeping). ``compile()`` builds the kernel without a
    launch (``host.prepare_one`` on CUDA); without it the first launch compiles through Gluon's JIT path. Either way
    the launches after that go through ``DirectLaunch`` when ``direct`` (x and y CUDA tensors of the compiled dtype
    with the 16-byte alignment the kernel was specialized for; no Triton launch hook set), else the JIT path."""

    def __init__(self, p, meta: dict, grid: int, ctr, head, err, trace, direct: bool = True):
        T = p.tensors
        self.p, self.meta, self.grid = p, meta, grid
        self.descs = descriptors(T)
        self.r = T["r_ptr"]
        self.ptrs = [T[n] for n in POINTERS[3:]]                         # after x, y, r (x and y per launch)
        self.tab, self.goal = p.tab, p.goal
        self.ctr, self.head, self.err, self.trace = ctr, head, err, trace
        self.n_tasks = len(p.graph.tasks)
        self.qk_scale = p.qk_scale
        self.kernel = None
        self.direct = direct          # launches after the compile through ``DirectLaunch`` (False: the JIT path)
        self.direct_launch = None     # DirectLaunch, built with the kernel (None: not possible; the JIT path)
        self.direct_error = None      # why not, when it could not be built
        self._xy_dtype = None
        self._dev = None
        self._stream = None
        self._ptr_vals = []           # the direct launch's data_ptr ints after x and y (``_adopt``)

    def args(self, x, y, epoch: int, spin_limit: int) -> list:
        """The JIT path's runtime arguments in signature order (the constexprs go as keywords: ``meta``)."""
        return [*self.descs, x, y, self.r, *self.ptrs, self.tab, self.ctr, self.goal, self.head, self.err, self.trace,
                self.n_tasks, max(1, epoch), spin_limit, self.qk_scale]

    def compile(self):
        """Compile (no launch) and load the kernel for fp32 x / y with 16-byte alignment (r stands in for both, as
        ``host.compile_only``: the same specialization as a launch on ``run``'s fresh tensors), and build the direct
        launch. Returns Triton's CompiledKernel."""
        k = dag_ws_fwd.warmup(*self.args(self.r, self.r, 1, 1), grid=(self.grid, ), **self.meta)
        k._init_handles()
        self._adopt(k, self.r, self.r)
        return k

    def _adopt(self, k, x, y) -> None:
        """The compiled kernel, the x / y dtype and device it was compiled for, and its direct launch."""
        self.kernel = k
        self._xy_dtype = x.dtype if x.dtype == y.dtype else None
        self._dev = x.device.index
        if self.direct and (x.data_ptr() | y.data_ptr()) & 15 == 0:
            # r, the other buffers and the control tensors live as long as the runner: their addresses once
            self._ptr_vals = [t.data_ptr() for t in (self.r, *self.ptrs, self.tab, self.ctr, self.goal, self.head,
                                                     self.err, self.trace)]
            try:
                self.direct_launch = DirectLaunch(k, self.descs, [self.meta[n] for n in CONSTEXPRS])
                self._stream = triton.runtime.driver.active.get_current_stream
            except (WsUnsupported, AttributeError, TypeError, ValueError) as e:
                self.direct_error = f"{type(e).__name__}: {e}"

    def launch_path(self) -> str:
        """``direct`` or ``jit (why)``: the path launches take after the compile."""
        if self.direct_launch is not None and self.direct:
            return "direct"
        return f"jit ({self.direct_error or ('direct off' if not self.direct else 'not compiled yet')})"

    def run(self, x, y, epoch: int, spin_limit: int):
        """One forward y = f(x) at ``epoch`` (>= 1; the caller's bookkeeping). Returns the compiled kernel."""
        d = self.direct_launch
        if (d is not None and self.direct and x.is_cuda and y.is_cuda and x.dtype == y.dtype == self._xy_dtype
                and _no_launch_hooks()):
            xp, yp = x.data_ptr(), y.data_ptr()
            if not (xp | yp) & 15:
                d(self.grid, self._stream(self._dev), [xp, yp, *self._ptr_vals],
                  [self.n_tasks, max(1, epoch), spin_limit, self.qk_scale])
                return self.kernel
        k = dag_ws_fwd[(self.grid, )](*self.args(x, y, epoch, spin_limit), **self.meta)
        if self.kernel is None:
            self._adopt(k, x, y)
        return k

    def check_shared(self) -> dict:
        """Shared memory of the compiled kernel against the device's per-block limit (one CTA per SM)."""
        import torch
        props = torch.cuda.get_device_properties(self.ctr.device)
        limit = getattr(props, "shared_memory_per_block_optin", None)
        shared = self.kernel.metadata.shared if self.kernel is not None else None
        if limit is not None and shared is not None and shared > limit:
            raise WsUnsupported(f"dag: form ws: {shared} bytes of shared memory > the device's {limit} per block; "
                                "lower ws_stages")
        return dict(shared=shared, shared_limit=limit, num_warps=getattr(self.kernel.metadata, "num_warps", None))
