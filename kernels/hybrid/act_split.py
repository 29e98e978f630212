"""Elementwise activation (exact GELU or identity) + split into the next GEMM's operand layout.

    out = [g_hi | g_hi | g_lo | 1, 1, 0..]   with g = GELU(u) (or u)       (split_layout)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..common.tl_helpers import gelu_erf, split_bf16
from .split_layout import TAIL, split_dtype, split_width, use_bf16


@triton.jit
def _act_split_kernel(
    u_ptr,        # [M, N] fp32
    out_ptr,      # [M, 3N + TAIL] split layout
    stride_u,     # row stride of u
    stride_out,   # row stride of out
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GELU: tl.constexpr,
    BF16: tl.constexpr,
    TAIL_W: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    g = tl.load(u_ptr + row * stride_u + offs_n, mask=mask_n, other=0.0)
    if GELU:
        g = gelu_erf(g)
    hi, lo = split_bf16(g, BF16)
    hi = hi.to(out_ptr.dtype.element_ty)
    o = out_ptr + row * stride_out
    tl.store(o + offs_n, hi, mask=mask_n)
    tl.store(o + N + offs_n, hi, mask=mask_n)
    tl.store(o + 2 * N + offs_n, lo.to(out_ptr.dtype.element_ty), mask=mask_n)
    if pid_n == 0:
        offs_t = tl.arange(0, TAIL_W)
        tl.store(o + 3 * N + offs_t, tl.where(offs_t < 2, 1.0, 0.0).to(out_ptr.dtype.element_ty))


def act_split(u: torch.Tensor, gelu: bool = True, block_n: int = 1024, num_warps: int = 4) -> torch.Tensor:
    """u: [M, N] fp32 (row-major rows) -> [M, 3N + TAIL] split layout of GELU(u) (or of u)."""
    assert u.dim() == 2 and u.dtype == torch.float32 and u.stride(1) == 1, "u: [M, N] fp32, row-major"
    M, N = u.shape
    out = torch.empty((M, split_width(N)), device=u.device, dtype=split_dtype(u.device))
    BLOCK_N = min(block_n, triton.next_power_of_2(N))
    _act_split_kernel[(M, triton.cdiv(N, BLOCK_N))](
        u, out, u.stride(0), out.stride(0),
        N=N, BLOCK_N=BLOCK_N, GELU=gelu, BF16=use_bf16(u.device), TAIL_W=TAIL, num_warps=num_warps)
    return out
