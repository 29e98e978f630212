"""GPU check of the hybrid family: gate (all scales x seeds) and do_bench timing of precision schemes,
plus an attention-kernel micro-benchmark. Writes ``$OUT/hybrid_check.json`` (details, written after every
step) and prints a table. Not a pipeline stage: the numbers feed docs/hybrid.md.

    python -m bench.hybrid.check_gpu --cases 8 13 14 --budget 210
    TRITON_INTERPRET=1 python -m bench.hybrid.check_gpu --cases smoke3 --scales 1e-3 1 --seeds 0
    TRITON_INTERPRET=1 python -m bench.hybrid.check_gpu --cases 13 --proxy-B 1 --proxy-S 512 --attn-bench
        (CPU precision proxy: the real D, H, L and weights of case 13 at a shorter sequence)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import traceback

import torch

from kernels.cases import load_case
from kernels.gate import default_gate_config, gate
from kernels.reference import reference_forward
from kernels.weights import make_input, make_weights
from kernels.hybrid.attention import attention
from kernels.hybrid.model import prepare, run
from kernels.timing import median_ms

SCALES = default_gate_config().scales

# name -> prepare params (on top of config/variant/hybrid.yaml defaults); the first is the default.
SCHEMES = {
    "default": {},
    "last_tf32gemm": {"overrides": {"last": {"gemm": "tf32"}}},
    "last_qk2a": {"overrides": {"last": {"qk_prec": "bf16x2a"}}},
    "attn_bn128": {"attn_block_n": {128: 32, "default": 128}},
    "sdpa_fp32": {"attention": "sdpa_fp32"},
    "fp32gemm": {"gemm": "fp32"},
    # attention precision sweep (CPU interpreter reproduces the bf16 products exactly)
    "qk2a": {"qk_prec": "bf16x2a"}, "qk2b": {"qk_prec": "bf16x2b"}, "qk1": {"qk_prec": "bf16"},
    "pv2a": {"pv_prec": "bf16x2a"}, "pv2b": {"pv_prec": "bf16x2b"}, "pv1": {"pv_prec": "bf16"},
}
GPU_SCHEMES = ["default", "last_tf32gemm", "attn_bn128", "sdpa_fp32", "fp32gemm"]

# (block_m, block_n, warps, stages, qk_prec, pv_prec); the first is the yaml default
ATTN_CONFIGS = [
    (128, 64, 8, 2, "bf16x3", "bf16x3"), (128, 64, 4, 2, "bf16x3", "bf16x3"),
    (128, 128, 8, 2, "bf16x3", "bf16x3"), (64, 64, 4, 3, "bf16x3", "bf16x3"),
    (128, 64, 8, 3, "bf16x3", "bf16x3"), (64, 64, 4, 2, "bf16x3", "bf16x3"),
    (128, 64, 8, 2, "bf16", "bf16"),  # one bf16 product per dot: the speed ceiling of the split
]
ATTN_CONFIGS_SHORT = 3  # configs tried on cases other than the first micro-bench case


def yaml_defaults() -> dict:
    import yaml
    from kernels.cases import config_dir
    with open(config_dir() / "variant" / "hybrid.yaml") as f:
        return dict(yaml.safe_load(f)["params"])


class Clock:
    def __init__(self, budget: float):
        self.t0, self.budget = time.time(), budget

    def left(self) -> float:
        return self.budget - (time.time() - self.t0)


def bench(fn, device, rep_ms: float) -> float:
    """Median ms of fn() (``kernels.timing``): about ``rep_ms`` worth of calls on a GPU, one call on the CPU."""
    if device.type != "cuda":
        return median_ms(fn, reps=1, warmup=0, device=device)
    first = median_ms(fn, reps=3, warmup=1, device=device)
    return median_ms(fn, reps=max(5, min(1000, int(rep_ms / max(first, 1e-3)))), warmup=5, device=device)


def attn_microbench(case, device, clock, results, log, configs):
    """Attention kernel alone on the case's (B, H, S, dh), random planes; TFLOP/s with causal halved."""
    B, S, H, dh = case.B, case.S, case.H, case.dh
    g = torch.Generator(device="cpu").manual_seed(0)
    from kernels.hybrid.qkv_split import qkv_split
    qkv = torch.randn((B * S, 3 * case.D), generator=g).to(device)
    planes = qkv_split(qkv, B, S, H)
    flops = 4 * B * H * S * S * dh / (2 if case.causal else 1)
    ref = attention(planes, B, S, H, case.causal, split_out=False)
    for cfg in configs:
        if clock.left() < 0.6 * clock.budget:
            log(f"  attn {cfg}: skipped (budget)"); break
        bm, bn, w, st, qt, pt = cfg
        rec = {"case": case.name, "cfg": cfg}
        try:
            f = lambda: attention(planes, B, S, H, case.causal, split_out=False, qk_prec=qt, pv_prec=pt,
                                  block_m=bm, block_n=bn, num_warps=w, num_stages=st)
            out = f()
            rec["max_abs_vs_first"] = float((out - ref).abs().max())
            ms = bench(f, device, 300)
            rec.update(ms=ms, tflops=flops / ms / 1e9)
            log(f"  attn {case.name} {cfg}: {ms:.3f} ms {rec['tflops']:.1f} TFLOP/s  d={rec['max_abs_vs_first']:.2e}")
        except Exception as e:  # a config that does not compile is recorded, not fatal
            rec["error"] = repr(e)[:500]
            log(f"  attn {case.name} {cfg}: ERROR {rec['error'][:200]}")
        results["attn"].append(rec)


