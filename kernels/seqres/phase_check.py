"""GPU check of one flat GEMM phase on its own (no megakernel around it): R concurrent programs share a
split-output phase (QKV/FFN1-like: bias, optional GELU, hi/lo store) with stream-K, and every output, the fp32
accumulation scratch and the tile counters are checked. Prints which tiles are wrong and how.

    python -m kernels.seqres.phase_check [--nest 0|1] [--R 8] [--M 64] [--N 1152] [--K 384] [--bn 64]
"""
from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from ..common.split import split_hi_lo
from .megakernel import _linear_phase_flat


@triton.jit
def _phase(ahi, alo, w, b, ohi, olo, acc, cnt, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, R: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GELU: tl.constexpr, NEST: tl.constexpr,
           SK: tl.constexpr, LDO: tl.constexpr, NCNT: tl.constexpr):
    group = tl.program_id(0) // R  # groups of R programs on consecutive row blocks of M rows, as the megakernel
    _linear_phase_flat(ahi, alo, w, b, ohi, ohi, olo, group * M, tl.program_id(0) % R, M, N, K, GELU, False, 1,
                       "tf32", 1, R, BM, BN, BK, ".cg", 2, SK, LDO, NEST, acc, cnt + group * NCNT)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--nest", type=int, default=0)
    ap.add_argument("--R", type=int, default=8)
    ap.add_argument("--M", type=int, default=64)
    ap.add_argument("--N", type=int, default=1152)
    ap.add_argument("--K", type=int, default=384)
    ap.add_argument("--bm", type=int, default=64)
    ap.add_argument("--bn", type=int, default=64)
    ap.add_argument("--bk", type=int, default=32)
    ap.add_argument("--gelu", type=int, default=0)
    ap.add_argument("--ldo", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--groups", type=int, default=1)
    a = ap.parse_args(argv)
    Mg, N, K = a.M, a.N, a.K
    M = Mg * a.groups
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g) / K ** 0.5
    bias = torch.randn(N, generator=g)
    xh, xl = split_hi_lo(x)
    wh, wl = split_hi_lo(w)
    ws = torch.stack([wh, wl], dim=1).reshape(2 * K, N).contiguous()
    dev = "cuda"
    xh, xl, ws, bias = xh.to(dev), xl.to(dev), ws.to(dev), bias.to(dev)
    ldo = a.ldo or N
    ref = (xl.double() @ wh.double().to(dev) + xh.double() @ wl.double().to(dev) + xh.double() @ wh.double().to(dev)
           + bias.double())
    if a.gelu:
        ref = torch.nn.functional.gelu(ref)
    nt = -(-Mg // a.bm) * -(-N // a.bn)
    acc = torch.zeros(M, N, device=dev)
    cnt = torch.zeros(a.groups * nt, device=dev, dtype=torch.int32)
    for rep in range(a.reps):
        ohi = torch.full((M, ldo), float("nan"), device=dev, dtype=torch.bfloat16)
        olo = torch.full((M, ldo), float("nan"), device=dev, dtype=torch.bfloat16)
        _phase[(a.R * a.groups,)](xh, xl, ws, bias, ohi, olo, acc, cnt, Mg, N, K, a.R, a.bm, a.bn, a.bk, a.gelu,
                                  a.nest, True, a.ldo, nt, num_warps=4, num_stages=3)
        torch.cuda.synchronize()
        out = (ohi.double() + olo.double())[:, :N]
        err = (out - ref).abs()
        bad = []
        for tm in range(-(-M // a.bm)):  # (row blocks of every group)
            for tn in range(-(-N // a.bn)):
                e = err[tm * a.bm:(tm + 1) * a.bm, tn * a.bn:(tn + 1) * a.bn]
                if not bool(torch.all(e < 1e-2)):
                    nan = int(torch.isnan(e).sum())
                    bad.append((tm, tn, nan, float(torch.nan_to_num(e, nan=0.0).max())))
        if bad and rep == 0:  # what the error of the first bad tiles looks like
            KT, NTN = -(-K // a.bk), -(-N // a.bn)
            T = -(-Mg // a.bm) * NTN * KT
            for tm, tn, _, _ in bad[:3]:
                t = (tm % -(-Mg // a.bm)) * NTN + tn
                cuts = [r * T // a.R for r in range(1, a.R) if t * KT < r * T // a.R < (t + 1) * KT]
                rs, cs = slice(tm * a.bm, (tm + 1) * a.bm), slice(tn * a.bn, (tn + 1) * a.bn)
                e = (out - ref)[rs, cs]
                msg = [f"tile ({tm},{tn}) t={t} cuts at steps {[c - t * KT for c in cuts]}"]
                for c in cuts:
                    kc = (c - t * KT) * a.bk
                    head = (xl.double()[rs, :kc] @ wh.double().to(dev)[:kc, cs] + xh.double()[rs, :kc] @ wl.double().to(dev)[:kc, cs]
                            + xh.double()[rs, :kc] @ wh.double().to(dev)[:kc, cs])
                    tail = ref[rs, cs] - bias.double()[cs] - head
                    msg.append(f"err+head {float((e + head).abs().max()):.3g} err+tail {float((e + tail).abs().max()):.3g} "
                               f"err-head {float((e - head).abs().max()):.3g} err-tail {float((e - tail).abs().max()):.3g}")
                msg.append(f"err+bias {float((e + bias.double()[cs]).abs().max()):.3g} err-bias "
                           f"{float((e - bias.double()[cs]).abs().max()):.3g} wrong {int((e.abs() > 1e-2).sum())}/{e.numel()}")
                print("  " + "; ".join(msg), flush=True)
        print(f"rep {rep}: max err {float(torch.nan_to_num(err, nan=1e9).max()):.3g}; bad tiles {bad}; "
              f"acc nonzero {int((acc != 0).sum())}; counters nonzero {int((cnt != 0).sum())}", flush=True)


if __name__ == "__main__":
    main()
