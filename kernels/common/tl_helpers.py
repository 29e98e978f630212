"""Triton device functions used by all three families.

Precision of a matrix product is chosen by the caller with ``tl.dot(a, b, input_precision=PREC)``;
``PREC`` is a constexpr string: "ieee" (fp32 FMA), "tf32", "tf32x3" or "bf16x3" (split precision on
tensor cores, ~fp32-grade). The Triton interpreter ignores it (it computes in fp32).
"""
import triton
import triton.language as tl


@triton.jit
def globaltimer(x):
    """%globaltimer (ns) as an int64 scalar (GPU only; ``x``: any int32 scalar, it only gives the shape)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def smid(x):
    """The SM the program runs on (%smid; GPU only; ``x``: any int32 scalar, it only gives the shape)."""
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def gelu_erf(x):
    """Exact GELU, as F.gelu(approximate='none'): x * 0.5 * (1 + erf(x / sqrt(2)))."""
    return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))


@triton.jit
def exp2_approx(x, PTX: tl.constexpr):
    """2^x: PTX ``ex2.approx.ftz.f32`` (one MUFU) on the GPU, ``tl.exp2`` elsewhere (the interpreter)."""
    if PTX:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)
    else:
        return tl.exp2(x)


# q(u) ~ log2 Phi(-u), highest power first: the output of ``python -m bench.common.gelu_fit`` (a test re-runs the fit)
GELU_Q5 = tl.constexpr(-0.0003356065178156923)
GELU_Q4 = tl.constexpr(0.006050093726838906)
GELU_Q3 = tl.constexpr(-0.04913339793466209)
GELU_Q2 = tl.constexpr(-0.46296296401975784)
GELU_Q1 = tl.constexpr(-1.1494567479655073)
GELU_Q0 = tl.constexpr(-1.00021732392041)


@triton.jit
def gelu_log2poly(x, PTX: tl.constexpr):
    """Exact GELU, x Phi(x) = max(x, 0) - |x| Phi(-|x|), with Phi(-u) = 2^q(u): q a degree-5 weighted minimax fit
    of log2 Phi(-u) on u in [0, 5.5] (``bench/common/gelu_fit.py``). Its leading coefficient is negative and q keeps
    falling past 5.5, so no clamp is needed: |GELU error| <= 3e-6 in fp32 over [-60, 60], relative error of Phi <=
    3e-3 where GELU(x) < -1e-6. Five FMAs, one exp2 (PTX: ``ex2``, one MUFU), one max, one FMA: 8 instructions per
    element (libdevice's erff GELU: 31)."""
    u = tl.abs(x)
    q = u * GELU_Q5 + GELU_Q4
    q = q * u + GELU_Q3
    q = q * u + GELU_Q2
    q = q * u + GELU_Q1
    q = q * u + GELU_Q0
    c = exp2_approx(q, PTX)
    return tl.maximum(x, 0.0) - u * c


@triton.jit
def layernorm_rows(x, w, b, mask_d, D: tl.constexpr, EPS: tl.constexpr):
    """LayerNorm over the last axis of a [M, BLOCK_D] fp32 tile (columns >= D masked by ``mask_d``),
    biased variance, two-pass statistics in fp32 as F.layer_norm. w, b: [BLOCK_D]."""
    mean = tl.sum(tl.where(mask_d[None, :], x, 0.0), axis=1) / D
    xc = tl.where(mask_d[None, :], x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / D
    rstd = 1.0 / tl.sqrt(var + EPS)
    return xc * rstd[:, None] * w[None, :] + b[None, :]


@triton.jit
def split_bf16(x, BF16: tl.constexpr):
    """Split an fp32 tile into hi + lo parts, each bf16-representable, with x - hi - lo ~ 2^-17 |x|.

    BF16=True (GPU): hardware round-to-nearest casts; returns two bf16 tensors, ready for ``tl.dot``.
    BF16=False (Triton interpreter, which has no bf16): the same rounding done on the bit pattern;
    returns two fp32 tensors holding bf16 values, so an fp32 ``tl.dot`` of them gives the same products
    as the bf16 MMA would (a bf16 x bf16 product is exact in fp32)."""
    if BF16:
        hi = x.to(tl.bfloat16)
        lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    else:
        hi = ((x.to(tl.uint32, bitcast=True) + 0x8000) & 0xFFFF0000).to(tl.float32, bitcast=True)
        r = x - hi
        lo = ((r.to(tl.uint32, bitcast=True) + 0x8000) & 0xFFFF0000).to(tl.float32, bitcast=True)
    return hi, lo


@triton.jit
def split_bf16_trunc(x, BF16: tl.constexpr):
    """``split_bf16`` with a truncated hi part on the GPU (the seqres megakernel's split), |x - hi - lo| <= 2^-16 |x|.

    BF16=True: hi is x's upper 16 bits (one mask; the bf16 values are those bits), lo the round-to-nearest bf16 of
    the exact remainder x - hi. Against rounding hi it saves a conversion and a conversion back per element
    (1-2% on most seqres cases, docs/seqres.md) and leaves |lo| <= 2^-7 |x| instead of 2^-8, so the split's error
    doubles (seqres keeps a 14x margin in the gate; the hybrid kernels, with less, keep ``split_bf16``).
    BF16=False (interpreter): ``split_bf16``'s rounded parts."""
    if BF16:
        xb = x.to(tl.uint32, bitcast=True)
        lo = (x - (xb & 0xFFFF0000).to(tl.float32, bitcast=True)).to(tl.bfloat16)
        hi = (xb >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        hi, lo = split_bf16(x, False)
    return hi, lo


@triton.jit
def split_f16(x, F16: tl.constexpr):
    """Split an fp32 tile into fp16 hi + lo parts (round to nearest each), |x - hi - lo| <= 2^-22 |x| while lo is
    normal (|x| >= ~2^-2), else an absolute 2^-25: the A operand of a two-product GEMM whose weight is one fp16
    part (seqres ``ffn2_scheme: f16_w1``). The operands there are bounded whatever the input scale (GELU of a
    LayerNorm's product), far below fp16's 65504. F16=False (interpreter): the same values in fp32 tensors."""
    hi = x.to(tl.float16)
    lo = (x - hi.to(tl.float32)).to(tl.float16)
    if F16:
        return hi, lo
    else:
        return hi.to(tl.float32), lo.to(tl.float32)


@triton.jit
def dot_split(a_hi, a_lo, b_hi, b_lo, acc, A_LO: tl.constexpr, B_LO: tl.constexpr, PREC: tl.constexpr):
    """acc + a @ b from hi/lo parts (from ``split_bf16`` or bf16/fp32 loads), smallest terms first:
    [a_lo b_hi if A_LO] + [a_hi b_lo if B_LO] + a_hi b_hi. Both flags: bf16x3 (~fp32-grade); A_LO only:
    a kept exact, b rounded to bf16; neither: plain bf16. Unused lo parts may be any tensor.
    PREC is each dot's ``input_precision``: "ieee" for fp32-held parts (the interpreter then reproduces
    the bf16 products exactly); ignored for bf16 parts."""
    if A_LO:
        acc = tl.dot(a_lo, b_hi, acc, input_precision=PREC)
    if B_LO:
        acc = tl.dot(a_hi, b_lo, acc, input_precision=PREC)
    acc = tl.dot(a_hi, b_hi, acc, input_precision=PREC)
    return acc


@triton.jit
def ld_acquire(ptrs):
    """``ld.acquire.gpu`` of int32 values (GPU only: inline PTX). A poll that reads, where an atomic would
    read-modify-write the line at L2 (the pollers of one flag then queue behind each other)."""
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptrs], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def st_release(ptrs, vals):
    """``st.release.gpu`` of int32 ``vals`` by thread 0 of the CTA only (GPU only: inline PTX; after a CTA barrier,
    as Triton issues its scalar atomics): publishes without a read-modify-write, so no reply from L2 is awaited
    before the polls start. Returns zeros (inline PTX needs an output)."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0;\n\t"
        "@p st.release.gpu.global.b32 [$1], $2; }\n\tmov.b32 $0, 0;",
        "=r,l,r", [ptrs, vals], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def ld_relaxed(ptrs):
    """``ld.relaxed.gpu`` of int32 values (GPU only): a poll without acquire semantics; the caller ends the spin
    with ``fence_acq_rel`` (relaxed load + fence is an acquire pattern in the PTX memory model)."""
    return tl.inline_asm_elementwise("ld.relaxed.gpu.global.b32 $0, [$1];", "=r,l", [ptrs], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def fence_acq_rel(x):
    """``fence.acq_rel.gpu`` by thread 0 of the CTA, passing ``x`` through (GPU only; the value ties the fence into
    the data flow; the CTA barrier that follows orders the other threads behind it)."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0;\n\t"
        "@p fence.acq_rel.gpu; }\n\tmov.b32 $0, $1;",
        "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


def counter_t0_ptx(pub: str = "release", poll: str = "acquire", fence: bool = False) -> str:
    """PTX of a counter barrier run by thread 0 alone: ``red.<pub>.gpu.add`` of 1 onto the group's counter ($1), then
    a spin of ``ld.<poll>.gpu`` on it until it reaches the goal ($2), at most $3 polls ($0 = 1 on timeout, else 0), and
    with ``fence`` a ``fence.acq_rel.gpu`` after the spin. The defaults are group_barrier's MODE 7 (``COUNTER_T0_PTX``); the
    other forms are ``barrier_probe``'s, which time the parts (a relaxed publish or poll orders nothing)."""
    end = "FOUND" if fence else "DONE"
    return ("{ .reg .pred p, q; .reg .b32 t, v, n;\n\t"
            "mov.u32 t, %tid.x; setp.ne.u32 p, t, 0; mov.b32 $0, 0;\n\t"
            "@p bra DONE;\n\t"
            f"red.{pub}.gpu.global.add.s32 [$1], 1;\n\t"
            "mov.u32 n, 0;\n"
            "LOOP:\n\t"
            f"ld.{poll}.gpu.global.b32 v, [$1];\n\t"
            "setp.ge.s32 q, v, $2;\n\t"
            f"@q bra {end};\n\t"
            "add.u32 n, n, 1; setp.lt.u32 q, n, $3;\n\t"
            "@q bra LOOP;\n\t"
            "mov.b32 $0, 1;\n"
            + ("FOUND:\n\tfence.acq_rel.gpu;\n" if fence else "")
            + "DONE:\n\t}")


# group_barrier MODE 7: after the CTA barrier, thread 0 adds 1 to the group's counter with a release reduction
# (``red.release.gpu``: no reply awaited) and spins on ``ld.acquire.gpu`` of it; the CTA barrier after it orders the
# other threads behind its acquire. One thread polls one address, where the other modes have every warp poll.
COUNTER_T0_PTX = tl.constexpr(counter_t0_ptx())


@triton.jit
def counter_t0(ctr_ptr, goal, limit):
    """Thread 0's publish and spin of the MODE 7 barrier (``COUNTER_T0_PTX``; GPU only). Returns 1 where the spin
    timed out (thread 0), else 0. The caller puts CTA barriers before and after it."""
    one = tl.arange(0, 1)
    bad = tl.inline_asm_elementwise(COUNTER_T0_PTX, "=r,l,r,r", [ctr_ptr + one, goal + one * 0, limit + one * 0],
                                    dtype=tl.int32, is_pure=False, pack=1)
    return tl.max(bad, axis=0)


@triton.jit
def _poll(ptrs, mask, LD: tl.constexpr):
    """Acquire-read ``ptrs`` where ``mask``: ld.acquire (LD) or an atomic add of 0 (the interpreter's way)."""
    if LD:
        v = ld_acquire(ptrs)  # every lane's address is allocated (a row of BLOCK_R flags); callers mask the values
    else:
        v = tl.atomic_add(ptrs, 0, mask=mask, sem="acquire", scope="gpu")
    return v


@triton.jit
def group_barrier(flags_ptr, rank, target, err_ptr, spin_limit, R: tl.constexpr, BLOCK_R: tl.constexpr,
                  MODE: tl.constexpr = 1):
    """Barrier of the R co-resident CTAs that share ``flags_ptr[0:R]`` (int32, monotonic). (seqres)

    MODE 1 (flags, atomic polls) and 2 (flags, ``ld.acquire`` polls): this CTA publishes ``target`` on its
    own flag (release) and spins until every flag of the group is >= ``target`` (acquire). MODE 3 (counter,
    ``ld.acquire`` polls) and 4 (counter, atomic polls): this CTA adds 1 to the group's counter
    ``flags_ptr[0]`` (release) and spins until it reaches ``target * R`` (acquire), one address to poll. MODE 7
    (counter, thread 0 alone: ``counter_t0``): the same counter, published with a release reduction and polled by
    thread 0 only, the other threads waiting at the CTA barrier after it (GPU only: inline PTX).
    Flags and the counter only grow, so one row serves every barrier of every launch when the host passes
    increasing targets. Every CTA of the group must be resident (the caller checks grid <= co-resident
    CTAs); under TRITON_INTERPRET programs run one after another, so only R == 1 is valid there. The spin
    is bounded by ``spin_limit`` polls (a runtime value, so debug and timed runs share one binary): on
    timeout the barrier writes ``target`` (the barrier it waited at) to ``err_ptr`` and goes on, so a
    broken schedule reports instead of hanging."""
    tl.debug_barrier()
    if MODE == 7:
        if counter_t0(flags_ptr, target * R, spin_limit) != 0:
            tl.atomic_xchg(err_ptr, target)
    elif MODE >= 5:
        one = tl.arange(0, 1)
        st_release(flags_ptr + rank + one, tl.zeros((1,), tl.int32) + target)
        offs = tl.arange(0, BLOCK_R)
        mask = offs < R
        if MODE == 5:
            v = ld_acquire(flags_ptr + offs)
        else:
            v = ld_relaxed(flags_ptr + offs)
        seen = tl.min(tl.where(mask, v, target), axis=0)
        tries = 0
        while (seen < target) & (tries < spin_limit):
            if MODE == 5:
                v = ld_acquire(flags_ptr + offs)
            else:
                v = ld_relaxed(flags_ptr + offs)
            seen = tl.min(tl.where(mask, v, target), axis=0)
            tries += 1
        if MODE == 6:
            seen = tl.min(tl.where(mask, fence_acq_rel(v), target), axis=0)
        if seen < target:
            tl.atomic_xchg(err_ptr, target)
    elif MODE >= 3:
        tl.atomic_add(flags_ptr, 1, sem="release", scope="gpu")
        goal = target * R
        one = tl.arange(0, 1)
        seen = tl.min(_poll(flags_ptr + one, one < 1, MODE == 3), axis=0)
        tries = 0
        while (seen < goal) & (tries < spin_limit):
            seen = tl.min(_poll(flags_ptr + one, one < 1, MODE == 3), axis=0)
            tries += 1
        if seen < goal:
            tl.atomic_xchg(err_ptr, target)
    else:
        tl.atomic_xchg(flags_ptr + rank, target, sem="release", scope="gpu")
        offs = tl.arange(0, BLOCK_R)
        spin_flags(flags_ptr + offs, offs < R, target, err_ptr, spin_limit, MODE == 2)
    tl.debug_barrier()


@triton.jit
def spin_flags(ptrs, mask, target, err_ptr, spin_limit, LD: tl.constexpr):
    """Spin until every flag at ``ptrs`` where ``mask`` is >= ``target`` (acquire, gpu scope; LD: ``ld.acquire``, else
    atomics), at most ``spin_limit`` polls; on timeout write ``target`` to ``err_ptr`` (the host reports it) and go on.
    The wait of ``group_barrier``'s flag modes, and of seqres's ``attn_kv_split`` pairs."""
    seen = tl.min(tl.where(mask, _poll(ptrs, mask, LD), target), axis=0)
    tries = 0
    while (seen < target) & (tries < spin_limit):
        seen = tl.min(tl.where(mask, _poll(ptrs, mask, LD), target), axis=0)
        tries += 1
    if seen < target:
        tl.atomic_xchg(err_ptr, target)
