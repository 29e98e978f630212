"""seqres: the sequence-resident megakernel — the whole forward pass (L layers + final LayerNorm) in one
Triton launch, one group of R co-resident programs per G consecutive sequences.

Schedule of one group (rows ``row0 .. row0 + G*S`` of the flattened [B*S, D] activations):

    copy    y <- x                                    (y holds the residual stream from here on)
    per layer l:
      qkv   qkv = LN1(y) @ Wqkv + b     LN statistics computed per row tile, LN applied on the A load
      attn  a   = softmax(q k^T / sqrt(dh)) v        per (sequence, head, query block), online softmax
      oproj y   = y + a @ Wo + b_o
      ffn1  f   = GELU(LN2(y) @ W1 + b_1)
      ffn2  y   = y + f @ W2 + b_2
    final   y   = LNf(y)                              in place, row blocks

Between phases the group synchronises: ``tl.debug_barrier()`` inside a program, plus a flag barrier
across the R programs of a group when R > 1 (``group_barrier``: release/acquire flags in global
memory, never a device-wide barrier). Phases distribute their tiles over the R programs (round-robin,
or contiguous runs with ``BLOCKED``), so with R == 1 (the only valid setting under TRITON_INTERPRET) one program does everything. Scratch
(``qkv``, ``a``, ``f``) lives in global memory and stays mostly in L2; weights stream from L2/HBM,
pre-transposed to [K, N] by ``prepare``.

Precision is per GEMM (constexpr ``input_precision`` of ``tl.dot``); the last ``L_FAST`` layers may
use a cheaper precision for their four linear layers; ``PRESPLIT`` runs bf16x3 on weights that
``prepare`` split into bf16 hi/lo once. LN statistics: two-pass loops or one unrolled round
(``LN_STATS``), fused into the A loads of the QKV and FFN1 GEMMs.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..common.tl_helpers import (dot_split, gelu_erf, gelu_erf_poly, gelu_log2poly, group_barrier, layernorm_rows,
                                 layernorm_stats, layernorm_stats_chunked, spin_flags, split_bf16_trunc, split_f16)

LN_EPS = tl.constexpr(1e-5)


@triton.jit
def _now(x):
    """%globaltimer (ns) as an int64 scalar (GPU only; ``x``: any int32 scalar, it only gives the shape)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _sync(flags_ptr, rank, target, err_ptr, spin_limit,
          R: tl.constexpr, BLOCK_R: tl.constexpr, FLAGS: tl.constexpr, trace_ptr, TRACE: tl.constexpr):
    """Phase boundary: CTA barrier, plus the group's flag barrier when FLAGS. TRACE: the program's arrival
    and departure times at ``trace_ptr + 2 * target`` and ``+ 1`` (phase profile, ``host.phase_profile``)."""
    if TRACE:
        tl.store(trace_ptr + 2 * target, _now(rank))
    if FLAGS:
        group_barrier(flags_ptr, rank, target, err_ptr, spin_limit, R, BLOCK_R, FLAGS)
    else:
        tl.debug_barrier()
    if TRACE:
        tl.store(trace_ptr + 2 * target + 1, _now(rank))


@triton.jit
def _store(o_ptr, olo_ptr, offs, mask, x, SPLIT: tl.constexpr):
    """Store fp32 ``x`` at ``o_ptr + offs``, or (SPLIT) its hi/lo parts at ``o_ptr``/``olo_ptr`` (1: bf16;
    2: fp32-held, interpreter; 3: fp16, at bf16 pointers reinterpreted; 4: fp16 values fp32-held): how a producer
    hands a flat GEMM phase its pre-split A operand."""
    if SPLIT == 3:
        hi, lo = split_f16(x, True)
        o16_ptr, olo16_ptr = _f16_parts(o_ptr, olo_ptr, True)
        tl.store(o16_ptr + offs, hi, mask=mask)
        tl.store(olo16_ptr + offs, lo, mask=mask)
    elif SPLIT == 4:
        hi, lo = split_f16(x, False)
        tl.store(o_ptr + offs, hi, mask=mask)
        tl.store(olo_ptr + offs, lo, mask=mask)
    elif SPLIT:
        hi, lo = split_bf16_trunc(x, SPLIT == 1)
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
def _dot_presplit(acc, a_hi, a_lo, w_ptr, offs_k, offs_n, wmask, N: tl.constexpr, PREC: tl.constexpr,
                  WROWS: tl.constexpr = 3):
    """acc + a @ w in bf16x3 on a weight split once by prepare: a_lo @ w_hi + a_hi @ w_lo + a_hi @ w_hi,
    smallest terms first. WROWS 3: rows 3k, 3k+1, 3k+2 = hi, lo, hi of row k ([3K, N]), each weight load feeds
    exactly one dot; WROWS 2: rows 2k, 2k+1 = hi, lo ([2K, N]: a third fewer bytes), the hi tile feeds two."""
    # (loads written out, not through _w_parts: that changed the tiled path's generated code)
    w_ptrs = w_ptr + (WROWS * offs_k)[:, None] * N + offs_n[None, :]
    w_hi = tl.load(w_ptrs, mask=wmask, other=0.0)                                         # [BK, BN]
    w_lo = tl.load(w_ptrs + N, mask=wmask, other=0.0)
    if WROWS == 3:
        w_hi2 = tl.load(w_ptrs + 2 * N, mask=wmask, other=0.0)
    else:
        w_hi2 = w_hi
    acc = tl.dot(a_lo, w_hi, acc, input_precision=PREC)
    acc = tl.dot(a_hi, w_lo, acc, input_precision=PREC)
    acc = tl.dot(a_hi, w_hi2, acc, input_precision=PREC)
    return acc


@triton.jit
def _row_block(src_ptr, dst_ptr, dlo_ptr, w_ptr, b_ptr, rows, mask, offs_d, mask_d,
               D: tl.constexpr, LN: tl.constexpr, CM: tl.constexpr, SPLIT: tl.constexpr,
               cpy_ptr=None, COPY: tl.constexpr = False):
    """dst[rows] = LN(src[rows]) (or a copy), a [BM_LN, BD] block: as hi/lo parts (SPLIT 1: bf16, 2: fp32-held)
    or fp32 (SPLIT 0). COPY: also cpy[rows] = src[rows] (the residual stream's start, ``copy_phase: fused``)."""
    x = tl.load(src_ptr + rows[:, None] * D + offs_d[None, :], mask=mask, other=0.0, cache_modifier=CM)
    if COPY:
        tl.store(cpy_ptr + rows[:, None] * D + offs_d[None, :], x, mask=mask)
    if LN:
        w = tl.load(w_ptr + offs_d, mask=mask_d, other=0.0)
        b = tl.load(b_ptr + offs_d, mask=mask_d, other=0.0)
        x = layernorm_rows(x, w, b, mask_d, D, LN_EPS)
    if SPLIT:
        _store(dst_ptr, dlo_ptr, rows[:, None] * D + offs_d[None, :], mask, x, SPLIT)
    else:  # kept out of the helper: routing it through _store changed the tiled path's register allocation
        tl.store(dst_ptr + rows[:, None] * D + offs_d[None, :], x, mask=mask)


