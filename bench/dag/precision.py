"""Rank the per-GEMM precision schemes of the dag kernel on cases 2, 3, 4, 12 by CPU emulation (docs/dag.md,
Precision). Lab tool: it ranks candidates for the GPU margin check (``bench.dag.check_gpu --margin``), it admits none.

Each forward is ``bench.seqres.precision_probe.forward`` (float64, every product computed as the scheme computes
it: operands rounded and split, products summed exactly; attention products on bf16x3 as the kernel runs them),
judged by the real gate against ``reference_forward``. One reference per input serves every scheme. Each result
is one JSON line appended to ``--log``; ``--summary`` prints the worst error over the tolerance per (case, scheme)
with the inputs it saw.

The schemes are named as ``check_gpu``'s configurations (``SCHEMES`` below: which GEMMs run on f16_w1, the rest
on bf16x3); a suffix ``+fold`` or ``+shift`` folds LN1 / LN2 into QKV / FFN1 (``precision_probe.ln_linear``:
algebraically, or around a per-row shift, the mean-robust form the LayerNorm fold of docs/dag.md needs).
``--row-offset F`` adds F · scale · N(0, 1) to each row of the input (one draw per row, seeded by the input seed):
inputs whose rows' means are far from 0 against their spread, beside the SPEC's, where a fold that is not
mean-robust loses precision. ``--spike F`` moves one element of each row by F · scale · N(0, 1): rows whose
largest element stands far above the rest, where a scale per row (the int8 limb schemes) keeps fewer bits of the
others. Two products instead of three are emulated in their algebraically equal cheaper form
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

# name -> the GEMMs on f16_w1 (A in fp16 hi/lo, the weight rounded to fp16 once: two products), or {GEMM: scheme};
# the rest bf16x3
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
    # int8 limbs (precision_probe.I8_SCHEMES): QKV and FFN1 with a scale per row over the whole K (their A comes from
    # LayerNorm tasks, which hold whole rows), the output projection and FFN2 per 64-deep K block
    "i8_qkv_ffn1": {"qkv": "i8x2", "ffn1": "i8x2"},
    "i8_all_f16_ffn1": {"qkv": "i8x2", "o": "i8x2b", "ffn1": "f16_w1", "ffn2": "i8x2b"},
    "i8_all": {"qkv": "i8x2", "o": "i8x2b", "ffn1": "i8x2", "ffn2": "i8x2b"},
    "i8c_qkv_ffn1": {"qkv": "i8x2c", "ffn1": "i8x2c"},
    # every operand's scale per 64-deep K block (a row's outlier costs only its block's other elements bits)
    "i8b_qkv_ffn1": {"qkv": "i8x2b", "ffn1": "i8x2b"},
    "i8b_all": {"qkv": "i8x2b", "o": "i8x2b", "ffn1": "i8x2b", "ffn2": "i8x2b"},
    "i8b128_all": {"qkv": "i8x2b128", "o": "i8x2b128", "ffn1": "i8x2b128", "ffn2": "i8x2b128"},
    "i8cb128_all": {"qkv": "i8x2cb128", "o": "i8x2cb128", "ffn1": "i8x2cb128", "ffn2": "i8x2cb128"},
    # form ws's build: three products, 128-deep blocks on the two GEMMs whose A a LayerNorm task writes
    "i8cb128_qkv_ffn1": {"qkv": "i8x2cb128", "ffn1": "i8x2cb128"},
    "i8b256_all": {"qkv": "i8x2b256", "o": "i8x2b256", "ffn1": "i8x2b256", "ffn2": "i8x2b256"},
}
# MMA work of a GEMM's scheme relative to bf16x3's three bf16 products (int8 runs at twice the bf16 rate)
WORK = {"bf16x3": 1.0, "f16_w1": 2 / 3, "i8x2": 2 / 3, "i8x2b": 2 / 3, "i8x2b128": 2 / 3, "i8x2b256": 2 / 3,
        "i8x2c": 0.5, "i8x2cb128": 0.5}
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


def per_gemm(spec) -> dict:
    """A SCHEMES value -> {GEMM: scheme} for the GEMMs not on bf16x3 (a tuple names the GEMMs on f16_w1)."""
    return dict(spec) if isinstance(spec, dict) else {g: "f16_w1" for g in spec}


def flop_fraction(spec) -> float:
    """MMA work of the linear GEMMs relative to bf16x3 on all four (``WORK`` a GEMM), the same for every case: per
    token QKV does 3D², O D², FFN1 4D², FFN2 4D² of the 12D² multiply-adds."""
    share, per = dict(qkv=3, o=1, ffn1=4, ffn2=4), per_gemm(spec)
    return sum(share[g] * WORK[per.get(g, "bf16x3")] for g in share) / 12


def _scheme(name: str) -> tuple[tuple, object]:
    """``name`` -> (its SCHEMES value, the LayerNorm fold: False, True (algebraic) or "shift")."""
    base, _, fold = name.partition("+")
    if base not in SCHEMES or fold not in ("", "fold", "shift"):
        raise SystemExit(f"unknown scheme {name!r}; valid: {list(SCHEMES)}, each optionally +fold or +shift")
    return SCHEMES[base], {"": False, "fold": True, "shift": "shift"}[fold]


def spike_input(x: torch.Tensor, scale: float, seed: int, spike: float) -> torch.Tensor:
    """x with one element of each row (a column drawn per row) moved by ``spike`` · scale · N(0, 1): rows whose
    largest element stands far above their spread, where a scheme with a scale per row (the int8 limbs) keeps fewer
    bits of the rest (none at spike 0)."""
    if not spike:
        return x
    g = torch.Generator().manual_seed(2_000_003 + seed)
    cols = torch.randint(0, x.shape[-1], x.shape[:-1], generator=g)
    out = x.clone()
    moved = spike * scale * torch.randn(*x.shape[:-1], 1, generator=g, dtype=x.dtype)
    out.scatter_add_(-1, cols.unsqueeze(-1), moved)
    return out


def offset_input(x: torch.Tensor, scale: float, seed: int, offset: float) -> torch.Tensor:
    """x plus ``offset`` · scale · N(0, 1) per row (one draw per row; none at offset 0)."""
    if not offset:
        return x
    g = torch.Generator().manual_seed(1_000_003 + seed)
    return x + offset * scale * torch.randn(x.shape[0], x.shape[1], 1, generator=g, dtype=x.dtype)


def run(cases, schemes, scales, seeds, weight_seeds, log: str, offset: float = 0.0, spike: float = 0.0):
    probe.matmul = _fast_matmul      # probe.forward / ln_linear look it up at call time
    try:
        for c in cases:
            case = load_case(c)
            for wo in weight_seeds:
                wseed = case.weight_seed + wo
                w = make_weights(case, seed=wseed)
                for scale in scales:
                    for seed in seeds:
                        x = spike_input(offset_input(make_input(case, scale, seed), scale, seed, offset), scale,
                                        seed, spike)
                        ref = reference_forward(case, w, x)
                        for name in schemes:
                            t = time.perf_counter()
                            spec, fold = _scheme(name)
                            per = per_gemm(spec)
                            y = probe.forward(x, w.flat(), case.H, case.causal, "bf16x3", "bf16x3", fold, per)
                            r = gate(y, ref)
                            rec = dict(case=case.number, scheme=name, weight_seed=wseed, scale=scale, seed=seed,
                                       max_over_tol=round(r.max_over_tol, 5), passed=r.passed,
                                       s=round(time.perf_counter() - t, 1))
                            if offset:
                                rec["row_offset"] = offset
                            if spike:
                                rec["spike"] = spike
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
        by[(r["case"], _label(r))].append(r)
    cases = sorted({r["case"] for r in recs})
    print("| scheme (f16_w1 GEMMs) | MMA work | " + " | ".join(f"case {c}" for c in cases) + " |")
    print("|---|---:|" + "---:|" * len(cases))
    order = list(SCHEMES)
    labels = sorted({_label(r) for r in recs}, key=lambda lb: (order.index(lb.split(" @")[0].split("+")[0]), lb))
    for name in labels:
        spec = _scheme(name.split(" @")[0])[0]
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
            gemms = ", ".join(f"{g} {sc}" if sc != "f16_w1" else g for g, sc in per_gemm(spec).items())
            print(f"| {name} ({gemms or 'none'}) | {flop_fraction(spec):.3f} | " + " | ".join(cells) + " |")
    print()
    for c in cases:
        seen = defaultdict(set)
        for r in recs:
            if r["case"] == c:
                seen[(r["weight_seed"], r["scale"])].add(r["seed"])
        print(f"case {c}: " + "; ".join(f"weights {w}, scale {sc:g}: input seeds {_ranges(sorted(s))}"
                                       for (w, sc), s in sorted(seen.items())))


def _label(r: dict) -> str:
    """A logged result's row of the summary: its scheme, with its inputs' row offset or spike when they had one."""
    return r["scheme"] + (f" @offset {r['row_offset']:g}" if r.get("row_offset") else "") + \
        (f" @spike {r['spike']:g}" if r.get("spike") else "")


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
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES),
                    help=f"of {list(SCHEMES)}, each optionally +fold or +shift (LN1 / LN2 folded into QKV / FFN1)")
    ap.add_argument("--row-offset", type=float, default=0.0,
                    help="add OFFSET * scale * N(0, 1) to each input row (0: the SPEC's inputs)")
    ap.add_argument("--spike", type=float, default=0.0,
                    help="move one element of each input row by SPIKE * scale * N(0, 1) (0: the SPEC's inputs)")
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
    for s in a.schemes:
        _scheme(s)
    run(a.cases, a.schemes, SCALES if a.scan_scales else (a.scale,), a.seeds, a.weight_seeds, a.log, a.row_offset,
        a.spike)


if __name__ == "__main__":
    main()
