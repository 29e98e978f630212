"""A cluster-resident schedule priced on form ws's model before it is built (lab; docs/dag.md, "What bounds it").

The idea: keep a row block's stages inside one thread-block cluster, so that most hand-overs go through the cluster (a
producer writing into its dependant's shared memory and arriving on its mbarrier) instead of L2. What that
costs besides the cheaper link is the schedule: a cluster's programs can only take their own row block's tasks, so
where today any free SM takes the next ticket, here a cluster waits while another has work. This prices both.

The graph is each case's committed one (``config/tuned/<gpu>/<case>.yaml``, ``--param`` over it). The 132 programs
are ``--clusters`` clusters of ``--size`` programs (the rest idle). Each task belongs to the cluster of its rows:
row block m of NM goes to cluster m mod clusters when NM ≥ clusters; when there are more clusters than row blocks,
each row block has clusters // NM of them and its tasks are dealt over them by column tile (GEMMs), head (attention)
or LayerNorm row chunk. Every cluster runs the queue order's tasks that are its own (``--order partition``: an order
fitted to the partition, ``partition_order``), its programs taking them as today's programs take tickets. A link
costs ``--link-intra`` µs between two tasks of one cluster and ``--link-inter`` between clusters (today's 1.2); a
task's fixed time is the model's 1.5 µs unless ``--fixed-us``, and ``--fixed-intra-us`` sets it for a task whose
producers are all in its own cluster (its first operands already in shared memory). The base line is today's: one
queue over 132 programs, every link 1.2 µs.

    python -m bench.dag.cluster_price 2 3 4 12 --size 16 --clusters 8 --link-intra 0.3
    python -m bench.dag.cluster_price 2 3 4 12 --size 16 --clusters 8 --link-intra 0.3 --search

Per case (µs, the mean of ``--seeds`` runs with σ = ``--jitter``, the first run without): today's schedule on the
committed graph, the global queue on the graph priced, the partitioned schedule on it and its change against today,
the share of links inside a cluster, the programs' idle fraction, and the published speedup times today / cluster.
A partition wants other tiles than the global queue's (a row block's stage on 16 SMs, not 132): ``--search`` tries
form ws's graph tilings (``SEARCH``: QKV tiles 64 or 128 wide, the other GEMMs' 64 or 128, the K splits) and prints,
per case, the best partitioned schedule and, beside it, the best global queue over the same tilings (so a gain that
retiling alone would give is not counted as the cluster's).
"""
from __future__ import annotations

import argparse
import csv
import heapq
import math
import random

from kernels.cases import config_dir
from kernels.dag import graph as G

# --search: form ws's tilings (block_n_o, block_n_ffn1 and block_n_ffn2 are one width on form ws)
SEARCH = dict(block_n_qkv=(64, 128), block_n=(64, 128), split_k_o=(1, 2, 4), split_k_ffn2=(1, 2, 4, 8))


def published(variant: str = "dag", gpu: str = "h200") -> dict[int, float]:
    """{case number: ``variant``'s speedup over the fastest gated peer} from the published dag report
    (``docs/results/<gpu>/dag/summary.csv``, which the pipeline wrote)."""
    path = config_dir().parent / "docs" / "results" / gpu / "dag" / "summary.csv"
    with open(path, newline="") as f:
        return {int(r["case"][4:]): float(r["speedup_vs_best_peer"]) for r in csv.DictReader(f)
                if r["variant"] == variant and r["speedup_vs_best_peer"]}


def jittered_mean(runs: list[float]) -> float:
    """The mean of the jittered runs (all but the first, which runs without jitter), as ``kernels.dag.sim.report``."""
    return sum(runs[1:]) / (len(runs) - 1) if len(runs) > 1 else runs[0]


def row_block(t, case, tiling) -> int:
    """The row block (``block_m`` rows) a task's output rows lie in."""
    if t.kind in (G.LN1, G.LN2, G.LNF):
        return t.a * tiling.block_m_ln // tiling.block_m
    if t.kind == G.ATTN:
        return (t.a * case.S + t.c * tiling.block_q) // tiling.block_m
    return t.a


def deal(t) -> int:
    """What spreads a row block's tasks over its clusters: column tile, head, or LayerNorm row chunk."""
    return t.b if t.kind in (G.QKV, G.ATTN, G.OPROJ, G.FFN1, G.FFN2) else t.a


