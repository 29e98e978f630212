"""Would fewer than three bf16 products per GEMM pass the gate? A CPU emulation for docs/seqres.md.

The model of SPEC §2 in float64, with every matrix product (the four linear GEMMs and, with ``--attn``,
q·kᵀ and p·v) computed the way a kernel scheme would: its operands rounded and split as the scheme does,
the products summed exactly. The output is judged by the gate against ``reference_forward`` at all 7
scales × 2 seeds, as the correctness stage does; it prints each case's worst error over the tolerance.

Schemes (``a`` is the activation operand, ``w`` the weight / second operand):
  bf16x3   a_lo·w_hi + a_hi·w_lo + a_hi·w_hi, bf16 hi/lo (what the kernel runs)
  f16_w1   a split into fp16 hi/lo, w rounded to fp16 once: two products (w's rounding is the error)
  f16_a1   a rounded to fp16 once, w split into fp16 hi/lo: two products
  bf16_w1  a split into bf16 hi/lo, w rounded to bf16 once
  f16f8    a_hi·w_hi in fp16 (exact products) plus the two correction terms a_lo·w_hi + a_hi·w_lo in fp8
           e4m3 (both operands of each rounded to 4 significant bits after a power-of-two scale: a_lo by
           2^11, the weight parts by the power of two that puts the weight tensor's max below 224):
           fp8 tensor cores run at twice the fp16 rate, so 2 units of MMA work instead of bf16x3's 3
  exact    no rounding (checks the emulation itself)

With ``--ln-fold`` the two GEMMs behind a LayerNorm (QKV, FFN1) take the LayerNorm algebraically:
LN(y)·W + b = rstd ⊙ (y·W′) − (rstd·mean) ⊙ s + c, with W′ = diag(γ)·W, s = 1ᵀW′, c = βᵀW + b (fp32), the product
y·W′ on the raw residual in the scheme, and one-pass fp32 statistics (Σy, Σy² per row) as a K loop would
accumulate them (docs/seqres.md, next steps). ``ln_linear(..., fold="shift")`` is the mean-robust form (docs/dag.md,
the LayerNorm fold): each row shifted by m₀, the fp32 mean of its first 64 columns (what a tile's first K step
holds), d = y − m₀ in fp32, the product d·W′ in the scheme and the statistics Σd, Σd² in fp32:
LN(y)·W + b = rstd ⊙ (d·W′ − mean_d ⊙ s) + c, mean_d = Σd / D, rstd from Σd² / D − mean_d². The algebraic form's
product carries an error relative to |y| and cancels it against mean·s; the shifted one's is relative to |y − m₀|,
of the row's spread however far the row's mean is from 0.

    python -m bench.seqres.precision_probe f16_w1 [--attn bf16x3] [--ln-fold] [--cases 5 11] [--seeds 0 1 2 3]
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from kernels.cases import SCHEME_GEMMS, list_cases, load_case
from kernels.common.split import I8_Q, i8_limbs
from kernels.gate import default_gate_config, gate
from kernels.reference import LN_EPS, reference_forward
from kernels.weights import make_input, make_weights

SCALES = default_gate_config().scales
SEEDS = default_gate_config().seeds


def _round(x, dt):
    return x.to(dt).to(torch.float64)


def _split(x, dt):
    hi = _round(x, dt)
    return hi, _round(x - hi, dt)


def matmul(a: torch.Tensor, w_t: torch.Tensor, scheme: str) -> torch.Tensor:
    """a [..., K] @ w_t [..., K, N] (float64) as ``scheme`` computes it."""
    if scheme == "exact":
        return a @ w_t
    if scheme == "bf16x3":
        ah, al = _split(a, torch.bfloat16)
        wh, wl = _split(w_t, torch.bfloat16)
        return al @ wh + ah @ wl + ah @ wh
    if scheme in ("f16_w1", "bf16_w1"):
        dt = torch.float16 if scheme == "f16_w1" else torch.bfloat16
        ah, al = _split(a, dt)
        w1 = _round(w_t, dt)
        return ah @ w1 + al @ w1
    if scheme == "f16_a1":
        a1 = _round(a, torch.float16)
        wh, wl = _split(w_t, torch.float16)
        return a1 @ wh + a1 @ wl
    if scheme == "f16f8":
        ah, al = _split(a, torch.float16)
        wh, wl = _split(w_t, torch.float16)
        sa = 2.0 ** 11
        sw = 2.0 ** math.floor(math.log2(224.0 / float(w_t.abs().max())))
        f8 = torch.float8_e4m3fn
        corr = _round(al * sa, f8) @ _round(wh * sw, f8) + _round(ah, f8) @ _round(wl * (sa * sw), f8)
        return ah @ wh + corr / (sa * sw)
    if scheme in I8_SCHEMES:
        return i8_matmul(a, w_t, scheme)
    raise ValueError(f"unknown scheme {scheme!r}; valid: exact, bf16x3, f16_w1, f16_a1, bf16_w1, f16f8, "
                     f"{', '.join(I8_SCHEMES)}")


# int8 limb schemes (lab, docs/dag-results.md "Results" 52): each operand quantized to a 15-bit integer q = 128·l0 + l1
# (limbs l0 in [-127, 127], l1 in [-64, 63]: two int8 tensors, 2 bytes an element where bf16 hi/lo take 4) times a
# scale per row of a and per column of w, over the whole K ("i8x2", "i8x2c": the scale a LayerNorm task, which holds
# whole rows, or prepare can give) or over each 64-deep K block ("i8x2b": what a tile of another producer can give; a
# K loop then rescales its integer accumulators every block; "i8x2b128" / "i8x2b256": every 128 / 256-deep block;
# "i8x2cb128": 128-deep with three products, as "i8x2c").
# int8 products are exact in int32 and twice the bf16 rate: the four limb products (2 units of bf16 time) give q_a·q_w
# exactly; "i8x2c" leaves out l1_a·l1_w (three products, 1.5 units). The error is the quantization's, relative to each
# row's (block's) largest element.
I8_SCHEMES = ("i8x2", "i8x2c", "i8x2b", "i8x2b128", "i8x2cb128", "i8x2b256")


def _i8_limbs(x: torch.Tensor, dim: int, block: int | None):
    """``kernels.common.split.i8_limbs``, with the limbs' ranges checked."""
    l0, l1, scale = i8_limbs(x, dim, block)
    assert l0.abs().max() <= 127 and l1.min() >= -64 and l1.max() <= 63
    return l0, l1, scale


