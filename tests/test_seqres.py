"""seqres on the CPU: the real megakernel under the Triton interpreter passes the SPEC §4 gate.

TRITON_INTERPRET must be set before triton/kernels are first imported (Triton picks the interpreter
when a kernel is decorated). When another module imported kernels first without it, these tests skip.
"""
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from kernels import Case, Unsupported, gate, get_variant, load_case, make_input, make_weights  # noqa: E402
from kernels.reference import reference_forward  # noqa: E402
from kernels.seqres import interpreting  # noqa: E402
from kernels.seqres.host import prepare_meta  # noqa: E402
from kernels.seqres.megakernel import (_attention_block, _ffn_fused_phase, _kv_merge_scale,  # noqa: E402
                                       _linear_phase_flat)
from kernels.common.tl_helpers import gelu_log2poly  # noqa: E402
from workflow.stages.correctness import check_variant  # noqa: E402
from conftest import GATE, SCALES  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

needs_backend = pytest.mark.skipif(
    not (interpreting() or torch.cuda.is_available()),
    reason="kernels was imported without TRITON_INTERPRET=1 and there is no GPU")


def odd_case(causal: bool) -> Case:
    return Case(name="odd", number=999, family="seqres", B=2, S=12, D=48, H=3, L=2, causal=causal,
                weight_seed=999)


def _device():
    return "cuda" if torch.cuda.is_available() and not interpreting() else "cpu"


def _check(case, params, scales, seeds):
    """The correctness stage's own check (gate at every scale x seed, plus its guards)."""
    dev = torch.device(_device())
    w = make_weights(case, device=dev)
    v = get_variant("seqres")
    r = check_variant(case, w, v, v.prepare(case, w, **params), list(scales), list(seeds), GATE.atol, GATE.rtol, dev)
    assert r["passed"], f"{case.name} {params}: {r['reason']} {r['worst']} {r['guards']}"


@needs_backend
def test_smoke1_passes_gate_all_scales_two_seeds():
    _check(load_case("smoke1"), {}, SCALES, (0, 1))


@needs_backend
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_attn_pack_keeps_sequences_apart(causal):
    """``attn_pack: 4``: 4 sequences of 12 rows in one 48-row attention tile over 16-key blocks. The third sequence's
    rows find no key of their own in the first key block (the online softmax must keep a zero state there, not
    -inf - -inf), and no row may attend to another sequence's keys (the gate would see it)."""
    case = Case(name="odd4", number=998, family="seqres", B=4, S=12, D=48, H=3, L=1, causal=causal,
                weight_seed=998)
    _check(case, dict(attn_pack=4, seqs_per_program=4, block_kv=16, block_m_ln=8), (1e-3, 1.0, 1e3), (0,))
    _check(case, dict(attn_pack=4, seqs_per_program=4, block_kv=16, block_m_ln=8, gemm_loop="nested",
                      attn_oproj=True, ffn_fused=True), (1.0,), (1,))


def test_wgmma_chain_reaches_the_kernel_and_is_validated():
    """``wgmma_chain`` (wait | async) is an edit of Triton's sm_90 pipeline, which the interpreter does not run: it
    reaches the kernel as a constexpr (so the two binaries have different cache keys), and bad values name the
    choices."""
    assert prepare_meta(odd_case(True), n_sm=132, wgmma_chain="wait")[0]["WGMMA_CHAIN"] == "wait"
    assert prepare_meta(odd_case(True), n_sm=132)[0]["WGMMA_CHAIN"] == "async"  # the default
    with pytest.raises(ValueError, match="wgmma_chain.*wait.*async"):
        prepare_meta(odd_case(True), n_sm=132, wgmma_chain="overlap")


def test_attn_pack_is_validated():
    with pytest.raises(ValueError, match="attn_pack"):
        prepare_meta(odd_case(True), n_sm=132, attn_pack=3, seqs_per_program=2)
    m, _, _ = prepare_meta(load_case("case06"), n_sm=132, attn_pack=2, seqs_per_program=4)
    assert m["ATTN_PACK"] == 2 and m["BLOCK_Q"] == 32 and m["BLOCK_KV"] == 32  # case 6: 16-row sequences, 32-row packs


@needs_backend
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_odd_shape_passes_gate(causal):
    """D=48 (not a power of two), dh=16, S=12 (rows masked in a 16-row tile)."""
    _check(odd_case(causal), {}, (1e-3, 1.0, 1e3), (0,))


