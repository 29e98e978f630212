"""The dag scheduler simulator's table for the docs: per case, the task count, the work per program, the critical
path, and the simulated makespan and idle fraction of both task-assignment policies (``kernels.dag.sim``).

    python -m bench.dag.simulate 2 3 4 12 --seeds 5 [--param name=value ...] [--programs 264]
"""
from __future__ import annotations

import argparse

from kernels.dag.sim import report


def main(argv=None):
    from kernels import load_case
    from kernels.dag.host import graph_for, parse_value
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--param", action="append", default=[], help="name=value (config/variant/dag.yaml names)")
    ap.add_argument("--programs", type=int, default=132)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--jitter", type=float, default=0.25, help="sigma of the log-normal duration factor")
    a = ap.parse_args(argv)
    params = dict(kv.split("=", 1) for kv in a.param)
    params = {k: parse_value(v) for k, v in params.items()}
    print(f"{'case':8} {'tasks':>6} {'work/N':>8} {'crit':>7} {'queue':>7} {'q+jit':>7} {'idle':>5} "
          f"{'static':>7} {'s+jit':>7} {'idle':>5}  (µs, {a.programs} programs)")
    for c in a.cases:
        case = load_case(c)
        g = graph_for(case, n_programs=a.programs, **params)
        r = report(g, a.programs, a.seeds, a.jitter)
        q, s = r["queue"], r["static"]
        print(f"{case.name:8} {r['tasks']:6d} {r['work_us'] / a.programs:8.1f} {r['critical_path_us']:7.1f} "
              f"{q['makespan_us']:7.1f} {q['jittered_us']:7.1f} {q['idle']:5.2f} "
              f"{s['makespan_us']:7.1f} {s['jittered_us']:7.1f} {s['idle']:5.2f}")


if __name__ == "__main__":
    main()
