"""QKV projection output -> head-major bf16 hi/lo planes for the attention kernel.

    qkv: [B*S, 3D] fp32 (token-major, columns q | k | v, head j = columns j*dh:(j+1)*dh of each part)
    planes: [6, B*H, S, dh] = q_hi, q_lo, k_hi, k_lo, v_hi, v_lo, with q pre-scaled by
            qk_scale = log2(e) / sqrt(dh) (the attention kernel works in base 2)
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..common.tl_helpers import split_bf16
from .split_layout import split_dtype, use_bf16

LOG2E = 1.4426950408889634


@triton.jit
def _qkv_split_kernel(
    qkv_ptr,      # [B*S, 3D] fp32
    planes_ptr,   # [6, B*H, S, DH]
    S,            # sequence length
    stride_t,     # row (token) stride of qkv
    stride_p,     # plane stride: B*H*S*DH
    qk_scale,     # log2(e) / sqrt(DH), applied to q before the split
    H: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BF16: tl.constexpr,
):
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, DH)
    mask = (offs_s < S)[:, None]
    src = qkv_ptr + (b * S + offs_s).to(tl.int64)[:, None] * stride_t + h * DH + offs_d[None, :]
    dst = planes_ptr + pid_bh.to(tl.int64) * S * DH + offs_s[:, None] * DH + offs_d[None, :]
    ty = planes_ptr.dtype.element_ty
    for part in tl.static_range(3):
        t = tl.load(src + part * H * DH, mask=mask, other=0.0)
        if part == 0:
            t = t * qk_scale
        hi, lo = split_bf16(t, BF16)
        tl.store(dst + (2 * part) * stride_p, hi.to(ty), mask=mask)
        tl.store(dst + (2 * part + 1) * stride_p, lo.to(ty), mask=mask)


def qkv_split(qkv: torch.Tensor, B: int, S: int, H: int, block_s: int | None = None,
              num_warps: int = 8) -> torch.Tensor:
    """qkv: [B*S, 3D] fp32 -> planes [6, B*H, S, dh] (q_hi, q_lo, k_hi, k_lo, v_hi, v_lo; q scaled).
    ``block_s`` None: 2048 // dh tokens per program (sm_90: 32 registers at 8 warps, docs/hybrid.md §3)."""
    assert qkv.dim() == 2 and qkv.dtype == torch.float32 and qkv.stride(1) == 1
    M, D3 = qkv.shape
    assert M == B * S and D3 % (3 * H) == 0, f"qkv {tuple(qkv.shape)} does not match B={B} S={S} H={H}"
    dh = D3 // (3 * H)
    assert dh == triton.next_power_of_2(dh), f"head dim {dh} must be a power of two"
    block_s = block_s or max(1, 2048 // dh)
    planes = torch.empty((6, B * H, S, dh), device=qkv.device, dtype=split_dtype(qkv.device))
    _qkv_split_kernel[(triton.cdiv(S, block_s), B * H)](
        qkv, planes, S, qkv.stride(0), planes.stride(0), LOG2E / math.sqrt(dh),
        H=H, DH=dh, BLOCK_S=block_s, BF16=use_bf16(qkv.device), num_warps=num_warps)
    return planes