@needs_backend
@pytest.mark.parametrize("params", [
    dict(flag_barrier=True, spin_limit=10),                       # the flag protocol path, R == 1
    dict(seqs_per_program=2, block_m_ln=8),                       # two sequences per program
    dict(block_n=32, block_k=16, block_q=16, block_kv=16),        # several tiles / key blocks per phase
    dict(gemm_loop="flat", block_n=16, block_k=16, block_m_ln=8, seqs_per_program=2),  # several tiles and K steps
    dict(gemm_loop="flat", block_n=16, block_k=16, flag_barrier=True, spin_limit=10, num_stages=2),
    dict(gemm_loop="flat", stream_k=True, attn_presplit=True, block_n=16, block_k=16, block_q=16, block_kv=16,
         attn_stages=1),
    dict(gemm_loop="nested", stream_k=True, block_n=16, block_k=16, flag_barrier=True, spin_limit=10),
    dict(attn_presplit=False, block_q=16, block_kv=16, prec_attn="ieee"),  # attention on fp32 q, k, v
    dict(barrier="counter", flag_barrier=True, spin_limit=10, seqs_per_program=2, block_m_ln=8),
    dict(ffn_fused=True),  # 4D = 192 hidden columns in 128-wide chunks: a ragged last chunk
    dict(ffn_fused=True, block_h=32, block_n2=16, block_k=16, block_m=16, flag_barrier=True, spin_limit=10),
    dict(ffn_fused=True, gemm_loop="nested", seqs_per_program=2, block_m_ln=8),
    dict(attn_oproj=True),  # D = 48 in 64-wide column blocks, 3 heads: head 0 adds the bias
    dict(attn_oproj=True, ao_weights="late"),  # the projection in one 64-wide block (D = 48: masked columns)
    dict(attn_oproj=True, ffn_fused=True, ao_weights="early", block_q=16, block_kv=16, seqs_per_program=2,
         block_m_ln=8),
    dict(attn_oproj=True, ffn_fused=True, block_q=16, block_kv=16, block_n2=16, flag_barrier=True, spin_limit=10),
    dict(attn_oproj=True, ffn_fused=True, gemm_loop="nested", attn_stages=1),
    # ln_local: LN1 in the QKV programs (D = 48 in a 64-wide register A operand: masked columns)
    dict(attn_oproj=True, ffn_fused=True, ln_local="qkv", gemm_loop="nested", block_n_wide=16, flag_barrier=True,
         spin_limit=10),
    dict(ln_local="qkv", block_n=16, block_n_wide=16, seqs_per_program=2, block_m_ln=8),
    # the copy phase with its own barrier (copy_phase: separate; the default fuses it with layer 0's LN1 split)
    dict(copy_phase="separate", gemm_loop="flat", flag_barrier=True, spin_limit=10, block_m_ln=8),
    # attn_pack: the group's 2 sequences in one attention tile (24 rows, block-diagonal causal mask)
    dict(attn_pack=2, seqs_per_program=2, gemm_loop="nested", attn_oproj=True, ffn_fused=True, block_m_ln=8),
    dict(attn_pack=2, seqs_per_program=2, attn_presplit=False, block_kv=16, block_m_ln=8),
    # FFN2 on three bf16 products (the default is f16_w1: fp16 A parts, W2 in fp16 once)
    dict(ffn2_scheme="bf16x3", block_n=16, block_k=16),
    dict(ffn2_scheme="bf16x3", ffn_fused=True, attn_oproj=True, gemm_loop="nested"),
], ids=["flags", "G2", "small-tiles", "flat-small-tiles", "flat-flags-2-stages", "flat-sk-attn-presplit",
        "nested-sk", "attn-unsplit", "counter-barrier", "ffn-fused", "ffn-fused-small-tiles", "ffn-fused-nested-G2",
        "attn-oproj", "attn-oproj-w-late", "attn-oproj-w-early-G2", "attn-oproj-ffn-fused-small",
        "attn-oproj-ffn-fused-nested", "ln-local-qkv", "ln-local-qkv-unfused-G2", "copy-separate",
        "attn-pack2-fused", "attn-pack2-unsplit", "ffn2-bf16x3", "ffn2-bf16x3-fused-nested"])
def test_schedules_pass_gate(params):
    _check(odd_case(True), params, (1e-2, 1e2), (1,))


@needs_backend
@pytest.mark.parametrize("name", ["smoke2", "smoke3"])
def test_other_smoke_shapes_pass_gate(name):
    """Usable beyond its family: the dag-like and hybrid-like smoke shapes (causal, S up to 128)."""
    _check(load_case(name), {}, (1e-3, 1e3), (0,))


@needs_backend
def test_causal_multi_block_attention():
    """S=40 with 16-row query/key blocks: causal skipping of whole key blocks and a ragged last block."""
    c = Case(name="s40", number=998, family="seqres", B=2, S=40, D=32, H=2, L=1, causal=True, weight_seed=3)
    _check(c, dict(block_q=16, block_kv=16, block_m=16), (1.0,), (0,))


@needs_backend
def test_output_depends_on_input_and_is_fresh():
    c = load_case("smoke1")
    dev = _device()
    w = make_weights(c, device=dev)
    v = get_variant("seqres")
    p = v.prepare(c, w)
    x0, x1 = make_input(c, 1.0, 0, device=dev), make_input(c, 1.0, 1, device=dev)
    y0 = v.run(p, x0)
    y1 = v.run(p, x1)
    assert y0.data_ptr() != y1.data_ptr()
    assert not torch.allclose(y0, y1)
    assert gate(v.run(p, x0), y0).passed  # reusing scratch across calls leaves no state behind


@needs_backend
def test_flag_epochs_match_barrier_count():
    """The flag protocol's bookkeeping: after each launch every program's flag holds the last barrier
    target, which is the host's next epoch (7 L barriers per launch when the copy phase shares layer 0's LN1
    barrier, 1 + 7 L with a separate copy phase), so flags only grow and no reset launch is needed; near the int32
    limit the host zeroes them."""
    from kernels.seqres import host
    c = odd_case(False)
    dev = _device()
    w = make_weights(c, device=dev)
    v = get_variant("seqres")
    # (one program per group here: the counter also ends at the epoch; counter_t0 runs as counter with atomic polls in
    # the interpreter, which has no inline PTX)
    for barrier in ("flags", "counter", "counter_t0"):
        for copy_phase, nb in (("fused", 7 * c.L), ("separate", 1 + 7 * c.L)):
            p = v.prepare(c, w, gemm_loop="flat", flag_barrier=True, spin_limit=10, barrier=barrier,
                          copy_phase=copy_phase)
            assert p.barriers_per_launch == nb
            x = make_input(c, 1.0, 0, device=dev)
            for n in (1, 2):
                v.run(p, x)
                assert p.epoch == n * nb
                assert torch.all(p.flags[:, 0] == p.epoch) and int(p.err.item()) == 0
            p.epoch = host._EPOCH_LIMIT - 3  # the next launch would pass the limit: flags are reset first
            v.run(p, x)
            assert p.epoch == nb and torch.all(p.flags[:, 0] == p.epoch)
    # the fusions drop a barrier each (oproj's; the one between FFN1 and FFN2): 5 L
    p = v.prepare(c, w, attn_oproj=True, ffn_fused=True, flag_barrier=True, spin_limit=10)
    v.run(p, make_input(c, 1.0, 0, device=dev))
    assert p.epoch == 5 * c.L and torch.all(p.flags[:, 0] == p.epoch) and int(p.err.item()) == 0
    # ln_local drops the LN1 phase: 1 + 4 L with the fusions (its copy phase keeps its barrier: there is no LN1
    # pass to share it with)
    p = v.prepare(c, w, attn_oproj=True, ffn_fused=True, ln_local="qkv", flag_barrier=True, spin_limit=10)
    v.run(p, make_input(c, 1.0, 0, device=dev))
    assert p.epoch == 1 + 4 * c.L and torch.all(p.flags[:, 0] == p.epoch) and int(p.err.item()) == 0


