"""``kernels.dag.ws_kernel`` (the dag variant's ``form: ws``; GPU only to run) and its lab harness
``bench.dag.ws_dag``: the dag forward pass as one warp-specialized Gluon kernel.

On the CPU: the product's kernel compiles for sm_90a (through the harness's ``--compile``, which builds
``kernels.dag.ws_kernel.dag_ws_fwd``) on case 2's and case 12's meta with its protocol present (wgmma, TMA,
the release, the acquire, the proxy fences, the registers handed over), it refuses the tilings it does not run, and
the harness's checks (``kind_checks``, ``compare``, ``stall_report``) are right: on an emulated forward pass written
into today's buffers they pass, and each names the kind or stage that is broken."""
import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import yaml

from kernels import Unsupported, gate, load_case, make_input, make_weights, reference_forward
from kernels.dag import graph as G
from kernels.dag import host

from kernels.dag import ws_kernel as K

from bench.dag import ws_dag as W

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def compiled():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "bench.dag.ws_dag", "--compile"], capture_output=True, text=True,
                         env=env, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = [json.loads(ln) for ln in out.stdout.strip().splitlines() if ln.startswith("{")]
    return {r["case"]: r for r in recs}


def harness_compile(case: str, params=(), stages: int | None = None) -> dict:
    """The harness's ``--compile`` record of one case (``--param`` for each ``name=value`` of ``params``, ``--stages``
    when given), its subprocess outside the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "bench.dag.ws_dag", "--compile", "--cases", case]
    if stages is not None:
        cmd += ["--stages", str(stages)]
    for kv in params:
        cmd += ["--param", kv]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(ln) for ln in out.stdout.strip().splitlines() if ln.startswith("{")][0]


def test_the_lab_harness_runs_the_product_kernel():
    """The harness (``--compile`` and ``WsDag``) builds the product's kernel and runner, not a copy of them."""
    assert W.dag_ws_fwd is K.dag_ws_fwd and W.compile_for_sm90 is K.compile_for_sm90
    assert issubclass(W.WsDag, K.WsRunner) and W.DirectLaunch is K.DirectLaunch
    assert issubclass(K.WsUnsupported, Unsupported) and issubclass(K.WsUnsupported, ValueError)


@pytest.mark.parametrize("name", ["case02", "case12"])
def test_ws_kernel_compiles_for_sm90_with_its_protocol(compiled, name):
    """Three bf16 products per K step on wgmma (and two fp16 for FFN1's f16_w1), the attention's six products a key
    block, TMA loads, one acquire poll and one release site, the proxy fences on both sides of the generic stores,
    the split-K fp32 atomics, the workers' registers handed over; one CTA fits an H200 SM, no spills."""
    r = compiled[name]
    assert r["wgmma"] > 0 and r["wgmma"] % 4 == 0, r            # m64n64k16: four per 64-wide K step
    assert r["tma"] >= 8, r
    assert r["red_release"] >= 1 and r["ld_acquire"] >= 1, r
    assert r["fence_proxy"] >= 2, r                               # the loader's after the acquire, the signaller's
    assert r["f32_atomics"] > 0 and r["setmaxnreg"] > 0, r
    assert r["mbarrier_wait"] > 0 and r["mbarrier_arrive"] > 0, r
    assert r["warps"] == 8 and r["shared"] <= 232448, r           # 4 consumer warps + the workers' warpgroup
    assert r["spill_stores"] in (0, None), r
    # the bf16 splits convert two elements an instruction (PACK_HI): one cvt.rn.bf16.f32 an element for every hi
    # part was 288 scalar against 128 pairs on case 12; left scalar: the softmax's p_lo, which ptxas pairs itself
    assert r["cvt_bf16x2"] > 4 * r["cvt_bf16"] > 0, r
    assert r["mbarriers_in_scratch"] == [], r      # every mbarrier in memory of its own ("Results" 50)


@pytest.mark.parametrize("name", ["case02", "case12"])
def test_ws_kernel_wgmma_not_serialized_and_no_spills(compiled, name):
    """ptxas (``bench.common.sm90_report.ptxas_verbose`` on the kernel's PTX) neither serializes its wgmma nor spills.
    Notes C7514 / C7515 mean that ptxas found a non-wgmma instruction defining a wgmma accumulator inside a pipeline
    stage somewhere in the function and serialized EVERY wgmma of it; the draft had C7515 from its two GEMM K loops
    (bf16x3 and f16_w1, both in these cases' kernels) started from ``gl.zeros`` accumulators (their exits merged)."""
    r = compiled[name]
    assert {"bf16x3", "f16_w1"} <= set(r["schemes"]), r          # both GEMM bodies in one function
    assert r["registers"] is not None, r                          # ptxas ran
    assert r["wgmma_serialized"] is False and r["wgmma_notes"] == [], r
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r


BN128 = ("block_n_qkv=128", "block_n_o=128", "block_n_ffn1=128", "block_n_ffn2=128")


@pytest.fixture(scope="module")
def compiled_bn128():
    """Case 12 with 64 × 128 GEMM tiles and a 3-slot ring, through the harness's ``--compile`` (repeated --param)."""
    return harness_compile("12", BN128, 3)


def test_ws_kernel_compiles_with_128_wide_gemm_tiles(compiled_bn128, compiled):
    """block_n 128: the GEMM bodies' wgmma are m64n128k16 (bf16x3: 3 products, f16_w1: 2, each a peeled first K step
    and the loop: (3 + 2) x 2 x 4 k16 steps = 40), the attention's stay m64n64k16 (48), as many as at block_n 64; each
    weight tile goes as two 64-column TMA boxes; ptxas neither spills nor serializes; the shared memory is
    ``ws_shared_bytes`` (48 KB slots) and fits one CTA per SM."""
    r, r64 = compiled_bn128, compiled["case12"]
    assert r["wgmma_shapes"] == {"m64n128k16": 40, "m64n64k16": 48}, r
    assert r64["wgmma_shapes"] == {"m64n64k16": 88}, r64
    assert r["tma"] > r64["tma"], (r["tma"], r64["tma"])
    assert r["shared"] == K.ws_shared_bytes(3, 128) <= K.SHARED_LIMIT, r
    assert r64["shared"] == K.ws_shared_bytes(4, 64), r64
    assert r["registers"] is not None and r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    assert r["wgmma_serialized"] is False and r["wgmma_notes"] == [], r
    assert r["red_release"] >= 1 and r["ld_acquire"] >= 1 and r["fence_proxy"] >= 2 and r["f32_atomics"] > 0, r
    assert r["warps"] == 8, r


MIXED = ("block_n_qkv=64", "block_n_o=128", "block_n_ffn1=128", "block_n_ffn2=128")


def test_ws_kernel_compiles_with_qkv_narrower_than_the_other_gemms():
    """QKV at 64 beside 128-wide output projection and FFN (case 2's shorter chain task): the QKV body's wgmma are
    m64n64k16 (bf16x3: 3 products x 2 x 4 = 24, besides the attention's 48), the others' m64n128k16 (bf16x3 and
    FFN1's f16_w1: 40); the ring is 128 wide (``ws_shared_bytes(4, 128)``); no spills, no serialized wgmma."""
    r = harness_compile("2", MIXED + ("ctas_per_sm=1",))
    assert r["wgmma_shapes"] == {"m64n128k16": 40, "m64n64k16": 72}, r
    assert r["shared"] == K.ws_shared_bytes(4, 128) <= K.SHARED_LIMIT, r
    assert r["registers"] is not None and r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    assert r["wgmma_serialized"] is False and r["wgmma_notes"] == [], r