@triton.jit
def _ln_rows(src_ptr, dst_ptr, dlo_ptr, w_ptr, b_ptr, r_first, r_end,
             D: tl.constexpr, NR: tl.constexpr, BM_LN: tl.constexpr, BD: tl.constexpr, CM: tl.constexpr,
             SPLIT: tl.constexpr):
    """dst = LN(src) for rows r_first .. r_first + NR (those below r_end; NR a constexpr), in BM_LN-row blocks:
    the split A operand (SPLIT 1/2) or, SPLIT 0, fp32 in place of the final LayerNorm. (``ln_fold``)"""
    offs_d = tl.arange(0, BD)
    mask_d = offs_d < D
    for i in range(0, (NR + BM_LN - 1) // BM_LN):
        rows = r_first + i * BM_LN + tl.arange(0, BM_LN)
        _row_block(src_ptr, dst_ptr, dlo_ptr, w_ptr, b_ptr, rows, (rows < r_end)[:, None] & mask_d[None, :], offs_d,
                   mask_d, D, True, CM, SPLIT)


@triton.jit
def _last_arrival(cnt_ptr, target):
    """This CTA's part of a row block is done (its atomics into y issued by every thread): count it on the row
    block's counter (acq_rel, gpu scope) and return whether it was the last part (the counter reached
    ``target``), so the caller may read the complete rows. Counters only grow (``ln_fold``)."""
    tl.debug_barrier()
    old = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
    tl.debug_barrier()
    return old == target - 1


@triton.jit
def _rows_phase(src_ptr,            # [*, D] fp32, rows row0.. of this group
                dst_ptr,            # [*, D] fp32 (SPLIT: the hi part)
                w_ptr, b_ptr,       # [D] LayerNorm weight / bias (used when LN)
                row0, rank,
                M: tl.constexpr, D: tl.constexpr, LN: tl.constexpr, R: tl.constexpr,
                BM_LN: tl.constexpr, BD: tl.constexpr, CM: tl.constexpr,
                SPLIT: tl.constexpr = 0, dlo_ptr=None, cpy_ptr=None, COPY: tl.constexpr = False):
    """dst = LN(src) (or a copy) for the group's M rows, row blocks round-robin over the R programs.
    SPLIT (the A operand of a flat GEMM phase, split once instead of once per N tile): dst + dlo = the
    result as hi/lo parts (1: bf16, 2: fp32-held for the interpreter). COPY: cpy = src as well (same rows)."""
    NT: tl.constexpr = (M + BM_LN - 1) // BM_LN
    offs_d = tl.arange(0, BD)
    mask_d = offs_d < D
    for i in range(0, (NT + R - 1) // R):
        t = i * R + rank
        # rows past M are masked, so a tile index past NT (when R does not divide NT) is a no-op
        offs_m = t * BM_LN + tl.arange(0, BM_LN)
        _row_block(src_ptr, dst_ptr, dlo_ptr, w_ptr, b_ptr, row0 + offs_m, (offs_m < M)[:, None] & mask_d[None, :],
                   offs_d, mask_d, D, LN, CM, SPLIT, cpy_ptr, COPY)


@triton.jit
def _row_stats(a_ptr, rows, mask_m, K: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
               LN_STATS: tl.constexpr, LN_CHUNK: tl.constexpr, CM: tl.constexpr):
    """LayerNorm (mean, rstd) of rows ``rows`` of a [*, K] block: two-pass loops (LN_STATS == 0) or one
    unrolled round of loads with Chan's combination (LN_STATS == 1)."""
    if LN_STATS == 0:
        mean, rstd = layernorm_stats(a_ptr, rows, mask_m, K, K, BM, BK, LN_EPS, CM)
    else:
        mean, rstd = layernorm_stats_chunked(a_ptr, rows, mask_m, K, K, BM, LN_CHUNK, LN_EPS, CM)
    return mean, rstd


@triton.jit
def _linear_phase(a_ptr,            # [*, K] fp32 activations (rows row0..)
                  lnw_ptr, lnb_ptr,  # [K] LayerNorm applied to A on load (when LN)
                  w_ptr,            # [K, N] fp32 weight, transposed; PRESPLIT: [3K, N] bf16, rows hi|lo|hi of row k
                  b_ptr,            # [N] bias
                  r_ptr,            # [*, N] residual added in the epilogue (when RESID; may alias o_ptr)
                  o_ptr,            # [*, N] output
                  row0, rank,
                  M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                  LN: tl.constexpr, GELU: tl.constexpr, RESID: tl.constexpr, PREC: tl.constexpr,
                  PRESPLIT: tl.constexpr,
                  R: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CM: tl.constexpr,
                  LN_STATS: tl.constexpr, LN_CHUNK: tl.constexpr, BLOCKED: tl.constexpr):
    """o = epilogue([LN](a) @ w + b) over the group's M rows in [BM, BN] tiles shared by the R programs:
    round-robin (tile i * R + rank) or, when BLOCKED, a contiguous run of tiles per program (row-major,
    so consecutive tiles share a row block and the LN statistics are computed once per row block)."""
    NT_N: tl.constexpr = (N + BN - 1) // BN
    NT: tl.constexpr = ((M + BM - 1) // BM) * NT_N
    TPP: tl.constexpr = (NT + R - 1) // R
    # constexpr trip counts (the interpreter cannot loop to a runtime bound inside a device function)
    if BLOCKED:
        prev_tm = tl.full((), -1, tl.int32)
        mean = tl.zeros((BM,), tl.float32)
        rstd = tl.zeros((BM,), tl.float32)
        for i in range(0, TPP):
            t = rank * TPP + i
            tm = t // NT_N
            if t < NT:
                if LN:
                    if tm != prev_tm:
                        offs_m = tm * BM + tl.arange(0, BM)
                        mean, rstd = _row_stats(a_ptr, row0 + offs_m, offs_m < M, K, BM, BK, LN_STATS,
                                                LN_CHUNK, CM)
                        prev_tm = tm
                _linear_tile(a_ptr, lnw_ptr, lnb_ptr, w_ptr, b_ptr, r_ptr, o_ptr, row0, tm, t % NT_N,
                             mean, rstd, M, N, K, LN, GELU, RESID, PREC, PRESPLIT, BM, BN, BK, CM)
    else:
        for i in range(0, TPP):
            t = i * R + rank
            if NT % R == 0:
                _linear_tile_stats(a_ptr, lnw_ptr, lnb_ptr, w_ptr, b_ptr, r_ptr, o_ptr, row0, t // NT_N,
                                   t % NT_N, M, N, K, LN, GELU, RESID, PREC, PRESPLIT, BM, BN, BK, CM, LN_STATS,
                                   LN_CHUNK)
            else:
                if t < NT:
                    _linear_tile_stats(a_ptr, lnw_ptr, lnb_ptr, w_ptr, b_ptr, r_ptr, o_ptr, row0, t // NT_N,
                                       t % NT_N, M, N, K, LN, GELU, RESID, PREC, PRESPLIT, BM, BN, BK, CM, LN_STATS,
                                       LN_CHUNK)


@triton.jit
def _linear_tile_stats(a_ptr, lnw_ptr, lnb_ptr, w_ptr, b_ptr, r_ptr, o_ptr, row0, tm, tn,
                       M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       LN: tl.constexpr, GELU: tl.constexpr, RESID: tl.constexpr, PREC: tl.constexpr,
                       PRESPLIT: tl.constexpr,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CM: tl.constexpr,
                       LN_STATS: tl.constexpr, LN_CHUNK: tl.constexpr):
    """``_linear_tile`` with the tile's own LN statistics (round-robin order)."""
    offs_m = tm * BM + tl.arange(0, BM)
    if LN:
        mean, rstd = _row_stats(a_ptr, row0 + offs_m, offs_m < M, K, BM, BK, LN_STATS, LN_CHUNK, CM)
    else:
        mean = tl.zeros((BM,), tl.float32)
        rstd = mean
    _linear_tile(a_ptr, lnw_ptr, lnb_ptr, w_ptr, b_ptr, r_ptr, o_ptr, row0, tm, tn, mean, rstd,
                 M, N, K, LN, GELU, RESID, PREC, PRESPLIT, BM, BN, BK, CM)


@triton.jit
def _linear_tile(a_ptr, lnw_ptr, lnb_ptr, w_ptr, b_ptr, r_ptr, o_ptr, row0, tm, tn,
                 mean, rstd,        # [BM] LN statistics of the tile's rows (when LN)
                 M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                 LN: tl.constexpr, GELU: tl.constexpr, RESID: tl.constexpr, PREC: tl.constexpr,
                 PRESPLIT: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CM: tl.constexpr):
    """One [BM, BN] output tile (tm, tn) of ``_linear_phase``."""
    offs_m = tm * BM + tl.arange(0, BM)
    offs_n = tn * BN + tl.arange(0, BN)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = row0 + offs_m
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        acc = _k_step(acc, a_ptr, lnw_ptr, lnb_ptr, w_ptr, rows, mask_m, offs_n, mask_n, k0, mean, rstd,
                      N, K, LN, PREC, PRESPLIT, BK, CM)
    acc += tl.load(b_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    if GELU:
        acc = gelu_erf(acc)
    omask = mask_m[:, None] & mask_n[None, :]
    if RESID:
        acc += tl.load(r_ptr + rows[:, None] * N + offs_n[None, :], mask=omask, other=0.0, cache_modifier=CM)
    tl.store(o_ptr + rows[:, None] * N + offs_n[None, :], acc, mask=omask)


@triton.jit
def _k_step(acc, a_ptr, lnw_ptr, lnb_ptr, w_ptr, rows, mask_m, offs_n, mask_n, k0, mean, rstd,
            N: tl.constexpr, K: tl.constexpr, LN: tl.constexpr, PREC: tl.constexpr, PRESPLIT: tl.constexpr,
            BK: tl.constexpr, CM: tl.constexpr):
    """acc + [LN](a[rows, k0:k0+BK]) @ w[k0:k0+BK, offs_n] (one K step of ``_linear_tile``)."""
    offs_k = k0 + tl.arange(0, BK)
    mask_k = offs_k < K
    a = tl.load(a_ptr + rows[:, None] * K + offs_k[None, :], mask=mask_m[:, None] & mask_k[None, :],
                other=0.0, cache_modifier=CM)                                            # [BM, BK]
    if LN:
        lw = tl.load(lnw_ptr + offs_k, mask=mask_k, other=0.0)
        lb = tl.load(lnb_ptr + offs_k, mask=mask_k, other=0.0)
        a = (a - mean[:, None]) * rstd[:, None] * lw[None, :] + lb[None, :]
        a = tl.where(mask_k[None, :], a, 0.0)
    wmask = mask_k[:, None] & mask_n[None, :]
    if PRESPLIT == 0:
        w = tl.load(w_ptr + offs_k[:, None] * N + offs_n[None, :], mask=wmask, other=0.0)   # [BK, BN]
        acc = tl.dot(a, w, acc, input_precision=PREC)
    else:
        # presplit weights: only A is split here. PRESPLIT 1: bf16 operands; 2: fp32 tensors holding bf16
        # values (interpreter: exact products)
        a_hi, a_lo = split_bf16_trunc(a, PRESPLIT == 1)
        acc = _dot_presplit(acc, a_hi, a_lo, w_ptr, offs_k, offs_n, wmask, N, PREC)
    return acc


@triton.jit
def _attention_phase(qkv_ptr,       # [*, 3D] fp32: q | k | v, head j at columns j*DH of each part (QS: the hi part)
                     o_ptr,         # [*, D] fp32 merged heads (SPLIT_OUT: the bf16 hi part)
                     olo_ptr,       # [*, D] the lo part (SPLIT_OUT only)
                     row0, rank,
                     qk_scale,      # log2(e) / sqrt(DH)
                     S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                     G: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr, R: tl.constexpr,
                     BQ: tl.constexpr, BKV: tl.constexpr, BDH: tl.constexpr, CM: tl.constexpr,
                     SPLIT_OUT: tl.constexpr = 0, qlo_ptr=None, QS: tl.constexpr = 0, AST: tl.constexpr = 0,
                     AO: tl.constexpr = 0, wo_ptr=None, bo_ptr=None, y_ptr=None, WROWS: tl.constexpr = 2,
                     BN2: tl.constexpr = 64, LNF: tl.constexpr = 0, cnt_ptr=None, cnt_target=0, lnw_ptr=None,
                     lnb_ptr=None, BM_LN: tl.constexpr = 16, BD: tl.constexpr = 16, SEG: tl.constexpr = 0,
                     KVS: tl.constexpr = 0, stat_ptr=None, pflag_ptr=None, ptarget=0, spin_limit=0, err_ptr=None,
                     AOW: tl.constexpr = 0):
    """Attention of the group's G sequences (SEG > 0, ``attn_pack``: G packs of S rows, each holding S / SEG
    sequences of SEG rows that attend only within themselves); (sequence, head, query block) tiles round-robin
    over R. CAUSAL: odd rounds run in mirrored rank order, so a program that drew a short (early) query block in one round
    draws a long one in the next. SPLIT_OUT (flat GEMM loops): write the output as hi/lo parts (1: bf16,
    2: fp32-held, interpreter). QS: q, k, v arrive pre-split by the QKV epilogue (hi at ``qkv_ptr``, lo at
    ``qlo_ptr``; 1: bf16, 2: fp32-held), so every dot is three dots on the parts (PREC is then the parts'
    input_precision) and only p is split here. AST > 0: software-pipelining depth of the attention loops
    (their buffers set the kernel's shared memory when q, k, v are bf16 parts); 0: the kernel's num_stages.
    AO (``attn_oproj``): each tile also multiplies its output by its head's rows of Wo and adds the product into
    y with atomics (head 0 adds b_o): the output projection without its own phase (``_attention_oproj``).
    LNF (``ln_fold``, with AO): the last of the H tiles of a (sequence, query block) to finish normalises its
    rows of y with LN2 into the split A operand of the FFN phase (a counter per query block, ``cnt_ptr``).
    KVS (``attn_kv_split``, with AO, R >= 2 * tiles): programs 2t and 2t + 1 take tile t's two halves of the key
    blocks; each publishes its rows' softmax state (max, sum) in ``stat_ptr`` and on its flag (``pflag_ptr``,
    release), waits for its partner's (acquire), scales its unnormalised output by its share of the combined
    normaliser and adds its own output projection of it into y (the projection is linear; half 0 adds b_o).
    AOW (``ao_weights``, with AO): 0 = the projection in BN2-wide column blocks, each loading its weights after the
    attention; 1 = one BD-wide block whose weights are loaded after the key loop, before the output is normalised
    (KVS: before the exchange with the partner); 2 = the same weights loaded before the key loop."""
    NQB: tl.constexpr = (S + BQ - 1) // BQ
    NT: tl.constexpr = G * H * NQB
    if KVS:
        if rank < 2 * NT:
            t = rank // 2
            _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, t // (H * NQB), (t // NQB) % H, t % NQB, qk_scale,
                            S, D, H, DH, CAUSAL, PREC, BQ, BKV, BDH, CM, SPLIT_OUT, qlo_ptr, QS, AST,
                            AO, wo_ptr, bo_ptr, y_ptr, WROWS, BN2, LNF, cnt_ptr, cnt_target, lnw_ptr, lnb_ptr,
                            BM_LN, BD, SEG, KVS, rank, stat_ptr, pflag_ptr, ptarget, spin_limit, err_ptr, AOW)
    else:
        for i in tl.range(0, (NT + R - 1) // R, num_stages=AST if AST > 0 else None):
            if CAUSAL:
                t = i * R + tl.where(i % 2 == 1, R - 1 - rank, rank)
            else:
                t = i * R + rank
            if NT % R == 0:
                _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, t // (H * NQB), (t // NQB) % H, t % NQB, qk_scale,
                                S, D, H, DH, CAUSAL, PREC, BQ, BKV, BDH, CM, SPLIT_OUT, qlo_ptr, QS, AST,
                                AO, wo_ptr, bo_ptr, y_ptr, WROWS, BN2, LNF, cnt_ptr, cnt_target, lnw_ptr, lnb_ptr,
                                BM_LN, BD, SEG, AOW=AOW)
            else:
                if t < NT:
                    _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, t // (H * NQB), (t // NQB) % H, t % NQB,
                                    qk_scale, S, D, H, DH, CAUSAL, PREC, BQ, BKV, BDH, CM, SPLIT_OUT, qlo_ptr, QS,
                                    AST, AO, wo_ptr, bo_ptr, y_ptr, WROWS, BN2, LNF, cnt_ptr, cnt_target, lnw_ptr,
                                    lnb_ptr, BM_LN, BD, SEG, AOW=AOW)


@triton.jit
def _attention_phase_flat(qkv_ptr, o_ptr, olo_ptr, row0, rank, qk_scale,
                          S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, G: tl.constexpr,
                          CAUSAL: tl.constexpr, PREC: tl.constexpr, R: tl.constexpr, BQ: tl.constexpr,
                          BKV: tl.constexpr, BDH: tl.constexpr, CM: tl.constexpr, SPLIT_OUT: tl.constexpr,
                          qlo_ptr, QS: tl.constexpr, AST: tl.constexpr):
    """``_attention_phase`` as ONE loop over the program's (tile, key block) pairs (``attn_loop: flat``; q, k, v
    pre-split, no fusions): the software pipeliner then loads the next tile's q and first key block while the
    current tile finishes, as the flat GEMM loop does for its tiles. A tile's first key block restarts the online
    softmax by setting the row maxima to -inf (its rescale factor exp2(-inf - m) = 0 clears the sum and the output);
    its last one normalises and stores the output. Causal tiles run every key block, the ones past the query block
    fully masked (every row keeps a finite maximum from key block 0, so they add nothing). Tiles are taken
    round-robin (causal: odd rounds in mirrored rank order), as in ``_attention_phase``."""
    NQB: tl.constexpr = (S + BQ - 1) // BQ
    NT: tl.constexpr = G * H * NQB
    NKV: tl.constexpr = (S + BKV - 1) // BKV
    ITERS: tl.constexpr = ((NT + R - 1) // R) * NKV
    LDQ: tl.constexpr = (3 + (QS != 0)) * D  # as in _attention_block
    offs_d = tl.arange(0, BDH)
    mask_d = offs_d < DH
    m_i = tl.full((BQ,), float("-inf"), tl.float32)
    l_i = tl.zeros((BQ,), tl.float32)
    acc = tl.zeros((BQ, BDH), tl.float32)
    for it in tl.range(0, ITERS, num_stages=AST if AST > 0 else None):
        i = it // NKV
        j = it - i * NKV
        if CAUSAL:
            t = i * R + tl.where(i % 2 == 1, R - 1 - rank, rank)
        else:
            t = i * R + rank
        tc = tl.minimum(t, NT - 1)  # a round past the tiles (R not dividing NT) recomputes the last one, unstored
        g = tc // (H * NQB)
        hd = (tc // NQB) % H
        qb = tc % NQB
        base = row0 + g * S
        offs_q = qb * BQ + tl.arange(0, BQ)
        mask_q = offs_q < S
        q_offs = (base + offs_q)[:, None] * LDQ + hd * DH + offs_d[None, :]
        q = tl.load(qkv_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0, cache_modifier=CM)
        q_lo = tl.load(qlo_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0, cache_modifier=CM)
        m_i = tl.where(j == 0, float("-inf"), m_i)
        m_i, l_i, acc = _attention_block(qkv_ptr, base, q, offs_q, j * BKV, m_i, l_i, acc, hd, S, D, DH, CAUSAL,
                                         PREC, BKV, BDH, CM, qlo_ptr, q_lo, qk_scale, QS, 0)
        if (j == NKV - 1) & (t < NT):
            _store(o_ptr, olo_ptr, (base + offs_q)[:, None] * D + hd * DH + offs_d[None, :],
                   mask_q[:, None] & mask_d[None, :], acc / l_i[:, None], SPLIT_OUT)


@triton.jit
def _attention_block(qkv_ptr, base, q, offs_q, k0, m_i, l_i, acc, hd,
                     S: tl.constexpr, D: tl.constexpr, DH: tl.constexpr, CAUSAL: tl.constexpr,
                     PREC: tl.constexpr, BKV: tl.constexpr, BDH: tl.constexpr, CM: tl.constexpr,
                     qlo_ptr=None, q_lo=None, qk_scale=1.0, QS: tl.constexpr = 0, SEG: tl.constexpr = 0):
    """One key/value block of the online softmax: returns the updated (m_i, l_i, acc). K and V are both
    loaded before the first dot (V's latency hides behind q k^T and the softmax). SEG > 0 (``attn_pack``): the
    tile holds several sequences of SEG rows each, and a query attends only to keys of its own sequence; a row
    whose keys all lie in other blocks keeps a zero state through this block (no -inf - -inf)."""
    offs_d = tl.arange(0, BDH)
    mask_d = offs_d < DH
    offs_k = k0 + tl.arange(0, BKV)
    mask_k = offs_k < S
    LDQ: tl.constexpr = (3 + (QS != 0)) * D  # row stride of q|k|v: 4D when pre-split into the f_hi/f_lo rows
    k_offs = (base + offs_k)[None, :] * LDQ + D + hd * DH + offs_d[:, None]                    # [BDH, BKV]
    k_mask = mask_d[:, None] & mask_k[None, :]
    v_offs = (base + offs_k)[:, None] * LDQ + 2 * D + hd * DH + offs_d[None, :]                # [BKV, BDH]
    v_mask = mask_k[:, None] & mask_d[None, :]
    kt = tl.load(qkv_ptr + k_offs, mask=k_mask, other=0.0, cache_modifier=CM)
    v = tl.load(qkv_ptr + v_offs, mask=v_mask, other=0.0, cache_modifier=CM)
    if QS:
        kt_lo = tl.load(qlo_ptr + k_offs, mask=k_mask, other=0.0, cache_modifier=CM)
        v_lo = tl.load(qlo_ptr + v_offs, mask=v_mask, other=0.0, cache_modifier=CM)
        # unscaled q k^T: the scale is applied to the row maxima and inside the exponent (one FMA per score)
        s = dot_split(q, q_lo, kt, kt_lo, tl.zeros((q.shape[0], BKV), tl.float32), True, True, PREC)
    else:
        s = tl.dot(q, kt, input_precision=PREC)  # q was scaled on load
    valid = mask_k[None, :]
    if CAUSAL:
        valid = valid & (offs_k[None, :] <= offs_q[:, None])
    if SEG > 0:
        valid = valid & ((offs_k // SEG)[None, :] == (offs_q // SEG)[:, None])
    s = tl.where(valid, s, float("-inf"))
    if QS:  # m_i, m_new: maxima of the scaled scores (qk_scale > 0, so max(s) * scale is the scaled maximum)
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
    else:
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
    if SEG > 0:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    if QS:
        p = tl.exp2(s * qk_scale - m_use[:, None])
    else:
        p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if QS:
        p_hi, p_lo = split_bf16_trunc(p, QS == 1)
        acc = acc * alpha[:, None] + dot_split(p_hi, p_lo, v, v_lo, tl.zeros_like(acc), True, True, PREC)
    else:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PREC)
    return m_new, l_i, acc


@triton.jit
def _attention_tile(qkv_ptr, o_ptr, olo_ptr, row0, g, hd, qb, qk_scale,
                    S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                    CAUSAL: tl.constexpr, PREC: tl.constexpr,
                    BQ: tl.constexpr, BKV: tl.constexpr, BDH: tl.constexpr, CM: tl.constexpr,
                    SPLIT_OUT: tl.constexpr, qlo_ptr=None, QS: tl.constexpr = 0, AST: tl.constexpr = 0,
                    AO: tl.constexpr = 0, wo_ptr=None, bo_ptr=None, y_ptr=None, WROWS: tl.constexpr = 2,
                    BN2: tl.constexpr = 64, LNF: tl.constexpr = 0, cnt_ptr=None, cnt_target=0, lnw_ptr=None,
                    lnb_ptr=None, BM_LN: tl.constexpr = 16, BD: tl.constexpr = 16, SEG: tl.constexpr = 0,
                    KVS: tl.constexpr = 0, prank=0, stat_ptr=None, pflag_ptr=None, ptarget=0, spin_limit=0,
                    err_ptr=None, AOW: tl.constexpr = 0):
    """Query block qb of head hd of sequence g (of the group), online softmax over key blocks. SEG > 0: "sequence"
    g is a pack of consecutive sequences of SEG rows each (``_attention_block``). KVS: this program (``prank``) takes
    half ``prank % 2`` of the key blocks and combines with its partner ``prank ^ 1`` (``_attention_phase``)."""
    NKV: tl.constexpr = (S + BKV - 1) // BKV
    offs_d = tl.arange(0, BDH)
    mask_d = offs_d < DH
    base = row0 + g * S
    offs_q = qb * BQ + tl.arange(0, BQ)
    mask_q = offs_q < S
    LDQ: tl.constexpr = (3 + (QS != 0)) * D  # as in _attention_block
    q_offs = (base + offs_q)[:, None] * LDQ + hd * DH + offs_d[None, :]
    q = tl.load(qkv_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0, cache_modifier=CM)  # [BQ, BDH]
    if QS:  # the scale is applied to q k^T (q's parts stay as split)
        q_lo = tl.load(qlo_ptr + q_offs, mask=mask_q[:, None] & mask_d[None, :], other=0.0, cache_modifier=CM)
    else:
        q = q * qk_scale
        q_lo = q
    if AO and AOW > 0:  # the head's rows of Wo as one BD-wide block (``_attention_oproj_w``)
        wo_offs = (hd * DH + offs_d)[:, None] * (WROWS * D) + tl.arange(0, BD)[None, :]
        if DH == BDH and D == BD:
            wo_mask = None
        else:
            wo_mask = mask_d[:, None] & (tl.arange(0, BD) < D)[None, :]
        if AOW == 2:
            wo_hi, wo_lo, wo_hi2 = _w_parts(wo_ptr + wo_offs, wo_mask, D, WROWS)
    m_i = tl.full((BQ,), float("-inf"), tl.float32)
    l_i = tl.zeros((BQ,), tl.float32)
    acc = tl.zeros((BQ, BDH), tl.float32)
    # KVS: this program's half of the key blocks (not causal: every row has keys in both halves)
    NKVP: tl.constexpr = NKV // 2 if KVS else NKV
    j0 = (prank % 2) * NKVP if KVS else 0
    # constexpr trip count; causal skips key blocks past the query block (a runtime guard, not a bound,
    # because the interpreter cannot loop to a runtime bound inside a device function)
    for j in tl.range(0, NKVP, num_stages=AST if AST > 0 else None):
        if CAUSAL:
            if j * BKV < (qb + 1) * BQ:
                m_i, l_i, acc = _attention_block(qkv_ptr, base, q, offs_q, j * BKV, m_i, l_i, acc, hd,
                                                 S, D, DH, CAUSAL, PREC, BKV, BDH, CM, qlo_ptr, q_lo, qk_scale, QS,
                                                 SEG)
        else:
            m_i, l_i, acc = _attention_block(qkv_ptr, base, q, offs_q, (j0 + j) * BKV, m_i, l_i, acc, hd,
                                             S, D, DH, CAUSAL, PREC, BKV, BDH, CM, qlo_ptr, q_lo, qk_scale, QS,
                                             SEG)
    if AO and AOW == 1:
        wo_hi, wo_lo, wo_hi2 = _w_parts(wo_ptr + wo_offs, wo_mask, D, WROWS)
    if KVS:  # this half's share of the output normalised over both halves (the partner's state by a flag)
        out = _kv_half_combine(acc, m_i, l_i, stat_ptr, pflag_ptr, prank, ptarget, spin_limit, err_ptr, BQ, QS == 1)
    elif SEG > 0:  # padding rows past the last pack have no key of their own sequence: 0, not 0 / 0
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    else:
        out = acc / l_i[:, None]
    if AO:
        if AOW > 0:
            _attention_oproj_w(out, wo_hi, wo_lo, wo_hi2, bo_ptr, y_ptr, base + offs_q, mask_q, hd, D, PREC, BD,
                               SPLIT_OUT, KVS, prank % 2)
        else:
            _attention_oproj(out, wo_ptr, bo_ptr, y_ptr, base + offs_q, mask_q, hd, D, DH, PREC, BDH, SPLIT_OUT,
                             WROWS, BN2, KVS, prank % 2)
        if LNF:  # the last head of this query block to finish: LN2 of its rows -> the FFN phase's A operand
            NQB: tl.constexpr = (S + BQ - 1) // BQ
            if _last_arrival(cnt_ptr + g * NQB + qb, cnt_target):
                _ln_rows(y_ptr, o_ptr, olo_ptr, lnw_ptr, lnb_ptr, base + qb * BQ, base + S, D, BQ, BM_LN, BD,
                         ".cg", SPLIT_OUT)
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
def _kv_half_combine(acc, m_i, l_i, stat_ptr, pflag_ptr, prank, ptarget, spin_limit, err_ptr, BQ: tl.constexpr,
                     LD: tl.constexpr):
    """Exchange the softmax state with the partner program (``prank ^ 1``) and return this half's share of the
    normalised output: publish (m_i, l_i) in this program's slot of ``stat_ptr`` ([R, 2, BQ] fp32), release its flag
    (``ptarget``), spin on the partner's flag (acquire; LD: ``ld.acquire``, else atomics; at most ``spin_limit``
    polls, then ``err_ptr`` = ptarget), read its state through L2 (GPU only: the partner runs concurrently)."""
    offs = tl.arange(0, BQ)
    tl.store(stat_ptr + prank * (2 * BQ) + offs, m_i)
    tl.store(stat_ptr + prank * (2 * BQ) + BQ + offs, l_i)
    tl.debug_barrier()
    tl.atomic_xchg(pflag_ptr + prank, ptarget, sem="release", scope="gpu")
    one = tl.arange(0, 1)
    other = prank ^ 1
    spin_flags(pflag_ptr + other + one, one < 1, ptarget, err_ptr, spin_limit, LD)
    tl.debug_barrier()
    m_o = tl.load(stat_ptr + other * (2 * BQ) + offs, cache_modifier=".cg")
    l_o = tl.load(stat_ptr + other * (2 * BQ) + BQ + offs, cache_modifier=".cg")
    return acc * _kv_merge_scale(m_i, l_i, m_o, l_o)[:, None]


@triton.jit
def _attention_oproj(out, wo_ptr, bo_ptr, y_ptr, rows, mask_q, hd,
                     D: tl.constexpr, DH: tl.constexpr, PREC: tl.constexpr, BDH: tl.constexpr,
                     SPLIT: tl.constexpr, WROWS: tl.constexpr, BN2: tl.constexpr, KVS: tl.constexpr = 0,
                     half=0):
    """y[rows] += out @ Wo[hd*DH : (hd+1)*DH, :] (+ b_o for head 0; KVS: head 0's half 0) with atomics, in BN2-wide
    column blocks:
    ``out`` [BQ, BDH] is head hd's attention output, split into bf16 hi/lo in registers (SPLIT 1; 2: fp32-held,
    interpreter) for three dots on the presplit weight rows (``attn_oproj``)."""
    o_hi, o_lo = split_bf16_trunc(out, SPLIT == 1)
    offs_d = tl.arange(0, BDH)
    mask_d = offs_d < DH
    w_offs = (hd * DH + offs_d)[:, None] * (WROWS * D) + tl.arange(0, BN2)[None, :]   # [BDH, BN2], hi rows
    for n in range(0, (D + BN2 - 1) // BN2):
        offs_n = n * BN2 + tl.arange(0, BN2)
        mask_n = offs_n < D
        w_hi, w_lo, w_hi2 = _w_parts(wo_ptr + n * BN2 + w_offs, mask_d[:, None] & mask_n[None, :], D, WROWS)
        _oproj_block(o_hi, o_lo, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, offs_n, mask_n, hd, D, PREC, KVS, half)


@triton.jit
def _attention_oproj_w(out, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, hd, D: tl.constexpr, PREC: tl.constexpr,
                       BD: tl.constexpr, SPLIT: tl.constexpr, KVS: tl.constexpr = 0, half=0):
    """``_attention_oproj`` in one BD-wide column block on weights the caller loaded ([BDH, BD] hi, lo, hi parts of
    the head's rows of Wo; ``ao_weights``): y[rows] += out @ Wo[head rows, :] (+ b_o for head 0, KVS: its half 0)."""
    o_hi, o_lo = split_bf16_trunc(out, SPLIT == 1)
    offs_n = tl.arange(0, BD)
    _oproj_block(o_hi, o_lo, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, offs_n, offs_n < D, hd, D, PREC, KVS, half)


@triton.jit
def _oproj_block(o_hi, o_lo, w_hi, w_lo, w_hi2, bo_ptr, y_ptr, rows, mask_q, offs_n, mask_n, hd, D: tl.constexpr,
                 PREC: tl.constexpr, KVS: tl.constexpr, half):
    """y[rows, offs_n] += o @ w (three bf16 products of the split parts) + b_o for head 0 (KVS: its half 0), with
    atomics: one column block of the attention tile's output projection."""
    o = tl.dot(o_lo, w_hi, tl.zeros((o_hi.shape[0], w_hi.shape[1]), tl.float32), input_precision=PREC)
    o = tl.dot(o_hi, w_lo, o, input_precision=PREC)
    o = tl.dot(o_hi, w_hi2, o, input_precision=PREC)
    bias = tl.load(bo_ptr + offs_n, mask=mask_n, other=0.0)
    if KVS:
        o += tl.where((hd == 0) & (half == 0), bias, 0.0)[None, :]
    else:
        o += tl.where(hd == 0, bias, 0.0)[None, :]
    tl.atomic_add(y_ptr + rows[:, None] * D + offs_n[None, :], o, mask=mask_q[:, None] & mask_n[None, :],
                  sem="relaxed", scope="gpu")


@triton.jit
def _layer(y_ptr, a_ptr, qkv_ptr, f_ptr,
           ln1w_ptr, ln1b_ptr, wqkv_ptr, bqkv_ptr, wo_ptr, bo_ptr,
           ln2w_ptr, ln2b_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr,
           flags_ptr, err_ptr, spin_limit, trace_ptr, l, bar, row0, rank, qk_scale,
           TRACE: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, G: tl.constexpr,
           CAUSAL: tl.constexpr, R: tl.constexpr, BLOCK_R: tl.constexpr, FLAGS: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BQ: tl.constexpr, BKV: tl.constexpr,
           BDH: tl.constexpr, CM: tl.constexpr,
           LN_STATS: tl.constexpr, LN_CHUNK: tl.constexpr, BLOCKED: tl.constexpr, PRESPLIT: tl.constexpr,
           P_QKV: tl.constexpr, P_ATTN: tl.constexpr, P_O: tl.constexpr, P_FFN1: tl.constexpr,
           P_FFN2: tl.constexpr):
    """One encoder layer for the group; ``bar`` is the flag target of this layer's first barrier."""
    M: tl.constexpr = G * S
    WF: tl.constexpr = 3 if PRESPLIT else 1  # presplit weights hold 3 bf16 rows (hi, lo, hi) per fp32 row
    _linear_phase(y_ptr, ln1w_ptr + l * D, ln1b_ptr + l * D, wqkv_ptr + l * (WF * D * 3 * D), bqkv_ptr + l * (3 * D),
                  y_ptr, qkv_ptr, row0, rank, M, 3 * D, D, True, False, False, P_QKV, PRESPLIT, R, BM, BN, BK, CM,
                  LN_STATS, LN_CHUNK, BLOCKED)
    _sync(flags_ptr, rank, bar, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    _attention_phase(qkv_ptr, a_ptr, a_ptr, row0, rank, qk_scale, S, D, H, DH, G, CAUSAL, P_ATTN, R, BQ, BKV, BDH, CM)
    _sync(flags_ptr, rank, bar + 1, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    _linear_phase(a_ptr, ln1w_ptr, ln1b_ptr, wo_ptr + l * (WF * D * D), bo_ptr + l * D,
                  y_ptr, y_ptr, row0, rank, M, D, D, False, False, True, P_O, PRESPLIT, R, BM, BN, BK, CM,
                  LN_STATS, LN_CHUNK, BLOCKED)
    _sync(flags_ptr, rank, bar + 2, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    _linear_phase(y_ptr, ln2w_ptr + l * D, ln2b_ptr + l * D, w1_ptr + l * (WF * D * 4 * D), b1_ptr + l * (4 * D),
                  y_ptr, f_ptr, row0, rank, M, 4 * D, D, True, True, False, P_FFN1, PRESPLIT, R, BM, BN, BK, CM,
                  LN_STATS, LN_CHUNK, BLOCKED)
    _sync(flags_ptr, rank, bar + 3, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    _linear_phase(f_ptr, ln2w_ptr, ln2b_ptr, w2_ptr + l * (WF * 4 * D * D), b2_ptr + l * D,
                  y_ptr, y_ptr, row0, rank, M, D, 4 * D, False, False, True, P_FFN2, PRESPLIT, R, BM, BN, BK, CM,
                  LN_STATS, LN_CHUNK, BLOCKED)
    _sync(flags_ptr, rank, bar + 4, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)


@triton.jit
def _load_tile(ptrs, mask, CM: tl.constexpr):
    """tl.load with ``mask`` (0 where masked), or unmasked when ``mask`` is None."""
    if mask is None:
        x = tl.load(ptrs, cache_modifier=CM)
    else:
        x = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=CM)
    return x


@triton.jit
def _step_operands(ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                   M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, CM: tl.constexpr, WROWS: tl.constexpr, EVEN: tl.constexpr):
    """The pre-split operands of K step kk of tile (tm, tn): A hi/lo [BM, BK] and W hi, lo, hi [BK, BN] (the
    second hi is the first when WROWS == 2). Scalar base + loop-invariant offsets; masks unless EVEN."""
    a_base = (row0 + tm * BM) * K + kk * BK
    w_base = kk * (BK * WROWS * N) + tn * BN
    if EVEN:
        a_hi = tl.load(ahi_ptr + a_base + a_offs, cache_modifier=CM)
        a_lo = tl.load(alo_ptr + a_base + a_offs, cache_modifier=CM)
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
        mask_m = (tm * BM + tl.arange(0, BM)) < M
        mask_k = (kk * BK + tl.arange(0, BK)) < K
        mask_n = (tn * BN + tl.arange(0, BN)) < N
        amask = mask_m[:, None] & mask_k[None, :]
        wmask = mask_k[:, None] & mask_n[None, :]
        a_hi = tl.load(ahi_ptr + a_base + a_offs, mask=amask, other=0.0, cache_modifier=CM)
        a_lo = tl.load(alo_ptr + a_base + a_offs, mask=amask, other=0.0, cache_modifier=CM)
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
                   M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   GELU: tl.constexpr, RESID: tl.constexpr, SPLIT_OUT: tl.constexpr, PRESPLIT: tl.constexpr,
                   CM: tl.constexpr, EVEN: tl.constexpr, LDO: tl.constexpr, STREAM_K: tl.constexpr):
    """Finish tile (tm, tn) from its accumulator: bias, GELU (1: libdevice erf, 2: polynomial erf, 3: log2 Phi
    polynomial), residual, store or split store. STREAM_K: ``acc`` may be a piece of the tile (``whole`` false),
    added into o with atomics; the piece holding K step 0 (``first``) adds the bias."""
    offs_n = tn * BN + tl.arange(0, BN)
    # per tile, not hoisted; LDO: the output's row stride when it is not N
    optrs = (row0 + tm * BM + tl.arange(0, BM))[:, None] * (N if LDO == 0 else LDO) + offs_n[None, :]
    if EVEN:
        bias = tl.load(b_ptr + offs_n)
        omask = None
    else:
        mask_n = offs_n < N
        bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0)
        omask = ((tm * BM + tl.arange(0, BM)) < M)[:, None] & mask_n[None, :]
    if STREAM_K:
        tl.static_assert(RESID and not GELU and SPLIT_OUT == 0, "stream-K pieces add into the residual output")
        acc += tl.where(first, bias, 0.0)[None, :]
        if whole:
            acc += _load_tile(r_ptr + optrs, omask, CM)
            tl.store(o_ptr + optrs, acc, mask=omask)
        else:
            tl.atomic_add(o_ptr + optrs, acc, mask=omask, sem="relaxed", scope="gpu")
    else:
        acc += bias[None, :]
        if GELU == 3:  # log2 Phi(-|x|) polynomial and one exp2 (tl_helpers.gelu_log2poly)
            acc = gelu_log2poly(acc, PRESPLIT == 1)
        elif GELU == 2:  # polynomial erf (tl_helpers.gelu_erf_poly); PTX approximations on the GPU
            acc = gelu_erf_poly(acc, PRESPLIT == 1)
        elif GELU:
            acc = gelu_erf(acc)
        if RESID:
            acc += _load_tile(r_ptr + optrs, omask, CM)
        _store(o_ptr, olo_ptr, optrs, omask, acc, SPLIT_OUT)


@triton.jit
def _nested_step(acc_lh, acc_hl, acc_hh, ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                 M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr, CM: tl.constexpr, WROWS: tl.constexpr, EVEN: tl.constexpr, PREC: tl.constexpr):
    """K step kk of tile (tm, tn) into three accumulators, one per bf16x3 term (``gemm_loop: nested``)."""
    a_hi, a_lo, w_hi, w_lo, w_hi2 = _step_operands(ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                                                   M, N, K, BM, BN, BK, CM, WROWS, EVEN)
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
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CM: tl.constexpr,
                 WROWS: tl.constexpr, EVEN: tl.constexpr, LDO: tl.constexpr, STREAM_K: tl.constexpr,
                 WHOLE: tl.constexpr):
    """K steps [k_first, k_end) of tile t (``gemm_loop: nested``; WHOLE: all KT steps, constexpr bounds) with the
    three bf16x3 terms in three accumulators, then the tile's epilogue."""
    NT_N: tl.constexpr = (N + BN - 1) // BN
    KT: tl.constexpr = (K + BK - 1) // BK
    tm = t // NT_N
    tn = t - tm * NT_N
    acc_lh = tl.zeros((BM, BN), tl.float32)  # a_lo w_hi
    acc_hl = tl.zeros((BM, BN), tl.float32)  # a_hi w_lo
    acc_hh = tl.zeros((BM, BN), tl.float32)  # a_hi w_hi
    if WHOLE:
        for kk in range(0, KT):
            acc_lh, acc_hl, acc_hh = _nested_step(acc_lh, acc_hl, acc_hh, ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk,
                                                  a_offs, w_offs, M, N, K, BM, BN, BK, CM, WROWS, EVEN, PREC)
        _tile_epilogue((acc_lh + acc_hl) + acc_hh, b_ptr, r_ptr, o_ptr, olo_ptr, row0, tm, tn, True, True,
                       M, N, BM, BN, GELU, RESID, SPLIT_OUT, PRESPLIT, CM, EVEN, LDO, STREAM_K)
    else:
        for kk in range(k_first, k_end):
            acc_lh, acc_hl, acc_hh = _nested_step(acc_lh, acc_hl, acc_hh, ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk,
                                                  a_offs, w_offs, M, N, K, BM, BN, BK, CM, WROWS, EVEN, PREC)
        _tile_epilogue((acc_lh + acc_hl) + acc_hh, b_ptr, r_ptr, o_ptr, olo_ptr, row0, tm, tn, k_first == 0,
                       (k_first == 0) & (k_end == KT), M, N, BM, BN, GELU, RESID, SPLIT_OUT, PRESPLIT, CM, EVEN,
                       LDO, STREAM_K)


@triton.jit
def _linear_phase_flat(ahi_ptr, alo_ptr,  # [*, K] A split into hi/lo parts (bf16, or fp32-held: PRESPLIT 2)
                       w_ptr,             # [WROWS*K, N] presplit weight, rows hi, lo(, hi) of row k
                       b_ptr, r_ptr,      # [N] bias; [*, N] residual (RESID; may alias o_ptr)
                       o_ptr, olo_ptr,    # [*, N] output (fp32), or its hi/lo parts (SPLIT_OUT)
                       row0, rank,
                       M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       GELU: tl.constexpr, RESID: tl.constexpr, SPLIT_OUT: tl.constexpr,
                       PREC: tl.constexpr, PRESPLIT: tl.constexpr, R: tl.constexpr,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CM: tl.constexpr,
                       WROWS: tl.constexpr, STREAM_K: tl.constexpr = False, LDO: tl.constexpr = 0,
                       NEST: tl.constexpr = False, ARS: tl.constexpr = 0, FTR: tl.constexpr = 0):
    """o = epilogue(a @ w + b) over this program's share of the phase's (tile, K step) pairs. A comes pre-split
    (LayerNorm applied by ``_rows_phase`` with SPLIT, or split by the producer's epilogue); three dots per
    step (a_lo w_hi + a_hi w_lo + a_hi w_hi) on presplit weights.

    Share: a contiguous run of whole tiles per program, or with STREAM_K (residual GEMMs only: o = r += a @ w
    + b) an equal share of the pairs, so a tile may be cut between programs; the pieces of a cut tile are
    added to o with atomics (the piece holding K step 0 adds the bias), whole tiles as usual.

    Loop: NEST false — ONE loop over the pairs, so the software pipeliner prefetches the next tile's first K
    steps while the current tile finishes; the epilogue runs on a tile's last step (in the loop). Steps past
    the program's share (the last one, when R does not divide the work) load the last valid step again and
    store nothing. Triton waits for each dot before the next (one shared accumulator). ARS (``acc_reset``) 0: the
    epilogue branch resets the accumulator; ptxas then serializes every wgmma instruction of the kernel (C7514: the
    epilogue reads the step's last dot with no wait before it). 1: a tile's first step starts from a select of
    zeros (``tl.where(kk == 0, 0, acc)``) instead: Triton waits for the last dot inside the step and ptxas keeps
    each dot's wgmma instructions in flight, but the select costs ~60 instructions per step and the loop is bound
    by its instruction issue, so it measured 0.6-1.7% slower (docs/seqres.md, session 13). 2 (``flag``): the
    branch form's source, compiled with ``kernels.common.wgmma_passes`` (host.compile_context): the reset becomes
    the zero-accumulator predicate of the next tile's first dot, so nothing writes an accumulator in flight and
    ptxas keeps the wgmma asynchronous; with ``wgmma_chain: async`` (WCH) the waits between the three dots of a
    step are relaxed as well (session 15). NEST true — a loop
    over tiles around a K loop with the three terms in three accumulators: Triton keeps the three dots in
    flight (``wgmma.wait_group 3``) and ptxas does not serialize them, at the price of a pipeline start per
    tile and 3x the accumulator registers (docs/seqres.md)."""
    NT_N: tl.constexpr = (N + BN - 1) // BN
    NT: tl.constexpr = ((M + BM - 1) // BM) * NT_N
    KT: tl.constexpr = (K + BK - 1) // BK
    T: tl.constexpr = NT * KT
    TPP: tl.constexpr = (NT + R - 1) // R
    EVEN: tl.constexpr = (M % BM == 0) and (N % BN == 0) and (K % BK == 0)
    if STREAM_K:
        ITERS: tl.constexpr = (T + R - 1) // R
        start = rank * T // R
        end = (rank + 1) * T // R
    else:
        ITERS: tl.constexpr = TPP * KT
        start = rank * (TPP * KT)
        end = start + TPP * KT
    a_offs = tl.arange(0, BM)[:, None] * K + tl.arange(0, BK)[None, :]               # [BM, BK]
    w_offs = tl.arange(0, BK)[:, None] * (WROWS * N) + tl.arange(0, BN)[None, :]     # [BK, BN], hi rows
    if NEST:
        if R == 1:  # the whole phase with constexpr bounds (the interpreter cannot loop to a runtime bound)
            for t in range(0, NT):
                _nested_tile(ahi_ptr, alo_ptr, w_ptr, b_ptr, r_ptr, o_ptr, olo_ptr, row0, t, 0, KT, a_offs, w_offs,
                             M, N, K, GELU, RESID, SPLIT_OUT, PREC, PRESPLIT, BM, BN, BK, CM, WROWS, EVEN, LDO,
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
                             w_offs, M, N, K, GELU, RESID, SPLIT_OUT, PREC, PRESPLIT, BM, BN, BK, CM, WROWS, EVEN, LDO,
                             STREAM_K, not STREAM_K)
    else:
        acc = tl.zeros((BM, BN), tl.float32)
        # FTR on the GPU (bf16 parts): a runtime trip count, no padded steps; the interpreter cannot loop to a bound
        # computed from the rank
        RT_TRIPS: tl.constexpr = FTR != 0 and PRESPLIT == 1 and R > 1
        for i in range(0, (tl.minimum(end, T) - start) if RT_TRIPS else ITERS):
            g = start + i
            valid = (g < end) & (g < T)
            gc = tl.minimum(g, T - 1)
            t = gc // KT
            kk = gc - t * KT
            tm = t // NT_N
            tn = t - tm * NT_N
            a_hi, a_lo, w_hi, w_lo, w_hi2 = _step_operands(ahi_ptr, alo_ptr, w_ptr, row0, tm, tn, kk, a_offs, w_offs,
                                                           M, N, K, BM, BN, BK, CM, WROWS, EVEN)
            if ARS == 1:  # a new tile (or, at i == 0, the zeros above); a stream-K piece starting mid-tile has zeros too
                acc = tl.where(kk == 0, 0.0, acc)
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
                               (ts >= start) & (ts + KT <= end), M, N, BM, BN, GELU, RESID, SPLIT_OUT, PRESPLIT,
                               CM, EVEN, LDO, STREAM_K)
                if ARS != 1:  # branch (0), or flag (2): the compile pass turns this reset into the next dot's predicate
                    acc = tl.zeros((BM, BN), tl.float32)


@triton.jit
def _ffn_fused_phase(xhi_ptr, xlo_ptr,  # [*, D] LN2(y) split into hi/lo parts
                     w1_ptr, b1_ptr,    # [WROWS*D, 4D] presplit W1 (rows hi, lo(, hi) of row k), [4D]
                     w2_ptr, b2_ptr,    # [WROWS*4D, D] presplit W2 (F2H: [4D, D] fp16), [D]
                     y_ptr,             # [*, D] the residual stream: y += GELU(LN2(y) @ W1 + b1) @ W2 + b2
                     row0, rank,
                     M: tl.constexpr, D: tl.constexpr, GELU: tl.constexpr, PREC: tl.constexpr,
                     PRESPLIT: tl.constexpr, R: tl.constexpr, BM: tl.constexpr, BH: tl.constexpr,
                     BN2: tl.constexpr, BK: tl.constexpr, CM: tl.constexpr, WROWS: tl.constexpr,
                     LNF: tl.constexpr = 0, cnt_ptr=None, cnt_target=0, lnw_ptr=None, lnb_ptr=None,
                     lnfw_ptr=None, lnfb_ptr=None, last=False, BM_LN: tl.constexpr = 16, BD: tl.constexpr = 16,
                     F2H: tl.constexpr = 0, F1H: tl.constexpr = 0):
    """FFN1 and FFN2 in one phase (``ffn_fused``), split over the hidden dimension: work item (tm, c) computes
    h = GELU(A[tm] @ W1[:, c] + b1[c]) for row block tm and hidden chunk c (BH columns; K loop over D),
    splits h into bf16 hi/lo in registers and adds h @ W2[c, :] (three dots of K = BH per BN2-wide column
    block) into y with atomics; chunk 0 adds b2. No f scratch and no barrier between FFN1 and FFN2; y is
    not read in this phase (the A operand is the LN2 split), so the in-place atomic adds are safe.
    Items are shared out as contiguous runs over the R programs. LNF (``ln_fold``): the last item of a row block
    to finish normalises its rows of y (a counter per row block, ``cnt_ptr``): with the next layer's LN1
    (``lnw_ptr``, ``lnb_ptr``) into the split A operand at ``xhi_ptr``/``xlo_ptr`` (the rows' items are done
    reading it), or, in the ``last`` layer, with the final LayerNorm in place. F2H (``ffn2_scheme: f16_w1``): h is
    split into fp16 hi/lo and W2 is one fp16 part ([4D, D]): two dots per column block. F1H (``ffn1_scheme:
    f16_w1``; not with LNF): the A operand is LN2's fp16 split and W1 one fp16 part ([D, 4D])."""
    F: tl.constexpr = 4 * D
    W2R: tl.constexpr = 1 if F2H else WROWS
    W1R: tl.constexpr = 1 if F1H else WROWS
    xhi_ptr, xlo_ptr = _f16_parts(xhi_ptr, xlo_ptr, F1H and PRESPLIT == 1)  # (LN2 stored fp16 parts)
    NC: tl.constexpr = (F + BH - 1) // BH
    NI: tl.constexpr = ((M + BM - 1) // BM) * NC
    TPP: tl.constexpr = (NI + R - 1) // R
    a_offs = tl.arange(0, BM)[:, None] * D + tl.arange(0, BK)[None, :]              # [BM, BK]
    w_offs = tl.arange(0, BK)[:, None] * (W1R * F) + tl.arange(0, BH)[None, :]      # [BK, BH], hi rows of W1
    w2_offs = tl.arange(0, BH)[:, None] * (W2R * D) + tl.arange(0, BN2)[None, :]    # [BH, BN2], hi rows of W2
    for i in range(0, TPP):  # constexpr trip count (the interpreter cannot loop to a bound computed from the rank)
        it = rank * TPP + i
        if it < NI:
            _ffn_item(xhi_ptr, xlo_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, y_ptr, row0, it, a_offs, w_offs, w2_offs,
                      M, D, GELU, PREC, PRESPLIT, BM, BH, BN2, BK, CM, WROWS, F2H, F1H)
            if LNF:
                tm = it // NC
                if _last_arrival(cnt_ptr + tm, cnt_target):
                    if last:
                        _ln_rows(y_ptr, y_ptr, y_ptr, lnfw_ptr, lnfb_ptr, row0 + tm * BM, row0 + M, D, BM,
                                 BM_LN, BD, ".cg", 0)
                    else:
                        _ln_rows(y_ptr, xhi_ptr, xlo_ptr, lnw_ptr, lnb_ptr, row0 + tm * BM, row0 + M, D, BM,
                                 BM_LN, BD, ".cg", PRESPLIT)


@triton.jit
def _ffn_item(xhi_ptr, xlo_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, y_ptr, row0, it, a_offs, w_offs, w2_offs,
              M: tl.constexpr, D: tl.constexpr, GELU: tl.constexpr, PREC: tl.constexpr, PRESPLIT: tl.constexpr,
              BM: tl.constexpr, BH: tl.constexpr, BN2: tl.constexpr, BK: tl.constexpr, CM: tl.constexpr,
              WROWS: tl.constexpr, F2H: tl.constexpr = 0, F1H: tl.constexpr = 0):
    """Work item ``it`` = (row block tm, hidden chunk c) of ``_ffn_fused_phase``."""
    F: tl.constexpr = 4 * D
    W2R: tl.constexpr = 1 if F2H else WROWS
    W1R: tl.constexpr = 1 if F1H else WROWS
    NC: tl.constexpr = (F + BH - 1) // BH
    KT: tl.constexpr = (D + BK - 1) // BK
    NT2: tl.constexpr = (D + BN2 - 1) // BN2
    EVEN1: tl.constexpr = (M % BM == 0) and (F % BH == 0) and (D % BK == 0)
    EVEN2: tl.constexpr = (M % BM == 0) and (F % BH == 0) and (D % BN2 == 0)
    tm = it // NC
    c = it - tm * NC
    acc = tl.zeros((BM, BH), tl.float32)
    for kk in range(0, KT):
        a_hi, a_lo, w_hi, w_lo, w_hi2 = _step_operands(xhi_ptr, xlo_ptr, w1_ptr, row0, tm, c, kk, a_offs, w_offs,
                                                       M, F, D, BM, BH, BK, CM, W1R, EVEN1)
        acc = tl.dot(a_lo, w_hi, acc, input_precision=PREC)
        if W1R != 1:
            acc = tl.dot(a_hi, w_lo, acc, input_precision=PREC)
        acc = tl.dot(a_hi, w_hi2, acc, input_precision=PREC)
    offs_h = c * BH + tl.arange(0, BH)
    offs_m = tm * BM + tl.arange(0, BM)
    if EVEN1:
        acc += tl.load(b1_ptr + offs_h)[None, :]
    else:
        acc += tl.load(b1_ptr + offs_h, mask=offs_h < F, other=0.0)[None, :]
    if GELU == 3:
        acc = gelu_log2poly(acc, PRESPLIT == 1)
    elif GELU == 2:
        acc = gelu_erf_poly(acc, PRESPLIT == 1)
    else:
        acc = gelu_erf(acc)
    if not EVEN1:  # hidden columns past 4D (W1 columns and b1 masked to 0 -> GELU(0) = 0 anyway), rows past M
        acc = tl.where((offs_m < M)[:, None] & (offs_h < F)[None, :], acc, 0.0)
    if F2H:
        h_hi, h_lo = split_f16(acc, PRESPLIT == 1)
    else:
        h_hi, h_lo = split_bf16_trunc(acc, PRESPLIT == 1)
    rows = row0 + offs_m
    for n in range(0, NT2):
        offs_n = n * BN2 + tl.arange(0, BN2)
        if EVEN2:
            wmask = None
            omask = None
            b2 = tl.load(b2_ptr + offs_n)
        else:
            wmask = (offs_h < F)[:, None] & (offs_n < D)[None, :]
            omask = (offs_m < M)[:, None] & (offs_n < D)[None, :]
            b2 = tl.load(b2_ptr + offs_n, mask=offs_n < D, other=0.0)
        w2_hi, w2_lo, w2_hi2 = _w_parts(w2_ptr + c * (BH * W2R * D) + n * BN2 + w2_offs, wmask, D, W2R)
        out = tl.zeros((BM, BN2), tl.float32)
        out = tl.dot(h_lo, w2_hi, out, input_precision=PREC)
        if W2R != 1:
            out = tl.dot(h_hi, w2_lo, out, input_precision=PREC)
        out = tl.dot(h_hi, w2_hi2, out, input_precision=PREC)
        out += tl.where(c == 0, b2, 0.0)[None, :]
        tl.atomic_add(y_ptr + rows[:, None] * D + offs_n[None, :], out, mask=omask, sem="relaxed", scope="gpu")


@triton.jit
def _ln_operand(y_ptr, lnw_ptr, lnb_ptr, row0, tm, M: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
                BD: tl.constexpr, CM: tl.constexpr, PRESPLIT: tl.constexpr):
    """LN(y) of rows tm*BM .. of the group as a GEMM's whole A operand [BM, BD] (K = D in one step), split into
    hi/lo parts in registers (``ln_local``). Columns past D are 0 (they meet masked weight rows)."""
    offs_m = tm * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, BD)
    mask_d = offs_d < D
    offs = (row0 + offs_m)[:, None] * D + offs_d[None, :]
    if (M % BM == 0) and (D == BD):
        x = tl.load(y_ptr + offs, cache_modifier=CM)
        w = tl.load(lnw_ptr + offs_d)
        b = tl.load(lnb_ptr + offs_d)
    else:
        mask = (offs_m < M)[:, None] & mask_d[None, :]
        x = tl.load(y_ptr + offs, mask=mask, other=0.0, cache_modifier=CM)
        w = tl.load(lnw_ptr + offs_d, mask=mask_d, other=0.0)
        b = tl.load(lnb_ptr + offs_d, mask=mask_d, other=0.0)
    return split_bf16_trunc(layernorm_rows(x, w, b, mask_d, D, LN_EPS), PRESPLIT == 1)


@triton.jit
def _ln_linear_phase(y_ptr, lnw_ptr, lnb_ptr,  # LN1 of y, computed by each program for its row blocks
                     w_ptr, b_ptr,       # [WROWS*D, N] presplit Wqkv, [N]
                     o_ptr, olo_ptr,     # q|k|v as hi/lo parts, row stride LDO
                     row0, rank,
                     M: tl.constexpr, N: tl.constexpr, D: tl.constexpr, PREC: tl.constexpr,
                     PRESPLIT: tl.constexpr, R: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     BD: tl.constexpr, CM: tl.constexpr, WROWS: tl.constexpr, LDO: tl.constexpr,
                     NEST: tl.constexpr = False):
    """The QKV GEMM with LN1 in the program (``ln_local: qkv``, D <= 128); NEST (``gemm_loop: nested``): the
    three bf16x3 terms in three accumulators. A contiguous run of [BM, BN] tiles per program; when a tile
    starts a new row block the program loads y of those rows and normalises them into its registers (the whole
    A operand, K = D), so no LayerNorm phase and no barrier precede the GEMM. y is not written in this phase.
    One step of three dots per tile (K = D), A from registers (wgmma with a register operand). The tile loop is
    software-pipelined 2 deep (the weight tiles, [D, BN] hi and lo: 32 KB per stage at D = 128, BN = 64); its
    store is masked, not branched on (Triton 3.6's pipeliner fails on a conditional epilogue next to a
    register-operand dot)."""
    NT_N: tl.constexpr = (N + BN - 1) // BN
    NT: tl.constexpr = ((M + BM - 1) // BM) * NT_N
    TPP: tl.constexpr = (NT + R - 1) // R
    EVEN: tl.constexpr = (M % BM == 0) and (N % BN == 0) and (D == BD)
    offs_d = tl.arange(0, BD)
    a_hi, a_lo = split_bf16_trunc(tl.zeros((BM, BD), tl.float32), PRESPLIT == 1)
    prev = -1
    # constexpr trip count; steps past the share redo the last tile and store nothing
    for i in tl.range(0, TPP, num_stages=2):
        t = rank * TPP + i
        tc = tl.minimum(t, NT - 1)
        tm = tc // NT_N
        tn = tc - tm * NT_N
        if tm != prev:
            a_hi, a_lo = _ln_operand(y_ptr, lnw_ptr, lnb_ptr, row0, tm, M, D, BM, BD, CM, PRESPLIT)
        prev = tm
        offs_n = tn * BN + tl.arange(0, BN)
        if EVEN:
            wmask = None
        else:
            wmask = (offs_d < D)[:, None] & (offs_n < N)[None, :]
        # weight pointers built in the loop from vectors (a hoisted [BD, BN] offset tile would hold 64 registers)
        w_hi, w_lo, w_hi2 = _w_parts(w_ptr + offs_d[:, None] * (WROWS * N) + offs_n[None, :], wmask, N, WROWS)
        if NEST:  # three accumulators: the three dots stay in flight together (as gemm_loop: nested)
            acc = (tl.dot(a_lo, w_hi, tl.zeros((BM, BN), tl.float32), input_precision=PREC)
                   + tl.dot(a_hi, w_lo, tl.zeros((BM, BN), tl.float32), input_precision=PREC)) \
                + tl.dot(a_hi, w_hi2, tl.zeros((BM, BN), tl.float32), input_precision=PREC)
        else:
            acc = tl.dot(a_lo, w_hi, tl.zeros((BM, BN), tl.float32), input_precision=PREC)
            acc = tl.dot(a_hi, w_lo, acc, input_precision=PREC)
            acc = tl.dot(a_hi, w_hi2, acc, input_precision=PREC)
        offs_m = tm * BM + tl.arange(0, BM)
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
                flags_ptr, err_ptr, spin_limit, trace_ptr, l, bar, row0, rank, qk_scale,
                cnt_ptr, cepoch, lnfw_ptr, lnfb_ptr, L: tl.constexpr, LNF: tl.constexpr,
                TRACE: tl.constexpr, S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, G: tl.constexpr,
                CAUSAL: tl.constexpr, R: tl.constexpr, BLOCK_R: tl.constexpr, FLAGS: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BQ: tl.constexpr, BKV: tl.constexpr,
                BDH: tl.constexpr, BD: tl.constexpr, BM_LN: tl.constexpr, CM: tl.constexpr,
                PRESPLIT: tl.constexpr, P_LIN: tl.constexpr, P_ATTN: tl.constexpr, WROWS: tl.constexpr,
                BNQ: tl.constexpr, BNF: tl.constexpr, SK: tl.constexpr, AS: tl.constexpr, GE: tl.constexpr,
                AST: tl.constexpr, NEST: tl.constexpr, FF: tl.constexpr, BH: tl.constexpr, BN2: tl.constexpr,
                AO: tl.constexpr, LNL: tl.constexpr = 0, APK: tl.constexpr = 1, ARS: tl.constexpr = 0,
                FTR: tl.constexpr = 0, CPF: tl.constexpr = 0, KVS: tl.constexpr = 0, stat_ptr=None,
                AOW: tl.constexpr = 0, AFL: tl.constexpr = 0, F2H: tl.constexpr = 0, F1H: tl.constexpr = 0):
    """One encoder layer with flat GEMM loops (``gemm_loop: flat``; presplit weights): every GEMM's A is
    pre-split — LN1/LN2 by ``_rows_phase`` with SPLIT (two more phases, 7 barriers per layer), the attention
    output and GELU(FFN1) by their producers' epilogues. x-split scratch [*, D] is reused by LN1 -> QKV,
    attention -> oproj and LN2 -> FFN1 (each use ends at a barrier before the next write). The wide GEMMs use
    [BM, BNQ] (QKV, N = 3D) and [BM, BNF] (FFN1, N = 4D) tiles, oproj and FFN2 (N = D) [BM, BN].
    LNL (``ln_local: qkv``): no LN1 phase, the QKV programs normalise their own row blocks in registers.
    APK > 1 (``attn_pack``): attention tiles over packs of APK consecutive sequences (block-diagonal masks).
    CPF (``copy_phase: fused``; not with LNF or LNL): layer 0's LN1 split was written by the copy phase (its barrier
    is this layer's first). KVS (``attn_kv_split``): two programs per attention tile, one per half of the key blocks,
    exchanging their softmax state through ``stat_ptr`` and the flags after the group's barrier flags. AFL
    (``attn_loop: flat``): the attention phase as one loop over (tile, key block) pairs (``_attention_phase_flat``)."""
    SEG: tl.constexpr = S if APK > 1 else 0
    M: tl.constexpr = G * S
    # F2H (``ffn2_scheme: f16_w1``): FFN2's A (GELU(FFN1)) split into fp16 hi/lo, W2 one fp16 part per row
    W2R: tl.constexpr = 1 if F2H else WROWS
    SPLIT_F: tl.constexpr = PRESPLIT + 2 if F2H else PRESPLIT
    # F1H (``ffn1_scheme: f16_w1``; not with LNF): FFN1's A (LN2) split into fp16 hi/lo, W1 one fp16 part per row
    W1R: tl.constexpr = 1 if F1H else WROWS
    SPLIT_2: tl.constexpr = PRESPLIT + 2 if F1H else PRESPLIT
    NQB: tl.constexpr = (S + BQ - 1) // BQ
    NC: tl.constexpr = (4 * D + BH - 1) // BH
    if LNF or LNL:  # LN1 came from the copy phase (layer 0) or the previous layer's FFN phase (LNF), or is
        bar = bar - 1  # computed by the QKV programs (LNL)
    else:
        if (not CPF) or (l > 0):  # (CPF: layer 0's LN1 split came with the copy)
            _rows_phase(y_ptr, xhi_ptr, ln1w_ptr + l * D, ln1b_ptr + l * D, row0, rank, M, D, True, R, BM_LN, BD, CM,
                        PRESPLIT, xlo_ptr)
        _sync(flags_ptr, rank, bar, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    if LNL:
        _ln_linear_phase(y_ptr, ln1w_ptr + l * D, ln1b_ptr + l * D, wqkv_ptr + l * (WROWS * D * 3 * D),
                         bqkv_ptr + l * (3 * D), fhi_ptr, flo_ptr, row0, rank, M, 3 * D, D, P_LIN, PRESPLIT, R, BM,
                         BNQ, BD, CM, WROWS, 4 * D, NEST)
    elif AS:  # q, k, v split by the QKV epilogue into f_hi/f_lo (free until FFN1), in the group's own rows of 4D
        # (a 3D row stride would overlap other groups' FFN1 rows, which run unsynchronised with this group)
        _linear_phase_flat(xhi_ptr, xlo_ptr, wqkv_ptr + l * (WROWS * D * 3 * D), bqkv_ptr + l * (3 * D), y_ptr,
                           fhi_ptr, flo_ptr, row0, rank, M, 3 * D, D, False, False, PRESPLIT, P_LIN, PRESPLIT, R,
                           BM, BNQ, BK, CM, WROWS, False, 4 * D, NEST, ARS=ARS, FTR=FTR)
    else:
        _linear_phase_flat(xhi_ptr, xlo_ptr, wqkv_ptr + l * (WROWS * D * 3 * D), bqkv_ptr + l * (3 * D), y_ptr,
                           qkv_ptr, qkv_ptr, row0, rank, M, 3 * D, D, False, False, 0, P_LIN, PRESPLIT, R,
                           BM, BNQ, BK, CM, WROWS, False, 0, NEST, ARS=ARS, FTR=FTR)
    _sync(flags_ptr, rank, bar + 1, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    if AFL:  # (attn_loop: flat; AS, not AO / KVS / APK > 1: host.prepare_meta)
        _attention_phase_flat(fhi_ptr, xhi_ptr, xlo_ptr, row0, rank, qk_scale, S, D, H, DH, G, CAUSAL, P_LIN, R, BQ,
                              BKV, BDH, CM, PRESPLIT, flo_ptr, PRESPLIT, AST)
    elif AS:
        _attention_phase(fhi_ptr, xhi_ptr, xlo_ptr, row0, rank, qk_scale, S * APK, D, H, DH, G // APK, CAUSAL, P_LIN,
                         R, BQ, BKV, BDH, CM, PRESPLIT, flo_ptr, PRESPLIT, AST, AO, wo_ptr + l * (WROWS * D * D),
                         bo_ptr + l * D, y_ptr, WROWS, BN2, LNF, cnt_ptr, (cepoch * L + l + 1) * H,
                         ln2w_ptr + l * D, ln2b_ptr + l * D, BM_LN, BD, SEG, KVS, stat_ptr, flags_ptr + BLOCK_R, bar + 2,
                         spin_limit, err_ptr, AOW)
    else:
        _attention_phase(qkv_ptr, xhi_ptr, xlo_ptr, row0, rank, qk_scale, S * APK, D, H, DH, G // APK, CAUSAL,
                         P_ATTN, R, BQ, BKV, BDH, CM, PRESPLIT, None, 0, AST, SEG=SEG)
    _sync(flags_ptr, rank, bar + 2, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    if not AO:  # (AO: the attention tiles added their output projection into y)
        _linear_phase_flat(xhi_ptr, xlo_ptr, wo_ptr + l * (WROWS * D * D), bo_ptr + l * D, y_ptr, y_ptr, y_ptr,
                           row0, rank, M, D, D, False, True, 0, P_LIN, PRESPLIT, R, BM, BN, BK, CM, WROWS, SK, 0,
                           NEST, ARS=ARS, FTR=FTR)
        _sync(flags_ptr, rank, bar + 3, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    b2: tl.constexpr = 3 - AO  # barriers before LN2's
    if LNF:  # LN2 came from the attention phase's last arrivals
        b2f: tl.constexpr = b2 - 1
    else:
        b2f: tl.constexpr = b2
        _rows_phase(y_ptr, xhi_ptr, ln2w_ptr + l * D, ln2b_ptr + l * D, row0, rank, M, D, True, R, BM_LN, BD, CM,
                    SPLIT_2, xlo_ptr)
        _sync(flags_ptr, rank, bar + b2 + 1, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    if FF:  # FFN1 + FFN2 in one phase
        _ffn_fused_phase(xhi_ptr, xlo_ptr, w1_ptr + l * (W1R * D * 4 * D), b1_ptr + l * (4 * D),
                         w2_ptr + l * (W2R * 4 * D * D), b2_ptr + l * D, y_ptr, row0, rank,
                         M, D, GE, P_LIN, PRESPLIT, R, BM, BH, BN2, BK, CM, WROWS,
                         LNF, cnt_ptr + G * NQB, (cepoch * L + l + 1) * NC, ln1w_ptr + (l + 1) * D,
                         ln1b_ptr + (l + 1) * D, lnfw_ptr, lnfb_ptr, l == L - 1, BM_LN, BD, F2H, F1H)
        _sync(flags_ptr, rank, bar + b2f + 2, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    else:
        f1hi_ptr, f1lo_ptr = _f16_parts(xhi_ptr, xlo_ptr, F1H and PRESPLIT == 1)  # (LN2 stored fp16 parts)
        _linear_phase_flat(f1hi_ptr, f1lo_ptr, w1_ptr + l * (W1R * D * 4 * D), b1_ptr + l * (4 * D), y_ptr,
                           fhi_ptr, flo_ptr, row0, rank, M, 4 * D, D, GE, False, SPLIT_F, P_LIN, PRESPLIT, R,
                           BM, BNF, BK, CM, W1R, False, 0, NEST, ARS=ARS, FTR=FTR)
        _sync(flags_ptr, rank, bar + b2 + 2, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
        f2hi_ptr, f2lo_ptr = _f16_parts(fhi_ptr, flo_ptr, F2H and PRESPLIT == 1)  # (FFN1 stored fp16 parts)
        _linear_phase_flat(f2hi_ptr, f2lo_ptr, w2_ptr + l * (W2R * 4 * D * D), b2_ptr + l * D, y_ptr, y_ptr, y_ptr,
                           row0, rank, M, D, 4 * D, False, True, 0, P_LIN, PRESPLIT, R, BM, BN, BK, CM, W2R, SK,
                           0, NEST, ARS=ARS, FTR=FTR)
        _sync(flags_ptr, rank, bar + b2 + 3, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)


BARRIERS_PER_LAYER = tl.constexpr(5)       # tiled GEMM loops
BARRIERS_PER_LAYER_FLAT = tl.constexpr(7)  # flat GEMM loops: + the LN1 and LN2 split phases (- FF - AO - 2 LNF - LNL)


@triton.jit(do_not_specialize=["epoch", "cepoch", "spin_limit"])
def _seqres_fwd(
    x_ptr,                  # [B*S, D] fp32 input (read once)
    y_ptr,                  # [B*S, D] fp32 output; the residual stream during the pass
    a_ptr,                  # [B*S, D] fp32 scratch: merged attention heads
    qkv_ptr,                # [B*S, 3D] fp32 scratch
    f_ptr,                  # [B*S, 4D] fp32 scratch: GELU(FFN1)
    xhi_ptr, xlo_ptr,       # [B*S, D] split scratch of the flat GEMM loops (FLAT; else unused)
    fhi_ptr, flo_ptr,       # [B*S, 4D] split GELU(FFN1) (FLAT; else unused)
    ln1w_ptr, ln1b_ptr,     # [L, D]
    wqkv_ptr, bqkv_ptr,     # [L, D, 3D] (w_qkv transposed; PRESPLIT: [L, WROWS*D, 3D] bf16 hi/lo(/hi) rows), [L, 3D]
    wo_ptr, bo_ptr,         # [L, D, D], [L, D]
    ln2w_ptr, ln2b_ptr,     # [L, D]
    w1_ptr, b1_ptr,         # [L, D, 4D], [L, 4D] (F1H, ffn1_scheme f16_w1: [L, D, 4D] fp16, one part)
    w2_ptr, b2_ptr,         # [L, 4D, D], [L, D] (F2H, ffn2_scheme f16_w1: [L, 4D, D] fp16, one part)
    lnfw_ptr, lnfb_ptr,     # [D]
    flags_ptr,              # [n_groups, BLOCK_R] int32, monotonic barrier flags
    cnt_ptr,                # [n_groups, G*NQB + NTM] int32, monotonic row-block counters (LNF; else unused)
    err_ptr,                # [1] int32, barrier timeout report: the flag value waited for
    trace_ptr,              # [grid, 2 * barriers + 2] int64 phase timestamps (TRACE; else unused)
    spin_limit,             # polls before a barrier gives up and reports (2**31 - 1: unbounded in practice)
    epoch,                  # flags value before this launch; barrier i waits for epoch + 1 + i
    cepoch,                 # launches counted on cnt before this one (LNF)
    qk_scale,               # log2(e) / sqrt(DH)
    S: tl.constexpr, D: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, L: tl.constexpr,
    L_FAST: tl.constexpr, G: tl.constexpr, CAUSAL: tl.constexpr,
    R: tl.constexpr, BLOCK_R: tl.constexpr, FLAGS: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BQ: tl.constexpr, BKV: tl.constexpr,
    BDH: tl.constexpr, BD: tl.constexpr, BM_LN: tl.constexpr, CM: tl.constexpr,
    LN_STATS: tl.constexpr, LN_CHUNK: tl.constexpr, BLOCKED: tl.constexpr, PRESPLIT: tl.constexpr,
    FLAT: tl.constexpr, TRACE: tl.constexpr, WROWS: tl.constexpr, BNQ: tl.constexpr, BNF: tl.constexpr,
    SK: tl.constexpr, AS: tl.constexpr, GE: tl.constexpr, AST: tl.constexpr, NEST: tl.constexpr,
    FF: tl.constexpr, BH: tl.constexpr, BN2: tl.constexpr, AO: tl.constexpr, LNF: tl.constexpr, NCNT: tl.constexpr,
    LNL: tl.constexpr, APK: tl.constexpr, ARS: tl.constexpr, WCH: tl.constexpr, FTR: tl.constexpr, CPF: tl.constexpr,
    KVS: tl.constexpr, AOW: tl.constexpr, AFL: tl.constexpr, F2H: tl.constexpr, F1H: tl.constexpr,
    P_QKV: tl.constexpr, P_ATTN: tl.constexpr, P_O: tl.constexpr, P_FFN1: tl.constexpr,
    P_FFN2: tl.constexpr, P_FAST: tl.constexpr,
):
    pid = tl.program_id(0)
    if R == 1:  # rank a compile-time 0: the interpreter cannot loop from a program-id tensor
        group = pid
        rank = 0
    else:
        group = pid // R
        rank = pid % R
    M: tl.constexpr = G * S
    row0 = group * M
    flags_ptr = flags_ptr + group * (BLOCK_R * (2 if KVS else 1))  # KVS: the key halves' flags after the barrier's
    NBL: tl.constexpr = (BARRIERS_PER_LAYER_FLAT - FF - AO - 2 * LNF - LNL) if FLAT else BARRIERS_PER_LAYER
    NBAR: tl.constexpr = 1 + L * NBL - CPF
    if TRACE:  # row of this program: [start, (arrival, departure) per barrier, end]
        trace_row = trace_ptr + pid.to(tl.int64) * (2 * NBAR + 2)
        tl.store(trace_row, _now(pid))
        trace_ptr = trace_row + 1 - 2 * (epoch + 1)

    if CPF:  # the copy and layer 0's LN1 split in one pass over x; its barrier is layer 0's first
        _rows_phase(x_ptr, xhi_ptr, ln1w_ptr, ln1b_ptr, row0, rank, M, D, True, R, BM_LN, BD, CM, PRESPLIT, xlo_ptr,
                    y_ptr, True)
    else:
        _rows_phase(x_ptr, y_ptr, lnfw_ptr, lnfb_ptr, row0, rank, M, D, False, R, BM_LN, BD, CM)
    if LNF:  # layer 0's LN1 split straight from x (the same rows; x is never written)
        _rows_phase(x_ptr, xhi_ptr, ln1w_ptr, ln1b_ptr, row0, rank, M, D, True, R, BM_LN, BD, CM, PRESPLIT, xlo_ptr)
    if not CPF:
        _sync(flags_ptr, rank, epoch + 1, err_ptr, spin_limit, R, BLOCK_R, FLAGS, trace_ptr, TRACE)
    if FLAT:
        for l in range(0, L):
            _layer_flat(y_ptr, qkv_ptr, xhi_ptr, xlo_ptr, fhi_ptr, flo_ptr,
                        ln1w_ptr, ln1b_ptr, wqkv_ptr, bqkv_ptr, wo_ptr, bo_ptr,
                        ln2w_ptr, ln2b_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr,
                        flags_ptr, err_ptr, spin_limit, trace_ptr, l,
                        epoch + 2 - CPF + NBL * l, row0, rank, qk_scale, cnt_ptr + group * NCNT, cepoch, lnfw_ptr,
                        lnfb_ptr, L, LNF, TRACE, S, D, H, DH, G, CAUSAL, R, BLOCK_R, FLAGS, BM, BN, BK, BQ, BKV, BDH, BD,
                        BM_LN, CM, PRESPLIT, P_QKV, P_ATTN, WROWS, BNQ, BNF, SK, AS, GE, AST, NEST, FF, BH, BN2, AO, LNL,
                        APK, ARS, FTR, CPF, KVS, qkv_ptr + group * (R * 2 * BQ), AOW, AFL, F2H, F1H)
    else:
        if L_FAST < L:
            for l in range(0, L - L_FAST):
                _layer(y_ptr, a_ptr, qkv_ptr, f_ptr, ln1w_ptr, ln1b_ptr, wqkv_ptr, bqkv_ptr, wo_ptr, bo_ptr,
                       ln2w_ptr, ln2b_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr,
                       flags_ptr, err_ptr, spin_limit, trace_ptr, l,
                       epoch + 2 + BARRIERS_PER_LAYER * l, row0, rank, qk_scale,
                       TRACE, S, D, H, DH, G, CAUSAL, R, BLOCK_R, FLAGS, BM, BN, BK, BQ, BKV, BDH, CM,
                       LN_STATS, LN_CHUNK, BLOCKED, PRESPLIT, P_QKV, P_ATTN, P_O, P_FFN1, P_FFN2)
        if L_FAST > 0:
            for l in range(L - L_FAST, L):
                _layer(y_ptr, a_ptr, qkv_ptr, f_ptr, ln1w_ptr, ln1b_ptr, wqkv_ptr, bqkv_ptr, wo_ptr, bo_ptr,
                       ln2w_ptr, ln2b_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr,
                       flags_ptr, err_ptr, spin_limit, trace_ptr, l,
                       epoch + 2 + BARRIERS_PER_LAYER * l, row0, rank, qk_scale,
                       TRACE, S, D, H, DH, G, CAUSAL, R, BLOCK_R, FLAGS, BM, BN, BK, BQ, BKV, BDH, CM,
                       LN_STATS, LN_CHUNK, BLOCKED, PRESPLIT, P_FAST, P_ATTN, P_FAST, P_FAST, P_FAST)
    # every row of y is final once the last barrier passed; each program normalises its own row blocks
    if not LNF:  # (LNF: the last layer's FFN phase did, per row block)
        _rows_phase(y_ptr, y_ptr, lnfw_ptr, lnfb_ptr, row0, rank, M, D, True, R, BM_LN, BD, CM)
    if TRACE:
        tl.store(trace_row + 2 * NBAR + 1, _now(pid))