def test_unsupported_shapes_raise():
    long = Case(name="long", number=997, family="seqres", B=1, S=4096, D=64, H=2, L=1, causal=True, weight_seed=1)
    with pytest.raises(Unsupported):
        prepare_meta(long, n_sm=132)
    wide = Case(name="wide", number=996, family="seqres", B=1, S=16, D=4096, H=32, L=1, causal=False, weight_seed=1)
    with pytest.raises(Unsupported):
        prepare_meta(wide, n_sm=132)
    with pytest.raises(Unsupported):  # case 14: the sequence does not fit
        get_variant("seqres").prepare(load_case(14), make_weights(load_case("smoke1")))


def test_schedule_respects_co_residency():
    """split > 1 only when every program of a group can be resident: grid <= SMs, and never under the
    interpreter (programs run one after another there)."""
    c = load_case(11)  # B=16
    meta, _, info = prepare_meta(c, n_sm=132, split=0)
    assert meta["SPLIT"] == 8 and info["grid"] == 128 and meta["BARRIER"]
    meta, _, info = prepare_meta(c, n_sm=132, split=16)
    assert meta["SPLIT"] == 1 and "split_note" in info  # 256 programs > 132 SMs
    meta, _, info = prepare_meta(c, n_sm=132, interpret=True, split=0)
    assert meta["SPLIT"] == 1 and not meta["BARRIER"]
    meta, _, _ = prepare_meta(load_case(6), n_sm=132, seqs_per_program=0)
    assert meta["SEQS_PER_PROGRAM"] == 1 or 256 // meta["SEQS_PER_PROGRAM"] <= 2 * 132


def test_presplit_weights_are_bf16_hi_lo():
    """prepare's split: hi and lo are bf16 values and hi + lo recovers the weight to ~2^-17 relative."""
    from kernels.seqres.host import _split_bf16
    w = torch.randn(64, 48) / 7
    hi, lo = _split_bf16(w, as_fp32=True)
    assert torch.equal(hi, hi.to(torch.bfloat16).float()) and torch.equal(lo, lo.to(torch.bfloat16).float())
    assert float(((hi + lo) - w).abs().max() / w.abs().max()) < 2 ** -16


@needs_backend
@pytest.mark.parametrize("gemm", ["ffn2", "ffn1", "both"])
@pytest.mark.parametrize("params", [{}, dict(gemm_loop="nested", stream_k=True, block_n=16, block_k=16),
                                    dict(attn_oproj=True, ffn_fused=True, block_h=64)],
                         ids=["flat", "nested-sk", "ffn-fused"])
def test_ffn_f16_w1_computes_the_two_product_scheme(params, gemm):
    """``ffn2_scheme`` / ``ffn1_scheme: f16_w1`` (one of them, or both) must compute that GEMM as fp16 hi/lo A parts
    times the weight rounded to fp16 once: the kernel's output lies close to the float64 emulation of that scheme
    (``precision_probe``), far closer than the emulations of f16_w1 and bf16x3 lie to each other (a kernel still on
    bf16x3 weights, or rounding A too, fails)."""
    from bench.seqres.precision_probe import forward
    case = odd_case(False)
    w = make_weights(case, device=_device())
    v = get_variant("seqres")
    on = {"ffn1", "ffn2"} if gemm == "both" else {gemm}
    schemes = {g: "f16_w1" if g in on else "bf16x3" for g in ("ffn1", "ffn2")}
    p = v.prepare(case, w, **dict(params, **{f"{g}_scheme": sc for g, sc in schemes.items()}))
    assert (p.meta["FFN2_SCHEME"], p.meta["FFN1_SCHEME"]) == (schemes["ffn2"], schemes["ffn1"])
    x = make_input(case, 1.0, 1, device=_device())
    y = v.run(p, x).double().cpu()
    flat = [t.cpu() for t in w.flat()]
    emu = {sc: forward(x.cpu(), flat, case.H, case.causal, "bf16x3", "bf16x3", per_gemm={g: sc for g in on}).double()
           for sc in ("f16_w1", "bf16x3")}
    apart = float((emu["f16_w1"] - emu["bf16x3"]).abs().max())
    off = float((y - emu["f16_w1"]).abs().max())
    assert apart > 1e-4, apart  # the schemes differ measurably on this case
    assert off < 0.1 * apart, f"kernel vs f16_w1 emulation {off:.2e}, schemes apart {apart:.2e}"


def test_ffn2_scheme_is_validated():
    with pytest.raises(ValueError, match="bf16x3.*f16_w1"):
        prepare_meta(load_case("smoke1"), n_sm=132, ffn2_scheme="fp16")
    assert prepare_meta(load_case("smoke1"), n_sm=132, ffn2_scheme="f16_w1")[0]["FFN2_SCHEME"] == "f16_w1"


def test_ffn1_scheme_case_reads_the_case_config():
    """``ffn1_scheme: case`` (the default) takes the case config's ``schemes: {ffn1: ...}``, bf16x3 where it names
    none; an explicit scheme wins over the case's; a bad name in either is refused with the choices."""
    import dataclasses
    plain = load_case("smoke1")
    two = dataclasses.replace(plain, schemes=(("ffn1", "f16_w1"),))
    assert prepare_meta(plain, n_sm=132, ffn1_scheme="case")[0]["FFN1_SCHEME"] == "bf16x3"
    meta, _, info = prepare_meta(two, n_sm=132, ffn1_scheme="case")
    assert meta["FFN1_SCHEME"] == "f16_w1" and info["ffn1_scheme"] == "f16_w1"
    assert prepare_meta(two, n_sm=132, ffn1_scheme="bf16x3")[0]["FFN1_SCHEME"] == "bf16x3"
    with pytest.raises(ValueError, match="from the case config"):
        prepare_meta(dataclasses.replace(plain, schemes=(("ffn1", "fp8"),)), n_sm=132, ffn1_scheme="case")
    with pytest.raises(ValueError, match="the GEMMs are"):
        dataclasses.replace(plain, schemes=(("ffn3", "f16_w1"),))