def i8_matmul(a: torch.Tensor, w_t: torch.Tensor, scheme: str) -> torch.Tensor:
    """a [..., K] @ w_t [..., K, N] as the int8 limb scheme ``scheme`` computes it (float64; the limb products are
    integers, summed exactly; the block form's per-block scales applied to each block's integer sum)."""
    block = {"i8x2b": 64, "i8x2b128": 128, "i8x2cb128": 128, "i8x2b256": 256}.get(scheme)
    a0, a1, sa = _i8_limbs(a, -1, block)
    w0, w1, sw = _i8_limbs(w_t, -2, block)
    block = block or a.shape[-1]    # a scale over the whole K: one block
    qa, qw = 128 * a0 + a1, 128 * w0 + w1
    out = 0
    for k in range(0, a.shape[-1], block):
        sl = slice(k, k + block)
        prod = qa[..., sl] @ qw[..., sl, :]
        if scheme in ("i8x2c", "i8x2cb128"):   # three products: l1_a·l1_w left out
            prod = prod - a1[..., sl] @ w1[..., sl, :]
        out = out + prod * sa[..., k:k + 1] * sw[..., k:k + 1, :]
    return out


def ln_linear(y, ln_w, ln_b, w, b, scheme: str, fold) -> torch.Tensor:
    """LN(y) @ wᵀ + b (float64 in, float64 out): the LayerNorm applied first (``fold`` false), or folded into the
    product: algebraically (true), or around a per-row shift (``"shift"``; module docstring)."""
    D = y.shape[-1]
    if not fold:
        return matmul(F.layer_norm(y, (D,), ln_w, ln_b, LN_EPS), w.t(), scheme) + b
    y32 = y.float()
    # the row shift: the fp32 mean of the first 64 columns ("shift"), none for the algebraic form (d = y exactly)
    m0 = y32[..., :64].sum(-1, keepdim=True) / min(D, 64) if fold == "shift" else torch.zeros_like(y32[..., :1])
    d = y32 - m0
    mean_d = d.sum(-1, keepdim=True) / D                   # one-pass fp32 statistics, as a K loop accumulates them
    var = (d * d).sum(-1, keepdim=True) / D - mean_d * mean_d
    rstd = torch.rsqrt(var + LN_EPS).double()
    w_f = (ln_w[:, None] * w.t()).float().double()         # W' = diag(gamma) W, stored in fp32, [K, N]
    s = w_f.sum(0)
    c = (ln_b.float() @ w.t().float() + b.float()).double()
    return rstd * (matmul(d.double(), w_f, scheme) - mean_d.double() * s) + c


