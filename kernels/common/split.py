"""Host-side split precision shared by the families: fp32 = bf16 hi + bf16 lo (+ O(2^-17) relative)."""
from __future__ import annotations

import torch


def split_hi_lo(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x fp32 -> (hi, lo) bf16 with hi = round(x), lo = round(x - hi) (round to nearest even)."""
    hi = x.to(torch.bfloat16)
    lo = (x - hi.float()).to(torch.bfloat16)
    return hi, lo


# f16f8 (the dag family's form ws): A's lo part (|lo| <= 2^-11 |A|, A's fp16 rounding) is stored as fp8(lo * 2^11);
# the weights' as fp8((w - hi) * 2^11 * s), s = f8_weight_scale(max |w|)
F8_A_SCALE = 2.0 ** 11
F8_W_MAX = 224.0   # the largest scaled |w|: e4m3's largest normal is 448, one binade of headroom


def f8_weight_scale(amax: torch.Tensor) -> torch.Tensor:
    """f16f8's weight scale s for weights of max |w| ``amax`` (a tensor, any shape): the power of two that puts
    max |w| · s at or below ``F8_W_MAX`` (and above half of it)."""
    return torch.exp2(torch.floor(torch.log2(F8_W_MAX / amax.clamp_min(torch.finfo(torch.float32).tiny))))