def test_occupancy_limit_used_for_co_residency():
    """ctas_per_sm > 1 trusts this arithmetic (H100/H200 limits): 255 regs x 4 warps -> 2 CTAs/SM;
    168 regs -> 3; 128 KiB of shared memory -> 1; 8 warps of 255 regs -> 1."""
    from kernels.seqres.host import ctas_per_sm_limit
    assert ctas_per_sm_limit(255, 65536, 4) == 2
    assert ctas_per_sm_limit(168, 16384, 4) == 3
    assert ctas_per_sm_limit(255, 131072, 4) == 1
    assert ctas_per_sm_limit(255, 0, 8) == 1


def test_gate_catches_a_wrong_kernel():
    """The test can fail: a result from the wrong weights does not pass."""
    c = load_case("smoke1")
    w = make_weights(c)
    x = make_input(c, 1.0, 0)
    assert not gate(reference_forward(c, make_weights(c, seed=5), x), reference_forward(c, w, x)).passed


def test_smem_fit_shrinks_the_attention_buffers_only_when_shared_memory_is_the_limit():
    from kernels.seqres.host import smem_fit_step
    meta = dict(BLOCK_Q=64, BLOCK_KV=64, ATTN_PRESPLIT=False, ATTN_STAGES=0)
    # 255 regs x 4 warps allow 2 programs per SM; 128 KiB of shared memory allows 1 (H200 case 9 at BQ 64)
    assert smem_fit_step(meta, 255, 131072, 4, occ=1, cps=2) == dict(block_q=32, block_kv=32)
    assert smem_fit_step(meta, 255, 61952, 4, occ=2, cps=2) is None          # already fits
    assert smem_fit_step(meta, 255, 131072, 8, occ=1, cps=2) is None         # registers are the limit
    assert smem_fit_step(dict(meta, BLOCK_Q=16, BLOCK_KV=16), 255, 131072, 4, occ=1, cps=2) is None  # at its floor
    # the pre-split attention pipelined 3 deep (case 9's defaults): 2 stages first, the tiles kept; at 2 stages (or
    # fewer), the tile halved
    split = dict(meta, ATTN_PRESPLIT=True)
    assert smem_fit_step(dict(split, ATTN_STAGES=0), 255, 155648, 4, occ=1, cps=2, num_stages=3) == dict(attn_stages=2)
    assert smem_fit_step(dict(split, ATTN_STAGES=3), 255, 155648, 4, occ=1, cps=2, num_stages=2) == dict(attn_stages=2)
    assert smem_fit_step(dict(split, ATTN_STAGES=2), 255, 131072, 4, occ=1, cps=2) == dict(block_q=32, block_kv=32)
    assert smem_fit_step(dict(split, ATTN_STAGES=0), 255, 131072, 4, occ=1, cps=2, num_stages=2) == dict(block_q=32,
                                                                                                        block_kv=32)


def test_attn_fill_gives_every_program_an_attention_tile():
    c = load_case("case11")  # B 16, S 256, H 2: 16 groups of R programs; 4 query blocks of 64 per head
    base = prepare_meta(c, n_sm=132, n_slots=264, split=16, attn_fill=False)[0]["BLOCK_Q"]
    filled = prepare_meta(c, n_sm=132, n_slots=264, split=16, attn_fill=True)[0]["BLOCK_Q"]
    assert (base, filled) == (64, 32)  # 2 heads x 8 query blocks = 16 tiles for 16 programs
    assert prepare_meta(c, n_sm=132, n_slots=1024, split=64, attn_fill=True)[0]["BLOCK_Q"] == 16  # floor


@pytest.mark.parametrize("n,R,want", [(3 * 384, 8, 64),    # case 7 QKV: 9 tiles of 128 over 8 programs idle most
                                      (4 * 256, 4, 128),   # case 1 FFN1, 2 row blocks: 16 tiles / 4, even
                                      (3 * 128, 4, 64)])   # case 10 QKV, 2 row blocks: 6 tiles of 128 over 4
def test_wide_block_n_auto_keeps_the_group_balanced(n, R, want):
    from kernels.seqres.host import wide_block_n
    M = 64 if R == 8 else 128
    assert wide_block_n("auto", 64, M, n, R, 64) == want
    assert wide_block_n(0, 64, M, n, R, 64) == 64 and wide_block_n(128, 64, M, n, R, 64) == 128


@pytest.mark.parametrize("M,D,R,want", [(256, 128, 16, 64),   # case 11: 4 tiles of 128 x 4 K steps over 16 programs
                                        (128, 128, 4, 128),   # case 10: 2 x 4 steps over 4 programs = 2 each
                                        (64, 384, 8, 128)])   # case 7: 3 tiles x 12 steps over 8 programs
def test_narrow_block_n_auto_keeps_two_k_steps_per_program(M, D, R, want):
    from kernels.seqres.host import narrow_block_n
    assert narrow_block_n("auto", M, D, R, 64, 32) == want
    assert narrow_block_n(64, M, D, R, 64, 32) == 64


@pytest.mark.parametrize("M,D,R,BN,want", [(128, 256, 4, 128, False),  # case 1: 4 tiles over 4 programs
                                           (64, 384, 8, 128, True),    # case 7: 3 tiles over 8
                                           (256, 128, 16, 64, True)])  # case 11: 8 tiles over 16
def test_stream_k_auto_only_when_tiles_do_not_divide(M, D, R, BN, want):
    from kernels.seqres.host import stream_k
    assert stream_k("auto", M, D, R, 64, BN) is want
    assert stream_k(True, M, D, R, 64, BN) and not stream_k(False, M, D, R, 64, BN)


@pytest.mark.parametrize("bad", [dict(block_n="wide"), dict(stream_k="sometimes")])
def test_bad_auto_parameters_name_the_valid_values(bad):
    with pytest.raises(ValueError, match="auto"):
        prepare_meta(load_case("smoke1"), n_sm=132, **bad)


@needs_backend
def test_flat_gemm_loop_passes_gate_on_smoke1_at_every_scale():
    _check(load_case("smoke1"), dict(gemm_loop="flat"), SCALES, (0, 1))


@needs_backend
def test_ffn_fused_passes_gate_on_smoke1_at_every_scale():
    _check(load_case("smoke1"), dict(ffn_fused=True), SCALES, (0, 1))


@needs_backend
def test_attn_oproj_with_ffn_fused_passes_gate_on_smoke1_at_every_scale():
    _check(load_case("smoke1"), dict(attn_oproj=True, ffn_fused=True), SCALES, (0, 1))


