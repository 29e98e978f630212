"""seqres: the sequence-resident megakernel — the whole forward pass (L layers + final LayerNorm) in one
Triton launch, one group of R co-resident programs (``SPLIT``) per G consecutive sequences (``SEQS_PER_PROGRAM``).

Schedule of one group (rows ``row0 .. row0 + G*S`` of the flattened [B*S, D] activations):

    copy    y <- x                                    (y holds the residual stream from here on)
    per layer l:
      ln1   x_hi, x_lo = split(LN1(y))                bf16 hi/lo parts of the GEMM's A operand
      qkv   q, k, v = x @ Wqkv + b                    split by the epilogue (ATTN_PRESPLIT)
      attn  a = softmax(q k^T / sqrt(dh)) v           per (sequence, head, query block), online softmax
      oproj y = y + a @ Wo + b_o
      ln2   x_hi, x_lo = split(LN2(y))
      ffn1  f = GELU(x @ W1 + b_1)                    split by the epilogue
      ffn2  y = y + f @ W2 + b_2
    final   y = LNf(y)                                in place, row blocks

Between phases the group synchronises: ``tl.debug_barrier()`` inside a program, plus a flag barrier across the
R programs of a group when R > 1 (``group_barrier``: release/acquire flags in global memory, never a device-wide
barrier). With R == 1 (the only valid setting under TRITON_INTERPRET) one program does everything. Every GEMM is
bf16x3 on weights that ``prepare`` split into bf16 hi/lo rows once (``PRESPLIT``), its A operand split by the phase
before it; a phase's (tile, K step) pairs are shared by the R programs (``_linear_phase_flat``). Scratch lives in
global memory and stays mostly in L2. The constexprs of ``_seqres_fwd`` are the parameters of
``config/variant/seqres.yaml`` in capitals, with the values ``host.prepare_meta`` derives.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..common.tl_helpers import (dot_split, gelu_log2poly, globaltimer as _now, group_barrier, layernorm_rows,
                                 spin_flags, split_bf16_trunc, split_f16)

LN_EPS = tl.constexpr(1e-5)
WEIGHT_ROWS = tl.constexpr(2)  # presplit weight rows per fp32 row: hi, lo (an f16_w1 weight: one fp16 row)


@triton.jit
def _sync(flags_ptr, rank, target, err_ptr, spin_limit,
          SPLIT: tl.constexpr, BLOCK_R: tl.constexpr, BARRIER: tl.constexpr, trace_ptr, TRACE: tl.constexpr):
    """Phase boundary: CTA barrier, plus the group's flag barrier when BARRIER. TRACE: the program's arrival
    and departure times at ``trace_ptr + 2 * target`` and ``+ 1`` (phase profile, ``host.phase_profile``)."""
    if TRACE:
        tl.store(trace_ptr + 2 * target, _now(rank))
    if BARRIER:
        group_barrier(flags_ptr, rank, target, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER)
    else:
        tl.debug_barrier()
    if TRACE:
        tl.store(trace_ptr + 2 * target + 1, _now(rank))


@triton.jit
def _store(o_ptr, olo_ptr, offs, mask, x, PARTS: tl.constexpr):
    """Store fp32 ``x`` at ``o_ptr + offs``, or (PARTS) its hi/lo parts at ``o_ptr``/``olo_ptr`` (1: bf16;
    2: fp32-held, interpreter; 3: fp16, at bf16 pointers reinterpreted; 4: fp16 values fp32-held): how a producer
    hands a flat GEMM phase its pre-split A operand."""
    if PARTS == 3:
        hi, lo = split_f16(x, True)
        o16_ptr, olo16_ptr = _f16_parts(o_ptr, olo_ptr, True)
        tl.store(o16_ptr + offs, hi, mask=mask)
        tl.store(olo16_ptr + offs, lo, mask=mask)
    elif PARTS == 4:
        hi, lo = split_f16(x, False)
        tl.store(o_ptr + offs, hi, mask=mask)
        tl.store(olo_ptr + offs, lo, mask=mask)
    elif PARTS:
        hi, lo = split_bf16_trunc(x, PARTS == 1)
        tl.store(o_ptr + offs, hi, mask=mask)
        tl.store(olo_ptr + offs, lo, mask=mask)
    else:
        tl.store(o_ptr + offs, x, mask=mask)


@triton.jit
def _f16_parts(hi_ptr, lo_ptr, F16: tl.constexpr):
    """The hi/lo scratch pointers read as fp16 (F16: a producer stored fp16 parts there, the f16_w1 schemes; the
    scratch is allocated bf16), else as given."""
    if F16:
        return hi_ptr.to(tl.pointer_type(tl.float16)), lo_ptr.to(tl.pointer_type(tl.float16))
    else:
        return hi_ptr, lo_ptr


@triton.jit
def _w_parts(ptrs, mask, N: tl.constexpr, WROWS: tl.constexpr):
    """The three weight tiles of a bf16x3 product from presplit rows, ``ptrs`` at the hi rows (row stride
    WROWS * N): (hi, lo, hi) — WROWS 3 loads the second hi row, WROWS 2 reuses the first. ``mask`` None:
    unmasked loads (the tile lies inside the weight)."""
    w_hi = _load_tile(ptrs, mask, "")
    if WROWS == 1:  # one part (``ffn2_scheme: f16_w1``): the caller runs two dots on it
        w_lo = w_hi
    else:
        w_lo = _load_tile(ptrs + N, mask, "")
    if WROWS == 3:
        w_hi2 = _load_tile(ptrs + 2 * N, mask, "")
    else:
        w_hi2 = w_hi
    return w_hi, w_lo, w_hi2


@triton.jit
def _row_block(src_ptr, dst_ptr, dlo_ptr, w_ptr, b_ptr, rows, mask, offs_d, mask_d,
               D: tl.constexpr, LN: tl.constexpr, CACHE_MOD: tl.constexpr, PARTS: tl.constexpr,
               cpy_ptr=None, COPY: tl.constexpr = False):
    """dst[rows] = LN(src[rows]) (or a copy), a [BLOCK_M_LN, BLOCK_D] block: as hi/lo parts (PARTS 1: bf16, 2:
    fp32-held) or fp32 (PARTS 0). COPY: also cpy[rows] = src[rows] (the residual stream's start, ``copy_phase:
    fused``)."""
    x = tl.load(src_ptr + rows[:, None] * D + offs_d[None, :], mask=mask, other=0.0, cache_modifier=CACHE_MOD)
    if COPY:
        tl.store(cpy_ptr + rows[:, None] * D + offs_d[None, :], x, mask=mask)
    if LN:
        w = tl.load(w_ptr + offs_d, mask=mask_d, other=0.0)
        b = tl.load(b_ptr + offs_d, mask=mask_d, other=0.0)
        x = layernorm_rows(x, w, b, mask_d, D, LN_EPS)
    if PARTS:
        _store(dst_ptr, dlo_ptr, rows[:, None] * D + offs_d[None, :], mask, x, PARTS)
    else:  # kept out of the helper: routing it through _store changed the tiled path's register allocation
        tl.store(dst_ptr + rows[:, None] * D + offs_d[None, :], x, mask=mask)


@triton.jit
def _rows_phase(src_ptr,            # [*, D] fp32, rows row0.. of this group
                dst_ptr,            # [*, D] fp32 (PARTS: the hi part)
                w_ptr, b_ptr,       # [D] LayerNorm weight / bias (used when LN)
                row0, rank,
                M: tl.constexpr, D: tl.constexpr, LN: tl.constexpr, SPLIT: tl.constexpr,
                BLOCK_M_LN: tl.constexpr, BLOCK_D: tl.constexpr, CACHE_MOD: tl.constexpr,
                PARTS: tl.constexpr = 0, dlo_ptr=None, cpy_ptr=None, COPY: tl.constexpr = False):
    """dst = LN(src) (or a copy) for the group's M rows, row blocks round-robin over the R programs.
    PARTS (the A operand of a flat GEMM phase, split once instead of once per N tile): dst + dlo = the
    result as hi/lo parts (1: bf16, 2: fp32-held for the interpreter). COPY: cpy = src as well (same rows)."""
    NT: tl.constexpr = (M + BLOCK_M_LN - 1) // BLOCK_M_LN
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    for i in range(0, (NT + SPLIT - 1) // SPLIT):
        t = i * SPLIT + rank
        # rows past M are masked, so a tile index past NT (when R does not divide NT) is a no-op
        offs_m = t * BLOCK_M_LN + tl.arange(0, BLOCK_M_LN)
        _row_block(src_ptr, dst_ptr, dlo_ptr, w_ptr, b_ptr, row0 + offs_m, (offs_m < M)[:, None] & mask_d[None, :],
                   offs_d, mask_d, D, LN, CACHE_MOD, PARTS, cpy_ptr, COPY)


@triton.jit
def _attention_phase(qkv_ptr,       # [*, 3D] fp32 q | k | v, head j at columns j*DH (QKV_PARTS: the hi part)
                     o_ptr,         # [*, D] fp32 merged heads (SPLIT_OUT: the bf16 hi part)
                     olo_ptr,       # [*, D] the lo part (SPLIT_OUT only)
                     row0, rank,
                     qk_scale,      # log2(e) / sqrt(DH)
                     S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                     SEQS_PER_PROGRAM: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr, SPLIT: tl.constexpr,
                     BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_DH: tl.constexpr, CACHE_MOD: tl.constexpr,
                     SPLIT_OUT: tl.constexpr = 0, qlo_ptr=None, QKV_PARTS: tl.constexpr = 0,
                     ATTN_STAGES: tl.constexpr = 0,
                     ATTN_OPROJ: tl.constexpr = 0, wo_ptr=None, bo_ptr=None, y_ptr=None, WROWS: tl.constexpr = 2,
                     BLOCK_N2: tl.constexpr = 64, BLOCK_D: tl.constexpr = 16, PACK_SEQ: tl.constexpr = 0,
                     ATTN_KV_SPLIT: tl.constexpr = 0, stat_ptr=None, pflag_ptr=None, ptarget=0, spin_limit=0,
                     err_ptr=None,
                     AO_WEIGHTS: tl.constexpr = "loop"):
    """Attention of the group's G sequences (PACK_SEQ > 0, ``attn_pack``: G packs of S rows, each holding S / PACK_SEQ
    sequences of PACK_SEQ rows that attend only within themselves); (sequence, head, query block) tiles round-robin over
    R. CAUSAL: odd rounds run in mirrored rank order, so a program that drew a short (early) query block in one round
    draws a long one in the next. SPLIT_OUT (flat GEMM loops): write the output as hi/lo parts (1: bf16, 2: fp32-held,
    interpreter). QKV_PARTS: q, k, v arrive pre-split by the QKV epilogue (hi at ``qkv_ptr``, lo at ``qlo_ptr``; 1:
    bf16, 2: fp32-held), so every dot is three dots on the parts (PREC is then the parts' input_precision) and only p is
    split here. ATTN_STAGES > 0: software-pipelining depth of the attention loops (their buffers set the kernel's shared
    memory when q, k, v are bf16 parts); 0: the kernel's num_stages. ATTN_OPROJ (``attn_oproj``): each tile also
    multiplies its output by its head's rows of Wo and adds the product into y with atomics (head 0 adds b_o): the
    output projection without its own phase (``_attention_oproj``). ATTN_KV_SPLIT (``attn_kv_split``, with ATTN_OPROJ, R
    >= 2 * tiles): programs 2t and 2t + 1 take tile t's two halves of the key blocks; each publishes its rows' softmax
    state (max, sum) in ``stat_ptr`` and on its flag (``pflag_ptr``, release), waits for its partner's (acquire), scales
    its unnormalised output by its share of the combined normaliser and adds its own output projection of it into y (the
    projection is linear; half 0 adds b_o). AO_WEIGHTS (``ao_weights``, with ATTN_OPROJ): "loop" = the projection in
    BLOCK_N2-wide column blocks, each loading its weights after the attention; "late" = one BLOCK_D-wide block whose
    weights are loaded after the key loop, before the output is normalised (ATTN_KV_SPLIT: before the exchange with the
    partner); "early" = the same weights loaded before the key loop."""
    NQB: tl.constexpr = (S + BLOCK_Q - 1) // BLOCK_Q
    NT: tl.constexpr = SEQS_PER_PROGRAM * H * NQB
    if ATTN_KV_SPLIT:
        if rank < 2 * NT:
            t = rank // 2
            _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, t // (H * NQB), (t // NQB) % H, t % NQB, qk_scale,
                            S, D, H, DH, CAUSAL, PREC, BLOCK_Q, BLOCK_KV, BLOCK_DH, CACHE_MOD, SPLIT_OUT, qlo_ptr,
                            QKV_PARTS, ATTN_STAGES,
                            ATTN_OPROJ, wo_ptr, bo_ptr, y_ptr, WROWS, BLOCK_N2, BLOCK_D, PACK_SEQ, ATTN_KV_SPLIT,
                            rank, stat_ptr, pflag_ptr, ptarget,
                            spin_limit, err_ptr, AO_WEIGHTS)
    else:
        for i in tl.range(0, (NT + SPLIT - 1) // SPLIT, num_stages=ATTN_STAGES if ATTN_STAGES > 0 else None):
            if CAUSAL:
                t = i * SPLIT + tl.where(i % 2 == 1, SPLIT - 1 - rank, rank)
            else:
                t = i * SPLIT + rank
            if NT % SPLIT == 0:
                _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, t // (H * NQB), (t // NQB) % H, t % NQB, qk_scale,
                                S, D, H, DH, CAUSAL, PREC, BLOCK_Q, BLOCK_KV, BLOCK_DH, CACHE_MOD, SPLIT_OUT, qlo_ptr,
                                QKV_PARTS, ATTN_STAGES,
                                ATTN_OPROJ, wo_ptr, bo_ptr, y_ptr, WROWS, BLOCK_N2, BLOCK_D, PACK_SEQ,
                                AO_WEIGHTS=AO_WEIGHTS)
            else:
                if t < NT:
                    _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, t // (H * NQB), (t // NQB) % H, t % NQB,
                                    qk_scale, S, D, H, DH, CAUSAL, PREC, BLOCK_Q, BLOCK_KV, BLOCK_DH, CACHE_MOD,
                                    SPLIT_OUT, qlo_ptr, QKV_PARTS,
                                    ATTN_STAGES, ATTN_OPROJ, wo_ptr, bo_ptr, y_ptr, WROWS, BLOCK_N2, BLOCK_D,
                                    PACK_SEQ, AO_WEIGHTS=AO_WEIGHTS)


@triton.jit
def _attention_phase_flat(qkv_ptr, o_ptr, olo_ptr, row0, rank, qk_scale,
                          S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                          SEQS_PER_PROGRAM: tl.constexpr,
                          CAUSAL: tl.constexpr, PREC: tl.constexpr, SPLIT: tl.constexpr, BLOCK_Q: tl.constexpr,
                          BLOCK_KV: tl.constexpr, BLOCK_DH: tl.constexpr, CACHE_MOD: tl.constexpr,
                          SPLIT_OUT: tl.constexpr,
                          qlo_ptr, QKV_PARTS: tl.constexpr, ATTN_STAGES: tl.constexpr):
    """``_attention_phase`` as ONE loop over the program's (tile, key block) pairs (``attn_loop: flat``; q, k, v
    pre-split, no fusions): the software pipeliner then loads the next tile's q and first key block while the
    current tile finishes, as the flat GEMM loop does for its tiles. A tile's first key block restarts the online
    softmax by setting the row maxima to -inf (its rescale factor exp2(-inf - m) = 0 clears the sum and the output);
    its last one normalises and stores the output. Causal tiles run every key block, the ones past the query block
    fully masked (every row keeps a finite maximum from key block 0, so they add nothing). Tiles are taken
    round-robin (causal: odd rounds in mirrored rank order), as in ``_attention_phase``."""
    NQB: tl.constexpr = (S + BLOCK_Q - 1) // BLOCK_Q
    NT: tl.constexpr = SEQS_PER_PROGRAM * H * NQB
    NKV: tl.constexpr = (S + BLOCK_KV - 1) // BLOCK_KV
    ITERS: tl.constexpr = ((NT + SPLIT - 1) // SPLIT) * NKV
    LDQ: tl.constexpr = (3 + (QKV_PARTS != 0)) * D  # as in _attention_block
    offs_d = tl.arange(0, BLOCK_DH)
    mask_d = offs_d < DH
    m_i = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_Q,), tl.float32)
    acc = tl.zeros((BLOCK_Q, BLOCK_DH), tl.float32)
    for it in tl.range(0, ITERS, num_stages=ATTN_STAGES if ATTN_STAGES > 0 else None):
        i = it // NKV
        j = it - i * NKV
        if CAUSAL:
            t = i * SPLIT + tl.where(i % 2 == 1, SPLIT - 1 - rank, rank)
        else:
            t = i * SPLIT + rank
        tc = tl.minimum(t, NT - 1)  # a round past the tiles (R not dividing NT) recomputes the last one, unstored
        g = tc // (H * NQB)
        hd = (tc // NQB) % H
        qb = tc % NQB
        base = row0 + g * S
        offs_q = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
        mask_q = offs_q < S
        q_offs = (base + offs_q)[:, None] * LDQ + hd * DH + offs_d[None, :]
        q = tl.load(qkv_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0, cache_modifier=CACHE_MOD)
        q_lo = tl.load(qlo_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0, cache_modifier=CACHE_MOD)
        m_i = tl.where(j == 0, float("-inf"), m_i)
        m_i, l_i, acc = _attention_block(qkv_ptr, base, q, offs_q, j * BLOCK_KV, m_i, l_i, acc, hd, S, D, DH, CAUSAL,
                                         PREC, BLOCK_KV, BLOCK_DH, CACHE_MOD, qlo_ptr, q_lo, qk_scale, QKV_PARTS, 0)
        if (j == NKV - 1) & (t < NT):
            _store(o_ptr, olo_ptr, (base + offs_q)[:, None] * D + hd * DH + offs_d[None, :],
                   mask_q[:, None] & mask_d[None, :], acc / l_i[:, None], SPLIT_OUT)


@triton.jit
def _attention_block(qkv_ptr, base, q, offs_q, k0, m_i, l_i, acc, hd,
                     S: tl.constexpr, D: tl.constexpr, DH: tl.constexpr, CAUSAL: tl.constexpr,
                     PREC: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_DH: tl.constexpr, CACHE_MOD: tl.constexpr,
                     qlo_ptr=None, q_lo=None, qk_scale=1.0, QKV_PARTS: tl.constexpr = 0, PACK_SEQ: tl.constexpr = 0):
    """One key/value block of the online softmax: returns the updated (m_i, l_i, acc). K and V are both
    loaded before the first dot (V's latency hides behind q k^T and the softmax). PACK_SEQ > 0 (``attn_pack``): the
    tile holds several sequences of PACK_SEQ rows each, and a query attends only to keys of its own sequence; a row
    whose keys all lie in other blocks keeps a zero state through this block (no -inf - -inf)."""
    offs_d = tl.arange(0, BLOCK_DH)
    mask_d = offs_d < DH
    offs_k = k0 + tl.arange(0, BLOCK_KV)
    mask_k = offs_k < S
    LDQ: tl.constexpr = (3 + (QKV_PARTS != 0)) * D  # row stride of q|k|v: 4D when pre-split into the f_hi/f_lo rows
    k_offs = (base + offs_k)[None, :] * LDQ + D + hd * DH + offs_d[:, None]                    # [BLOCK_DH, BLOCK_KV]
    k_mask = mask_d[:, None] & mask_k[None, :]
    v_offs = (base + offs_k)[:, None] * LDQ + 2 * D + hd * DH + offs_d[None, :]                # [BLOCK_KV, BLOCK_DH]
    v_mask = mask_k[:, None] & mask_d[None, :]
    kt = tl.load(qkv_ptr + k_offs, mask=k_mask, other=0.0, cache_modifier=CACHE_MOD)
    v = tl.load(qkv_ptr + v_offs, mask=v_mask, other=0.0, cache_modifier=CACHE_MOD)
    if QKV_PARTS:
        kt_lo = tl.load(qlo_ptr + k_offs, mask=k_mask, other=0.0, cache_modifier=CACHE_MOD)
        v_lo = tl.load(qlo_ptr + v_offs, mask=v_mask, other=0.0, cache_modifier=CACHE_MOD)
        # unscaled q k^T: the scale is applied to the row maxima and inside the exponent (one FMA per score)
        s = dot_split(q, q_lo, kt, kt_lo, tl.zeros((q.shape[0], BLOCK_KV), tl.float32), True, True, PREC)
    else:
        s = tl.dot(q, kt, input_precision=PREC)  # q was scaled on load
    valid = mask_k[None, :]
    if CAUSAL:
        valid = valid & (offs_k[None, :] <= offs_q[:, None])
    if PACK_SEQ > 0:
        valid = valid & ((offs_k // PACK_SEQ)[None, :] == (offs_q // PACK_SEQ)[:, None])
    s = tl.where(valid, s, float("-inf"))
    if QKV_PARTS:  # m_i, m_new: maxima of the scaled scores (qk_scale > 0, so max(s) * scale is the scaled maximum)
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
    else:
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
    if PACK_SEQ > 0:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    if QKV_PARTS:
        p = tl.exp2(s * qk_scale - m_use[:, None])
    else:
        p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if QKV_PARTS:
        p_hi, p_lo = split_bf16_trunc(p, QKV_PARTS == 1)
        acc = acc * alpha[:, None] + dot_split(p_hi, p_lo, v, v_lo, tl.zeros_like(acc), True, True, PREC)
    else:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PREC)
    return m_new, l_i, acc


@triton.jit
def _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, g, hd, qb, qk_scale,
                    S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                    CAUSAL: tl.constexpr, PREC: tl.constexpr,
                    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_DH: tl.constexpr, CACHE_MOD: tl.constexpr,
                    SPLIT_OUT: tl.constexpr, qlo_ptr=None, QKV_PARTS: tl.constexpr = 0, ATTN_STAGES: tl.constexpr = 0,
                    ATTN_OPROJ: tl.constexpr = 0, wo_ptr=None, bo_ptr=None, y_ptr=None, WROWS: tl.constexpr = 2,
                    BLOCK_N2: tl.constexpr = 64, BLOCK_D: tl.constexpr = 16, PACK_SEQ: tl.constexpr = 0,
                    ATTN_KV_SPLIT: tl.constexpr = 0, prank=0, stat_ptr=None, pflag_ptr=None, ptarget=0, spin_limit=0,
                    err_ptr=None, AO_WEIGHTS: tl.constexpr = "loop"):
    """Query block qb of head hd of sequence g (of the group), online softmax over key blocks. PACK_SEQ > 0: "sequence"
    g is a pack of consecutive sequences of PACK_SEQ rows each (``_attention_block``). ATTN_KV_SPLIT: this program
    (``prank``) takes half ``prank % 2`` of the key blocks and combines with its partner ``prank ^ 1``
    (``_attention_phase``)."""
    NKV: tl.constexpr = (S + BLOCK_KV - 1) // BLOCK_KV
    offs_d = tl.arange(0, BLOCK_DH)
    mask_d = offs_d < DH
    base = row0 + g * S
    offs_q = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
    mask_q = offs_q < S
    LDQ: tl.constexpr = (3 + (QKV_PARTS != 0)) * D  # as in _attention_block
    q_offs = (base + offs_q)[:, None] * LDQ + hd * DH + offs_d[None, :]
    q = tl.load(qkv_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0,
                cache_modifier=CACHE_MOD)  # [BLOCK_Q, BLOCK_DH]
    if QKV_PARTS:  # the scale is applied to q k^T (q's parts stay as split)
        q_lo = tl.load(qlo_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0, cache_modifier=CACHE_MOD)
    else:
        q = q * qk_scale
        q_lo = q
    if ATTN_OPROJ and AO_WEIGHTS != "loop":  # the head's rows of Wo as one BLOCK_D-wide block (``_attention_oproj_w``)
        wo_offs = (hd * DH + offs_d)[:, None] * (WROWS * D) + tl.arange(0, BLOCK_D)[None, :]
        if DH == BLOCK_DH and D == BLOCK_D:
            wo_mask = None
        else:
            wo_mask = mask_d[:, None] & (tl.arange(0, BLOCK_D) < D)[None, :]
        if AO_WEIGHTS == "early":
            wo_hi, wo_lo, wo_hi2 = _w_parts(wo_ptr + wo_offs, wo_mask, D, WROWS)
    m_i = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_Q,), tl.float32)
    acc = tl.zeros((BLOCK_Q, BLOCK_DH), tl.float32)
    # ATTN_KV_SPLIT: this program's half of the key blocks (not causal: every row has keys in both halves)
    NKVP: tl.constexpr = NKV // 2 if ATTN_KV_SPLIT else NKV
    j0 = (prank % 2) * NKVP if ATTN_KV_SPLIT else 0
    # constexpr trip count; causal skips key blocks past the query block (a runtime guard, not a bound,
    # because the interpreter cannot loop to a runtime bound inside a device function)
    for j in tl.range(0, NKVP, num_stages=ATTN_STAGES if ATTN_STAGES > 0 else None):
        if CAUSAL:
            if j * BLOCK_KV < (qb + 1) * BLOCK_Q:
                m_i, l_i, acc = _attention_block(qkv_ptr, base, q, offs_q, j * BLOCK_KV, m_i, l_i, acc, hd,
                                                 S, D, DH, CAUSAL, PREC, BLOCK_KV, BLOCK_DH, CACHE_MOD, qlo_ptr, q_lo,
                                                 qk_scale, QKV_PARTS,
                                                 PACK_SEQ)
        else:
            m_i, l_i, acc = _attention_block(qkv_ptr, base, q, offs_q, (j0 + j) * BLOCK_KV, m_i, l_i, acc, hd,
                                             S, D, DH, CAUSAL, PREC, BLOCK_KV, BLOCK_DH, CACHE_MOD, qlo_ptr, q_lo,
                                             qk_scale, QKV_PARTS,
                                             PACK_SEQ)
    if ATTN_OPROJ and AO_WEIGHTS == "late":
        wo_hi, wo_lo, wo_hi2 = _w_parts(wo_ptr + wo_offs, wo_mask, D, WROWS)
    if ATTN_KV_SPLIT:  # this half's share of the output normalised over both halves (the partner's state by a flag)
        out = _kv_half_combine(acc, m_i, l_i, stat_ptr, pflag_ptr, prank, ptarget, spin_limit, err_ptr, BLOCK_Q,
                               QKV_PARTS == 1)
    elif PACK_SEQ > 0:  # padding rows past the last pack have no key of their own sequence: 0, not 0 / 0
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    else:
        out = acc / l_i[:, None]
    if ATTN_OPROJ:
        if AO_WEIGHTS != "loop":
            _attention_oproj_w(out, wo_hi, wo_lo, wo_hi2, bo_ptr, y_ptr, base + offs_q, mask_q, hd, D, PREC, BLOCK_D,
                               SPLIT_OUT, ATTN_KV_SPLIT, prank % 2)
        else:
            _attention_oproj(out, wo_ptr, bo_ptr, y_ptr, base + offs_q, mask_q, hd, D, DH, PREC, BLOCK_DH, SPLIT_OUT,
                             WROWS, BLOCK_N2, ATTN_KV_SPLIT, prank % 2)
    else:
        _store(o_ptr, olo_ptr, (base + offs_q)[:, None] * D + hd * DH + offs_d[None, :],
               mask_q[:, None] & mask_d[None, :], out, SPLIT_OUT)


@triton.jit
def _kv_merge_scale(m_i, l_i, m_o, l_o):
    """The factor that turns this half's unnormalised output (state m_i, l_i: max and sum of exp2 over its keys) into
    its share of the softmax over both halves (the other: m_o, l_o): exp2(m_i - m) / (l_i exp2(m_i - m) + l_o
    exp2(m_o - m)), m the larger max (``attn_kv_split``)."""
    m = tl.maximum(m_i, m_o)
    a = tl.exp2(m_i - m)
    return a / (l_i * a + l_o * tl.exp2(m_o - m))


@triton.jit
def _kv_half_combine(acc, m_i, l_i, stat_ptr, pflag_ptr, prank, ptarget, spin_limit, err_ptr, BLOCK_Q: tl.constexpr,
                     LD: tl.constexpr):
    """Exchange the softmax state with the partner program (``prank ^ 1``) and return this half's share of the
    normalised output: publish (m_i, l_i) in this program's slot of ``stat_ptr`` ([R, 2, BLOCK_Q] fp32), release its
    flag (``ptarget``), spin on the partner's flag (acquire; LD: ``ld.acquire``, else atomics; at most ``spin_limit``
    polls, then ``err_ptr`` = ptarget), read its state through L2 (GPU only: the partner runs concurrently)."""
    offs = tl.arange(0, BLOCK_Q)
    tl.store(stat_ptr + prank * (2 * BLOCK_Q) + offs, m_i)
    tl.store(stat_ptr + prank * (2 * BLOCK_Q) + BLOCK_Q + offs, l_i)
    tl.debug_barrier()
    tl.atomic_xchg(pflag_ptr + prank, ptarget, sem="release", scope="gpu")
    one = tl.arange(0, 1)
    other = prank ^ 1
    spin_flags(pflag_ptr + other + one, one < 1, ptarget, err_ptr, spin_limit, LD)
    tl.debug_barrier()
    m_o = tl.load(stat_ptr + other * (2 * BLOCK_Q) + offs, cache_modifier=".cg")
    l_o = tl.load(stat_ptr + other * (2 * BLOCK_Q) + BLOCK_Q + offs, cache_modifier=".cg")
    return acc * _kv_merge_scale(m_i, l_i, m_o, l_o)[:, None]


@triton.jit
def _attention_oproj(out, wo_ptr, bo_ptr, y_ptr, rows, mask_q, hd,
                     D: tl.constexpr, DH: tl.constexpr, PREC: tl.constexpr, BLOCK_DH: tl.constexpr,
                     PARTS: tl.constexpr, WROWS: tl.constexpr, BLOCK_N2: tl.constexpr, ATTN_KV_SPLIT: tl.constexpr = 0,
                     half=0):
    """y[rows] += out @ Wo[hd*DH : (hd+1)*DH, :] (+ b_o for head 0; ATTN_KV_SPLIT: head 0's half 0) with atomics, in
    BLOCK_N2-wide column blocks: ``out`` [BLOCK_Q, BLOCK_DH] is head hd's attention output, split into bf16 hi/lo in
    registers (PARTS 1; 2: fp32-held, interpreter) for three dots on the presplit weight rows (``attn_oproj``)."""
    o_hi, o_lo = split_bf16_trunc(out, PARTS == 1)
    offs_d = tl.arange(0, BLOCK_DH)
    mask_d = offs_d < DH
    w_offs = (hd * DH + offs_d)[:, None] * (WROWS * D) + tl.arange(0, BLOCK_N2)[None, :]  # [BLOCK_DH, BLOCK_N2]: hi
    for n in range(0, (D + BLOCK_N2 - 1) // BLOCK_N2):
        offs_n = n * BLOCK_N2 + tl.arange(0, BLOCK_N2)
        mask_n = offs_n < D
        w_hi, w_lo, w_hi2 = _w_parts(wo_ptr + n * BLOCK_N2 + w_offs, mask_d[:, None] & mask_n[None, :], D, WROWS)
        _oproj_block(o_hi, o_lo, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, offs_n, mask_n, hd, D, PREC,
                     ATTN_KV_SPLIT, half)


@triton.jit
def _attention_oproj_w(out, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, hd, D: tl.constexpr, PREC: tl.constexpr,
                       BLOCK_D: tl.constexpr, PARTS: tl.constexpr, ATTN_KV_SPLIT: tl.constexpr = 0, half=0):
    """``_attention_oproj`` in one BLOCK_D-wide column block on weights the caller loaded ([BLOCK_DH, BLOCK_D] hi, lo,
    hi parts of the head's rows of Wo; ``ao_weights``): y[rows] += out @ Wo[head rows, :] (+ b_o for head 0,
    ATTN_KV_SPLIT: its half 0)."""
    o_hi, o_lo = split_bf16_trunc(out, PARTS == 1)
    offs_n = tl.arange(0, BLOCK_D)
    _oproj_block(o_hi, o_lo, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, offs_n, offs_n < D, hd, D, PREC,
                 ATTN_KV_SPLIT, half)


@triton.jit
def _oproj_block(o_hi, o_lo, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, offs_n, mask_n, hd, D: tl.constexpr,
                 PREC: tl.constexpr, ATTN_KV_SPLIT: tl.constexpr, half):
    """y[rows, offs_n] += o @ w (three bf16 products of the split parts) + b_o for head 0 (ATTN_KV_SPLIT: its half 0),
    with atomics: one column block of the attention tile's output projection."""
    o = tl.dot(o_lo, w_hi, tl.zeros((o_hi.shape[0], w_hi.shape[1]), tl.float32), input_precision=PREC)
    o = tl.dot(o_hi, w_lo, o, input_precision=PREC)
    o = tl.dot(o_hi, w_hi2, o, input_precision=PREC)
    bias = tl.load(bo_ptr + offs_n, mask=mask_n, other=0.0)
    if ATTN_KV_SPLIT:
        o += tl.where((hd == 0) & (half == 0), bias, 0.0)[None, :]
    else:
        o += tl.where(hd == 0, bias, 0.0)[None, :]
    tl.atomic_add(y_ptr + rows[:, None] * D + offs_n[None, :], o, mask=mask_q[:, None] & mask_n[None, :],
                  sem="relaxed", scope="gpu")


@triton.jit
def _load_tile(ptrs, mask, CACHE_MOD: tl.constexpr):
    """tl.load with ``mask`` (0 where masked), or unmasked when ``mask`` is None."""
    if mask is None:
        x = tl.load(ptrs, cache_modifier=CACHE_MOD)
    else:
        x = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=CACHE_MOD)
    return x


