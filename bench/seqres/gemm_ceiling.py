"""What the GEMM phases of a seqres case could cost outside the megakernel (GPU; a measurement for docs/seqres.md).

For each of a case's four linear GEMMs (all B*S rows of one layer) the bf16x3 work is one bf16 GEMM over a
K three times as long: A3 = [a_lo | a_hi | a_hi] (M x 3K) times W3 = [w_hi; w_lo; w_hi] (3K x N), fp32
accumulation. This times it with cuBLAS (torch.matmul, bf16 output) and with a plain Triton tiled matmul
(fp32 output) at several tile shapes, each as its own full-GPU launch, so the megakernel's phase times
(``check_gpu --trace``) can be set against them.

    python -m bench.seqres.gemm_ceiling 1 5 6 7 9 10 11 [--out DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels.cases import load_case
from kernels.timing import median_ms

CONFIGS = (  # (BM, BN, BK, warps, stages)
    (64, 128, 32, 4, 3),
    (128, 128, 64, 8, 3),
    (128, 256, 64, 8, 3),
    (128, 128, 64, 4, 4),
)


@triton.jit
def _mm(a_ptr, w_ptr, o_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    nn = tl.cdiv(N, BN)
    tm = pid // nn
    tn = pid % nn
    rm = tm * BM + tl.arange(0, BM)
    rn = tn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        w = tl.load(w_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, w, acc)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc)


def _ms(fn) -> float:
    return median_ms(fn)


def shapes(case):
    M, D = case.B * case.S, case.D
    return {"qkv": (M, 3 * D, D), "oproj": (M, D, D), "ffn1": (M, 4 * D, D), "ffn2": (M, D, 4 * D)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", type=int)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for n in args.cases:
        case = load_case(f"case{n:02d}")
        for name, (M, N, K) in shapes(case).items():
            K3 = 3 * K
            a = torch.randn(M, K3, device="cuda").to(torch.bfloat16)
            w = torch.randn(K3, N, device="cuda").to(torch.bfloat16)
            o = torch.empty(M, N, device="cuda")
            r = dict(case=n, gemm=name, M=M, N=N, K=K, layers=case.L,
                     cublas_us=1e3 * _ms(lambda: torch.matmul(a, w)))
            for bm, bn, bk, nw, ns in CONFIGS:
                if M % bm or N % bn or K3 % bk:
                    continue
                grid = (M // bm * (N // bn),)
                fn = lambda: _mm[grid](a, w, o, M, N, K3, BM=bm, BN=bn, BK=bk, num_warps=nw, num_stages=ns)  # noqa: E731
                r[f"triton_{bm}x{bn}x{bk}_w{nw}_s{ns}_us"] = 1e3 * _ms(fn)
            best = min(v for k, v in r.items() if k.endswith("_us"))
            r["best_us"] = best
            r["best_tflops"] = 2 * M * N * K3 / best / 1e6
            rows.append(r)
            print(json.dumps(r), flush=True)
        per_layer = sum(r["best_us"] for r in rows if r["case"] == n)
        print(f"case {n}: best per layer {per_layer:.1f} us, x L={case.L}: {per_layer * case.L:.1f} us", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "gemm_ceiling.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