def clusters_of(g: G.Graph, n_clusters: int) -> list[int]:
    """The cluster of every task (queue order)."""
    nm = -(-g.case.tokens // g.tiling.block_m)
    per = max(1, n_clusters // nm)
    out = []
    for t in g.tasks:
        m = row_block(t, g.case, g.tiling)
        out.append((m * per + deal(t) % per) % n_clusters if nm < n_clusters else m % n_clusters)
    return out


def partition_order(g: G.Graph, cluster: list, n_clusters: int, size: int, link_intra: float,
                    link_inter: float) -> list[int]:
    """A queue order fitted to the partition: the start order of a list schedule (the cost model's durations) in
    which each cluster's ``size`` programs start the ready task of their cluster with the longest chain of costs and
    links still ahead of it, as ``graph.critical_order`` does over all programs."""
    n = len(g.tasks)
    cons: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(g.producers):
        for q in ps:
            cons[q].append(i)
    link = lambda a, b: link_intra if cluster[a] == cluster[b] else link_inter   # noqa: E731
    bottom = [0.0] * n
    for i in range(n - 1, -1, -1):          # the queue order is topological
        bottom[i] = g.tasks[i].cost + max((link(i, c) + bottom[c] for c in cons[i]), default=0.0)
    missing = [len(ps) for ps in g.producers]
    ready_at = [0.0] * n
    ready: list[list] = [[] for _ in range(n_clusters)]        # per cluster: (-bottom, task) whose producers ended
    for i in range(n):
        if not missing[i]:
            heapq.heappush(ready[cluster[i]], (-bottom[i], i))
    events = [(0.0, 1, c) for c in range(n_clusters) for _ in range(size)]   # (time, 1: a program of c free)
    heapq.heapify(events)
    start = [0.0] * n
    waiting: list[list[float]] = [[] for _ in range(n_clusters)]            # free programs' times, per cluster
    while events:
        t, kind, x = heapq.heappop(events)
        if kind == 0:                       # task x finished: its consumers may become ready
            for c in cons[x]:
                missing[c] -= 1
                ready_at[c] = max(ready_at[c], t + link(x, c))
                if not missing[c]:
                    heapq.heappush(ready[cluster[c]], (-bottom[c], c))
                    if waiting[cluster[c]]:
                        heapq.heappush(events, (t, 1, cluster[c]))
                        waiting[cluster[c]].pop()
            continue
        if not ready[x]:
            waiting[x].append(t)            # this program waits for a task of its cluster to become ready
            continue
        _, i = heapq.heappop(ready[x])
        start[i] = max(t, ready_at[i])
        heapq.heappush(events, (start[i] + g.tasks[i].cost, 0, i))
        heapq.heappush(events, (start[i] + g.tasks[i].cost, 1, x))
    return sorted(range(n), key=lambda i: (start[i], -bottom[i], i))


def partitioned(g: G.Graph, cluster: list, n_clusters: int, size: int, dur: list, pop_us: float,
                link_intra: float, link_inter: float, order: list | None = None) -> tuple[float, float]:
    """Makespan and the share of intra-cluster links: each cluster's ``size`` programs take that cluster's tasks in
    queue order (``order``: another topological order), the first free one the next (as ``kernels.dag.sim.timed``'s
    ``queue`` does over all programs)."""
    free = [[(0.0, k) for k in range(size)] for _ in range(n_clusters)]
    finish = [0.0] * len(g.tasks)
    intra = links = 0
    for i in (range(len(g.tasks)) if order is None else order):
        c = cluster[i]
        t_free, k = heapq.heappop(free[c])
        ready = t_free + pop_us
        for p in g.producers[i]:
            same = cluster[p] == c
            intra += same
            links += 1
            ready = max(ready, finish[p] + (link_intra if same else link_inter))
        finish[i] = ready + dur[i]
        heapq.heappush(free[c], (finish[i], k))
    return max(finish, default=0.0), intra / max(1, links)


def durations(g: G.Graph, cluster: list | None, fixed_us: float | None, fixed_intra_us: float | None, jitter: float,
              seed: int) -> list[float]:
    """Each task's µs: its cost with the fixed part replaced as asked, times a log-normal factor."""
    rng = random.Random(seed)
    base = g.tiling.cost.task_us
    out = []
    for i, t in enumerate(g.tasks):
        fixed = base if fixed_us is None else fixed_us
        if cluster is not None and fixed_intra_us is not None and g.producers[i] and \
                all(cluster[p] == cluster[i] for p in g.producers[i]):
            fixed = fixed_intra_us
        out.append((t.cost - base + fixed) * (rng.lognormvariate(0.0, jitter) if jitter > 0 else 1.0))
    return out


def global_us(case, params: dict, seeds: int, jitter: float) -> float:
    """Today's schedule on ``params``' graph: one queue over every program, every link 1.2 µs (form ws's model)."""
    from bench.dag.levers import WS
    from kernels.dag.host import graph_for
    from kernels.dag.sim import timed
    g = graph_for(case, n_programs=WS["programs"], cost=WS["cost"], **params)
    return jittered_mean([timed(g, WS["programs"], "queue", jitter if s else 0.0, WS["pop_us"], WS["signal_us"],
                                seed=s).makespan_us for s in range(seeds)])


def tilings(params: dict):
    """``params`` with each of ``SEARCH``'s tilings over it."""
    import itertools
    for q, n, so, sf in itertools.product(*SEARCH.values()):
        yield dict(params, block_n_qkv=q, block_n_o=n, block_n_ffn1=n, block_n_ffn2=n, split_k_o=so, split_k_ffn2=sf)


def price(case, params: dict, size: int, n_clusters: int, link_intra: float, link_inter: float,
          fixed_us: float | None, fixed_intra_us: float | None, seeds: int, jitter: float,
          order: str = "queue") -> dict:
    from bench.dag.levers import WS
    from kernels.dag.host import graph_for
    if size * n_clusters > WS["programs"]:
        raise SystemExit(f"cluster_price: {n_clusters} clusters of {size} are more than the {WS['programs']} SMs")
    g = graph_for(case, n_programs=WS["programs"], cost=WS["cost"], **params)
    cluster = clusters_of(g, n_clusters)
    seq = partition_order(g, cluster, n_clusters, size, link_intra, link_inter) if order == "partition" else None
    new, share, work = [], 0.0, 0.0
    for s in range(seeds):
        dur = durations(g, cluster, fixed_us, fixed_intra_us, jitter if s else 0.0, s)
        ms, share = partitioned(g, cluster, n_clusters, size, dur, WS["pop_us"], link_intra, link_inter, seq)
        new.append(ms)
        if s == 0:
            work = sum(dur)                # the unjittered run's
    return dict(tasks=len(g.tasks), row_blocks=-(-case.tokens // g.tiling.block_m),
                base_us=global_us(case, params, seeds, jitter), cluster_us=jittered_mean(new), intra_links=share,
                idle=1 - work / (size * n_clusters * new[0]) if new[0] else 0.0)


def main(argv=None) -> int:
    from bench.dag.ws_ab import require_committed
    from kernels import load_case
    from kernels.dag.host import parse_value
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--size", type=int, default=16, help="programs a cluster (one an SM)")
    ap.add_argument("--clusters", type=int, default=8)
    ap.add_argument("--link-intra", type=float, default=0.3, help="µs from a task's end to a dependant's start, "
                    "one cluster")
    ap.add_argument("--link-inter", type=float, default=1.2, help="the same between clusters (today's link)")
    ap.add_argument("--fixed-us", type=float, help="a task's fixed µs (the model's 1.5)")
    ap.add_argument("--fixed-intra-us", type=float, help="… for a task whose producers are all in its cluster")
    ap.add_argument("--tuned", default="h200", help="the GPU whose committed parameters build each graph")
    ap.add_argument("--param", action="append", default=[], help="name=value over the committed parameters")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jitter", type=float, default=0.1)
    ap.add_argument("--search", action="store_true", help="the best of SEARCH's tilings, partitioned and global")
    ap.add_argument("--order", choices=("queue", "partition"), default="queue",
                    help="each cluster's tasks in today's queue order, or in an order fitted to the partition")
    a = ap.parse_args(argv)
    if a.size < 1 or a.clusters < 1:
        raise SystemExit("cluster_price: --size and --clusters at least 1")
    given = {k: parse_value(v) for k, v in (kv.split("=", 1) for kv in a.param)}
    print(f"{'case':6} {'tasks':>6} {'rows':>4} {'today':>7} {'global':>7} {'cluster':>8} {'change':>7} {'intra':>6} "
          f"{'idle':>5} {'×peer':>6}  ({a.clusters} clusters of {a.size}; links {a.link_intra} / {a.link_inter} µs; "
          f"fixed {a.fixed_us or 'model'} / intra {a.fixed_intra_us or 'same'} µs; {a.order} order; µs, form ws's "
          "model)")
    speed, pub = [], published()
    for c in a.cases:
        case = load_case(c)
        committed = require_committed(case, a.tuned, "cluster_price")
        params = dict(committed, **given)
        today = global_us(case, committed, a.seeds, a.jitter)
        run = lambda p: price(case, p, a.size, a.clusters, a.link_intra, a.link_inter, a.fixed_us,  # noqa: E731
                              a.fixed_intra_us, a.seeds, a.jitter, a.order)
        if a.search:
            rows = [(run(p), p) for p in tilings(params)]
            r, best = min(rows, key=lambda rp: rp[0]["cluster_us"])
            glob, gbest = min(((x["base_us"], p) for x, p in rows), key=lambda gp: gp[0])
        else:
            r, best = run(params), params
            glob, gbest = r["base_us"], params
        x = pub.get(case.number)
        x = x * today / r["cluster_us"] if x else None
        if x:
            speed.append(x)
        print(f"{case.name:6} {r['tasks']:6d} {r['row_blocks']:4d} {today:7.1f} {glob:7.1f} {r['cluster_us']:8.1f} "
              f"{100 * (r['cluster_us'] / today - 1):+6.1f}% {r['intra_links']:6.2f} {r['idle']:5.2f} "
              + (f"{x:6.2f}" if x else f"{'-':>6}"), flush=True)
        if a.search:
            print(f"       cluster: {_tiling(best)}; global: {_tiling(gbest)}")
    if len(speed) == len(a.cases) and speed:
        print(f"geomean × the fastest gated peer (the published speedups times today / cluster): "
              f"{math.exp(sum(map(math.log, speed)) / len(speed)):.2f}")
    return 0


def _tiling(p: dict) -> str:
    return " ".join(f"{k}={p[k]}" for k in ("block_n_qkv", "block_n_o", "split_k_o", "split_k_ffn2"))


if __name__ == "__main__":
    raise SystemExit(main())
