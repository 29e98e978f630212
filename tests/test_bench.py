"""The seqres measurement probes that run without a GPU (docs/seqres.md, session 8).

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

from kernels import load_case, make_input, make_weights
from kernels.gate import gate
from kernels.reference import reference_forward
from bench.seqres import gemm_probe, precision_probe
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
        # the epilogue forms (session 14): the overlapped one runs its epilogue between the next step's wgmma and
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


def test_acc_reset_select_keeps_wgmma_asynchronous():
    """``acc_reset`` (session 13): with the flat GEMM loop's accumulator reset in the epilogue branch (``branch``, the
    default) ptxas serializes every wgmma of the kernel (its C7514 note); zeroed by a select at a tile's first K step
    (``select``) it keeps them in flight (docs/seqres.md measures both). Case 1's defaults are the flat loop; compiled
    for sm_90a without a GPU, in a subprocess without the interpreter."""
    code = ("from bench.seqres.aot_check import compile_case, ptxas_info, wgmma_serialized\n"
            "from kernels.cases import load_case\n"
            "for ars in ('select', 'branch'):\n"
            "    k, _, meta = compile_case(load_case(1), {'acc_reset': ars, 'wgmma_chain': 'wait'})\n"
            "    print(ars, meta['FLAT'], meta['NEST'], wgmma_serialized(ptxas_info(k.asm['ptx'], 90)))")
    out = _run_compiled(["-c", code], timeout=900)
    rows = {r.split()[0]: r.split()[1:] for r in out.strip().splitlines()}
    assert rows["select"] == ["1", "False", "False"], out
    assert rows["branch"] == ["1", "False", "True"], out


def test_sass_regions_sums_samples_by_instruction_class(tmp_path):
    """``sass_regions`` reads ncu's source page (CSV, optionally gzipped) and charges each instruction's samples to
    its class; the 'barrier' reason outside the wgmma waits is reported as time held at CTA barriers."""
    import gzip

    from kernels.seqres import sass_regions
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


def test_acc_reset_flag_and_async_chain_compile_for_sm90():
    """``acc_reset: flag`` (session 15): the branch form's source compiled with Triton's OptimizeAccumulatorInit pass
    added to the sm_90 pipeline: the flat loop's first dot of a step takes the zero-accumulator predicate (a fourth
    operand in the TTGIR), and ptxas no longer serializes the wgmma; ``wgmma_chain: async`` relaxes the waits between
    a step's chained dots (``wgmma.wait_group`` 1 and 2 in the PTX), ``overlap`` also the step's last wait (3). Case 1's defaults, compiled for sm_90a without a
    GPU, in a subprocess without the interpreter."""
    code = ("import re\n"
            "from bench.seqres.aot_check import compile_case, ptxas_info, wgmma_serialized\n"
            "from kernels.cases import load_case\n"
            "for ars, wch in (('flag', 'wait'), ('flag', 'async'), ('branch', 'async'), ('flag', 'overlap')):\n"
            "    k, _, meta = compile_case(load_case(1), {'acc_reset': ars, 'wgmma_chain': wch})\n"
            "    dots = re.findall(r'ttng.warp_group_dot (%[^{]*)\\{', k.asm['ttgir'])\n"
            "    pred = sum(d.count(',') == 3 and not d.rstrip().endswith('%false') for d in dots)\n"
            "    relaxed = len(re.findall(r'wgmma.wait_group.sync.aligned [12];', k.asm['ptx']))\n"
            "    print(ars, wch, meta['ARS'], meta['WCH'], pred, relaxed > 0,\n"
            "          wgmma_serialized(ptxas_info(k.asm['ptx'], 90)),\n"
            "          'wgmma.wait_group.sync.aligned 3;' in k.asm['ptx'])")
    out = _run_compiled(["-c", code], timeout=900)
    rows = {tuple(r.split()[:2]): r.split()[2:] for r in out.strip().splitlines()}
    # the 4 GEMM phases' flat loops take the predicate; the chains are relaxed only with async
    assert rows[("flag", "wait")] == ["2", "0", "4", "False", "False", "False"], out
    assert rows[("flag", "async")] == ["2", "1", "4", "True", "False", "False"], out
    # overlap: the 4 flat loops' last waits leave the step's 3 dots in flight (wait_group 3)
    assert rows[("flag", "overlap")] == ["2", "2", "4", "True", "False", "True"], out
    # without the pass the branch form stays serialized; its flat-loop chains end in no wait, so are not relaxed
    assert rows[("branch", "async")][:3] == ["0", "1", "0"] and rows[("branch", "async")][4] == "True", out