@triton.jit
def _step_operands(ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                   M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, CACHE_MOD: tl.constexpr, WROWS: tl.constexpr, EVEN: tl.constexpr):
    """The pre-split operands of K step kk of tile (tm, tn): A hi/lo [BLOCK_M, BLOCK_K] and W hi, lo, hi [BLOCK_K,
    BLOCK_N] (the second hi is the first when WROWS == 2). Scalar base + loop-invariant offsets; masks unless EVEN."""
    a_base = (row0 + tm * BLOCK_M) * K + kk * BLOCK_K
    w_base = kk * (BLOCK_K * WROWS * N) + tn * BLOCK_N
    if EVEN:
        a_hi = tl.load(ahi_ptr + a_base + a_offs, cache_modifier=CACHE_MOD)
        a_lo = tl.load(alo_ptr + a_base + a_offs, cache_modifier=CACHE_MOD)
        w_hi = tl.load(w_ptr + w_base + w_offs)
        if WROWS == 1:  # one fp16 part (f16_w1): two dots on it
            w_lo = w_hi
        else:
            w_lo = tl.load(w_ptr + w_base + N + w_offs)
        if WROWS == 3:
            w_hi2 = tl.load(w_ptr + w_base + 2 * N + w_offs)
        else:
            w_hi2 = w_hi
    else:
        mask_m = (tm * BLOCK_M + tl.arange(0, BLOCK_M)) < M
        mask_k = (kk * BLOCK_K + tl.arange(0, BLOCK_K)) < K
        mask_n = (tn * BLOCK_N + tl.arange(0, BLOCK_N)) < N
        amask = mask_m[:, None] & mask_k[None, :]
        wmask = mask_k[:, None] & mask_n[None, :]
        a_hi = tl.load(ahi_ptr + a_base + a_offs, mask=amask, other=0.0, cache_modifier=CACHE_MOD)
        a_lo = tl.load(alo_ptr + a_base + a_offs, mask=amask, other=0.0, cache_modifier=CACHE_MOD)
        w_hi = tl.load(w_ptr + w_base + w_offs, mask=wmask, other=0.0)
        if WROWS == 1:
            w_lo = w_hi
        else:
            w_lo = tl.load(w_ptr + w_base + N + w_offs, mask=wmask, other=0.0)
        if WROWS == 3:
            w_hi2 = tl.load(w_ptr + w_base + 2 * N + w_offs, mask=wmask, other=0.0)
        else:
            w_hi2 = w_hi
    return a_hi, a_lo, w_hi, w_lo, w_hi2


