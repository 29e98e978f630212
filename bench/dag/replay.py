"""Replay a traced launch's measured task times through the queue simulator, and price what-ifs on them (lab;
docs/dag-results.md "Results" 45).

``kernels.dag.sim.timed`` with the ``queue`` policy (the kernel's: the next free program takes the next ticket and
waits for its counters) runs the graph with each task's *measured* body (``time_split.critical_path``'s: from the
later of the consumer's take and the loader's wait done to the work done) in place of a cost model, a ticket cost
``--pop-us`` and a link ``--link-us`` from a producer's end to its dependant's start (the release, the poll and the
hand-over: ~1.4 µs on the traced kernels, "Results" 45). The replay of the traced parameters is checked against the
traced launch; then each what-if changes the bodies or the link and reports the makespan against the replay's:

    python -m bench.dag.replay --from DIR                      # time_split's saved traces (trace_caseNN.pt)
    python -m bench.dag.replay --from DIR --what-if "link=0.7" "task=-0.5" "gemm=0.9" "attn=0.5 link=1.0"
    python -m bench.dag.replay --from DIR --what-if "kloop=0.8" --paired   # the GEMM tasks by pairs on clusters

A what-if is space-separated NAME=VALUE terms: ``link`` (µs, the link), ``pop`` (µs, a ticket), ``task`` (µs added
to every body, floored at 0.1), ``gemm`` / ``attn`` / ``ln`` or a kind (``qkv``, ``oproj``, ``ffn1``, ``ffn2``,
``ln1``, ``ln2``, ``lnf``) (a factor on those bodies, applied before ``task``), ``epi`` (a factor on the GEMM tasks'
epilogues within their bodies), ``kloop`` (a factor on their K loops). Writes ``DIR/replay.json``.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os

from bench.dag.time_split import GEMM, KIND, trace_graph, trace_programs, trace_sms, work_done

GROUPS = {"gemm": tuple(GEMM.values()), "attn": ("attn",), "ln": ("ln1", "ln2", "lnf")}
DEFAULT_WHAT_IFS = ("link=0.7", "link=1.0", "task=-0.5", "task=-1.0", "gemm=0.9", "attn=0.5", "ln=0.5",
                    "link=1.0 task=-0.5", "link=0.7 task=-0.5", "link=0", "epi=0.5 ln=0.6")


def bodies(trace) -> list:
    """Each task's measured body, µs (from max(take, wait done) to ``time_split.work_done``; 0.1 at least)."""
    from bench.dag.ws_dag import _float_trace
    return [max(0.1, (work_done(r) - max(r[5], r[1])) / 1e3) for r in _float_trace(trace).tolist()]


def epilogues(trace) -> list:
    """Each GEMM task's measured epilogue, µs (its K loop's end, column 6, to ``time_split.work_done``); 0 for the
    other kinds (no column 6)."""
    from bench.dag.ws_dag import _float_trace
    return [max(0.0, (work_done(r) - r[6]) / 1e3) if r[6] else 0.0 for r in _float_trace(trace).tolist()]


def kloops(trace) -> list:
    """Each GEMM task's measured K loop, µs (its start, as ``bodies``', to the K loop's end, column 6); 0 for the
    other kinds."""
    from bench.dag.ws_dag import _float_trace
    return [max(0.0, (r[6] - max(r[5], r[1])) / 1e3) if r[6] else 0.0 for r in _float_trace(trace).tolist()]


def parse_what_if(text: str) -> dict:
    """``"link=0.7 gemm=0.9"`` -> {"link": 0.7, "gemm": 0.9}; a clear error for anything else."""
    out = {}
    names = {"link", "task", "pop", "epi", "kloop", *GROUPS, *KIND.values()}
    for term in text.split():
        k, eq, v = term.partition("=")
        if not eq or k not in names:
            raise SystemExit(f"replay: what-if term {term!r}: NAME=VALUE with NAME one of {sorted(names)}")
        try:
            out[k] = float(v)
        except ValueError:
            raise SystemExit(f"replay: what-if term {term!r}: {v!r} is not a number") from None
    return out


def replay(g, body: list, link_us: float, pop_us: float = 0.3, what: dict | None = None,
           programs: int = 132, epi: list | None = None, kloop: list | None = None) -> float:
    """Makespan (µs) of graph ``g`` (queue order, ``g.producers``) on ``programs`` programs (form ws: one an SM) with
    the bodies ``body`` (per task, queue order) changed by ``what`` (``parse_what_if``; its ``epi`` factor scales the
    GEMM epilogues ``epi``, per task, within the bodies, and its ``kloop`` factor the GEMM K loops ``kloop``, both
    before the other factors)."""
    from kernels.dag import sim
    g2, link, pop = _changed(g, body, link_us, pop_us, what, epi, kloop)
    return sim.timed(g2, programs, "queue", 0.0, pop, link).makespan_us


