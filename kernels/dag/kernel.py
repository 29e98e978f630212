"""dag: the persistent task-graph megakernel — the whole forward pass (SPEC §2) in one Triton launch.

A grid of co-resident programs runs the task graph of ``graph.py``: each program takes tasks in the graph's
queue order (``QUEUE``: ``queue`` — the next ticket of one atomic counter, whoever is free first; ``static`` —
its own list, fixed by prepare), waits for the task's dependency counters (``wait_counter``: thread 0 spins on
``ld.acquire``, bounded by ``spin_limit``), runs it, and publishes it (CTA barrier, then ``red.release`` of 1 on
each counter the task signals). Counters only grow: launch ``epoch`` (1, 2, ...) waits for ``epoch x goal``, so
no reset runs between launches (the host zeroes them only before the int32 range would overflow). A wait that
gives up records the task in ``err`` and the program goes on (every counter still reaches its goal, so the launch
ends in bounded time and ``run`` raises).

Buffers (rows = the B*S tokens; "split" = hi/lo parts, bf16 for bf16x3 and fp16 for f16_w1, fp32-held values in
the interpreter):

    r        [M, D] fp32   the residual stream: x copied by layer 0's LN1, GEMM K splits added with atomics
    ln1      [M, D] split  A of QKV          qkv  [L, 3, B, H, S, DH] split  q | k | v head-major, one copy per layer
    att      [M, D] split  A of the out-proj ln2  [M, D] split  A of FFN1  f  [4, M, D] split  A of FFN2 (column blocks)
    weights  W^T as [L, N / BN, K, BN] tile slabs (zero-padded), split once by prepare (hi, lo; f16_w1: one fp16
             part); biases and LayerNorm weights fp32

Every A operand has row stride D and every weight slab row stride BN, so the four GEMM kinds share one K loop
(``_gemm_site``: one per distinct tile width and scheme; the defaults have one).

One task kind per ``@triton.jit`` function below (the three LayerNorm kinds: one body, ``_ln_task``; the GEMM kinds:
one epilogue each after the shared ``_mma_loop``, three dots per K step for bf16x3, a_lo w_hi + a_hi w_lo + a_hi w_hi;
two for f16_w1, a_lo w + a_hi w).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..common.task_sync import signal_counter, wait_counter, wait_counters
from ..common.tl_helpers import (dot_split, gelu_erf, gelu_log2poly, globaltimer, layernorm_rows, smid, split_bf16,
                                 split_f16)

LN_EPS = tl.constexpr(1e-5)
TRACE_COLS = tl.constexpr(8)  # int64 stamps per task of a traced launch (host.task_profile names the columns)
TASK_HEADER = tl.constexpr(8)  # kind, layer, a, b, c, waits, signals, (unused); then the wait ids, the signal ids,
                               # the wait counters' goals (host.task_table)


@triton.jit
def _store_split(hi_ptr, lo_ptr, offs, mask, x, SCHEME: tl.constexpr, GPU: tl.constexpr):
    """Store fp32 ``x`` as the hi/lo parts of the A operand of a GEMM on ``SCHEME``: bf16 (bf16x3) or fp16
    (f16_w1) parts; in the interpreter (GPU false) the same values held in fp32."""
    if SCHEME == "f16_w1":
        hi, lo = split_f16(x, GPU)
    else:
        hi, lo = split_bf16(x, GPU)
    tl.store(hi_ptr + offs, hi, mask=mask)
    tl.store(lo_ptr + offs, lo, mask=mask)


@triton.jit
def _k_step(acc, a_hi_ptr, a_lo_ptr, w_hi_ptr, w_lo_ptr, a_offs, w_offs, row0, k, k_end,
            M: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            EVEN: tl.constexpr, SCHEME: tl.constexpr, DOT_PREC: tl.constexpr):
    """acc + A[rows, k:k+BLOCK_K] @ W^T[k:k+BLOCK_K, tile]: A in column blocks of D ([*, M, D]: K column k lives in
    block k // D), the weight tile a [K, BLOCK_N] slab (zero-padded past N: no column mask); bf16x3 (three dots) or
    f16_w1 (two). EVEN: M and every K range are whole tiles / steps (no masks)."""
    # k % D is a multiple of BLOCK_K (a K step never crosses a column block): said so, or the axis analysis loses
    # the alignment, A is read with 2-byte loads and the pipeliner leaves it synchronous (3 us per K step on the H200)
    a_base = (k // D) * (M * D) + row0 * D + tl.multiple_of(k % D, BLOCK_K)
    w_base = k * BLOCK_N
    if EVEN:
        a_hi = tl.load(a_hi_ptr + a_base + a_offs, cache_modifier=".cg")
        a_lo = tl.load(a_lo_ptr + a_base + a_offs, cache_modifier=".cg")
        w_hi = tl.load(w_hi_ptr + w_base + w_offs)
        if SCHEME == "bf16x3":
            w_lo = tl.load(w_lo_ptr + w_base + w_offs)
    else:
        mk = (k + tl.arange(0, BLOCK_K)) < k_end
        am = ((row0 + tl.arange(0, BLOCK_M)) < M)[:, None] & mk[None, :]
        wm = mk[:, None]
        a_hi = tl.load(a_hi_ptr + a_base + a_offs, mask=am, other=0.0, cache_modifier=".cg")
        a_lo = tl.load(a_lo_ptr + a_base + a_offs, mask=am, other=0.0, cache_modifier=".cg")
        w_hi = tl.load(w_hi_ptr + w_base + w_offs, mask=wm, other=0.0)
        if SCHEME == "bf16x3":
            w_lo = tl.load(w_lo_ptr + w_base + w_offs, mask=wm, other=0.0)
    if SCHEME == "bf16x3":
        acc = dot_split(a_hi, a_lo, w_hi, w_lo, acc, True, True, DOT_PREC)
    else:  # f16_w1: one fp16 weight part, A exact in two fp16 parts
        acc = dot_split(a_hi, a_lo, w_hi, w_hi, acc, True, False, DOT_PREC)
    return acc


@triton.jit
def _mma_loop(a_hi_ptr, a_lo_ptr,   # [K // D, M, D] A parts (column blocks of D)
              w_hi_ptr, w_lo_ptr,   # [K, BLOCK_N] the tile's weight slab (parts)
              row0, k0, k_end,      # the tile's first row; its K range [k0, k_end)
              M: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, EVEN: tl.constexpr, SCHEME: tl.constexpr, DOT_PREC: tl.constexpr,
              NUM_STAGES: tl.constexpr, GPU: tl.constexpr):
    """acc [BLOCK_M, BLOCK_N] fp32 = A[row0:, k0:k_end] @ W^T[k0:k_end, tile], software-pipelined (GPU: a
    ``tl.range`` to a run-time bound; the interpreter, which cannot loop to a loaded bound, a while loop). Row
    strides are constexprs (D, BLOCK_N) whatever the GEMM, so every GEMM kind shares this one loop: one set of
    wgmma accumulators and operand buffers (four loops, one per kind, needed 255 registers with spills)."""
    a_offs = tl.arange(0, BLOCK_M)[:, None] * D + tl.arange(0, BLOCK_K)[None, :]
    w_offs = tl.arange(0, BLOCK_K)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    steps = (k_end - k0 + BLOCK_K - 1) // BLOCK_K
    if GPU:
        for kk in tl.range(0, steps, num_stages=NUM_STAGES):
            acc = _k_step(acc, a_hi_ptr, a_lo_ptr, w_hi_ptr, w_lo_ptr, a_offs, w_offs, row0, k0 + kk * BLOCK_K, k_end,
                          M, D, BLOCK_M, BLOCK_N, BLOCK_K, EVEN, SCHEME, DOT_PREC)
    else:
        kk = 0
        while kk < steps:
            acc = _k_step(acc, a_hi_ptr, a_lo_ptr, w_hi_ptr, w_lo_ptr, a_offs, w_offs, row0, k0 + kk * BLOCK_K, k_end,
                          M, D, BLOCK_M, BLOCK_N, BLOCK_K, EVEN, SCHEME, DOT_PREC)
            kk += 1
    return acc

@triton.jit
def _ln_task(kind, l, i, z,
             x_ptr, r_ptr, y_ptr,            # [M, D] fp32: input, residual stream, output
             ln1_hi_ptr, ln1_lo_ptr,         # [M, D] split A of QKV (kind 0 writes)
             ln2_hi_ptr, ln2_lo_ptr,         # [M, D] split A of FFN1 (kind 4 writes)
             ln1w_ptr, ln1b_ptr, ln2w_ptr, ln2b_ptr, lnfw_ptr, lnfb_ptr,   # [L, D], [L, D], [D]
             M: tl.constexpr, D: tl.constexpr, BLOCK_M_LN: tl.constexpr, BD: tl.constexpr, ROWS: tl.constexpr,
             SCHEME_QKV: tl.constexpr, SCHEME_FFN1: tl.constexpr, GPU: tl.constexpr):
    """LayerNorm row block i (BLOCK_M_LN rows), in chunks of ROWS rows, for every LayerNorm kind at one call site:
    kind 0 — A of layer l's QKV = split(LN1(r)) (layer 0 reads x and starts r = x); kind 4 — A of FFN1 =
    split(LN2(r)); kind 7 — y = LNf(r), fp32. One site and a loop over the chunks (not unrolled): unrolled at three
    call sites the LayerNorm bodies were ~70% of the kernel's code (docs/dag.md, compile report). ``z`` is 0,
    loaded from the task table: the column offsets built from it cannot be hoisted out of the persistent loop
    (hoisted, the [ROWS, BD] pointer tiles stayed in registers across all tasks)."""
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
    offs_d = tl.arange(0, BD) + z
    mask_d = offs_d < D
    w = tl.load(w_ptr + offs_d, mask=mask_d, other=0.0)
    b = tl.load(b_ptr + offs_d, mask=mask_d, other=0.0)
    for ch in range(0, BLOCK_M_LN // ROWS):
        rows = i * BLOCK_M_LN + ch * ROWS + tl.arange(0, ROWS)
        mask = (rows < M)[:, None] & mask_d[None, :]
        offs = rows[:, None] * D + offs_d[None, :]
        x = tl.load(src_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
        if first:
            tl.store(r_ptr + offs, x, mask=mask)
        y = layernorm_rows(x, w, b, mask_d, D, LN_EPS)
        if kind == 0:
            _store_split(ln1_hi_ptr, ln1_lo_ptr, offs, mask, y, SCHEME_QKV, GPU)
        elif kind == 4:
            _store_split(ln2_hi_ptr, ln2_lo_ptr, offs, mask, y, SCHEME_FFN1, GPU)
        else:
            tl.store(y_ptr + offs, y, mask=mask)


@triton.jit
def _attn_block(k_hi_ptr, k_lo_ptr, v_hi_ptr, v_lo_ptr, q_hi, q_lo, offs_q, k0, m_i, l_i, acc, qk_scale,
                S: tl.constexpr, DH: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_KV: tl.constexpr,
                BDH: tl.constexpr, DOT_PREC: tl.constexpr, GPU: tl.constexpr):
    """One key block of the online softmax on bf16x3 dots (q k^T and p v); returns (m_i, l_i, acc)."""
    offs_d = tl.arange(0, BDH)
    offs_k = k0 + tl.arange(0, BLOCK_KV)
    mask_k = offs_k < S
    kt_offs = offs_k[None, :] * DH + offs_d[:, None]                                        # [BDH, BLOCK_KV]
    kt_mask = (offs_d < DH)[:, None] & mask_k[None, :]
    v_offs = offs_k[:, None] * DH + offs_d[None, :]                                         # [BLOCK_KV, BDH]
    v_mask = mask_k[:, None] & (offs_d < DH)[None, :]
    kt_hi = tl.load(k_hi_ptr + kt_offs, mask=kt_mask, other=0.0, cache_modifier=".cg")
    kt_lo = tl.load(k_lo_ptr + kt_offs, mask=kt_mask, other=0.0, cache_modifier=".cg")
    v_hi = tl.load(v_hi_ptr + v_offs, mask=v_mask, other=0.0, cache_modifier=".cg")
    v_lo = tl.load(v_lo_ptr + v_offs, mask=v_mask, other=0.0, cache_modifier=".cg")
    s = dot_split(q_hi, q_lo, kt_hi, kt_lo, tl.zeros((q_hi.shape[0], BLOCK_KV), tl.float32), True, True, DOT_PREC)
    valid = mask_k[None, :]
    if CAUSAL:
        valid = valid & (offs_k[None, :] <= offs_q[:, None])
    s = tl.where(valid, s, float("-inf"))
    # maxima of the scaled scores (qk_scale > 0); p = exp2(s * scale - m), one FMA per score
    m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s * qk_scale - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    p_hi, p_lo = split_bf16(p, GPU)
    # straight into the rescaled accumulator: a second accumulator added afterwards cost 32 registers at the peak
    acc = dot_split(p_hi, p_lo, v_hi, v_lo, acc * alpha[:, None], True, True, DOT_PREC)
    return m_new, l_i, acc


@triton.jit
def _attn_task(l, b, h, qb, q_hi_ptr, q_lo_ptr, o_hi_ptr, o_lo_ptr, qk_scale,
               B: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
               CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BDH: tl.constexpr,
               SCHEME_O: tl.constexpr, DOT_PREC: tl.constexpr, ATTN_STAGES: tl.constexpr, GPU: tl.constexpr):
    """Query block qb of head h of sequence b in layer l: softmax(q k^T / sqrt(DH)) v over the key blocks (causal:
    up to the query block), stored split as the output projection's A operand (merged heads, [M, D])."""
    M: tl.constexpr = B * S
    NKV: tl.constexpr = (S + BLOCK_KV - 1) // BLOCK_KV
    head = l * (3 * M * D) + (b * H + h) * (S * DH)      # q of (b, h); k and v M*D and 2*M*D further
    offs_q = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BDH)
    qmask = (offs_q < S)[:, None] & (offs_d < DH)[None, :]
    q_offs = head + offs_q[:, None] * DH + offs_d[None, :]
    q_hi = tl.load(q_hi_ptr + q_offs, mask=qmask, other=0.0, cache_modifier=".cg")
    q_lo = tl.load(q_lo_ptr + q_offs, mask=qmask, other=0.0, cache_modifier=".cg")
    kv = head + M * D
    m_i = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_Q,), tl.float32)
    acc = tl.zeros((BLOCK_Q, BDH), tl.float32)
    if CAUSAL:  # keys past the query block are all masked
        kv_end = tl.minimum((qb + 1) * BLOCK_Q, S)
    else:
        kv_end = qb * 0 + S
    if GPU and (ATTN_STAGES > 0):  # a run-time trip count: the pipeliner loads key block j + 1 during block j
        for j in tl.range(0, (kv_end + BLOCK_KV - 1) // BLOCK_KV, num_stages=ATTN_STAGES):
            m_i, l_i, acc = _attn_block(q_hi_ptr + kv, q_lo_ptr + kv, q_hi_ptr + kv + M * D, q_lo_ptr + kv + M * D,
                                        q_hi, q_lo, offs_q, j * BLOCK_KV, m_i, l_i, acc, qk_scale, S, DH, CAUSAL,
                                        BLOCK_KV, BDH, DOT_PREC, GPU)
    else:  # every key block under a branch: loads issued when the block starts (ATTN_STAGES 0; the interpreter)
        for j in range(0, NKV):
            if j * BLOCK_KV < kv_end:
                m_i, l_i, acc = _attn_block(q_hi_ptr + kv, q_lo_ptr + kv, q_hi_ptr + kv + M * D,
                                            q_lo_ptr + kv + M * D, q_hi, q_lo, offs_q, j * BLOCK_KV, m_i, l_i, acc,
                                            qk_scale, S, DH, CAUSAL, BLOCK_KV, BDH, DOT_PREC, GPU)
    o_offs = (b * S + offs_q)[:, None] * D + h * DH + offs_d[None, :]
    _store_split(o_hi_ptr, o_lo_ptr, o_offs, qmask, acc / l_i[:, None], SCHEME_O, GPU)


@triton.jit
def _qkv_epilogue(acc, l, row0, col0, b_ptr, q_hi_ptr, q_lo_ptr,
                  B: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GPU: tl.constexpr):
    """QKV tile: + bias, stored head-major and split in bf16 (the attention's operands): column c is part c // D,
    head (c % D) // DH; row t is batch t // S, position t % S."""
    M: tl.constexpr = B * S
    N: tl.constexpr = 3 * D
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = col0 + tl.arange(0, BLOCK_N)
    acc += tl.load(b_ptr + l * N + cols, mask=cols < N, other=0.0)[None, :]
    part = cols // D
    hd = (cols - part * D) // DH
    col_off = part * (M * D) + hd * (S * DH) + (cols - part * D - hd * DH)
    bb = rows // S
    row_off = bb * (H * S * DH) + (rows - bb * S) * DH
    offs = l * (3 * M * D) + row_off[:, None] + col_off[None, :]
    _store_split(q_hi_ptr, q_lo_ptr, offs, (rows < M)[:, None] & (cols < N)[None, :], acc, "bf16x3", GPU)


@triton.jit
def _ffn1_epilogue(acc, l, row0, col0, b_ptr, f_hi_ptr, f_lo_ptr,
                   M: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   SCHEME_FFN2: tl.constexpr, GELU: tl.constexpr, GPU: tl.constexpr):
    """FFN1 tile: + bias, exact-erf GELU, stored split as FFN2's A operand ([4, M, D]: column c in block c // D)."""
    F: tl.constexpr = 4 * D
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = col0 + tl.arange(0, BLOCK_N)
    acc += tl.load(b_ptr + l * F + cols, mask=cols < F, other=0.0)[None, :]
    if GELU == "log2poly":
        acc = gelu_log2poly(acc, GPU)
    else:
        acc = gelu_erf(acc)
    offs = rows[:, None] * D + ((cols // D) * (M * D) + cols % D)[None, :]
    _store_split(f_hi_ptr, f_lo_ptr, offs, (rows < M)[:, None] & (cols < F)[None, :], acc, SCHEME_FFN2, GPU)


@triton.jit
def _residual_epilogue(acc, l, s, row0, col0, b_ptr, r_ptr, N, M: tl.constexpr, D: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Output-projection / FFN2 K split s: r[tile] += acc (+ bias on split 0) with fp32 atomics (N = D)."""
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = col0 + tl.arange(0, BLOCK_N)
    bias = tl.load(b_ptr + l * D + cols, mask=cols < D, other=0.0)
    acc += tl.where(s == 0, bias, 0.0)[None, :]
    tl.atomic_add(r_ptr + rows[:, None] * D + cols[None, :], acc, mask=(rows < M)[:, None] & (cols < D)[None, :],
                  sem="relaxed", scope="gpu")


@triton.jit
def _gemm_task(kind, l, m, n, s,
               a_hi_ptr, a_lo_ptr,   # [K // D, M, D] the A operand's parts (ln1 | att | ln2 | f)
               w_hi_ptr, w_lo_ptr,   # [L, N // BLOCK_N, K, BLOCK_N] the weight's tile slabs (parts)
               b_ptr,                # [L, N] bias
               K, N, k_chunk,        # the GEMM's K and N; the K split's width (K when not split)
               r_ptr, q_hi_ptr, q_lo_ptr, f_hi_ptr, f_lo_ptr,   # the epilogues' outputs
               B: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN: tl.constexpr,
               SCHEME: tl.constexpr, SCHEME_FFN2: tl.constexpr, GELU: tl.constexpr, DOT_PREC: tl.constexpr,
               NUM_STAGES: tl.constexpr, GPU: tl.constexpr):
    """GEMM task (tile (m, n), K split s) of layer l: kind 1 QKV, 3 output projection, 5 FFN1, 6 FFN2 (the caller
    picks the operands; ``_gemm_site``). One K loop for every kind, then the kind's epilogue."""
    M: tl.constexpr = B * S
    row0 = m * BLOCK_M
    col0 = n * BLOCK_N
    k0 = s * k_chunk
    k_end = tl.minimum(k0 + k_chunk, K)
    slab = (l * ((N + BLOCK_N - 1) // BLOCK_N) + n) * (K * BLOCK_N)
    acc = _mma_loop(a_hi_ptr, a_lo_ptr, w_hi_ptr + slab, w_lo_ptr + slab, row0, k0, k_end, M, D, BLOCK_M,
                    BLOCK_N, BLOCK_K, EVEN, SCHEME, DOT_PREC, NUM_STAGES, GPU)
    if kind == 1:
        _qkv_epilogue(acc, l, row0, col0, b_ptr, q_hi_ptr, q_lo_ptr, B, S, D, H, DH, BLOCK_M, BLOCK_N, GPU)
    elif kind == 5:
        _ffn1_epilogue(acc, l, row0, col0, b_ptr, f_hi_ptr, f_lo_ptr, M, D, BLOCK_M, BLOCK_N, SCHEME_FFN2, GELU, GPU)
    else:
        _residual_epilogue(acc, l, s, row0, col0, b_ptr, r_ptr, N, M, D, BLOCK_M, BLOCK_N)

@triton.jit
def _gemm_site(kind, l, m, n, s,
               ln1_hi_ptr, ln1_lo_ptr, att_hi_ptr, att_lo_ptr, ln2_hi_ptr, ln2_lo_ptr, f_hi_ptr, f_lo_ptr,
               wqkv_hi_ptr, wqkv_lo_ptr, bqkv_ptr, wo_hi_ptr, wo_lo_ptr, bo_ptr,
               w1_hi_ptr, w1_lo_ptr, b1_ptr, w2_hi_ptr, w2_lo_ptr, b2_ptr,
               r_ptr, q_hi_ptr, q_lo_ptr,
               SITE: tl.constexpr, SITE_QKV: tl.constexpr, SITE_O: tl.constexpr, SITE_FFN1: tl.constexpr,
               SITE_FFN2: tl.constexpr, K_CHUNK_O: tl.constexpr, K_CHUNK_FFN2: tl.constexpr,
               B: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN: tl.constexpr,
               SCHEME: tl.constexpr, SCHEME_FFN2: tl.constexpr, GELU: tl.constexpr, DOT_PREC: tl.constexpr,
               NUM_STAGES: tl.constexpr, GPU: tl.constexpr):
    """A GEMM task of one site: the GEMM kinds that share a tile width and a scheme (host.gemm_sites: the
    defaults put all four on site 0) share one ``_gemm_task`` body. Picks the task's operands among the site's
    kinds: the first member's unconditionally, the others' by ``kind``."""
    IN_Q: tl.constexpr = SITE_QKV == SITE
    IN_O: tl.constexpr = SITE_O == SITE
    IN_1: tl.constexpr = SITE_FFN1 == SITE
    IN_2: tl.constexpr = SITE_FFN2 == SITE
    zero = kind * 0
    if IN_Q:
        a_hi, a_lo, w_hi, w_lo, b, K, N, kc = (ln1_hi_ptr, ln1_lo_ptr, wqkv_hi_ptr, wqkv_lo_ptr, bqkv_ptr, zero + D,
                                               zero + 3 * D, zero + D)
    elif IN_O:
        a_hi, a_lo, w_hi, w_lo, b, K, N, kc = (att_hi_ptr, att_lo_ptr, wo_hi_ptr, wo_lo_ptr, bo_ptr, zero + D,
                                               zero + D, zero + K_CHUNK_O)
    elif IN_1:
        a_hi, a_lo, w_hi, w_lo, b, K, N, kc = (ln2_hi_ptr, ln2_lo_ptr, w1_hi_ptr, w1_lo_ptr, b1_ptr, zero + D,
                                               zero + 4 * D, zero + D)
    else:
        a_hi, a_lo, w_hi, w_lo, b, K, N, kc = (f_hi_ptr, f_lo_ptr, w2_hi_ptr, w2_lo_ptr, b2_ptr, zero + 4 * D,
                                               zero + D, zero + K_CHUNK_FFN2)
    if IN_O and IN_Q:
        if kind == 3:
            a_hi, a_lo, w_hi, w_lo, b, K, N, kc = (att_hi_ptr, att_lo_ptr, wo_hi_ptr, wo_lo_ptr, bo_ptr, zero + D,
                                                   zero + D, zero + K_CHUNK_O)
    if IN_1 and (IN_Q or IN_O):
        if kind == 5:
            a_hi, a_lo, w_hi, w_lo, b, K, N, kc = (ln2_hi_ptr, ln2_lo_ptr, w1_hi_ptr, w1_lo_ptr, b1_ptr, zero + D,
                                                   zero + 4 * D, zero + D)
    if IN_2 and (IN_Q or IN_O or IN_1):
        if kind == 6:
            a_hi, a_lo, w_hi, w_lo, b, K, N, kc = (f_hi_ptr, f_lo_ptr, w2_hi_ptr, w2_lo_ptr, b2_ptr, zero + 4 * D,
                                                   zero + D, zero + K_CHUNK_FFN2)
    _gemm_task(kind, l, m, n, s, a_hi, a_lo, w_hi, w_lo, b, K, N, kc, r_ptr, q_hi_ptr, q_lo_ptr, f_hi_ptr, f_lo_ptr,
               B, S, D, H, DH, BLOCK_M, BLOCK_N, BLOCK_K, EVEN, SCHEME, SCHEME_FFN2, GELU, DOT_PREC, NUM_STAGES, GPU)


@triton.jit
def _wait_task(row_ptr, ctr_ptr, goal_ptr, err_ptr, t, epoch, spin_limit, MAX_WAITS: tl.constexpr,
               GPU: tl.constexpr):
    """Wait for every counter task ``t`` names (row ``row_ptr`` of the task table) to reach epoch x its goal; a
    wait that gives up adds 1 to err[0] and records t in err[1]."""
    n_waits = tl.load(row_ptr + 5)
    bad = 0
    for i in tl.static_range(MAX_WAITS):
        if i < n_waits:
            c = tl.load(row_ptr + TASK_HEADER + i)
            bad += wait_counter(ctr_ptr + c, tl.load(goal_ptr + c) * epoch, spin_limit, GPU)
    if bad != 0:
        tl.atomic_add(err_ptr, 1)
        tl.atomic_xchg(err_ptr + 1, t)
    tl.debug_barrier()


@triton.jit
def _wait_task_parallel(row_ptr, ctr_ptr, err_ptr, t, epoch, spin_limit, MAX_WAITS: tl.constexpr,
                        MAX_SIGNALS: tl.constexpr, MAX_WAITS_P2: tl.constexpr, GPU: tl.constexpr):
    """``_wait_task`` with every counter of the task polled at once (``wait: parallel``): the ids and goals come
    from the task row (``host.task_table``), so one round trip after the row starts the polls; the unused slots
    name the dummy counter 0 (goal 0: always reached)."""
    offs = tl.arange(0, MAX_WAITS_P2)
    m = offs < MAX_WAITS
    ids = tl.load(row_ptr + TASK_HEADER + offs, mask=m, other=0)
    goals = tl.load(row_ptr + TASK_HEADER + MAX_WAITS + MAX_SIGNALS + offs, mask=m, other=0) * epoch
    bad = wait_counters(ctr_ptr + ids, goals, spin_limit, GPU)
    if bad != 0:
        tl.atomic_add(err_ptr, 1)
        tl.atomic_xchg(err_ptr + 1, t)
    tl.debug_barrier()


@triton.jit
def _signal_task(row_ptr, ctr_ptr, MAX_WAITS: tl.constexpr, MAX_SIGNALS: tl.constexpr, GPU: tl.constexpr):
    """Publish the task of table row ``row_ptr``: CTA barrier (every thread's stores and atomics issued), then one
    release per counter it signals."""
    tl.debug_barrier()
    n_signals = tl.load(row_ptr + 6)
    for i in tl.static_range(MAX_SIGNALS):
        if i < n_signals:
            signal_counter(ctr_ptr + tl.load(row_ptr + TASK_HEADER + MAX_WAITS + i), GPU)


@triton.jit(do_not_specialize=["n_tasks", "epoch", "spin_limit"])
def _dag_fwd(
    x_ptr,                  # [M, D] fp32 input (read only)
    y_ptr,                  # [M, D] fp32 output
    r_ptr,                  # [M, D] fp32 residual stream
    ln1_hi_ptr, ln1_lo_ptr,  # [M, D] split LN1 (A of QKV)
    qkv_hi_ptr, qkv_lo_ptr,  # [L, 3, B, H, S, DH] split q | k | v, head-major
    att_hi_ptr, att_lo_ptr,  # [M, D] split attention output (A of the output projection)
    ln2_hi_ptr, ln2_lo_ptr,  # [M, D] split LN2 (A of FFN1)
    f_hi_ptr, f_lo_ptr,     # [4, M, D] split GELU(FFN1) (A of FFN2), in column blocks of D
    ln1w_ptr, ln1b_ptr,     # [L, D]
    wqkv_hi_ptr, wqkv_lo_ptr, bqkv_ptr,  # [L, 3D / BN, D, BN] W_qkv^T tile slabs (parts), [L, 3D]
    wo_hi_ptr, wo_lo_ptr, bo_ptr,        # [L, D / BN, D, BN], [L, D]
    ln2w_ptr, ln2b_ptr,     # [L, D]
    w1_hi_ptr, w1_lo_ptr, b1_ptr,        # [L, 4D / BN, D, BN], [L, 4D]
    w2_hi_ptr, w2_lo_ptr, b2_ptr,        # [L, D / BN, 4D, BN], [L, D]
    lnfw_ptr, lnfb_ptr,     # [D]
    tab_ptr,                # [n_tasks, TASK_WIDTH] int32 task table in queue order (graph.py)
    order_ptr,              # QUEUE static: [GRID + 1] list offsets, then [n_tasks] task indices; else unused
    ctr_ptr,                # [n_counters] int32 dependency counters (monotonic across launches)
    goal_ptr,               # [n_counters] int32 signals per counter per launch
    head_ptr,               # [1] int32 queue head (QUEUE queue; monotonic across launches)
    err_ptr,                # [2] int32: waits that gave up, the last task that gave up
    trace_ptr,              # TRACE: [n_tasks, 8] int64 per task: ticket, wait done, task done (%globaltimer ns),
                            # program << 16 | SM, work done (before the signal), 5-7 form ws only; else unused
    n_tasks,                # tasks in the graph
    epoch,                  # launches so far, this one included (>= 1)
    spin_limit,             # polls before a wait gives up
    qk_scale,               # log2(e) / sqrt(DH)
    B: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
    CAUSAL: tl.constexpr, GRID: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_M_LN: tl.constexpr, LN_ROWS: tl.constexpr, BLOCK_K: tl.constexpr,
    K_CHUNK_O: tl.constexpr, K_CHUNK_FFN2: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr,
    BDH: tl.constexpr, BD: tl.constexpr, EVEN: tl.constexpr,
    N_SITES: tl.constexpr, SITE_QKV: tl.constexpr, SITE_O: tl.constexpr, SITE_FFN1: tl.constexpr,
    SITE_FFN2: tl.constexpr, SITE_BLOCK_N: tl.constexpr, SITE_SCHEME: tl.constexpr,
    SCHEME_QKV: tl.constexpr, SCHEME_O: tl.constexpr, SCHEME_FFN1: tl.constexpr, SCHEME_FFN2: tl.constexpr,
    GELU: tl.constexpr, QUEUE: tl.constexpr, MAX_WAITS: tl.constexpr, MAX_SIGNALS: tl.constexpr,
    TASK_WIDTH: tl.constexpr, NUM_STAGES: tl.constexpr, DOT_PREC: tl.constexpr, GPU: tl.constexpr,
    WGMMA_CHAIN: tl.constexpr,  # (compile-time pass choice, host.compile_context: part of the cache key only)
    TRACE: tl.constexpr,    # stamp every task into trace_ptr (host.task_profile; GPU only)
    ATTN_STAGES: tl.constexpr,  # attention key loop: 0 every block under a branch | n software-pipelined, n stages
    WAIT: tl.constexpr,     # serial: thread 0 polls the task's counters in turn | parallel: all at once
    MAX_WAITS_P2: tl.constexpr,  # MAX_WAITS rounded up to a power of two (the parallel wait's vector)
):
    M: tl.constexpr = B * S
    pid = tl.program_id(0)
    if QUEUE == "queue":  # every launch takes n_tasks + GRID tickets (each program's last one finds no task)
        base = (epoch - 1) * (n_tasks + GRID)
        pos = tl.atomic_add(head_ptr, 1, sem="relaxed") - base
        end = n_tasks
    else:
        pos = tl.load(order_ptr + pid)
        end = tl.load(order_ptr + pid + 1)
    while pos < end:
        if QUEUE == "queue":
            t = pos
        else:
            t = tl.load(order_ptr + GRID + 1 + pos)
        row = tab_ptr + t * TASK_WIDTH
        kind = tl.load(row)
        l = tl.load(row + 1)
        a = tl.load(row + 2)
        b = tl.load(row + 3)
        c = tl.load(row + 4)
        z = tl.multiple_of(tl.load(row + 7), 1024)  # 0 (see _ln_task)
        if TRACE:
            tl.store(trace_ptr + TRACE_COLS * t, globaltimer(pid))
        if WAIT == "parallel":
            _wait_task_parallel(row, ctr_ptr, err_ptr, t, epoch, spin_limit, MAX_WAITS, MAX_SIGNALS, MAX_WAITS_P2, GPU)
        else:
            _wait_task(row, ctr_ptr, goal_ptr, err_ptr, t, epoch, spin_limit, MAX_WAITS, GPU)
        if TRACE:
            tl.store(trace_ptr + TRACE_COLS * t + 1, globaltimer(pid))
        if (kind == 0) | (kind == 4) | (kind == 7):
            _ln_task(kind, l, a, z, x_ptr, r_ptr, y_ptr, ln1_hi_ptr, ln1_lo_ptr, ln2_hi_ptr, ln2_lo_ptr, ln1w_ptr,
                     ln1b_ptr, ln2w_ptr, ln2b_ptr, lnfw_ptr, lnfb_ptr, M, D, BLOCK_M_LN, BD, LN_ROWS, SCHEME_QKV,
                     SCHEME_FFN1, GPU)
        elif kind == 2:
            _attn_task(l, a, b, c, qkv_hi_ptr, qkv_lo_ptr, att_hi_ptr, att_lo_ptr, qk_scale, B, S, D, H, DH, CAUSAL,
                       BLOCK_Q, BLOCK_KV, BDH, SCHEME_O, DOT_PREC, ATTN_STAGES, GPU)
        else:  # a GEMM (kinds 1, 3, 5, 6): on its site (one per distinct tile width and scheme)
            site = tl.where(kind == 1, SITE_QKV, tl.where(kind == 3, SITE_O, tl.where(kind == 5, SITE_FFN1, SITE_FFN2)))
            for j in tl.static_range(N_SITES):  # (SITE_BLOCK_N[j], SITE_SCHEME[j] passed inline: a constexpr
                if site == j:                      # assigned in an unrolled loop cannot be reassigned)
                    _gemm_site(kind, l, a, b, c, ln1_hi_ptr, ln1_lo_ptr, att_hi_ptr, att_lo_ptr, ln2_hi_ptr, ln2_lo_ptr,
                               f_hi_ptr, f_lo_ptr, wqkv_hi_ptr, wqkv_lo_ptr, bqkv_ptr, wo_hi_ptr, wo_lo_ptr, bo_ptr,
                               w1_hi_ptr, w1_lo_ptr, b1_ptr, w2_hi_ptr, w2_lo_ptr, b2_ptr, r_ptr, qkv_hi_ptr, qkv_lo_ptr,
                               j, SITE_QKV, SITE_O, SITE_FFN1, SITE_FFN2, K_CHUNK_O, K_CHUNK_FFN2, B, S, D, H, DH,
                               BLOCK_M, tl.constexpr(SITE_BLOCK_N[j]), BLOCK_K, EVEN, tl.constexpr(SITE_SCHEME[j]),
                               SCHEME_FFN2, GELU, DOT_PREC,
                               NUM_STAGES, GPU)
        if TRACE:
            tl.store(trace_ptr + TRACE_COLS * t + 4, globaltimer(pid))
        _signal_task(row, ctr_ptr, MAX_WAITS, MAX_SIGNALS, GPU)
        if TRACE:
            tl.store(trace_ptr + TRACE_COLS * t + 2, globaltimer(pid))
            tl.store(trace_ptr + TRACE_COLS * t + 3, (pid.to(tl.int64) << 16) | smid(pid).to(tl.int64))
        if QUEUE == "queue":
            pos = tl.atomic_add(head_ptr, 1, sem="relaxed") - base
        else:
            pos += 1