@triton.jit
def _tile_epilogue(acc, b_ptr, r_ptr, o_ptr, olo_ptr, row0, tm, tn, first, whole,
                   M: tl.constexpr, N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   GELU: tl.constexpr, RESID: tl.constexpr, SPLIT_OUT: tl.constexpr, PRESPLIT: tl.constexpr,
                   CACHE_MOD: tl.constexpr, EVEN: tl.constexpr, LDO: tl.constexpr, STREAM_K: tl.constexpr):
    """Finish tile (tm, tn) from its accumulator: bias, GELU (``gelu_log2poly``), residual, store or split store.
    STREAM_K: ``acc`` may be a piece of the tile (``whole`` false), added into o with atomics; the piece holding K
    step 0 (``first``) adds the bias."""
    offs_n = tn * BLOCK_N + tl.arange(0, BLOCK_N)
    # per tile, not hoisted; LDO: the output's row stride when it is not N
    optrs = (row0 + tm * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * (N if LDO == 0 else LDO) + offs_n[None, :]
    if EVEN:
        bias = tl.load(b_ptr + offs_n)
        omask = None
    else:
        mask_n = offs_n < N
        bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0)
        omask = ((tm * BLOCK_M + tl.arange(0, BLOCK_M)) < M)[:, None] & mask_n[None, :]
    if STREAM_K:
        tl.static_assert(RESID and not GELU and SPLIT_OUT == 0, "stream-K pieces add into the residual output")
        acc += tl.where(first, bias, 0.0)[None, :]
        if whole:
            acc += _load_tile(r_ptr + optrs, omask, CACHE_MOD)
            tl.store(o_ptr + optrs, acc, mask=omask)
        else:
            tl.atomic_add(o_ptr + optrs, acc, mask=omask, sem="relaxed", scope="gpu")
    else:
        acc += bias[None, :]
        if GELU:  # log2 Phi(-|x|) polynomial and one exp2 (tl_helpers.gelu_log2poly)
            acc = gelu_log2poly(acc, PRESPLIT == 1)
        if RESID:
            acc += _load_tile(r_ptr + optrs, omask, CACHE_MOD)
        _store(o_ptr, olo_ptr, optrs, omask, acc, SPLIT_OUT)


