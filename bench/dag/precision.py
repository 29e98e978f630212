"""Rank the per-GEMM precision schemes of the dag kernel on cases 2, 3, 4, 12 by CPU emulation (docs/dag.md,
Precision). Lab tool: it ranks candidates for the GPU margin check (``bench.dag.check_gpu --margin``), it admits none.

Each forward is ``bench.seqres.precision_probe.forward`` (float64, every product computed as the scheme computes
it: operands rounded and split, products summed exactly; attention products on bf16x3 as the kernel runs them),
judged by the real gate against ``reference_forward``. One reference per input serves every scheme. Each result
is one JSON line appended to ``--log``; ``--summary`` prints the worst error over the tolerance per (case, scheme)
with the inputs it saw.

The schemes are named as ``check_gpu``'s configurations (``SCHEMES`` below: which GEMMs run on f16_w1, the rest
on bf16x3). Two products instead of three are emulated in their algebraically equal cheaper form
(a_hi·w + a_lo·w = (a_hi + a_lo)·w, the sum exact in float64), which differs from the probe's only by float64
rounding.

    python -m bench.dag.precision --cases 2 --scan-scales --schemes f16_ffn2 --log /tmp/p.jsonl
    python -m bench.dag.precision --cases 2 3 4 12 --scale 0.1 --seeds 0 1 2 3 --weight-seeds 0 1000 --log p.jsonl
    python -m bench.dag.precision --summary p.jsonl
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import torch

from bench.seqres import precision_probe as probe
from kernels import load_case, make_input, make_weights, reference_forward
from kernels.gate import gate

# name -> the GEMMs on f16_w1 (A in fp16 hi/lo, the weight rounded to fp16 once: two products); the rest bf16x3
SCHEMES = {
    "bf16x3": (),
    "f16_ffn2": ("ffn2",),
    "f16_ffn1": ("ffn1",),
    "f16_o": ("o",),
    "f16_qkv": ("qkv",),
    "f16_ffn12": ("ffn1", "ffn2"),
    "f16_o_ffn2": ("o", "ffn2"),
    "f16_o_ffn1": ("o", "ffn1"),
    "f16_o_ffn12": ("o", "ffn1", "ffn2"),
    "f16_all": ("qkv", "o", "ffn1", "ffn2"),
}
SCALES = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)


def _fast_matmul(a: torch.Tensor, w_t: torch.Tensor, scheme: str) -> torch.Tensor:
    """``probe.matmul`` with the sums of the split A parts taken first (exact in float64): one fewer product."""
    if scheme == "bf16x3":
        ah, al = probe._split(a, torch.bfloat16)
        wh, wl = probe._split(w_t, torch.bfloat16)
        return (ah + al) @ wh + ah @ wl
    if scheme == "f16_w1":
        ah, al = probe._split(a, torch.float16)
        return (ah + al) @ probe._round(w_t, torch.float16)
    return _probe_matmul(a, w_t, scheme)


_probe_matmul = probe.matmul


def flop_fraction(f16: tuple) -> float:
    """MMA work of the linear GEMMs relative to bf16x3 on all four (a two-product GEMM does 2/3 of the work), the
    same for every case: per token QKV does 3D², O D², FFN1 4D², FFN2 4D² of the 12D² multiply-adds."""
    share = dict(qkv=3, o=1, ffn1=4, ffn2=4)
    return sum(share[g] * (2 / 3 if g in f16 else 1.0) for g in share) / 12


def run(cases, schemes, scales, seeds, weight_seeds, log: str):
    probe.matmul = _fast_matmul      # probe.forward / ln_linear look it up at call time
    try:
        for c in cases:
            case = load_case(c)
            for wo in weight_seeds:
                wseed = case.weight_seed + wo
                w = make_weights(case, seed=wseed)
                for scale in scales:
                    for seed in seeds:
                        x = make_input(case, scale, seed)
                        ref = reference_forward(case, w, x)
                        for name in schemes:
                            t = time.perf_counter()
                            per = {g: "f16_w1" for g in SCHEMES[name]}
                            y = probe.forward(x, w.flat(), case.H, case.causal, "bf16x3", "bf16x3", False, per)
                            r = gate(y, ref)
                            rec = dict(case=case.number, scheme=name, weight_seed=wseed, scale=scale, seed=seed,
                                       max_over_tol=round(r.max_over_tol, 5), passed=r.passed,
                                       s=round(time.perf_counter() - t, 1))
                            print(json.dumps(rec), flush=True)
                            with open(log, "a") as f:
                                f.write(json.dumps(rec) + "\n")
    finally:
        probe.matmul = _probe_matmul


def summary(log: str):
    """Markdown table of the worst error / tolerance per (case, scheme) over the logged inputs (how many, and where
    the worst was: weight seed, input seed, scale), then the inputs each case saw."""
    recs = [json.loads(l) for l in open(log) if l.strip()]
    by = defaultdict(list)
    for r in recs:
        by[(r["case"], r["scheme"])].append(r)
    cases = sorted({r["case"] for r in recs})
    print("| scheme (f16_w1 GEMMs) | MMA work | " + " | ".join(f"case {c}" for c in cases) + " |")
    print("|---|---:|" + "---:|" * len(cases))
    for name, f16 in SCHEMES.items():
        cells = []
        for c in cases:
            rs = by.get((c, name))
            if not rs:
                cells.append("—")
                continue
            w = max(rs, key=lambda r: r["max_over_tol"])
            n_in = len({(r["weight_seed"], r["seed"], r["scale"]) for r in rs})
            cells.append(f"**{w['max_over_tol']:.3f}** ({n_in}; w{w['weight_seed']} s{w['seed']} x{w['scale']:g})"
                         if w["max_over_tol"] > 0.9 else
                         f"{w['max_over_tol']:.3f} ({n_in}; w{w['weight_seed']} s{w['seed']} x{w['scale']:g})")
        if any(c != "—" for c in cells):
            print(f"| {name} ({', '.join(f16) or 'none'}) | {flop_fraction(f16):.3f} | " + " | ".join(cells) + " |")
    print()
    for c in cases:
        seen = defaultdict(set)
        for r in recs:
            if r["case"] == c:
                seen[(r["weight_seed"], r["scale"])].add(r["seed"])
        print(f"case {c}: " + "; ".join(f"weights {w}, scale {sc:g}: input seeds {_ranges(sorted(s))}"
                                       for (w, sc), s in sorted(seen.items())))


def _ranges(xs: list[int]) -> str:
    out, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ", ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", type=int, default=[2, 3, 4, 12])
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES), help=f"of {list(SCHEMES)}")
    ap.add_argument("--scale", type=float, default=0.1, help="input scale (the gate's worst for these cases)")
    ap.add_argument("--scan-scales", action="store_true", help="every gate scale instead of --scale")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="input seeds")
    ap.add_argument("--weight-seeds", nargs="+", type=int, default=[0],
                    help="offsets added to the case's weight seed (0: the gate's weights)")
    ap.add_argument("--log", default="precision.jsonl", help="JSON lines, appended")
    ap.add_argument("--summary", metavar="LOG", help="print the table of LOG and exit")
    a = ap.parse_args(argv)
    if a.summary:
        return summary(a.summary)
    bad = [s for s in a.schemes if s not in SCHEMES]
    if bad:
        raise SystemExit(f"unknown schemes {bad}; valid: {list(SCHEMES)}")
    run(a.cases, a.schemes, SCALES if a.scan_scales else (a.scale,), a.seeds, a.weight_seeds, a.log)


if __name__ == "__main__":
    main()
