"""The split-operand layout shared by every kernel that feeds a bf16x3 GEMM.

An fp32 activation a: [M, K] is stored as one bf16 matrix a3: [M, 3K + TAIL] =
``[a_hi | a_hi | a_lo | 1, 1, 0 ... 0]`` and a weight w: [N, K] with bias b: [N] as w3: [N, 3K + TAIL] =
``[w_hi | w_lo | w_hi | b_hi, b_lo, 0 ... 0]``, so that ONE GEMM ``a3 @ w3.T`` with fp32 accumulation gives
``a_hi w_hi + a_hi w_lo + a_lo w_hi + b`` ~ ``a @ w.T + b`` to ~1e-5 relative (SPEC §9). TAIL = 16 keeps
the row length a multiple of 16 elements when K is: cuBLAS wants 16-byte rows, and Triton specialises
only integers divisible by 16 (a row stride of 3K + 8 left every store of the split kernels unvectorised). On the CPU (Triton interpreter, no bf16)
the same values are held in fp32 tensors, so the CPU reproduces the GPU arithmetic.
"""
from __future__ import annotations

import torch

TAIL = 16


def split_width(K: int) -> int:
    return 3 * K + TAIL


def split_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA; fp32 holding bf16 values on the CPU (the interpreter has no bf16)."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def use_bf16(device: torch.device) -> bool:
    return torch.device(device).type == "cuda"


def bf16_round(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> fp32 holding the nearest bf16 value."""
    return t.to(torch.bfloat16).to(torch.float32)