@triton.jit
def _nested_step(acc_lh, acc_hl, acc_hh, ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                 M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, CACHE_MOD: tl.constexpr, WROWS: tl.constexpr, EVEN: tl.constexpr,
                 PREC: tl.constexpr):
    """K step kk of tile (tm, tn) into three accumulators, one per bf16x3 term (``gemm_loop: nested``)."""
    a_hi, a_lo, w_hi, w_lo, w_hi2 = _step_operands(ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                                                   M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, CACHE_MOD, WROWS, EVEN)
    acc_lh = tl.dot(a_lo, w_hi, acc_lh, input_precision=PREC)
    if WROWS != 1:  # (WROWS 1, f16_w1: a_lo w + a_hi w; acc_hl stays zero)
        acc_hl = tl.dot(a_hi, w_lo, acc_hl, input_precision=PREC)
    acc_hh = tl.dot(a_hi, w_hi2, acc_hh, input_precision=PREC)
    return acc_lh, acc_hl, acc_hh


@triton.jit
def _nested_tile(ahi_ptr, alo_ptr, w_ptr, b_ptr, r_ptr, o_ptr, olo_ptr, row0, t, k_first, k_end, a_offs, w_offs,
                 M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                 GELU: tl.constexpr, RESID: tl.constexpr, SPLIT_OUT: tl.constexpr,
                 PREC: tl.constexpr, PRESPLIT: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CACHE_MOD: tl.constexpr,
                 WROWS: tl.constexpr, EVEN: tl.constexpr, LDO: tl.constexpr, STREAM_K: tl.constexpr,
                 WHOLE: tl.constexpr):
    """K steps [k_first, k_end) of tile t (``gemm_loop: nested``; WHOLE: all KT steps, constexpr bounds) with the
    three bf16x3 terms in three accumulators, then the tile's epilogue."""
    NT_N: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    KT: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    tm = t // NT_N
    tn = t - tm * NT_N
    acc_lh = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)  # a_lo w_hi
    acc_hl = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)  # a_hi w_lo
    acc_hh = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)  # a_hi w_hi
    if WHOLE:
        for kk in range(0, KT):
            acc_lh, acc_hl, acc_hh = _nested_step(acc_lh, acc_hl, acc_hh, ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk,
                                                  a_offs, w_offs, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, CACHE_MOD,
                                                  WROWS, EVEN, PREC)
        _tile_epilogue((acc_lh + acc_hl) + acc_hh, b_ptr, r_ptr, o_ptr, olo_ptr, row0, tm, tn, True, True,
                       M, N, BLOCK_M, BLOCK_N, GELU, RESID, SPLIT_OUT, PRESPLIT, CACHE_MOD, EVEN, LDO, STREAM_K)
    else:
        for kk in range(k_first, k_end):
            acc_lh, acc_hl, acc_hh = _nested_step(acc_lh, acc_hl, acc_hh, ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk,
                                                  a_offs, w_offs, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, CACHE_MOD,
                                                  WROWS, EVEN, PREC)
        _tile_epilogue((acc_lh + acc_hl) + acc_hh, b_ptr, r_ptr, o_ptr, olo_ptr, row0, tm, tn, k_first == 0,
                       (k_first == 0) & (k_end == KT), M, N, BLOCK_M, BLOCK_N, GELU, RESID, SPLIT_OUT, PRESPLIT,
                        CACHE_MOD, EVEN,
                       LDO, STREAM_K)


