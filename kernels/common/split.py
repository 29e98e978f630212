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


# int8 limbs (the dag family's form ws, scheme I8_SCHEME; bench/seqres/precision_probe's I8_SCHEMES): a value as
# scale · (128 · l0 + l1), l0 in [-127, 127] and l1 in [-64, 63] two int8 tensors, the integer at most I8_Q; the
# kernel's scheme takes a scale a row (column) and I8_BLOCK-deep K block
I8_Q = 127 * 128 + 63
I8_SCHEME = "i8x2cb128"
I8_BLOCK = 128


def i8_limbs(x: torch.Tensor, dim: int, block: int | None):
    """x -> (l0, l1, scale) in float64: x ≈ scale · (128 · l0 + l1), the scale per slice along ``dim`` (or per
    ``block``-long piece of it) mapping its largest |x| to I8_Q (a slice of zeros: 1 / I8_Q), q = round(x / scale)
    (half to even), l0 = floor(q / 128 + 1/2), l1 = q − 128 · l0."""
    x = x.double()
    xt = x.movedim(dim, -1)
    n = xt.shape[-1]
    if block and n % block:
        raise ValueError(f"i8 block {block} does not divide K = {n}")
    pieces = xt.unflatten(-1, (n // block, block)) if block else xt.unsqueeze(-2)
    m = pieces.abs().amax(-1, keepdim=True)
    scale = (torch.where(m > 0, m, torch.ones_like(m)) / I8_Q).expand_as(pieces).flatten(-2).movedim(-1, dim)
    q = torch.round(x / scale).clamp(-I8_Q, I8_Q)
    l0 = torch.floor(q / 128 + 0.5)
    l1 = q - 128 * l0
    return l0, l1, scale