def test_ws_meta_and_descriptors_at_block_n_128():
    """One width for the four GEMM kinds: BLOCK_N 128 in the meta, the weight descriptors' boxes 64 × 128 over the
    [L * N / 128 * K, 128] view of the slabs (the A and q/k/v boxes stay 64 × 64)."""
    c = load_case("case12")
    bn = dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128)
    m = W.ws_meta(_meta(c, **bn), stages=3)
    assert (m["BLOCK_N"], m["STAGES"]) == (128, 3) and W.ws_meta(_meta(c))["BLOCK_N"] == 64
    assert W.ws_meta(_meta(c, **bn), stages=4)["STAGES"] == 4                  # 229764 bytes: fits
    with pytest.raises(W.WsUnsupported, match="block_n_o=64"):
        W.ws_meta(_meta(c, **dict(bn, block_n_o=64)), stages=3)                # mixed widths
    D, L = c.D, c.L
    fake = {f"{n}_ptr": torch.empty(1, D, dtype=torch.bfloat16) for n in ("ln1_hi", "ln1_lo", "att_hi", "att_lo",
                                                                          "ln2_hi", "ln2_lo")}
    fake.update({f"f_{q}_ptr": torch.empty(4, 1, D, dtype=torch.bfloat16) for q in ("hi", "lo")})
    fake.update({f"qkv_{q}_ptr": torch.empty(L, 3, 1, 1, 64, 64, dtype=torch.bfloat16) for q in ("hi", "lo")})
    for n, N, KK in (("wqkv", 3 * D, D), ("wo", D, D), ("w1", 4 * D, D), ("w2", D, 4 * D)):
        for q in ("hi", "lo"):
            fake[f"{n}_{q}_ptr"] = torch.empty(L, N // 128, KK, 128, dtype=torch.bfloat16)
    d = W.descriptors(fake)
    assert [x.block_shape for x in d[:8]] == [[64, 64]] * 8 and [x.block_shape for x in d[16:]] == [[64, 64]] * 2
    assert [x.block_shape for x in d[8:16]] == [[64, 128]] * 8
    assert d[8].shape == [L * 3 * D // 128 * D, 128] and d[14].shape == [L * D // 128 * 4 * D, 128]


def test_ws_params_block_n_and_ws_stages_are_checked_naming_them(monkeypatch):
    """``check_ws_params`` (prepare, form ws; before the device): block_n 64 or 128, the same for the output
    projection and the FFN (QKV's may differ); ws_stages that fit shared memory at the wider width (2-6 at 64, 2-4
    at 128; a smaller limit shows the message)."""
    from kernels.validate import ParameterError
    bn = dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128)
    ok = lambda **kw: K.check_ws_params(host.check_params(dict(form="ws", **kw)))   # noqa: E731
    for stages in (2, 3, 4):
        ok(**bn, ws_stages=stages)
    ok(ws_stages=4)
    for k in K.BLOCK_N_PARAMS:
        with pytest.raises(ParameterError, match=f"form ws needs {k} 64 or 128 .got 32.*set form: tl or {k}: 64"):
            ok(**{k: 32})
    with pytest.raises(ParameterError, match="form ws needs block_n_ffn1 128 .*got 64.*set form: tl or block_n_ffn1: "
                                             "128"):
        ok(**dict(bn, block_n_ffn1=64))
    ok(**dict(bn, block_n_qkv=64))                                             # QKV's may differ
    ok(block_n_qkv=128)
    assert K.max_ws_stages(64) == 6 and K.max_ws_stages(128) == 4
    ok(ws_stages=6)
    with pytest.raises(ParameterError, match=r"ws_stages=5 with block_n 128: .*set ws_stages: 4"):
        ok(**bn, ws_stages=5)
    monkeypatch.setattr(K, "SHARED_LIMIT", 200_000)                           # (a device with less shared memory)
    with pytest.raises(ParameterError, match=r"ws_stages=4 with block_n 128: 229764 bytes .*set ws_stages: 3"):
        ok(**bn, ws_stages=4)
    ok(**bn, ws_stages=3)
    with pytest.raises(ParameterError, match=r"ws_stages=4 with block_n 128"):   # the ring is the wider width
        ok(block_n_qkv=128, ws_stages=4)
    with pytest.raises(ParameterError, match="ws_stages=4"):
        host.prepare(load_case("smoke2"), make_weights(load_case("smoke2")), form="ws", **bn)
    with pytest.raises(W.WsUnsupported, match="ws_stages=4 with block_n 128"):
        W.ws_meta(_meta(load_case("case12"), **bn), stages=4)


def _meta(case, **params):
    o = host.check_params(params)
    t = host.tiling_for(case, o, 264)
    g = G.build(case, t, o["order"], 264)
    _, width = host.task_table(g, goals=o["wait"] == "parallel")
    return host.kernel_meta(case, t, g, o, 264, True, width)


def test_ws_meta_takes_todays_meta_and_refuses_what_the_kernel_does_not_run():
    c = load_case("case02")
    m = W.ws_meta(_meta(c))
    assert (m["D"], m["H"], m["STAGES"], m["GOALS_IN_ROW"], m["num_warps"]) == (1024, 16, 4, True, 4)
    assert m["SCHEME_FFN1"] == "f16_w1" and m["SCHEME_QKV"] == "bf16x3"
    assert m["FENCE_AT_SIGNAL"] is True                           # the release's proxy fence off the consumer's path
    assert m["LN_ROW_WARPS"] is True                              # a LayerNorm row's reductions within one warp
    assert m["PRE_W"] == 2 == host.DEFAULTS["ws_pre"]             # weight steps claimed before a GEMM task's wait
    with pytest.raises(W.WsUnsupported, match=r"ws_pre=5: 1 to ws_stages \(3\)"):
        W.ws_meta(_meta(c), stages=3, pre=5)                      # never more than the ring's slots
    assert W.ws_meta(_meta(c, wait="serial"))["GOALS_IN_ROW"] is False
    with pytest.raises(W.WsUnsupported, match="block_n_ffn2=128"):
        W.ws_meta(_meta(c, block_n_ffn2=128))                     # the output projection's and FFN's: one width
    m = W.ws_meta(_meta(c, block_n_qkv=128))                      # QKV's may differ: the ring is the wider
    assert (m["BLOCK_N_QKV"], m["BLOCK_N"], m["RING_N"]) == (128, 64, 128)
    m = W.ws_meta(_meta(c, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128))
    assert (m["BLOCK_N_QKV"], m["BLOCK_N"], m["RING_N"]) == (64, 128, 128)
    with pytest.raises(W.WsUnsupported, match="static"):
        W.ws_meta(_meta(c, queue="static"))
    with pytest.raises(W.WsUnsupported, match="ws_stages=7: 2 to 6"):
        W.ws_meta(_meta(c), stages=7)
    assert W.ws_meta(_meta(c), stages=6)["STAGES"] == 6                  # 64-wide slots: 6 fit
    with pytest.raises(W.WsUnsupported, match="ws_stages=5 with block_n 128"):
        W.ws_meta(_meta(c, block_n_qkv=128), stages=5)
    with pytest.raises(W.WsUnsupported, match="tiles are 64"):
        W.ws_meta(_meta(load_case("smoke2")))                     # 32-row blocks, head dim 32
    with pytest.raises(W.WsUnsupported, match="one CTA per SM"):
        W.check_supported(_meta(c), grid=264, n_sm=132)


def test_ws_ab_variants_split_parameters_from_constexpr_overrides():
    from bench.dag.ws_ab import parse_variant
    assert parse_variant("form=ws ctas_per_sm=1 split_k_o=2 @FENCE_AT_SIGNAL=0") == (
        dict(form="ws", ctas_per_sm=1, split_k_o=2), dict(FENCE_AT_SIGNAL=0))
    assert parse_variant("") == ({}, {})
    with pytest.raises(SystemExit, match="not name=value"):
        parse_variant("form")
    tuned = dict(form="ws", split_k_o=4, split_k_ffn2=4)
    assert parse_variant("tuned ws_pre=4 @LN_ROW_WARPS=0", tuned) == (
        dict(form="ws", split_k_o=4, split_k_ffn2=4, ws_pre=4), dict(LN_ROW_WARPS=0))
    assert parse_variant("tuned split_k_o=2", tuned)[0]["split_k_o"] == 2          # later pairs override
    with pytest.raises(SystemExit, match="'tuned' needs"):
        parse_variant("tuned")


def test_ws_ab_reads_the_committed_parameters_and_parses_every_case_before_the_gpu(monkeypatch):
    """``tuned`` is the case's committed dag block; a bad spec, or parameters ``prepare`` would refuse (case 2's
    128-wide tiles with 5 ring slots), fail before any device work (on this CPU machine the no-device exit comes only
    after every case's variants parsed); --margin without omegaconf is refused before it."""
    from bench.dag import ws_ab
    p = ws_ab.committed_params(load_case("case03"), "h200")
    with open(os.path.join(REPO, "config/tuned/h200/case03.yaml")) as f:
        assert p["form"] == "ws" and p == yaml.safe_load(f)["dag"]["params"]
    assert ws_ab.committed_params(load_case("case03"), "no-such-gpu") is None
    with pytest.raises(SystemExit, match="not name=value"):
        ws_ab.main(["--case", "3", "4", "--out", "unused", "--variant", "base", "tuned", "--variant", "b", "oops"])
    with pytest.raises(SystemExit, match="variant 'st5': dag: form ws: ws_stages=5 with block_n 128"):
        ws_ab.main(["--case", "2", "--out", "unused", "--variant", "base", "tuned",
                    "--variant", "st5", "tuned ws_stages=5"])
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device"):
        ws_ab.main(["--case", "3", "4", "--out", "unused", "--variant", "base", "tuned"])
    monkeypatch.setitem(sys.modules, "omegaconf", None)       # not installed: --margin refused before the GPU
    with pytest.raises(SystemExit, match="--margin needs omegaconf"):
        ws_ab.main(["--case", "3", "--out", "unused", "--margin", "8", "--variant", "base", "tuned"])


# --- the harness's checks, on an emulated forward pass ----------------------------------------------------------

def _split(v, scheme):
    """float64 -> the kernel's hi / lo parts (bf16 or fp16, round to nearest each), held in fp32 (CPU buffers)."""
    f = v.float()
    dt = torch.bfloat16 if scheme == "bf16x3" else torch.float16
    hi = f.to(dt).float()
    return hi, (f - hi).to(dt).float()


def _emulate(p, x):
    """The forward pass in float64 on the kernel's operands (every A operand split as its producer splits it, the
    prepared weight parts), written into today's buffers as the kernels leave them after a launch; returns y."""
    c, T = p.case, p.tensors
    B, S, D, H, L, dh = c.B, c.S, c.D, c.H, c.L, c.dh
    M = B * S
    sch = dict(ln1=p.meta["SCHEME_QKV"], att=p.meta["SCHEME_O"], ln2=p.meta["SCHEME_FFN1"], f=p.meta["SCHEME_FFN2"],
               qkv="bf16x3")

    def put(name, v, index=None):
        hi, lo = _split(v, sch[name])
        dst_hi, dst_lo = T[f"{name}_hi_ptr"], T[f"{name}_lo_ptr"]
        if index is not None:
            dst_hi, dst_lo = dst_hi[index], dst_lo[index]
        dst_hi.copy_(hi.reshape(dst_hi.shape))
        dst_lo.copy_(lo.reshape(dst_lo.shape))
        return hi.double() + lo.double()

    wq, wo, w1, w2 = (W._weight(p, "wqkv", 3 * D), W._weight(p, "wo", D), W._weight(p, "w1", 4 * D),
                      W._weight(p, "w2", D))
    r = x.double().reshape(M, D)
    for l in range(L):
        a = put("ln1", W._ln64(r, T["ln1w_ptr"][l].double(), T["ln1b_ptr"][l].double()))
        qkv = put("qkv", (a @ wq[l] + T["bqkv_ptr"][l].double()).reshape(B, S, 3, H, dh).permute(2, 0, 3, 1, 4), l)
        s = qkv[0] @ qkv[1].transpose(-1, -2) / math.sqrt(dh)
        if c.causal:
            s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        o = put("att", (torch.softmax(s, -1) @ qkv[2]).permute(0, 2, 1, 3).reshape(M, D))
        r = r + o @ wo[l] + T["bo_ptr"][l].double()
        a2 = put("ln2", W._ln64(r, T["ln2w_ptr"][l].double(), T["ln2b_ptr"][l].double()))
        h = a2 @ w1[l] + T["b1_ptr"][l].double()
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        f = put("f", h.reshape(M, 4, D).permute(1, 0, 2))          # [4, M, D]: column c in block c // D
        r = r + f.permute(1, 0, 2).reshape(M, 4 * D) @ w2[l] + T["b2_ptr"][l].double()
    T["r_ptr"].copy_(r.float())
    return W._ln64(T["r_ptr"].double(), T["lnfw_ptr"].double(), T["lnfb_ptr"].double()).float().reshape(B, S, D)


@pytest.fixture(scope="module")
def emulated():
    c = load_case("smoke2")
    w = make_weights(c)
    p = host.prepare(c, w, tune="off")
    x = make_input(c, 1.0, 0)
    y = _emulate(p, x)
    return c, w, p, x, y


def test_emulation_is_the_model(emulated):
    """The emulation (what the kind checks assume the buffers hold) passes the gate against the fp32 reference."""
    c, w, p, x, y = emulated
    assert gate(y, reference_forward(c, w, x)).passed


def test_kind_checks_pass_the_emulated_buffers_and_name_a_broken_kind(emulated):
    c, w, p, x, y = emulated
    ok = W.kind_checks(p, x, y)
    assert set(ok) == {"qkv", "attn", "ffn1", "lnf", "ffn2+ln2", "oproj+ln1"}
    assert all(r["ok"] and r["rel"] < 1e-4 for r in ok.values()), ok
    T = p.tensors
    saved = {k: T[k].clone() for k in ("att_hi_ptr", "qkv_hi_ptr", "f_hi_ptr")}
    try:
        T["att_hi_ptr"][:, :8] *= 1.01                               # attention output of one head's columns
        bad = W.kind_checks(p, x, y)
        assert not bad["attn"]["ok"] and bad["qkv"]["ok"] and bad["ffn1"]["ok"] and bad["ffn2+ln2"]["ok"], bad
        T["att_hi_ptr"].copy_(saved["att_hi_ptr"])
        T["qkv_hi_ptr"][c.L - 1, 1, 0, 0, 3] += 1.0                  # one key of the last layer
        bad = W.kind_checks(p, x, y)
        assert not bad["qkv"]["ok"] and not bad["attn"]["ok"] and bad["ffn1"]["ok"], bad
        T["qkv_hi_ptr"].copy_(saved["qkv_hi_ptr"])
        T["f_hi_ptr"][2].zero_()                                     # a missing FFN1 column block
        bad = W.kind_checks(p, x, y)
        assert not bad["ffn1"]["ok"] and not bad["ffn2+ln2"]["ok"] and bad["qkv"]["ok"], bad
        assert not W.kind_checks(p, x, y * 1.01)["lnf"]["ok"]
    finally:
        for k, v in saved.items():
            T[k].copy_(v)


def test_compare_and_zero_buffers(emulated):
    c, w, p, x, y = emulated
    a = W.snapshot(p)
    assert set(a) == {"r", "ln1", "att", "ln2", "f"} | {f"{q}[l{l}]" for l in range(c.L) for q in "qkv"}
    same = W.compare(a, a)
    assert all(r["ok"] and r["bitwise_equal"] == 1.0 for r in same.values())
    b = dict(a, ln2=a["ln2"] + 0.5)
    assert [k for k, r in W.compare(b, a).items() if not r["ok"]] == ["ln2"]
    W.zero_buffers(p)
    assert all(float(v.abs().max()) == 0 for v in W.buffer_values(p).values())
    assert float(p.tensors["ln1w_ptr"].abs().max()) > 0 and float(p.tensors["wqkv_hi_ptr"].abs().max()) > 0
    _emulate(p, x)  # (the module's other tests read the buffers)


def test_stall_report_names_the_stage_that_stopped():
    """A launch that hangs is reported by the counters below epoch x goal: here every counter of layer 1's attention
    stage and after it is short, so the report starts there and names the first task that waits for it."""
    c = load_case("smoke2")
    g = host.graph_for(c, n_programs=4)
    e, grid = 3, 4
    goals = torch.tensor(g.goals) * e
    first = min(i for i, n in enumerate(g.counter_names) if n[:2] == ("attn", 1))
    ctr = goals.clone()
    stop = {i for i, n in enumerate(g.counter_names) if n[0] != "dummy" and (n[1] > 1 or (n[1] == 1 and n[0] in (
        "attn", "o", "ln2", "f1", "f2")))}
    for i in stop:
        ctr[i] -= 1
    ws = SimpleNamespace(p=SimpleNamespace(graph=g), epoch=e, n_tasks=len(g.tasks), grid=grid)
    rep = W.stall_report(ws, ctr, (e - 1) * (len(g.tasks) + grid) + 17, torch.tensor([0, -1]))
    assert rep["tickets_taken"] == 17 and rep["incomplete_counters"] == len(stop)
    assert "attn[l1]" in rep["incomplete_by_stage"] and "qkv[l1]" not in rep["incomplete_by_stage"]
    assert rep["first_incomplete"][0]["counter"][:2] == ["attn", 1], rep["first_incomplete"][0]
    assert rep["first_incomplete"][0]["first_waiter"].startswith("oproj[l1]")
    assert first in {i for i in stop}


# --- the harness's plumbing (CPU stand-ins for the GPU parts) ---------------------------------------------------

def test_gate_all_runs_the_spec_scales_and_seeds(emulated):
    c, w, p, x, y = emulated
    refs: dict = {}
    g = W._gate_all(c, w, lambda xx: _emulate(p, xx), refs)
    assert g["passed"] and len(g["runs"]) == len(refs) == 14 and g["worst_over_tol"] < 1, g
    assert not W._gate_all(c, w, lambda xx: _emulate(p, xx) * 1.5, refs)["passed"]
    _emulate(p, x)


def test_profile_and_summary_of_records():
    c = load_case("smoke2")
    g = host.graph_for(c, n_programs=2)
    n = len(g.tasks)
    tr = torch.zeros(n, 5, dtype=torch.int64)
    for i in range(n):  # one program after the other: ticket, wait done, task done, program / SM, work done
        tr[i] = torch.tensor([1000 * i, 1000 * i + 100, 1000 * i + 900, (i % 2) << 16 | (i % 2), 1000 * i + 800])
    prof = W._profile(SimpleNamespace(graph=g), tr, 2)
    assert prof["grid"] == 2 and prof["sms"] == 2 and set(prof["kinds"]) == set(G.KINDS)
    assert abs(prof["kinds"]["qkv"]["work_mean"] - 0.8) < 1e-9 and abs(prof["kinds"]["qkv"]["signal_mean"] - 0.1) < 1e-9
    rec = dict(case="smoke2", form="ws", median_us=10.0, profile=prof, gate=dict(passed=True, worst_over_tol=0.5),
               kind_checks={"qkv": dict(rel=1e-7, ok=True)}, buffers_vs_tl={"r": dict(rel_to_max=2e-7, ok=True),
                                                                           "att": dict(rel_to_max=1e-6, ok=True)},
               stall=dict(tickets_taken=3, tickets_per_launch=9, waits_timed_out=0, incomplete_by_stage={}))
    s = W._summary(rec)
    assert s["gate_passed"] and s["worst_buffer"] == "att" and s["kind_rel"] == {"qkv": 1e-7}
    assert "profile" not in s and s["kernel_us_traced"] > 0 and s["stall"]["tickets_taken"] == 3
    json.dumps(s)


def test_run_child_collects_records_and_kills_a_stuck_case(tmp_path):
    ok = [sys.executable, "-c",
          "import json; print('hello'); print('@@REC ' + json.dumps({'case': 'c', 'form': 'ws'}))"]
    got, rc = W._run_child(ok, 60)
    assert rc == 0 and got == [{"case": "c", "form": "ws"}]
    got, rc = W._run_child([sys.executable, "-c", "import time; print('@@REC {}', flush=True); time.sleep(30)"], 2)
    assert got == [{}] and "killed" in str(rc)
    W._write(str(tmp_path), [{"a": 1}], dict(device="cpu"))
    assert json.loads((tmp_path / "ws_dag.json").read_text())["rows"] == [{"a": 1}]
    assert not list(tmp_path.glob(".*.tmp"))


# --- the direct launch (the JIT path's per-call work done once) --------------------------------------------------

@pytest.fixture(scope="module")
def compiled_case02():
    """The kernel compiled in this process for case 2's meta (Triton's cache: the ``compiled`` fixture's build) with
    the buffers' dtypes and shapes."""
    k, case, g, t, mw, dtypes, shapes = W.compile_case("2")
    return k, mw, dtypes, shapes


def test_direct_launch_passes_what_the_jit_path_passes(compiled_case02, monkeypatch):
    """``DirectLaunch``'s argument list is, item for item, what triton 3.6's ``CudaLauncher`` hands its C launcher
    on the JIT path (``wrap_handle_tensordesc`` expanding each descriptor by ``make_tensordesc_arg``, stubbed here:
    it needs the driver), and it fits the launcher's ``PyArg_ParseTuple`` format (``make_launcher``'s source)."""
    import re as _re
    import triton.backends.nvidia.driver as nvd
    k, mw, dtypes, shapes = compiled_case02
    fake = {f"{n}_ptr": torch.empty(shapes[n], dtype=dtypes[n]) for n in shapes}
    descs = W.descriptors(fake)
    md = k.metadata
    assert len(md.tensordesc_meta) == len(descs) == 18
    encode = lambda d, m: [("map", tuple(d.shape), m["swizzle"]), *d.shape, *d.strides]   # noqa: E731
    monkeypatch.setattr(nvd, "make_tensordesc_arg", encode)
    assert set(W.CONSTEXPRS) == set(mw) and list(W.CONSTEXPRS)[-1] == "num_warps"
    d = W.DirectLaunch(k, descs, [mw[n] for n in W.CONSTEXPRS], encode=encode, raw=lambda *a: None)
    ptrs = list(range(16, 16 * (len(W.POINTERS) + len(W.CONTROL)) + 1, 16))
    scalars = [6720, 3, 1000, 0.18]
    got = []
    signature = dict(k.src.signature)
    jit = nvd.wrap_handle_tensordesc(lambda *a: got.extend(a), signature, md.tensordesc_meta)
    assert W.unwrap_launcher(jit) is not None and W.unwrap_launcher(lambda: 0) is None
    jit(132, 1, 1, 7, k.function, md.launch_cooperative_grid, md.launch_pdl, None, None, k.packed_metadata, None,
        None, None, *descs, *ptrs, *scalars, *[mw[n] for n in W.CONSTEXPRS])
    assert got[4:] == d.args(ptrs, scalars)
    # the launcher's argument format (as CudaLauncher builds it): one item per argument, of the right kind
    names = list(W.dag_ws_fwd.arg_names)
    consts = {(names.index(n) if isinstance(n, str) else n[0],): v for n, v in k.src.constants.items()}
    src = nvd.make_launcher(consts, signature, md.tensordesc_meta)
    fmt = _re.search(r'PyArg_ParseTuple\(args, "([^"]+)"', src).group(1)
    assert len(fmt) == 4 + len(d.args(ptrs, scalars)), (len(fmt), len(got))
    for f, a in zip(fmt[4 + 9:], d.args(ptrs, scalars)[9:]):
        assert f == "O" or (f in "iIlLkK" and isinstance(a, int)) or (f in "fd" and isinstance(a, float)), (f, a)


def test_unwrap_launcher_finds_the_c_launch():
    import triton.backends.nvidia.driver as nvd

    def raw(*a):
        return a
    sig = {0: "tensordesc<bf16[64, 64]>", 1: "*fp32"}
    assert W.unwrap_launcher(nvd.wrap_handle_tensordesc(raw, sig, None)) is raw
    assert W.unwrap_launcher(nvd.wrap_handle_tensordesc(raw, {0: "*fp32"}, None)) is None   # no descriptor: raw


class _Dev:
    """A stand-in for a CUDA tensor: what ``WsDag.launch`` reads of x, y and the buffers."""
    is_cuda = True
    device = SimpleNamespace(index=0)

    def __init__(self, ptr, dtype=torch.float32):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self):
        return self.ptr