@triton.jit
def _linear_phase_flat(ahi_ptr, alo_ptr,  # [*, K] A split into hi/lo parts (bf16, or fp32-held: PRESPLIT 2)
                       w_ptr,             # [WROWS*K, N] presplit weight, rows hi, lo(, hi) of row k
                       b_ptr, r_ptr,      # [N] bias; [*, N] residual (RESID; may alias o_ptr)
                       o_ptr, olo_ptr,    # [*, N] output (fp32), or its hi/lo parts (SPLIT_OUT)
                       row0, rank,
                       M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       GELU: tl.constexpr, RESID: tl.constexpr, SPLIT_OUT: tl.constexpr,
                       PREC: tl.constexpr, PRESPLIT: tl.constexpr, SPLIT: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CACHE_MOD: tl.constexpr,
                       WROWS: tl.constexpr, STREAM_K: tl.constexpr = False, LDO: tl.constexpr = 0,
                       NESTED: tl.constexpr = False):
    """o = epilogue(a @ w + b) over this program's share of the phase's (tile, K step) pairs. A comes pre-split
    (LayerNorm applied by ``_rows_phase`` with PARTS, or split by the producer's epilogue); three dots per step (a_lo
    w_hi + a_hi w_lo + a_hi w_hi) on presplit weights.

    Share: a contiguous run of whole tiles per program, or with STREAM_K (residual GEMMs only: o = r += a @ w + b) an
    equal share of the pairs, so a tile may be cut between programs; the pieces of a cut tile are added to o with
    atomics (the piece holding K step 0 adds the bias), whole tiles as usual.

    Loop: NESTED false — ONE loop over the pairs, so the software pipeliner prefetches the next tile's first K steps
    while the current tile finishes; the epilogue runs on a tile's last step (in the loop). Steps past the program's
    share (the last one, when R does not divide the work) load the last valid step again and store nothing. The epilogue
    branch resets the accumulator; compiled as is, ptxas would serialize every wgmma of the kernel (C7514: the epilogue
    reads the step's last dot with no wait before it), so the sm_90 compile runs ``kernels.common.wgmma_passes``
    (``host.compile_context``): the reset becomes the zero-accumulator predicate of the next tile's first dot and the
    wgmma stay asynchronous; with ``wgmma_chain: async`` the waits between the three dots of a step are relaxed as well.
    NESTED true — a loop over tiles around a K loop with the three terms in three accumulators: Triton keeps the three
    dots in flight (``wgmma.wait_group 3``) and ptxas does not serialize them, at the price of a pipeline start per tile
    and 3x the accumulator registers (docs/seqres.md)."""
    NT_N: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    NT: tl.constexpr = ((M + BLOCK_M - 1) // BLOCK_M) * NT_N
    KT: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    T: tl.constexpr = NT * KT
    TPP: tl.constexpr = (NT + SPLIT - 1) // SPLIT
    EVEN: tl.constexpr = (M % BLOCK_M == 0) and (N % BLOCK_N == 0) and (K % BLOCK_K == 0)
    if STREAM_K:
        ITERS: tl.constexpr = (T + SPLIT - 1) // SPLIT
        start = rank * T // SPLIT
        end = (rank + 1) * T // SPLIT
    else:
        ITERS: tl.constexpr = TPP * KT
        start = rank * (TPP * KT)
        end = start + TPP * KT
    a_offs = tl.arange(0, BLOCK_M)[:, None] * K + tl.arange(0, BLOCK_K)[None, :]               # [BLOCK_M, BLOCK_K]
    w_offs = tl.arange(0, BLOCK_K)[:, None] * (WROWS * N) + tl.arange(0, BLOCK_N)[None, :]  # [BLOCK_K, BLOCK_N]: hi
    if NESTED:
        if SPLIT == 1:  # the whole phase with constexpr bounds (the interpreter cannot loop to a runtime bound)
            for t in range(0, NT):
                _nested_tile(ahi_ptr, alo_ptr, w_ptr, b_ptr, r_ptr, o_ptr, olo_ptr, row0, t, 0, KT, a_offs, w_offs,
                             M, N, K, GELU, RESID, SPLIT_OUT, PREC, PRESPLIT, BLOCK_M, BLOCK_N, BLOCK_K, CACHE_MOD,
                             WROWS, EVEN, LDO,
                             STREAM_K, True)
        else:
            if STREAM_K:
                t_first = start // KT
                t_end = (end + KT - 1) // KT
            else:
                t_first = rank * TPP
                t_end = tl.minimum(t_first + TPP, NT)
            for t in range(t_first, t_end):
                if STREAM_K:
                    k_first = tl.maximum(start - t * KT, 0)
                    k_end = tl.minimum(end - t * KT, KT)
                else:
                    k_first = 0
                    k_end = KT
                _nested_tile(ahi_ptr, alo_ptr, w_ptr, b_ptr, r_ptr, o_ptr, olo_ptr, row0, t, k_first, k_end, a_offs,
                             w_offs, M, N, K, GELU, RESID, SPLIT_OUT, PREC, PRESPLIT, BLOCK_M, BLOCK_N, BLOCK_K,
                             CACHE_MOD, WROWS, EVEN, LDO,
                             STREAM_K, not STREAM_K)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for i in range(0, ITERS):
            g = start + i
            valid = (g < end) & (g < T)
            gc = tl.minimum(g, T - 1)
            t = gc // KT
            kk = gc - t * KT
            tm = t // NT_N
            tn = t - tm * NT_N
            a_hi, a_lo, w_hi, w_lo, w_hi2 = _step_operands(ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                                                           M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, CACHE_MOD, WROWS, EVEN)
            acc = tl.dot(a_lo, w_hi, acc, input_precision=PREC)
            if WROWS != 1:  # (WROWS 1, f16_w1: two dots, a_lo w + a_hi w)
                acc = tl.dot(a_hi, w_lo, acc, input_precision=PREC)
            acc = tl.dot(a_hi, w_hi2, acc, input_precision=PREC)
            last = kk == KT - 1
            if STREAM_K:
                last = last | (g == end - 1)
            if valid & last:
                ts = t * KT
                _tile_epilogue(acc, b_ptr, r_ptr, o_ptr, olo_ptr, row0, tm, tn, ts >= start,
                               (ts >= start) & (ts + KT <= end), M, N, BLOCK_M, BLOCK_N, GELU, RESID, SPLIT_OUT,
                                PRESPLIT,
                               CACHE_MOD, EVEN, LDO, STREAM_K)
                # the compile pass (host.compile_context) turns this reset into the next dot's zero-accumulator
                # predicate: nothing writes an accumulator while a wgmma is in flight
                acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)


