"""Graph-changing levers priced in the scheduler simulator before anything is built (lab; docs/dag.md, "Rejected or
open ideas"). Each lever rewrites the graph the kernel would run — ``simulate``'s flags only change costs — and the
table gives the critical path and the jittered queue makespan next to today's graph (264 programs, the fitted cost
model, σ = 0.1, 0.3 µs a ticket, 0.6 µs a link, as "Results" 8).

* ``qkv_split2``: QKV tiles split in two along K (each half the K loop plus ``--extra-us`` for the accumulation into
  an fp32 q|k|v copy that then needs zeroing and a split in the attention's loads; neither is priced beyond
  ``--extra-us``). Both halves signal the same counters, so the attention waits for both.
* ``ffn1_split2``: the same for FFN1 (GELU would then move into FFN2's A loads: not priced).
* ``attn_kv_split``: causal attention tasks over more than ``--kv-blocks`` key blocks split their keys over two
  programs, the last to finish merging (approximated: each such task costs the fixed cost, half its key work and
  ``--extra-us`` for the partial's store, the arrival atomic and the merge; the other half's program time is not
  added, so this is a bound in the lever's favour).

    python -m bench.dag.levers 2 3 4 12 --lever qkv_split2 --extra-us 0.3
"""
from __future__ import annotations

import argparse

from kernels import load_case
from kernels.dag import graph as G
from kernels.dag import host
from kernels.dag.sim import report


def _split_gemm(kind: int, extra_us: float):
    """A ``_Builder`` method emitting two K halves per tile of ``kind`` (QKV or FFN1), same waits and signals."""
    orig = G._Builder.qkv if kind == G.QKV else G._Builder.ffn1

    def stage(self, l):
        start = len(self.tasks)
        orig(self, l)
        tiles = self.tasks[start:]
        del self.tasks[start:]
        for t in tiles:
            for c in t.signals:        # the second half signals the same counters: their goals double
                self.ctr.goals[c] += 1
            half = self.t.cost.task_us + (t.cost - self.t.cost.task_us) / 2 + extra_us
            for s in range(2):
                self.tasks.append(G.Task(t.kind, t.layer, t.a, t.b, s, waits=t.waits, signals=t.signals,
                                         cost=half, access=t.access))
    return stage


def build(case, lever: str, extra_us: float, kv_blocks: int):
    saved = G._Builder.qkv, G._Builder.ffn1
    try:
        if lever == "qkv_split2":
            G._Builder.qkv = _split_gemm(G.QKV, extra_us)
        elif lever == "ffn1_split2":
            G._Builder.ffn1 = _split_gemm(G.FFN1, extra_us)
        g = host.graph_for(case, n_programs=264, cost_model="h200")
    finally:
        G._Builder.qkv, G._Builder.ffn1 = saved
    if lever == "attn_kv_split" and case.causal:
        fixed = g.tiling.cost.task_us
        for t in g.tasks:
            if t.kind == G.ATTN and t.c + 1 > kv_blocks:  # query block c sees c + 1 key blocks (block_q = block_kv)
                t.cost = fixed + (t.cost - fixed) / 2 + extra_us
    return g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--lever", choices=("qkv_split2", "ffn1_split2", "attn_kv_split"), required=True)
    ap.add_argument("--extra-us", type=float, default=0.3)
    ap.add_argument("--kv-blocks", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args(argv)
    print(f"{'case':8} {'tasks':>6} {'crit':>7} {'q+jit':>7}   {'lever':>6} {'crit':>7} {'q+jit':>7} {'change':>7}"
          f"  (µs; {a.lever}, extra {a.extra_us} µs)")
    for c in a.cases:
        case = load_case(c)
        base = host.graph_for(case, n_programs=264, cost_model="h200")
        new = build(case, a.lever, a.extra_us, a.kv_blocks)
        rb, rn = (report(g, 264, a.seeds, 0.1, pop_us=0.3, signal_us=0.6) for g in (base, new))
        qb, qn = rb["queue"]["jittered_us"], rn["queue"]["jittered_us"]
        print(f"{case.name:8} {len(base.tasks):6d} {rb['critical_path_us']:7.1f} {qb:7.1f}   {len(new.tasks):6d} "
              f"{rn['critical_path_us']:7.1f} {qn:7.1f} {100 * (qn / qb - 1):+6.1f}%", flush=True)


if __name__ == "__main__":
    main()