def test_ws_launch_goes_direct_after_the_first_with_the_jit_arguments(compiled_case02, monkeypatch):
    """``WsDag.launch``: the first launch through the JIT path (faked: its launcher records what it is handed, as
    triton's ``wrap_handle_tensordesc`` expands it), later ones through ``DirectLaunch`` with the same arguments (the
    scalars of their own launch); the JIT path for a misaligned x, with ``direct`` off or with a launch hook set;
    the pointers re-read when a buffer is replaced."""
    import triton
    import triton.backends.nvidia.driver as nvd
    k, mw, dtypes, shapes = compiled_case02
    encode = lambda d, m: [("map", tuple(d.shape)), *d.shape, *d.strides]   # noqa: E731
    monkeypatch.setattr(nvd, "make_tensordesc_arg", encode)
    monkeypatch.setattr(triton.runtime.driver, "_active", SimpleNamespace(get_current_stream=lambda dev: 77))
    calls = []
    wrapped = nvd.wrap_handle_tensordesc(lambda *a: calls.append(("launcher", list(a))), dict(k.src.signature),
                                         k.metadata.tensordesc_meta)
    fake_k = SimpleNamespace(metadata=k.metadata, function=4242, packed_metadata=k.packed_metadata,
                             run=SimpleNamespace(launch=wrapped))

    class Jit:
        def __getitem__(self, grid):
            def run(*args, **meta):
                assert meta == mw
                vals = [a.data_ptr() if isinstance(a, _Dev) else a for a in args]
                calls.append(("jit", None))
                wrapped(grid[0], 1, 1, 77, 4242, False, False, None, None, k.packed_metadata, None, None, None,
                        *vals, *[mw[n] for n in W.CONSTEXPRS])
                return fake_k
            return run
    monkeypatch.setattr(K, "dag_ws_fwd", Jit())     # (the runner, kernels.dag.ws_kernel.WsRunner, launches it)
    fake = {f"{n}_ptr": torch.empty(shapes[n], dtype=dtypes[n]) for n in shapes}
    ws = W.WsDag.__new__(W.WsDag)
    bufs = iter(range(1 << 20, 1 << 30, 1 << 12))
    ws.__dict__.update(grid=132, p=SimpleNamespace(qk_scale=0.125), qk_scale=0.125, meta=mw,
                       descs=W.descriptors(fake),
                       ptrs=[_Dev(next(bufs)) for _ in W.POINTERS[3:]], r=_Dev(next(bufs)), n_tasks=6720,
                       spin_limit=1000, epoch=0, epoch_limit=10**6, err_seen=0, kernel=None, direct=True,
                       direct_launch=None, direct_error=None, _xy_dtype=None, _dev=None, _stream=None, _ptr_vals=[],
                       **{n: _Dev(next(bufs)) for n in ("tab", "ctr", "goal", "head", "err", "trace")})
    x, y = _Dev(1 << 32), _Dev(1 << 33)
    ws.launch(x, y)
    assert [c[0] for c in calls] == ["jit", "launcher"] and ws.direct_launch is not None, ws.direct_error
    first = calls[-1][1]
    ws.launch(x, y, spin_limit=5)
    assert calls[-1][0] == "launcher" and len(calls) == 3                       # direct: no JIT call
    second = calls[-1][1]
    n_desc = len(ws.direct_launch.desc_args)
    scal = 13 + n_desc + len(W.POINTERS) + len(W.CONTROL)                        # n_tasks, epoch, spin_limit, scale
    assert second[:scal] == first[:scal] and second[scal + 4:] == first[scal + 4:]
    assert first[scal:scal + 4] == [6720, 1, 1000, 0.125] and second[scal:scal + 4] == [6720, 2, 5, 0.125]
    ws.launch(_Dev((1 << 32) + 4), y)                                             # misaligned x: the JIT path
    assert calls[-2][0] == "jit"
    ws.direct = False
    ws.launch(x, y)
    assert calls[-2][0] == "jit"
    ws.direct = True
    ws.launch(x, y)                                    # the control tensors' addresses, resolved once at the compile
    assert calls[-1][0] == "launcher" and calls[-1][1][13 + n_desc + len(W.POINTERS) + 1] == ws.ctr.ptr
    assert calls[-1][1][13 + n_desc + 2] == ws.r.ptr and calls[-1][1][13 + n_desc + len(W.POINTERS)] == ws.tab.ptr
    from triton import knobs
    hooks = knobs.HookChain()
    hooks.add(lambda md: None)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hooks)               # a profiler's hook: the JIT path
    ws.launch(x, y)
    assert calls[-2][0] == "jit"