def pairs(g) -> list:
    """The graph's tasks as a 2-CTA cluster would take them: a GEMM task with the task of the same kind, layer,
    column tile and K split on the other row block of its pair (row blocks 2j and 2j + 1) as one pair, every other
    task alone. A list of tuples of queue indices, in the queue order of each group's first task."""
    first, groups = {}, []
    for i, t in enumerate(g.tasks):
        if t.kind in GEMM:
            key = (t.kind, t.layer, t.a // 2, t.b, t.c)
            if key in first:
                groups[first.pop(key)] += (i, )
                continue
            first[key] = len(groups)
        groups.append((i, ))
    return groups


def replay_paired(g, body: list, link_us: float, pop_us: float = 0.3, what: dict | None = None,
                  programs: int = 132, epi: list | None = None, kloop: list | None = None,
                  dispatch: str = "first") -> float:
    """``replay`` with the GEMM tasks taken by pairs (``pairs``) on clusters of two programs (programs 2c and 2c + 1
    are cluster c). A single task's ticket goes to the first free program. A pair's ticket (``dispatch``): "first",
    to the first free program, which waits for its cluster's other program to be done with its task; "cluster", to
    the cluster whose two programs are both free first. Both run the pair from the later of that and the two tasks'
    dependencies (each a link after its producers' ends) until the longer of the two bodies is done (lock-step: each
    K step's W tile is the cluster's). ``what``'s ``kloop`` factor, for a tile read once for both, applies to the
    paired tasks' K loops only. Makespan, µs."""
    if dispatch not in ("first", "cluster"):
        raise ValueError(f"replay: dispatch {dispatch!r}: first or cluster")
    groups = pairs(g)
    if kloop is not None:   # only the paired tasks' K loops change
        paired = {i for grp in groups if len(grp) == 2 for i in grp}
        kloop = [k if i in paired else 0.0 for i, k in enumerate(kloop)]
    g2, link, pop = _changed(g, body, link_us, pop_us, what, epi, kloop)
    cost = [t.cost for t in g2.tasks]
    free = [0.0] * programs
    finish = [0.0] * len(cost)
    for grp in groups:
        if len(grp) == 2 and dispatch == "cluster":
            c = min(range(programs // 2), key=lambda c: (max(free[2 * c], free[2 * c + 1]), c))
            cpu = (2 * c, 2 * c + 1)
        else:
            k = min(range(programs), key=lambda j: (free[j], j))
            cpu = (k, k ^ 1) if len(grp) == 2 else (k, )
        start = max([max(free[j] for j in cpu) + pop] + [finish[p] + link for i in grp for p in g.producers[i]])
        end = start + max(cost[i] for i in grp)
        for i in grp:
            finish[i] = end
        for j in cpu:
            free[j] = end
    return max(finish, default=0.0)


def _changed(g, body: list, link_us: float, pop_us: float, what: dict | None, epi: list | None,
             kloop: list | None):
    """(graph with the changed bodies as its tasks' costs, link, pop) for ``replay``'s ``what``."""
    what = dict(what or {})
    link = what.pop("link", link_us)
    pop = what.pop("pop", pop_us)
    add = what.pop("task", 0.0)
    fe = what.pop("epi", 1.0)
    if fe != 1.0 and epi is None:
        raise ValueError("replay: an 'epi' what-if needs the tasks' epilogues (replay.epilogues of the trace)")
    fk = what.pop("kloop", 1.0)
    if fk != 1.0 and kloop is None:
        raise ValueError("replay: a 'kloop' what-if needs the tasks' K loops (replay.kloops of the trace)")
    factor = {}
    for k, f in what.items():
        for kind in GROUPS.get(k, (k,)):
            factor[kind] = factor.get(kind, 1.0) * f
    body = [d - e * (1.0 - fe) for d, e in zip(body, epi)] if fe != 1.0 else body
    body = [d - k * (1.0 - fk) for d, k in zip(body, kloop)] if fk != 1.0 else body
    g2 = copy.copy(g)
    g2.tasks = [dataclasses.replace(t, cost=max(0.1, d * factor.get(KIND.get(t.kind), 1.0) + add))
                for t, d in zip(g.tasks, body)]
    return g2, link, pop


def reordered(g, rec: dict, body: list, order: str, link_us: float):
    """(graph, bodies) of the same tasks in another queue order: ``order`` a cost model of ``graph.COST_MODELS`` (the
    critical order from its costs), or ``measured`` / ``measured+link`` (from the measured bodies themselves, without
    or with ``link_us`` a link); each task keeps its measured body."""
    from kernels.dag import graph as G
    from kernels.dag import host
    key = lambda t: (t.kind, t.layer, t.a, t.b, t.c)   # noqa: E731
    dur = {key(t): d for t, d in zip(g.tasks, body)}
    if order in G.COST_MODELS:
        o = host.check_params(dict(rec["params"], cost_model=order))
        programs = trace_programs(rec, o)
        g2 = G.build(g.case, host.tiling_for(g.case, o, programs), "critical", programs)
    elif order in ("measured", "measured+link"):
        seq = sorted((dataclasses.replace(t, cost=dur[key(t)]) for t in g.tasks), key=lambda t: t.seq)
        prods = G._producer_lists(seq, len(g.goals))
        perm = G.critical_order(seq, prods, trace_programs(rec, host.check_params(dict(rec["params"]))),
                                link_us if order == "measured+link" else 0.0)
        g2 = G.Graph(g.case, g.tiling, [seq[i] for i in perm], g.goals, g.counter_names, "critical")
        g2.producers = G._producer_lists(g2.tasks, len(g.goals))
    else:
        raise SystemExit(f"replay: order {order!r}: one of {sorted(G.COST_MODELS)}, measured, measured+link")
    return g2, [dur[key(t)] for t in g2.tasks]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="src", required=True, help="a folder of time_split's saved traces")
    ap.add_argument("--link-us", type=float, default=1.4, help="a producer's end to its dependant's start (µs)")
    ap.add_argument("--pop-us", type=float, default=0.3, help="a ticket (µs)")
    ap.add_argument("--what-if", nargs="*", default=list(DEFAULT_WHAT_IFS))
    ap.add_argument("--orders", nargs="*", default=[], help="other queue orders replayed on the measured bodies: "
                    "a cost model (nominal, h200) or measured / measured+link")
    ap.add_argument("--paired", action="store_true", help="also each what-if with the GEMM tasks taken by pairs on "
                    "2-CTA clusters (replay_paired, both dispatches; 'kloop' then on the paired tasks only), against "
                    "the replay")
    a = ap.parse_args(argv)
    import torch
    from bench.dag.ws_dag import _float_trace
    whats = [(w, parse_what_if(w)) for w in a.what_if]
    files = sorted(os.path.join(a.src, f) for f in os.listdir(a.src) if f.startswith("trace_") and f.endswith(".pt"))
    if not files:
        raise SystemExit(f"replay: no trace_*.pt in {a.src} (python -m bench.dag.time_split --cases ... --out DIR)")
    res = {}
    for f in files:
        rec = torch.load(f)
        g = trace_graph(rec)
        body, epi, kl = bodies(rec["trace"]), epilogues(rec["trace"]), kloops(rec["trace"])
        t = _float_trace(rec["trace"])
        traced = float((t[:, 4].max() - t[:, 0].min()) / 1e3)
        sms = trace_sms(rec)
        base = replay(g, body, a.link_us, a.pop_us, programs=sms)
        r = res[rec["case"]] = dict(traced_us=traced, replay_us=base, link_us=a.link_us, pop_us=a.pop_us,
                                    what_if={})
        print(f"{rec['case']}: traced {traced:.1f} us, replayed {base:.1f} us ({100 * (base / traced - 1):+.1f}%)")
        for text, w in whats:
            v = replay(g, body, a.link_us, a.pop_us, w, sms, epi, kl)
            r["what_if"][text] = dict(us=v, change=v / base - 1)
            print(f"  {text:28} {v:7.1f} us  {100 * (v / base - 1):+6.1f}%")
        for dispatch in ("first", "cluster") if a.paired else ():
            r[f"paired_{dispatch}"] = res_p = {}
            for text, w in [("(as traced)", {})] + whats:
                v = replay_paired(g, body, a.link_us, a.pop_us, w, sms, epi, kl, dispatch)
                res_p[text] = dict(us=v, change=v / base - 1)
                print(f"  paired ({dispatch:7}) {text:21} {v:7.1f} us  {100 * (v / base - 1):+6.1f}%")
        r["orders"] = {}
        for order in a.orders:
            g2, b2 = reordered(g, rec, body, order, a.link_us)
            v = replay(g2, b2, a.link_us, a.pop_us, programs=sms)
            r["orders"][order] = dict(us=v, change=v / base - 1)
            print(f"  order {order:22} {v:7.1f} us  {100 * (v / base - 1):+6.1f}%")
    tmp = os.path.join(a.src, ".replay.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(res, fh, indent=1)
    os.replace(tmp, os.path.join(a.src, "replay.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