def test_ln_local_checks_its_preconditions():
    with pytest.raises(ValueError, match="D=256 > 128"):
        prepare_meta(load_case("case01"), n_sm=132, ln_local="qkv")
    with pytest.raises(ValueError, match="attn_presplit"):
        prepare_meta(load_case("case10"), n_sm=132, ln_local="qkv", attn_presplit=False)
    with pytest.raises(ValueError, match=r"\[False, 'qkv'\]"):
        prepare_meta(load_case("case10"), n_sm=132, ln_local="all")
    assert prepare_meta(load_case("case10"), n_sm=132, ln_local="qkv")[0]["LN_LOCAL"] is True


def test_copy_phase_is_fused_only_with_an_ln1_pass_and_validated():
    meta = lambda name, **kw: prepare_meta(load_case(name), n_sm=132, **kw)[0]  # noqa: E731
    assert meta("case01")["COPY_PHASE"] == "fused"
    assert meta("case01", copy_phase="separate")["COPY_PHASE"] == "separate"
    assert meta("case10", ln_local="qkv")["COPY_PHASE"] == "separate"  # no LN1 pass to carry the copy
    with pytest.raises(ValueError, match="fused.*separate"):
        meta("case01", copy_phase="merged")


@needs_backend
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_attn_loop_flat_restarts_the_softmax_per_tile(causal):
    """``attn_loop: flat``: one loop over (tile, key block) pairs; 40-row sequences in 16-row query tiles over three
    16-key blocks (the last one ragged), so every tile restarts the online softmax mid-loop and (causal) runs fully
    masked key blocks past its diagonal; the gate would see a state carried over from the previous tile."""
    case = Case(name="odd40", number=997, family="seqres", B=2, S=40, D=48, H=3, L=1, causal=causal,
                weight_seed=997)
    _check(case, dict(attn_loop="flat", block_q=16, block_kv=16, block_m_ln=8), (1e-3, 1.0, 1e3), (0,))
    _check(case, dict(attn_loop="flat", attn_stages=2, block_q=16, block_kv=16, gemm_loop="nested"), (1e-2, 1e2), (1,))


def test_attn_loop_modes():
    """attn_loop: flat is refused with the fusions it does not implement, naming the fix; bad values name the modes."""
    meta = lambda **kw: prepare_meta(load_case("case01"), n_sm=132, **kw)[0]  # noqa: E731
    assert meta()["ATTN_LOOP"] == "nested" and meta(attn_loop="flat")["ATTN_LOOP"] == "flat"
    for bad in (dict(attn_oproj=True), dict(attn_pack=2, seqs_per_program=2), dict(attn_presplit=False)):
        with pytest.raises(ValueError, match="attn_loop=nested"):
            meta(attn_loop="flat", **bad)
    with pytest.raises(ValueError, match="nested.*flat"):
        meta(attn_loop="pairs")


def test_ao_weights_modes():
    """ao_weights picks the projection form only with attn_oproj (else loop), and names its modes on a bad value."""
    meta = lambda **kw: prepare_meta(load_case("case11"), n_sm=132, **kw)[0]  # noqa: E731
    assert meta(ao_weights="late")["AO_WEIGHTS"] == "loop"  # no attn_oproj: no projection in attention
    assert [meta(attn_oproj=True, ao_weights=m)["AO_WEIGHTS"] for m in ("loop", "late", "early")] == [
        "loop", "late", "early"]
    with pytest.raises(ValueError, match="loop.*late.*early"):
        meta(attn_oproj=True, ao_weights="soon")


def test_attn_oproj_needs_presplit_attention_and_a_bool():
    with pytest.raises(ValueError, match="attn_presplit"):
        prepare_meta(load_case("smoke1"), n_sm=132, attn_oproj=True, attn_presplit=False)
    with pytest.raises(ValueError, match=r"attn_oproj=1.5 not in \[True, False\]"):
        prepare_meta(load_case("smoke1"), n_sm=132, attn_oproj=1.5)
    meta = prepare_meta(load_case("case06"), n_sm=132, attn_oproj=True)[0]
    assert meta["ATTN_OPROJ"] and meta["SPLIT"] == 1 and meta["CACHE_MOD"] == ".cg"  # atomics into y: loads from L2


def test_phase_names_follow_the_fusions():
    from kernels.seqres.host import _barriers_per_layer, layer_phases
    for ao in (False, True):
        for ff in (False, True):
            meta = dict(ATTN_OPROJ=ao, FFN_FUSED=ff, LN_LOCAL=False)
            names = layer_phases(meta)
            assert len(names) == _barriers_per_layer(meta) == 7 - ao - ff
            assert ("oproj" in names) != ao and ("ffn" in names) == ff and ("ffn1" in names) != ff
    for ff, names in ((True, ("qkv", "attn", "ln2", "ffn")), (False, ("qkv", "attn", "ln2", "ffn1", "ffn2"))):
        meta = dict(ATTN_OPROJ=True, FFN_FUSED=ff, LN_LOCAL=True)
        assert layer_phases(meta) == names and _barriers_per_layer(meta) == len(names)


def test_ffn_fused_needs_a_bool():
    with pytest.raises(ValueError, match=r"ffn_fused='yes' not in \[True, False\]"):
        prepare_meta(load_case("smoke1"), n_sm=132, ffn_fused="yes")
    meta = prepare_meta(load_case("case10"), n_sm=132, ffn_fused=True)[0]
    assert meta["FFN_FUSED"] and meta["CACHE_MOD"] == ".cg" and (meta["BLOCK_H"], meta["BLOCK_N2"]) == (128, 64)


@triton.jit
def _ffn_phase_kernel(xhi, xlo, w1, b1, w2, b2, y, M: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                      BM: tl.constexpr, BH: tl.constexpr, BN2: tl.constexpr, BK: tl.constexpr):
    """One fused FFN phase shared by R programs (no barrier needed: one phase, atomics into y)."""
    _ffn_fused_phase(xhi, xlo, w1, b1, w2, b2, y, 0, tl.program_id(0), M, D, "ieee", 2, R, BM, BH, BN2, BK, "", 2)


