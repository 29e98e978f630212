"""One seqres launch to profile (Nsight Compute attaches to the launch after ``--warm`` warm-up calls):

    ncu --set full --launch-skip 3 --launch-count 1 -k _seqres_fwd -o rep \
        python -m bench.seqres.profile_one 10 [--param gemm_loop=flat ...] [--warm 3] [--no-tune]

``--no-tune`` skips prepare's autotuning (``tune: off``), so the launches before the profiled one are this
script's own warm-up calls and not tune candidates: give the chosen candidate's parameters with ``--param``.
"""
from __future__ import annotations

import argparse

import torch

from kernels.cases import load_case
from kernels.registry import get_variant
from kernels.weights import make_input, make_weights
from .aot_check import parse_params


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--param", action="append", default=[], help="name=value (int/bool/str)")
    ap.add_argument("--warm", type=int, default=3, help="launches before the profiled one")
    ap.add_argument("--no-tune", action="store_true", help="prepare without autotuning (tune: off)")
    a = ap.parse_args(argv)
    case = load_case(a.case)
    w = make_weights(case, device="cuda")
    v = get_variant("seqres")
    params = parse_params(a.param)
    if a.no_tune:
        params["tune"] = "off"
    p = v.prepare(case, w, **params)
    x = make_input(case, 1.0, 0, device="cuda")
    for _ in range(a.warm + 1):
        v.run(p, x)
    torch.cuda.synchronize()
    print(case.name, p.info)


if __name__ == "__main__":
    main()
