"""Host side of ``seqres``: ``prepare`` (untimed: weight layout, scratch, schedule, co-residency) and
``run`` (timed: allocate y, one launch)."""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field

import torch
import triton
from triton.runtime.errors import OutOfResources

import yaml

from ..common.split import split_hi_lo
from ..common.wgmma_passes import hopper_wgmma_passes
from .. import tuning
from ..cases import Case, config_dir
from ..registry import Unsupported
from ..weights import Weights
from .megakernel import BARRIERS_PER_LAYER, BARRIERS_PER_LAYER_FLAT, _seqres_fwd

PRECISIONS = ("ieee", "tf32", "tf32x3", "bf16x3")
_EPOCH_LIMIT = 1 << 30
LN_LOCAL_MAX_D = 128  # ln_local: the [block_m, D] row block's hi/lo parts live in registers (64 of them at D = 128)


def interpreting() -> bool:
    """True when Triton kernels of this module were built for the interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_seqres_fwd).__name__ == "InterpretedFunction"


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(1, int(n)))


def _block(want: int, extent: int, lo: int = 16) -> int:
    """A power-of-two tile edge: ``want`` clamped to [lo, next_pow2(extent)]."""
    return max(lo, min(_pow2(want), _pow2(extent)))


@dataclass
class SeqresPrepared:
    case: Case
    tensors: list            # weights in kernel argument order
    scratch: dict            # a, qkv, f, x/f hi+lo: reused across calls (no input-dependent state survives a call)
    flags: torch.Tensor      # [n_groups, BLOCK_R] int32
    err: torch.Tensor        # [1] int32
    grid: tuple
    meta: dict               # constexpr kernel arguments
    launch: dict             # num_warps, num_stages
    trace: torch.Tensor      # [grid, 2 * barriers + 2] int64 phase timestamps (meta TRACE), else a 1-element dummy
    qk_scale: float
    spin_limit: int
    info: dict = field(default_factory=dict)
    epoch: int = 0
    cnt: object = None       # [n_groups, NCNT] int32 row-block counters (meta LNF), else a 1-column dummy
    cepoch: int = 0          # launches counted on cnt
    kernel: object = None    # the compiled kernel (CUDA; None: every launch goes through Triton's JIT dispatch)
    runner: object = None    # kernel[grid]: ``launch`` calls it with the runtime arguments + ``const_args``
    const_args: list = field(default_factory=list)  # the constexpr arguments in signature order (from ``S`` on)
    static_ptrs: tuple = ()  # the device addresses of the arguments between y and spin_limit (``static_pointers``)
    tune_sets: list = field(default_factory=list)  # (override, full parameters) of each candidate tune timed, in
    #                                                  the order of info["tune"]["candidates"]

    @property
    def barriers_per_launch(self) -> int:
        return _barriers_per_launch(self.meta, self.case.L)


def _barriers_per_launch(meta: dict, L: int) -> int:
    """The copy phase's barrier (none with ``copy_phase: fused``: it shares layer 0's LN1 barrier) + L layers'."""
    return 1 + _barriers_per_layer(meta) * L - int(bool(meta.get("CPF")))


def _barriers_per_layer(meta: dict) -> int:
    if meta["FLAT"]:
        return (int(BARRIERS_PER_LAYER_FLAT.value) - int(bool(meta.get("FF"))) - int(bool(meta.get("AO")))
                - 2 * int(bool(meta.get("LNF"))) - int(bool(meta.get("LNL"))))
    return int(BARRIERS_PER_LAYER.value)


def _stack(weights: Weights, name: str, transpose: bool = False) -> torch.Tensor:
    ts = [getattr(l, name) for l in weights.layers]
    if transpose:
        ts = [t.t() for t in ts]
    return torch.stack(ts).contiguous()


