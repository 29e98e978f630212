"""GPU check of the dag family in one call: for each case and each named parameter set — prepare (compile time,
registers, spills, shared memory, occupancy, grid), the gate at 7 scales x 2 seeds against ``reference_forward``
(TF32 off), do_bench timing (L2 flushed, median) next to ``hybrid`` (its defaults: a CUDA graph), optionally the
SPEC §4 margin over unseen inputs and weight seeds. One JSON per case under ``--out``, a table printed last.

It never hangs and survives a failing configuration: every wait in the kernel is bounded (``spin_limit``), each
configuration is caught and recorded, a configuration is not started once the case's ``--case-budget`` or the
call's ``--budget`` is spent, and a watchdog (``faulthandler``) ends the process with a traceback if a case
overruns its budget by ``--grace`` seconds (the JSON of every finished case is already written).

    python -m bench.dag.check_gpu --out $OUT --cases 2 3 4 12 [--configs default bn128 ...] [--margin 256]
    python -m bench.dag.check_gpu --out $OUT --cases 2 3 4 12 --configs default f16_ffn1 f16_ffn2 \
        --margin 256 --margin-configs default f16_ffn1 f16_ffn2 --case-budget 140 --budget 560
    TRITON_INTERPRET=1 python -m bench.dag.check_gpu --out /tmp/dag --cases smoke2 --scales 1 --seeds 0
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import statistics
import sys
import time
import traceback

import torch

from kernels import gate, get_variant, load_case, make_input, make_weights, reference_forward
from kernels import tuning
from kernels.dag import host

SCALES = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)

# name -> parameters on top of config/variant/dag.yaml; the first is the default (docs/dag.md says why each)
CONFIGS = {
    "default": {},
    "bn128": dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128),
    "bn128_sk": dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128, split_k_o=4,
                     split_k_ffn2=8),
    "cps2": dict(ctas_per_sm=2),
    "kv32": dict(block_kv=32),                     # 162-168 registers (docs/dag.md, compile report)
    "kv32_cps3": dict(block_kv=32, ctas_per_sm=3),  # ... which lets 3 programs share an SM
    "static": dict(queue="static"),
    "layer_order": dict(order="layer"),
    "bk32_s4": dict(block_k=32, num_stages=4),
    "sk8": dict(split_k_o=8, split_k_ffn2=8),
    "nw8_bn128": dict(num_warps=8, block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128),
    "chain_wait": dict(wgmma_chain="wait"),
    "chain_inflight": dict(wgmma_chain="async_inflight"),   # the GEMM K step's three products in flight together
    "chain_inflight_pw": dict(wgmma_chain="async_inflight", wait="parallel"),
    "pw": dict(wait="parallel"),
    "cost_h200": dict(cost_model="h200"),              # the critical order from the fitted costs (link latency priced)
    "all3": dict(cost_model="h200", wgmma_chain="async_inflight", wait="parallel"),
    # shorter chain tasks (docs/dag.md, "Open": the chain itself): 32-row attention tasks (mma.sync, not wgmma) and
    # 32-column QKV / FFN1 tiles; simulated -4/-2/-10/+2% and -9/-9/-13/+15% on cases 2/3/4/12
    "bq32": dict(block_q=32),
    "qf32": dict(block_n_qkv=32, block_n_ffn1=32),
    "bq32_qf32": dict(block_q=32, block_n_qkv=32, block_n_ffn1=32),
    "f128_s2": dict(block_n_ffn1=128, block_n_ffn2=128, num_stages=2),   # case 12 (work-bound): wider FFN tiles only
    "ffn2_128_s2": dict(block_n_ffn2=128, num_stages=2),
    "sk2": dict(split_k_o=2, split_k_ffn2=2),        # on top of case 12's tuned 64 x 128 tiles (auto: 4 / 4)
    "s3_cps1": dict(num_stages=3, ctas_per_sm=1),     # ... 3 stages need 144 KB: one program per SM
    "ln8": dict(block_m_ln=8),
    "ln4": dict(block_m_ln=4, ln_chunk=4096),       # one-chunk LayerNorm tasks (4 rows): the LN link of the chain
    "ln4_cps2": dict(block_m_ln=4, ln_chunk=4096, ctas_per_sm=2),
    "ln8_cps2": dict(block_m_ln=8, ln_chunk=4096, ctas_per_sm=2),
    "bn128_s2_cps2": dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128, num_stages=2,
                          ctas_per_sm=2),
    "bn128_s2_ln4_cps2": dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128, num_stages=2,
                              ctas_per_sm=2, block_m_ln=4, ln_chunk=4096),
    "bn128_cps2": dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128, ctas_per_sm=2),
    # 128 x 128 tiles on two warpgroups: half the operand traffic per MMA of 64 x 128
    "t128": dict(block_m=128, num_warps=8, block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128,
                 num_stages=2),
    "t128_s3": dict(block_m=128, num_warps=8, block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128),
    # two-product (f16_w1) GEMMs, in the order the CPU emulation ranks them (docs/dag.md, Precision); a scheme
    # becomes a default only once --margin admits it on every case it is set for
    "f16_ffn1": dict(scheme_ffn1="f16_w1"),
    "f16_ffn2": dict(scheme_ffn2="f16_w1"),
    "f16_ffn12": dict(scheme_ffn1="f16_w1", scheme_ffn2="f16_w1"),
    "f16_o_ffn2": dict(scheme_o="f16_w1", scheme_ffn2="f16_w1"),
    "bn128_s2": dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128, num_stages=2),
    "bn128_s2_f16_ffn1": dict(block_n_qkv=128, block_n_o=128, block_n_ffn1=128, block_n_ffn2=128, num_stages=2,
                              scheme_ffn1="f16_w1"),
    "f16_all": dict(scheme_qkv="f16_w1", scheme_o="f16_w1", scheme_ffn1="f16_w1", scheme_ffn2="f16_w1"),
    # fp16 product plus two fp8 correction products on every linear GEMM (form ws only; docs/dag.md, Precision)
    "f16f8": dict(form="ws", scheme_qkv="f16f8", scheme_o="f16f8", scheme_ffn1="f16f8", scheme_ffn2="f16f8"),
}
DEFAULT_CONFIGS = ("default", "bn128", "cps2", "layer_order")
PRECISION_CONFIGS = ("default", "f16_ffn1", "f16_ffn2")  # time and margin (--margin 256) of each: docs/dag.md


def _env() -> dict:
    import triton
    out = dict(host=platform.node(), torch=torch.__version__, triton=triton.__version__, python=sys.version.split()[0])
    if torch.cuda.is_available():
        out.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    try:
        import subprocess
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True).stdout.strip()
    except OSError:
        pass
    return out


def _time_ms(fn, gpu: bool) -> dict:
    """Median (p20, p80) ms of ``fn``: do_bench with L2 flushed on the GPU; wall clock in the interpreter."""
    if gpu:
        import triton.testing
        q = triton.testing.do_bench(fn, warmup=50, rep=300, quantiles=[0.5, 0.2, 0.8])
        return dict(median_ms=q[0], p20_ms=q[1], p80_ms=q[2])
    ts = []
    for _ in range(3):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return dict(median_ms=statistics.median(ts), p20_ms=min(ts), p80_ms=max(ts))


def gate_all(case, v, p, w, scales, seeds, refs: dict) -> tuple[list, float]:
    """Gate ``v.run(p, .)`` at every scale x seed (references cached in ``refs``); (records, worst error / tol)."""
    rows, worst = [], 0.0
    for scale in scales:
        for seed in seeds:
            x = make_input(case, scale, seed, device=w.device)
            if (scale, seed) not in refs:
                refs[(scale, seed)] = reference_forward(case, w, x)
            y = v.run(p, x)
            r = gate(y, refs[(scale, seed)])
            rows.append(dict(scale=scale, seed=seed, passed=r.passed, max_over_tol=r.max_over_tol,
                             max_abs=r.max_abs))
            worst = max(worst, r.max_over_tol)
    return rows, worst


def margin(case, params: dict, w, n_inputs: int, scale: float) -> dict:
    """SPEC §4 margin, by the correctness stage's own check (``workflow.stages.correctness.margin_check``, the
    rule of ``config/gate/default.yaml``) with ``n_inputs`` unseen inputs at ``scale`` with the case's weights and
    ``n_inputs // 4`` with each other weight seed."""
    import yaml
    from omegaconf import OmegaConf
    from kernels.cases import config_dir
    from workflow.stages.correctness import margin_check
    g = yaml.safe_load((config_dir() / "gate" / "default.yaml").read_text())
    mcfg = OmegaConf.create(dict(g["margin"], inputs=n_inputs, inputs_per_weight_seed=max(1, n_inputs // 4)))
    v = get_variant("dag")
    p = v.prepare(case, w, **params)
    return margin_check(case, w, v, p, params, scale, mcfg, g["seeds"], g["atol"], g["rtol"], w.device)


def check_config(case, name: str, params: dict, w, args, refs: dict, gpu: bool) -> dict:
    """Prepare, gate and time one configuration; every failure is recorded, never raised."""
    rec = dict(config=name, params=params, ok=False)
    v = get_variant("dag")
    try:
        t = time.perf_counter()
        p = v.prepare(case, w, **dict(params, spin_limit=args.spin_limit))
        rec["prepare_s"] = round(time.perf_counter() - t, 2)
        rec["info"] = {k: v_ for k, v_ in p.info.items() if k != "counts"}
        rec["tasks"] = p.info.get("counts")
        print(f"  {case.name} {name}: prepared in {rec['prepare_s']}s grid={p.grid} "
              f"registers={p.info.get('registers')} spills={p.info.get('spills')} shared={p.info.get('shared')} "
              f"occupancy={p.info.get('occupancy')} tasks={p.info['tasks']} crit={p.info['critical_path_us']}us",
              flush=True)
        rec["gate"], rec["worst_over_tol"] = gate_all(case, v, p, w, args.scales, args.seeds, refs)
        rec["passed"] = all(g["passed"] for g in rec["gate"])
        x = make_input(case, 1.0, 0, device=w.device)
        p.params["check"] = "lazy"   # no synchronisation inside the timed call; errors are checked after
        rec.update(_time_ms(lambda: v.run(p, x), gpu))
        host.check(p)
        rec["timed_output_passed"] = gate(v.run(p, x), refs[(1.0, 0)] if (1.0, 0) in refs
                                          else reference_forward(case, w, x)).passed
        if args.trace and gpu:  # the configuration just timed (a committed tuned file included), traced
            rec["profile"] = profile(case, {k: v_ for k, v_ in p.params.items() if k not in tuning.TUNING_KEYS}, w, args)
        if args.margin and name in args.margin_configs:
            worst_scale = max(rec["gate"], key=lambda g: g["max_over_tol"])["scale"]
            rec["margin"] = margin(case, dict(params, spin_limit=args.spin_limit), w, args.margin, worst_scale)
        rec["ok"] = True
        del p
    except Exception as e:  # a failing configuration must not stop the others
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        rec["traceback"] = traceback.format_exc()[-4000:]
        print(f"  {case.name} {name}: FAILED {rec['error'][:300]}", flush=True)
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return rec


def hybrid_times(case, w, gpu: bool) -> dict:
    """``hybrid`` with its defaults (``cuda_graph: auto`` replays a captured CUDA graph on these cases: what
    ``auto`` runs on them today)."""
    out = {}
    try:
        v = get_variant("hybrid")
        p = v.prepare(case, w)
        x = make_input(case, 1.0, 0, device=w.device)
        out["default"] = _time_ms(lambda: v.run(p, x), gpu)
        out["info"] = {k: v_ for k, v_ in (getattr(p, "info", None) or {}).items() if isinstance(v_, (int, float, str, bool))}
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:1000]
    return out


def profile(case, params: dict, w, args) -> dict:
    """``host.task_profile`` of a traced launch (``trace: true``; the third launch, after two warm ones) of exactly
    ``params`` (the resolved parameters of the timed configuration: no tuned file applied again)."""
    v = get_variant("dag")
    p = v.prepare(case, w, **dict(params, spin_limit=args.spin_limit, trace=True, tune="off"))
    x = make_input(case, 1.0, 0, device=w.device)
    for _ in range(3):
        v.run(p, x)
    torch.cuda.synchronize()
    host.check(p)
    prof = host.task_profile(p)
    kinds = " ".join(f"{k}:{d['work_mean']:.1f}/{d['model_mean']:.1f}+{d['wait_mean']:.1f}w({d['signal_mean']:.2f}s)"
                     for k, d in prof["kinds"].items())
    ch = prof["chain"]
    chain = " ".join(f"{k}:{v:.0f}" for k, v in ch["work"].items())
    print(f"  {case.name}: traced kernel {prof['kernel_us']:.0f}us busy={prof['busy']:.2f} sms={prof['sms']} "
          f"per-sm={prof['max_programs_per_sm']} | work/model+wait(signal, inside work) us: {kinds}\n"
          f"    chain: {ch['tasks']} tasks, work {ch['work_total']:.0f}us ({chain}), links {ch['link_total']:.0f}us "
          f"(mean {ch['link_mean']:.2f}), from {ch['head']} at {ch['head_at_us']:.1f}us", flush=True)
    return prof


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for one JSON per case")
    ap.add_argument("--cases", nargs="+", default=["2", "3", "4", "12"])
    ap.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS),
                    help=f"of {list(CONFIGS)}; precision = {' '.join(PRECISION_CONFIGS)}")
    ap.add_argument("--scales", nargs="+", type=float, default=list(SCALES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--spin-limit", type=int, default=2_000_000, help="polls before a wait gives up (~1-2 s)")
    ap.add_argument("--margin", type=int, default=0, help="SPEC §4 margin: unseen inputs at the worst scale")
    ap.add_argument("--margin-configs", nargs="+", default=["default"], help="configs to margin-check (or precision)")
    ap.add_argument("--no-hybrid", action="store_true")
    ap.add_argument("--trace", action="store_true", help="also profile each config (trace: true, host.task_profile)")
    ap.add_argument("--case-budget", type=float, default=150.0, help="s per case before no new config starts")
    ap.add_argument("--budget", type=float, default=540.0, help="s for the call before no new config starts")
    ap.add_argument("--grace", type=float, default=120.0, help="s past a case's budget before the watchdog exits")
    args = ap.parse_args(argv)
    expand = lambda names: [n for c in names for n in (PRECISION_CONFIGS if c == "precision" else (c,))]
    args.configs, args.margin_configs = expand(args.configs), expand(args.margin_configs)
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configs {unknown}; valid: {list(CONFIGS)}")
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.is_available() and not host.interpreting()
    dev = torch.device("cuda" if gpu else "cpu")
    t_call = time.perf_counter()
    table = []
    for c in args.cases:
        case = load_case(c)
        faulthandler.dump_traceback_later(args.case_budget + args.grace, exit=True)
        t_case = time.perf_counter()
        w = make_weights(case, device=dev)
        refs: dict = {}
        res = dict(case=case.name, env=_env(), configs=[])
        if not args.no_hybrid:
            res["hybrid"] = hybrid_times(case, w, gpu)
        for name in args.configs:
            if time.perf_counter() - t_case > args.case_budget or time.perf_counter() - t_call > args.budget:
                res["configs"].append(dict(config=name, ok=False, error="skipped: time budget spent"))
                continue
            res["configs"].append(check_config(case, name, CONFIGS[name], w, args, refs, gpu))
            with open(os.path.join(args.out, f"{case.name}.json"), "w") as f:
                json.dump(res, f, indent=1, default=str)
        faulthandler.cancel_dump_traceback_later()
        res["wall_s"] = round(time.perf_counter() - t_case, 1)
        with open(os.path.join(args.out, f"{case.name}.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)
        hyb = res.get("hybrid", {})
        for r in res["configs"]:
            table.append((case.name, r["config"], r.get("passed"), r.get("worst_over_tol"), r.get("median_ms"),
                          hyb.get("default", {}).get("median_ms"),
                          r.get("info", {}).get("registers"), r.get("info", {}).get("spills"),
                          r.get("info", {}).get("occupancy"), (r.get("margin") or {}).get("max_over_tol"),
                          r.get("error", "")[:60]))
        del w, refs
        if gpu:
            torch.cuda.empty_cache()
    print(f"\n{'case':8} {'config':12} {'gate':5} {'err/tol':>8} {'dag ms':>8} {'hyb ms':>8} "
          f"{'x hyb':>6} {'regs':>4} {'spill':>5} {'occ':>3} {'margin':>6}  error")
    for (cn, cfg, ok, worst, ms, hyb, regs, spills, occ, mg, err) in table:
        f = lambda v, fmt: (fmt % v) if isinstance(v, (int, float)) else "-"
        ratio = f"{hyb / ms:6.2f}" if isinstance(ms, float) and isinstance(hyb, float) else "     -"
        print(f"{cn:8} {cfg:12} {str(ok)[:5]:5} {f(worst, '%8.3f')} {f(ms, '%8.4f')} {f(hyb, '%8.4f')} "
              f"{ratio} {f(regs, '%4d')} {f(spills, '%5d')} {f(occ, '%3d')} {f(mg, '%6.3f')}  {err}")


if __name__ == "__main__":
    main()
