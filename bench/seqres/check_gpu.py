"""GPU check of seqres: the SPEC §4 gate (all scales x seeds, reference with TF32 off) and the median time
(``kernels.timing``) next to the ``eager_sdpa`` peer, per case and per parameter set; one table at the end.

    python -m bench.seqres.check_gpu --out $OUT [--cases 1 5 6 7 9 10 11] [--sweep [--configs NAME ...]]
                                     [--budget-s 200] [--precompile 12]

``--sweep`` also tries the parameter sets of ``SWEEP`` (after the defaults of config/variant/seqres.yaml,
for every case first) until ``--budget-s`` is spent. Writes ``<out>/seqres_check.json`` (rewritten after
every case/config, so a timeout keeps what was measured) and ``<out>/seqres_check.txt``.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import time
from pathlib import Path

import torch
import triton

from kernels.cases import list_cases, load_case
from kernels.gate import default_gate_config, gate
from kernels.reference import reference_forward
from kernels.registry import get_variant
from kernels.weights import make_input, make_weights
from kernels.seqres.host import DEFAULTS, launch, prepare_one, tune_candidates
from kernels.timing import median_ms

SCALES = default_gate_config().scales
SEEDS = default_gate_config().seeds
CASES = tuple(load_case(n).number for n in list_cases(smoke=False, family="seqres"))
_NEST64 = dict(gemm_loop="nested", block_n=64, block_n_wide=64)
_AFN = dict(_NEST64, attn_oproj=True, ffn_fused=True)  # the fusions on the nested loop, 64-wide tiles (case 10's pick)
# name -> overrides of the yaml defaults at run time (so an entry's meaning moves with the defaults; every result
# records its full parameter set); --configs picks and orders them. Names and outcomes: docs/seqres.md; entries of
# options since removed are in the git history of this file.
SWEEP = {
    "nofill": dict(attn_fill=False),
    "bnw128": dict(block_n_wide=128),
    "nest": dict(gemm_loop="nested"),
    "nest_n64": dict(gemm_loop="nested", block_n=64, block_n_wide=64),
    "nest_n64w128": dict(gemm_loop="nested", block_n=64),
    "nest_n64_s4_ast1": dict(gemm_loop="nested", block_n=64, block_n_wide=64, num_stages=4, attn_stages=1),
    "nest_n64_ast1": dict(gemm_loop="nested", block_n=64, block_n_wide=64, attn_stages=1),
    "ast1": dict(attn_stages=1),
    "untuned": dict(),  # the yaml defaults without autotuning (the "default" row tunes)
    "lnb32": dict(block_m_ln=32),
    "bar_counter": dict(barrier="counter"),
    "bm128_w8": dict(block_m=128, num_warps=8, ctas_per_sm=1),
    "ast2": dict(attn_stages=2),
    "bk64_n64_s2": dict(block_k=64, block_n=64, block_n_wide=64, num_stages=2, attn_stages=1),
    "bk64_n64_s3": dict(block_k=64, block_n=64, block_n_wide=64, num_stages=3, attn_stages=1),
    "bk64_n64_s2_ast2": dict(block_k=64, block_n=64, block_n_wide=64, num_stages=2, attn_stages=2),
    "sk": dict(stream_k=True),
    "ska": dict(stream_k="auto"),
    "ska_as": dict(stream_k="auto", attn_presplit=True),
    "ska_as_bn128": dict(stream_k="auto", attn_presplit=True, block_n=128),
    "as": dict(attn_presplit=True),
    "sk_as": dict(stream_k=True, attn_presplit=True),
    "sk_as_bn128": dict(stream_k=True, attn_presplit=True, block_n=128),
    "sk_as_bkv128": dict(stream_k=True, attn_presplit=True, block_kv=128),
    "sk_as_bn128_bkv128": dict(stream_k=True, attn_presplit=True, block_n=128, block_kv=128),
    "sk_as_bk64_s2": dict(stream_k=True, attn_presplit=True, block_k=64, num_stages=2),
    "sk_as_bn128_bk64_s2": dict(stream_k=True, attn_presplit=True, block_n=128, block_k=64, num_stages=2),
    "flat": dict(gemm_loop="flat"),
    "flat_bn128": dict(gemm_loop="flat", block_n=128),
    "flat_4cta": dict(gemm_loop="flat", ctas_per_sm=4, max_split=16),
    "flat_s4": dict(gemm_loop="flat", num_stages=4),
    "flat_bk64": dict(gemm_loop="flat", block_k=64),
    "flat_bm128": dict(gemm_loop="flat", block_m=128),
    "flat_3cta": dict(gemm_loop="flat", ctas_per_sm=3, maxnreg=168),
    "bq32": dict(block_q=32, block_kv=32),  # on today's defaults (presplit, s3, 2 CTAs/SM, blocked)
    "bn128": dict(block_n=128),             # (today's defaults, as bq32)
    "bm128": dict(block_m=128),
    "3cta": dict(ctas_per_sm=3, maxnreg=168),
    "nofit": dict(fit_smem=False),
    "s3": dict(num_stages=3),
    "s4": dict(num_stages=4),
    "w8": dict(num_warps=8),
    "g2": dict(seqs_per_program=2),
    "g4": dict(seqs_per_program=4),
    "g2r1": dict(seqs_per_program=2, split=1),
    "bq32k64": dict(block_q=32),
    "bq16": dict(block_q=16),
    "bkv128": dict(block_kv=128),
    "bkv32": dict(block_kv=32),
    "bkv128_ast1": dict(block_kv=128, attn_stages=1),
    "ff": dict(ffn_fused=True),
    "ff_n128": dict(ffn_fused=True, block_n2=128),
    "ff_h64": dict(ffn_fused=True, block_h=64),
    "ff_h64_n128": dict(ffn_fused=True, block_h=64, block_n2=128),
    "ff_nest": dict(ffn_fused=True, gemm_loop="nested", block_n=64, block_n_wide=64),
    "ff_ast1": dict(ffn_fused=True, attn_stages=1),
    "ao": dict(attn_oproj=True),
    "ao_ast1": dict(attn_oproj=True, attn_stages=1),
    "ao_ff": dict(attn_oproj=True, ffn_fused=True),
    "ao_ff_ast1": dict(attn_oproj=True, ffn_fused=True, attn_stages=1),
    "ao_ff_nest": dict(_AFN),
    "ao_nest": dict(attn_oproj=True, gemm_loop="nested", block_n=64, block_n_wide=64),
    "ao_nest128": dict(attn_oproj=True, gemm_loop="nested", block_n=64),
    "g2_ao_ff_ast1": dict(seqs_per_program=2, attn_oproj=True, ffn_fused=True, attn_stages=1),
    "g2_ao_ff_nest": dict(_AFN, seqs_per_program=2),
    "g4_ao_ff_ast1": dict(seqs_per_program=4, attn_oproj=True, ffn_fused=True, attn_stages=1),
    "g4_ao_ff_nest": dict(_AFN, seqs_per_program=4),
    "g8_ao_ff_nest": dict(_AFN, seqs_per_program=8),
    "g8_ao_ff_ast1": dict(seqs_per_program=8, attn_oproj=True, ffn_fused=True, attn_stages=1),
    "g4_ao_ff_nest_ast1": dict(_AFN, seqs_per_program=4, attn_stages=1),
    "g4_ao_ff_nest_w32": dict(seqs_per_program=4, attn_oproj=True, ffn_fused=True, gemm_loop="nested", block_n=64,
                              block_n_wide=32),
    "g2_ao_ff_nest_w32": dict(seqs_per_program=2, attn_oproj=True, ffn_fused=True, gemm_loop="nested", block_n=64,
                              block_n_wide=32),
    "g4_ao_ff_nest_n32": dict(seqs_per_program=4, attn_oproj=True, ffn_fused=True, gemm_loop="nested", block_n=32,
                              block_n_wide=32),
    "nest_n64_nofill": dict(_NEST64, attn_fill=False),
    "nest_n64_nofill_ast1": dict(_NEST64, attn_fill=False, attn_stages=1),
    "nest_n64_bkv32": dict(_NEST64, block_kv=32),
    "s2": dict(num_stages=2),
    "bm128_s2": dict(block_m=128, num_stages=2),
    "g2_bm128_s2": dict(seqs_per_program=2, block_m=128, num_stages=2),
    "g4_bm128_s2": dict(seqs_per_program=4, block_m=128, num_stages=2),
    "ao_ff_bm128_s2": dict(attn_oproj=True, ffn_fused=True, block_m=128, num_stages=2, attn_stages=1),
    "ast1": dict(attn_stages=1),
    "bk16_s4_ast1": dict(block_k=16, num_stages=4, attn_stages=1),
    "bk16_s5_ast1": dict(block_k=16, num_stages=5, attn_stages=1),
    "nest_n64_bk16_s5_ast1": dict(_NEST64, block_k=16, num_stages=5, attn_stages=1),
    "lnq_nest": dict(_AFN, ln_local="qkv"),
    "g2_lnq_nest": dict(_AFN, ln_local="qkv", seqs_per_program=2),
    "g4_lnq_nest": dict(_AFN, ln_local="qkv", seqs_per_program=4),
    "lnq_flat64": dict(attn_oproj=True, ffn_fused=True, ln_local="qkv", block_n=64, block_n_wide=64),
    "g2_lnq_flat64": dict(attn_oproj=True, ffn_fused=True, ln_local="qkv", block_n=64, block_n_wide=64,
                          seqs_per_program=2),
    "nest_n64_r6": dict(_NEST64, max_split=6),
    "ao_ff_nest_r8": dict(_AFN, max_split=8),
    "lnq_nest_r8": dict(_AFN, ln_local="qkv", max_split=8),
    "g2_ao_ff_nest_r2": dict(_AFN, seqs_per_program=2, max_split=2),
    "g2_ao_ff_nest_r3": dict(_AFN, seqs_per_program=2, max_split=3),
    "g4_ao_ff_nest_r2": dict(_AFN, seqs_per_program=4, max_split=2),
    "g4_ao_ff_nest_r3": dict(_AFN, seqs_per_program=4, max_split=3),
    "lnq_nest_lnb32": dict(_AFN, ln_local="qkv", block_m_ln=32),
    "ao_ff_nest_lnb32": dict(_AFN, block_m_ln=32),
    "g2_ao_ff_nest_lnb32": dict(_AFN, seqs_per_program=2, block_m_ln=32),
    "g4_ao_ff_nest_lnb32": dict(_AFN, seqs_per_program=4, block_m_ln=32),
    "g2_lnq_nest_lnb32": dict(_AFN, ln_local="qkv", seqs_per_program=2, block_m_ln=32),
    "ao_ff_nest_bkv128": dict(_AFN, block_kv=128),
    "ao_ff_nest_bkv128_ast1": dict(_AFN, block_kv=128, attn_stages=1),
    "ao_ff_nest_nofill": dict(_AFN, attn_fill=False),
    "ao_ff_nest_bkv32": dict(_AFN, block_kv=32),
    "lnq_nest_bkv128": dict(_AFN, ln_local="qkv", block_kv=128),
    "lnq_nest_nofill": dict(_AFN, ln_local="qkv", attn_fill=False),
    "lnq_nest_bq32": dict(_AFN, ln_local="qkv", block_q=32),
    "lnq_nest_bq32_kv32": dict(_AFN, ln_local="qkv", block_q=32, block_kv=32),
    "lnq_nest_bq32_ast1": dict(_AFN, ln_local="qkv", block_q=32, attn_stages=1),
    "lnq_nest_bq16": dict(_AFN, ln_local="qkv", block_q=16),
    "nest_n64_bq16": dict(_NEST64, block_q=16),
    "nest_n64_bq16_kv32": dict(_NEST64, block_q=16, block_kv=32),
    "bm128_bk16_s3_ast1": dict(block_m=128, block_k=16, num_stages=3, attn_stages=1),
    "bm128_bk16_s4_ast1": dict(block_m=128, block_k=16, num_stages=4, attn_stages=1),
    "bm128_bk16_s5_ast1": dict(block_m=128, block_k=16, num_stages=5, attn_stages=1),
    "g2_bm128_bk16_s4_ast1": dict(block_m=128, block_k=16, num_stages=4, attn_stages=1, seqs_per_program=2),
    "pub": dict(published=True),
    "pub_bkv128": dict(published=True, block_kv=128),  # one 128-key block per attention tile (S >= 128)
    "pub_bkv128_ast1": dict(published=True, block_kv=128, attn_stages=1),
    "pub_bt0": dict(published=True, barrier="counter_t0"),
    "pub_bcnt": dict(published=True, barrier="counter"),    # its control: the same counter, every warp polling
    "pub_pk2": dict(published=True, attn_pack=2),
    "pub_pk4": dict(published=True, attn_pack=4),
    "pub_pk2_nofill": dict(published=True, attn_pack=2, attn_fill=False),
    "pub_pk4_nofill": dict(published=True, attn_pack=4, attn_fill=False),
    "pub_lnb8": dict(published=True, block_m_ln=8),
    "w8": dict(num_warps=8, ctas_per_sm=1),
    "w8_s4": dict(num_warps=8, ctas_per_sm=1, num_stages=4, attn_stages=3),
    "w8_s5": dict(num_warps=8, ctas_per_sm=1, num_stages=5, attn_stages=3),
    "w8_bm128_s4": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3),
    "pub_w8": dict(published=True, num_warps=8, ctas_per_sm=1),
    "pub_w8_s4": dict(published=True, num_warps=8, ctas_per_sm=1, num_stages=4, attn_stages=3),
    "pub_w8_s5": dict(published=True, num_warps=8, ctas_per_sm=1, num_stages=5, attn_stages=3),
    "pub_s4": dict(published=True, num_stages=4, attn_stages=3),
    "pub_flat_auto": dict(published=True, gemm_loop="flat", block_n="auto", block_n_wide="auto"),
    "pub_cps": dict(published=True, copy_phase="separate"),
    "pub_lnl": dict(published=True, ln_local="qkv"),
    "pub_bq32": dict(published=True, block_q=32),
    "pub_bnw64": dict(published=True, block_n_wide=64),
    "pub_lnb32": dict(published=True, block_m_ln=32),
    "pub_kvs": dict(published=True, attn_kv_split=True),
    "pub_kvs_bkv128": dict(published=True, attn_kv_split=True, block_kv=128),
    "w8_bm128_s4_q128": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3, block_q=128),
    "w8_bm128_s3_q128": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=3, block_q=128),
    "w8_g2_bm128_s4": dict(num_warps=8, ctas_per_sm=1, block_m=128, num_stages=4, attn_stages=3, seqs_per_program=2,
                           attn_pack=2, block_q=128),
    "pub_ao": dict(published=True, attn_oproj=True),  # the fusions again, now that the chains are asynchronous
    "pub_ff": dict(published=True, ffn_fused=True),
    "pub_ao_ff": dict(published=True, attn_oproj=True, ffn_fused=True),
    "pub_aol": dict(published=True, ao_weights="late"),
    "pub_aoe": dict(published=True, ao_weights="early"),
    "pub_afl2": dict(published=True, attn_loop="flat", attn_stages=2),
    "pub_nofill": dict(published=True, attn_fill=False),
    "pub_ast2": dict(published=True, attn_stages=2),
    "pub_f2h": dict(published=True, ffn2_scheme="f16_w1"),
    "pub_f2b": dict(published=True, ffn2_scheme="bf16x3"),  # the control since f16_w1 became the default (f77464e)
    "pub_f1h": dict(published=True, ffn1_scheme="f16_w1", ffn2_scheme="bf16x3"),  # the two products on FFN1 instead
    "pub_f12h": dict(published=True, ffn1_scheme="f16_w1", ffn2_scheme="f16_w1"),
    "pub_r6": dict(published=True, max_split=6),
    "pub_r6_lnb16": dict(published=True, max_split=6, block_m_ln=16),
    "pub_r6_bnw64": dict(published=True, max_split=6, block_n_wide=64),  # (FFN1 in 64-wide tiles again: 4 per program)
}

PUBLISHED_RUN = Path(__file__).resolve().parents[2] / "docs" / "results" / "h200" / "raw" / "timing" / "h200"


def fastest_gated_peer_ms(number: int) -> float:
    """The fastest gated peer of case ``number`` in the published peer run (docs/results/h200/raw): the lowest timing
    median among the registry's gated peers whose correctness JSON passed (nan when none)."""
    from kernels import list_variants
    best = float("nan")
    for v in list_variants("peer"):
        if not get_variant(v).gated_peer:
            continue
        t, k = (PUBLISHED_RUN.parents[1] / stage / "h200" / f"case{number:02d}" / f"{v}.json"
                for stage in ("timing", "correctness"))
        if not (t.is_file() and k.is_file()):
            continue
        t, k = json.loads(t.read_text()), json.loads(k.read_text())
        if t.get("status") == "ok" and k.get("passed") and not t["median_ms"] >= best:
            best = t["median_ms"]
    return best


