"""The dag scheduler simulator's table for the docs: per case, the task count, the work per program, the critical
path, and the simulated makespan and idle fraction of both task-assignment policies (``kernels.dag.sim``).

    python -m bench.dag.simulate 2 3 4 12 --seeds 5 [--param name=value ...] [--programs 264]

``--window W`` and ``--ready`` add the simulator-only ``window`` and ``ready`` policies; ``--cost-task-us`` / ``--cost-link-us`` /
``--cost-tflops`` change the cost model the parameters pick (``cost_model``) to price a lever before it is built;
``--pop-us`` / ``--signal-us`` are the simulator's ticket and signal delays; ``--durations`` simulates one cost
model's durations on the order another gives (docs/dag.md, "Open"). ``--ws`` starts from form ws's fitted costs,
one program an SM, its ticket and link (``bench.dag.levers.WS``) instead of form tl's; ``--tuned GPU`` builds each
case with its committed parameters (``config/tuned/<GPU>/<case>.yaml``) under the ``--param`` given:

    python -m bench.dag.simulate 2 3 4 12 --ws --tuned h200 --seeds 3 --jitter 0.1 --cost-task-us 1.0 --signal-us 0.6
"""
from __future__ import annotations

import argparse
import dataclasses

from kernels.dag import graph as G
from kernels.dag.sim import report, timed


def main(argv=None):
    from kernels import load_case
    from kernels.dag.host import check_params, graph_for, parse_value
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--param", action="append", default=[], help="name=value (config/variant/dag.yaml names)")
    ap.add_argument("--programs", type=int, help="programs (default 132)")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--jitter", type=float, default=0.25, help="sigma of the log-normal duration factor")
    ap.add_argument("--pop-us", type=float, help="µs per ticket (default 0.7; --ws 0.1)")
    ap.add_argument("--signal-us", type=float,
                    help="µs from a producer's end to its consumer's start (default 0.7; --ws 1.2)")
    ap.add_argument("--ws", action="store_true", help="form ws's fitted costs, programs, ticket and link")
    ap.add_argument("--tuned", metavar="GPU", help="each case's committed parameters on GPU (e.g. h200)")
    ap.add_argument("--window", type=int, default=0, help="also the window policy with this many tickets")
    ap.add_argument("--ready", action="store_true", help="also the ready-queue policy (event-driven; not in the kernel)")
    ap.add_argument("--cost-task-us", type=float, help="the cost model's fixed µs per task")
    ap.add_argument("--cost-link-us", type=float, help="the cost model's µs per link (the critical order)")
    ap.add_argument("--cost-tflops", type=float, help="the cost model's TFLOP/s per program")
    ap.add_argument("--cost-gbs", type=float, help="the cost model's GB/s of operand traffic per program")
    ap.add_argument("--durations", choices=tuple(G.COST_MODELS),
                    help="simulate the task durations of this cost model (the order stays the parameters' cost_model)")
    a = ap.parse_args(argv)
    from bench.dag.levers import WS
    start = WS if a.ws else dict(programs=132, pop_us=0.7, signal_us=0.7)
    a.programs, a.pop_us, a.signal_us = (start[k] if getattr(a, k) is None else getattr(a, k)
                                         for k in ("programs", "pop_us", "signal_us"))
    given = dict(kv.split("=", 1) for kv in a.param)
    given = {k: parse_value(v) for k, v in given.items()}
    name = "ws" if a.ws else check_params(given)["cost_model"]
    changes = {f: v for f, v in (("task_us", a.cost_task_us), ("link_us", a.cost_link_us),
                                 ("tflops", a.cost_tflops), ("gbs", a.cost_gbs)) if v is not None}
    cost = dataclasses.replace(WS["cost"] if a.ws else G.COST_MODELS[name], **changes)
    print(f"{'case':8} {'tasks':>6} {'work/N':>8} {'crit':>7} {'queue':>7} {'q+jit':>7} {'idle':>5} "
          f"{'static':>7} {'s+jit':>7} {'idle':>5}" + (f" {'window':>7} {'w+jit':>7}" if a.window else "")
          + (f" {'ready':>7} {'r+jit':>7} {'idle':>5}" if a.ready else "")
          + f"  (µs, {a.programs} programs, cost model {name}{' ' + str(changes) if changes else ''})")
    for c in a.cases:
        case = load_case(c)
        params = dict(given)
        if a.tuned:
            from bench.dag.ws_ab import require_committed
            params = dict(require_committed(case, a.tuned, "simulate"), **given)
        g = graph_for(case, n_programs=a.programs, cost=cost, **params)
        if a.durations:
            other = graph_for(case, n_programs=a.programs, **dict(params, cost_model=a.durations))
            dur = {t.seq: t.cost for t in other.tasks}
            for t in g.tasks:
                t.cost = dur[t.seq]
        r = report(g, a.programs, a.seeds, a.jitter, pop_us=a.pop_us, signal_us=a.signal_us)
        q, s = r["queue"], r["static"]
        line = (f"{case.name:8} {r['tasks']:6d} {r['work_us'] / a.programs:8.1f} {r['critical_path_us']:7.1f} "
                f"{q['makespan_us']:7.1f} {q['jittered_us']:7.1f} {q['idle']:5.2f} "
                f"{s['makespan_us']:7.1f} {s['jittered_us']:7.1f} {s['idle']:5.2f}")
        for policy, on, idle in (("window", a.window, False), ("ready", a.ready, True)):
            if not on:
                continue  # run 0 without jitter, the rest jittered (as ``report`` does for the kernel's policies)
            runs = [timed(g, a.programs, policy, a.jitter if k else 0.0, a.pop_us, a.signal_us, seed=k,
                          window=a.window) for k in range(a.seeds)]
            line += f" {runs[0].makespan_us:7.1f} {sum(r.makespan_us for r in runs[1:]) / max(1, a.seeds - 1):7.1f}"
            line += f" {runs[0].idle_fraction:5.2f}" if idle else ""
        print(line, flush=True)

if __name__ == "__main__":
    main()
