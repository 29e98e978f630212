"""How each phase's work items divide over a group's programs (CPU; no GPU, no compile). For docs/seqres.md.

Phases whose items leave some of a group's R programs idle, or run in series on few programs (case 7's LayerNorm
blocks, case 6's attention tiles), cost time. This prints, for each case and a parameter set (by
default the choice in the published timing JSON, ``check_gpu.published_choice``), every phase's item count against R:
the busiest program's items, the mean, and the idle programs; ``*`` marks a busiest program above 1.2x the mean. The
schedule is ``host.prepare_meta``'s for 132 SMs and two programs per SM, before the compile-time fits a GPU
``prepare`` may apply (``fit_smem`` can halve the attention tiles; the pipeline's ``prepare_info`` records it).
Stream-K phases (oproj, FFN2 with ``stream_k``) split their (tile, K step) pairs evenly and are listed as such.

    python -m bench.seqres.balance [--cases 1 5 ...] [--param k=v ...]
"""
from __future__ import annotations

import argparse

from kernels.cases import list_cases, load_case
from kernels.seqres.host import prepare_meta

from .aot_check import parse_params


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def phases(meta: dict) -> list[tuple[str, int]]:
    """(phase, work items shared by the group's R programs) for a ``prepare_meta`` schedule."""
    G, S, D, H = meta["SEQS_PER_PROGRAM"], meta["S"], meta["D"], meta["H"]
    M, BM = G * S, meta["BLOCK_M"]
    apk = meta["ATTN_PACK"]
    sk = " (stream-K)" if meta["STREAM_K"] else ""
    out = [("copy / LayerNorm row blocks", _cdiv(M, meta["BLOCK_M_LN"]))]
    out.append(("QKV tiles", _cdiv(M, BM) * _cdiv(3 * D, meta["BLOCK_N_QKV"])))
    out.append(("attention tiles", (G // apk) * H * _cdiv(S * apk, meta["BLOCK_Q"])))
    if not meta["ATTN_OPROJ"]:
        out.append(("oproj tiles" + sk, _cdiv(M, BM) * _cdiv(D, meta["BLOCK_N"])))
    if meta["FFN_FUSED"]:
        out.append(("fused FFN items", _cdiv(M, BM) * _cdiv(4 * D, meta["BLOCK_H"])))
    else:
        out.append(("FFN1 tiles", _cdiv(M, BM) * _cdiv(4 * D, meta["BLOCK_N_FFN1"])))
        out.append(("FFN2 tiles" + sk, _cdiv(M, BM) * _cdiv(D, meta["BLOCK_N"])))
    return out


def report(case_no: int, params: dict) -> str:
    case = load_case(case_no)
    meta, _, _ = prepare_meta(case, n_sm=132, n_slots=264, **params)
    R = meta["SPLIT"]
    cells = []
    for name, n in phases(meta):
        if "stream-K" in name:
            cells.append(f"{name} {n}: even")
            continue
        busiest, mean, idle = _cdiv(n, R), n / R, max(0, R - n)
        cells.append(f"{name} {n}/{R}: max {busiest}, mean {mean:.2f}" + (f", {idle} idle" if idle else "")
                     + (" *" if busiest > 1.2 * mean else ""))
    G = meta["SEQS_PER_PROGRAM"]
    return f"case{case_no:02d} (G={G}, R={R}, {G * meta['S']} rows): " + "; ".join(cells)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", type=int,
                    default=[load_case(n).number for n in list_cases(smoke=False, family="seqres")])
    ap.add_argument("--param", action="append", default=[], metavar="K=V",
                    help="use these parameters instead of the published choice (repeatable)")
    a = ap.parse_args(argv)
    given = parse_params(a.param)
    for c in a.cases:
        if given:
            params = given
        else:
            from .check_gpu import published_choice
            params = published_choice(load_case(c))
        print(report(c, params), flush=True)


if __name__ == "__main__":
    main()