def published_choice(case) -> dict:
    """The parameters the published timing job of ``case`` ran (``prepare_info.params``, the committed tuned choice;
    older JSONs: ``prepare_info.tune.chosen_params``) in docs/results/h200/raw/timing/h200/caseNN/auto.json; {} when
    it kept the defaults."""
    f = PUBLISHED_RUN / f"case{case.number:02d}" / "auto.json"
    if not f.is_file():
        raise ValueError(f"check_gpu: no published timing for {case.name} ({f}); the 'pub' entries need one")
    info = json.loads(f.read_text()).get("prepare_info", {})
    return dict(info.get("params") or info.get("tune", {}).get("chosen_params", {}))


def _resolve(over: dict, case, base: dict) -> dict:
    """The full parameter set of a SWEEP entry for ``case``: the yaml defaults without autotuning (an entry
    is one configuration) unless the entry names ``tune``, then its overrides."""
    if over.get("published"):
        over = {**published_choice(case), **{k: v for k, v in over.items() if k != "published"}}
    return {**base, "tune": "off", **over}


def _compile_job(n: int, params: dict) -> str:
    """Worker of --precompile: build the kernel of (case n, params) as check_one will; '' or the error."""
    try:
        case = load_case(n)
        w = make_weights(case, device="cuda")
        prepare_one(case, w, **params)  # compiles on CUDA; spin_limit is a runtime argument: one binary
        return ""
    except Exception as e:  # reported by the parent; check_one records it again
        return f"case {n} {params}: {e!r}"