GEMMS = SCHEME_GEMMS  # the linear GEMMs a case config can name in ``schemes``


def forward(x, flat, H: int, causal: bool, scheme: str, attn_scheme: str, ln_fold: bool = False,
            per_gemm: dict | None = None) -> torch.Tensor:
    """``per_gemm``: {qkv | o | ffn1 | ffn2: scheme} overriding ``scheme`` for those linear GEMMs."""
    sch = {g: (per_gemm or {}).get(g, scheme) for g in GEMMS}
    B, S, D = x.shape
    dh = D // H
    L = (len(flat) - 2) // 12
    x = x.double()
    flat = [t.double() for t in flat]
    for layer in range(L):
        ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2 = flat[12 * layer:12 * layer + 12]
        qkv = ln_linear(x, ln1_w, ln1_b, w_qkv, b_qkv, sch["qkv"], ln_fold)
        q, k, v = qkv.view(B, S, 3, H, dh).permute(2, 0, 3, 1, 4)
        s = matmul(q, k.transpose(-1, -2), attn_scheme) / math.sqrt(dh)
        if causal:
            s = s.masked_fill(torch.triu(torch.ones(S, S, dtype=torch.bool), 1), float("-inf"))
        a = matmul(torch.softmax(s, -1), v, attn_scheme).transpose(1, 2).reshape(B, S, D)
        x = x + matmul(a, w_o.t(), sch["o"]) + b_o
        x = x + matmul(F.gelu(ln_linear(x, ln2_w, ln2_b, w_1, b_1, sch["ffn1"], ln_fold)), w_2.t(), sch["ffn2"]) + b_2
    return F.layer_norm(x, (D,), flat[-2], flat[-1], LN_EPS).float()


def worst(case_no: int, scheme: str, attn_scheme: str, ln_fold: bool = False,
          per_gemm: dict | None = None, seeds=SEEDS) -> tuple[float, tuple]:
    case = load_case(case_no)
    w = make_weights(case)
    out = (0.0, None)
    for scale in SCALES:
        for seed in seeds:
            x = make_input(case, scale, seed)
            y = forward(x, w.flat(), case.H, case.causal, scheme, attn_scheme, ln_fold, per_gemm)
            g = gate(y, reference_forward(case, w, x))
            if g.max_over_tol > out[0]:
                out = (g.max_over_tol, (scale, seed))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("scheme")
    ap.add_argument("--attn", default=None, help="scheme of the attention products (default: the same)")
    ap.add_argument("--ln-fold", action="store_true", help="fold LN1/LN2 into the QKV/FFN1 products")
    ap.add_argument("--cases", nargs="+", type=int, default=[load_case(n).number for n in list_cases(smoke=False, family="seqres")])
    ap.add_argument("--gemm", nargs="+", default=[], metavar="NAME=SCHEME",
                    help=f"per-GEMM schemes overriding SCHEME, NAME in {GEMMS} (e.g. ffn2=f16_w1)")
    ap.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS),
                    help="input seeds (the gate's default: 0 1); more seeds show how much margin a scheme has")
    a = ap.parse_args(argv)
    per = {}
    for kv in a.gemm:
        name, _, sc = kv.partition("=")
        if name not in GEMMS or not sc:
            raise SystemExit(f"precision_probe: --gemm {kv!r}: NAME=SCHEME with NAME in {GEMMS}")
        per[name] = sc
    tag = "".join(f" {k}={v}" for k, v in per.items())
    for c in a.cases:
        w, at = worst(c, a.scheme, a.attn or a.scheme, a.ln_fold, per, tuple(a.seeds))
        seeds = "" if tuple(a.seeds) == SEEDS else f" seeds {' '.join(map(str, a.seeds))}"
        print(f"case{c:02d} linear={a.scheme}{tag} attn={a.attn or a.scheme}{' ln-fold' if a.ln_fold else ''}{seeds}: worst "
              f"{w:.4f} x tolerance at (scale, seed) {at}", flush=True)


if __name__ == "__main__":
    main()