def test_runner_compiles_without_a_launch_then_launches_direct(compiled_case02, monkeypatch):
    """``WsRunner.compile`` (``host.prepare_one`` of form ws on CUDA): the kernel built by ``warmup`` (no launch) on
    r standing in for x and y at epoch 1, loaded, its direct launch built; the first ``run`` then goes direct, with
    the control tensors the runner was given (host: the prepared ``ctr``, ``head``, ``err``, ``trace``)."""
    import triton
    import triton.backends.nvidia.driver as nvd
    k, mw, dtypes, shapes = compiled_case02
    monkeypatch.setattr(nvd, "make_tensordesc_arg", lambda d, m: [("map", tuple(d.shape)), *d.shape, *d.strides])
    monkeypatch.setattr(triton.runtime.driver, "_active", SimpleNamespace(get_current_stream=lambda dev: 77))
    launched, seen = [], []
    wrapped = nvd.wrap_handle_tensordesc(lambda *a: launched.append(list(a)), dict(k.src.signature),
                                         k.metadata.tensordesc_meta)
    fake_k = SimpleNamespace(metadata=k.metadata, function=4242, packed_metadata=k.packed_metadata,
                             run=SimpleNamespace(launch=wrapped), _init_handles=lambda: seen.append("loaded"))

    class Jit:
        def warmup(self, *args, grid, **meta):
            seen.append((args, grid, meta))
            return fake_k

        def __getitem__(self, grid):
            raise AssertionError("the JIT path: the runner was compiled")
    monkeypatch.setattr(K, "dag_ws_fwd", Jit())
    T = {f"{n}_ptr": torch.empty(shapes[n], dtype=dtypes[n]) for n in shapes}
    T.update({n: torch.empty(16) for n in K.POINTERS[2:] if n not in T})
    ctl = dict(ctr=torch.zeros(5, dtype=torch.int32), head=torch.zeros(1, dtype=torch.int32),
               err=torch.zeros(2, dtype=torch.int32), trace=torch.zeros(1, dtype=torch.int64))
    p = SimpleNamespace(tensors=T, tab=torch.zeros(4, dtype=torch.int32), goal=torch.zeros(5, dtype=torch.int32),
                        graph=SimpleNamespace(tasks=[None] * 6720), qk_scale=0.125)
    r = K.WsRunner(p, mw, 132, **ctl)
    assert r.launch_path().startswith("jit") and r.compile() is fake_k
    args, grid, meta = seen[0]
    assert seen[1] == "loaded" and grid == (132, ) and meta == mw
    assert args[18] is T["r_ptr"] and args[19] is T["r_ptr"] and list(args[-4:]) == [6720, 1, 1, 0.125]
    assert all(a is b for a, b in zip(args[-10:-4], [p.tab, ctl["ctr"], p.goal, ctl["head"], ctl["err"], ctl["trace"]]))
    assert r.launch_path() == "direct" and r.kernel is fake_k
    r.run(_Dev(1 << 32), _Dev(1 << 33), 3, 1000)
    n_desc = len(r.direct_launch.desc_args)
    got = launched[-1]
    scal = 13 + n_desc + len(K.POINTERS) + len(K.CONTROL)
    assert got[:4] == [132, 1, 1, 77] and got[scal:scal + 4] == [6720, 3, 1000, 0.125]
    assert got[13 + n_desc:13 + n_desc + 2] == [1 << 32, 1 << 33]
    assert got[13 + n_desc + len(K.POINTERS) + 1] == ctl["ctr"].data_ptr()