@pytest.mark.skipif(not interpreting(), reason="fp32-held split parts: the interpreter's layout (PRESPLIT 2)")
@pytest.mark.parametrize("M,D,R,BH", [(32, 16, 3, 16), (40, 24, 5, 32), (16, 16, 1, 64)],
                         ids=["items-over-3", "ragged-over-5", "one-program"])
def test_ffn_fused_phase_adds_each_hidden_chunk_once(M, D, R, BH):
    """Work items (row block, hidden chunk) shared over R programs, ragged rows/hidden/columns: every output
    element must be y + GELU(a @ w1 + b1) @ w2 + b2, each chunk's partial added exactly once (b2 once)."""
    from kernels.common.split import split_hi_lo
    F = 4 * D
    g = torch.Generator().manual_seed(M * 10 + R)
    a, w1, w2 = torch.randn(M, D, generator=g), torch.randn(D, F, generator=g) / 4, torch.randn(F, D, generator=g) / 8
    b1, b2, y0 = torch.randn(F, generator=g), torch.randn(D, generator=g), torch.randn(M, D, generator=g)
    ahi, alo = (t.float().contiguous() for t in split_hi_lo(a))

    def rows(w):
        hi, lo = (t.float() for t in split_hi_lo(w))
        return torch.stack([hi, lo], dim=1).reshape(2 * w.shape[0], w.shape[1]).contiguous()
    y = y0.clone()
    _ffn_phase_kernel[(R,)](ahi, alo, rows(w1), b1, rows(w2), b2, y, M, D, R, 16, BH, 16, 16)
    d = lambda t: t.double()  # noqa: E731
    h = torch.nn.functional.gelu((d(ahi) + d(alo)) @ d(w1) + d(b1))
    ref = d(y0) + h @ d(w2) + d(b2)
    err = ((d(y) - ref).abs() / (1 + ref.abs())).max().item()
    assert err < 1e-4, f"max error {err}"


def test_trace_is_refused_by_the_interpreter():
    with pytest.raises(ValueError, match="globaltimer"):
        prepare_meta(load_case("smoke1"), n_sm=1, interpret=True, trace=True)


@pytest.mark.parametrize("name,value", [("gemm_loop", "tiled"), ("barrier", "flags_atomic"), ("ffn1_scheme", "fp8")])
def test_unknown_choices_are_refused_with_the_choices(name, value):
    with pytest.raises(ValueError, match=f"{name}={value!r} not in"):
        prepare_meta(load_case("smoke1"), n_sm=132, **{name: value})


@pytest.mark.parametrize("name", ["ln_fold", "flat_trips", "acc_reset", "presplit_rows", "gelu", "fast_layers",
                                  "prec_fast", "tile_order", "ln_stats", "presplit_weights", "prec_qkv"])
def test_removed_options_are_unknown_parameters(name):
    """Options measured and rejected (docs/seqres.md) are gone from the config and the kernel: naming one is an
    error that lists the valid parameters."""
    with pytest.raises(TypeError, match="unknown parameters"):
        prepare_meta(load_case("smoke1"), n_sm=132, **{name: 1})


def test_phase_profile_splits_work_and_barrier_wait_per_phase_kind():
    """Synthetic stamps of 2 programs, 1 layer with attn_oproj and ffn_fused (5 barriers) + the copy barrier: the
    profile sums each phase kind's work (previous departure -> arrival) and wait (arrival -> departure), mean over
    programs."""
    from types import SimpleNamespace
    from kernels.seqres.host import phase_profile
    nb = 1 + 5
    rows = []
    for skew in (0, 1000):  # ns; the second program starts 1 µs late and waits 1 µs less at each barrier
        t, row = skew, [skew]
        for i in range(nb):
            t += 2000 * (i + 1)          # work of phase i: 2, 4, ... µs
            row.append(t)
            t += 3000 - skew             # wait at its barrier
            row.append(t)
        row.append(t + 5000)             # final LayerNorm: 5 µs
        rows.append(row)
    fused = dict(TRACE=True, ATTN_OPROJ=True, FFN_FUSED=True, LN_LOCAL=False)  # phases ln1 qkv attn ln2 ffn
    p = SimpleNamespace(meta=dict(fused, COPY_PHASE="separate"), trace=torch.tensor(rows, dtype=torch.int64))
    pp = phase_profile(p)
    assert pp["work_us"] == pytest.approx(dict(copy=2, ln1=4, qkv=6, attn=8, ln2=10, ffn=12, final=5))
    assert pp["wait_us"]["qkv"] == pytest.approx(2.5) and pp["wait_us"]["copy"] == pytest.approx(2.5)
    assert pp["start_skew_us"] == pytest.approx(1.0)
    assert pp["kernel_us"] == pytest.approx(max(r[-1] for r in rows) / 1e3)  # first start (0) to last end
    with pytest.raises(ValueError, match="trace=true"):
        phase_profile(SimpleNamespace(meta=dict(TRACE=False)))
    # copy_phase fused: no copy barrier; the first barrier is layer 0's LN1, whose work counts from the start
    pp = phase_profile(SimpleNamespace(meta=dict(fused, COPY_PHASE="fused"), trace=torch.tensor(rows, dtype=torch.int64)))
    assert pp["work_us"] == pytest.approx(dict(ln1=2 + 12, qkv=4, attn=6, ln2=8, ffn=10, final=5))
    assert "copy" not in pp["wait_us"] and pp["wait_us"]["ln1"] == pytest.approx(2 * 2.5)


def test_direct_launch_passes_every_constexpr_in_signature_order():
    """run() launches the compiled kernel with the runtime arguments followed by ``const_args``; that is only
    right while every argument from ``S`` on is a constexpr that prepare_meta sets, and nothing else is."""
    from kernels.seqres.host import constexpr_args
    from kernels.seqres.megakernel import _seqres_fwd
    names = list(_seqres_fwd.arg_names)
    meta = prepare_meta(load_case("case10"), n_sm=132)[0]
    assert names[names.index("S"):] == [n for n in names if n in meta]
    assert set(names[names.index("S"):]) == set(meta)
    assert constexpr_args(meta) == [meta[n] for n in names[names.index("S"):]]


@needs_backend
@pytest.mark.parametrize("params", [{}, dict(attn_oproj=True, ffn_fused=True, attn_loop="nested")],
                         ids=["defaults", "fused"])