@triton.jit
def _ffn_fused_phase(xhi_ptr, xlo_ptr,  # [*, D] LN2(y) split into hi/lo parts
                     w1_ptr, b1_ptr,    # [WROWS*D, 4D] presplit W1 (rows hi, lo(, hi) of row k), [4D]
                     w2_ptr, b2_ptr,    # [WROWS*4D, D] presplit W2 (FFN2_F16: [4D, D] fp16), [D]
                     y_ptr,             # [*, D] the residual stream: y += GELU(LN2(y) @ W1 + b1) @ W2 + b2
                     row0, rank,
                     M: tl.constexpr, D: tl.constexpr, PREC: tl.constexpr,
                     PRESPLIT: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr,
                     BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr, CACHE_MOD: tl.constexpr, WROWS: tl.constexpr,
                     FFN2_F16: tl.constexpr = 0, FFN1_F16: tl.constexpr = 0):
    """FFN1 and FFN2 in one phase (``ffn_fused``), split over the hidden dimension: work item (tm, c) computes
    h = GELU(A[tm] @ W1[:, c] + b1[c]) for row block tm and hidden chunk c (BLOCK_H columns; K loop over D),
    splits h into bf16 hi/lo in registers and adds h @ W2[c, :] (three dots of K = BLOCK_H per BLOCK_N2-wide column
    block) into y with atomics; chunk 0 adds b2. No f scratch and no barrier between FFN1 and FFN2; y is
    not read in this phase (the A operand is the LN2 split), so the in-place atomic adds are safe.
    Items are shared out as contiguous runs over the R programs. FFN2_F16 (``ffn2_scheme: f16_w1``): h is split into
    fp16 hi/lo and W2 is one fp16 part ([4D, D]): two dots per column block. FFN1_F16 (``ffn1_scheme: f16_w1``): the A
    operand is LN2's fp16 split and W1 one fp16 part ([D, 4D])."""
    F: tl.constexpr = 4 * D
    W2R: tl.constexpr = 1 if FFN2_F16 else WROWS
    W1R: tl.constexpr = 1 if FFN1_F16 else WROWS
    xhi_ptr, xlo_ptr = _f16_parts(xhi_ptr, xlo_ptr, FFN1_F16 and PRESPLIT == 1)  # (LN2 stored fp16 parts)
    NC: tl.constexpr = (F + BLOCK_H - 1) // BLOCK_H
    NI: tl.constexpr = ((M + BLOCK_M - 1) // BLOCK_M) * NC
    TPP: tl.constexpr = (NI + SPLIT - 1) // SPLIT
    a_offs = tl.arange(0, BLOCK_M)[:, None] * D + tl.arange(0, BLOCK_K)[None, :]              # [BLOCK_M, BLOCK_K]
    w_offs = tl.arange(0, BLOCK_K)[:, None] * (W1R * F) + tl.arange(0, BLOCK_H)[None, :]  # [BLOCK_K, BLOCK_H]: W1 hi
    w2_offs = tl.arange(0, BLOCK_H)[:, None] * (W2R * D) + tl.arange(0, BLOCK_N2)[None, :]  # [BLOCK_H, BLOCK_N2]: W2 hi
    for i in range(0, TPP):  # constexpr trip count (the interpreter cannot loop to a bound computed from the rank)
        it = rank * TPP + i
        if it < NI:
            _ffn_item(xhi_ptr, xlo_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, y_ptr, row0, it, a_offs, w_offs, w2_offs,
                      M, D, PREC, PRESPLIT, BLOCK_M, BLOCK_H, BLOCK_N2, BLOCK_K, CACHE_MOD, WROWS, FFN2_F16, FFN1_F16)


@triton.jit
def _ffn_item(xhi_ptr, xlo_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, y_ptr, row0, it, a_offs, w_offs, w2_offs,
              M: tl.constexpr, D: tl.constexpr, PREC: tl.constexpr, PRESPLIT: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr,
              CACHE_MOD: tl.constexpr,
              WROWS: tl.constexpr, FFN2_F16: tl.constexpr = 0, FFN1_F16: tl.constexpr = 0):
    """Work item ``it`` = (row block tm, hidden chunk c) of ``_ffn_fused_phase``."""
    F: tl.constexpr = 4 * D
    W2R: tl.constexpr = 1 if FFN2_F16 else WROWS
    W1R: tl.constexpr = 1 if FFN1_F16 else WROWS
    NC: tl.constexpr = (F + BLOCK_H - 1) // BLOCK_H
    KT: tl.constexpr = (D + BLOCK_K - 1) // BLOCK_K
    NT2: tl.constexpr = (D + BLOCK_N2 - 1) // BLOCK_N2
    EVEN1: tl.constexpr = (M % BLOCK_M == 0) and (F % BLOCK_H == 0) and (D % BLOCK_K == 0)
    EVEN2: tl.constexpr = (M % BLOCK_M == 0) and (F % BLOCK_H == 0) and (D % BLOCK_N2 == 0)
    tm = it // NC
    c = it - tm * NC
    acc = tl.zeros((BLOCK_M, BLOCK_H), tl.float32)
    for kk in range(0, KT):
        a_hi, a_lo, w_hi, w_lo, w_hi2 = _step_operands(xhi_ptr, xlo_ptr, w1_ptr, row0, tm, c, kk, a_offs, w_offs,
                                                       M, F, D, BLOCK_M, BLOCK_H, BLOCK_K, CACHE_MOD, W1R, EVEN1)
        acc = tl.dot(a_lo, w_hi, acc, input_precision=PREC)
        if W1R != 1:
            acc = tl.dot(a_hi, w_lo, acc, input_precision=PREC)
        acc = tl.dot(a_hi, w_hi2, acc, input_precision=PREC)
    offs_h = c * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
    if EVEN1:
        acc += tl.load(b1_ptr + offs_h)[None, :]
    else:
        acc += tl.load(b1_ptr + offs_h, mask=offs_h < F, other=0.0)[None, :]
    acc = gelu_log2poly(acc, PRESPLIT == 1)
    if not EVEN1:  # hidden columns past 4D (W1 columns and b1 masked to 0 -> GELU(0) = 0 anyway), rows past M
        acc = tl.where((offs_m < M)[:, None] & (offs_h < F)[None, :], acc, 0.0)
    if FFN2_F16:
        h_hi, h_lo = split_f16(acc, PRESPLIT == 1)
    else:
        h_hi, h_lo = split_bf16_trunc(acc, PRESPLIT == 1)
    rows = row0 + offs_m
    for n in range(0, NT2):
        offs_n = n * BLOCK_N2 + tl.arange(0, BLOCK_N2)
        if EVEN2:
            wmask = None
            omask = None
            b2 = tl.load(b2_ptr + offs_n)
        else:
            wmask = (offs_h < F)[:, None] & (offs_n < D)[None, :]
            omask = (offs_m < M)[:, None] & (offs_n < D)[None, :]
            b2 = tl.load(b2_ptr + offs_n, mask=offs_n < D, other=0.0)
        w2_hi, w2_lo, w2_hi2 = _w_parts(w2_ptr + c * (BLOCK_H * W2R * D) + n * BLOCK_N2 + w2_offs, wmask, D, W2R)
        out = tl.zeros((BLOCK_M, BLOCK_N2), tl.float32)
        out = tl.dot(h_lo, w2_hi, out, input_precision=PREC)
        if W2R != 1:
            out = tl.dot(h_hi, w2_lo, out, input_precision=PREC)
        out = tl.dot(h_hi, w2_hi2, out, input_precision=PREC)
        out += tl.where(c == 0, b2, 0.0)[None, :]
        tl.atomic_add(y_ptr + rows[:, None] * D + offs_n[None, :], out, mask=omask, sem="relaxed", scope="gpu")


@triton.jit
def _ln_operand(y_ptr, lnw_ptr, lnb_ptr, row0, tm, M: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_D: tl.constexpr, CACHE_MOD: tl.constexpr, PRESPLIT: tl.constexpr):
    """LN(y) of rows tm*BLOCK_M .. of the group as a GEMM's whole A operand [BLOCK_M, BLOCK_D] (K = D in one step),
    split into hi/lo parts in registers (``ln_local``). Columns past D are 0 (they meet masked weight rows)."""
    offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    offs = (row0 + offs_m)[:, None] * D + offs_d[None, :]
    if (M % BLOCK_M == 0) and (D == BLOCK_D):
        x = tl.load(y_ptr + offs, cache_modifier=CACHE_MOD)
        w = tl.load(lnw_ptr + offs_d)
        b = tl.load(lnb_ptr + offs_d)
    else:
        mask = (offs_m < M)[:, None] & mask_d[None, :]
        x = tl.load(y_ptr + offs, mask=mask, other=0.0, cache_modifier=CACHE_MOD)
        w = tl.load(lnw_ptr + offs_d, mask=mask_d, other=0.0)
        b = tl.load(lnb_ptr + offs_d, mask=mask_d, other=0.0)
    return split_bf16_trunc(layernorm_rows(x, w, b, mask_d, D, LN_EPS), PRESPLIT == 1)


@triton.jit
def _ln_linear_phase(y_ptr, lnw_ptr, lnb_ptr,  # LN1 of y, computed by each program for its row blocks
                     w_ptr, b_ptr,       # [WROWS*D, N] presplit Wqkv, [N]
                     o_ptr, olo_ptr,     # q|k|v as hi/lo parts, row stride LDO
                     row0, rank,
                     M: tl.constexpr, N: tl.constexpr, D: tl.constexpr, PREC: tl.constexpr,
                     PRESPLIT: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr, CACHE_MOD: tl.constexpr, WROWS: tl.constexpr, LDO: tl.constexpr,
                     NESTED: tl.constexpr = False):
    """The QKV GEMM with LN1 in the program (``ln_local: qkv``, D <= 128); NESTED (``gemm_loop: nested``): the
    three bf16x3 terms in three accumulators. A contiguous run of [BLOCK_M, BLOCK_N] tiles per program; when a tile
    starts a new row block the program loads y of those rows and normalises them into its registers (the whole
    A operand, K = D), so no LayerNorm phase and no barrier precede the GEMM. y is not written in this phase.
    One step of three dots per tile (K = D), A from registers (wgmma with a register operand). The tile loop is
    software-pipelined 2 deep (the weight tiles, [D, BLOCK_N] hi and lo: 32 KB per stage at D = 128, BLOCK_N = 64); its
    store is masked, not branched on (Triton 3.6's pipeliner fails on a conditional epilogue next to a
    register-operand dot)."""
    NT_N: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    NT: tl.constexpr = ((M + BLOCK_M - 1) // BLOCK_M) * NT_N
    TPP: tl.constexpr = (NT + SPLIT - 1) // SPLIT
    EVEN: tl.constexpr = (M % BLOCK_M == 0) and (N % BLOCK_N == 0) and (D == BLOCK_D)
    offs_d = tl.arange(0, BLOCK_D)
    a_hi, a_lo = split_bf16_trunc(tl.zeros((BLOCK_M, BLOCK_D), tl.float32), PRESPLIT == 1)
    prev = -1
    # constexpr trip count; steps past the share redo the last tile and store nothing
    for i in tl.range(0, TPP, num_stages=2):
        t = rank * TPP + i
        tc = tl.minimum(t, NT - 1)
        tm = tc // NT_N
        tn = tc - tm * NT_N
        if tm != prev:
            a_hi, a_lo = _ln_operand(y_ptr, lnw_ptr, lnb_ptr, row0, tm, M, D, BLOCK_M, BLOCK_D, CACHE_MOD, PRESPLIT)
        prev = tm
        offs_n = tn * BLOCK_N + tl.arange(0, BLOCK_N)
        if EVEN:
            wmask = None
        else:
            wmask = (offs_d < D)[:, None] & (offs_n < N)[None, :]
        # weight pointers built in the loop from vectors (a hoisted [BLOCK_D, BLOCK_N] offset tile: 64 registers)
        w_hi, w_lo, w_hi2 = _w_parts(w_ptr + offs_d[:, None] * (WROWS * N) + offs_n[None, :], wmask, N, WROWS)
        if NESTED:  # three accumulators: the three dots stay in flight together (as gemm_loop: nested)
            acc = (tl.dot(a_lo, w_hi, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), input_precision=PREC)
                   + tl.dot(a_hi, w_lo, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), input_precision=PREC)) \
                + tl.dot(a_hi, w_hi2, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), input_precision=PREC)
        else:
            acc = tl.dot(a_lo, w_hi, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), input_precision=PREC)
            acc = tl.dot(a_hi, w_lo, acc, input_precision=PREC)
            acc = tl.dot(a_hi, w_hi2, acc, input_precision=PREC)
        offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
        if EVEN:
            acc += tl.load(b_ptr + offs_n)[None, :]
        else:
            acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :]
        omask = (offs_m < tl.where(t < NT, M, 0))[:, None] & (offs_n < N)[None, :]
        _store(o_ptr, olo_ptr, (row0 + offs_m)[:, None] * LDO + offs_n[None, :], omask, acc, PRESPLIT)