@pytest.fixture(scope="module")
def compiled_two():
    """``ws_consumers: 2`` through the harness's ``--compile``: case 2 at block_n 64 with 4 slots, case 12 at 128 with
    3 (4 do not fit beside the second consumer's q buffer and scratch)."""
    recs = {}
    for case, stages, extra in (("2", 4, ()), ("12", 3, BN128)):
        r = harness_compile(case, ("ws_consumers=2", *extra), stages)
        recs[r["case"]] = dict(r, stages=stages, block_n=128 if extra else 64)
    return recs


@pytest.mark.parametrize("name", ["case02", "case12"])
def test_two_consumers_compile_with_their_own_pipelines(compiled_two, compiled, name):
    """Two consumer warpgroups: every task body twice (twice the wgmma of one consumer), a release site per signaller,
    12 warps (consumer 1 a worker warpgroup, the loader and the two signallers padded to one), the shared memory
    ``ws_shared_bytes(stages, block_n, 2)`` within one CTA per SM; ptxas does not serialize the wgmma and spills at
    most a few bytes (the 1-warp partitions at 40 registers)."""
    r = compiled_two[name]
    one = compiled[name]
    assert r["warps"] == 12, r
    assert r["wgmma"] == 2 * one["wgmma"] and r["red_release"] == 2 * one["red_release"], (r, one)
    assert r["shared"] == K.ws_shared_bytes(r["stages"], r["block_n"], 2) <= K.SHARED_LIMIT, r
    assert r["wgmma_serialized"] is False and r["wgmma_notes"] == [], r
    assert r["spill_stores"] is not None and r["spill_stores"] <= 16, r
    assert r["mbarriers_in_scratch"] == [], r