def test_compile_and_launch_pass_the_same_runtime_arguments(params, monkeypatch):
    """compile_only (CUDA only: Triton's warmup) and launch take their runtime arguments from one list, and that
    list with the constexprs binds to the kernel's signature (a warmup call missing an argument once broke every
    GPU prepare while the interpreter tests passed)."""
    import inspect
    from types import SimpleNamespace
    from kernels.seqres import host
    from kernels.seqres.megakernel import _seqres_fwd
    case = load_case("smoke1")
    w = make_weights(case, device=torch.device(_device()))
    p = get_variant("seqres").prepare(case, w, **params)
    seen = {}

    def warmup(*args, grid, **kw):
        seen["args"], seen["kw"] = args, kw
        raise RuntimeError("stop")
    monkeypatch.setattr(host, "_seqres_fwd", SimpleNamespace(warmup=warmup))
    with pytest.raises(RuntimeError, match="stop"):
        host.compile_only(p)
    monkeypatch.undo()
    sig = inspect.signature(_seqres_fwd.fn)
    launch_opts = {k: v for k, v in seen["kw"].items() if k not in sig.parameters}
    assert set(launch_opts) == set(p.launch)
    sig.bind(*seen["args"], **{k: v for k, v in seen["kw"].items() if k in sig.parameters})
    x = p.scratch["a"]
    runtime = host.runtime_args(p, x, x)
    assert len(runtime) == list(_seqres_fwd.arg_names).index("S") == len(seen["args"])
    sig.bind(*runtime, *host.constexpr_args(p.meta))


@needs_backend
def test_direct_launch_passes_the_runtime_arguments_with_addresses(monkeypatch):
    """The direct launch (CUDA) passes runtime_args with the long-lived tensors as their addresses: the same
    values in the same order (x, y as tensors), then the constexprs; the flag epoch advances by the barrier
    count. (A recorder stands in for the compiled kernel, so this runs on the CPU too.)"""
    from kernels.seqres import host
    case = load_case("smoke1")
    w = make_weights(case, device=torch.device(_device()))
    p = get_variant("seqres").prepare(case, w, attn_oproj=True, ffn_fused=True)
    seen = []
    monkeypatch.setattr(p, "runner", lambda *a: seen.append(a))
    monkeypatch.setattr(p, "kernel", "compiled")
    monkeypatch.setattr(p, "const_args", host.constexpr_args(p.meta))
    x = make_input(case, 1.0, 0, device=torch.device(_device()))
    y = torch.empty_like(x)
    epoch = p.epoch
    addr = lambda a: a.data_ptr() if isinstance(a, torch.Tensor) else a  # noqa: E731
    want = [addr(a) for a in host.runtime_args(p, x, y)]  # (before the launch advances the epochs)
    assert host.launch(p, x, y) == "compiled" and p.epoch == epoch + p.barriers_per_launch
    got = seen[0]
    assert got[0] is x and got[1] is y
    assert [addr(a) for a in got[:len(want)]] == want
    assert list(got[len(want):]) == p.const_args
    assert all(isinstance(a, int) for a in got[2:len(want) - 4])


@triton.jit
def _flat_phase_kernel(ahi, alo, w, b, y, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, R: tl.constexpr,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SK: tl.constexpr):
    """One residual flat GEMM phase, y += a @ w + b, shared by R programs (no barrier needed: one phase)."""
    _linear_phase_flat(ahi, alo, w, b, y, y, y, 0, tl.program_id(0), M, N, K, False, True, 0, "ieee", 2, R,
                       BM, BN, BK, "", 2, SK)


@pytest.mark.skipif(not interpreting(), reason="fp32-held split parts: the interpreter's layout (PRESPLIT 2)")
@pytest.mark.parametrize("M,R,sk", [(48, 5, True), (40, 7, True), (48, 5, False), (40, 3, False)],
                         ids=["even-streamk", "ragged-streamk", "even-tiles", "ragged-tiles"])
def test_flat_residual_phase_shares_work_over_programs(M, R, sk):
    """Stream-K: R programs split 6 tiles x 4 K steps unevenly, so tiles are cut between programs and
    their pieces are added with atomics (the piece with K step 0 adding the bias); whole-tile shares
    (stream_k off) as the megakernel runs them. Every output element must equal y + a @ w + b once."""
    from kernels.common.split import split_hi_lo
    N, K = 32, 64
    g = torch.Generator().manual_seed(M * 100 + R)
    a, w = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    b, y0 = torch.randn(N, generator=g), torch.randn(M, N, generator=g)
    ahi, alo = (t.float() for t in split_hi_lo(a))
    whi, wlo = (t.float() for t in split_hi_lo(w))
    wsplit = torch.stack([whi, wlo], dim=1).reshape(2 * K, N).contiguous()
    y = y0.clone()
    _flat_phase_kernel[(R,)](ahi, alo, wsplit, b, y, M, N, K, R, 16, 16, 16, sk)
    d = lambda t: t.double()  # noqa: E731
    ref = d(y0) + d(alo) @ d(whi) + d(ahi) @ d(wlo) + d(ahi) @ d(whi) + d(b)
    err = (d(y) - ref).abs().max().item()
    assert err < 1e-4, f"max error {err}"


