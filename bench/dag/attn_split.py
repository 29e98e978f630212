"""Split attention on case 4, traced (lab; docs/dag.md "Results" 38): form ws at the case's committed parameters with
``attn_kv_split`` 0 (off), 4 and 6, one traced launch each after two warm-up launches; per configuration the traced
kernel time, the consumer's busy share and dependency wait (``ws_dag.consumer_profile``), the attention tasks' mean
phases (``ws_dag.phase_profile``) and, per query block and part, the mean body (the consumer's start — the later of
it taking the task and the loader's counters complete — to its work done) and the mean wait from the consumer taking
the task to the counters complete, in µs. GPU only.

    python -m bench.dag.attn_split --out DIR      (DIR/attn_split.json, written atomically)
"""
from __future__ import annotations

import argparse
import json
import os


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 4, 6])
    a = ap.parse_args(argv)
    import torch
    from kernels import load_case, make_input, make_weights
    from kernels.dag import graph as G
    from kernels.dag import host
    from bench.dag.ws_dag import consumer_profile, phase_profile
    case = load_case("4")
    w = make_weights(case, device="cuda")
    x = make_input(case, 1.0, 0).cuda()
    base = dict(form="ws", ctas_per_sm=1, split_k_o=2, block_m_ln=8, ln_chunk=8192, tune="off", trace=True)
    out = {}
    for split in a.splits:
        p = host.prepare(case, w, **dict(base, attn_kv_split=split))
        for _ in range(3):
            host.run(p, x)
        torch.cuda.synchronize()
        host.check(p)
        tr = p.trace.cpu().double()
        kinds = [G.KINDS[t.kind] for t in p.graph.tasks]
        rec = dict(kernel_us=round(float((tr[:, 2].max() - tr[:, 0].min()) / 1e3), 2),
                   consumer={k: v for k, v in consumer_profile(tr, kinds).items() if k != "kinds"},
                   attn_phase=phase_profile(tr, p.graph.producers, kinds)["kinds"]["attn"])
        by: dict = {}
        for i, t in enumerate(p.graph.tasks):
            if t.kind == G.ATTN:
                start = max(tr[i, 5], tr[i, 1])
                by.setdefault(f"q{t.c}p{t.part}", []).append((float(tr[i, 4] - start) / 1e3,
                                                              float(tr[i, 1] - tr[i, 5]) / 1e3))
        rec["attn_body_wait_n"] = {k: [round(sum(b for b, _ in v) / len(v), 2), round(sum(c for _, c in v) / len(v), 2),
                                       len(v)] for k, v in sorted(by.items())}
        out[str(split)] = rec
        print(split, json.dumps(rec), flush=True)
        del p
    os.makedirs(a.out, exist_ok=True)
    tmp = os.path.join(a.out, ".attn_split.json.tmp")
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, os.path.join(a.out, "attn_split.json"))


if __name__ == "__main__":
    main()