def test_ws_consumers_is_checked_naming_it():
    """``ws_consumers`` 1 or 2; with two, 4 slots of 48 KB no longer fit: the error names ws_stages and the fix."""
    ok = lambda **kw: K.check_ws_params(host.check_params(dict(form="ws", **kw)))   # noqa: E731
    bn = {k: int(v) for k, v in (kv.split("=") for kv in BN128)}
    ok(ws_consumers=2)
    ok(ws_consumers=2, ws_stages=3, **bn)
    from kernels.validate import ParameterError
    with pytest.raises(ParameterError, match="ws_consumers=3"):
        ok(ws_consumers=3)
    with pytest.raises(ParameterError, match=r"ws_stages=4 with block_n 128 and 2 consumers: .*set ws_stages: 3"):
        ok(ws_consumers=2, ws_stages=4, **bn)
    assert K.max_ws_stages(64, 2) == 5 and K.max_ws_stages(128, 2) == 3
    assert K.ws_shared_bytes(4, 64, 2) == 197124 and K.ws_shared_bytes(3, 128, 2) == 213508


COOP = ("form=ws", "block_m=128", "ws_stages=3", "ws_consumers=2", "scheme_qkv=f16f8", "scheme_o=f16f8",
        "scheme_ffn2=f16f8", "split_k_o=2", "split_k_ffn2=2", "block_m_ln=8", "ln_chunk=4096", "ctas_per_sm=1")


def test_cooperative_consumers_compile_within_shared_memory():
    """The cooperative form (block_m 128 with two consumers, docs/dag-results.md "Results" 44) on case 12 with f16f8 on
    QKV, O and FFN2: 12 warps; shared memory 3 ring slots of 64 KB and no q buffers (q goes through the ring),
    ``ws_shared_bytes(3, 128, 2, 128)`` = 229892 within one CTA per SM; the f16f8 K loops' fp16 and fp8 wgmma
    (m64n128k16 f16, m64n128k32 e4m3) beside FFN1's f16_w1; ptxas does not serialize the wgmma."""
    r = harness_compile("12", BN128 + COOP, 3)
    assert r["warps"] == 12, r
    assert r["shared"] == K.ws_shared_bytes(3, 128, 2, 128) == 229892 <= K.SHARED_LIMIT, r
    assert r["wgmma_serialized"] is False and r["wgmma_notes"] == [], r
    assert r["spill_stores"] is not None and r["spill_stores"] <= 16, r
    assert r["red_release"] >= 1 and r["ld_acquire"] >= 1, r
    # no mbarrier in memory the allocator lent to a scratch (the unused q mbarriers were, docs/dag-results.md
    # "Results" 50: the odd fp32 elements of consumer 0's conversion scratch read back wrong one launch in thousands)
    assert r["mbarriers_in_scratch"] == [], r


def test_cooperative_consumers_are_checked_naming_the_fix():
    """block_m 128 runs on one consumer or two (the cooperative form, no q buffers: 3 slots of 64 KB fit at block_n
    128, 4 do not); the error names ws_stages and the number that fits."""
    ok = lambda **kw: K.check_ws_params(host.check_params(dict(form="ws", **kw)))   # noqa: E731
    bn = {k: int(v) for k, v in (kv.split("=") for kv in BN128)}
    ok(block_m=128, ws_consumers=2, ws_stages=3, **bn)
    ok(block_m=128, ws_consumers=1, ws_stages=3, **bn)
    from kernels.validate import ParameterError
    with pytest.raises(ParameterError, match=r"ws_stages=4 with block_n 128 and block_m 128 and 2 consumers: "
                                             r".*set ws_stages: 3"):
        ok(block_m=128, ws_consumers=2, ws_stages=4, **bn)
    assert K.max_ws_stages(128, 2, 128) == 3 and K.ws_shared_bytes(2, 128, 2, 128) == 164356
    # f16f8 on 128-row tiles: four accumulators a tile, so two consumers
    ok(block_m=128, ws_consumers=2, ws_stages=3, scheme_qkv="f16f8", **bn)
    with pytest.raises(ParameterError, match=r"scheme_o=f16f8 with block_m 128 needs two consumers.*"
                                             r"set ws_consumers: 2"):
        ok(block_m=128, ws_consumers=1, ws_stages=3, scheme_o="f16f8", **bn)


def _coop_meta(cid: str, stages: int = 3):
    params = {k: (int(v) if v.isdigit() else v) for k, v in (kv.split("=") for kv in BN128 + COOP)}
    params["ws_stages"] = stages
    case, o = load_case(cid), host.check_params(params)
    t = host.tiling_for(case, o, 132)
    g = G.build(case, t, o["order"], 132)
    _, width = host.task_table(g, goals=o["wait"] == "parallel")
    return host.kernel_meta(case, t, g, o, 132, True, width)


@pytest.mark.parametrize("cid, nkv", [("2", 1), ("3", 2), ("4", 1)])
def test_cooperative_consumers_are_refused_where_the_ring_model_fails(cid, nkv):
    """The cooperative form where an attention task has at most ws_stages key blocks (causal cases: 1; case 3: S 128,
    2) is refused naming the fix: there ``bench.dag.ring_model`` finds a consumer passing a ring slot's ready barrier
    two phases behind. Case 12 (4 key blocks, 3 slots) is where the model finds none, and it stays allowed."""
    with pytest.raises(Unsupported, match=rf"cooperative consumers .* ws_stages=3 on attention tasks of {nkv} key "
                                          r"block.*read a slot still being filled.*"
                                          r"Set block_m: 64 and ws_consumers: 1"):
        K.ws_meta(_coop_meta(cid), stages=3, consumers=2)
    assert K.ws_meta(_coop_meta("12"), stages=3, consumers=2)["CONSUMERS"] == 2
    assert K.ws_meta(_coop_meta(cid), stages=3, consumers=1)["CONSUMERS"] == 1   # the 128-row tiles on one consumer


def test_ring_model_finds_the_skipped_attention_hole_and_the_fix_closes_it():
    """``bench.dag.ring_model``: with 3 ring slots, attention tasks of 2 key blocks make some schedules pass a ready
    barrier on another step's bytes, 4 key blocks (case 12) none; with the skipping consumer waiting and freeing
    each step for itself (the candidate fix) none at 2 either."""
    from bench.dag import ring_model as R
    bad, first = R.scan(3, 2, 40)
    assert bad > 0 and "passes ready for step" in first, (bad, first)
    assert R.scan(3, 4, 40) == (0, None)
    assert R.scan(3, 2, 40, skipper_waits=True) == (0, None)


def test_consumer_profile_splits_busy_from_waiting():
    """``bench.dag.ws_dag.consumer_profile`` on a hand-made trace (ns): program 0 runs task 0 from 0 to 100, task 1's
    dependencies are met at 150 (the consumer waits 50), it is done at 250; program 1 runs task 2 (ready at 10, done
    at 250). Consumer time 100 + 100 + 240 over 2 programs x 250 ns; 25 ns of dependency wait per program."""
    trace = torch.tensor([[0, 0, 110, 0 << 16, 100],
                          [5, 150, 260, 0 << 16, 250],
                          [0, 10, 255, (1 << 16) | 1, 250]], dtype=torch.int64)
    r = W.consumer_profile(trace, ["qkv", "ln1", "qkv"])
    assert r["programs"] == 2 and r["kernel_us"] == pytest.approx(0.25)
    assert r["busy"] == pytest.approx(440 / 500) and r["idle_dep_us"] == pytest.approx(0.025)
    assert r["kinds"]["qkv"] == dict(n=2, consumer_mean_us=0.17, consumer_total_us=0.3)
    assert r["kinds"]["ln1"]["consumer_mean_us"] == 0.1