def _split_bf16(w: torch.Tensor, as_fp32: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """w = hi + lo + O(2^-17 |w|), hi and lo bf16 (round to nearest even); ``as_fp32``: the same values in
    fp32 tensors (the interpreter has no bf16)."""
    hi, lo = split_hi_lo(w)
    return (hi.float().contiguous(), lo.float().contiguous()) if as_fp32 else (hi.contiguous(), lo.contiguous())


def _check_precision(name: str, value: str) -> str:
    if value not in PRECISIONS:
        raise ValueError(f"seqres: {name}={value!r} not in {PRECISIONS}")
    return value


def _yaml_defaults() -> dict:
    """The parameters of ``config/variant/seqres.yaml``: the one place defaults live."""
    with open(config_dir() / "variant" / "seqres.yaml") as f:
        return dict(yaml.safe_load(f)["params"])


DEFAULTS = _yaml_defaults()


def wide_block_n(want, block_n: int, M: int, N: int, R: int, BM: int) -> int:
    """Output columns per tile of a wide GEMM (QKV, FFN1) of the flat loop. ``want``: a width, 0 (= block_n) or
    "auto": 128 unless it leaves the group's R programs unevenly loaded, i.e. unless the busiest program's
    columns (rounds of tiles x width) exceed 1.2x what 64-wide tiles give; 128-wide tiles move fewer bytes
    per FLOP, so they win ties (sweeps in docs/seqres.md)."""
    if want != "auto":
        return _block(int(want) or block_n, N)
    rows = -(-M // BM)

    def busiest(bn: int) -> int:
        return -(-(rows * -(-N // bn)) // R) * bn
    return _block(128 if busiest(128) <= 1.2 * busiest(64) else 64, N)


def narrow_block_n(want, M: int, D: int, R: int, BM: int, BK: int) -> int:
    """Output columns per tile of oproj and FFN2 (N = D) in the flat loop, and the base of ``wide_block_n``.
    ``want``: a width, or "auto": 128 unless oproj's (tile, K step) pairs with 128-wide tiles give a program
    fewer than 2 K steps (stream_k then cuts every tile into pieces of one step, each added with a whole
    tile of atomics); 128-wide tiles re-read A half as often (sweeps in docs/seqres.md)."""
    if want != "auto":
        return _block(int(want), 4 * D)
    steps = -(-M // BM) * -(-D // 128) * -(-D // BK)
    return _block(128 if steps >= 2 * R else 64, 4 * D)


def _gelu_mode(name: str) -> int:
    """GELU of FFN1: 1 = libdevice erf (``gelu_erf``), 2 = polynomial erf (``gelu_erf_poly``), 3 = a polynomial of
    log2 Phi(-|x|) and one exp2 (``gelu_log2poly``)."""
    modes = {"libdevice": 1, "poly": 2, "log2poly": 3}
    if name not in modes:
        raise ValueError(f"seqres: gelu={name!r} not in {sorted(modes)}")
    return modes[name]


def stream_k(want, M: int, D: int, R: int, BM: int, BN: int) -> bool:
    """Whether oproj and FFN2 (N = D) share their (tile, K step) pairs over the group's R programs: ``want``
    true/false, or "auto": only when their [BM, BN] tiles do not divide evenly over the R programs (otherwise
    the shares are whole tiles anyway and the atomics would only cost code)."""
    if want != "auto":
        return bool(want)
    return (-(-M // BM) * -(-D // BN)) % R != 0


_BARRIERS = {"flags_atomic": 1, "flags": 2, "counter": 3, "counter_t0": 7}


def _barrier_mode(name: str, interpret: bool) -> int:
    """group_barrier's MODE for ``barrier``: 1 flags polled with atomics, 2 flags polled with ld.acquire, 3 one
    counter polled with ld.acquire, 7 the counter published and polled by thread 0 alone (``tl_helpers.counter_t0``);
    the interpreter has no inline PTX, so it polls with atomics (2 -> 1, 3 -> 4, 7 -> 4).
    (MODE 5 and 6, the st.release forms, are barrier_probe's only: measured slower, docs/seqres.md session 11.)"""
    if name not in _BARRIERS:
        raise ValueError(f"seqres: barrier={name!r} not in {sorted(_BARRIERS)}")
    mode = _BARRIERS[name]
    if interpret:
        mode = {2: 1, 3: 4, 7: 4}.get(mode, mode)
    return mode


def prepare_meta(case: Case, n_sm: int, interpret: bool = False, n_slots: int | None = None,
                 **params) -> tuple[dict, dict, dict]:
    """The schedule for ``case`` on a device with ``n_sm`` SMs: (constexpr kernel args, launch options,
    info). ``n_slots``: CTAs that are proven co-resident (default ``n_sm``: one per SM, true of any kernel
    that launches at all; ``prepare`` raises it from the compiled kernel's occupancy when
    ``ctas_per_sm`` > 1). Raises Unsupported outside the envelope. Device-free, so ``aot_check`` can use it."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"seqres: unknown parameters {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    o = dict(DEFAULTS, **params)
    B, S, D, H, L = case.B, case.S, case.D, case.H, case.L
    if S > o["max_seq"]:
        raise Unsupported(f"seqres: S={S} > max_seq={o['max_seq']}: the sequence does not fit one group")
    if D > o["max_d"]:
        raise Unsupported(f"seqres: D={D} > max_d={o['max_d']}: the model width is outside the envelope")
    scratch_bytes = 4 * B * S * 8 * D
    if scratch_bytes > o["scratch_limit_gib"] * 2**30:
        raise Unsupported(f"seqres: scratch of {scratch_bytes / 2**30:.1f} GiB > {o['scratch_limit_gib']} GiB")
    precs = {k: _check_precision(k, o[k]) for k in ("prec_qkv", "prec_attn", "prec_o", "prec_ffn1", "prec_ffn2",
                                                     "prec_fast")}
    if interpret:  # the interpreter computes fp32 and accepts only ieee | tf32 | tf32x3
        precs = {k: "ieee" if v == "bf16x3" else v for k, v in precs.items()}
    fast_layers = int(o["fast_layers"])
    if not 0 <= fast_layers <= L:
        raise ValueError(f"seqres: fast_layers={fast_layers} not in [0, L={L}]")
    G = int(o["seqs_per_program"])
    if G <= 0:  # auto: fewest sequences per group that still leave <= 2 groups per SM
        G = 1
        while B % (2 * G) == 0 and B // G > 2 * n_sm:
            G *= 2
    if B % G:
        raise ValueError(f"seqres: seqs_per_program={G} does not divide B={B}")
    n_groups = B // G
    n_slots = n_sm if n_slots is None else int(n_slots)
    R = int(o["split"])
    if R <= 0:
        R = max(1, min(int(o["max_split"]), n_slots // n_groups))
    info = {"n_sm": n_sm, "n_slots": n_slots}
    if interpret and o["trace"]:
        raise ValueError("seqres: trace=true reads the GPU's %globaltimer; the Triton interpreter cannot run it")
    if interpret and R > 1:
        info["split_note"] = f"split={R} needs co-resident programs; the interpreter runs them in order: using 1"
        R = 1
    if R > 1 and n_groups * R > n_slots:
        # co-residency: every program of a group must be resident while its peers spin. Guaranteed
        # with grid <= n_slots (one program per SM, or the measured occupancy; see prepare).
        info["split_note"] = (f"split={R}: grid {n_groups * R} > {n_slots} co-resident slots cannot be proven "
                              "co-resident; using 1")
        R = 1
    presplit = 0
    if o["presplit_weights"]:
        lin = ("prec_qkv", "prec_o", "prec_ffn1", "prec_ffn2")
        if any(o[k] != "bf16x3" for k in lin) or fast_layers:
            raise ValueError("seqres: presplit_weights needs prec_qkv/o/ffn1/ffn2 = bf16x3 and fast_layers = 0")
        # bf16 operands ignore input_precision ("tf32" is Triton's default); the interpreter holds the
        # bf16 values in fp32 tensors and needs exact fp32 products ("ieee")
        presplit = 2 if interpret else 1
        precs.update({k: "ieee" if interpret else "tf32" for k in lin})
    loops = {"tiled": 0, "flat": 1, "nested": 1}  # nested: the flat phases' pre-split A, loops per tile
    if o["gemm_loop"] not in loops:
        raise ValueError(f"seqres: gemm_loop={o['gemm_loop']!r} not in {sorted(loops)}")
    flat = loops[o["gemm_loop"]]
    if flat and not presplit:
        raise ValueError(f"seqres: gemm_loop={o['gemm_loop']} needs presplit_weights=true (its A operands come "
                         "pre-split)")
    wrows = int(o["presplit_rows"])
    if wrows not in (2, 3) or (wrows == 2 and not flat):
        raise ValueError(f"seqres: presplit_rows={wrows}: 3 (hi, lo, hi), or 2 (hi, lo) with gemm_loop=flat")
    M = G * S
    dh = case.dh
    bm = _block(o["block_m"], M)
    apk = int(o["attn_pack"])
    if apk < 1 or G % apk:
        raise ValueError(f"seqres: attn_pack={o['attn_pack']!r}: sequences per attention tile, >= 1 and dividing "
                         f"seqs_per_program={G}")
    if apk > 1 and not (flat and not o["ln_fold"]):
        raise ValueError("seqres: attn_pack > 1 needs gemm_loop=flat or nested and ln_fold=false")
    sa, ga = S * apk, G // apk  # the attention phase's packs: ga packs of sa rows
    bq = _block(o["block_q"], sa)
    while o["attn_fill"] and bq > 16 and ga * H * -(-sa // bq) < R:  # every program gets an attention tile
        bq //= 2
    bk = _block(o["block_k"], D)
    if o["block_n"] != "auto" and not str(o["block_n"]).isdigit():
        raise ValueError(f"seqres: block_n={o['block_n']!r}: a tile width (e.g. 64, 128) or auto")
    if o["stream_k"] not in (True, False, "auto"):
        raise ValueError(f"seqres: stream_k={o['stream_k']!r}: true, false or auto")
    if o["ffn_fused"] not in (True, False):
        raise ValueError(f"seqres: ffn_fused={o['ffn_fused']!r}: true or false")
    ff = bool(o["ffn_fused"])
    if ff and not flat:
        raise ValueError("seqres: ffn_fused=true needs gemm_loop=flat or nested (its A operand is the LN2 split)")
    if o["attn_oproj"] not in (True, False):
        raise ValueError(f"seqres: attn_oproj={o['attn_oproj']!r}: true or false")
    ao = bool(o["attn_oproj"])
    if ao and not (flat and o["attn_presplit"]):
        raise ValueError("seqres: attn_oproj=true needs gemm_loop=flat or nested and attn_presplit=true")
    if o["ln_fold"] not in (True, False):
        raise ValueError(f"seqres: ln_fold={o['ln_fold']!r}: true or false")
    lnf = bool(o["ln_fold"])
    if lnf and not (ao and ff):
        raise ValueError("seqres: ln_fold=true needs attn_oproj=true and ffn_fused=true (their phases' last arrivals "
                         "do the LayerNorms)")
    lnl = {False: 0, "qkv": 1}.get(o["ln_local"], -1)
    if lnl < 0:
        raise ValueError(f"seqres: ln_local={o['ln_local']!r}: false or qkv (the LN2 forms were measured slower "
                         "and removed, docs/seqres.md session 9)")
    if lnl and not (flat and o["attn_presplit"]) or lnl and lnf:
        raise ValueError("seqres: ln_local needs gemm_loop=flat or nested with attn_presplit=true, and not ln_fold")
    if lnl and _pow2(D) > LN_LOCAL_MAX_D:
        raise ValueError(f"seqres: ln_local keeps a [block_m, D] LayerNorm row block in registers: D={D} > "
                         f"{LN_LOCAL_MAX_D}; set ln_local=false")
    ars = {"select": 1, "branch": 0, "flag": 2}.get(o["acc_reset"], -1)
    if ars < 0:
        raise ValueError(f"seqres: acc_reset={o['acc_reset']!r}: branch (the epilogue branch resets the accumulator), "
                         "select (a tile's first step selects zeros) or flag (the branch form compiled so that the "
                         "reset becomes the next dot's zero-accumulator predicate)")
    ftr = {"padded": 0, "exact": 1}.get(o["flat_trips"], -1)
    if ftr < 0:
        raise ValueError(f"seqres: flat_trips={o['flat_trips']!r}: padded (every program runs the busiest program's "
                         "steps, the extra ones on repeated operands) or exact (a runtime trip count per program)")
    cpf = {"separate": 0, "fused": 1}.get(o["copy_phase"], -1)
    if cpf < 0:
        raise ValueError(f"seqres: copy_phase={o['copy_phase']!r}: fused (y = x written by the pass that splits "
                         "layer 0's LN1, one barrier fewer) or separate (a copy phase and its barrier first)")
    # (the tiled loop and ln_fold keep the copy phase; so does ln_local, which has no LN1 phase: its fused form,
    # layer 0's QKV programs reading x through a pointer select, measured 2% slower on case 10, docs/seqres.md)
    cpf = int(cpf and flat and not lnf and not lnl)
    if o["attn_kv_split"] not in (True, False):
        raise ValueError(f"seqres: attn_kv_split={o['attn_kv_split']!r}: true or false")
    kvs = 0
    if o["attn_kv_split"]:
        bkv = _block(o["block_kv"], sa)
        nkv = -(-sa // bkv)
        why = [w for c, w in ((not ao, "attn_oproj=true"), (case.causal, "a non-causal case"),
                              (apk > 1, "attn_pack=1"), (lnf, "ln_fold=false"),
                              (nkv % 2, f"an even number of key blocks (S={sa}, block_kv={bkv})")) if c]
        if why:
            raise ValueError(f"seqres: attn_kv_split=true needs {', '.join(why)}; set attn_kv_split=false")
        # two programs per attention tile; with fewer (e.g. R = 1 under the interpreter) the split is off
        kvs = int(2 * ga * H * -(-sa // bq) <= R)
    aow = {"loop": 0, "late": 1, "early": 2}.get(o["ao_weights"], -1)
    if aow < 0:
        raise ValueError(f"seqres: ao_weights={o['ao_weights']!r}: loop (attn_oproj's projection in block_n2-wide "
                         "column blocks), late (one D-wide block, its weights loaded after the key loop) or early "
                         "(loaded before it)")
    aow = aow if ao else 0
    afl = {"nested": 0, "flat": 1}.get(o["attn_loop"], -1)
    if afl < 0:
        raise ValueError(f"seqres: attn_loop={o['attn_loop']!r}: nested (a loop over tiles around a loop over key "
                         "blocks) or flat (one loop over the (tile, key block) pairs)")
    if afl:
        why = [w for c, w in ((not (flat and o["attn_presplit"]), "gemm_loop flat or nested with attn_presplit=true"),
                              (ao, "attn_oproj=false"), (apk > 1, "attn_pack=1")) if c]
        if why:
            raise ValueError(f"seqres: attn_loop=flat needs {', '.join(why)}; set attn_loop=nested")
    f2_case = o["ffn2_scheme"] == "case"  # the case config's choice (``schemes: {ffn2: ...}``), else f16_w1
    f2 = case.scheme("ffn2", "f16_w1") if f2_case else o["ffn2_scheme"]
    f2h = {"bf16x3": 0, "f16_w1": 1}.get(f2, -1)
    if f2h < 0:
        raise ValueError(f"seqres: ffn2_scheme={f2!r}: bf16x3 (three bf16 products), f16_w1 (A split into fp16 "
                         "hi/lo, W2 rounded to fp16 once: two products) or case (the case config's schemes.ffn2, else "
                         f"f16_w1){' (from the case config)' if f2_case else ''}")
    info["ffn2_scheme"] = f2
    if f2h and not flat:  # (the tiled loop splits its operands per K step in bf16)
        info["ffn2_scheme_note"] = "ffn2_scheme=f16_w1 applies to gemm_loop flat or nested: bf16x3 here"
        f2h = 0
    f1_case = o["ffn1_scheme"] == "case"  # the case config's choice (its ``schemes: {ffn1: ...}``), else bf16x3
    f1 = case.scheme("ffn1", "bf16x3") if f1_case else o["ffn1_scheme"]
    f1h = {"bf16x3": 0, "f16_w1": 1}.get(f1, -1)
    if f1h < 0:
        raise ValueError(f"seqres: ffn1_scheme={f1!r}: bf16x3 (three bf16 products), f16_w1 (A split into fp16 "
                         "hi/lo, W1 rounded to fp16 once: two products) or case (the case config's schemes.ffn1, "
                         f"else bf16x3){' (from the case config)' if f1_case else ''}")
    if f1h and (not flat or lnf):  # (ln_fold writes LN2's split from the attention phase, in bf16)
        if not f1_case:
            raise ValueError("seqres: ffn1_scheme=f16_w1 needs gemm_loop flat or nested without ln_fold; set "
                             "ffn1_scheme=bf16x3")
        # the case's preference gives way: bf16x3 is the more accurate scheme
        info["ffn1_scheme_note"] = "the case's ffn1_scheme f16_w1 needs gemm_loop flat or nested without ln_fold: bf16x3 here"
        f1, f1h = "bf16x3", 0
    info["ffn1_scheme"] = f1
    wch = {"wait": 0, "async": 1, "overlap": 2}.get(o["wgmma_chain"], -1)
    if wch < 0:
        raise ValueError(f"seqres: wgmma_chain={o['wgmma_chain']!r}: wait (Triton waits after every dot), async "
                         "(the waits between the chained dots of a step are relaxed at compile time) or overlap "
                         "(async, and a step's dots stay in flight into the next step)")
    bn = narrow_block_n(o["block_n"], M, D, R, bm, bk) if flat else _block(
        64 if o["block_n"] == "auto" else o["block_n"], 4 * D)
    meta = dict(
        S=S, D=D, H=H, DH=dh, L=L, L_FAST=fast_layers, G=G, CAUSAL=bool(case.causal),
        R=R, BLOCK_R=_pow2(R), FLAGS=_barrier_mode(o["barrier"], interpret) if (R > 1 or o["flag_barrier"]) else 0,
        BM=bm, BN=bn, BK=bk,
        BQ=bq, BKV=_block(o["block_kv"], sa), BDH=_block(dh, dh), APK=apk,
        BD=_pow2(D), BM_LN=_block(o["block_m_ln"], M, lo=1),
        # .cg (L2) loads where other programs wrote the data, or where this program's atomics did (the fusions)
        CM=".cg" if R > 1 or ff or ao else "",
        LN_STATS={"twopass": 0, "chunked": 1}[o["ln_stats"]], LN_CHUNK=_block(o["ln_chunk"], D),
        BLOCKED={"strided": False, "blocked": True}[o["tile_order"]], PRESPLIT=presplit,
        FLAT=flat, TRACE=bool(o["trace"]), WROWS=wrows,
        BNQ=wide_block_n(o["block_n_wide"], bn, M, 3 * D, R, bm),
        BNF=wide_block_n(o["block_n_wide"], bn, M, 4 * D, R, bm),
        SK=stream_k(o["stream_k"], M, D, R, bm, bn) and bool(flat),
        AS=bool(o["attn_presplit"]) and bool(flat), GE=_gelu_mode(o["gelu"]),
        AST=int(o["attn_stages"]), NEST=o["gemm_loop"] == "nested",
        FF=ff, BH=_block(o["block_h"], 4 * D), BN2=_block(o["block_n2"], D), AO=ao, LNF=lnf,
        # NCNT: counters per group (LNF), set below from the attention and FFN tiles
        NCNT=0, LNL=lnl, ARS=ars, WCH=wch, FTR=ftr, CPF=cpf, KVS=kvs, AOW=aow, AFL=afl, F2H=f2h, F1H=f1h,
        P_QKV=precs["prec_qkv"], P_ATTN=precs["prec_attn"], P_O=precs["prec_o"], P_FFN1=precs["prec_ffn1"],
        P_FFN2=precs["prec_ffn2"], P_FAST=precs["prec_fast"],
    )
    if lnf:  # a counter per (sequence, query block) and one per FFN row block
        meta["NCNT"] = G * -(-S // meta["BQ"]) + -(-M // bm)
    launch = dict(num_warps=int(o["num_warps"]), num_stages=int(o["num_stages"]))
    if int(o["maxnreg"]) > 0:  # register cap per thread (ptxas), e.g. to fit more CTAs per SM
        launch["maxnreg"] = int(o["maxnreg"])
    info.update(G=G, R=R, grid=n_groups * R, precisions=precs, fast_layers=fast_layers)
    return meta, launch, info


def prepare(case: Case, weights: Weights, **params) -> SeqresPrepared:
    """Lay the weights out for the kernel and fix the schedule (parameters: ``DEFAULTS``,
    ``config/variant/seqres.yaml``). ``tune`` (``kernels/tuning.py``): ``committed`` (default) takes this
    GPU's tuned file for the case (``config/tuned/<gpu>/<case>.yaml``, or ``tuned_file``) and compiles one
    configuration; ``search`` times the candidates of ``config/search/seqres.yaml`` on top of the parameters
    given and keeps the fastest (CUDA only; ``info["tune"]`` records them); ``off`` runs the parameters as given.
    ``info["params"]`` is the full parameter set prepared (``rebind`` prepares it again with other weights)."""
    mode, params, tinfo = tuning.resolve("seqres", case, weights.device, params, DEFAULTS)
    if mode == "search" and weights.device.type == "cuda" and not interpreting():
        p = _prepare_search(case, weights, params, tinfo.get("search_space"))
    else:
        p = prepare_one(case, weights, **params)
    if mode == "committed":
        p.info["tuned"] = tinfo
    return p


def tune_candidates(params: dict, space=None) -> list[tuple[dict, dict]]:
    """(override, full parameter set) of each candidate ``tune=search`` tries for ``params``: the parameters as
    given, then each candidate of the search space (``space``: ``tuning.search_space``) on top (every set with
    ``tune: off``)."""
    base = {k: v for k, v in params.items() if k not in ("tuned_file", "search_space")}
    base["tune"] = "off"
    return [(dict(o), dict(base, **o)) for o in [{}] + tuning.search_space("seqres", space)]


def _time_launch(case: Case, dev):
    """``time_one`` for ``tuning.search``: one launch after an L2 flush, CUDA events around it (ms)."""
    x = torch.randn(case.B, case.S, case.D, device=dev, dtype=torch.float32)
    y = torch.empty_like(x)
    flush = torch.empty(64 * 2**20, device=dev, dtype=torch.int32)  # 256 MB, more than L2
    warm = set()

    def time_one(p: SeqresPrepared) -> float:
        if id(p) not in warm:  # first launch (module load) outside the timing
            run(p, x)
            warm.add(id(p))
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch(p, x, y)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    return time_one


def _prepare_search(case: Case, weights: Weights, params: dict, space=None) -> SeqresPrepared:
    """``tune=search``: every candidate prepared and timed (``tuning.search``); candidates the case does not
    support (``Unsupported``, ``ValueError``, or a kernel that does not fit: ``OutOfResources``) are skipped and
    recorded. Untimed by SPEC §5 (prepare)."""
    margin = float(params.get("tune_margin", DEFAULTS.get("tune_margin", 0.03)))
    cands = tune_candidates(params, space)
    chosen, info, sets = tuning.search(
        lambda **full: prepare_one(case, weights, **full), _time_launch(case, weights.device), cands[0][1],
        [o for o, _ in cands[1:]], margin, set(DEFAULTS), skip=(Unsupported, ValueError, OutOfResources))
    chosen.info["tune"] = info
    chosen.tune_sets = sets
    torch.cuda.empty_cache()
    return chosen


def alternates(p: SeqresPrepared, weights: Weights) -> list:
    """The candidates ``tune=search`` timed but did not choose, as (label, make) with ``make()`` preparing one on
    its own (``Variant.alternates``: the correctness stage gates them all, one at a time). Empty when ``p`` was
    not searched. Labels: the candidate's overrides."""
    chosen = (p.info.get("tune") or {}).get("chosen")
    return [(str(over), lambda full=full: prepare_one(p.case, weights, **full))
            for i, (over, full) in enumerate(p.tune_sets) if i != chosen]


def rebind(p: SeqresPrepared, weights: Weights) -> SeqresPrepared:
    """The configuration ``p`` runs, prepared with other weights (``Variant.rebind``: no new tuning choice)."""
    return prepare_one(p.case, weights, **dict(p.info["params"], tune="off"))


def prepare_one(case: Case, weights: Weights, **params) -> SeqresPrepared:
    """``prepare`` for one parameter set (``tune`` is not looked at).

    ``seqs_per_program`` (G): consecutive sequences one group owns; 0 = auto (smallest G with at most
    ``2 * SMs`` groups). ``split`` (R): co-resident programs per group sharing every phase's tiles through
    flag barriers; 0 = auto (as many as fit on the SMs, at most ``max_split``); forced to 1 under the
    interpreter and when the grid would exceed the proven co-resident slots: one per SM, or with
    ``ctas_per_sm`` > 1 the compiled kernel's measured occupancy (at most ``ctas_per_sm``) per SM.
    ``flag_barrier`` runs the flag protocol even when R == 1 (tests). ``fast_layers``: the last layers
    whose four GEMMs use ``prec_fast``."""
    dev = weights.device
    if dev.type != "cuda" and not interpreting():
        raise Unsupported("seqres needs a CUDA device, or TRITON_INTERPRET=1 set before importing kernels")
    n_sm = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
    cps = int(params.get("ctas_per_sm", DEFAULTS["ctas_per_sm"]))
    meta, launch_opts, info = prepare_meta(case, n_sm, interpreting(), n_slots=n_sm * max(1, cps), **params)
    B, S, D = case.B, case.S, case.D
    tensors = [
        _stack(weights, "ln1_w"), _stack(weights, "ln1_b"),
        _stack(weights, "w_qkv", True), _stack(weights, "b_qkv"),
        _stack(weights, "w_o", True), _stack(weights, "b_o"),
        _stack(weights, "ln2_w"), _stack(weights, "ln2_b"),
        _stack(weights, "w_1", True), _stack(weights, "b_1"),
        _stack(weights, "w_2", True), _stack(weights, "b_2"),
        weights.lnf_w.contiguous(), weights.lnf_b.contiguous(),
    ]
    if meta["PRESPLIT"]:
        for i in (2, 4, 8, 10):  # w_qkv, w_o, w_1, w_2 (transposed) [L, K, N] -> [L, WROWS*K, N], rows hi, lo(, hi)
            if (i == 10 and meta["F2H"]) or (i == 8 and meta["F1H"]):  # f16_w1: W2 / W1 rounded to fp16 once
                # (fp32-held: interpreter)
                w16 = tensors[i].to(torch.float16)
                tensors[i] = (w16.float() if meta["PRESPLIT"] == 2 else w16).contiguous()
                continue
            hi, lo = _split_bf16(tensors[i], as_fp32=meta["PRESPLIT"] == 2)
            parts = [hi, lo, hi][:meta["WROWS"]]
            tensors[i] = torch.stack(parts, dim=2).reshape(hi.shape[0], len(parts) * hi.shape[1], hi.shape[2])
    f32 = dict(device=dev, dtype=torch.float32)
    scratch = dict(a=torch.empty(B * S, D, **f32), qkv=torch.empty(B * S, 3 * D, **f32),
                   f=torch.empty(B * S, 4 * D, **f32))
    if meta["FLAT"]:  # pre-split A operands: bf16 parts (fp32 tensors holding bf16 values in the interpreter)
        sd = dict(device=dev, dtype=torch.bfloat16 if meta["PRESPLIT"] == 1 else torch.float32)
        scratch.update(x_hi=torch.empty(B * S, D, **sd), x_lo=torch.empty(B * S, D, **sd),
                       f_hi=torch.empty(B * S, 4 * D, **sd), f_lo=torch.empty(B * S, 4 * D, **sd))
    else:
        scratch.update(x_hi=scratch["a"], x_lo=scratch["a"], f_hi=scratch["f"], f_lo=scratch["f"])
    n_groups = B // meta["G"]

    def make(meta, launch_opts, info):
        n_bar = _barriers_per_launch(meta, case.L)
        # attn_kv_split: each group's [R, 2, BQ] softmax states in the fp32 qkv scratch (free with attn_presplit;
        # R <= 16 programs and BQ <= G * S rows make that at most 32 rows' worth of [B*S, 3D])
        assert not meta.get("KVS") or n_groups * meta["R"] * 2 * meta["BQ"] <= scratch["qkv"].numel()
        return SeqresPrepared(
            case=case, tensors=tensors, scratch=scratch,
            flags=torch.zeros(n_groups, meta["BLOCK_R"] * (2 if meta.get("KVS") else 1), device=dev,
                              dtype=torch.int32),
            cnt=torch.zeros(n_groups, max(1, meta["NCNT"]), device=dev, dtype=torch.int32),
            trace=torch.zeros(*((info["grid"], 2 * n_bar + 2) if meta["TRACE"] else (1,)), device=dev,
                              dtype=torch.int64),
            err=torch.zeros(1, device=dev, dtype=torch.int32), grid=(info["grid"],), meta=meta, launch=launch_opts,
            qk_scale=math.log2(math.e) / math.sqrt(case.dh),
            spin_limit=int(params.get("spin_limit", DEFAULTS["spin_limit"])), info=info)

    p = make(meta, launch_opts, info)
    over = dict(params)
    fit_smem = bool(params.get("fit_smem", DEFAULTS["fit_smem"]))
    for _ in range(8 if dev.type == "cuda" else 0):
        # more shared memory than one program may have (e.g. block_kv=128 with pipelined attention on case 1):
        # shrink the attention's buffers (fit_smem) or say which parameters to lower
        try:
            compile_only(p)
            break
        except OutOfResources as e:
            fit = smem_overflow_step(p.meta, fit_smem, e, launch_opts["num_stages"])
            over.update(fit)
            meta, launch_opts, info = prepare_meta(case, n_sm, False, n_slots=n_sm * max(1, cps), **over)
            info["smem_fit"] = dict(fit, shared_before=e.required, shared_limit=e.limit)
            p = make(meta, launch_opts, info)
    if dev.type == "cuda" and cps > 1 and meta["R"] > 1:
        # more than one program per SM: prove co-residency from the compiled kernel's occupancy. When shared
        # memory alone keeps the programs off the SM (fit_smem), shrink the attention's buffers and recompile;
        # otherwise shrink the split until the grid fits the proven slots (R changes the binary: recheck)
        for _ in range(8):
            k = compile_only(p)
            occ = occupancy(k, launch_opts["num_warps"], dev)
            p.info["occupancy"] = occ
            if p.meta["R"] == 1 or p.grid[0] <= n_sm * occ:
                break
            fit = (smem_fit_step(p.meta, k.n_regs, k.metadata.shared, launch_opts["num_warps"], occ, cps,
                                 launch_opts["num_stages"]) if fit_smem else None)
            if fit:
                over.update(fit)
                meta, launch_opts, info = prepare_meta(case, n_sm, False, n_slots=n_sm * cps, **over)
                info["smem_fit"] = dict(fit, shared_before=k.metadata.shared, occupancy_before=occ)
            else:
                meta, launch_opts, info = prepare_meta(case, n_sm, False, n_slots=n_sm * max(1, min(occ, cps)),
                                                       **over)
                info["occupancy"] = occ
                if "smem_fit" in p.info:
                    info["smem_fit"] = p.info["smem_fit"]
            p = make(meta, launch_opts, info)
        else:
            raise Unsupported(f"seqres: could not fit the split grid to the proven co-resident slots ({p.info})")
    p.info["params"] = {k: v for k, v in over.items() if k not in ("tune", "tuned_file", "search_space")}
    if dev.type == "cuda":  # launch the compiled kernel directly: Triton's per-call argument binding and
        p.kernel = compile_only(p)  # specialization key cost tens of µs of host time per call
        p.runner = p.kernel[(p.grid[0], 1, 1)]
        p.const_args = constexpr_args(p.meta)
        p.static_ptrs = static_pointers(p)
    return p


def direct_args(p: SeqresPrepared, x: torch.Tensor, y: torch.Tensor) -> tuple:
    """``runtime_args`` as the direct launch passes them: x and y as tensors, the long-lived tensors between them
    and spin_limit as addresses (``static_pointers``, resolved once by prepare)."""
    args = runtime_args(p, x, y)
    return (x, y, *(p.static_ptrs or static_pointers(p)), *args[-4:])


def static_pointers(p: SeqresPrepared) -> tuple:
    """The arguments of ``runtime_args`` between y and spin_limit (scratch, weights, flags, counters, err,
    trace: tensors that live as long as ``p`` and are never reallocated) as device addresses. Triton's launcher
    takes an int as a pointer as it is, where a tensor costs a ``data_ptr()`` call and a driver query
    (``cuPointerGetAttribute``) per argument (~28 of them: the launcher's host time fell from 14.5 to 10.5 µs per
    launch on case 5, docs/seqres.md)."""
    args = runtime_args(p, p.scratch["a"], p.scratch["a"])[2:-4]
    return tuple(a.data_ptr() for a in args)


def constexpr_args(meta: dict) -> list:
    """``meta``'s values in kernel-signature order: every argument from ``S`` on is a constexpr."""
    names = _seqres_fwd.arg_names
    return [meta[n] for n in names[names.index("S"):]]


def smem_fit_step(meta: dict, n_regs: int, shared: int, num_warps: int, occ: int, cps: int,
                  num_stages: int = 3) -> dict | None:
    """Parameter changes that may let ``cps`` programs share an SM when shared memory alone stops them
    (registers and threads would allow it): ``_smem_lever``. None when shared memory is not the limit or the
    attention's buffers are already at their floor."""
    if occ >= cps or ctas_per_sm_limit(n_regs, 0, num_warps) < cps:
        return None
    if ctas_per_sm_limit(n_regs, shared, num_warps) >= cps:
        return None
    return _smem_lever(meta, num_stages)


def _smem_lever(meta: dict, num_stages: int) -> dict | None:
    """The shared memory lever of ``fit_smem``: first the pipelined attention loops of the flat GEMM loops (their
    buffers are bf16 q, k, v parts) down to 2 stages, which keeps the query and key tiles (session 18: case 9's
    64-row tiles on 2 stages, 1.5-2.7% faster than 32-row tiles on 3); then block_q and block_kv halved (>= 16).
    None at the floor."""
    if meta.get("FLAT") and meta.get("AS") and (meta["AST"] or num_stages) > 2:
        return dict(attn_stages=2)
    if max(meta["BQ"], meta["BKV"]) <= 16:
        return None
    return dict(block_q=max(16, meta["BQ"] // 2), block_kv=max(16, meta["BKV"] // 2))


def smem_overflow_step(meta: dict, fit_smem: bool, err: OutOfResources, num_stages: int = 3) -> dict:
    """``_smem_lever`` (fewer attention stages, then the attention tile halved) after a compile that needed more
    shared memory than a program may have (``err``), when ``fit_smem`` allows it; otherwise raises Unsupported
    naming the parameters that set the shared memory."""
    fit = _smem_lever(meta, num_stages) if fit_smem and err.name == "shared memory" else None
    if fit:
        return fit
    if err.name != "shared memory":
        raise Unsupported(f"seqres: the compiled kernel is out of {err.name} ({err.required} > {err.limit})") from err
    raise Unsupported(f"seqres: the kernel needs {err.required} bytes of shared memory, a program may have "
                      f"{err.limit}: lower block_kv / block_q / attn_stages (attention) or num_stages / block_n / "
                      f"block_n_wide (GEMMs){'' if fit_smem else ', or set fit_smem=true'}") from err


def _scratch_args(p: SeqresPrepared) -> tuple:
    s = p.scratch
    return s["a"], s["qkv"], s["f"], s["x_hi"], s["x_lo"], s["f_hi"], s["f_lo"]


def runtime_args(p: SeqresPrepared, x: torch.Tensor, y: torch.Tensor, spin: int | None = None) -> tuple:
    """The non-constexpr arguments of ``_seqres_fwd`` in signature order, for ``launch`` and ``compile_only``
    alike (one list, so the compile and the launch cannot drift apart; ``tests/test_seqres.py`` binds it to the
    kernel's signature). The direct launch passes the same list with addresses for the long-lived tensors
    (``direct_args``)."""
    if spin is None:
        spin = p.spin_limit if p.spin_limit > 0 else 2**31 - 1
    return (x, y, *_scratch_args(p), *p.tensors, p.flags, p.cnt, p.err, p.trace, spin, p.epoch, p.cepoch,
            p.qk_scale)


def compile_context(meta: dict):
    """The context a compile of ``_seqres_fwd`` with constexprs ``meta`` runs in: ``acc_reset: flag`` (ARS 2) and
    ``wgmma_chain: async | overlap`` (WCH 1 | 2) are compile-time edits of Triton's sm_90 pipeline
    (``kernels.common.wgmma_passes``); the constexprs are in Triton's cache key, so edited and unedited binaries
    never stand in for each other."""
    if meta.get("ARS") == 2 or meta.get("WCH", 0) > 0:
        return hopper_wgmma_passes(acc_init=meta.get("ARS") == 2, relax=meta.get("WCH", 0) > 0,
                                   defer=meta.get("WCH") == 2)
    return contextlib.nullcontext()


def compile_only(p: SeqresPrepared):
    """Compile (no launch) and load the kernel for ``p``; returns Triton's CompiledKernel."""
    x = p.scratch["a"]
    with compile_context(p.meta):
        k = _seqres_fwd.warmup(*runtime_args(p, x, x, spin=1), grid=p.grid, **p.meta, **p.launch)
    k._init_handles()
    return k


def occupancy(k, num_warps: int, dev) -> int:
    """Resident CTAs per SM of compiled kernel ``k`` on ``dev`` (see ``ctas_per_sm_limit``)."""
    props = torch.cuda.get_device_properties(dev)
    return ctas_per_sm_limit(k.n_regs, k.metadata.shared, num_warps,
                             regs_sm=getattr(props, "regs_per_multiprocessor", 65536),
                             smem_sm=getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
                             threads_sm=getattr(props, "max_threads_per_multi_processor", 2048))


def ctas_per_sm_limit(n_regs: int, shared: int, num_warps: int, regs_sm: int = 65536,
                      smem_sm: int = 228 * 1024, threads_sm: int = 2048) -> int:
    """CTAs of one kernel that fit on an SM: registers allocated per warp in 256-register units, shared
    memory plus 1 KiB reserved per CTA, threads; at most 32."""
    regs_warp = -(-n_regs * 32 // 256) * 256
    by_regs = regs_sm // max(1, regs_warp * num_warps)
    by_smem = smem_sm // (shared + 1024)
    by_thr = threads_sm // (32 * num_warps)
    return max(0, min(by_regs, by_smem, by_thr, 32))


def launch(p: SeqresPrepared, x: torch.Tensor, y: torch.Tensor):
    """One launch of the megakernel: y = forward(x). Returns Triton's compiled kernel (registers, spills).
    With ``p.kernel`` (prepared on CUDA) the compiled binary is launched directly when x and y have the
    16-byte alignment it was specialized for (torch allocations do); otherwise through Triton's JIT dispatch."""
    if p.runner is not None and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
        p.runner(*direct_args(p, x, y), *p.const_args)
        k = p.kernel
    else:
        with compile_context(p.meta):
            k = _seqres_fwd[p.grid](*runtime_args(p, x, y), **p.meta, **p.launch)
    p.epoch += p.barriers_per_launch
    p.cepoch += 1
    return k


def run(p: SeqresPrepared, x: torch.Tensor) -> torch.Tensor:
    """x: [B, S, D] fp32 contiguous -> y: [B, S, D] fp32 (fresh); x is only read.

    The flag epoch is a host-side launch argument: do not capture ``run`` in a CUDA graph with R > 1
    (replays would reuse the captured epoch and pass every barrier at once); use ``split: 1`` there."""
    c = p.case
    if x.shape != (c.B, c.S, c.D) or x.dtype != torch.float32 or not x.is_contiguous():
        raise ValueError(f"seqres: x must be contiguous fp32 {(c.B, c.S, c.D)}, got {x.dtype} {tuple(x.shape)}")
    # counter barriers count R per barrier: the counter reaches epoch * R
    limit = _EPOCH_LIMIT // (p.meta["BLOCK_R"] if p.meta["FLAGS"] >= 3 else 1)
    if p.epoch + p.barriers_per_launch >= limit:
        p.flags.zero_()
        p.epoch = 0
    # row-block counters (ln_fold) grow by L * (H or the FFN's hidden chunks) per launch
    if (p.cepoch + 1) * p.case.L * max(p.case.H, 4 * p.case.D) >= _EPOCH_LIMIT:
        p.cnt.zero_()
        p.cepoch = 0
    y = torch.empty_like(x)
    launch(p, x, y)
    if p.spin_limit > 0:
        bad = int(p.err.item())
        if bad:
            raise RuntimeError(f"seqres: a group barrier timed out at barrier {bad} "
                               f"(epoch {p.epoch - p.barriers_per_launch})")
    return y


PHASES_TILED = ("qkv", "attn", "oproj", "ffn1", "ffn2")
PHASES_FLAT = ("ln1", "qkv", "attn", "oproj", "ln2", "ffn1", "ffn2")


def flat_phases(meta: dict) -> tuple:
    """Names of a flat layer's phases, one per barrier: ``attn_oproj`` drops oproj (the attention phase adds
    its projection), ``ffn_fused`` merges ffn1 and ffn2 into ffn, ``ln_fold`` drops ln1 and ln2 (the last
    arrivals of the attention and FFN phases normalise); ``ln_local`` drops ln1 (the QKV programs normalise)."""
    names = [n for n in PHASES_FLAT if not (meta.get("AO") and n == "oproj")
             and not (meta.get("LNF") and n in ("ln1", "ln2")) and not (meta.get("LNL") and n == "ln1")]
    if meta.get("FF"):
        names = names[:-2] + ["ffn"]
    return tuple(names)


def phase_profile(p: SeqresPrepared) -> dict:
    """Where a traced launch (``trace: true``) spent its time, from the programs' %globaltimer stamps: per
    phase kind (summed over layers), the mean over programs of the work (previous departure to arrival)
    and of the barrier wait (arrival to departure), in microseconds; plus the copy phase, the final
    LayerNorm and the whole kernel (first start to last end). With ``copy_phase: fused`` the copy has no barrier
    of its own: it is counted in layer 0's ln1."""
    if not p.meta["TRACE"]:
        raise ValueError("seqres: phase_profile needs a launch prepared with trace=true")
    t = p.trace.double().cpu()
    t0 = t[:, 0].min()
    arr, dep = t[:, 1:-1:2], t[:, 2:-1:2]
    names = flat_phases(p.meta) if p.meta["FLAT"] else PHASES_TILED
    cpf = int(bool(p.meta.get("CPF")))
    work, wait = {}, {}
    for i in range(arr.shape[1]):
        k = names[(i - 1 + cpf) % len(names)] if i or cpf else "copy"
        prev = dep[:, i - 1] if i else t[:, 0]
        work[k] = work.get(k, 0.0) + float((arr[:, i] - prev).mean()) / 1e3
        wait[k] = wait.get(k, 0.0) + float((dep[:, i] - arr[:, i]).mean()) / 1e3
    work["final"] = float((t[:, -1] - dep[:, -1]).mean()) / 1e3
    return dict(kernel_us=float(t[:, -1].max() - t0) / 1e3, start_skew_us=float(t[:, 0].max() - t0) / 1e3,
                work_us=work, wait_us=wait)