@triton.jit
def _kv_halves_kernel(qkv, out, qk_scale, S: tl.constexpr, D: tl.constexpr, BQ: tl.constexpr, BKV: tl.constexpr):
    """attn_kv_split's arithmetic in one program: the online softmax over each half of the key blocks
    (``_attention_block``, as each of the two programs runs it), then each half's output scaled by its share of the
    combined normaliser (``_kv_merge_scale``) and the two added (in the kernel, by their output projections)."""
    NKV: tl.constexpr = S // BKV
    offs_q = tl.arange(0, BQ)
    offs_d = tl.arange(0, D)
    q = tl.load(qkv + offs_q[:, None] * (3 * D) + offs_d[None, :]) * qk_scale
    m0 = tl.full((BQ,), float("-inf"), tl.float32)
    l0 = tl.zeros((BQ,), tl.float32)
    a0 = tl.zeros((BQ, D), tl.float32)
    m1, l1, a1 = m0, l0, a0
    for j in range(0, NKV // 2):
        m0, l0, a0 = _attention_block(qkv, 0, q, offs_q, j * BKV, m0, l0, a0, 0, S, D, D, False, "ieee", BKV, D, "")
        m1, l1, a1 = _attention_block(qkv, 0, q, offs_q, (NKV // 2 + j) * BKV, m1, l1, a1, 0, S, D, D, False, "ieee",
                                      BKV, D, "")
    o = a0 * _kv_merge_scale(m0, l0, m1, l1)[:, None] + a1 * _kv_merge_scale(m1, l1, m0, l0)[:, None]
    tl.store(out + offs_q[:, None] * D + offs_d[None, :], o)


@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0], ids=["flat", "unit", "peaked"])
def test_attn_kv_split_halves_combine_to_softmax_attention(scale):
    """The two halves' states, each scaled by its share of the combined normaliser, add up to softmax attention
    over all keys, also when one half holds all the weight (scale 30: the other half's maximum is far below)."""
    S, D, BQ, BKV = 64, 16, 16, 16
    g = torch.Generator().manual_seed(3)
    qkv = torch.randn(S, 3 * D, generator=g) * scale
    out = torch.empty(BQ, D)
    _kv_halves_kernel[(1,)](qkv, out, math.log2(math.e) / math.sqrt(D), S, D, BQ, BKV)
    q, k, v = (qkv[:, i * D:(i + 1) * D].double() for i in range(3))
    ref = torch.softmax(q[:BQ] @ k.T / math.sqrt(D), dim=-1) @ v
    assert (out.double() - ref).abs().max().item() < 1e-5 * max(1.0, ref.abs().max().item())


def test_attn_kv_split_needs_its_preconditions():
    meta = lambda name, **kw: prepare_meta(load_case(name), n_sm=132, n_slots=264, **kw)[0]  # noqa: E731
    fused = dict(attn_oproj=True, ffn_fused=True, attn_fill=False)
    assert meta("case11", attn_kv_split=True, **fused)["ATTN_KV_SPLIT"] is True   # 8 tiles of 64 rows, 16 programs
    assert meta("case11", **fused)["ATTN_KV_SPLIT"] is False
    assert meta("case01", attn_kv_split=True, attn_oproj=True)["ATTN_KV_SPLIT"] is False  # 8 tiles / 4 programs: off
    for bad, match in ((dict(), "attn_oproj=true"), (dict(fused, block_kv=256), "even number of key blocks")):
        with pytest.raises(ValueError, match=match):
            meta("case11", attn_kv_split=True, **bad)
    with pytest.raises(ValueError, match="non-causal"):
        meta("case10", attn_kv_split=True, **fused)
    with pytest.raises(ValueError, match="attn_kv_split='yes' not in"):
        meta("case11", attn_kv_split="yes", **fused)


@triton.jit
def _gelu_poly_kernel(x, o, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o + offs, gelu_log2poly(tl.load(x + offs), False))


@pytest.mark.skipif(not interpreting(), reason="the portable path of the GELU helper (the GPU path is PTX)")
def test_gelu_log2poly_matches_exact_gelu():
    """The fitted log2 Phi(-|x|) polynomial (bench/common/gelu_fit.py): within 5e-6 of the exact GELU in float64
    over [-60, 60] and N(0, 9) samples, and no cancellation for negative x (the fp32 formula 0.5 x (1 + erf), as
    the reference evaluates it, loses all relative accuracy there)."""
    bound, span = 5e-6, 60
    n = 1 << 14
    x = torch.cat([torch.linspace(-span, span, n // 2), torch.randn(n // 2, generator=torch.Generator().manual_seed(0)) * 3])
    o = torch.empty_like(x)
    _gelu_poly_kernel[(1,)](x, o, n)
    ref = torch.nn.functional.gelu(x.double())
    err = (o.double() - ref).abs()
    assert err.max().item() < bound, err.max().item()
    neg = (x < -3) & (ref.abs() > 1e-6)  # small outputs keep a small relative error (1 + erf taken as erfc)
    assert neg.any() and (err[neg] / ref[neg].abs()).max().item() < 5e-3


def test_search_candidates_are_the_search_space_on_top_of_the_given_parameters():
    """``tune=search`` tries the parameters as given, then each candidate of config/search/seqres.yaml on top
    (every set prepared with ``tune: off``)."""
    from kernels import tuning
    from kernels.seqres.host import DEFAULTS, tune_candidates
    space = tuning.search_space("seqres")
    c = tune_candidates({"a": 1, "tune": "search", "tuned_file": "x"})
    assert c[0] == ({}, {"a": 1, "tune": "off"}) and len(c) == 1 + len(space)
    assert all(full == dict({"a": 1, "tune": "off"}, **over) for over, full in c[1:])
    assert all(set(o) <= set(DEFAULTS) for o in space), "a search candidate names an unknown parameter"


def test_shared_memory_overflow_halves_the_attention_tile_or_names_the_fix():
    """A compile that needs more shared memory than a program may have (case 1 with block_kv=128 and pipelined
    attention on the H200: 253952 > 232448 bytes) halves the attention tile with fit_smem, down to 16; past that,
    or without fit_smem, the error names the parameters to lower."""
    from triton.runtime.errors import OutOfResources
    from kernels.seqres.host import smem_overflow_step
    err = OutOfResources(253952, 232448, "shared memory")
    m = lambda q, kv, **kw: dict(BLOCK_Q=q, BLOCK_KV=kv, ATTN_PRESPLIT=False, ATTN_STAGES=0, **kw)  # noqa: E731
    assert smem_overflow_step(m(64, 128), True, err) == dict(block_q=32, block_kv=64)
    assert smem_overflow_step(m(16, 32), True, err) == dict(block_q=16, block_kv=16)
    assert smem_overflow_step(dict(m(64, 128), ATTN_PRESPLIT=True), True, err, 3) == dict(attn_stages=2)
    for meta, fit in ((m(16, 16), True), (m(64, 128), False)):
        with pytest.raises(Unsupported, match="253952 bytes of shared memory.*block_kv"):
            smem_overflow_step(meta, fit, err)
    with pytest.raises(Unsupported, match="registers"):
        smem_overflow_step(m(64, 64), True, OutOfResources(300, 255, "registers"))


