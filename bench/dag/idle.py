"""Where form ws's idle consumer time goes, per case (lab; docs/dag-results.md "Results" 39): each case at its committed
dag parameters (``config/tuned/h200``), traced, three launches; of the last: the consumers' busy share and dependency
wait (``ws_dag.consumer_profile``), the late-loader share (``ws_dag.phase_profile``) and ``ws_dag.idle_profile`` at
each ``--lag`` — the idle consumer time split into moments when a ready task (its last producer released ``lag`` µs
before) had not started yet, its ticket not yet taken or taken by a busy program, and moments when nothing was ready.
GPU only.

    python -m bench.dag.idle --out DIR [--cases 4 3 2 12] [--lag 0.5 1.0 2.0]   (DIR/idle.json, atomically)
"""
from __future__ import annotations

import argparse
import json
import os


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", nargs="+", default=["4", "3", "2", "12"])
    ap.add_argument("--lag", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--param", nargs="*", action="extend", default=[], help="name=value over the committed ones")
    a = ap.parse_args(argv)
    import torch
    from kernels import load_case, make_input, make_weights
    from kernels.dag import graph as G
    from kernels.dag import host
    from bench.dag.ws_ab import committed_params
    from bench.dag.ws_dag import consumer_profile, idle_profile, phase_profile
    from workflow.stages.common import write_json_atomic
    out = {}
    for cid in a.cases:
        case = load_case(cid)
        params = dict(committed_params(case, "h200") or {}, tune="off", trace=True)
        params.update({k: host.parse_value(v) for k, v in (kv.split("=", 1) for kv in a.param)})
        w = make_weights(case, device="cuda")
        x = make_input(case, 1.0, 0).cuda()
        p = host.prepare(case, w, **params)
        for _ in range(3):
            host.run(p, x)
        torch.cuda.synchronize()
        host.check(p)
        tr = p.trace.cpu().double()
        kinds = [G.KINDS[t.kind] for t in p.graph.tasks]
        cons = consumer_profile(tr, kinds)
        rec = dict(params={k: v for k, v in params.items() if k not in ("tune", "trace")}, tasks=len(kinds),
                   kernel_us=round(cons["kernel_us"], 1), consumer_busy=round(cons["busy"], 3),
                   idle_dep_us=round(cons["idle_dep_us"], 1),
                   late_loader=phase_profile(tr, p.graph.producers, kinds)["late_loader"],
                   idle={str(lag): idle_profile(tr, p.graph.producers, lag_us=lag) for lag in a.lag})
        out[case.name] = rec
        print(case.name, json.dumps(rec), flush=True)
        del p
    write_json_atomic(os.path.join(a.out, "idle.json"), out)


if __name__ == "__main__":
    main()
