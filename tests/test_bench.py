"""The lab tools of ``bench/`` that run without a GPU (docs/seqres.md).

- ``precision_probe``: its float64 emulation of the model must reproduce the reference when nothing is
  rounded, rank the schemes by their rounding (bf16x3 far inside the gate, one fp16 operand not), and
  judge through the real gate.
- ``gluon_gemm``: the Gluon bf16x3 GEMM kernels (GPU only to run) must still compile for sm_90a with the
  installed Triton, with the TMA loads, wgmma and (warp-specialized) register hand-over they were measured with.
"""
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

from kernels import load_case, make_input, make_weights
from kernels.gate import gate
from kernels.reference import reference_forward
from bench.seqres import gemm_probe, precision_probe
from bench.seqres.gemm_probe import gelu_erf_poly
from bench.seqres.gluon_gemm import instr_n, ws_maxnreg

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_compiled(args, timeout=600):
    """Run ``python args...`` from the repo root without the Triton interpreter (the sm_90a compile checks need
    the real compiler, no GPU); fails the test with its stderr if it fails, else returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def _max_over_tol(scheme, attn=None, scale=1.0, seed=0, ln_fold=False):
    case = load_case("smoke1")
    w = make_weights(case)
    x = make_input(case, scale, seed)
    out = precision_probe.forward(x, w.flat(), case.H, case.causal, scheme, attn or scheme, ln_fold)
    return gate(out, reference_forward(case, w, x)).max_over_tol


def test_precision_probe_exact_matches_the_reference():
    assert _max_over_tol("exact") < 1e-3


def test_precision_probe_ln_fold_is_the_layernorm():
    """The folded form rstd*(y W') - rstd*mean*s + c is LN(y) W + b: exact products reproduce the reference at
    the gate's extreme scales (one-pass fp32 statistics included)."""
    for scale in (1e-3, 1e3):
        assert _max_over_tol("exact", scale=scale, ln_fold=True) < 0.01


def test_precision_probe_shifted_ln_fold_is_mean_robust():
    """The LayerNorm folded around a per-row shift (``fold="shift"``) is LN(y) W + b with exact products, and with
    bf16x3 products it stays as close to the reference as the unfolded LayerNorm on inputs whose rows sit far from 0
    against their spread (``bench.dag.precision.offset_input``), where the algebraic fold loses the row's spread to
    cancellation: at 30 × the input scale it is over 10× the unfolded error."""
    from bench.dag.precision import offset_input
    case = load_case("smoke1")
    w = make_weights(case)

    def err(x, scheme, fold):
        y = precision_probe.forward(x, w.flat(), case.H, case.causal, scheme, scheme, fold)
        return gate(y, reference_forward(case, w, x)).max_over_tol

    for scale in (1e-3, 1e3):
        assert err(make_input(case, scale, 0), "exact", "shift") < 0.01
    x = offset_input(make_input(case, 0.1, 0), 0.1, 0, 30.0)
    plain, shift, algebraic = err(x, "bf16x3", False), err(x, "bf16x3", "shift"), err(x, "bf16x3", True)
    assert shift < 2 * plain + 0.01 and shift < 0.1, (plain, shift)
    assert algebraic > 10 * plain, (plain, algebraic)


def test_dag_precision_offset_input_moves_rows_not_their_spread():
    from bench.dag.precision import _scheme, offset_input
    case = load_case("smoke1")
    x = make_input(case, 0.1, 3)
    assert offset_input(x, 0.1, 3, 0.0) is x
    y = offset_input(x, 0.1, 3, 30.0)
    d = y - x
    assert torch.allclose(d, d[..., :1].expand_as(d))            # one offset per row
    assert float(d.abs().mean()) > 0.5                            # 30 x 0.1 x |N(0, 1)|
    assert torch.equal(offset_input(x, 0.1, 3, 30.0), y)         # seeded by the input seed
    assert _scheme("f16_ffn1+shift") == (("ffn1",), "shift") and _scheme("bf16x3") == ((), False)
    with pytest.raises(SystemExit, match="unknown scheme"):
        _scheme("f16_ffn1+tilt")


def test_dag_precision_spike_input_moves_one_element_a_row():
    from bench.dag.precision import SCHEMES, _scheme, per_gemm, spike_input
    case = load_case("smoke1")
    x = make_input(case, 0.1, 3)
    assert spike_input(x, 0.1, 3, 0.0) is x
    y = spike_input(x, 0.1, 3, 30.0)
    moved = (y != x).sum(-1)
    assert int(moved.max()) == 1 and int((moved == 1).sum()) >= moved.numel() - 1   # one element a row
    assert float((y - x).abs().sum(-1).mean()) > 0.5                                 # 30 x 0.1 x |N(0, 1)|
    assert torch.equal(spike_input(x, 0.1, 3, 30.0), y)                             # seeded by the input seed
    assert per_gemm(_scheme("i8_all")[0]) == SCHEMES["i8_all"] and per_gemm(("o",)) == {"o": "f16_w1"}


def test_precision_probe_ranks_schemes_by_their_rounding():
    bf16x3 = _max_over_tol("bf16x3", scale=0.1)
    one_fp16 = _max_over_tol("f16_w1", scale=0.1)
    one_bf16 = _max_over_tol("bf16_w1", scale=0.1)
    assert bf16x3 < 0.1
    assert one_fp16 > 5 * bf16x3
    assert one_bf16 > 2 * one_fp16  # bf16 keeps 3 fewer mantissa bits than fp16


def test_precision_probe_matmul_schemes_agree_without_rounding_error():
    a = torch.randint(-8, 8, (5, 7), dtype=torch.float64)  # exact in bf16 and fp16: every scheme is exact
    w = torch.randint(-8, 8, (7, 3), dtype=torch.float64)
    for s in ("exact", "bf16x3", "f16_w1", "f16_a1", "bf16_w1", "f16f8"):
        assert torch.equal(precision_probe.matmul(a, w, s), a @ w), s


def test_precision_probe_i8_limbs_represent_their_operands():
    """The int8 limb schemes ("Results" 52): limbs in int8's range whose 128 · l0 + l1 times the scale is the operand
    rounded to 15 bits of its row's (block's) largest element; the four-product form is the exact product of the
    quantized operands, the three-product one leaves out only l1_a · l1_w, and the errors rank by what they keep."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 128, generator=g, dtype=torch.float64)
    w = torch.randn(128, 8, generator=g, dtype=torch.float64) * 0.03
    for dim, x in ((-1, a), (-2, w)):
        for block in (None, 64):
            l0, l1, s = precision_probe._i8_limbs(x, dim, block)
            assert l0.abs().max() <= 127 and l1.min() >= -64 and l1.max() <= 63
            assert torch.equal(l0, l0.round()) and torch.equal(l1, l1.round())
            q = (128 * l0 + l1) * s
            top = x.abs().amax(dim, keepdim=True) if block is None else \
                x.movedim(dim, -1).unflatten(-1, (2, 64)).abs().amax(-1, keepdim=True).expand(
                    *x.movedim(dim, -1).shape[:-1], 2, 64).flatten(-2).movedim(-1, dim)
            assert ((q - x).abs() <= top / precision_probe.I8_Q / 2 * (1 + 1e-9)).all()
    l0a, l1a, sa = precision_probe._i8_limbs(a, -1, None)
    l0w, l1w, sw = precision_probe._i8_limbs(w, -2, None)
    exact_q = ((128 * l0a + l1a) @ (128 * l0w + l1w)) * sa[:, :1] * sw[:1, :]
    assert torch.allclose(precision_probe.matmul(a, w, "i8x2"), exact_q, rtol=0, atol=1e-15)
    assert torch.allclose(precision_probe.matmul(a, w, "i8x2c"), exact_q - (l1a @ l1w) * sa[:, :1] * sw[:1, :],
                          rtol=0, atol=1e-15)
    err = {sc: float((precision_probe.matmul(a, w, sc) - a @ w).abs().max()) for sc in
           ("bf16x3", "i8x2b", "i8x2", "i8x2c", "f16_w1")}
    assert err["bf16x3"] < err["i8x2b"] <= 1.5 * err["i8x2"] and err["i8x2"] < err["i8x2c"] < err["f16_w1"], err


def test_gemm_probe_configs_are_well_formed():
    names = [c[0] for c in gemm_probe.CONFIGS]
    assert len(names) == len(set(names))
    for name, form, bm, bn, bk, nw, ns in gemm_probe.CONFIGS:
        assert form in ("ptr", "ptr_nest", "k3", "pair", "pair_ca", "ptr_lnfold", "f16f8", "f16f8r", "desc", "desc_ws", "gluon",
                        "gluon_ws", "ptr_epi", "gluon_epi", "gluon_epi_ov"), name
        assert bm % (16 * min(nw, 4)) == 0 and bn % 8 == 0 and bk % 16 == 0, name
        if form.startswith("gluon"):
            assert bn % instr_n(bm, bn, nw) == 0, name


def test_ws_register_cap_fits_the_register_file():
    for nw in (4, 8):
        for ctas in (1, 2):
            assert ws_maxnreg(nw, ctas) * 32 * (nw + 4) * ctas <= 65536


def test_gluon_gemm_compiles_for_sm90():
    out = _run_compiled(["-m", "bench.seqres.gluon_gemm"])
    lines = out.strip().splitlines()
    assert len(lines) == 6, out
    for ln in lines:
        fields = dict(f.split("=") for f in ln.split(": ", 1)[1].split())
        # the epilogue forms: the overlapped one runs its epilogue between the next step's wgmma and
        # their wait (what it was measured as), the other after the tile's last wait
        if ln.startswith("mm3_gluon_epi2_ov"):
            assert "epi_before_wait=True" in ln, ln
        elif ln.startswith("mm3_gluon_epi"):
            assert "epi_before_wait=False" in ln, ln
        assert int(fields["wgmma"]) > 0 and int(fields["tma"]) > 0, ln
        assert int(fields["shared"]) <= 232448, ln  # fits one H100/H200 SM
        if ln.startswith("mm3_gluon_ws"):
            assert int(fields["setmaxnreg"]) > 0, ln  # the producer hands its registers to the MMA warps


def test_f16f8_operands_represent_the_product():
    """The f16f8 scheme's parts (fp16 hi, scaled fp8 corrections) stand for a·w to about bf16x3's accuracy."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 128, generator=g)
    w = torch.randn(128, 96, generator=g) / 128 ** 0.5
    parts, val = gemm_probe.f16f8_operands(a, w)
    ah, al8, ah8, wh, wh8t, wl8t, inv = parts
    assert ah.dtype == wh.dtype == torch.float16 and al8.dtype == wl8t.dtype == torch.float8_e4m3fn
    assert wh8t.shape == (96, 128)  # the fp8 weight parts K-major, as fp8 wgmma reads them
    exact = (a.double() @ w.double()).float()
    rel = float((val - exact).abs().max() / exact.abs().max())
    fp16_only = float((ah.float() @ wh.float() - exact).abs().max() / exact.abs().max())
    assert rel < 3e-5 and rel < fp16_only / 10, (rel, fp16_only)


def test_ca_hook_rewrites_every_async_copy():
    """gemm_probe's pair_ca form depends on a compile-stage hook turning cp.async.cg into cp.async.ca (sm_90a,
    no GPU needed; in a subprocess without the interpreter, as the Gluon test); the PTX must still assemble."""
    code = ("from bench.seqres.gemm_probe import aot_pair_ca; k = aot_pair_ca(); p = k.asm['ptx']; "
            "print(p.count('cp.async.ca.shared.global'), p.count('cp.async.cg'), len(k.asm['cubin']))")
    out = _run_compiled(["-c", code])
    ca, cg, cubin = map(int, out.split())
    assert ca > 0 and cg == 0 and cubin > 0, out


def test_barrier_probe_kernel_runs_its_barriers_in_the_interpreter():
    """barrier_probe's loop (one program per group, so valid when programs run one after another): every
    barrier publishes its target on the program's flag, and the last store is the last iteration's."""
    from bench.seqres.barrier_probe import _barrier_loop
    # flags and counter, polled with atomics (the interpreter's forms); a counter starts at epoch x R
    for mode, epoch, want in ((1, 5, 9), (4, 0, 4)):
        flags = torch.full((3, 1), epoch, dtype=torch.int32)
        err = torch.zeros(1, dtype=torch.int32)
        out = torch.zeros(3 * 64 * 16)
        _barrier_loop[(3,)](flags, err, out, epoch, 4, R=1, BLOCK_R=1, MODE=mode, STORE_N=16)
        assert int(err.item()) == 0
        assert flags[:, 0].tolist() == [want] * 3  # targets epoch+1 .. epoch+4 (flags) / one add per barrier
        tile = out.view(3, 64, 16)
        assert torch.equal(tile[1], 3 + torch.arange(64 * 16, dtype=torch.float32).view(64, 16))


def test_st_release_barrier_forms_assemble():
    """group_barrier MODE 5 and 6 (``barrier: flags_st | flags_relaxed``, GPU only) publish with st.release and
    poll with ld.acquire, or ld.relaxed and one fence after the spin: their PTX must assemble for sm_90a."""
    code = ("from bench.seqres.barrier_probe import aot_barrier\n"
            "for m in (5, 6):\n"
            "    p = aot_barrier(m).asm['ptx']\n"
            "    print(m, p.count('st.release.gpu'), p.count('ld.acquire.gpu'), p.count('ld.relaxed.gpu'),"
            " p.count('fence.acq_rel.gpu'), p.count('atom.'))")
    out = _run_compiled(["-c", code])
    rows = {int(r.split()[0]): list(map(int, r.split()[1:])) for r in out.strip().splitlines()}
    st5, acq5, rlx5, fence5, _ = rows[5]
    st6, acq6, rlx6, fence6, _ = rows[6]
    assert st5 > 0 and acq5 > 0 and rlx5 == 0 and fence5 == 0, rows
    assert st6 > 0 and acq6 == 0 and rlx6 > 0 and fence6 > 0, rows


def test_counter_t0_barrier_assembles_and_maps():
    """``barrier: counter_t0`` (group_barrier MODE 7, GPU only): thread 0 publishes with ``red.release.gpu`` and polls
    with ``ld.acquire.gpu``; its PTX must assemble for sm_90a, with the publish and the poll only behind thread 0's
    predicate. The host maps it to MODE 7 on the GPU and to the counter with atomic polls (4) in the interpreter, and
    rejects unknown names."""
    from kernels.common.tl_helpers import COUNTER_T0_PTX, counter_t0_ptx
    from bench.seqres.barrier_probe import mode_asm
    from kernels.seqres.host import _barrier_mode
    assert _barrier_mode("counter_t0", False) == 7 and _barrier_mode("counter_t0", True) == 4
    # the probe's release / acquire mode is the kernel's barrier; its other modes differ only in the two orderings
    assert mode_asm(14) == COUNTER_T0_PTX.value == counter_t0_ptx()
    assert "red.relaxed.gpu" in mode_asm(10) and "fence.acq_rel.gpu" in mode_asm(15)
    with pytest.raises(ValueError, match="counter_t0"):
        _barrier_mode("counter_t1", False)
    code = ("from bench.seqres.barrier_probe import aot_barrier\n"
            "p = aot_barrier(7).asm['ptx']\n"
            "print(p.count('red.release.gpu.global.add.s32'), p.count('ld.acquire.gpu.global.b32'),"
            " p.count('@p bra DONE'))")
    out = _run_compiled(["-c", code])
    red, acq, guard = map(int, out.split())
    assert red == acq == guard == 4, out  # one per barrier of the probe's 4 (NB = 4, unrolled)


def test_sass_regions_sums_samples_by_instruction_class(tmp_path):
    """``sass_regions`` reads ncu's source page (CSV, optionally gzipped) and charges each instruction's samples to
    its class; the 'barrier' reason outside the wgmma waits is reported as time held at CTA barriers."""
    import gzip

    from bench.seqres import sass_regions
    head = ['Address', 'Source', 'Warp Stall Sampling (All Samples)', 'Warp Stall Sampling (Not-issued Samples)',
            'stall_barrier', 'stall_long_sb', 'stall_barrier (Not Issued)']
    body = [['0x0', '  HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12].tnspB, R24, gsb0', '2', '2', '0', '0', '0'],
            ['0x10', '  WARPGROUP.DEPBAR.LE gsb0, 0x0', '6', '6', '6', '0', '6'],
            ['0x20', '  @!P0 CCTL.IVALL', '3', '3', '0', '3', '0'],
            ['0x30', '  BAR.SYNC.DEFER_BLOCKING 0x0', '0', '0', '0', '0', '0'],
            ['0x40', '  ULDC UR11, c[0x0][0x2e8]', '9', '9', '9', '0', '9']]
    lines = ['"Kernel Name","_seqres_fwd",'] + [",".join(f'"{c}"' for c in r) for r in [head] + body]
    f = tmp_path / "src.csv.gz"
    with gzip.open(f, "wt") as g:
        g.write("\n".join(lines) + "\n")
    rows = sass_regions.read(str(f))
    assert [sass_regions.klass(sass_regions.opcode(r["sass"])) for r in rows] == [
        "wgmma", "wgmma", "flag sync", "CTA barrier", "other (integer, fp32, control)"]
    out = sass_regions.summary(rows, top=2)
    assert "20 warp samples" in out
    assert "wgmma                             40.0%" in out and "flag sync                         15.0%" in out
    assert "group barrier spin): 45.0%" in out  # the ULDC's 9 barrier samples, not the DEPBAR's 6


def test_serialization_notes_reads_every_wgmma_serialization_note():
    """ptxas's notes that serialize the wgmma (C7510 / C7514 / C7515 …) are read by code, other notes are not: the
    ws_dag draft had C7515, which a check for C7514 alone passed."""
    from bench.common.sm90_report import serialization_notes
    from bench.seqres.aot_check import wgmma_serialized
    txt = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
           "wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage "
           "in the function 'k'\n"
           "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the "
           "presence of Extern calls in the function 'k'\n"
           "ptxas info    : (C7999) some other note about wgmma\nptxas info    : Used 168 registers\n")
    assert serialization_notes(txt) == ["C7514", "C7515"]
    assert wgmma_serialized(txt) and not wgmma_serialized("ptxas info    : Used 168 registers\n")
    assert serialization_notes("") == []