def breakdown(p, x, path: str, log) -> None:
    """Per-kernel CUDA time of one run() (torch.profiler), written to ``path``; the top lines logged."""
    from torch.profiler import ProfilerActivity, profile
    run(p, x); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(p, x); torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=15, max_name_column_width=60)
    with open(path, "w") as f:
        f.write(table)
    for line in table.splitlines()[:12]:
        log("    " + line[:150])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["8", "13", "14"])
    ap.add_argument("--schemes", nargs="+", default=GPU_SCHEMES, help=f"of {', '.join(SCHEMES)}")
    ap.add_argument("--scales", nargs="+", type=float, default=list(SCALES))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(default_gate_config().seeds))
    ap.add_argument("--budget", type=float, default=210.0, help="seconds; later steps are skipped past it")
    ap.add_argument("--attn-bench", nargs="*", default=["14", "8"], help="cases for the attention micro-bench")
    ap.add_argument("--out", default=os.environ.get("OUT", "outputs/hybrid_check"))
    ap.add_argument("--params", default="{}", help="JSON overrides of the yaml defaults, for every scheme")
    ap.add_argument("--proxy-S", type=int, default=None,
                    help="replace each case's S (a same-weights proxy, e.g. for a CPU precision study)")
    ap.add_argument("--proxy-B", type=int, default=None, help="replace each case's B")
    ap.add_argument("--no-time", action="store_true", help="gate only (CPU proxies)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    clock = Clock(args.budget)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    logf = open(os.path.join(args.out, "log.txt"), "w")

    def log(msg):
        line = f"[{time.time() - clock.t0:6.1f}s] {msg}"
        print(line, flush=True); logf.write(line + "\n"); logf.flush()

    import triton
    results = {"env": {"torch": torch.__version__, "triton": triton.__version__, "host": platform.node(),
                       "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                       "argv": argv or os.sys.argv[1:]},
               "attn": [], "runs": []}
    out_json = os.path.join(args.out, "hybrid_check.json")

    def dump():
        with open(out_json, "w") as f:
            json.dump(results, f, indent=1)

    base = dict(yaml_defaults(), **json.loads(args.params))
    log(f"device {results['env']['gpu']}; base params {base}")

    for i, cname in enumerate(args.attn_bench):
        if device.type == "cuda":
            try:
                attn_microbench(load_case(cname), device, clock, results, log,
                                ATTN_CONFIGS if i == 0 else ATTN_CONFIGS[:ATTN_CONFIGS_SHORT])
            except Exception as e:
                log(f"attn bench {cname} failed: {e!r}"[:300])
            dump()

    # references once per case, reused by every scheme
    cases = [load_case(c) for c in args.cases]
    if args.proxy_S or args.proxy_B:
        import dataclasses
        cases = [dataclasses.replace(c, S=args.proxy_S or c.S, B=args.proxy_B or c.B,
                                     name=f"{c.name}_B{args.proxy_B or c.B}_S{args.proxy_S or c.S}")
                 for c in cases]
    state = {}
    # order: the default scheme on every case first, then the alternatives
    order = [(c, s) for s in args.schemes for c in cases]
    for case, sname in order:
        if clock.left() < 20:
            log(f"{case.name} {sname}: skipped (budget)"); continue
        if case.name not in state:
            t = time.time()
            w = make_weights(case, device=device)
            refs = {}
            for seed in args.seeds:
                for sc in args.scales:
                    x = make_input(case, sc, seed, device=device)
                    refs[(sc, seed)] = (x, reference_forward(case, w, x))
            if device.type == "cuda":
                torch.cuda.synchronize()
            state[case.name] = (w, refs)
            log(f"{case.name}: {len(refs)} references in {time.time() - t:.1f}s")
        w, refs = state[case.name]
        params = dict(base, **SCHEMES[sname])
        rec = {"case": case.name, "scheme": sname, "params": params, "flops": case.flops}
        try:
            p = prepare(case, w, **params)
            if device.type == "cuda":
                torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
                resident = torch.cuda.memory_allocated()  # weights, prepared splits, inputs, references
            worst, per = None, []
            for (sc, seed), (x, ref) in refs.items():
                y = run(p, x)
                r = gate(y, ref)
                per.append({"scale": sc, "seed": seed, "pass": r.passed, "max_abs": r.max_abs,
                            "max_over_tol": r.max_over_tol})
                if worst is None or r.max_over_tol > worst["max_over_tol"]:
                    worst = per[-1]
            rec["gate"] = per
            rec["passed"] = all(g["pass"] for g in per)
            rec["worst"] = worst
            if device.type == "cuda":
                rec["peak_bytes"] = torch.cuda.max_memory_allocated() - resident  # run()'s own temporaries
            if args.no_time:
                log(f"{case.name} {sname}: pass={rec['passed']} worst over_tol={worst['max_over_tol']:.3f} "
                    f"(scale {worst['scale']}, seed {worst['seed']}, abs {worst['max_abs']:.2e})")
                results["runs"].append(rec); dump(); continue
            x = refs[(args.scales[0], args.seeds[0])][0]
            rep = 1500 if case.S * case.B >= 65536 else 400
            ms = bench(lambda: run(p, x), device, rep)
            rec["ms"] = ms
            rec["tflops"] = case.flops / ms / 1e9
            # the timed output is checked once more
            rec["post_timing_pass"] = gate(run(p, x), refs[(args.scales[0], args.seeds[0])][1]).passed
            if sname == args.schemes[0] and device.type == "cuda":
                try:
                    breakdown(p, x, os.path.join(args.out, f"profile_{case.name}_{sname}.txt"), log)
                except Exception as e:
                    log(f"  profile failed: {e!r}"[:300])
            log(f"{case.name} {sname}: pass={rec['passed']} worst over_tol={worst['max_over_tol']:.3f} "
                f"(scale {worst['scale']}, seed {worst['seed']}, abs {worst['max_abs']:.2e}) "
                f"{ms:.2f} ms {rec['tflops']:.1f} TFLOP/s peak {rec.get('peak_bytes', 0) / 2**30:.1f} GiB")
            del p
        except Exception as e:
            rec["error"] = repr(e)[:1000]
            rec["traceback"] = traceback.format_exc()[-3000:]
            log(f"{case.name} {sname}: ERROR {rec['error'][:300]}")
        results["runs"].append(rec)
        dump()

    log("")
    log(f"{'case':8} {'scheme':18} {'gate':5} {'over_tol':>8} {'ms':>9} {'TFLOP/s':>8}")
    for r in results["runs"]:
        if "error" in r:
            log(f"{r['case']:8} {r['scheme']:18} ERROR"); continue
        if "ms" not in r:
            log(f"{r['case']:8} {r['scheme']:18} {'PASS' if r['passed'] else 'FAIL':5} {r['worst']['max_over_tol']:8.3f}")
            continue
        log(f"{r['case']:8} {r['scheme']:18} {'PASS' if r['passed'] else 'FAIL':5} "
            f"{r['worst']['max_over_tol']:8.3f} {r['ms']:9.2f} {r['tflops']:8.1f}")
    dump()


if __name__ == "__main__":
    main()
