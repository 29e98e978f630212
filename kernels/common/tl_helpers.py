"""Triton device functions used by all three families.

Precision of a matrix product is chosen by the caller with ``tl.dot(a, b, input_precision=PREC)``;
``PREC`` is a constexpr string: "ieee" (fp32 FMA), "tf32", "tf32x3" or "bf16x3" (split precision on
tensor cores, ~fp32-grade). The Triton interpreter ignores it (it computes in fp32).
"""
import triton
import triton.language as tl


@triton.jit
def gelu_erf(x):
    """Exact GELU, as F.gelu(approximate='none'): x * 0.5 * (1 + erf(x / sqrt(2)))."""
    return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))


@triton.jit
def layernorm_rows(x, w, b, mask_d, D: tl.constexpr, EPS: tl.constexpr):
    """LayerNorm over the last axis of a [M, BLOCK_D] fp32 tile (columns >= D masked by ``mask_d``),
    biased variance, two-pass statistics in fp32 as F.layer_norm. w, b: [BLOCK_D]."""
    mean = tl.sum(tl.where(mask_d[None, :], x, 0.0), axis=1) / D
    xc = tl.where(mask_d[None, :], x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / D
    rstd = 1.0 / tl.sqrt(var + EPS)
    return xc * rstd[:, None] * w[None, :] + b[None, :]
