"""Tests of the hybrid family (kernels/hybrid): every Triton kernel against torch, on smoke3 shapes and on an
odd shape (S not a multiple of the block, D = 384), and the variant against the gate on smoke3.

On a machine without a GPU the kernels run in the Triton interpreter, which has no bf16: the split parts
are held in fp32 tensors, so the CPU reproduces the GPU's bf16 products exactly (see split_layout.py).
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton/kernels are imported

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
import yaml

from kernels import gate, get_variant, load_case, make_input, make_weights, reference_forward
from kernels.cases import config_dir
from kernels.hybrid.act_split import act_split
from kernels.hybrid.attention import attention
from kernels.hybrid.gemm import linear, prepare_linear
from kernels.hybrid.layernorm_split import ln_split
from kernels.hybrid.model import layer_settings, prepare
from kernels.hybrid.qkv_split import LOG2E, qkv_split
from kernels.hybrid.split_layout import TAIL, bf16_round, split_width
from workflow.stages.correctness import check_variant

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SMOKE3 = load_case("smoke3")  # B=1 S=128 D=64 H=2 L=1 causal
from conftest import GATE, SCALES, SEEDS  # noqa: E402


def _unsplit(s: torch.Tensor, K: int):
    """split layout [M, 3K+TAIL] -> (hi, hi2, lo, tail) as fp32."""
    s = s.float()
    return s[:, :K], s[:, K:2 * K], s[:, 2 * K:3 * K], s[:, 3 * K:]


def _check_split(s: torch.Tensor, ref: torch.Tensor, atol: float = 1e-6):
    """The split layout holds hi = bf16(ref) twice, lo = bf16(ref - hi), and the [1, 1, 0...] tail."""
    K = ref.shape[1]
    assert s.shape == (ref.shape[0], split_width(K))
    hi, hi2, lo, tail = _unsplit(s, K)
    assert torch.equal(hi, hi2)
    r = ref.to(s.device).float()
    torch.testing.assert_close(hi + lo, r, atol=atol, rtol=2 ** -15)
    assert (hi - bf16_round(r)).abs().max() <= (2 ** -8) * r.abs().max()  # hi is a bf16 rounding of ref
    assert torch.equal(tail, torch.tensor([1.0, 1.0] + [0.0] * (TAIL - 2), device=s.device).expand_as(tail))


# --- LayerNorm (+ residual) + split ------------------------------------------------------------------

@pytest.mark.parametrize("M,D", [(128, 64), (37, 384)])
@pytest.mark.parametrize("split", [True, False])
def test_ln_split_matches_torch(M, D, split):
    g = torch.Generator().manual_seed(M + D)
    x = torch.randn(M, D, generator=g).to(DEV) * 3
    y = torch.randn(M, D, generator=g).to(DEV)
    w = (1 + 0.1 * torch.randn(D, generator=g)).to(DEV)
    b = (0.1 * torch.randn(D, generator=g)).to(DEV)
    x0 = x.clone()
    out, x_new = ln_split(x, w, b, y=y, split=split, write_x=True)
    ref = F.layer_norm(x0 + y, (D,), w, b, 1e-5)
    assert torch.equal(x, x0), "the input must not be written"
    torch.testing.assert_close(x_new, x0 + y, atol=0, rtol=0)
    if split:
        _check_split(out, ref)
    else:
        torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)


def test_ln_split_without_residual():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 64, generator=g).to(DEV) * 1e-3  # var < eps: eps matters
    w, b = torch.ones(64, device=DEV), torch.zeros(64, device=DEV)
    out, x_new = ln_split(x, w, b, split=False)
    assert x_new is None
    torch.testing.assert_close(out, F.layer_norm(x, (64,), w, b, 1e-5), atol=1e-6, rtol=1e-5)


# --- GELU / identity + split ---------------------------------------------------------------------

@pytest.mark.parametrize("M,N,block_n", [(128, 256, 1024), (7, 1536, 1024), (3, 384, 128)])
@pytest.mark.parametrize("gelu", [True, False])
def test_act_split_matches_torch(M, N, block_n, gelu):
    u = torch.randn(M, N, generator=torch.Generator().manual_seed(N)).to(DEV) * 4
    out = act_split(u, gelu=gelu, block_n=block_n)
    _check_split(out, F.gelu(u) if gelu else u, atol=4e-6)  # erf: numpy (interpreter) vs torch


# --- QKV -> head-major hi/lo planes ---------------------------------------------------------------

@pytest.mark.parametrize("B,S,H,dh,block_s", [(1, 128, 2, 32, 64), (2, 100, 6, 64, None)])
def test_qkv_split_is_head_major(B, S, H, dh, block_s):
    D = H * dh
    qkv = torch.randn(B * S, 3 * D, generator=torch.Generator().manual_seed(S)).to(DEV)
    planes = qkv_split(qkv, B, S, H, block_s=block_s).float()          # [6, B*H, S, dh]
    q, k, v = qkv.view(B, S, 3, H, dh).permute(2, 0, 3, 1, 4).reshape(3, B * H, S, dh)
    for i, t in enumerate((q * LOG2E / math.sqrt(dh), k, v)):
        hi, lo = planes[2 * i], planes[2 * i + 1]
        torch.testing.assert_close(hi + lo, t, atol=1e-6, rtol=2 ** -15)
        assert bool(((hi - t).abs() <= 2 ** -8 * t.abs()).all())  # hi is t rounded to bf16


# --- flash attention with split-precision dots ------------------------------------------------------

def _attention_ref(qkv, B, S, H, causal):
    """fp64 attention of SPEC §2, heads merged: [B*S, D]."""
    D = qkv.shape[1] // 3
    q, k, v = qkv.double().view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
    s = q @ k.transpose(-1, -2) / math.sqrt(D // H)
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=qkv.device).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B * S, D)


ATTN_SHAPES = [  # (B, S, H, dh, causal, block_m, block_n)
    (1, 128, 2, 32, True, 128, 64),    # smoke3
    (1, 128, 2, 32, False, 64, 32),
    (2, 100, 6, 64, True, 64, 32),     # odd: S not a multiple of either block, D = 384
    (2, 100, 6, 64, False, 32, 64),
]


@pytest.mark.parametrize("B,S,H,dh,causal,block_m,block_n", ATTN_SHAPES)
def test_attention_bf16x3_matches_fp64(B, S, H, dh, causal, block_m, block_n):
    D = H * dh
    qkv = torch.randn(B * S, 3 * D, generator=torch.Generator().manual_seed(S + H)).to(DEV)
    ref = _attention_ref(qkv, B, S, H, causal)
    planes = qkv_split(qkv, B, S, H)
    out = attention(planes, B, S, H, causal, split_out=False, block_m=block_m, block_n=block_n,
                    num_warps=4, num_stages=2)
    assert out.shape == (B * S, D) and out.dtype == torch.float32
    err = (out.double() - ref).abs().max().item()
    assert err < 2e-5, f"bf16x3 attention error {err:.2e}"
    split = attention(planes, B, S, H, causal, split_out=True, block_m=block_m, block_n=block_n,
                      num_warps=4, num_stages=2)
    _check_split(split, out)


def test_attention_single_bf16_products_are_measurably_worse():
    """The split is what buys the accuracy: one bf16 product per dot is >= 10x less accurate."""
    B, S, H, dh, causal = 1, 128, 2, 32, True
    qkv = torch.randn(B * S, 3 * H * dh, generator=torch.Generator().manual_seed(7)).to(DEV)
    ref = _attention_ref(qkv, B, S, H, causal)
    planes = qkv_split(qkv, B, S, H)
    e3 = (attention(planes, B, S, H, causal, split_out=False, num_warps=4).double() - ref).abs().max()
    e1 = (attention(planes, B, S, H, causal, split_out=False, qk_prec="bf16", pv_prec="bf16",
                    num_warps=4).double() - ref).abs().max()
    assert e1 > 10 * e3, (e1, e3)


# --- bf16x3 GEMM (K tripled) ----------------------------------------------------------------------

@pytest.mark.parametrize("M,K,N", [(128, 64, 192), (37, 384, 96)])
def test_linear_bf16x3_is_fp32_grade(M, K, N):
    g = torch.Generator().manual_seed(K)
    a = torch.randn(M, K, generator=g).to(DEV)
    w = (torch.randn(N, K, generator=g) / math.sqrt(K)).to(DEV)
    b = (0.1 * torch.randn(N, generator=g)).to(DEV)
    ref = (a.double() @ w.double().T + b.double())
    lin = prepare_linear(w, b, "bf16x3")
    a3, _ = ln_split(a, torch.ones(K, device=DEV), torch.zeros(K, device=DEV), split=True)
    h = F.layer_norm(a, (K,), eps=1e-5).double()
    y = linear(a3, lin)
    rel = ((y.double() - (h @ w.double().T + b.double())).abs().max() / ref.abs().max()).item()
    assert rel < 2e-5, rel
    y32 = linear(a, prepare_linear(w, b, "fp32"))
    torch.testing.assert_close(y32.double(), ref, atol=1e-4, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.mm(out_dtype=fp32) on bf16 is a CUDA-only path")
def test_cuda_mm_out_dtype_keeps_fp32_output():
    a = torch.randn(256, 512, device="cuda").to(torch.bfloat16)
    b = torch.randn(512, 128, device="cuda").to(torch.bfloat16)
    y = torch.mm(a, b, out_dtype=torch.float32)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), a.double() @ b.double(), atol=1e-3, rtol=1e-5)


# --- the variant ---------------------------------------------------------------------------------

def test_yaml_params_are_prepare_keywords():
    with open(config_dir() / "variant" / "hybrid.yaml") as f:
        cfg = yaml.safe_load(f)
    assert cfg["impl"] == "hybrid"
    from kernels.hybrid.model import prepare_one
    kw = set(inspect.signature(prepare_one).parameters) - {"case", "weights"}
    assert set(cfg["params"]) == kw | {"tune", "tuned_file", "search_space", "tune_margin"}


def test_attention_tiles_per_head_dim():
    from kernels.hybrid.model import per_head_dim
    assert per_head_dim(64, 128) == 64
    assert per_head_dim({128: 32, "default": 64}, 128) == 32
    assert per_head_dim({"128": 32, "default": 64}, 64) == 64
    with pytest.raises(ValueError):
        per_head_dim({128: 32}, 64)


def test_layer_overrides():
    s = layer_settings(4, dict(gemm="bf16x3", attention="triton", qk_prec="bf16x3", pv_prec="bf16x3"),
                       {"last": {"gemm": "tf32"}, "-2": {"attention": "sdpa_fp32"}, 0: {"gemm": {"fc2": "fp32"}}})
    assert [x["gemm"]["qkv"] for x in s] == ["bf16x3", "bf16x3", "bf16x3", "tf32"]
    assert [x["attention"] for x in s] == ["triton", "triton", "sdpa_fp32", "triton"]
    assert s[0]["gemm"] == {"qkv": "bf16x3", "o": "bf16x3", "fc1": "bf16x3", "fc2": "fp32"}
    with pytest.raises(ValueError):
        layer_settings(2, dict(gemm="bf16", attention="triton", qk_prec="bf16x3", pv_prec="bf16x3"), None)


@pytest.fixture(scope="module")
def smoke3():
    w = make_weights(SMOKE3, device=DEV)
    v = get_variant("hybrid")
    return w, v, v.prepare(SMOKE3, w)


def test_hybrid_passes_gate_on_smoke3(smoke3):
    """The correctness stage's own check: gate at 7 scales x 2 seeds, input untouched, no reuse/aliasing."""
    w, v, p = smoke3
    r = check_variant(SMOKE3, w, v, p, SCALES, SEEDS, GATE.atol, GATE.rtol, DEV)
    assert r["passed"], f"{r['reason']} {r['worst']} {r['guards']}"


def test_hybrid_output_depends_on_input(smoke3):
    w, v, p = smoke3
    y0 = v.run(p, make_input(SMOKE3, 1.0, 0, device=DEV))
    y1 = v.run(p, make_input(SMOKE3, 1.0, 1, device=DEV))
    assert y0.data_ptr() != y1.data_ptr() and not torch.allclose(y0, y1)


def test_gate_catches_bf16_attention():
    """Tests can fail: plain bf16 products in attention miss the gate on smoke3 (scale 0.1)."""
    w = make_weights(SMOKE3, device=DEV)
    p = prepare(SMOKE3, w, qk_prec="bf16", pv_prec="bf16")
    x = make_input(SMOKE3, 0.1, 0, device=DEV)
    assert not gate(get_variant("hybrid").run(p, x), reference_forward(SMOKE3, w, x)).passed


def test_hybrid_sdpa_backend_passes_on_smoke3():
    w = make_weights(SMOKE3, device=DEV)
    p = prepare(SMOKE3, w, attention="sdpa_fp32")
    x = make_input(SMOKE3, 1e-3, 0, device=DEV)
    assert gate(get_variant("hybrid").run(p, x), reference_forward(SMOKE3, w, x)).passed
