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
* ``ffn_fused``: FFN2 folded into FFN1 (the seqres family's ``ffn_fused``): an FFN1 tile also multiplies its GELU
  columns by their rows of W2 (64 × D, K = ``block_n_ffn1``, three products) and adds the product into the residual;
  the FFN2 tasks and the FFN1 → FFN2 link go, the next LN1 waits for every FFN1 tile of its row block.
  ``--extra-us`` per tile for the 64 × D atomics.
* ``attn_oproj``: the output projection folded into the attention (seqres's ``attn_oproj``): an attention task also
  multiplies its 64 × dh output by its head's rows of Wo (K = dh) into the residual; the output-projection tasks and
  their link go, LN2 waits for every attention task of its rows.
* ``ln_fold``: LN1 (past layer 0) and LN2 folded into their neighbours: the last K split to finish each residual
  tile (output projection, FFN2) would compute its 64 columns' row statistics (mean, M2) and store the tile split as
  the next GEMM's A, and the QKV / FFN1 tile would merge its rows' partial statistics and apply the LayerNorm in
  its epilogue or A loads. The LayerNorm tasks and their links go (their consumers wait for the residual tiles
  directly); every output-projection / FFN2 task costs ``--extra-us`` more (the arrival atomic's round trip, and the
  statistics on the last split), every QKV / FFN1 tile ``--consumer-us`` more.
* ``ln_fold_ws``: the fold as form ws would run it (docs/dag.md, what bounds it since "Results" 39): the QKV and
  FFN1 tiles read the residual's fp32 rows in place (split by a warpgroup beside the consumer) and apply the
  LayerNorm in their epilogue, so every LN1 (layer 0's too: the input is fp32 rows; each row block's first QKV tile
  starts the residual as a copy of them) and every LN2 task goes, and each QKV / FFN1 tile costs ``--consumer-us``
  more. In place means a hazard the plain fold has not: an output-projection / FFN2 task adds into rows that QKV /
  FFN1 tiles of other heads / columns may still be reading, so it also waits for every QKV / FFN1 tile of its row
  block (one more counter per layer and row block; the accesses are rewritten with the tasks, so
  ``graph.check_hazards`` proves the waits close the hazard). No producer cost (``--extra-us`` is unused).

* ``i8_qkv_ffn1``, ``i8c_qkv_ffn1``, ``i8_all``, ``i8b_all``, ``i8b128_all``, ``i8cb128_all``, ``i8b256_all``: the
  int8 limb schemes (``bench.seqres.precision_probe``'s ``I8_SCHEMES``, the names of ``bench.dag.precision``'s rows;
  docs/dag-results.md "Results" 52) on QKV and FFN1, or on all four GEMMs: each such tile re-costed with 2 bytes an
  element of A and of W (two int8 limbs, where bf16 hi/lo take 4 and ``f16_w1``'s weight 2) and its products at
  int8's twice-bf16 rate: four products a K step, 2 units of bf16 time (``i8c``: three, 1.5 units), plus
  ``--extra-us`` a tile (the epilogue's combination of the integer accumulators and scales); ``i8b``: scales per
  64-deep (``i8b128`` / ``i8b256``: 128 / 256-deep; ``i8cb128``: 128-deep, three products) K block on all four
  GEMMs (``i8cb128_qkv_ffn1``: on the two whose A a LayerNorm task writes, the GEMMs a 128-deep block fits on every
  case), ``--extra-us`` a block (its fold into fp32). Costs only: the graph is unchanged.

Levers compose: ``--lever`` takes several, each as ``name`` or ``name:extra_us`` (its own ``--extra-us``), applied in
the order given — the K splits when the graph is built, then the attention split, then the folds one after another
(each on the graph the previous one left).

    python -m bench.dag.levers 2 3 4 12 --lever qkv_split2 --extra-us 0.3
    python -m bench.dag.levers 2 3 4 12 --lever ln_fold --extra-us 1.0 --consumer-us 0.5
    python -m bench.dag.levers 2 3 4 12 --lever ln_fold:1.0 qkv_split2:0.3 attn_kv_split:2 --consumer-us 0.5
    python -m bench.dag.levers 2 3 4 12 --ws --tuned h200 --lever i8_qkv_ffn1 --extra-us 0.3
"""
from __future__ import annotations

import argparse
import dataclasses

from kernels import load_case
from kernels.dag import graph as G
from kernels.dag import host
from kernels.dag.sim import report

PROGRAMS = 264  # two programs per SM on the H200's 132, as the kernel runs
# what the graph is built and simulated with: form tl's ("Results" 8: the fitted h200 model, 264 programs, 0.3 µs a
# ticket, 0.6 µs a link) unless ``--ws`` sets form ws's (``WS``) and ``--param`` the case's tuned parameters
CFG = dict(programs=PROGRAMS, cost=None, params={}, pop_us=0.3, signal_us=0.6)
# form ws on the H200, fitted to the traced consumer time per task kind at the tuned configurations (docs/dag.md,
# "Results" 25 and 26: within ~11% per kind): 1.5 µs a task, 5 TFLOP/s, 100 GB/s; one program per SM, the ticket
# taken by the loader ahead (0.1 µs), 1.2 µs from a task's end to its dependant's start (the release, the poll)
WS = dict(programs=132, cost=G.Cost(tflops=5.0, gbs=100.0, task_us=1.5, link_us=0.4), pop_us=0.1, signal_us=1.2)


def _graph(case):
    params = dict(CFG["params"]) if CFG["cost"] is not None else dict(CFG["params"], cost_model="h200")
    return host.graph_for(case, n_programs=CFG["programs"], cost=CFG["cost"], **params)


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


LEVERS = ("qkv_split2", "ffn1_split2", "attn_kv_split", "ffn_fused", "attn_oproj", "ln_fold", "ln_fold_ws",
          "i8_qkv_ffn1", "i8c_qkv_ffn1", "i8_all", "i8b_all", "i8b128_all", "i8cb128_all", "i8b256_all",
          "i8cb128_qkv_ffn1")
# the int8 limb levers: (GEMM kinds re-costed, products a K step in units of one bf16 product's time, the K depth a
# scale covers: None = the whole K, the extra µs a tile; 64 / 128 / 256 = block scales, the extra µs a block's drain)
ALL4 = (G.QKV, G.FFN1, G.OPROJ, G.FFN2)
I8 = {"i8_qkv_ffn1": ((G.QKV, G.FFN1), 2.0, None), "i8c_qkv_ffn1": ((G.QKV, G.FFN1), 1.5, None),
      "i8_all": (ALL4, 2.0, None), "i8b_all": (ALL4, 2.0, 64), "i8b128_all": (ALL4, 2.0, 128),
      "i8cb128_all": (ALL4, 1.5, 128), "i8b256_all": (ALL4, 2.0, 256),
      "i8cb128_qkv_ffn1": ((G.QKV, G.FFN1), 1.5, 128)}


def recost_i8(g, kinds, units: float, block, extra_us: float) -> None:
    """Every GEMM task of ``kinds`` in ``g`` re-costed as ``G.gemm_cost`` prices a tile of its shape (rows, columns
    and K from its accesses: what it reads, what it writes) at ``units`` products with 2-byte A and W elements, plus
    ``extra_us`` (a tile, or each ``block``-deep block of its K: the integer accumulators' fold)."""
    for x in g.tasks:
        if x.kind in kinds:
            src, dst = x.access[0], x.access[1]
            k = src.c1 - src.c0
            x.cost = extra_us * (1 if block is None else -(-k // block)) + G.gemm_cost(
                src.r1 - src.r0, dst.c1 - dst.c0, k, units, a_bytes=2, w_bytes=2, cost=g.tiling.cost)


def parse_levers(specs: list[str], default_extra_us: float) -> list[tuple[str, float]]:
    """``name`` or ``name:extra_us`` -> [(name, extra µs)]; an unknown name or a repeated lever is an error."""
    out = []
    for spec in specs:
        name, _, extra = spec.partition(":")
        if name not in LEVERS:
            raise SystemExit(f"bench.dag.levers: unknown lever {name!r}; valid: {', '.join(LEVERS)}")
        if name in (n for n, _ in out):
            raise SystemExit(f"bench.dag.levers: lever {name!r} given twice")
        try:
            out.append((name, float(extra) if extra else default_extra_us))
        except ValueError:
            raise SystemExit(f"bench.dag.levers: {spec!r}: the extra µs after ':' must be a number") from None
    return out


def build(case, lever, extra_us: float = 0.3, kv_blocks: int = 4, consumer_us: float = 0.0):
    """The graph with ``lever`` applied: one name (with ``extra_us``) or a list of (name, extra µs), composed in
    the order the module docstring gives."""
    levers = [(lever, extra_us)] if isinstance(lever, str) else list(lever)
    saved = G._Builder.qkv, G._Builder.ffn1
    try:
        for name, extra in levers:
            if name == "qkv_split2":
                G._Builder.qkv = _split_gemm(G.QKV, extra)
            elif name == "ffn1_split2":
                G._Builder.ffn1 = _split_gemm(G.FFN1, extra)
        g = _graph(case)
    finally:
        G._Builder.qkv, G._Builder.ffn1 = saved
    t, tf = g.tiling, g.tiling.cost.tflops * 1e6  # FLOP per µs of one program; the folded product on bf16x3
    for name, extra in levers:
        if name == "attn_kv_split" and case.causal:
            fixed = t.cost.task_us
            for x in g.tasks:
                if x.kind == G.ATTN and x.c + 1 > kv_blocks:  # query block c sees c + 1 key blocks (block_q = block_kv)
                    x.cost = fixed + (x.cost - fixed) / 2 + extra
    for name, extra in levers:
        if name == "ffn_fused":
            g = _fold(g, G.FFN2, G.FFN1, 2.0 * t.block_m * case.D * t.block_n_ffn1 * 3 / tf + extra)
        elif name == "attn_oproj":
            g = _fold(g, G.OPROJ, G.ATTN, 2.0 * t.block_q * case.D * case.dh * 3 / tf + extra)
        elif name == "ln_fold":
            g = _fold_ln(g, extra, consumer_us)
        elif name == "ln_fold_ws":
            g = _fold_ln_inplace(g, consumer_us)
    for name, extra in levers:
        if name in I8:
            recost_i8(g, *I8[name], extra)
    return g


def _without(g, drop) -> tuple[list, dict]:
    """The tasks of ``g`` in the sequential model's order less those ``drop(task)`` selects, and the redirection of
    the removed tasks' counters: counter -> the counters the removed tasks that signalled it waited for."""
    seq = sorted(g.tasks, key=lambda x: x.seq)
    redirect: dict = {}
    for x in seq:
        if drop(x):
            for c in x.signals:
                redirect.setdefault(c, set()).update(x.waits)
    return [x for x in seq if not drop(x)], redirect


def _redirected(x, redirect: dict) -> list:
    """Task ``x``'s waits with every removed counter replaced by what it stood for (``_without``)."""
    return [r for c in x.waits for r in (sorted(redirect[c]) if c in redirect else [c])]


def _fold_ln(g, producer_us: float, consumer_us: float) -> G.Graph:
    """``g`` without its LN1 (past layer 0) and LN2 tasks: a task that waited for a removed task's counter waits for
    what that task waited for (the residual tiles of its rows) and costs ``consumer_us`` more; the residual GEMM
    tasks those counters collect cost ``producer_us`` more; goals recounted, the critical order rebuilt."""
    kept, redirect = _without(g, lambda x: x.kind == G.LN2 or (x.kind == G.LN1 and x.layer > 0))
    collected = set().union(*redirect.values()) if redirect else set()
    tasks = []
    for x in kept:
        waits, cost = _redirected(x, redirect), x.cost
        if any(c in redirect for c in x.waits):
            cost += consumer_us
        if x.kind in (G.OPROJ, G.FFN2) and any(c in collected for c in x.signals):
            cost += producer_us
        tasks.append(G.Task(x.kind, x.layer, x.a, x.b, x.c, waits=tuple(dict.fromkeys(waits)), signals=x.signals,
                            cost=cost, access=x.access, seq=x.seq))
    return _regraph(g, tasks)


def _fold_ln_inplace(g, consumer_us: float, hazard_waits: bool = True) -> G.Graph:
    """``g`` without any LN1 or LN2 task, the fold in place (``ln_fold_ws``, module docstring): a task that waited
    for a removed task's counter waits for what that task waited for (nothing, for layer 0's QKV tiles) and costs
    ``consumer_us`` more; each output-projection / FFN2 task also waits for a new counter of its (layer, row block)
    that every QKV / FFN1 tile of that row block signals (``hazard_waits``; without them ``graph.check_hazards``
    finds the residual read by a QKV / FFN1 tile while it is added into). The accesses follow: a QKV tile reads x
    (layer 0) or r, each row block's first QKV tile of layer 0 writes r = x, an FFN1 tile reads r."""
    kept, redirect = _without(g, lambda x: x.kind in (G.LN1, G.LN2))
    names, extra = list(g.counter_names), {}

    def rows_counter(kind, l, m):  # every QKV (kind "qkv_rows") / FFN1 ("f1_rows") tile of (l, m) signals it
        key = (kind, l, m)
        if key not in extra:
            extra[key] = len(names)
            names.append(key)
        return extra[key]

    tasks = []
    for x in kept:
        waits, signals, cost = _redirected(x, redirect), list(x.signals), x.cost
        if any(c in redirect for c in x.waits):
            cost += consumer_us
        access = x.access
        if x.kind in (G.QKV, G.FFN1):
            if hazard_waits:
                signals.append(rows_counter("qkv_rows" if x.kind == G.QKV else "f1_rows", x.layer, x.a))
            src = "x" if x.kind == G.QKV and x.layer == 0 else "r"
            access = tuple(G.Access(src, 0, a.r0, a.r1, a.c0, a.c1, "r") if a.buf in ("ln1", "ln2") else a
                           for a in x.access)
            if x.kind == G.QKV and x.layer == 0 and x.b == 0:  # the residual starts as a copy of x's rows
                r0, r1 = access[0].r0, access[0].r1
                access += (G.Access("r", 0, r0, r1, 0, g.case.D, "w"),)
        elif x.kind in (G.OPROJ, G.FFN2) and hazard_waits:
            waits.append(rows_counter("qkv_rows" if x.kind == G.OPROJ else "f1_rows", x.layer, x.a))
        tasks.append(G.Task(x.kind, x.layer, x.a, x.b, x.c, waits=tuple(dict.fromkeys(waits)), signals=tuple(signals),
                            cost=cost, access=access, seq=x.seq))
    wide = G.Graph(g.case, g.tiling, g.tasks, list(g.goals) + [0] * len(extra), names, g.order)
    return _regraph(wide, tasks)


def _regraph(g, tasks: list) -> G.Graph:
    """A graph of ``tasks`` (in the sequential model's order) with ``g``'s counters: goals recounted, every wait
    signalled by some task, the queue order rebuilt (the critical order of the fitted costs)."""
    goals = [0] * g.n_counters
    for x in tasks:
        for c in x.signals:
            goals[c] += 1
    for x in tasks:
        assert all(goals[c] > 0 for c in x.waits), x.name
    for i, x in enumerate(tasks):
        x.seq = i
    prods = G._producer_lists(tasks, len(goals))
    perm = G.critical_order(tasks, prods, CFG["programs"], g.tiling.cost.link_us)
    out = G.Graph(g.case, g.tiling, [tasks[i] for i in perm], goals, g.counter_names, g.order)
    out.producers = G._producer_lists(out.tasks, len(goals))
    return out


def _fold(g, gone: int, into: int, add_us: float) -> G.Graph:
    """``g`` without the tasks of kind ``gone``: each task of kind ``into`` costs ``add_us`` more and signals the counters the removed tasks of its row blocks signalled (goals recounted);
    the queue order is rebuilt (the critical order of the fitted costs)."""
    case, t = g.case, g.tiling
    seq = sorted(g.tasks, key=lambda x: x.seq)
    by_block: dict = {}
    for x in seq:
        if x.kind == gone:
            by_block.setdefault((x.layer, x.a), set()).update(x.signals)

    def rows_of(x):  # row blocks of a task of kind ``into``
        if x.kind == G.ATTN:
            q0 = x.a * case.S + x.c * t.block_q
            q1 = x.a * case.S + min(case.S, (x.c + 1) * t.block_q)
            return range(q0 // t.block_m, -(-q1 // t.block_m))
        return range(x.a, x.a + 1)

    tasks = []
    for x in seq:
        if x.kind == gone:
            continue
        if x.kind == into:
            sig = sorted({c for m in rows_of(x) for c in by_block[(x.layer, m)]})
            x = G.Task(x.kind, x.layer, x.a, x.b, x.c, waits=x.waits, signals=tuple(sig),
                       cost=x.cost + add_us, access=x.access, seq=x.seq)
        tasks.append(x)
    return _regraph(g, tasks)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--lever", required=True, nargs="+", metavar="NAME[:EXTRA_US]",
                    help=f"one or more of {', '.join(LEVERS)}, composed; EXTRA_US overrides --extra-us for that lever")
    ap.add_argument("--extra-us", type=float, default=0.3)
    ap.add_argument("--consumer-us", type=float, default=0.0, help="ln_fold, ln_fold_ws: µs more per QKV / FFN1 tile")
    ap.add_argument("--kv-blocks", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ws", action="store_true", help="form ws's costs and programs (WS) instead of tl's")
    ap.add_argument("--param", action="append", default=[], help="name=value for the graph (config/variant/dag.yaml)")
    ap.add_argument("--tuned", metavar="GPU", help="each case's committed parameters on GPU (e.g. h200), then --param")
    ap.add_argument("--cost-tflops", type=float, help="--ws: the cost model's TFLOP/s a program (bf16 products)")
    ap.add_argument("--cost-gbs", type=float, help="--ws: the cost model's GB/s of operands a program")
    a = ap.parse_args(argv)
    from kernels.dag.host import parse_value
    CFG.update(WS if a.ws else {})
    changes = {k: v for k, v in (("tflops", a.cost_tflops), ("gbs", a.cost_gbs)) if v is not None}
    if changes:
        if not a.ws:
            raise SystemExit("bench.dag.levers: --cost-tflops / --cost-gbs change form ws's model: add --ws")
        CFG["cost"] = dataclasses.replace(WS["cost"], **changes)
    given = {k: parse_value(v) for k, v in (kv.split("=", 1) for kv in a.param)}
    levers = parse_levers(a.lever, a.extra_us)
    named = " + ".join(f"{n} (extra {e} µs)" for n, e in levers)
    print(f"{'case':8} {'tasks':>6} {'crit':>7} {'q+jit':>7}   {'lever':>6} {'crit':>7} {'q+jit':>7} {'change':>7}"
          f"  (µs; {named}" + (f", consumer {a.consumer_us} µs)" if {"ln_fold", "ln_fold_ws"} & set(dict(levers))
                               else ")"))
    for c in a.cases:
        case = load_case(c)
        CFG["params"] = dict(given)
        if a.tuned:
            from bench.dag.ws_ab import require_committed
            CFG["params"] = dict(require_committed(case, a.tuned, "levers"), **given)
        base = _graph(case)
        new = build(case, levers, kv_blocks=a.kv_blocks, consumer_us=a.consumer_us)
        rb, rn = (report(g, CFG["programs"], a.seeds, 0.1, pop_us=CFG["pop_us"], signal_us=CFG["signal_us"])
                  for g in (base, new))
        qb, qn = rb["queue"]["jittered_us"], rn["queue"]["jittered_us"]
        print(f"{case.name:8} {len(base.tasks):6d} {rb['critical_path_us']:7.1f} {qb:7.1f}   {len(new.tasks):6d} "
              f"{rn['critical_path_us']:7.1f} {qn:7.1f} {100 * (qn / qb - 1):+6.1f}%", flush=True)


if __name__ == "__main__":
    main()
