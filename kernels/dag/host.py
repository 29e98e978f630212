"""Host side of ``dag``: ``prepare`` (untimed: parameters, task graph, task table, weight splits, scratch,
compile and co-residency check) and ``run`` (timed: validate x, allocate y, one launch). Two forms of the kernel run
the same graph, task table, buffers, counters and epochs: ``form: tl`` (default) today's ``@triton.jit`` megakernel
(``kernel.py``), ``form: ws`` the warp-specialized Gluon kernel (``ws_kernel.py``; sm_90 GPUs only)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import triton

from ..cases import Case, variant_params
from ..common.occupancy import occupancy
from ..common.split import F8_A_SCALE, I8_BLOCK, I8_SCHEME as I8, f8_weight_scale, i8_limbs, split_hi_lo
from ..common.wgmma_passes import hopper_wgmma_passes
from .. import tuning
from ..registry import Unsupported
from ..validate import ParameterError, check_input, check_names, check_weights
from ..weights import Weights
from . import graph as G
from .kernel import TASK_HEADER, TRACE_COLS, _dag_fwd

INT32_MAX = 2**31 - 1
FORMS = ("tl", "ws")      # tl: kernel.py (@triton.jit) | ws: ws_kernel.py (warp-specialized Gluon, sm_90)
MAX_WAITS_LIMIT = 32      # dependency counters one task may wait for (the kernel unrolls the waits)
CHOICES = dict(scheme_qkv=G.SCHEMES, scheme_o=G.SCHEMES, scheme_ffn1=G.SCHEMES, scheme_ffn2=G.SCHEMES,
               queue=("queue", "static"), order=G.ORDERS, gelu=("log2poly", "erf"),
               wgmma_chain=("async", "async_inflight", "wait"),
               check=("sync", "lazy"), trace=(False, True),
               cost_model=tuple(G.COST_MODELS), wait=("serial", "parallel"), form=FORMS)
INTS = ("num_warps", "num_stages", "ctas_per_sm", "grid", "block_m", "block_m_ln", "ln_chunk", "block_k", "block_n_qkv",
        "block_n_o", "block_n_ffn1", "block_n_ffn2", "block_q", "block_kv", "spin_limit", "attn_stages", "ws_stages",
        "ws_consumers", "ws_pre")


DEFAULTS = variant_params("dag")  # config/variant/dag.yaml: the one place defaults live


def interpreting() -> bool:
    """True when the kernel was built for the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_dag_fwd).__name__ == "InterpretedFunction"


def parse_value(v: str):
    """A command-line ``name=value``'s value: int, true/false, else the string."""
    try:
        return int(v)
    except ValueError:
        return {"true": True, "false": False}.get(v, v)


def check_params(params: dict) -> dict:
    """``DEFAULTS`` updated with ``params``; unknown names and ill-typed values raise ``ParameterError`` naming the
    parameter and what it accepts."""
    check_names("dag", params, DEFAULTS)
    o = dict(DEFAULTS, **params)
    for k in INTS:
        if not isinstance(o[k], int) or isinstance(o[k], bool) or o[k] < 0:
            raise ParameterError(f"dag: {k}={o[k]!r} must be a non-negative integer (config/variant/dag.yaml)")
    for k in ("split_k_o", "split_k_ffn2"):
        if o[k] != "auto" and (not isinstance(o[k], int) or isinstance(o[k], bool) or o[k] < 1):
            raise ParameterError(f"dag: {k}={o[k]!r} must be an integer >= 1 or auto")
    for k, allowed in CHOICES.items():
        if o[k] not in allowed:
            raise ParameterError(f"dag: {k}={o[k]!r}: one of {allowed}")
    if o["num_warps"] not in (4, 8):
        raise ParameterError(f"dag: num_warps={o['num_warps']}: 4 or 8 (the GEMM tiles are one or two warpgroups)")
    if not 1 <= o["num_stages"] <= 5:
        raise ParameterError(f"dag: num_stages={o['num_stages']}: 1 to 5")
    if o["ctas_per_sm"] not in (1, 2, 3):
        raise ParameterError(f"dag: ctas_per_sm={o['ctas_per_sm']}: 1, 2 or 3")
    if o["spin_limit"] < 1:
        raise ParameterError(f"dag: spin_limit={o['spin_limit']}: at least 1 (the kernel never waits unbounded)")
    if not 2 <= o["ws_stages"] <= 6:
        raise ParameterError(f"dag: ws_stages={o['ws_stages']}: 2 to 6 (form ws's ring slots: 32 KB each at block_n "
                             "64, 48 KB at 128; with the q buffer one CTA per SM fits 6 at 64, 4 at 128: "
                             "ws_kernel.ws_shared_bytes)")
    if not 1 <= o["ws_pre"] <= o["ws_stages"]:
        raise ParameterError(f"dag: ws_pre={o['ws_pre']}: 1 to ws_stages ({o['ws_stages']}) (form ws: weight steps a "
                             "GEMM task's loader claims before its dependency wait, at most the ring's slots): set "
                             f"ws_pre: {o['ws_stages']} or less, or more ws_stages")
    f8 = [k for k in ("scheme_qkv", "scheme_o", "scheme_ffn1", "scheme_ffn2") if o[k] == "f16f8"]
    if f8 and o["form"] != "ws":
        raise ParameterError(f"dag: {f8[0]}=f16f8 runs on form ws only (fp8 wgmma with K-major weight parts, "
                             f"ws_kernel.py): set form: ws or {f8[0]}: bf16x3")
    if f8 and o["block_m"] == 128 and o["ws_consumers"] == 1:
        raise ParameterError(f"dag: form ws: {f8[0]}=f16f8 with block_m 128 needs two consumers (four accumulators a "
                             "128-row tile; one warpgroup holding them serializes its wgmma, "
                             f"docs/dag-results.md \"Results\" 43): set ws_consumers: 2 or {f8[0]}: bf16x3")
    i8 = [k for k in ("scheme_qkv", "scheme_o", "scheme_ffn1", "scheme_ffn2") if o[k] == I8]
    if i8 and (o["form"] != "ws" or i8[0] not in ("scheme_qkv", "scheme_ffn1") or o["block_m"] != 64
               or o["ws_consumers"] != 1):
        raise ParameterError(f"dag: {i8[0]}={I8} runs on form ws with block_m 64 and one consumer, on QKV and "
                             f"FFN1 only (int8 limbs with a scale a row and {I8_BLOCK}-deep K block, which only a "
                             "LayerNorm task, holding whole rows, can give; ws_kernel.py): set form: ws, block_m: 64, "
                             f"ws_consumers: 1, or {i8[0]}: bf16x3")
    if o["ws_consumers"] not in (1, 2):
        raise ParameterError(f"dag: ws_consumers={o['ws_consumers']}: 1 or 2 (form ws's consumer warpgroups per SM)")
    return o