def test_wgmma_passes_keep_the_flat_loop_asynchronous_on_sm90():
    """The sm_90 compile runs Triton's OptimizeAccumulatorInit pass (``kernels.common.wgmma_passes``): the flat
    loop's first dot of a step takes the zero-accumulator predicate (a fourth operand in the TTGIR), and ptxas does
    not serialize the wgmma (its C7514 note), which it does for the same source compiled without the passes;
    ``wgmma_chain: async`` relaxes the waits between a step's chained dots (``wgmma.wait_group`` 1 and 2 in the
    PTX). Case 1's defaults, compiled for sm_90a without a GPU, in a subprocess without the interpreter."""
    code = ("import contextlib, os, re\n"
            "os.environ['TRITON_ALWAYS_COMPILE'] = '1'  # the edits are not in Triton's cache key\n"
            "import kernels.seqres.host as host\n"
            "from bench.seqres.aot_check import compile_case, ptxas_info, wgmma_serialized\n"
            "from kernels.cases import load_case\n"
            "passes = host.compile_context\n"
            "for label, wch in (('wait', 'wait'), ('async', 'async'), ('unedited', 'async')):\n"
            "    host.compile_context = passes if label != 'unedited' else (lambda meta: contextlib.nullcontext())\n"
            "    k, _, meta = compile_case(load_case(1), {'wgmma_chain': wch})\n"
            "    dots = re.findall(r'ttng.warp_group_dot (%[^{]*)\\{', k.asm['ttgir'])\n"
            "    pred = sum(d.count(',') == 3 and not d.rstrip().endswith('%false') for d in dots)\n"
            "    relaxed = len(re.findall(r'wgmma.wait_group.sync.aligned [12];', k.asm['ptx']))\n"
            "    print(label, pred, relaxed > 0, wgmma_serialized(ptxas_info(k.asm['ptx'], 90)))")
    out = _run_compiled(["-c", code], timeout=900)
    rows = {r.split()[0]: r.split()[1:] for r in out.strip().splitlines()}
    # the 4 GEMM phases' flat loops take the predicate; the chains are relaxed only with async
    assert rows["wait"] == ["4", "False", "False"], out
    assert rows["async"] == ["4", "True", "False"], out
    # without the passes the reset writes an accumulator in flight: ptxas serializes every wgmma
    assert rows["unedited"][0] == "0" and rows["unedited"][2] == "True", out


