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

from ..common.occupancy import ctas_per_sm_limit, occupancy  # noqa: F401 (re-exported for the lab tools)
from ..common.split import split_hi_lo
from ..common.wgmma_passes import hopper_wgmma_passes
from .. import tuning
from ..cases import Case, variant_params
from ..registry import Unsupported
from ..validate import ParameterError, check_input, check_params, check_weights, integer, number, one_of, text
from ..weights import Weights
from .megakernel import BARRIERS_PER_LAYER, _seqres_fwd

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
    return 1 + _barriers_per_layer(meta) * L - int(meta["COPY_PHASE"] == "fused")


def _barriers_per_layer(meta: dict) -> int:
    """7 phases (LN1, QKV, attention, oproj, LN2, FFN1, FFN2), less the ones the fusions drop."""
    return (int(BARRIERS_PER_LAYER.value) - int(bool(meta["FFN_FUSED"])) - int(bool(meta["ATTN_OPROJ"]))
            - int(bool(meta["LN_LOCAL"])))


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


DEFAULTS = variant_params("seqres")  # config/variant/seqres.yaml: the one place defaults live


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


def stream_k(want, M: int, D: int, R: int, BM: int, BN: int) -> bool:
    """Whether oproj and FFN2 (N = D) share their (tile, K step) pairs over the group's R programs: ``want``
    true/false, or "auto": only when their [BM, BN] tiles do not divide evenly over the R programs (otherwise
    the shares are whole tiles anyway and the atomics would only cost code)."""
    if want != "auto":
        return bool(want)
    return (-(-M // BM) * -(-D // BN)) % R != 0


_BARRIERS = {"flags": 2, "counter": 3, "counter_t0": 7}


def _barrier_mode(name: str, interpret: bool) -> int:
    """group_barrier's MODE for ``barrier``: 2 flags polled with ld.acquire, 3 one counter polled with ld.acquire,
    7 the counter published and polled by thread 0 alone (``tl_helpers.counter_t0``); the interpreter has no inline
    PTX, so it polls with atomics (2 -> 1, 3 and 7 -> 4)."""
    if name not in _BARRIERS:
        raise ParameterError(f"seqres: barrier={name!r} not in {sorted(_BARRIERS)}")
    mode = _BARRIERS[name]
    if interpret:
        mode = {2: 1, 3: 4, 7: 4}[mode]
    return mode


# the values each enumerated or boolean parameter may take (the others are numbers)
CHOICES = {
    "barrier": tuple(_BARRIERS), "gemm_loop": ("flat", "nested"), "wgmma_chain": ("wait", "async"),
    "copy_phase": ("fused", "separate"), "ao_weights": ("loop", "late", "early"), "attn_loop": ("nested", "flat"),
    "ffn1_scheme": ("case", "bf16x3", "f16_w1"), "ffn2_scheme": ("case", "bf16x3", "f16_w1"), "stream_k": (True, False, "auto"),
    "ln_local": (False, "qkv"), "prec_attn": PRECISIONS,
    **{k: (True, False) for k in ("attn_fill", "fit_smem", "flag_barrier", "trace", "attn_presplit", "ffn_fused",
                                  "attn_oproj", "attn_kv_split")},
}


# what each numeric parameter may take (tile edges are powers of two: Triton's are)
NUMBERS = {
    "num_warps": integer(1, 16, pow2=True), "num_stages": integer(1, 8), "attn_stages": integer(0, 8),
    **{k: integer(16, pow2=True) for k in ("block_m", "block_k", "block_q", "block_kv", "block_h", "block_n2")},
    "block_n": integer(16, pow2=True, also=("auto",)), "block_n_wide": integer(16, pow2=True, also=(0, "auto")),
    "block_m_ln": integer(1, pow2=True), "seqs_per_program": integer(0), "split": integer(0), "max_split": integer(1),
    "ctas_per_sm": integer(1, 32), "spin_limit": integer(0), "maxnreg": integer(0, 255), "attn_pack": integer(1),
    "max_seq": integer(1), "max_d": integer(1), "scratch_limit_gib": number(0), "tune_margin": number(0, 1),
    "tune": one_of(*tuning.TUNE_MODES), "tuned_file": text(also=(None,)), "search_space": text(also=(None,)),
}
SPEC = {**{k: one_of(*v) for k, v in CHOICES.items()}, **NUMBERS}


def _options(params: dict) -> dict:
    """``DEFAULTS`` updated with ``params``, every name known and every value allowed (else ``ParameterError``)."""
    o = dict(DEFAULTS, **params)
    check_params("seqres", o, SPEC, known=DEFAULTS)
    return o


def _check_envelope(case: Case, o: dict) -> None:
    """Raises Unsupported for a case outside the kernel's envelope (``max_seq``, ``max_d``, ``scratch_limit_gib``)."""
    if case.S > o["max_seq"]:
        raise Unsupported(f"seqres: S={case.S} > max_seq={o['max_seq']}: the sequence does not fit one group")
    if case.D > o["max_d"]:
        raise Unsupported(f"seqres: D={case.D} > max_d={o['max_d']}: the model width is outside the envelope")
    scratch_bytes = 4 * case.B * case.S * 8 * case.D
    if scratch_bytes > o["scratch_limit_gib"] * 2**30:
        raise Unsupported(f"seqres: scratch of {scratch_bytes / 2**30:.1f} GiB > {o['scratch_limit_gib']} GiB")


def _group(case: Case, o: dict, n_sm: int, n_slots: int, interpret: bool, info: dict) -> tuple[int, int]:
    """(G, R): sequences per group (``seqs_per_program``; 0 = the fewest that leave <= 2 groups per SM) and programs
    per group (``split``; 0 = as many as the proven co-resident slots allow, at most ``max_split``; 1 under the
    interpreter or when the grid would exceed the slots, with a note in ``info``)."""
    B = case.B
    G = int(o["seqs_per_program"])
    if G <= 0:
        G = 1
        while B % (2 * G) == 0 and B // G > 2 * n_sm:
            G *= 2
    if B % G:
        raise ParameterError(f"seqres: seqs_per_program={G} does not divide B={B}")
    n_groups = B // G
    R = int(o["split"])
    if R <= 0:
        R = max(1, min(int(o["max_split"]), n_slots // n_groups))
    if interpret and R > 1:
        info["split_note"] = f"split={R} needs co-resident programs; the interpreter runs them in order: using 1"
        R = 1
    if R > 1 and n_groups * R > n_slots:
        # co-residency: every program of a group must be resident while its peers spin. Guaranteed
        # with grid <= n_slots (one program per SM, or the measured occupancy; see prepare).
        info["split_note"] = (f"split={R}: grid {n_groups * R} > {n_slots} co-resident slots cannot be proven "
                              "co-resident; using 1")
        R = 1
    return G, R


def _check_fusions(case: Case, o: dict, apk: int, G: int) -> None:
    """The combinations of the attention and fusion options that the kernel has no code for."""
    if apk < 1 or G % apk:
        raise ParameterError(f"seqres: attn_pack={o['attn_pack']!r}: sequences per attention tile, >= 1 and dividing "
                         f"seqs_per_program={G}")
    if o["attn_oproj"] and not o["attn_presplit"]:
        raise ParameterError("seqres: attn_oproj=true needs attn_presplit=true")
    if o["ln_local"] and not o["attn_presplit"]:
        raise ParameterError("seqres: ln_local needs attn_presplit=true")
    if o["ln_local"] and _pow2(case.D) > LN_LOCAL_MAX_D:
        raise ParameterError(f"seqres: ln_local keeps a [block_m, D] LayerNorm row block in registers: D={case.D} > "
                         f"{LN_LOCAL_MAX_D}; set ln_local=false")
    if o["attn_loop"] == "flat":
        why = [w for c, w in ((not o["attn_presplit"], "attn_presplit=true"), (o["attn_oproj"], "attn_oproj=false"),
                              (apk > 1, "attn_pack=1")) if c]
        if why:
            raise ParameterError(f"seqres: attn_loop=flat needs {', '.join(why)}; set attn_loop=nested")


def _kv_split(case: Case, o: dict, sa: int, apk: int, tiles: int, R: int) -> bool:
    """``attn_kv_split``: two programs per attention tile (off where a tile has no second program, e.g. R = 1
    under the interpreter). Raises where the configuration cannot run it."""
    if not o["attn_kv_split"]:
        return False
    bkv = _block(o["block_kv"], sa)
    why = [w for c, w in ((not o["attn_oproj"], "attn_oproj=true"), (case.causal, "a non-causal case"),
                          (apk > 1, "attn_pack=1"),
                          (-(-sa // bkv) % 2, f"an even number of key blocks (S={sa}, block_kv={bkv})")) if c]
    if why:
        raise ParameterError(f"seqres: attn_kv_split=true needs {', '.join(why)}; set attn_kv_split=false")
    return 2 * tiles <= R


def prepare_meta(case: Case, n_sm: int, interpret: bool = False, n_slots: int | None = None,
                 **params) -> tuple[dict, dict, dict]:
    """The schedule for ``case`` on a device with ``n_sm`` SMs: (constexpr kernel args, launch options,
    info). ``n_slots``: CTAs that are proven co-resident (default ``n_sm``: one per SM, true of any kernel
    that launches at all; ``prepare`` raises it from the compiled kernel's occupancy when
    ``ctas_per_sm`` > 1). The constexprs are the parameters in capitals where the kernel takes them as given,
    plus what is derived here: the group (G, R), tile edges clamped to powers of two, the barrier mode, the
    auto widths and stream-K, the case's FFN1 scheme. Raises Unsupported outside the envelope. Device-free, so
    ``bench.seqres.aot_check`` can use it."""
    o = _options(params)
    _check_envelope(case, o)
    S, D, H = case.S, case.D, case.H
    n_slots = n_sm if n_slots is None else int(n_slots)
    info = {"n_sm": n_sm, "n_slots": n_slots}
    if interpret and o["trace"]:
        raise ParameterError("seqres: trace=true reads the GPU's %globaltimer; the Triton interpreter cannot run it")
    G, R = _group(case, o, n_sm, n_slots, interpret, info)
    apk = int(o["attn_pack"])
    _check_fusions(case, o, apk, G)
    M, dh = G * S, case.dh
    bm, bk = _block(o["block_m"], M), _block(o["block_k"], D)
    sa, ga = S * apk, G // apk  # the attention phase's packs: ga packs of sa rows
    bq = _block(o["block_q"], sa)
    while o["attn_fill"] and bq > 16 and ga * H * -(-sa // bq) < R:  # every program gets an attention tile
        bq //= 2
    bn = narrow_block_n(o["block_n"], M, D, R, bm, bk)
    ao, ff = bool(o["attn_oproj"]), bool(o["ffn_fused"])
    f1 = case.scheme("ffn1", "bf16x3") if o["ffn1_scheme"] == "case" else o["ffn1_scheme"]
    f2 = case.scheme("ffn2", "f16_w1") if o["ffn2_scheme"] == "case" else o["ffn2_scheme"]
    for g, sc in (("ffn1", f1), ("ffn2", f2)):
        if sc not in ("bf16x3", "f16_w1"):
            raise ParameterError(f"seqres: {g}_scheme={sc!r} (from the case config) not in ['bf16x3', 'f16_w1']")
    info["ffn2_scheme"] = f2
    info["ffn1_scheme"] = f1
    prec_attn = "ieee" if interpret and o["prec_attn"] == "bf16x3" else o["prec_attn"]  # (no bf16 in the interpreter)
    meta = dict(
        S=S, D=D, H=H, DH=dh, L=case.L, SEQS_PER_PROGRAM=G, CAUSAL=bool(case.causal),
        SPLIT=R, BLOCK_R=_pow2(R), BARRIER=_barrier_mode(o["barrier"],
                               interpret) if (R > 1 or o["flag_barrier"]) else 0,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, BLOCK_Q=bq, BLOCK_KV=_block(o["block_kv"], sa),
        BLOCK_DH=_block(dh, dh), BLOCK_D=_pow2(D), BLOCK_M_LN=_block(o["block_m_ln"], M, lo=1),
        # .cg (L2) loads where other programs wrote the data, or where this program's atomics did (the fusions)
        CACHE_MOD=".cg" if R > 1 or ff or ao else "",
        PRESPLIT=2 if interpret else 1, TRACE=bool(o["trace"]),
        BLOCK_N_QKV=wide_block_n(o["block_n_wide"], bn, M, 3 * D, R, bm),
        BLOCK_N_FFN1=wide_block_n(o["block_n_wide"], bn, M, 4 * D, R, bm),
        STREAM_K=stream_k(o["stream_k"], M, D, R, bm, bn), ATTN_PRESPLIT=bool(o["attn_presplit"]),
        ATTN_STAGES=int(o["attn_stages"]), GEMM_LOOP=o["gemm_loop"], FFN_FUSED=ff,
        BLOCK_H=_block(o["block_h"], 4 * D), BLOCK_N2=_block(o["block_n2"], D), ATTN_OPROJ=ao,
        LN_LOCAL=o["ln_local"] == "qkv", ATTN_PACK=apk, WGMMA_CHAIN=o["wgmma_chain"],
        # ln_local has no LN1 pass to carry the copy (its fused form measured slower, docs/seqres.md)
        COPY_PHASE="separate" if o["ln_local"] else o["copy_phase"],
        ATTN_KV_SPLIT=_kv_split(case, o, sa, apk, ga * H * -(-sa // bq), R),
        AO_WEIGHTS=o["ao_weights"] if ao else "loop", ATTN_LOOP=o["attn_loop"],
        FFN1_SCHEME=f1, FFN2_SCHEME=f2, PREC_ATTN=prec_attn,
    )
    launch = dict(num_warps=int(o["num_warps"]), num_stages=int(o["num_stages"]))
    if int(o["maxnreg"]) > 0:  # register cap per thread (ptxas), e.g. to fit more CTAs per SM
        launch["maxnreg"] = int(o["maxnreg"])
    info.update(G=G, R=R, grid=(case.B // G) * R)
    return meta, launch, info


def prepare(case: Case, weights: Weights, **params) -> SeqresPrepared:
    """Lay the weights out for the kernel and fix the schedule (parameters: ``DEFAULTS``,
    ``config/variant/seqres.yaml``). ``tune`` (``kernels/tuning.py``): ``committed`` (default) takes this
    GPU's tuned file for the case (``config/tuned/<gpu>/<case>.yaml``, or ``tuned_file``) and compiles one
    configuration; ``search`` times the candidates of ``config/search/seqres.yaml`` on top of the parameters
    given and keeps the fastest (CUDA only; ``info["tune"]`` records them); ``off`` runs the parameters as given.
    ``info["params"]`` is the full parameter set prepared (``rebind`` prepares it again with other weights)."""
    check_params("seqres", params, SPEC, known=DEFAULTS)
    ys = {}
    p, sets = tuning.prepare("seqres", case, weights, params, DEFAULTS, prepare_one,
                             lambda p, x: launch(p, x, ys.setdefault(0, torch.empty_like(x))),
                             search_on=weights.device.type == "cuda" and not interpreting(),
                             skip=(Unsupported, ValueError, OutOfResources))
    if sets is not None:
        p.tune_sets = sets
    return p


def tune_candidates(params: dict, space=None) -> list[tuple[dict, dict]]:
    """(override, full parameter set) of each candidate ``tune=search`` tries for ``params`` (what
    ``tuning.search`` prepares; for the lab tools): the parameters as given, then each candidate of the search space
    (``space``: ``tuning.search_space``) on top (every set with ``tune: off``)."""
    base = {k: v for k, v in params.items() if k not in tuning.TUNING_KEYS}
    base["tune"] = "off"
    return [(dict(o), dict(base, **o)) for o in [{}] + tuning.search_space("seqres", space)]


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
    ``ctas_per_sm`` > 1 the compiled kernel's measured occupancy (at most ``ctas_per_sm``) per SM
    (``_fit_to_device``). ``flag_barrier`` runs the flag protocol even when R == 1 (tests)."""
    dev = weights.device
    if dev.type != "cuda" and not interpreting():
        raise Unsupported("seqres needs a CUDA device, or TRITON_INTERPRET=1 set before importing kernels")
    n_sm = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
    cps = int(params.get("ctas_per_sm", DEFAULTS["ctas_per_sm"]))
    meta, launch_opts, info = prepare_meta(case, n_sm, interpreting(), n_slots=n_sm * max(1, cps), **params)
    check_weights("seqres", case, weights)  # (after the envelope: a case seqres does not run is Unsupported first)
    tensors = _weight_args(weights, meta)
    scratch = _scratch(case, meta, dev)
    spin_limit = int(params.get("spin_limit", DEFAULTS["spin_limit"]))

    def make(meta, launch_opts, info):
        return _prepared(case, tensors, scratch, meta, launch_opts, info, spin_limit)

    p = make(meta, launch_opts, info)
    if dev.type == "cuda":
        p = _fit_to_device(p, make, case, n_sm, cps, params)
        p.kernel = compile_only(p)  # launched directly: Triton's per-call argument binding and specialization key
        p.runner = p.kernel[(p.grid[0], 1, 1)]  # cost tens of µs of host time per call
        p.const_args = constexpr_args(p.meta)
        p.static_ptrs = static_pointers(p)
    p.info["params"] = {k: v for k, v in params.items() if k not in tuning.TUNING_KEYS}
    return p


def _weight_args(weights: Weights, meta: dict) -> list:
    """The weights in kernel argument order: per layer stacked [L, ...], the four linear weights transposed to
    [L, K, N] and presplit into bf16 (hi, lo) rows [L, 2K, N]; an f16_w1 weight (FFN1 / FFN2 scheme) rounded to
    fp16 once, one row each. Under the interpreter (PRESPLIT 2) the parts are fp32 tensors holding the values."""
    tensors = [
        _stack(weights, "ln1_w"), _stack(weights, "ln1_b"),
        _stack(weights, "w_qkv", True), _stack(weights, "b_qkv"),
        _stack(weights, "w_o", True), _stack(weights, "b_o"),
        _stack(weights, "ln2_w"), _stack(weights, "ln2_b"),
        _stack(weights, "w_1", True), _stack(weights, "b_1"),
        _stack(weights, "w_2", True), _stack(weights, "b_2"),
        weights.lnf_w.contiguous(), weights.lnf_b.contiguous(),
    ]
    fp32_held = meta["PRESPLIT"] == 2
    f16 = {8: meta["FFN1_SCHEME"] == "f16_w1", 10: meta["FFN2_SCHEME"] == "f16_w1"}
    for i in (2, 4, 8, 10):  # w_qkv, w_o, w_1, w_2
        if f16.get(i):
            w16 = tensors[i].to(torch.float16)
            tensors[i] = (w16.float() if fp32_held else w16).contiguous()
            continue
        hi, lo = _split_bf16(tensors[i], as_fp32=fp32_held)
        tensors[i] = torch.stack([hi, lo], dim=2).reshape(hi.shape[0], 2 * hi.shape[1], hi.shape[2])
    return tensors


def _scratch(case: Case, meta: dict, dev) -> dict:
    """Scratch reused across calls (no input-dependent state survives a call): fp32 a, qkv, f, and the split A
    operands x_hi/x_lo [B*S, D], f_hi/f_lo [B*S, 4D] (bf16; fp32-held under the interpreter)."""
    B, S, D = case.B, case.S, case.D
    f32 = dict(device=dev, dtype=torch.float32)
    sd = dict(device=dev, dtype=torch.bfloat16 if meta["PRESPLIT"] == 1 else torch.float32)
    return dict(a=torch.empty(B * S, D, **f32), qkv=torch.empty(B * S, 3 * D, **f32),
                f=torch.empty(B * S, 4 * D, **f32),
                x_hi=torch.empty(B * S, D, **sd), x_lo=torch.empty(B * S, D, **sd),
                f_hi=torch.empty(B * S, 4 * D, **sd), f_lo=torch.empty(B * S, 4 * D, **sd))


def _prepared(case: Case, tensors: list, scratch: dict, meta: dict, launch_opts: dict, info: dict,
              spin_limit: int) -> SeqresPrepared:
    """A SeqresPrepared for one schedule: flags, counters and trace sized for it."""
    dev = scratch["a"].device
    n_groups = case.B // meta["SEQS_PER_PROGRAM"]
    n_bar = _barriers_per_launch(meta, case.L)
    # attn_kv_split: each group's [R, 2, BLOCK_Q] softmax states in the fp32 qkv scratch (free with attn_presplit;
    # R <= 16 programs and BLOCK_Q <= G * S rows make that at most 32 rows' worth of [B*S, 3D])
    assert not meta["ATTN_KV_SPLIT"] or n_groups * meta["SPLIT"] * 2 * meta["BLOCK_Q"] <= scratch["qkv"].numel()
    return SeqresPrepared(
        case=case, tensors=tensors, scratch=scratch,
        flags=torch.zeros(n_groups, meta["BLOCK_R"] * (2 if meta["ATTN_KV_SPLIT"] else 1), device=dev,
                          dtype=torch.int32),
        cnt=torch.zeros(1, device=dev, dtype=torch.int32),
        trace=torch.zeros(*((info["grid"], 2 * n_bar + 2) if meta["TRACE"] else (1,)), device=dev,
                          dtype=torch.int64),
        err=torch.zeros(1, device=dev, dtype=torch.int32), grid=(info["grid"],), meta=meta, launch=launch_opts,
        qk_scale=math.log2(math.e) / math.sqrt(case.dh), spin_limit=spin_limit, info=info)


def _fit_to_device(p: SeqresPrepared, make, case: Case, n_sm: int, cps: int, params: dict) -> SeqresPrepared:
    """Compile ``p`` and fit it to the GPU: a kernel that needs more shared memory than one program may have gets
    its attention buffers shrunk (``fit_smem``) or raises Unsupported naming the parameters; with more than one
    program per SM (``ctas_per_sm``), co-residency is proven from the compiled kernel's occupancy: when shared
    memory alone keeps the programs off the SM the attention's buffers shrink, otherwise the split shrinks until
    the grid fits the proven slots (R changes the binary: recheck). ``make(meta, launch, info)`` builds a new
    SeqresPrepared on the same weights and scratch."""
    dev = p.scratch["a"].device
    over = dict(params)
    fit_smem = bool(params.get("fit_smem", DEFAULTS["fit_smem"]))
    for _ in range(8):
        try:
            compile_only(p)
            break
        except OutOfResources as e:
            fit = smem_overflow_step(p.meta, fit_smem, e, p.launch["num_stages"])
            over.update(fit)
            meta, launch_opts, info = prepare_meta(case, n_sm, False, n_slots=n_sm * max(1, cps), **over)
            info["smem_fit"] = dict(fit, shared_before=e.required, shared_limit=e.limit)
            p = make(meta, launch_opts, info)
    if cps <= 1 or p.meta["SPLIT"] <= 1:
        return p
    for _ in range(8):
        k = compile_only(p)
        occ = occupancy(k, p.launch["num_warps"], dev)
        p.info["occupancy"] = occ
        if p.meta["SPLIT"] == 1 or p.grid[0] <= n_sm * occ:
            return p
        fit = (smem_fit_step(p.meta, k.n_regs, k.metadata.shared, p.launch["num_warps"], occ, cps,
                             p.launch["num_stages"]) if fit_smem else None)
        if fit:
            over.update(fit)
            meta, launch_opts, info = prepare_meta(case, n_sm, False, n_slots=n_sm * cps, **over)
            info["smem_fit"] = dict(fit, shared_before=k.metadata.shared, occupancy_before=occ)
        else:
            meta, launch_opts, info = prepare_meta(case, n_sm, False, n_slots=n_sm * max(1, min(occ, cps)), **over)
            info["occupancy"] = occ
            if "smem_fit" in p.info:
                info["smem_fit"] = p.info["smem_fit"]
        p = make(meta, launch_opts, info)
    raise Unsupported(f"seqres: could not fit the split grid to the proven co-resident slots ({p.info})")


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
    """The shared memory lever of ``fit_smem``: first the pipelined attention loops (their buffers are bf16 q, k, v
    parts) down to 2 stages, which keeps the query and key tiles; then block_q and block_kv halved (>= 16). None at
    the floor."""
    if meta["ATTN_PRESPLIT"] and (meta["ATTN_STAGES"] or num_stages) > 2:
        return dict(attn_stages=2)
    if max(meta["BLOCK_Q"], meta["BLOCK_KV"]) <= 16:
        return None
    return dict(block_q=max(16, meta["BLOCK_Q"] // 2), block_kv=max(16, meta["BLOCK_KV"] // 2))


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
    """The context a compile of ``_seqres_fwd`` with constexprs ``meta`` runs in: compile-time edits of Triton's
    sm_90 pipeline (``kernels.common.wgmma_passes``): the flat loop's accumulator reset becomes the next dot's
    zero-accumulator predicate (always), and with ``wgmma_chain: async`` the waits between a step's chained dots are
    relaxed. ``WGMMA_CHAIN`` is a constexpr, so Triton's cache key tells the two binaries apart. The interpreter
    runs the source as written."""
    if interpreting():
        return contextlib.nullcontext()
    return hopper_wgmma_passes(acc_init=True, relax=meta["WGMMA_CHAIN"] == "async")


def compile_only(p: SeqresPrepared):
    """Compile (no launch) and load the kernel for ``p``; returns Triton's CompiledKernel."""
    x = p.scratch["a"]
    with compile_context(p.meta):
        k = _seqres_fwd.warmup(*runtime_args(p, x, x, spin=1), grid=p.grid, **p.meta, **p.launch)
    k._init_handles()
    return k


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
    check_input("seqres", p.case, x, p.flags.device)
    # counter barriers count R per barrier: the counter reaches epoch * R
    limit = _EPOCH_LIMIT // (p.meta["BLOCK_R"] if p.meta["BARRIER"] >= 3 else 1)
    if p.epoch + p.barriers_per_launch >= limit:
        p.flags.zero_()
        p.epoch = 0
    y = torch.empty_like(x)
    launch(p, x, y)
    if p.spin_limit > 0:
        bad = int(p.err.item())
        if bad:
            raise RuntimeError(f"seqres: a group barrier timed out at barrier {bad} "
                               f"(epoch {p.epoch - p.barriers_per_launch})")
    return y


PHASES = ("ln1", "qkv", "attn", "oproj", "ln2", "ffn1", "ffn2")


def layer_phases(meta: dict) -> tuple:
    """Names of a layer's phases, one per barrier: ``attn_oproj`` drops oproj (the attention phase adds its
    projection), ``ffn_fused`` merges ffn1 and ffn2 into ffn, ``ln_local`` drops ln1 (the QKV programs
    normalise)."""
    names = [n for n in PHASES if not (meta["ATTN_OPROJ"] and n == "oproj") and not (meta["LN_LOCAL"] and n == "ln1")]
    if meta["FFN_FUSED"]:
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
    names = layer_phases(p.meta)
    cpf = int(p.meta["COPY_PHASE"] == "fused")
    work, wait = {}, {}
    for i in range(arr.shape[1]):
        k = names[(i - 1 + cpf) % len(names)] if i or cpf else "copy"
        prev = dep[:, i - 1] if i else t[:, 0]
        work[k] = work.get(k, 0.0) + float((arr[:, i] - prev).mean()) / 1e3
        wait[k] = wait.get(k, 0.0) + float((dep[:, i] - arr[:, i]).mean()) / 1e3
    work["final"] = float((t[:, -1] - dep[:, -1]).mean()) / 1e3
    return dict(kernel_us=float(t[:, -1].max() - t0) / 1e3, start_skew_us=float(t[:, 0].max() - t0) / 1e3,
                work_us=work, wait_us=wait)