def test_link_profile_splits_release_from_poll():
    """``bench.dag.ws_dag.link_profile`` on a hand-made trace (ns): task 2 waits for tasks 0 and 1; task 1 (done at
    300, released at 700) is the later release, task 2's loader held its ticket from 100 and saw its counters at 1000:
    release 0.4 µs, poll 0.3 µs. Task 3 waits for task 0 (done 100, released 300) but took its ticket at 400: its
    release counts, its poll does not (the loader was elsewhere)."""
    trace = torch.tensor([[0, 0, 300, 0, 100],
                          [0, 50, 700, 1 << 16, 300],
                          [100, 1000, 1500, 0, 1400],
                          [400, 450, 900, 1 << 16, 800]], dtype=torch.int64)
    r = W.link_profile(trace, [[], [], [0, 1], [0]], ["ln1", "qkv", "attn", "attn"])
    assert r["release"] == dict(n=2, mean_us=0.3, median_us=0.3)
    assert r["poll"] == dict(n=1, mean_us=0.3, median_us=0.3)
    assert r["kinds"]["qkv"]["release"]["mean_us"] == 0.4 and r["kinds"]["ln1"]["poll"]["n"] == 0



def test_phase_profile_splits_a_task_into_its_phases():
    """``bench.dag.ws_dag.phase_profile`` on a hand-made 8-column trace (ns). Task 0 (qkv): the consumer took it at
    100, its counters completed at 300 (so it waited 0.2 µs), its K loop ended at 1300, its work at 1500; the
    signaller took it at 1600 and released at 2100. Task 1 (ln1, no K loop stamp) waits for task 0; its loader took
    the ticket at 2400, after task 0's release (a late loader, 0.3 µs), and it ran from 2500 to 3000."""
    trace = torch.tensor([[0, 300, 2100, 0, 1500, 100, 1300, 1600],
                          [2400, 2500, 3400, 0, 3000, 2450, 0, 3100]], dtype=torch.int64)
    r = W.phase_profile(trace, [[], [0]], ["qkv", "ln1"])
    q, ln = r["kinds"]["qkv"], r["kinds"]["ln1"]
    assert (q["start"], q["body"], q["loop"], q["epilogue"], q["handoff"], q["fence"]) == (0.2, 1.2, 1.0, 0.2, 0.1, 0.5)
    assert (ln["start"], ln["body"], ln["handoff"], ln["fence"], ln["n"]) == (0.05, 0.5, 0.1, 0.3, 1)
    assert "loop" not in ln
    assert r["late_loader"] == dict(share=1.0, mean_us=0.3)
    with pytest.raises(ValueError, match="8-column"):
        W.phase_profile(trace[:, :5], [[], [0]], ["qkv", "ln1"])


def test_idle_profile_splits_idle_time_by_whether_work_was_ready():
    """``bench.dag.ws_dag.idle_profile`` on a hand-made trace (ns): program 0 runs task 0 over [0, 1000) and releases
    it at 1100; program 1 runs task 1 over [0, 2000), then task 2 (task 0's dependant), whose ticket it takes only at
    2000, over [2000, 3000). Program 0 is idle from 1000 to 3000; task 2 is ready from 1100 (no lag) and unticketed
    until 2000, so 0.9 µs of that idle time had ready work (of 6 µs of capacity: 0.15) and 1.1 µs had none."""
    P1 = 1 << 16
    trace = torch.tensor([[0, 0, 1100, 0, 1000, 0, 0, 0],
                          [0, 0, 2100, P1, 2000, 0, 0, 0],
                          [2000, 2000, 3100, P1, 3000, 0, 0, 0]], dtype=torch.int64)
    r = W.idle_profile(trace, [[], [], [0]], lag_us=0.0, bin_us=0.1)
    assert (r["busy"], r["idle"], r["idle_with_ready"]) == (0.667, 0.333, 0.15)
    assert (r["idle_with_ready_unticketed"], r["idle_with_ready_ticketed"],
            r["idle_nothing_ready"]) == (0.15, 0.0, 0.183)
    assert r["ready_mean"] == 0.3
    late = W.idle_profile(trace, [[], [], [0]], lag_us=1.0, bin_us=0.1)   # ready only from 2100: after its start
    assert late["idle_with_ready"] == 0.0 and late["idle_nothing_ready"] == 0.333


_TOGGLE_PROBE = """
import json, re, sys
from bench.dag import ws_dag as W
name, pattern = sys.argv[1], sys.argv[2]
orig = W.ws_meta
out = {}
for on in (True, False):
    def meta(*a, _on=on, **k):
        m = orig(*a, **k)
        out["default"] = m[name]
        m[name] = _on
        return m
    W.ws_meta = meta
    ptx = W.compile_case("4", params=dict(form="ws", ctas_per_sm=1, split_k_o=2))[0].asm["ptx"]
    out[str(on)] = dict(count=len(re.findall(pattern, ptx)), **W._ptxas(ptx))
print(json.dumps(out))
"""


