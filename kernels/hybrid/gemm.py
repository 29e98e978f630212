"""Linear layers y = a @ w.T + b at a chosen precision, on library GEMMs (cuBLAS through torch).

Schemes (per op and layer, ``config/variant/hybrid.yaml``):
  "bf16x3"  one bf16 GEMM with K tripled (split_layout): a3 @ w3.T, fp32 accumulate and output
            (``torch.mm(..., out_dtype=torch.float32)``); bias folded into the K tail. ~1e-5 relative.
  "fp32"    F.linear in fp32, TF32 off (cuBLAS SGEMM).
  "tf32"    F.linear with TF32 on (single-pass; fails the gate where errors compound, SPEC §4).
The activation operand comes in the layout the scheme needs: the split layout for "bf16x3", fp32 rows
otherwise (the producing kernel writes it that way: see ``needs_split``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..common.split import split_hi_lo
from ..reference import fp32_matmul
from .split_layout import TAIL, split_dtype, split_width

SCHEMES = ("bf16x3", "fp32", "tf32")


def needs_split(scheme: str) -> bool:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown GEMM scheme {scheme!r}; valid: {', '.join(SCHEMES)}")
    return scheme == "bf16x3"


@dataclass
class PreparedLinear:
    scheme: str
    w: torch.Tensor          # bf16x3: [N, 3K + TAIL] split weight (+bias tail); else [N, K] fp32
    b: torch.Tensor | None   # [N] fp32 (None for bf16x3: folded into w)


def split_weight(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """w: [N, K], b: [N] fp32 -> [N, 3K + TAIL] = [w_hi | w_lo | w_hi | b_hi, b_lo, 0..] (split_layout)."""
    N, K = w.shape
    w_hi, w_lo = (t.float() for t in split_hi_lo(w))
    b_hi, b_lo = (t.float() for t in split_hi_lo(b))
    out = torch.zeros((N, split_width(K)), device=w.device, dtype=torch.float32)
    out[:, :K] = w_hi
    out[:, K:2 * K] = w_lo
    out[:, 2 * K:3 * K] = w_hi
    out[:, 3 * K] = b_hi
    out[:, 3 * K + 1] = b_lo
    return out.to(split_dtype(w.device)).contiguous()


def prepare_linear(w: torch.Tensor, b: torch.Tensor, scheme: str) -> PreparedLinear:
    """w: [N, K], b: [N] fp32 -> the scheme's weight layout (one-time, untimed)."""
    if needs_split(scheme):
        return PreparedLinear(scheme, split_weight(w, b), None)
    return PreparedLinear(scheme, w.contiguous(), b.contiguous())


def linear(a: torch.Tensor, lin: PreparedLinear) -> torch.Tensor:
    """a: [M, 3K + TAIL] split layout (bf16x3) or [M, K] fp32 -> y: [M, N] fp32 = a @ w.T + b."""
    if lin.scheme == "bf16x3":
        assert a.shape[1] == lin.w.shape[1] and a.dtype == lin.w.dtype, \
            f"split operand {tuple(a.shape)} {a.dtype} does not match weight {tuple(lin.w.shape)} {lin.w.dtype}"
        if a.is_cuda:
            return torch.mm(a, lin.w.t(), out_dtype=torch.float32)
        return a @ lin.w.t()  # CPU: fp32 tensors holding bf16 values, exact products, fp32 accumulation
    with fp32_matmul(lin.scheme == "tf32"):
        return F.linear(a, lin.w, lin.b)
