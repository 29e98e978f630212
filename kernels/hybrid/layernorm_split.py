"""Residual add + LayerNorm, writing either fp32 rows or the split-operand layout of the next GEMM.

    x_new = x (+ y)                      # the residual add of the previous sub-layer, fused
    h     = LayerNorm(x_new; w, b)       # fp32 statistics, biased variance (F.layer_norm)
    out   = h  or  [h_hi | h_hi | h_lo | 1, 1, 0..]   (split_layout)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..common.tl_helpers import layernorm_rows, split_bf16
from .split_layout import TAIL, split_dtype, split_width, use_bf16


@triton.jit
def _ln_split_kernel(
    x_ptr,        # [M, D] fp32
    y_ptr,        # [M, D] fp32, added to x when HAS_Y
    xo_ptr,       # [M, D] fp32, x + y stored when WRITE_X
    w_ptr,        # [D] fp32
    b_ptr,        # [D] fp32
    out_ptr,      # [M, D] fp32, or [M, 3D + TAIL] split layout when SPLIT
    stride_x,     # row stride of x, y, xo
    stride_out,   # row stride of out
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EPS: tl.constexpr,
    HAS_Y: tl.constexpr,
    WRITE_X: tl.constexpr,
    SPLIT: tl.constexpr,
    BF16: tl.constexpr,
    TAIL_W: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    x = tl.load(x_ptr + row * stride_x + offs_d, mask=mask_d, other=0.0)
    if HAS_Y:
        x += tl.load(y_ptr + row * stride_x + offs_d, mask=mask_d, other=0.0)
    if WRITE_X:
        tl.store(xo_ptr + row * stride_x + offs_d, x, mask=mask_d)
    w = tl.load(w_ptr + offs_d, mask=mask_d, other=0.0)
    b = tl.load(b_ptr + offs_d, mask=mask_d, other=0.0)
    h = tl.reshape(layernorm_rows(tl.reshape(x, (1, BLOCK_D)), w, b, mask_d, D, EPS), (BLOCK_D,))
    o = out_ptr + row * stride_out
    if SPLIT:
        hi, lo = split_bf16(h, BF16)
        hi = hi.to(out_ptr.dtype.element_ty)
        tl.store(o + offs_d, hi, mask=mask_d)
        tl.store(o + D + offs_d, hi, mask=mask_d)
        tl.store(o + 2 * D + offs_d, lo.to(out_ptr.dtype.element_ty), mask=mask_d)
        offs_t = tl.arange(0, TAIL_W)
        tl.store(o + 3 * D + offs_t, tl.where(offs_t < 2, 1.0, 0.0).to(out_ptr.dtype.element_ty))
    else:
        tl.store(o + offs_d, h, mask=mask_d)


def ln_split(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor | None = None,
             split: bool = True, write_x: bool = False, eps: float = 1e-5, num_warps: int | None = None):
    """x, y: [M, D] fp32 -> (out, x_new). out: [M, 3D+TAIL] split layout if ``split`` else [M, D] fp32;
    x_new = x + y (a fresh tensor when ``write_x``, else None)."""
    assert x.dim() == 2 and x.dtype == torch.float32 and x.stride(1) == 1, "x: [M, D] fp32, row-major"
    M, D = x.shape
    assert w.shape == (D,) and b.shape == (D,)
    if y is not None:
        assert y.shape == x.shape and y.stride() == x.stride(), "y must match x's shape and strides"
    out = torch.empty((M, split_width(D)) if split else (M, D), device=x.device,
                      dtype=split_dtype(x.device) if split else torch.float32)
    x_new = torch.empty_like(x) if write_x else None
    BLOCK_D = triton.next_power_of_2(D)
    if num_warps is None:
        num_warps = max(1, min(16, BLOCK_D // 256))
    _ln_split_kernel[(M,)](
        x, y if y is not None else x, x_new if write_x else x, w, b, out,
        x.stride(0), out.stride(0),
        D=D, BLOCK_D=BLOCK_D, EPS=eps, HAS_Y=y is not None, WRITE_X=write_x, SPLIT=split,
        BF16=use_bf16(x.device), TAIL_W=TAIL, num_warps=num_warps)
    return out, x_new