def _toggled(name: str, pattern: str) -> tuple[int, int]:
    """Case 4's kernel compiled for sm_90a with the boolean constexpr ``name`` on and off (in a process without
    ``TRITON_INTERPRET``): the count of ``pattern`` in its PTX each way. Asserts the default is on and neither way
    spills or serializes the wgmma."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", _TOGGLE_PROBE, name, pattern], capture_output=True, text=True,
                         env=env, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["default"] is True
    for k in ("True", "False"):
        assert r[k].get("spill_stores") in (0, None) and r[k].get("wgmma_serialized") in (False, None), r
    return r["True"]["count"], r["False"]["count"]


def test_packed_hand_over_slots_need_no_cross_lane_reductions():
    """``PACKED_HANDOFF`` (the default): every thread reads a hand-over slot whole, so taking its words out needs no
    shuffles; with a word a lane (the lab's ``@PACKED_HANDOFF=0``) each word is a reduction across the lanes. Case 4's
    kernel both ways: fewer ``shfl.sync`` with the slots packed, no spills, no serialized wgmma."""
    on, off = _toggled("PACKED_HANDOFF", r"\bshfl\.sync")
    assert on < off, (on, off)


def test_layernorm_rows_one_a_warp_reduce_without_cta_barriers():
    """``LN_ROW_WARPS`` (the default): a LayerNorm task's rows one a warp, so a row's mean and variance are
    reductions within its warp; with a row across the warps (``@LN_ROW_WARPS=0``) each reduction goes through shared
    memory and CTA barriers. Case 4's kernel both ways: fewer ``bar.sync``, no spills, no serialized wgmma."""
    on, off = _toggled("LN_ROW_WARPS", r"\bbar\.sync")
    assert on < off, (on, off)


I8 = ("form=ws", "scheme_qkv=i8x2cb128", "scheme_ffn1=i8x2cb128")


def test_int8_limb_scheme_compiles_on_qkv_and_ffn1():
    """``i8x2cb128`` on QKV and FFN1 (case 3's tuned 6-slot ring at block_n 64): each K step 128 deep, three int8
    wgmma (m64n64k32 s8 · s8 → s32; 3 products x 4 k32 steps = 12 for each of the two kinds' bodies, or one body when
    both kinds share it) beside the other GEMMs' bf16 and the attention's; A's two limb boxes and the row-scale box
    by TMA; shared memory a 256-byte scale row a slot more (``ws_shared_bytes(..., i8=True)``), within one CTA per
    SM; ptxas neither spills nor serializes the wgmma."""
    r = harness_compile("3", I8, 6)
    assert r["schemes"] == ["i8x2cb128", "bf16x3", "i8x2cb128", "bf16x3"], r
    assert r["i8_wgmma"] == 12 and r["wgmma_shapes"] == {"m64n64k16": 72}, r
    assert r["shared"] == K.ws_shared_bytes(6, 64, i8=True) == K.ws_shared_bytes(6, 64) + 6 * 256, r
    assert r["shared"] <= K.SHARED_LIMIT, r
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    assert r["wgmma_serialized"] is False and r["wgmma_notes"] == [], r
    assert r["mbarriers_in_scratch"] == [], r


def test_int8_limb_scheme_is_refused_where_it_cannot_run():
    """``i8x2cb128`` needs A's block scales from a producer that holds whole rows (the LayerNorm tasks: QKV's and
    FFN1's A), one consumer on 64-row tiles, form ws and D a multiple of 128: each refusal names the fix."""
    from kernels.validate import ParameterError
    chk = lambda **kw: host.check_params(dict(dict(form="ws"), **kw))   # noqa: E731
    chk(scheme_qkv="i8x2cb128", scheme_ffn1="i8x2cb128")
    for bad in (dict(scheme_o="i8x2cb128"), dict(scheme_ffn2="i8x2cb128"), dict(scheme_qkv="i8x2cb128", form="tl"),
                dict(scheme_ffn1="i8x2cb128", block_m=128), dict(scheme_qkv="i8x2cb128", ws_consumers=2)):
        with pytest.raises(ParameterError, match=r"i8x2cb128 runs on form ws with block_m 64 and one consumer.*set"):
            chk(**bad)
    case = SimpleNamespace(tokens=256, D=576, L=1, S=256, name="d576")
    t = SimpleNamespace(scheme_qkv="i8x2cb128", scheme_ffn1="f16_w1", block_m=64)
    with pytest.raises(Unsupported, match="D=576 is not a multiple of 128.*scheme_qkv / scheme_ffn1: bf16x3"):
        host.check_envelope(case, t)
    # the scale rows fit beside the widest rings that fit without them
    assert K.max_ws_stages(64, i8=True) == 6 and K.max_ws_stages(128, i8=True) == 4


def test_int8_limb_weights_and_buffers():
    """``host._i8_weight``: the limbs of each column's 128-deep K blocks as K-major int8 [bn, 128] tiles, l0 in
    [-127, 127], l1 in [-64, 63], and (128 · l0 + l1) · scale within half a step of the weight (and the fp32
    rounding of the scale; the scale the block's largest |w| over I8_Q, as ``split.i8_limbs``); the A buffers are the [M, 2D] limbs and the [D / 128, M] scales,
    whose TMA boxes are [64, 128] int8 (128-byte swizzle, as a bf16 box's rows) and [1, 64] fp32 (unswizzled)."""
    from kernels.common.split import I8_Q
    torch.manual_seed(0)
    L, nb, Kd, bn = 2, 3, 256, 64
    w = torch.randn(L, nb, Kd, bn) * torch.logspace(-2, 2, Kd)[None, None, :, None]
    hi, lo, s = host._i8_weight(w)
    assert hi.shape == lo.shape == (L, nb, Kd // 128, bn, 128) and hi.dtype == lo.dtype == torch.int8
    assert s.shape == (L, Kd // 128, nb * bn) and s.dtype == torch.float32
    assert hi.abs().max() <= 127 and lo.min() >= -64 and lo.max() <= 63
    q = (128 * hi.double() + lo.double()).transpose(3, 4).reshape(L, nb, Kd, bn)   # back to [L, nb, K, bn]
    sc = s.double().reshape(L, Kd // 128, nb, bn).permute(0, 2, 1, 3).repeat_interleave(128, 2)
    assert ((q * sc - w.double()).abs() <= sc * (0.5 + I8_Q * 2.0 ** -23)).all()   # (the scale stored in fp32)
    top = w.abs().reshape(L, nb, Kd // 128, 128, bn).amax(3)
    assert torch.allclose(s.double().reshape(L, Kd // 128, nb, bn).permute(0, 2, 1, 3), top.double() / I8_Q,
                          rtol=1e-6)
    assert host._part_shape((512, 768), "i8x2cb128", True, "hi") == (512, 1536)
    assert host._part_shape((512, 768), "i8x2cb128", True, "lo") == (6, 512)
    assert host._part_dtype("i8x2cb128", True, "lo") == torch.float32
    assert host._part_dtype("i8x2cb128", True, "lo", slab=True) == torch.int8
    d = K.descriptors(dict(
        {f"{n}_{p}_ptr": torch.empty(64, 64, dtype=torch.bfloat16) for n in K.A_BUFS + K.W_BUFS + ("qkv",)
         for p in ("hi", "lo")},
        ln1_hi_ptr=torch.empty(128, 1536, dtype=torch.int8), ln1_lo_ptr=torch.empty(6, 128),
        wqkv_hi_ptr=torch.empty(1, 36, 6, 64, 128, dtype=torch.int8),
        wqkv_lo_ptr=torch.empty(1, 36, 6, 64, 128, dtype=torch.int8)))
    assert d[0].block_shape == [64, 128] and d[0].layout.swizzle_byte_width == 128
    assert d[1].block_shape == [1, 64] and d[1].layout.swizzle_byte_width == 0
    assert d[8].block_shape == d[9].block_shape == [64, 128]


def _i8_rows_as_the_ln_task_stores_them(y: torch.Tensor):
    """``ws_kernel._store_i8`` in torch (fp32, its operations in its order): [M, 2D] int8 limbs (per 128 columns l0,
    then l1) and [D / 128, M] fp32 scales of LayerNorm rows ``y`` [M, D]."""
    from kernels.common.split import I8_Q
    M, D = y.shape
    blk = y.reshape(M, D // 128, 128)
    mx = blk.abs().amax(2)
    mx = torch.where(mx > 0, mx, torch.ones_like(mx))
    inv = (I8_Q / mx)[:, :, None]
    q = torch.round(blk * inv).clamp(-I8_Q, I8_Q).to(torch.int32)   # cvt.rni: half to even, as torch.round
    l0 = (q + 64) >> 7
    l1 = q - l0 * 128
    limbs = torch.stack([l0, l1], 2).reshape(M, 2 * D).to(torch.int8)
    return limbs, (mx / I8_Q).t().contiguous()


@pytest.mark.parametrize("bn", [64, 128])
def test_int8_limb_gemm_read_as_the_kernel_reads_it(bn):
    """The ``i8x2cb128`` GEMM emulated on the CPU from the tensors ``prepare`` builds, each operand taken at the
    coordinates the kernel's TMA boxes use (``_gemm_geom``'s weight row, ``_load_w``'s K-major limb tiles, A's two
    limb boxes and its scale box, the column scales at ``sw_ptr``) and folded per 128-deep step as
    ``_gemm_mma_i8`` does (three products, hh · 2^14 + mix · 2^7, times the row and column scales): it agrees with the
    float64 product to the scheme's quantization error (a few 1e-4 of the largest term), so a box, a layout or a
    scale read from the wrong place fails."""
    torch.manual_seed(1)
    L, M, D, N = 2, 128, 384, 3 * 384
    y = torch.randn(M, D) * torch.logspace(-1, 1, D)        # LayerNorm rows (QKV's A)
    wt = torch.randn(L, N, D) / D ** 0.5                      # the layers' W [N, K]
    slabs = wt.transpose(1, 2).reshape(L, D, N // bn, bn).permute(0, 2, 1, 3).contiguous()   # host._slabs
    hi, lo, sw = host._i8_weight(slabs)
    a8, sa = _i8_rows_as_the_ln_task_stores_them(y)
    w0v, w1v = hi.reshape(-1, 128), lo.reshape(-1, 128)     # the descriptors' 2D views
    swf = sw.reshape(-1)
    nt, steps = N // bn, D // 128
    for l in range(L):
        out = torch.zeros(M, N, dtype=torch.float64)
        for m in range(M // 64):
            row0 = m * 64
            for n in range(nt):
                col0 = n * bn
                wrow = (l * nt + n) * D                       # _gemm_geom (k0 = 0)
                acc = torch.zeros(64, bn, dtype=torch.float64)
                for kk in range(steps):
                    r8 = ((wrow + kk * 128) // 128) * bn      # _load_w
                    w0 = w0v[r8:r8 + bn].long().t()           # K-major tile, read transposed
                    w1 = w1v[r8:r8 + bn].long().t()
                    k = kk * 128
                    a0 = a8[row0:row0 + 64, 2 * k:2 * k + 128].long()
                    a1 = a8[row0:row0 + 64, 2 * k + 128:2 * k + 256].long()
                    s_a = sa[k // 128, row0:row0 + 64].double()
                    s_w = swf[l * steps * N + col0 + kk * N:][:bn].double()
                    hh, mix = a0 @ w0, a0 @ w1 + a1 @ w0
                    acc += (hh * 16384.0 + mix * 128.0) * s_a[:, None] * s_w[None, :]
                out[row0:row0 + 64, col0:col0 + bn] = acc
        ref = y.double() @ wt[l].double().t()
        scale = (y.double().abs() @ wt[l].double().abs().t())
        err = ((out - ref).abs() / scale).max().item()
        assert err < 3e-4, (l, err)