@triton.jit
def _layer_flat(y_ptr, qkv_ptr, xhi_ptr, xlo_ptr, fhi_ptr, flo_ptr,
                ln1w_ptr, ln1b_ptr, wqkv_ptr, bqkv_ptr, wo_ptr, bo_ptr,
                ln2w_ptr, ln2b_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr,
                flags_ptr, err_ptr, spin_limit, trace_ptr,
                l, bar, row0, rank, qk_scale, stat_ptr,
                TRACE: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                SEQS_PER_PROGRAM: tl.constexpr, CAUSAL: tl.constexpr, SPLIT: tl.constexpr, BLOCK_R: tl.constexpr,
                BARRIER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_DH: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_M_LN: tl.constexpr, CACHE_MOD: tl.constexpr, PRESPLIT: tl.constexpr, PREC_ATTN: tl.constexpr,
                BLOCK_N_QKV: tl.constexpr, BLOCK_N_FFN1: tl.constexpr, STREAM_K: tl.constexpr,
                ATTN_PRESPLIT: tl.constexpr, ATTN_STAGES: tl.constexpr, GEMM_LOOP: tl.constexpr,
                FFN_FUSED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N2: tl.constexpr, ATTN_OPROJ: tl.constexpr,
                LN_LOCAL: tl.constexpr, ATTN_PACK: tl.constexpr, COPY_PHASE: tl.constexpr,
                ATTN_KV_SPLIT: tl.constexpr, AO_WEIGHTS: tl.constexpr, ATTN_LOOP: tl.constexpr,
                FFN1_SCHEME: tl.constexpr, FFN2_SCHEME: tl.constexpr):
    """One encoder layer of the group; ``bar`` is the flag target of its first barrier. Every GEMM's A comes
    pre-split into hi/lo parts: LN1 and LN2 by ``_rows_phase`` (a phase and a barrier each), the attention output
    and GELU(FFN1) by their producers' epilogues. The x-split scratch [*, D] is reused by LN1 -> QKV, attention ->
    oproj and LN2 -> FFN1 (each use ends at a barrier before the next write). QKV (N = 3D) runs on
    [BLOCK_M, BLOCK_N_QKV] tiles, FFN1 (N = 4D) on [BLOCK_M, BLOCK_N_FFN1], oproj and FFN2 (N = D) on
    [BLOCK_M, BLOCK_N]. The constexprs are the parameters of ``config/variant/seqres.yaml`` in capitals (the
    effective values ``host.prepare_meta`` derives); the options that drop a phase: LN_LOCAL (the QKV programs
    normalise their own rows: no LN1 phase), COPY_PHASE "fused" (layer 0's LN1 split came with the copy),
    ATTN_OPROJ (no oproj phase), FFN_FUSED (FFN1 and FFN2 in one phase)."""
    PACK_SEQ: tl.constexpr = S if ATTN_PACK > 1 else 0
    M: tl.constexpr = SEQS_PER_PROGRAM * S
    NESTED: tl.constexpr = GEMM_LOOP == "nested"
    # the parts are bf16 (PRESPLIT 1: input_precision is ignored for them) or fp32-held bf16 values (interpreter)
    PREC_LIN: tl.constexpr = "tf32" if PRESPLIT == 1 else "ieee"
    # FFN2's A (GELU(FFN1)) / FFN1's A (LN2) split into fp16 hi/lo with W2 / W1 one fp16 part per row (f16_w1)
    FFN2_F16: tl.constexpr = FFN2_SCHEME == "f16_w1"
    FFN1_F16: tl.constexpr = FFN1_SCHEME == "f16_w1"
    W2R: tl.constexpr = 1 if FFN2_F16 else WEIGHT_ROWS
    PARTS_F: tl.constexpr = PRESPLIT + 2 if FFN2_F16 else PRESPLIT
    W1R: tl.constexpr = 1 if FFN1_F16 else WEIGHT_ROWS
    PARTS_2: tl.constexpr = PRESPLIT + 2 if FFN1_F16 else PRESPLIT
    COPY_FUSED: tl.constexpr = 1 if COPY_PHASE == "fused" else 0
    if LN_LOCAL:  # LN1 is computed by the QKV programs
        bar = bar - 1
    else:
        if (not COPY_FUSED) or (l > 0):  # (layer 0's LN1 split may have come with the copy)
            _rows_phase(y_ptr, xhi_ptr, ln1w_ptr + l * D, ln1b_ptr + l * D, row0, rank, M, D, True, SPLIT,
                        BLOCK_M_LN, BLOCK_D, CACHE_MOD, PRESPLIT, xlo_ptr)
        _sync(flags_ptr, rank, bar, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
    if LN_LOCAL:
        _ln_linear_phase(y_ptr, ln1w_ptr + l * D, ln1b_ptr + l * D, wqkv_ptr + l * (WEIGHT_ROWS * D * 3 * D),
                         bqkv_ptr + l * (3 * D), fhi_ptr, flo_ptr, row0, rank, M, 3 * D, D, PREC_LIN, PRESPLIT, SPLIT,
                         BLOCK_M, BLOCK_N_QKV, BLOCK_D, CACHE_MOD, WEIGHT_ROWS, 4 * D, NESTED)
    elif ATTN_PRESPLIT:  # q, k, v split by the QKV epilogue into f_hi/f_lo (free until FFN1), in the group's own
        # rows of 4D (a 3D row stride would overlap other groups' FFN1 rows, which run unsynchronised with this group)
        _linear_phase_flat(xhi_ptr, xlo_ptr, wqkv_ptr + l * (WEIGHT_ROWS * D * 3 * D), bqkv_ptr + l * (3 * D), y_ptr,
                           fhi_ptr, flo_ptr, row0, rank, M, 3 * D, D, False, False, PRESPLIT, PREC_LIN, PRESPLIT,
                           SPLIT, BLOCK_M, BLOCK_N_QKV, BLOCK_K, CACHE_MOD, WEIGHT_ROWS, False, 4 * D, NESTED)
    else:
        _linear_phase_flat(xhi_ptr, xlo_ptr, wqkv_ptr + l * (WEIGHT_ROWS * D * 3 * D), bqkv_ptr + l * (3 * D), y_ptr,
                           qkv_ptr, qkv_ptr, row0, rank, M, 3 * D, D, False, False, 0, PREC_LIN, PRESPLIT, SPLIT,
                           BLOCK_M, BLOCK_N_QKV, BLOCK_K, CACHE_MOD, WEIGHT_ROWS, False, 0, NESTED)
    _sync(flags_ptr, rank, bar + 1, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
    if ATTN_LOOP == "flat":  # (ATTN_PRESPLIT, not ATTN_OPROJ / ATTN_KV_SPLIT / ATTN_PACK > 1: host.prepare_meta)
        _attention_phase_flat(fhi_ptr, xhi_ptr, xlo_ptr, row0, rank, qk_scale, S, D, H, DH, SEQS_PER_PROGRAM, CAUSAL,
                              PREC_LIN, SPLIT, BLOCK_Q, BLOCK_KV, BLOCK_DH, CACHE_MOD, PRESPLIT, flo_ptr, PRESPLIT,
                              ATTN_STAGES)
    elif ATTN_PRESPLIT:
        _attention_phase(fhi_ptr, xhi_ptr, xlo_ptr, row0, rank, qk_scale, S * ATTN_PACK, D, H, DH,
                         SEQS_PER_PROGRAM // ATTN_PACK, CAUSAL, PREC_LIN, SPLIT, BLOCK_Q, BLOCK_KV, BLOCK_DH, CACHE_MOD,
                         PRESPLIT, flo_ptr, PRESPLIT, ATTN_STAGES, ATTN_OPROJ, wo_ptr + l * (WEIGHT_ROWS * D * D),
                         bo_ptr + l * D, y_ptr, WEIGHT_ROWS, BLOCK_N2, BLOCK_D, PACK_SEQ, ATTN_KV_SPLIT, stat_ptr,
                         flags_ptr + BLOCK_R, bar + 2, spin_limit, err_ptr, AO_WEIGHTS)
    else:
        _attention_phase(qkv_ptr, xhi_ptr, xlo_ptr, row0, rank, qk_scale, S * ATTN_PACK, D, H, DH,
                         SEQS_PER_PROGRAM // ATTN_PACK, CAUSAL, PREC_ATTN, SPLIT, BLOCK_Q, BLOCK_KV, BLOCK_DH,
                         CACHE_MOD,
                         PRESPLIT, None, 0, ATTN_STAGES, PACK_SEQ=PACK_SEQ)
    _sync(flags_ptr, rank, bar + 2, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
    if not ATTN_OPROJ:  # (ATTN_OPROJ: the attention tiles added their output projection into y)
        _linear_phase_flat(xhi_ptr, xlo_ptr, wo_ptr + l * (WEIGHT_ROWS * D * D), bo_ptr + l * D, y_ptr, y_ptr, y_ptr,
                           row0, rank, M, D, D, False, True, 0, PREC_LIN, PRESPLIT, SPLIT, BLOCK_M, BLOCK_N, BLOCK_K,
                           CACHE_MOD, WEIGHT_ROWS, STREAM_K, 0, NESTED)
        _sync(flags_ptr, rank, bar + 3, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
    b2: tl.constexpr = 3 - ATTN_OPROJ  # barriers before LN2's
    _rows_phase(y_ptr, xhi_ptr, ln2w_ptr + l * D, ln2b_ptr + l * D, row0, rank, M, D, True, SPLIT, BLOCK_M_LN, BLOCK_D,
                CACHE_MOD, PARTS_2, xlo_ptr)
    _sync(flags_ptr, rank, bar + b2 + 1, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
    if FFN_FUSED:  # FFN1 + FFN2 in one phase
        _ffn_fused_phase(xhi_ptr, xlo_ptr, w1_ptr + l * (W1R * D * 4 * D), b1_ptr + l * (4 * D),
                         w2_ptr + l * (W2R * 4 * D * D), b2_ptr + l * D, y_ptr, row0, rank,
                         M, D, PREC_LIN, PRESPLIT, SPLIT, BLOCK_M, BLOCK_H, BLOCK_N2, BLOCK_K, CACHE_MOD, WEIGHT_ROWS,
                         FFN2_F16, FFN1_F16)
        _sync(flags_ptr, rank, bar + b2 + 2, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
    else:
        f1hi_ptr, f1lo_ptr = _f16_parts(xhi_ptr, xlo_ptr, FFN1_F16 and PRESPLIT == 1)  # (LN2 stored fp16 parts)
        _linear_phase_flat(f1hi_ptr, f1lo_ptr, w1_ptr + l * (W1R * D * 4 * D), b1_ptr + l * (4 * D), y_ptr,
                           fhi_ptr, flo_ptr, row0, rank, M, 4 * D, D, True, False, PARTS_F, PREC_LIN, PRESPLIT, SPLIT,
                           BLOCK_M, BLOCK_N_FFN1, BLOCK_K, CACHE_MOD, W1R, False, 0, NESTED)
        _sync(flags_ptr, rank, bar + b2 + 2, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
        f2hi_ptr, f2lo_ptr = _f16_parts(fhi_ptr, flo_ptr, FFN2_F16 and PRESPLIT == 1)  # (FFN1 stored fp16 parts)
        _linear_phase_flat(f2hi_ptr, f2lo_ptr, w2_ptr + l * (W2R * 4 * D * D), b2_ptr + l * D, y_ptr, y_ptr, y_ptr,
                           row0, rank, M, D, 4 * D, False, True, 0, PREC_LIN, PRESPLIT, SPLIT, BLOCK_M, BLOCK_N,
                           BLOCK_K, CACHE_MOD, W2R, STREAM_K, 0, NESTED)
        _sync(flags_ptr, rank, bar + b2 + 3, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)


# LN1, QKV, attention, oproj, LN2, FFN1, FFN2 (less FFN_FUSED, ATTN_OPROJ, LN_LOCAL)
BARRIERS_PER_LAYER = tl.constexpr(7)


@triton.jit(do_not_specialize=["epoch", "cepoch", "spin_limit"])
def _seqres_fwd(
    x_ptr,                  # [B*S, D] fp32 input (read once)
    y_ptr,                  # [B*S, D] fp32 output; the residual stream during the pass
    a_ptr,                  # unused (the dead arguments are kept until the next published run: e62122d)
    qkv_ptr,                # [B*S, 3D] fp32 scratch: q | k | v (not ATTN_PRESPLIT); ATTN_KV_SPLIT's softmax states
    f_ptr,                  # unused
    xhi_ptr, xlo_ptr,       # [B*S, D] split A operand (LN1, LN2, attention output): bf16 hi/lo parts
    fhi_ptr, flo_ptr,       # [B*S, 4D] split GELU(FFN1) (ATTN_PRESPLIT: also q | k | v in rows of 4D)
    ln1w_ptr, ln1b_ptr,     # [L, D]
    wqkv_ptr, bqkv_ptr,     # [L, 2D, 3D] w_qkv transposed, bf16 rows hi, lo of each row; [L, 3D]
    wo_ptr, bo_ptr,         # [L, 2D, D], [L, D]
    ln2w_ptr, ln2b_ptr,     # [L, D]
    w1_ptr, b1_ptr,         # [L, 2D, 4D], [L, 4D] (FFN1_SCHEME f16_w1: [L, D, 4D] fp16, one part)
    w2_ptr, b2_ptr,         # [L, 8D, D], [L, D] (FFN2_SCHEME f16_w1: [L, 4D, D] fp16, one part)
    lnfw_ptr, lnfb_ptr,     # [D]
    flags_ptr,              # [n_groups, BLOCK_R (x2 with ATTN_KV_SPLIT)] int32, monotonic barrier flags
    cnt_ptr,                # unused
    err_ptr,                # [1] int32, barrier timeout report: the flag value waited for
    trace_ptr,              # [grid, 2 * barriers + 2] int64 phase timestamps (TRACE; else unused)
    spin_limit,             # polls before a barrier gives up and reports (2**31 - 1: unbounded in practice)
    epoch,                  # flags value before this launch; barrier i waits for epoch + 1 + i
    cepoch,                 # unused
    qk_scale,               # log2(e) / sqrt(DH)
    S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, L: tl.constexpr,  # the case (SPEC §3)
    SEQS_PER_PROGRAM: tl.constexpr, CAUSAL: tl.constexpr,
    SPLIT: tl.constexpr,            # programs per group (R)
    BLOCK_R: tl.constexpr,          # next power of 2 of SPLIT
    BARRIER: tl.constexpr,          # group barrier mode (tl_helpers.group_barrier); 0: none (SPLIT 1)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
    BLOCK_DH: tl.constexpr, BLOCK_D: tl.constexpr,  # next powers of 2 of DH and D
    BLOCK_M_LN: tl.constexpr,
    CACHE_MOD: tl.constexpr,        # ".cg" where other programs (or atomics) wrote the data, else ""
    PRESPLIT: tl.constexpr,         # the hi/lo parts: 1 bf16 (GPU), 2 fp32 tensors holding bf16 values (interpreter)
    TRACE: tl.constexpr,
    BLOCK_N_QKV: tl.constexpr, BLOCK_N_FFN1: tl.constexpr,  # block_n_wide for QKV and FFN1
    STREAM_K: tl.constexpr, ATTN_PRESPLIT: tl.constexpr, ATTN_STAGES: tl.constexpr, GEMM_LOOP: tl.constexpr,
    FFN_FUSED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N2: tl.constexpr, ATTN_OPROJ: tl.constexpr,
    LN_LOCAL: tl.constexpr, ATTN_PACK: tl.constexpr,
    WGMMA_CHAIN: tl.constexpr,      # read by the compile passes (host.compile_context), not by this source
    COPY_PHASE: tl.constexpr, ATTN_KV_SPLIT: tl.constexpr, AO_WEIGHTS: tl.constexpr, ATTN_LOOP: tl.constexpr,
    FFN2_SCHEME: tl.constexpr, FFN1_SCHEME: tl.constexpr,
    PREC_ATTN: tl.constexpr,        # attention dots on fp32 q, k, v (ATTN_PRESPLIT false)
):
    pid = tl.program_id(0)
    if SPLIT == 1:  # rank a compile-time 0: the interpreter cannot loop from a program-id tensor
        group = pid
        rank = 0
    else:
        group = pid // SPLIT
        rank = pid % SPLIT
    M: tl.constexpr = SEQS_PER_PROGRAM * S
    row0 = group * M
    # ATTN_KV_SPLIT: the key halves' flags after the barrier's
    flags_ptr = flags_ptr + group * (BLOCK_R * (2 if ATTN_KV_SPLIT else 1))
    COPY_FUSED: tl.constexpr = 1 if COPY_PHASE == "fused" else 0
    NBL: tl.constexpr = BARRIERS_PER_LAYER - FFN_FUSED - ATTN_OPROJ - LN_LOCAL
    NBAR: tl.constexpr = 1 + L * NBL - COPY_FUSED
    if TRACE:  # row of this program: [start, (arrival, departure) per barrier, end]
        trace_row = trace_ptr + pid.to(tl.int64) * (2 * NBAR + 2)
        tl.store(trace_row, _now(pid))
        trace_ptr = trace_row + 1 - 2 * (epoch + 1)

    if COPY_FUSED:  # the copy and layer 0's LN1 split in one pass over x; its barrier is layer 0's first
        _rows_phase(x_ptr, xhi_ptr, ln1w_ptr, ln1b_ptr, row0, rank, M, D, True, SPLIT, BLOCK_M_LN, BLOCK_D, CACHE_MOD,
                    PRESPLIT, xlo_ptr, y_ptr, True)
    else:
        _rows_phase(x_ptr, y_ptr, lnfw_ptr, lnfb_ptr, row0, rank, M, D, False, SPLIT, BLOCK_M_LN, BLOCK_D, CACHE_MOD)
        _sync(flags_ptr, rank, epoch + 1, err_ptr, spin_limit, SPLIT, BLOCK_R, BARRIER, trace_ptr, TRACE)
    for l in range(0, L):
        _layer_flat(y_ptr, qkv_ptr, xhi_ptr, xlo_ptr, fhi_ptr, flo_ptr,
                    ln1w_ptr, ln1b_ptr, wqkv_ptr, bqkv_ptr, wo_ptr, bo_ptr,
                    ln2w_ptr, ln2b_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr,
                    flags_ptr, err_ptr, spin_limit, trace_ptr,
                    l, epoch + 2 - COPY_FUSED + NBL * l, row0, rank, qk_scale, qkv_ptr + group * (SPLIT * 2 * BLOCK_Q),
                    TRACE=TRACE, S=S, D=D, H=H, DH=DH, SEQS_PER_PROGRAM=SEQS_PER_PROGRAM, CAUSAL=CAUSAL, SPLIT=SPLIT,
                    BLOCK_R=BLOCK_R, BARRIER=BARRIER, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                    BLOCK_Q=BLOCK_Q, BLOCK_KV=BLOCK_KV, BLOCK_DH=BLOCK_DH, BLOCK_D=BLOCK_D, BLOCK_M_LN=BLOCK_M_LN,
                    CACHE_MOD=CACHE_MOD, PRESPLIT=PRESPLIT, PREC_ATTN=PREC_ATTN, BLOCK_N_QKV=BLOCK_N_QKV,
                    BLOCK_N_FFN1=BLOCK_N_FFN1, STREAM_K=STREAM_K, ATTN_PRESPLIT=ATTN_PRESPLIT,
                    ATTN_STAGES=ATTN_STAGES, GEMM_LOOP=GEMM_LOOP, FFN_FUSED=FFN_FUSED, BLOCK_H=BLOCK_H,
                    BLOCK_N2=BLOCK_N2, ATTN_OPROJ=ATTN_OPROJ, LN_LOCAL=LN_LOCAL, ATTN_PACK=ATTN_PACK,
                    COPY_PHASE=COPY_PHASE, ATTN_KV_SPLIT=ATTN_KV_SPLIT, AO_WEIGHTS=AO_WEIGHTS, ATTN_LOOP=ATTN_LOOP,
                    FFN1_SCHEME=FFN1_SCHEME, FFN2_SCHEME=FFN2_SCHEME)
    # every row of y is final once the last barrier passed; each program normalises its own row blocks
    _rows_phase(y_ptr, y_ptr, lnfw_ptr, lnfb_ptr, row0, rank, M, D, True, SPLIT, BLOCK_M_LN, BLOCK_D, CACHE_MOD)
    if TRACE:
        tl.store(trace_row + 2 * NBAR + 1, _now(pid))
