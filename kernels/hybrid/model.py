"""The ``hybrid`` forward pass: library GEMMs at split precision + Triton LayerNorm/split/attention kernels.

Per layer (M = B*S tokens, every activation fp32 unless it is a GEMM operand in the split layout):

    h3   = ln_split(x (+ y_prev))          # residual add of the previous FFN fused into LN1
    qkv  = linear(h3, w_qkv)               # [M, 3D] fp32, bias folded in the GEMM
    a3   = attention(qkv_split(qkv))       # [M, 3D+TAIL] split layout, heads merged (or SDPA)
    y    = linear(a3, w_o)                 # [M, D]
    h3,x = ln_split(x + y)                 # residual add fused into LN2
    g3   = act_split(linear(h3, w_1))      # exact GELU + split
    y    = linear(g3, w_2)                 # [M, D]; its residual add happens in the next LN
    out  = LayerNorm_f(x + y)

The precision of every op and layer comes from the parameters (``config/variant/hybrid.yaml``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .. import tuning
from ..cases import Case, variant_params
from ..reference import LN_EPS, fp32_matmul
from ..registry import Unsupported
from ..validate import (ParameterError, check_input, check_names, check_params, check_value, check_weights, integer,
                        number, one_of, text)
from ..weights import Weights
from .act_split import act_split
from .attention import PRECISIONS, attention
from .gemm import SCHEMES, PreparedLinear, linear, needs_split, prepare_linear
from .layernorm_split import ln_split
from .qkv_split import qkv_split

OPS = ("qkv", "o", "fc1", "fc2")
ATTENTION = ("triton", "sdpa_fp32", "sdpa_bf16")
LAYER_KEYS = ("gemm", "attention", "qk_prec", "pv_prec")


@dataclass
class LayerPlan:
    qkv: PreparedLinear
    o: PreparedLinear
    fc1: PreparedLinear
    fc2: PreparedLinear
    attention: str
    qk_prec: str
    pv_prec: str
    ln1: tuple[torch.Tensor, torch.Tensor]
    ln2: tuple[torch.Tensor, torch.Tensor]


@dataclass
class Prepared:
    case: Case
    layers: list[LayerPlan]
    lnf: tuple[torch.Tensor, torch.Tensor]
    attn_cfg: dict[str, int]
    qkv_block_s: int | None
    act_block_n: int
    ln_warps: int | None
    info: dict[str, Any] = field(default_factory=dict)
    graph: Any = None      # (torch.cuda.CUDAGraph, static input [B, S, D], static output [B, S, D]) when captured


def _gemm_per_op(gemm) -> dict[str, str]:
    if not isinstance(gemm, (str, dict)) or (isinstance(gemm, dict) and set(gemm) - set(OPS)):
        raise ParameterError(f"hybrid: gemm={gemm!r}: one scheme ({', '.join(SCHEMES)}) or a mapping of "
                             f"{', '.join(OPS)} to schemes")
    g = {op: gemm for op in OPS} if isinstance(gemm, str) else {op: gemm.get(op, "bf16x3") for op in OPS}
    for op, s in g.items():
        if s not in SCHEMES:
            raise ParameterError(f"hybrid: gemm scheme {s!r} for {op}: valid {', '.join(SCHEMES)}")
    return g


def _layer_of(key, L: int) -> int:
    """The layer an ``overrides`` key names: an index in [-L, L-1] (negative from the end) or "last"."""
    k = str(key)
    if k == "last":
        return L - 1
    if k.lstrip("-").isdigit() and -L <= int(k) < L:
        return int(k) % L
    raise ParameterError(f"hybrid: overrides key {key!r} is not a layer of this case (L={L}): an index in "
                         f"[{-L}, {L - 1}] (negative from the end) or 'last'")


def layer_settings(L: int, base: dict, overrides: dict | None) -> list[dict]:
    """Per-layer settings: ``base`` updated by ``overrides[key]`` where key is the layer index (int or
    its string; negative counts from the end) or "last"."""
    if not isinstance(overrides or {}, dict):
        raise ParameterError(f"hybrid: overrides={overrides!r}: a mapping of layer index -> settings")
    layer = {key: _layer_of(key, L) for key in (overrides or {})}
    out = []
    for l in range(L):
        s = dict(base)
        for key, ov in (overrides or {}).items():
            if layer[key] == l:
                bad = set(ov) - set(LAYER_KEYS) if isinstance(ov, dict) else {"(not a mapping)"}
                if bad:
                    raise ParameterError(f"hybrid: override {key}: unknown keys {sorted(bad)}; valid {LAYER_KEYS}")
                s.update(ov)
        s["gemm"] = _gemm_per_op(s["gemm"])
        check_value("hybrid", "attention", s["attention"], SPEC["attention"])
        for k in ("qk_prec", "pv_prec"):
            check_value("hybrid", k, s[k], SPEC[k])
        out.append(s)
    return out


def per_head_dim(value, dh: int) -> int:
    """An attention tile parameter: an int, or a mapping {head_dim: int, "default": int}."""
    if isinstance(value, int):
        return value
    m = {str(k): v for k, v in dict(value).items()}
    if str(dh) in m:
        return int(m[str(dh)])
    if "default" in m:
        return int(m["default"])
    raise ParameterError(f"hybrid: no entry for head dim {dh} (nor 'default') in {value}")


DEFAULTS = variant_params("hybrid")  # config/variant/hybrid.yaml: the one place defaults live
# what each parameter may take (gemm, overrides: layer_settings; the attention tiles may also be per head dim)
SPEC = {
    "attention": one_of(*ATTENTION), "qk_prec": one_of(*PRECISIONS), "pv_prec": one_of(*PRECISIONS),
    "attn_block_m": integer(16, pow2=True), "attn_block_n": integer(16, pow2=True),
    "attn_warps": integer(1, 16, pow2=True), "attn_stages": integer(1, 8),
    "qkv_block_s": integer(1, pow2=True, also=(None,)), "act_block_n": integer(16, pow2=True),
    "ln_warps": integer(1, 32, pow2=True, also=(None,)), "cuda_graph": one_of(True, False, "auto"),
    "graph_max_elements": integer(0), "tune": one_of(*tuning.TUNE_MODES), "tuned_file": text(also=(None,)),
    "search_space": text(also=(None,)), "tune_margin": number(0, 1),
}
PER_HEAD_DIM = ("attn_block_m", "attn_block_n", "attn_warps", "attn_stages")


def check_hybrid_params(params: dict) -> None:
    """Names and values up front (``ParameterError``); an attention tile parameter may map head dims (or
    "default") to values, each checked."""
    check_names("hybrid", params, DEFAULTS)
    check_params("hybrid", {k: v for k, v in params.items() if not (k in PER_HEAD_DIM and isinstance(v, dict))},
                 SPEC, known=DEFAULTS)
    for k in PER_HEAD_DIM:
        for dh, v in (params[k].items() if isinstance(params.get(k), dict) else ()):
            if not (str(dh) == "default" or str(dh).isdigit()):
                raise ParameterError(f"hybrid: {k} key {dh!r}: a head dim (e.g. 64) or 'default'")
            check_value("hybrid", f"{k}.{dh}", v, SPEC[k])


def prepare(case: Case, weights: Weights, **params) -> Prepared:
    """One-time: weight hi/lo splits in each GEMM scheme's layout, per-layer precision plan, and (CUDA, where
    ``cuda_graph`` says so) the forward captured in a CUDA graph. ``tune`` (``kernels/tuning.py``):
    ``committed`` reads this GPU's tuned file for the case, ``search`` times ``config/search/hybrid.yaml``'s
    candidates and keeps the fastest, ``off`` runs the parameters as given."""
    check_hybrid_params(params)
    check_weights("hybrid", case, weights)

    def checked(case, weights, **full):  # the tuned file's values are checked too
        check_hybrid_params(full)
        return prepare_one(case, weights, **full)
    return tuning.prepare("hybrid", case, weights, dict(DEFAULTS, **params), DEFAULTS, checked, run,
                          search_on=weights.device.type == "cuda")[0]


def rebind(p: Prepared, weights: Weights) -> Prepared:
    """The configuration ``p`` runs, prepared with other weights (``Variant.rebind``)."""
    return prepare_one(p.case, weights, **p.info["params"])


def use_graph(case: Case, cuda_graph, graph_max_elements: int) -> bool:
    """``cuda_graph``: true | false | auto (capture when the activations, B*S*D, are at most
    ``graph_max_elements``: the launch-bound cases; the long ones gain nothing and would hold a private pool)."""
    if cuda_graph == "auto":
        return case.B * case.S * case.D <= int(graph_max_elements)
    if not isinstance(cuda_graph, bool):
        raise ParameterError(f"hybrid: cuda_graph={cuda_graph!r}: valid true, false, auto")
    return cuda_graph


def prepare_one(case: Case, weights: Weights, gemm="bf16x3", attention="triton", qk_prec: str = "bf16x3",
                pv_prec: str = "bf16x3", overrides: dict | None = None, attn_block_m=128,
                attn_block_n=64, attn_warps=8, attn_stages=2, qkv_block_s: int | None = None,
                act_block_n: int = 1024, ln_warps: int | None = None, cuda_graph="auto",
                graph_max_elements: int = 1 << 22) -> Prepared:
    """``prepare`` for one parameter set."""
    given = dict(gemm=gemm, attention=attention, qk_prec=qk_prec, pv_prec=pv_prec, overrides=overrides,
                 attn_block_m=attn_block_m, attn_block_n=attn_block_n, attn_warps=attn_warps,
                 attn_stages=attn_stages, qkv_block_s=qkv_block_s, act_block_n=act_block_n, ln_warps=ln_warps,
                 cuda_graph=cuda_graph, graph_max_elements=graph_max_elements)
    check_weights("hybrid", case, weights)
    dev = weights.device
    if dev.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise Unsupported("hybrid on the CPU needs the Triton interpreter (TRITON_INTERPRET=1)")
    if dev.type == "cuda" and not hasattr(torch.ops.aten.mm, "dtype"):
        raise Unsupported("torch.mm(..., out_dtype=) is missing: torch >= 2.9 needed for bf16x3 GEMMs")
    graph = use_graph(case, cuda_graph, graph_max_elements)
    settings = layer_settings(case.L, dict(gemm=gemm, attention=attention, qk_prec=qk_prec,
                                           pv_prec=pv_prec), overrides)
    dh = case.dh
    if any(s["attention"] == "triton" for s in settings) and (dh < 16 or dh & (dh - 1)):
        raise Unsupported(f"triton attention needs a power-of-two head dim >= 16, got {dh}")
    layers = []
    for lw, s in zip(weights.layers, settings):
        g = s["gemm"]
        layers.append(LayerPlan(
            qkv=prepare_linear(lw.w_qkv, lw.b_qkv, g["qkv"]), o=prepare_linear(lw.w_o, lw.b_o, g["o"]),
            fc1=prepare_linear(lw.w_1, lw.b_1, g["fc1"]), fc2=prepare_linear(lw.w_2, lw.b_2, g["fc2"]),
            attention=s["attention"], qk_prec=s["qk_prec"], pv_prec=s["pv_prec"],
            ln1=(lw.ln1_w.contiguous(), lw.ln1_b.contiguous()),
            ln2=(lw.ln2_w.contiguous(), lw.ln2_b.contiguous())))
    attn_cfg = {k: per_head_dim(v, dh) for k, v in dict(
        block_m=attn_block_m, block_n=attn_block_n, num_warps=attn_warps, num_stages=attn_stages).items()}
    info = {"layers": [{k: s[k] for k in LAYER_KEYS} for s in settings], "attn_cfg": attn_cfg,
            "cuda_graph": bool(graph and dev.type == "cuda"), "params": given}
    p = Prepared(case, layers, (weights.lnf_w.contiguous(), weights.lnf_b.contiguous()), attn_cfg,
                 qkv_block_s, act_block_n, ln_warps, info)
    if graph and dev.type == "cuda":
        p.graph = capture(p)
        info["graph_pool_bytes"] = p.graph[3]
    return p


def capture(p: Prepared) -> tuple:
    """The forward captured in a CUDA graph on a static input buffer: (graph, static x, static y, bytes the
    capture's private memory pool took). Two eager forwards on a side stream first (Triton's first launch
    compiles and loads modules, which a capture may not do)."""
    c = p.case
    dev = p.lnf[0].device
    sx = torch.randn(c.B, c.S, c.D, device=dev, dtype=torch.float32)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(2):
            forward(p, sx)
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_reserved(dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sy = forward(p, sx)
    torch.cuda.synchronize(dev)
    return g, sx, sy, torch.cuda.memory_reserved(dev) - before


def _attend(p: Prepared, lp: LayerPlan, qkv: torch.Tensor, split_out: bool) -> torch.Tensor:
    """qkv: [M, 3D] fp32 -> merged attention output: split layout [M, 3D+TAIL] or [M, D] fp32."""
    c = p.case
    B, S, H, D = c.B, c.S, c.H, c.D
    if lp.attention == "triton":
        planes = qkv_split(qkv, B, S, H, block_s=p.qkv_block_s)           # [6, B*H, S, dh]
        return attention(planes, B, S, H, c.causal, split_out=split_out, qk_prec=lp.qk_prec,
                         pv_prec=lp.pv_prec, **p.attn_cfg)
    q, k, v = qkv.view(B, S, 3, H, c.dh).permute(2, 0, 3, 1, 4)          # each [B, H, S, dh]
    if lp.attention == "sdpa_bf16":
        q, k, v = q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)
    with fp32_matmul(False):
        a = F.scaled_dot_product_attention(q, k, v, is_causal=c.causal)  # [B, H, S, dh]
    a = a.float().transpose(1, 2).reshape(B * S, D)
    return act_split(a, gelu=False, block_n=p.act_block_n) if split_out else a


def run(p: Prepared, x: torch.Tensor) -> torch.Tensor:
    """x: [B, S, D] fp32 -> y: [B, S, D] fp32 (fresh tensor; x is never written). With a captured graph: x is
    copied into the graph's input buffer, the graph replayed, and its output copied out (two copies of B*S*D
    floats: the price of a graph that owns its buffers)."""
    check_input("hybrid", p.case, x, p.lnf[0].device)
    if p.graph is not None:
        g, sx, sy, _ = p.graph
        sx.copy_(x)
        g.replay()
        return sy.clone()
    return forward(p, x)


def forward(p: Prepared, x: torch.Tensor) -> torch.Tensor:
    """The layer loop of ``run`` (no graph): x: [B, S, D] fp32 -> y: [B, S, D] fp32."""
    c = p.case
    M, D = c.B * c.S, c.D
    with torch.inference_mode():
        xc = x.reshape(M, D)
        if not xc.is_contiguous():
            xc = xc.contiguous()
        y = None
        for lp in p.layers:
            h, x_new = ln_split(xc, *lp.ln1, y=y, split=needs_split(lp.qkv.scheme), write_x=y is not None,
                                eps=LN_EPS, num_warps=p.ln_warps)
            xc = x_new if x_new is not None else xc
            qkv = linear(h, lp.qkv)                                          # [M, 3D]
            a = _attend(p, lp, qkv, split_out=needs_split(lp.o.scheme))
            y = linear(a, lp.o)                                              # [M, D]
            h, xc = ln_split(xc, *lp.ln2, y=y, split=needs_split(lp.fc1.scheme), write_x=True,
                             eps=LN_EPS, num_warps=p.ln_warps)
            u = linear(h, lp.fc1)                                            # [M, 4D]
            g = act_split(u, gelu=True, block_n=p.act_block_n) if needs_split(lp.fc2.scheme) else F.gelu(u)
            y = linear(g, lp.fc2)                                            # [M, D]
        out, _ = ln_split(xc, *p.lnf, y=y, split=False, write_x=False, eps=LN_EPS, num_warps=p.ln_warps)
    return out.view(c.B, c.S, c.D)