def test_gelu_log2poly_coefficients_are_the_fit():
    """tl_helpers.gelu_log2poly's coefficients are what bench/common/gelu_fit.py computes (re-run here); the fit meets
    its weighted bound (GELU error <= EABS, relative error of Phi <= EREL) within 3x; and with its negative leading
    coefficient q keeps falling past the fitted range, which is why the helper needs no clamp."""
    import numpy as np

    from bench.common import gelu_fit
    from kernels.common import tl_helpers
    coef, worst = gelu_fit.fit()
    assert worst < 3.0, worst
    assert gelu_fit.DEGREE == 5
    got = [getattr(tl_helpers, f"GELU_Q{k}").value for k in range(5, -1, -1)]
    assert torch.allclose(torch.tensor(got, dtype=torch.float64), torch.from_numpy(coef), rtol=1e-9, atol=0)
    assert coef[0] < 0
    u = np.linspace(gelu_fit.U_MAX, 1e4, 100001)
    assert (np.diff(np.polyval(coef, u)) < 0).all()


@triton.jit
def _gelu_erf_poly_kernel(x, o, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o + offs, gelu_erf_poly(tl.load(x + offs), False))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the portable path (the GPU path is PTX)")
def test_gelu_erf_poly_matches_exact_gelu():
    """gemm_probe's polynomial GELU (erf of Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7): within 5e-7 of the
    exact GELU in float64 over [-12, 12] and N(0, 9) samples."""
    n = 1 << 14
    x = torch.cat([torch.linspace(-12, 12, n // 2), torch.randn(n // 2, generator=torch.Generator().manual_seed(0)) * 3])
    o = torch.empty_like(x)
    _gelu_erf_poly_kernel[(1,)](x, o, n)
    assert (o.double() - torch.nn.functional.gelu(x.double())).abs().max().item() < 5e-7


def test_mma_loops_reads_the_per_step_path_of_a_sass_loop():
    """aot_check's SASS reader: a loop of 6 instructions whose epilogue (2 instructions) is skipped by a
    forward branch; the per-step path counts head..branch plus the branch target..loop end."""
    from bench.seqres.aot_check import mma_loops
    body = ["IADD3 R1, R1, 0x1, RZ", "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24", "@P0 BRA 0x0140",
            "STG.E [R2.64], R4", "STG.E [R2.64+0x4], R5", "ISETP.GT.AND P1, PT, R1, 0x4, PT", "@P1 BRA 0x00f0"]
    # addresses 0xf0, 0x100, ...: the loop head is the first instruction, 0x140 the fifth
    sass = "\n".join(f"        /*{0xf0 + 16 * i:04x}*/                   {t} ;" for i, t in enumerate(body))
    (lp,) = mma_loops(sass)
    assert lp["start"] == 0xF0 and lp["body"] == 7 and lp["mma"] == 1
    assert lp["step_path"] == 3 + 2  # head..@P0 BRA (3), then 0x140..loop end (2)


def test_check_gpu_sweep_entries_use_known_parameters():
    """Every ``check_gpu`` SWEEP entry overrides parameters that ``prepare`` knows, with allowed values (an option
    removed after its measurement must take its sweep entries with it, or the GPU sweep fails on them one by one)."""
    from bench.seqres.check_gpu import SWEEP, _resolve
    from kernels import list_cases
    from kernels.seqres.host import CHOICES, DEFAULTS
    bad = {}
    for name in list_cases(smoke=False, family="seqres"):  # the "pub" entries take each case's published choice
        case = load_case(name)
        for entry, over in SWEEP.items():
            full = _resolve(over, case, DEFAULTS)
            extra = set(full) - set(DEFAULTS)
            extra |= {k for k, v in full.items() if k in CHOICES and v not in CHOICES[k]}
            if extra:
                bad[(name, entry)] = sorted(extra)
    assert not bad, bad
    assert "untuned" in SWEEP and SWEEP["untuned"] == {}
    pub5 = _resolve(SWEEP["pub"], load_case(5), DEFAULTS)
    assert pub5["tune"] == "off" and pub5["attn_oproj"] is True  # case 5's published choice, untuned


def test_balance_report_shows_idle_programs():
    """``bench.seqres.balance``: case 7's 64-row groups have 4 LayerNorm blocks of 16 rows for 8 programs (half idle),
    8 blocks of 8 with ``block_m_ln: 8``; case 11's 64-row attention tiles (``attn_fill: false``) leave 8 of 16 idle."""
    from bench.seqres.balance import report
    nest = dict(gemm_loop="nested", block_n=64)
    assert "copy / LayerNorm row blocks 4/8: max 1, mean 0.50, 4 idle *" in report(7, nest)
    assert "copy / LayerNorm row blocks 8/8: max 1, mean 1.00;" in report(7, dict(nest, block_m_ln=8))
    assert "QKV tiles 18/8: max 3, mean 2.25 *" in report(7, nest)
    r11 = report(11, dict(nest, attn_fill=False, attn_oproj=True, ffn_fused=True, block_n_wide=64))
    assert "attention tiles 8/16: max 1, mean 0.50, 8 idle *" in r11 and "fused FFN items 16/16" in r11
    assert "oproj" not in r11  # attn_oproj: no oproj phase


def test_ptx_diff_normalises_names_and_compares_by_argument():
    """``ptx_diff`` (the proof that a change left the published binaries alone): line info, comments and the
    kernel's name are dropped, parameters are named after the kernel's arguments, and a parameter no instruction
    reads may be dropped from the comparison."""
    from bench.seqres.ptx_diff import drop_unread_params, normalise
    ptx = (".version 8.7\n// a comment\n.file 1 \"k.py\"\n.visible .entry _k(\n"
           "\t.param .u64 _k_param_0,\n\t.param .u64 _k_param_1,\n\t.param .u32 _k_param_2\n)\n{\n"
           "\t.loc 1 2 3\n\tld.param.b64 %rd1, [_k_param_0];\n\tld.param.b32 %r1, [_k_param_2];\n}\n")
    text = normalise(ptx, ["x_ptr", "dead_ptr", "n"])
    assert ".loc" not in text and "//" not in text and ".file" not in text and "_k" not in text
    assert "[param:x_ptr]" in text and "[param:n]" in text
    without = normalise(ptx.replace("\t.param .u64 _k_param_1,\n", "").replace("_k_param_2", "_k_param_1"),
                        ["x_ptr", "n"])
    assert text != without and drop_unread_params(text) == drop_unread_params(without)
