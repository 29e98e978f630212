"""Flash-style attention with split-precision (bf16 hi/lo) tensor-core dots, no S x S materialisation.

    planes: [6, B*H, S, dh] from ``qkv_split`` (q pre-scaled by log2(e)/sqrt(dh))
    out:    [B*S, D] fp32 merged heads, or the split layout [B*S, 3D + TAIL] of the out-projection

Online softmax in fp32 (base 2). Each of q k^T and P V runs at a precision from PRECISIONS (bf16 products
of hi/lo parts, see ``dot_split``); P is split in registers. Causal: key blocks
strictly below the diagonal run without masks, the diagonal blocks with masks, blocks above are
skipped; query blocks are issued heaviest first. S need not be a multiple of the blocks.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..common.tl_helpers import dot_split, split_bf16
from .split_layout import TAIL, split_dtype, split_width, use_bf16

# precision of one dot a @ b -> (use a_lo, use b_lo); for q k^T a = q, b = k; for P V a = P, b = V
PRECISIONS = {"bf16x3": (True, True), "bf16x2a": (True, False), "bf16x2b": (False, True),
              "bf16": (False, False)}


@triton.jit
def _attn_block(acc, l_i, m_i, q_hi, q_lo, k_base, v_base, offs_m, offs_n, offs_d, S, start_n,
                MASK: tl.constexpr, CAUSAL: tl.constexpr, DH: tl.constexpr, BLOCK_N: tl.constexpr,
                QK_ALO: tl.constexpr, QK_BLO: tl.constexpr, PV_ALO: tl.constexpr, PV_BLO: tl.constexpr, BF16: tl.constexpr, PREC: tl.constexpr,
                stride_p):
    """One key block: scores, online-softmax update, P V accumulation."""
    kn = start_n + offs_n                                            # [BLOCK_N] key index
    kv_off = kn[:, None] * DH + offs_d[None, :]                      # [BLOCK_N, DH]
    if MASK:
        kv_mask = (kn < S)[:, None]
        k_hi = tl.load(k_base + kv_off, mask=kv_mask, other=0.0)
        v_hi = tl.load(v_base + kv_off, mask=kv_mask, other=0.0)
        k_lo = k_hi
        v_lo = v_hi
        if QK_BLO:
            k_lo = tl.load(k_base + stride_p + kv_off, mask=kv_mask, other=0.0)
        if PV_BLO:
            v_lo = tl.load(v_base + stride_p + kv_off, mask=kv_mask, other=0.0)
    else:
        k_hi = tl.load(k_base + kv_off)
        v_hi = tl.load(v_base + kv_off)
        k_lo = k_hi
        v_lo = v_hi
        if QK_BLO:
            k_lo = tl.load(k_base + stride_p + kv_off)
        if PV_BLO:
            v_lo = tl.load(v_base + stride_p + kv_off)
    qk = tl.zeros([q_hi.shape[0], BLOCK_N], dtype=tl.float32)
    qk = dot_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), qk, QK_ALO, QK_BLO, PREC)  # log2 units
    if MASK:
        valid = (kn < S)[None, :]
        if CAUSAL:
            valid = valid & (kn[None, :] <= offs_m[:, None])
        qk = tl.where(valid, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.math.exp2(qk - m_new[:, None])                            # [BLOCK_M, BLOCK_N] fp32
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    p_hi, p_lo = split_bf16(p, BF16)                                 # p_lo dead unless PV_ALO
    acc = dot_split(p_hi, p_lo, v_hi, v_lo, acc, PV_ALO, PV_BLO, PREC)
    return acc, l_i, m_new


@triton.jit
def _attn_inner(acc, l_i, m_i, q_hi, q_lo, k_base, v_base, offs_m, offs_n, offs_d, S, lo, hi,
                MASK: tl.constexpr, CAUSAL: tl.constexpr, DH: tl.constexpr, BLOCK_N: tl.constexpr,
                QK_ALO: tl.constexpr, QK_BLO: tl.constexpr, PV_ALO: tl.constexpr, PV_BLO: tl.constexpr, BF16: tl.constexpr, PREC: tl.constexpr,
                stride_p):
    """Key blocks [lo, hi). GPU: a pipelined ``tl.range``; interpreter (BF16=False): a while loop,
    because the interpreter cannot use run-time loop bounds in ``range`` with numpy >= 2."""
    if BF16:
        for start_n in tl.range(lo, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _attn_block(acc, l_i, m_i, q_hi, q_lo, k_base, v_base, offs_m, offs_n, offs_d,
                                        S, start_n, MASK, CAUSAL, DH, BLOCK_N, QK_ALO, QK_BLO, PV_ALO, PV_BLO, BF16,
                                        PREC, stride_p)
    else:
        start_n = lo
        while start_n < hi:
            acc, l_i, m_i = _attn_block(acc, l_i, m_i, q_hi, q_lo, k_base, v_base, offs_m, offs_n, offs_d,
                                        S, start_n, MASK, CAUSAL, DH, BLOCK_N, QK_ALO, QK_BLO, PV_ALO, PV_BLO, BF16,
                                        PREC, stride_p)
            start_n += BLOCK_N
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    planes_ptr,   # [6, B*H, S, DH]: q_hi, q_lo, k_hi, k_lo, v_hi, v_lo
    out_ptr,      # [B*S, D] fp32, or [B*S, 3D + TAIL] split layout when SPLIT_OUT
    S,            # sequence length
    stride_p,     # plane stride (B*H*S*DH)
    stride_om,    # row stride of out
    H: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    QK_ALO: tl.constexpr,
    QK_BLO: tl.constexpr,
    PV_ALO: tl.constexpr,
    PV_BLO: tl.constexpr,
    SPLIT_OUT: tl.constexpr,
    BF16: tl.constexpr,
    PREC: tl.constexpr,
    TAIL_W: tl.constexpr,
):
    D: tl.constexpr = H * DH
    pid_m = tl.cdiv(S, BLOCK_M) - 1 - tl.program_id(0)               # heaviest (causal) blocks first
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DH)
    head = planes_ptr + pid_bh.to(tl.int64) * S * DH
    q_off = offs_m[:, None] * DH + offs_d[None, :]
    q_mask = (offs_m < S)[:, None]
    q_hi = tl.load(head + q_off, mask=q_mask, other=0.0)              # [BLOCK_M, DH]
    q_lo = q_hi
    if QK_ALO:
        q_lo = tl.load(head + stride_p + q_off, mask=q_mask, other=0.0)
    k_base = head + 2 * stride_p
    v_base = head + 4 * stride_p

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, DH], dtype=tl.float32)
    if CAUSAL:
        n_full = (start_m // BLOCK_N) * BLOCK_N                      # keys all <= every query here
        n_end = tl.minimum(start_m + BLOCK_M, S)
    else:
        n_full = (S // BLOCK_N) * BLOCK_N
        n_end = S
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q_hi, q_lo, k_base, v_base, offs_m, offs_n, offs_d, S,
                                0, n_full, False, CAUSAL, DH, BLOCK_N, QK_ALO, QK_BLO, PV_ALO, PV_BLO, BF16, PREC,
                                stride_p)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q_hi, q_lo, k_base, v_base, offs_m, offs_n, offs_d, S,
                                n_full, n_end, True, CAUSAL, DH, BLOCK_N, QK_ALO, QK_BLO, PV_ALO, PV_BLO, BF16, PREC,
                                stride_p)
    acc = acc / l_i[:, None]

    rows = (b * S + offs_m).to(tl.int64)
    o = out_ptr + rows[:, None] * stride_om + h * DH + offs_d[None, :]
    if SPLIT_OUT:
        ty = out_ptr.dtype.element_ty
        a_hi, a_lo = split_bf16(acc, BF16)
        tl.store(o, a_hi.to(ty), mask=q_mask)
        tl.store(o + D, a_hi.to(ty), mask=q_mask)
        tl.store(o + 2 * D, a_lo.to(ty), mask=q_mask)
        if h == 0:
            offs_t = tl.arange(0, TAIL_W)
            t = out_ptr + rows[:, None] * stride_om + 3 * D + offs_t[None, :]
            tl.store(t, tl.where(offs_t[None, :] < 2, 1.0, 0.0).to(ty) + tl.zeros([BLOCK_M, TAIL_W], ty),
                     mask=q_mask)
    else:
        tl.store(o, acc, mask=q_mask)


def attention(planes: torch.Tensor, B: int, S: int, H: int, causal: bool, split_out: bool = True,
              qk_prec: str = "bf16x3", pv_prec: str = "bf16x3", block_m: int = 128, block_n: int = 64,
              num_warps: int = 8, num_stages: int = 2) -> torch.Tensor:
    """planes: [6, B*H, S, dh] (``qkv_split``) -> out: [B*S, 3D + TAIL] split layout (``split_out``)
    or [B*S, D] fp32, heads merged (column h*dh + d)."""
    assert planes.dim() == 4 and planes.shape[:3] == (6, B * H, S) and planes.is_contiguous()
    if qk_prec not in PRECISIONS or pv_prec not in PRECISIONS:
        raise ValueError(f"qk_prec={qk_prec!r}, pv_prec={pv_prec!r}: valid {', '.join(PRECISIONS)}")
    qk_alo, qk_blo = PRECISIONS[qk_prec]
    pv_alo, pv_blo = PRECISIONS[pv_prec]
    dh = planes.shape[3]
    D = H * dh
    if split_out:
        out = torch.empty((B * S, split_width(D)), device=planes.device, dtype=split_dtype(planes.device))
    else:
        out = torch.empty((B * S, D), device=planes.device, dtype=torch.float32)
    bf16 = use_bf16(planes.device)
    _attn_fwd[(triton.cdiv(S, block_m), B * H)](
        planes, out, S, planes.stride(0), out.stride(0),
        H=H, DH=dh, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal, QK_ALO=qk_alo, QK_BLO=qk_blo,
        PV_ALO=pv_alo, PV_BLO=pv_blo, SPLIT_OUT=split_out, BF16=bf16, PREC="tf32" if bf16 else "ieee",
        TAIL_W=TAIL, num_warps=num_warps, num_stages=num_stages)
    return out