def _clamp(v: int, extent: int) -> int:
    """A power-of-two tile edge no larger than the extent needs (and at least 16)."""
    return min(v, max(16, triton.next_power_of_2(extent)))


def auto_split_k(tiles: int, k_steps: int, programs: int) -> int:
    """K splits of a residual GEMM with ``tiles`` output tiles: the smallest power of two that gives every
    program a task (tiles x splits >= programs), at most one split per K step."""
    s = 1
    while tiles * s < programs and s * 2 <= k_steps:
        s *= 2
    return s


def tiling_for(case: Case, o: dict, programs: int) -> G.Tiling:
    """The graph's tile sizes from the parameters ``o`` (edges clamped to the shape; ``auto`` K splits)."""
    M, D = case.tokens, case.D
    bm = _clamp(o["block_m"], M)
    bk = _clamp(o["block_k"], D)
    while D % bk and bk > 16:  # a K step must not cross a column block of D (FFN2's A: [4, M, D])
        bk //= 2
    bn_o = _clamp(o["block_n_o"], D)
    bn_f2 = _clamp(o["block_n_ffn2"], D)
    tiles_o = -(-M // bm) * -(-D // bn_o)
    tiles_f2 = -(-M // bm) * -(-D // bn_f2)
    so = auto_split_k(tiles_o, -(-D // bk), programs) if o["split_k_o"] == "auto" else o["split_k_o"]
    sf = auto_split_k(tiles_f2, -(-4 * D // bk), programs) if o["split_k_ffn2"] == "auto" else o["split_k_ffn2"]
    return G.Tiling(block_m=bm, block_m_ln=min(o["block_m_ln"], bm), block_k=bk,
                    block_n_qkv=_clamp(o["block_n_qkv"], 3 * D), block_n_o=bn_o,
                    block_n_ffn1=_clamp(o["block_n_ffn1"], 4 * D), block_n_ffn2=bn_f2, split_k_o=so, split_k_ffn2=sf,
                    block_q=_clamp(o["block_q"], case.S), block_kv=_clamp(o["block_kv"], case.S),
                    scheme_qkv=o["scheme_qkv"], scheme_o=o["scheme_o"], scheme_ffn1=o["scheme_ffn1"],
                    scheme_ffn2=o["scheme_ffn2"], cost=G.COST_MODELS[o["cost_model"]])


def check_envelope(case: Case, t: G.Tiling) -> None:
    """Raise ``Unsupported`` for a case the kernel does not handle (int32 offsets, unrolled waits)."""
    M, D, L = case.tokens, case.D, case.L
    if D % 16:
        raise Unsupported(f"dag: D={D} is not a multiple of 16, the smallest K step of the tensor-core loop "
                          "(block_k); use hybrid")
    if 3 * L * M * D > INT32_MAX or 4 * L * D * D > INT32_MAX or 4 * M * D > INT32_MAX:
        raise Unsupported(f"dag: {case.name} is too large for the kernel's int32 offsets (L*3*B*S*D = "
                          f"{3 * L * M * D}); use hybrid")
    if D % I8_BLOCK and I8 in (t.scheme_qkv, t.scheme_ffn1):
        raise Unsupported(f"dag: {case.name}: D={D} is not a multiple of {I8_BLOCK}, the K block of {I8}'s scales; "
                          "set scheme_qkv / scheme_ffn1: bf16x3")
    waits = -(-case.S // t.block_m) + 1
    if waits > MAX_WAITS_LIMIT:
        raise Unsupported(f"dag: {case.name}: an attention task would wait for {waits} row blocks of "
                          f"block_m={t.block_m} rows (at most {MAX_WAITS_LIMIT}); raise block_m or use hybrid")


def graph_for(case: Case, n_programs: int = 132, cost: G.Cost | None = None, **params) -> G.Graph:
    """The task graph ``prepare`` builds for ``case`` with ``params`` on ``n_programs`` programs; ``cost`` in place
    of the ``cost_model`` the parameters name (the simulator prices a lever with it)."""
    o = check_params(params)
    t = tiling_for(case, o, n_programs)
    if cost is not None:
        t = dataclasses.replace(t, cost=cost)
    check_envelope(case, t)
    return G.build(case, t, o["order"], n_programs)


def task_table(g: G.Graph, goals: bool = False) -> tuple[torch.Tensor, int]:
    """[tasks, TASK_HEADER + MAX_WAITS + MAX_SIGNALS (+ MAX_WAITS)] int32 rows in queue order: kind, layer, a, b, c,
    number of waits, number of signals, 0, the wait counter ids (padded with the dummy counter 0), the signal ids;
    with ``goals`` (``wait: parallel``, which reads them with the ids in one round trip) the wait counters' goals
    (padded with 0, the dummy's)."""
    mw, ms = max(1, g.max_waits), max(1, g.max_signals)
    width = int(TASK_HEADER.value) + mw + ms + (mw if goals else 0)
    rows = []
    for t in g.tasks:
        w = list(t.waits) + [0] * (mw - len(t.waits))
        s = list(t.signals) + [0] * (ms - len(t.signals))
        rows.append([t.kind, t.layer, t.a, t.b, t.c, len(t.waits), len(t.signals), 0] + w + s
                    + ([g.goals[c] for c in w] if goals else []))
    return torch.tensor(rows, dtype=torch.int32).reshape(len(rows), width), width


def static_order(g: G.Graph, grid: int) -> torch.Tensor:
    """``queue: static``: [grid + 1] list offsets, then the programs' task lists (``sim.static_lists``)."""
    from .sim import static_lists
    lists = static_lists(g, grid)
    offs = [0]
    for li in lists:
        offs.append(offs[-1] + len(li))
    return torch.tensor(offs + [i for li in lists for i in li], dtype=torch.int32)


@dataclass
class DagPrepared:
    case: Case
    graph: G.Graph
    params: dict
    tensors: dict             # weights and scratch by kernel argument name
    meta: dict                # constexpr kernel arguments
    launch: dict              # num_warps, num_stages
    grid: int
    tab: torch.Tensor         # task table
    order: torch.Tensor       # static lists (or a 1-element dummy)
    ctr: torch.Tensor         # [n_counters] int32
    goal: torch.Tensor        # [n_counters] int32
    head: torch.Tensor        # [1] int32
    err: torch.Tensor         # [2] int32
    trace: torch.Tensor       # [tasks, TRACE_COLS] int64 (kernel.py / ws_kernel.py, trace_ptr), else a 1-element dummy
    qk_scale: float
    spin_limit: int
    epoch: int = 0            # launches since the counters were last zeroed
    info: dict = field(default_factory=dict)
    kernel: object = None     # CUDA: the compiled kernel (registers, shared memory)
    runner: object = None     # CUDA, form tl: kernel[grid], launched directly (no per-call JIT dispatch)
    ws: object = None         # CUDA, form ws: the ``ws_kernel.WsRunner`` on this object's counters (``launch``)
    direct: list = field(default_factory=list)  # CUDA: the direct launch's whole argument list (``direct_args``)
    epoch_limit: int = 0      # launches before the counters wrap (``_epoch_limit``, computed once)
    err_seen: int = 0         # the waits that gave up, as far as ``run`` has reported them (err[0] only grows)
    err_host: torch.Tensor = None   # check lazy: pinned copy of err, the event after the copy, whether it is pending
    err_event: object = None
    err_pending: bool = False


def _slabs(weights: Weights, name: str, block_n: int) -> torch.Tensor:
    """[L, N / block_n, K, block_n] fp32: each layer's W^T cut into column tiles, each tile a contiguous [K, block_n]
    slab (zero columns past N), so a GEMM tile streams one contiguous block and every slab has row stride block_n."""
    w = torch.stack([getattr(l, name).t() for l in weights.layers])          # [L, K, N]
    L, K, N = w.shape
    nb = -(-N // block_n)
    w = torch.nn.functional.pad(w, (0, nb * block_n - N))
    return w.reshape(L, K, nb, block_n).permute(0, 2, 1, 3).contiguous()


F8 = torch.float8_e4m3fn


def _i8_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """I8's weight from fp32 slabs [L, N / bn, K, bn]: the limbs l0, l1 (``split.i8_limbs``, a scale a column and
    128-deep K block) as int8 [L, N / bn, K / 128, bn, 128], per K step a K-major [bn, 128] tile (int8 wgmma reads
    its B operand K-major), and the scales fp32 [L, K / 128, N] (N = N / bn · bn)."""
    L, nb, K, bn = w.shape
    l0, l1, s = i8_limbs(w, 2, I8_BLOCK)

    def tiles(x):
        return x.reshape(L, nb, K // I8_BLOCK, I8_BLOCK, bn).transpose(3, 4).contiguous().to(torch.int8)
    scales = s[:, :, ::I8_BLOCK, :].permute(0, 2, 1, 3).reshape(L, K // I8_BLOCK, nb * bn)
    return tiles(l0), tiles(l1), scales.float().contiguous()


def _weight_parts(w: torch.Tensor, scheme: str, gpu: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hi, lo, inv) of fp32 weight slabs [L, N / bn, K, bn] for ``scheme``: bf16x3 — bf16 parts (round to nearest);
    f16_w1 — the fp16 rounding once (lo is the same tensor, unused); f16f8 — hi the fp16 rounding, lo [L, N / bn,
    K / 64, bn, 128] fp8 e4m3, per 64-deep K step a K-major [bn, 128] tile (fp8 wgmma reads its B operand K-major):
    columns 0-63 fp8(hi · s), 64-127 fp8((w − hi) · 2^11 · s) of the step's 64 K rows, so one product of depth 128
    with A's [lo · 2^11 | hi] pair is both correction terms; s per layer the power of two that puts the layer's max |w|
    at or below 224 (``bench/seqres/precision_probe`` f16f8).
    ``inv`` [L]: 1 / (2^11 s) (f16f8; 1 otherwise), what the kernel multiplies the fp8 products' accumulator by.
    Without a GPU the same values in fp32 tensors (bf16x3, f16_w1; f16f8 has no CPU kernel)."""
    L = w.shape[0]
    inv = torch.ones(L, dtype=torch.float32)
    if scheme == "f16f8":
        hi = w.to(torch.float16)
        s = f8_weight_scale(w.abs().reshape(L, -1).amax(1))[:, None, None, None]
        K, bn = w.shape[2], w.shape[3]
        parts = torch.stack([hi.float() * s, (w - hi.float()) * (F8_A_SCALE * s)], 2)   # [L, nb, 2, K, bn]
        parts = parts.reshape(L, -1, 2, K // 64, 64, bn).permute(0, 1, 3, 5, 2, 4)     # [L, nb, K/64, bn, 2, 64]
        lo = parts.reshape(_part_shape(w.shape, scheme, True, "lo", slab=True)).contiguous().to(F8)
        inv = (1.0 / (F8_A_SCALE * s.reshape(L))).float().cpu()
        return hi.contiguous(), lo, inv.contiguous()
    if scheme == "bf16x3":
        hi, lo = split_hi_lo(w)
    else:
        hi = lo = w.to(torch.float16)
    if not gpu:
        hi, lo = hi.float(), (lo.float() if lo is not hi else None)
        lo = hi if lo is None else lo
    return hi.contiguous(), lo.contiguous(), inv


def _part_shape(shape: tuple, scheme: str, gpu: bool, part: str, slab: bool = False) -> tuple:
    """The shape of a split part of an fp32 tensor of ``shape``: the same, but f16f8's lo part on the GPU — an A
    buffer's [..., 2D] (per 64 columns the fp8 lo parts, then the hi parts: ``_buffers``), a weight slab's
    [L, N / bn, K / 64, bn, 128] (``_weight_parts``, slab=True)."""
    if scheme == I8 and slab:   # the limbs l0 (hi), l1 (lo), per 128-deep K step a K-major tile (``_i8_weight``)
        L, nb, K, bn = shape
        return (L, nb, K // I8_BLOCK, bn, I8_BLOCK)
    if scheme == I8:   # an A buffer: hi the [..., 2D] limbs (per 128 columns l0, then l1), lo the [D / 128, rows]
        #                scales
        return (shape[-1] // I8_BLOCK, *shape[:-1]) if part == "lo" else (*shape[:-1], 2 * shape[-1])
    if scheme != "f16f8" or part != "lo" or not gpu:
        return tuple(shape)
    if slab:
        L, nb, K, bn = shape
        return (L, nb, K // 64, bn, 128)
    return (*shape[:-1], 2 * shape[-1])


def _part_dtype(scheme: str, gpu: bool, part: str = "hi", slab: bool = False) -> torch.dtype:
    if scheme == I8:   # (form ws only: no CPU kernel) the limbs int8, an A buffer's lo part its fp32 scales
        return torch.int8 if part == "hi" or slab else torch.float32
    if not gpu:
        return torch.float32
    if scheme == "f16f8":
        return torch.float16 if part == "hi" else F8
    return torch.bfloat16 if scheme == "bf16x3" else torch.float16


def _buffers(case: Case, t: G.Tiling, dev, gpu: bool) -> dict:
    """Scratch: the residual stream and every split A operand (one q|k|v copy per layer). f16f8 (GPU): hi fp16, lo
    fp8 [..., 2D]: per 64 columns of A fp8(lo · 2^11), then fp8(hi) (the A of the fp8 product of depth 128)."""
    B, S, D, H, L = case.B, case.S, case.D, case.H, case.L
    M = B * S
    out = dict(r_ptr=torch.empty(M, D, device=dev, dtype=torch.float32))
    for name, shape, scheme in (("ln1", (M, D), t.scheme_qkv), ("qkv", (L, 3, B, H, S, case.dh), "bf16x3"),
                                ("att", (M, D), t.scheme_o), ("ln2", (M, D), t.scheme_ffn1),
                                ("f", (4, M, D), t.scheme_ffn2)):
        out[f"{name}_hi_ptr"] = torch.empty(_part_shape(shape, scheme, gpu, "hi"), device=dev,
                                            dtype=_part_dtype(scheme, gpu))
        out[f"{name}_lo_ptr"] = torch.empty(_part_shape(shape, scheme, gpu, "lo"), device=dev,
                                            dtype=_part_dtype(scheme, gpu, "lo"))
    return out


def _weight_tensors(weights: Weights, t: G.Tiling, gpu: bool) -> dict:
    out = {}
    inv = []
    for arg, name, scheme, bn in (("wqkv", "w_qkv", t.scheme_qkv, t.block_n_qkv), ("wo", "w_o", t.scheme_o, t.block_n_o),
                                  ("w1", "w_1", t.scheme_ffn1, t.block_n_ffn1),
                                  ("w2", "w_2", t.scheme_ffn2, t.block_n_ffn2)):
        slabs = _slabs(weights, name, bn)
        if scheme == I8:   # (QKV, FFN1: host.check_params) the limbs and their column scales [L, K / 128, N]
            out[f"{arg}_hi_ptr"], out[f"{arg}_lo_ptr"], out[f"{arg}_s_ptr"] = _i8_weight(slabs)
            i = torch.ones(slabs.shape[0])
        else:
            out[f"{arg}_hi_ptr"], out[f"{arg}_lo_ptr"], i = _weight_parts(slabs, scheme, gpu)
        inv.append(i)
    dev = out["wqkv_hi_ptr"].device
    for arg in ("wqkv", "w1"):   # (one element where the GEMM is not I8: the kernel takes the pointer unread)
        out[f"{arg}_s_ptr"] = out.get(f"{arg}_s_ptr", torch.ones(1)).to(dev)
    out["f8s_ptr"] = torch.stack(inv, 1).contiguous().to(dev)   # [L, 4]: QKV, O, FFN1, FFN2 (form ws)
    for arg, name in (("ln1w", "ln1_w"), ("ln1b", "ln1_b"), ("bqkv", "b_qkv"), ("bo", "b_o"), ("ln2w", "ln2_w"),
                      ("ln2b", "ln2_b"), ("b1", "b_1"), ("b2", "b_2")):
        out[f"{arg}_ptr"] = torch.stack([getattr(l, name) for l in weights.layers]).contiguous()
    out["lnfw_ptr"], out["lnfb_ptr"] = weights.lnf_w.contiguous(), weights.lnf_b.contiguous()
    return out


def gemm_sites(t: G.Tiling) -> tuple[list[int], list[int], list[str]]:
    """GEMM kinds that share a tile width and a scheme share one K loop in the kernel (a "site"): the site of QKV,
    the output projection, FFN1 and FFN2, and each site's width and scheme."""
    keys = [(t.block_n_qkv, t.scheme_qkv), (t.block_n_o, t.scheme_o), (t.block_n_ffn1, t.scheme_ffn1),
            (t.block_n_ffn2, t.scheme_ffn2)]
    uniq = list(dict.fromkeys(keys))
    return [uniq.index(k) for k in keys], [k[0] for k in uniq], [k[1] for k in uniq]


def kernel_meta(case: Case, t: G.Tiling, g: G.Graph, o: dict, grid: int, gpu: bool, width: int) -> dict:
    """The constexpr arguments of ``_dag_fwd``."""
    bd = triton.next_power_of_2(case.D)
    site, site_bn, site_scheme = gemm_sites(t)
    return dict(B=case.B, S=case.S, D=case.D, H=case.H, DH=case.dh, CAUSAL=bool(case.causal), GRID=grid,
                BLOCK_M=t.block_m, BLOCK_M_LN=t.block_m_ln, LN_ROWS=max(1, min(t.block_m_ln, o["ln_chunk"] // bd)),
                BLOCK_K=t.block_k, K_CHUNK_O=G.k_chunk(case.D, t.split_k_o, t.block_k),
                K_CHUNK_FFN2=G.k_chunk(4 * case.D, t.split_k_ffn2, t.block_k),
                BLOCK_Q=t.block_q, BLOCK_KV=t.block_kv, BDH=max(16, triton.next_power_of_2(case.dh)), BD=bd,
                EVEN=case.tokens % t.block_m == 0 and case.D % t.block_k == 0,
                N_SITES=len(site_bn), SITE_QKV=site[0], SITE_O=site[1], SITE_FFN1=site[2], SITE_FFN2=site[3],
                SITE_BLOCK_N=tuple(site_bn), SITE_SCHEME=tuple(site_scheme),
                SCHEME_QKV=t.scheme_qkv, SCHEME_O=t.scheme_o, SCHEME_FFN1=t.scheme_ffn1, SCHEME_FFN2=t.scheme_ffn2,
                GELU=o["gelu"], QUEUE=o["queue"], MAX_WAITS=max(1, g.max_waits), MAX_SIGNALS=max(1, g.max_signals),
                TASK_WIDTH=width, NUM_STAGES=o["num_stages"], DOT_PREC="ieee", GPU=gpu,
                WGMMA_CHAIN=o["wgmma_chain"], TRACE=bool(o["trace"]), ATTN_STAGES=o["attn_stages"],
                WAIT=o["wait"], MAX_WAITS_P2=triton.next_power_of_2(max(1, g.max_waits)))


def compile_context(o: dict):
    """Compiles under ``wgmma_chain: async`` relax the waits between the chained dots of a K step, and under
    ``async_inflight`` also those of the pipelined K loop (``kernels.common.wgmma_passes``). Triton's cache key does
    not see that edit, so the choice is also a constexpr (``WGMMA_CHAIN``): an edited and an unedited binary never
    stand in for each other."""
    import contextlib
    if o["wgmma_chain"] in ("async", "async_inflight"):
        return hopper_wgmma_passes(acc_init=False, relax=True, inflight_end=o["wgmma_chain"] == "async_inflight")
    return contextlib.nullcontext()


def _launch_args(p: DagPrepared, x: torch.Tensor, y: torch.Tensor, spin: int | None = None) -> list:
    """The runtime arguments of ``_dag_fwd`` in signature order (one list for the compile and the launch)."""
    T = p.tensors
    names = _dag_fwd.arg_names
    vals = dict(T, x_ptr=x, y_ptr=y, tab_ptr=p.tab, order_ptr=p.order, ctr_ptr=p.ctr, goal_ptr=p.goal,
                head_ptr=p.head, err_ptr=p.err, trace_ptr=p.trace, n_tasks=len(p.graph.tasks), epoch=max(1, p.epoch),
                spin_limit=p.spin_limit if spin is None else spin, qk_scale=p.qk_scale)
    return [vals[n] for n in names[:names.index("B")]]


def compile_only(p: DagPrepared):
    """Compile (no launch) and load the kernel for ``p``; returns Triton's CompiledKernel."""
    x = p.tensors["r_ptr"]
    with compile_context(p.params):
        k = _dag_fwd.warmup(*_launch_args(p, x, x, spin=1), grid=(p.grid,), **p.meta, **p.launch)
    k._init_handles()
    return k


def prepare(case: Case, weights: Weights, **params) -> DagPrepared:
    """``prepare_one`` with the parameters ``tune`` picks (``kernels/tuning.py``): ``committed`` (default) this GPU's
    ``config/tuned/<gpu>/<case>.yaml``, ``search`` the fastest of ``config/search/dag.yaml``'s candidates (CUDA),
    ``off`` the parameters as given."""
    ys = {}
    return tuning.prepare("dag", case, weights, params, DEFAULTS, prepare_one,
                          lambda p, x: launch(p, x, ys.setdefault(0, torch.empty_like(x))),
                          search_on=weights.device.type == "cuda" and not interpreting(),
                          skip=(Unsupported, ValueError))[0]


def rebind(p: DagPrepared, weights: Weights) -> DagPrepared:
    """The configuration ``p`` runs, prepared with other weights (``Variant.rebind``)."""
    return prepare_one(p.case, weights, **{k: v for k, v in p.params.items() if k not in tuning.TUNING_KEYS})


def prepare_one(case: Case, weights: Weights, **params) -> DagPrepared:
    """Build the task graph and everything the launch needs (parameters: ``DEFAULTS``,
    ``config/variant/dag.yaml``). On CUDA it compiles the kernel and checks that the grid is co-resident.
    ``form: ws`` (``_check_ws_device``, ``_prepare_ws``): the same graph, task table and buffers, the Gluon kernel
    compiled instead, one CTA per SM."""
    o = check_params(params)
    check_weights("dag", case, weights)
    dev = weights.device
    gpu = dev.type == "cuda" and not interpreting()
    ws = o["form"] == "ws"
    if ws:
        from .ws_kernel import check_ws_params
        check_ws_params(o)          # a configuration the WS kernel does not run: named, on the CPU too
        _check_ws_device(dev, gpu)
    if dev.type == "cuda" and interpreting():
        raise Unsupported("dag: TRITON_INTERPRET=1 runs the kernel on the CPU; pass CPU weights")
    if o["trace"] and not gpu:
        raise ParameterError("dag: trace=true reads the GPU's %globaltimer; it needs CUDA without TRITON_INTERPRET")
    n_sm = torch.cuda.get_device_properties(dev).multi_processor_count if gpu else 1
    slots = n_sm * o["ctas_per_sm"]
    grid = o["grid"] or (slots if gpu else 1)  # the interpreter runs programs one after another: one is enough
    if ws:  # one CTA per SM; the graph (split K, critical order) as form tl's on SMs x ctas_per_sm programs
        grid = o["grid"] or n_sm
        if grid > n_sm:
            raise ParameterError(f"dag: form ws runs one CTA per SM: grid={o['grid']} exceeds the {n_sm} SMs; set "
                                 f"grid: 0 (= {n_sm}) or at most {n_sm}, or form: tl")
    elif o["grid"] > slots:
        raise ParameterError(f"dag: grid={o['grid']} exceeds {n_sm} SMs x ctas_per_sm={o['ctas_per_sm']} = {slots} "
                         "co-resident programs; lower grid or raise ctas_per_sm")
    programs = slots if ws else grid   # the programs the graph is split and ordered for
    t = tiling_for(case, o, programs)
    check_envelope(case, t)
    g = G.build(case, t, o["order"], programs)
    tab, width = task_table(g, goals=o["wait"] == "parallel")
    p = DagPrepared(
        case=case, graph=g, params=o, tensors=dict(_buffers(case, t, dev, gpu), **_weight_tensors(weights, t, gpu)),
        meta=kernel_meta(case, t, g, o, programs, gpu, width), launch=dict(num_warps=4 if ws else o["num_warps"],
                                                                           num_stages=o["num_stages"]),
        grid=grid, tab=tab.to(dev), order=(static_order(g, grid) if o["queue"] == "static"
                                           else torch.zeros(1, dtype=torch.int32)).to(dev),
        ctr=torch.zeros(g.n_counters, dtype=torch.int32, device=dev),
        goal=torch.tensor(g.goals, dtype=torch.int32, device=dev), head=torch.zeros(1, dtype=torch.int32, device=dev),
        err=torch.zeros(2, dtype=torch.int32, device=dev),
        trace=torch.zeros(*((len(g.tasks), TRACE_COLS.value) if o["trace"] else (1,)), dtype=torch.int64,
                          device=dev),
        qk_scale=math.log2(math.e) / math.sqrt(case.dh), spin_limit=o["spin_limit"])
    p.info = dict(form=o["form"], grid=grid, tiling=t.__dict__, **G.summary(g, grid))
    if ws:
        _prepare_ws(p, n_sm, programs)
    elif gpu:
        p.kernel = compile_only(p)
        occ = occupancy(p.kernel, o["num_warps"], dev)
        p.info.update(registers=p.kernel.n_regs, spills=getattr(p.kernel, "n_spills", None),
                      shared=p.kernel.metadata.shared,
                      occupancy=occ)
        if grid > n_sm * occ:
            raise Unsupported(f"dag: grid={grid} programs are not co-resident: the compiled kernel fits {occ} per SM "
                              f"({p.kernel.n_regs} registers, {p.kernel.metadata.shared} bytes of shared memory, "
                              f"{o['num_warps']} warps) on {n_sm} SMs; set ctas_per_sm={max(1, occ)} (or grid <= "
                              f"{n_sm * occ}), or lower num_stages / block_k to shrink shared memory")
        # launch the compiled binary directly: Triton's per-call argument binding and specialization key cost tens
        # of µs of host time per call (docs/seqres.md, "Launch")
        p.runner = p.kernel[(grid, 1, 1)]
        p.direct = static_args(p) + const_args(p)
    if gpu:
        p.err_host = torch.zeros(2, dtype=torch.int32, pin_memory=True)
        p.err_event = torch.cuda.Event()
    p.epoch_limit = _epoch_limit(p)
    return p


def _check_ws_device(dev, gpu: bool) -> None:
    """``form: ws`` runs on an sm_90 GPU only: raise ``Unsupported`` elsewhere, saying why and what runs there."""
    if not gpu:
        where = "under TRITON_INTERPRET=1" if interpreting() else f"on the {dev.type.upper()}"
        raise Unsupported(f"dag: form ws is the warp-specialized Gluon kernel (kernels/dag/ws_kernel.py): it runs on "
                          f"an sm_90 (Hopper) GPU only (Gluon has no interpreter), not {where}; use form: tl there "
                          "(the default)")
    cap = tuple(torch.cuda.get_device_capability(dev))
    if cap != (9, 0):
        raise Unsupported(f"dag: form ws needs an sm_90 (Hopper: H100 / H200) GPU: {torch.cuda.get_device_name(dev)} "
                          f"is sm_{cap[0]}{cap[1]} (the kernel is built on sm_90a's wgmma, TMA and setmaxnreg); use "
                          "form: tl")


def _prepare_ws(p: DagPrepared, n_sm: int, programs: int) -> None:
    """``form: ws`` on CUDA: the case's shape checked (``ws_kernel.check_supported``), the runner built on ``p``'s own
    counters, queue head, error word and trace, the kernel compiled and its direct launch built (a first ``run`` is
    not a compile), its shared memory checked against the device's limit; ``p.info`` as form tl's (registers,
    spills, shared memory; one CTA per SM)."""
    from .ws_kernel import WsRunner, check_supported, ws_meta
    o = p.params
    check_supported(p.meta, p.grid, n_sm)
    meta = ws_meta(p.meta, stages=o["ws_stages"], trace=o["trace"], consumers=o["ws_consumers"], pre=o["ws_pre"])
    r = WsRunner(p, meta, p.grid, p.ctr, p.head, p.err, p.trace)
    p.kernel = r.compile()
    p.info.update(r.check_shared())
    p.info.update(graph_programs=programs, ws_stages=o["ws_stages"], ws_consumers=o["ws_consumers"], ws_pre=o["ws_pre"],
                  registers=p.kernel.n_regs,
                  spills=getattr(p.kernel, "n_spills", None), occupancy=1, launch_path=r.launch_path())
    p.ws = r


def static_args(p: DagPrepared) -> list:
    """``_launch_args`` with every tensor as its device address, resolved once: Triton's launcher takes an int as a
    pointer as it is, where a tensor costs a ``data_ptr()`` call and a driver query (``cuPointerGetAttribute``) per
    argument (36 long-lived buffers here; the seqres family's ``static_pointers``). The buffers live as long as ``p``
    and are never reallocated; x, y and the epoch are filled in per launch (``direct_args``)."""
    x = p.tensors["r_ptr"]
    return [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in _launch_args(p, x, x)]


def const_args(p: DagPrepared) -> list:
    """The constexpr arguments of ``_dag_fwd`` in signature order (the compiled binary takes them last)."""
    names = _dag_fwd.arg_names
    return [p.meta[n] for n in names[names.index("B"):]]


_X, _Y = _dag_fwd.arg_names.index("x_ptr"), _dag_fwd.arg_names.index("y_ptr")
_EPOCH = _dag_fwd.arg_names.index("epoch")


def direct_args(p: DagPrepared, x: torch.Tensor, y: torch.Tensor) -> list:
    """The direct launch's arguments: ``p.direct`` (``static_args`` then ``const_args``, built once by ``prepare``)
    with x's and y's addresses (x checked by ``validate_input`` to be on the prepared device, y allocated beside it)
    and this launch's epoch written in place — the list is ``p``'s own, reused by every launch (no per-call copy)."""
    args = p.direct
    args[_X], args[_Y], args[_EPOCH] = x.data_ptr(), y.data_ptr(), max(1, p.epoch)
    return args


def epoch_limit(goals: list, n_tasks: int, grid: int) -> int:
    """Launches before a counter (epoch x its goal) or the queue head (epoch x (tasks + grid)) would overflow."""
    return INT32_MAX // max(max(goals), n_tasks + grid) - 1


def _epoch_limit(p: DagPrepared) -> int:
    return epoch_limit(p.graph.goals, len(p.graph.tasks), p.grid)


def launch(p: DagPrepared, x: torch.Tensor, y: torch.Tensor):
    """One launch of the prepared form: y = forward(x). Zeroes the counters first only when the epoch would overflow
    int32."""
    if p.epoch + 1 > p.epoch_limit:
        p.ctr.zero_()
        p.head.zero_()
        p.epoch = 0
    p.epoch += 1
    if p.ws is not None:   # form ws (its own direct launch, or the JIT path for x / y it was not specialized for)
        p.ws.run(x, y, p.epoch, p.spin_limit)
    elif p.runner is not None and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
        p.runner(*direct_args(p, x, y))
    else:  # (the JIT path: the interpreter, or x / y without the 16-byte alignment the binary assumes)
        with compile_context(p.params):
            _dag_fwd[(p.grid,)](*_launch_args(p, x, y), **p.meta, **p.launch)


def check(p: DagPrepared) -> None:
    """Raise if a launch of ``p`` had a dependency wait that gave up since the last report (synchronises)."""
    _report(p, *p.err.tolist())


def _report(p: DagPrepared, bad: int, task: int) -> None:
    """err[0] counts the waits that gave up over every launch (never zeroed, so a launch still in flight cannot lose
    its count to a reset); raise once for the ones ``run`` has not reported yet."""
    if bad > p.err_seen:
        new, p.err_seen = bad - p.err_seen, bad
        _raise_timeout(p, new, task)


def _check_lazy(p: DagPrepared) -> None:
    """``check: lazy``, after the launch: when the pinned copy of err issued after an earlier launch has landed, read
    it (and raise for new gave-up waits); then, unless a copy is still pending, copy err after this launch. No
    synchronisation, nothing before the launch: the error of a launch is raised by a later ``run`` (or ``check``)."""
    if p.err_pending:
        if not p.err_event.query():
            return
        p.err_pending = False
        _report(p, *p.err_host.tolist())
    p.err_host.copy_(p.err, non_blocking=True)
    p.err_event.record()
    p.err_pending = True


def _raise_timeout(p: DagPrepared, bad: int, task: int):
    name = p.graph.tasks[task].name if 0 <= task < len(p.graph.tasks) else f"#{task}"
    raise RuntimeError(f"dag: {bad} dependency wait(s) gave up after spin_limit={p.spin_limit} polls (last: task "
                       f"{task}, {name}); the output is wrong. A schedule that cannot finish (grid not co-resident, "
                       "a graph bug) or a spin_limit too small for the GPU")


def task_profile(p: DagPrepared) -> dict:
    """Where the last traced launch (``trace: true``) spent its time, from the per-task %globaltimer stamps (µs):
    the kernel (first ticket to last task done); per task kind the count, the mean and total wait (ticket to
    counters complete) and work (counters complete to signalled), and the mean signal (the release: the fence and
    the counter atomics, inside work); the programs' busy fraction (work / (grid x
    kernel)); the spread of the programs' first tickets; the SMs used and programs per SM.

    Both forms write the same [tasks, 8] int64 layout (kernel.py's and ws_kernel.py's ``_stamp`` calls): 0 ticket,
    1 counters complete, 2 signalled, 3 program << 16 | SM, 4 work done (before the release); form ws also 5 the
    consumer took the task, 6 a GEMM's K loop done, 7 the signaller took it (``bench.dag.ws_dag.phase_profile``).
    In form ws the stamps come from three partitions: 0 and 1 from the loader (at most one task ahead of the
    consumer), 4 from the consumer, 2 and 3 from the signaller (after the hand-over); so a task's ``wait`` ends when
    its operands could load, its ``work`` also holds the time it queued behind the consumer's previous task (the sum
    of work can pass grid x kernel: ``busy`` > 1), and ``signal`` holds the hand-over to the signaller. ``form`` says
    which."""
    if not p.meta["TRACE"]:
        raise ValueError("dag: task_profile needs a launch prepared with trace=true")
    raw = p.trace.cpu()
    t = raw.double()
    t0 = float(t[:, 0].min())
    kernel = (float(t[:, 2].max()) - t0) / 1e3
    wait, work, signal = (t[:, 1] - t[:, 0]) / 1e3, (t[:, 2] - t[:, 1]) / 1e3, (t[:, 2] - t[:, 4]) / 1e3
    kinds = {}
    for i, task in enumerate(p.graph.tasks):
        kinds.setdefault(G.KINDS[task.kind], []).append(i)
    per = {}
    for k, idx in kinds.items():
        w, r = wait[idx], work[idx]
        per[k] = dict(n=len(idx), wait_mean=float(w.mean()), wait_total=float(w.sum()), work_mean=float(r.mean()),
                      work_max=float(r.max()), work_total=float(r.sum()), signal_mean=float(signal[idx].mean()),
                      model_mean=sum(p.graph.tasks[i].cost for i in idx) / len(idx))
    per_sm, first = {}, {}
    for s_, g_, t_ in zip((raw[:, 3] & 0xFFFF).tolist(), (raw[:, 3] >> 16).tolist(), t[:, 0].tolist()):
        per_sm.setdefault(s_, set()).add(g_)
        first[g_] = min(first.get(g_, t_), t_)
    return dict(form=getattr(p, "params", {}).get("form", "tl"), kernel_us=kernel,
                start_skew_us=(max(first.values()) - t0) / 1e3, grid=p.grid,
                busy=float(work.sum()) / (p.grid * kernel), wait_total=float(wait.sum()), work_total=float(work.sum()),
                sms=len(per_sm), max_programs_per_sm=max(len(v) for v in per_sm.values()), kinds=per,
                chain=_realized_chain(p.graph, t))


def _realized_chain(g: G.Graph, t: torch.Tensor) -> dict:
    """The chain of tasks that set the traced launch's end (µs): from the last task to finish, back through the
    producer that finished last whenever the task's ticket came before that (it waited), else stop there (its
    ticket came late: the programs were busy). Per kind the chain's work; ``link`` the time from the last producer's
    end to the waiter's start (signal, poll, CTA barrier), summed and per link; ``head`` where the chain starts;
    ``path`` the chain's tasks from its head, each [name, work µs]."""
    done, tick, start = t[:, 2].tolist(), t[:, 0].tolist(), t[:, 1].tolist()
    i = max(range(len(done)), key=done.__getitem__)
    work, links, path = {}, [], []
    while True:
        k = G.KINDS[g.tasks[i].kind]
        work[k] = work.get(k, 0.0) + (done[i] - start[i]) / 1e3
        path.append([g.tasks[i].name, round((done[i] - start[i]) / 1e3, 3)])
        prods = g.producers[i]
        if not prods:
            break
        j = max(prods, key=done.__getitem__)
        if tick[i] >= done[j]:
            break
        links.append((start[i] - done[j]) / 1e3)
        i = j
    return dict(tasks=len(links) + 1, work=work, work_total=sum(work.values()), link_total=sum(links),
                link_mean=sum(links) / max(1, len(links)), head=g.tasks[i].name,
                head_at_us=(tick[i] - min(tick)) / 1e3, path=path[::-1])


def validate_input(p: DagPrepared, x) -> None:
    check_input("dag", p.case, x, p.ctr.device)


def capturing(p: DagPrepared) -> bool:
    """Is the current CUDA stream capturing a graph (on ``p``'s device)?"""
    return p.ctr.is_cuda and torch.cuda.is_current_stream_capturing()


def run(p: DagPrepared, x: torch.Tensor) -> torch.Tensor:
    """x: [B, S, D] fp32 contiguous on the prepared device -> y: [B, S, D] fp32 (fresh); x is only read.

    ``check: sync`` synchronises and raises when a dependency wait gave up; ``lazy`` does not synchronise: the
    error of a launch is raised by a later ``run`` that finds the copy of err issued after it landed (or by ``check``).
    Before the launch only the input check, the capture check, y's allocation and the epoch: the error bookkeeping
    comes after it (on an idle GPU every µs of host time before the launch is timed too; docs/dag-results.md, "Results"
    16). The epoch is
    a launch argument, so a captured CUDA graph would replay one epoch and pass every dependency wait at once: ``run``
    refuses to be captured (``capturing``)."""
    validate_input(p, x)
    if capturing(p):
        raise RuntimeError(
            "dag: run is being captured in a CUDA graph (torch.cuda.graph, CUDA-graph trees of torch.compile's "
            "reduce-overhead mode): each launch passes its epoch to the dependency counters, so a replay would reuse "
            "one epoch and skip every wait, a silently wrong result. Call run directly (it is one launch per forward "
            "already), or use the variant 'hybrid' (cuda_graph: auto) where the caller needs a graph")
    y = torch.empty_like(x)
    launch(p, x, y)
    if p.params["check"] == "lazy" and p.err_host is not None:
        _check_lazy(p)
    else:
        check(p)
    return y