def check_one(case, w, params: dict, spin_limit: int = 200_000, trace: bool = False) -> dict:
    """Gate at every scale x seed (bounded spins: a broken barrier reports instead of hanging), then time."""
    v = get_variant("seqres")
    rec = {"params": params}
    t0 = time.time()
    p = v.prepare(case, w, **dict(params, spin_limit=spin_limit if params.get("split", 1) != 1 else 0))
    rec["info"] = dict(p.info)
    if "tune" in p.info:  # gate, time and trace the candidate prepare chose (a second prepare could choose another)
        params = dict(params, **p.info["tune"]["chosen_params"], tune="off")
        rec["params_effective"] = params
    x = make_input(case, 1.0, 0, device="cuda")
    k = launch(p, x, torch.empty_like(x))
    torch.cuda.synchronize()
    rec["compile_s"] = round(time.time() - t0, 2)
    rec["kernel"] = dict(n_regs=k.n_regs, n_spills=k.n_spills, shared=k.metadata.shared,
                         num_warps=k.metadata.num_warps)
    worst, passed, rows = 0.0, True, []
    for seed in SEEDS:
        for scale in SCALES:
            x = make_input(case, scale, seed, device="cuda")
            y = v.run(p, x)
            g = gate(y, reference_forward(case, w, x))
            rows.append(dict(scale=scale, seed=seed, passed=g.passed, max_abs=g.max_abs, max_rel=g.max_rel,
                             max_over_tol=g.max_over_tol))
            passed &= g.passed
            worst = max(worst, g.max_over_tol)
    rec.update(gate_passed=passed, worst_over_tol=worst, gate=rows)
    p = v.prepare(case, w, **params)  # timed with unbounded spins (no host sync)
    x = make_input(case, 1.0, 0, device="cuda")
    rec["ms"] = median_ms(lambda: v.run(p, x))
    # the same calls without the L2 flush (weights left in L2 by the previous call): what cold weights cost the
    # flushed timing above
    rec["ms_warm_l2"] = median_ms(lambda: v.run(p, x), flush_bytes=0)
    host = []
    for _ in range(50):  # host time of one run() call (enqueue only; the GPU drains between calls)
        torch.cuda.synchronize()
        t = time.perf_counter()
        v.run(p, x)
        host.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    rec["host_us"] = sorted(host)[len(host) // 2]
    g = gate(v.run(p, x), reference_forward(case, w, x))
    rec["gate_after_timing"] = g.passed
    if trace:  # where the time goes: per-phase work and barrier wait from the programs' timestamps
        from kernels.seqres.host import phase_profile
        p = v.prepare(case, w, **dict(params, trace=True))
        profs = []
        for _ in range(7):
            v.run(p, x)
            torch.cuda.synchronize()
            profs.append(phase_profile(p))
        rec["phase_profile"] = sorted(profs, key=lambda d: d["kernel_us"])[len(profs) // 2]  # median launch
    return rec


def profile_line(pp: dict) -> str:
    """One line of a phase profile: kernel µs, then work/wait µs per phase kind."""
    parts = [f"{k} {pp['work_us'][k]:.0f}/{pp['wait_us'].get(k, 0.0):.0f}" for k in pp["work_us"]]
    return f"kernel {pp['kernel_us']:.0f}us skew {pp['start_skew_us']:.1f} | " + " ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="outputs/seqres_check")
    ap.add_argument("--cases", nargs="+", type=int, default=list(CASES))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--configs", nargs="+", default=None, help=f"sweep only these SWEEP entries: {list(SWEEP)}")
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--precompile", type=int, default=0, metavar="J",
                    help="first compile every (case, config) in J processes (fills Triton's cache; 0 = off)")
    ap.add_argument("--precompile-only", action="store_true", help="stop after --precompile")
    ap.add_argument("--skip-default", action="store_true",
                    help="gate and time only the --configs entries, not the tuned defaults first (no autotuning)")
    ap.add_argument("--trace", action="store_true",
                    help="also run each config with trace=true and record its per-phase profile (work/wait µs)")
    a = ap.parse_args(argv)
    names = [n for n in (a.configs or list(SWEEP)) if a.sweep]
    unknown = [n for n in names if n not in SWEEP]
    if unknown:
        raise SystemExit(f"check_gpu: unknown --configs {unknown}; known: {list(SWEEP)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    base = dict(DEFAULTS)  # config/variant/seqres.yaml, as prepare reads it
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "defaults": base, "cases": {}}

    def save():
        (out / "seqres_check.json").write_text(json.dumps(results, indent=1, default=str))

    if a.precompile > 0:
        jobs = [(n, dict(base)) for n in a.cases if not a.skip_default] + [(n, _resolve(SWEEP[nm], load_case(n), base))
                                                      for nm in names for n in a.cases]
        if a.trace:
            jobs += [(n, dict(pr, trace=True)) for n, pr in jobs]
        jobs = [(n, full) for n, pr in jobs for _, full in tune_candidates(pr)]
        t0 = time.time()
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(a.precompile) as pool:
            errs = [e for e in pool.starmap(_compile_job, jobs) if e]
        print(f"precompiled {len(jobs)} kernels in {time.time() - t0:.0f}s ({len(errs)} errors)", flush=True)
        for e in errs:
            print("  precompile error:", e[:300], flush=True)
    if a.precompile_only:
        return
    prepared = {}
    for n in a.cases:
        case = load_case(n)
        w = make_weights(case, device="cuda")
        x = make_input(case, 1.0, 0, device="cuda")
        sd = get_variant("eager_sdpa")
        ps = sd.prepare(case, w)
        sdpa_ms = median_ms(lambda: sd.run(ps, x))
        results["cases"][n] = {"eager_sdpa_ms": sdpa_ms, "configs": {}}
        prepared[n] = (case, w)
        if a.skip_default:
            continue
        try:
            rec = check_one(case, w, base, trace=a.trace)
        except Exception as e:  # record and go on: one case must not hide the others
            rec = {"error": repr(e)[:2000]}
        results["cases"][n]["configs"]["default"] = rec
        print(n, "default", {k: rec.get(k) for k in ("gate_passed", "worst_over_tol", "ms", "host_us", "compile_s",
              "kernel", "info",
                                                    "error")}, flush=True)
        save()
    if a.sweep:
        for name in names:
            for n in a.cases:
                if time.time() - t_start > a.budget_s:
                    break
                case, w = prepared[n]
                try:
                    rec = check_one(case, w, _resolve(SWEEP[name], case, base), trace=a.trace)
                except Exception as e:
                    rec = {"error": repr(e)[:2000]}
                results["cases"][n]["configs"][name] = rec
                print(n, name, {k: rec.get(k) for k in ("gate_passed", "worst_over_tol", "ms", "ms_warm_l2",
                      "host_us", "kernel", "info", "error")},
                      flush=True)
                save()
    lines = [f"{'case':>4} {'config':>20} {'gate':>5} {'worst/tol':>9} {'ms':>8} {'sdpa ms':>8} "
             f"{'vs sdpa':>7} {'vs peer':>7} {'regs':>4} {'spill':>5} {'warm L2':>8}"]
    best = {}
    for n, r in results["cases"].items():
        for name, rec in r["configs"].items():
            if "ms" not in rec:
                lines.append(f"{n:>4} {name:>20} ERROR {rec.get('error', '')[:80]}")
                continue
            ok = rec["gate_passed"] and rec["gate_after_timing"]
            if ok and (n not in best or rec["ms"] < best[n][1]):
                best[n] = (name, rec["ms"])
            lines.append(f"{n:>4} {name:>20} {'PASS' if ok else 'FAIL':>5} {rec['worst_over_tol']:9.3f} "
                         f"{rec['ms']:8.4f} {r['eager_sdpa_ms']:8.4f} {r['eager_sdpa_ms'] / rec['ms']:7.2f} "
                         f"{fastest_gated_peer_ms(n) / rec['ms']:7.2f} {rec['kernel']['n_regs']:>4} "
                         f"{rec['kernel']['n_spills']:>5} {rec.get('ms_warm_l2', float('nan')):8.4f}")
    for n, r in results["cases"].items():
        for name, rec in r["configs"].items():
            t = rec.get("info", {}).get("tune")
            if t:  # what prepare's autotuning chose, from which candidate times
                lines.append(f"{n:>4} {name:>20} tune: chose {t['chosen']} {t['chosen_params']} of "
                             + ", ".join(f"{i}:{ms:.4f}ms" for i, ms in enumerate(t["median_ms"])))
    for n, r in results["cases"].items():
        for name, rec in r["configs"].items():
            if "phase_profile" in rec:
                lines.append(f"{n:>4} {name:>20} {profile_line(rec['phase_profile'])}")
    if best:
        sp = [fastest_gated_peer_ms(n) / ms for n, (_, ms) in best.items()]
        lines.append("best gated per case: " + ", ".join(f"{n}:{nm} {ms:.4f}ms" for n, (nm, ms) in best.items()))
        lines.append(f"geomean speedup vs the published fastest gated peer (best gated config): "
                     f"{math.exp(sum(map(math.log, sp)) / len(sp)):.2f}x over {len(sp)} cases")
    results["table"] = lines
    save()
    (out / "seqres_check.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
