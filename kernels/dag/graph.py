"""The task graph of one forward pass (SPEC §2) for the ``dag`` megakernel, in plain Python.

The pass is cut into tasks whose inputs are complete row blocks of ``block_m`` rows (the GEMM tile height):

    ln1   (layer, LN row block)             r = x (layer 0), A of QKV = split(LN1(r))
    qkv   (layer, row block, column tile)   q | k | v = A @ Wqkv^T + b, written head-major, split
    attn  (layer, batch, head, query block) o_h = softmax(q k^T / sqrt(dh)) v, split (A of the output projection)
    oproj (layer, row block, column tile, K split)   r += o @ Wo^T (+ b_o on split 0), fp32 atomics
    ln2   (layer, LN row block)             A of FFN1 = split(LN2(r))
    ffn1  (layer, row block, column tile)   A of FFN2 = split(GELU(A @ W1^T + b_1))
    ffn2  (layer, row block, column tile, K split)   r += f @ W2^T (+ b_2 on split 0), fp32 atomics
    lnf   (LN row block)                    y = LNf(r)

Dependencies are int32 counters in global memory: a task waits until each counter it names reached its goal
(the number of tasks that signal it, times the launch's epoch) and then signals its own counters. Counters are
per (stage, layer, row block[, head group or K chunk]), so a row block moves to the next layer as soon as its
own rows are done (no layer-wide barrier), attention waits only for the key rows it reads (causal: the rows up
to its query block) of its own head group, and a K split of the residual GEMMs waits only for the heads / FFN1
columns of its K range. Counter 0 is a dummy (goal 0) that pads the wait and signal lists.

Every task also records what it reads and writes (``Access``), so ``check_hazards`` proves on the CPU that the
counters order every pair of conflicting accesses as the sequential model does; ``topological`` proves the queue
order runs producers first (no deadlock with resident programs, ``docs/dag.md``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..cases import Case
from ..validate import ParameterError

KINDS = ("ln1", "qkv", "attn", "oproj", "ln2", "ffn1", "ffn2", "lnf")
LN1, QKV, ATTN, OPROJ, LN2, FFN1, FFN2, LNF = range(len(KINDS))
SCHEMES = ("bf16x3", "f16_w1", "f16f8", "i8x2cb128")   # f16f8, i8x2cb128: form ws only (host.check_params)
ORDERS = ("critical", "layer")



@dataclass(frozen=True)
class Cost:
    """Cost model (µs) of one task on one program, for the simulator and the ``critical`` order."""
    tflops: float = 2.6      # effective dense bf16 tensor-core rate of one program in a 64-row tile loop (TFLOP/s)
    gbs: float = 90.0        # L2 -> SM bandwidth of one streaming program (GB/s)
    task_us: float = 1.2     # fixed cost per task: ticket, counter waits, pipeline fill, epilogue latency
    link_us: float = 0.0     # from a producer's end to its consumer's start (signal, poll, CTA barrier)


# ``cost_model`` (config/variant/dag.yaml): nominal — the first estimate; h200 — fitted to the per-task traces of
# the H200 (two programs per SM, docs/dag-results.md "Results" 5): 2.6 µs fixed, 2.5 TFLOP/s per program,
# 0.6 µs per link
COST_MODELS = {"nominal": Cost(), "h200": Cost(tflops=2.5, gbs=90.0, task_us=2.6, link_us=0.6)}


@dataclass(frozen=True)
class Tiling:
    """Tile sizes of the graph (the ``config/variant/dag.yaml`` names)."""
    block_m: int = 64         # GEMM tile rows; also the row block of the dependency counters
    block_m_ln: int = 16      # rows per LayerNorm task
    block_k: int = 64         # K step of the GEMM loops (a K split is a whole number of steps)
    block_n_qkv: int = 128
    block_n_o: int = 128
    block_n_ffn1: int = 128
    block_n_ffn2: int = 128
    split_k_o: int = 1        # K splits of the output projection
    split_k_ffn2: int = 1     # K splits of FFN2
    block_q: int = 64         # attention query block
    block_kv: int = 64        # attention key block
    scheme_qkv: str = "bf16x3"
    scheme_o: str = "bf16x3"
    scheme_ffn1: str = "bf16x3"
    scheme_ffn2: str = "bf16x3"
    cost: Cost = Cost()       # the cost model of the tasks (the order and the simulator; not the kernel)


@dataclass(frozen=True)
class Access:
    """A rectangle [r0, r1) x [c0, c1) of a logical buffer (``slot``: which copy, e.g. the layer's q|k|v),
    read ("r"), written ("w") or accumulated into with atomics ("a": accumulations commute with each other)."""
    buf: str
    slot: int
    r0: int
    r1: int
    c0: int
    c1: int
    mode: str


@dataclass
class Task:
    kind: int
    layer: int
    a: int                    # ln*: LN row block | qkv/oproj/ffn*: row block m | attn: batch
    b: int = 0                # qkv/oproj/ffn*: column tile n | attn: head
    c: int = 0                # oproj/ffn2: K split s | attn: query block
    waits: tuple = ()         # counter ids to wait for
    signals: tuple = ()       # counter ids to add 1 to when done
    cost: float = 0.0         # estimated µs on one SM
    access: tuple = ()        # Access records (validation only)
    seq: int = 0              # index in the sequential model's order

    @property
    def name(self) -> str:
        return f"{KINDS[self.kind]}[l{self.layer}]({self.a},{self.b},{self.c})"


@dataclass
class Graph:
    case: Case
    tiling: Tiling
    tasks: list               # in queue order (a topological order)
    goals: list               # goals[c]: tasks that signal counter c (counter 0: the dummy, goal 0)
    counter_names: list       # counter_names[c]: (stage, layer, row block, sub-index)
    order: str
    producers: list = field(default_factory=list)  # producers[i]: queue indices of the tasks task i waits for

    @property
    def n_counters(self) -> int:
        return len(self.goals)

    @property
    def max_waits(self) -> int:
        return max((len(t.waits) for t in self.tasks), default=0)

    @property
    def max_signals(self) -> int:
        return max((len(t.signals) for t in self.tasks), default=0)

    def counts(self) -> dict:
        out = {k: 0 for k in KINDS}
        for t in self.tasks:
            out[KINDS[t.kind]] += 1
        return out

    def work_us(self) -> float:
        return sum(t.cost for t in self.tasks)

    def critical_path_us(self) -> float:
        """Longest chain of task costs (the makespan with unlimited programs and free synchronisation)."""
        finish = [0.0] * len(self.tasks)
        for i, t in enumerate(self.tasks):
            finish[i] = t.cost + max((finish[p] for p in self.producers[i]), default=0.0)
        return max(finish, default=0.0)


class TilingError(ParameterError):
    """The case's shape cannot be cut with these tile sizes; the message names the parameter to change."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def k_chunk(K: int, splits: int, block_k: int) -> int:
    """Width of one K split: a whole number of ``block_k`` steps, the steps shared as evenly as possible."""
    return _ceil(_ceil(K, block_k), splits) * block_k


def head_group(dh: int, H: int, block_n: int) -> int:
    """Heads per QKV dependency counter: the heads one column tile covers when tiles hold whole heads, else 1."""
    if block_n % dh == 0 and H % (block_n // dh) == 0:
        return block_n // dh
    return 1


def check_tiling(case: Case, t: Tiling) -> None:
    """Raise ``TilingError`` naming the parameter when ``t`` cannot cut ``case``."""
    pow2 = {n: getattr(t, n) for n in ("block_m", "block_m_ln", "block_k", "block_n_qkv", "block_n_o",
                                       "block_n_ffn1", "block_n_ffn2", "block_q", "block_kv")}
    for n, v in pow2.items():
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise TilingError(f"dag: {n}={v!r} must be a power of two (Triton tile edges are)")
    for n in ("block_m", "block_k", "block_n_qkv", "block_n_o", "block_n_ffn1", "block_n_ffn2", "block_q",
              "block_kv"):
        if getattr(t, n) < 16:
            raise TilingError(f"dag: {n}={getattr(t, n)} is below 16, the smallest tensor-core tile edge; set {n}>=16")
    if case.D % t.block_k:
        raise TilingError(f"dag: block_k={t.block_k} must divide D={case.D} (a K step must not cross a column "
                          "block of D); lower block_k")
    if t.block_m % t.block_m_ln:
        raise TilingError(f"dag: block_m_ln={t.block_m_ln} must divide block_m={t.block_m} (LayerNorm tasks "
                          "signal the row block they lie in); lower block_m_ln")
    for n in ("split_k_o", "split_k_ffn2"):
        v = getattr(t, n)
        if not isinstance(v, int) or v < 1:
            raise TilingError(f"dag: {n}={v!r} must be an integer >= 1 (or auto)")
    for n in ("scheme_qkv", "scheme_o", "scheme_ffn1", "scheme_ffn2"):
        if getattr(t, n) not in SCHEMES:
            raise TilingError(f"dag: {n}={getattr(t, n)!r}: one of {SCHEMES}")
    for n, ext in (("block_q", case.S), ("block_kv", case.S)):
        if getattr(t, n) > max(16, triton_pow2(ext)):
            raise TilingError(f"dag: {n}={getattr(t, n)} exceeds the sequence (S={case.S}); set {n}<="
                              f"{max(16, triton_pow2(ext))}")


def triton_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class _Counters:
    def __init__(self):
        self.ids = {("dummy",): 0}
        self.names = [("dummy",)]
        self.goals = [0]

    def id(self, *key) -> int:
        if key not in self.ids:
            self.ids[key] = len(self.names)
            self.names.append(key)
            self.goals.append(0)
        return self.ids[key]

    def signal(self, keys) -> tuple:
        ids = tuple(dict.fromkeys(self.id(*k) for k in keys))
        for c in ids:
            self.goals[c] += 1
        return ids


def gemm_cost(rows: int, cols: int, k: int, products: int, a_bytes: int = 4, w_bytes: int = 4,
              cost: Cost = Cost()) -> float:
    """µs of one [rows, cols] tile over k on one program: the larger of its MMA time and its operand traffic."""
    mma = 2.0 * rows * cols * k * products / (cost.tflops * 1e6)
    mem = (rows * k * a_bytes + k * cols * w_bytes) / (cost.gbs * 1e3)
    return cost.task_us + max(mma, mem)


def _products(scheme: str) -> tuple[int, int]:
    """(MMA products per K step, weight bytes per element) of a scheme (f16f8: one fp16 product and two fp8 ones at
    twice the rate, the weight in fp16 + two fp8 parts; i8x2cb128: three int8 products at twice the rate, two int8
    limbs)."""
    return {"bf16x3": (3, 4), "f16_w1": (2, 2), "f16f8": (2, 4), "i8x2cb128": (1.5, 2)}[scheme]


class _Builder:
    """Appends the tasks of one stage at a time, in the sequential model's order (``build``)."""

    def __init__(self, case: Case, t: Tiling):
        self.case, self.t = case, t
        self.M, self.D, self.F, self.dh = case.tokens, case.D, 4 * case.D, case.dh
        self.BM = t.block_m
        self.NM = _ceil(self.M, self.BM)
        self.ctr = _Counters()
        self.tasks: list[Task] = []
        self.hg = head_group(case.dh, case.H, t.block_n_qkv)      # heads per QKV counter
        self.kc_o, self.kc_f = k_chunk(self.D, t.split_k_o, t.block_k), k_chunk(self.F, t.split_k_ffn2, t.block_k)

    def blocks(self, r0: int, r1: int) -> range:
        """The row blocks that rows [r0, r1) touch."""
        return range(r0 // self.BM, _ceil(r1, self.BM))

    def rows(self, m: int) -> tuple[int, int]:
        return m * self.BM, min(self.M, (m + 1) * self.BM)

    def ln(self, kind: int, l: int, wait: tuple | None, src: str, dst: str, sig: str | None):
        """LayerNorm tasks of ``block_m_ln`` rows: wait for ``wait`` = (stage, layer) of their row blocks."""
        t, D, ctr = self.t, self.D, self.ctr
        for i in range(_ceil(self.M, t.block_m_ln)):
            r0, r1 = i * t.block_m_ln, min(self.M, (i + 1) * t.block_m_ln)
            acc = [Access(src, 0, r0, r1, 0, D, "r"), Access(dst, 0, r0, r1, 0, D, "w")]
            if kind == LN1 and l == 0:
                acc.append(Access("r", 0, r0, r1, 0, D, "w"))  # the residual stream starts as a copy of x
            waits = tuple(ctr.id(wait[0], wait[1], m) for m in self.blocks(r0, r1)) if wait else ()
            sigs = ctr.signal([(sig, l, m) for m in self.blocks(r0, r1)]) if sig else ()
            cost = t.cost.task_us + (r1 - r0) * D * 8 / (t.cost.gbs * 1e3)
            self.tasks.append(Task(kind, l, i, waits=waits, signals=sigs, cost=cost, access=tuple(acc)))

    def qkv(self, l: int):
        """QKV tiles: wait for LN1 of their row block, signal the head groups of q, k or v they cover."""
        t, D, ctr = self.t, self.D, self.ctr
        p, w = _products(t.scheme_qkv)
        for m in range(self.NM):
            r0, r1 = self.rows(m)
            for n in range(_ceil(3 * D, t.block_n_qkv)):
                c0, c1 = n * t.block_n_qkv, min(3 * D, (n + 1) * t.block_n_qkv)
                groups = sorted({((c % D) // self.dh) // self.hg for c in range(c0, c1)})
                self.tasks.append(Task(QKV, l, m, n, waits=(ctr.id("ln1", l, m),),
                                       signals=ctr.signal([("qkv", l, m, g) for g in groups]),
                                       cost=gemm_cost(r1 - r0, c1 - c0, D, p, w_bytes=w, cost=t.cost),
                                       access=(Access("ln1", 0, r0, r1, 0, D, "r"),
                                               Access("qkv", l, r0, r1, c0, c1, "w"))))

    def attn(self, l: int):
        """Attention tasks: wait for the key rows they read (causal: up to their query block) of their head group;
        signal the output projection's K chunks their head lies in."""
        c, t, D, dh, S, ctr = self.case, self.t, self.D, self.dh, self.case.S, self.ctr
        for b in range(c.B):
            for h in range(c.H):
                for qb in range(_ceil(S, t.block_q)):
                    q0, q1 = b * S + qb * t.block_q, b * S + min(S, (qb + 1) * t.block_q)
                    kend = b * S + (min(S, (qb + 1) * t.block_q) if c.causal else S)
                    waits = tuple(ctr.id("qkv", l, m, h // self.hg) for m in self.blocks(b * S, kend))
                    chunks = range((h * dh) // self.kc_o, _ceil((h + 1) * dh, self.kc_o))
                    sigs = ctr.signal([("attn", l, m, k) for m in self.blocks(q0, q1) for k in chunks])
                    nk = kend - b * S
                    cost = t.cost.task_us + 2.0 * 2 * (q1 - q0) * nk * dh * 3 / (t.cost.tflops * 1e6) \
                        + 2 * nk * dh * 4 / (t.cost.gbs * 1e3)
                    acc = (Access("qkv", l, q0, q1, h * dh, (h + 1) * dh, "r"),
                           Access("qkv", l, b * S, kend, D + h * dh, D + (h + 1) * dh, "r"),
                           Access("qkv", l, b * S, kend, 2 * D + h * dh, 2 * D + (h + 1) * dh, "r"),
                           Access("attn", 0, q0, q1, h * dh, (h + 1) * dh, "w"))
                    self.tasks.append(Task(ATTN, l, b, h, qb, waits=waits, signals=sigs, cost=cost, access=acc))

    def ffn1(self, l: int):
        """FFN1 tiles: wait for LN2 of their row block, signal FFN2's K chunks their columns lie in."""
        t, D, F, ctr = self.t, self.D, self.F, self.ctr
        p, w = _products(t.scheme_ffn1)
        for m in range(self.NM):
            r0, r1 = self.rows(m)
            for n in range(_ceil(F, t.block_n_ffn1)):
                c0, c1 = n * t.block_n_ffn1, min(F, (n + 1) * t.block_n_ffn1)
                chunks = range(c0 // self.kc_f, _ceil(c1, self.kc_f))
                self.tasks.append(Task(FFN1, l, m, n, waits=(ctr.id("ln2", l, m),),
                                       signals=ctr.signal([("f1", l, m, s) for s in chunks]),
                                       cost=gemm_cost(r1 - r0, c1 - c0, D, p, w_bytes=w, cost=t.cost),
                                       access=(Access("ln2", 0, r0, r1, 0, D, "r"),
                                               Access("f", 0, r0, r1, c0, c1, "w"))))

    def residual(self, kind: int, l: int):
        """K split s of tile (m, n) of the output projection / FFN2 (r += A @ W^T): waits for the attention heads
        / FFN1 columns of its K range in its row block."""
        t, D, ctr = self.t, self.D, self.ctr
        K, bn, kc, wait, src, scheme, sig = ((D, t.block_n_o, self.kc_o, "attn", "attn", t.scheme_o, "o")
                                             if kind == OPROJ else
                                             (self.F, t.block_n_ffn2, self.kc_f, "f1", "f", t.scheme_ffn2, "f2"))
        p, w = _products(scheme)
        for m in range(self.NM):
            r0, r1 = self.rows(m)
            for n in range(_ceil(D, bn)):
                c0, c1 = n * bn, min(D, (n + 1) * bn)
                for s in range(_ceil(K, kc)):
                    k0, k1 = s * kc, min(K, (s + 1) * kc)
                    self.tasks.append(Task(kind, l, m, n, s, waits=(ctr.id(wait, l, m, s),),
                                           signals=ctr.signal([(sig, l, m)]),
                                           cost=gemm_cost(r1 - r0, c1 - c0, k1 - k0, p, w_bytes=w, cost=t.cost),
                                           access=(Access(src, 0, r0, r1, k0, k1, "r"),
                                                   Access("r", 0, r0, r1, c0, c1, "a"))))


def build(case: Case, tiling: Tiling, order: str = "critical", n_programs: int = 132) -> Graph:
    """The task graph of ``case`` with ``tiling``, in queue order ``order``: ``layer`` (the sequential model's
    order: layer by layer, stage by stage) or ``critical`` (the start order of a list schedule on ``n_programs``
    programs that runs the ready task with the longest remaining chain first)."""
    check_tiling(case, tiling)
    if order not in ORDERS:
        raise TilingError(f"dag: order={order!r}: one of {ORDERS}")
    bld = _Builder(case, tiling)
    for l in range(case.L):
        # LN1: layer 0 reads x (and starts r), later layers wait for the row block's FFN2 of the layer before
        bld.ln(LN1, l, ("f2", l - 1) if l else None, "x" if l == 0 else "r", "ln1", "ln1")
        bld.qkv(l)
        bld.attn(l)
        bld.residual(OPROJ, l)
        bld.ln(LN2, l, ("o", l), "r", "ln2", "ln2")
        bld.ffn1(l)
        bld.residual(FFN2, l)
    bld.ln(LNF, case.L - 1, ("f2", case.L - 1), "r", "y", None)
    tasks, ctr = bld.tasks, bld.ctr
    for i, tk in enumerate(tasks):
        tk.seq = i
    for tk in tasks:  # every counter a task waits for has producers (else it would wait forever)
        for c in tk.waits:
            if ctr.goals[c] == 0:
                raise AssertionError(f"dag graph: {tk.name} waits for counter {ctr.names[c]} that nothing signals")
    perm = (critical_order(tasks, _producer_lists(tasks, len(ctr.goals)), n_programs, tiling.cost.link_us)
            if order == "critical"
            else list(range(len(tasks))))
    g = Graph(case, tiling, [tasks[i] for i in perm], ctr.goals, ctr.names, order)
    g.producers = _producer_lists(g.tasks, len(ctr.goals))
    return g


def _producer_lists(tasks: list, n_counters: int) -> list:
    """producers[i]: indices (in ``tasks``) of the tasks that signal a counter task i waits for."""
    by_ctr: list[list[int]] = [[] for _ in range(n_counters)]
    for i, tk in enumerate(tasks):
        for c in tk.signals:
            by_ctr[c].append(i)
    return [sorted({p for c in tk.waits for p in by_ctr[c]}) for tk in tasks]


def critical_order(tasks: list, prods: list, n_programs: int, link_us: float = 0.0) -> list:
    """A topological order: the start order of a list schedule on ``n_programs`` programs that always starts
    the ready task with the longest chain of costs still ahead of it (its "bottom level"); ties go to the
    sequential order; a consumer is ready ``link_us`` after its last producer ends. Producers always start before
    their consumers."""
    import heapq
    n = len(tasks)
    cons: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(prods):
        for p in ps:
            cons[p].append(i)
    bottom = [0.0] * n
    for i in range(n - 1, -1, -1):  # the sequential order is topological
        bottom[i] = tasks[i].cost + max((link_us + bottom[c] for c in cons[i]), default=0.0)
    missing = [len(ps) for ps in prods]
    ready_at = [0.0] * n
    ready = [(-bottom[i], i) for i in range(n) if missing[i] == 0]
    heapq.heapify(ready)
    free = [(0.0, k) for k in range(max(1, n_programs))]
    running: list[tuple[float, int]] = []  # (finish, task)

    def finish_one():
        fin, j = heapq.heappop(running)
        for c in cons[j]:
            missing[c] -= 1
            ready_at[c] = max(ready_at[c], fin + link_us)
            if missing[c] == 0:
                heapq.heappush(ready, (-bottom[c], c))
        return fin

    start = [0.0] * n
    for _ in range(n):
        now, k = heapq.heappop(free)
        while running and running[0][0] <= now:
            finish_one()
        while not ready:  # this program idles until a running task releases one
            if not running:
                raise AssertionError("dag graph: no ready task (the dependencies have a cycle)")
            now = max(now, finish_one())
        _, i = heapq.heappop(ready)
        start[i] = max(now, ready_at[i])
        heapq.heappush(running, (start[i] + tasks[i].cost, i))
        heapq.heappush(free, (start[i] + tasks[i].cost, k))
    # the queue order: by start time; ties by the longer chain ahead, then the sequential order
    return sorted(range(n), key=lambda i: (start[i], -bottom[i], i))


def topological(g: Graph) -> list[str]:
    """Problems with ``g``'s queue order: a task before one of its producers (an empty list: none)."""
    return [f"{t.name} (position {i}) before its producer {g.tasks[p].name} (position {p})"
            for i, t in enumerate(g.tasks) for p in g.producers[i] if p >= i]


def reachability(g: Graph) -> list[int]:
    """reach[i]: bitset (a Python int) of the tasks that must finish before task i starts (transitively)."""
    reach = [0] * len(g.tasks)
    for i in range(len(g.tasks)):
        r = 0
        for p in g.producers[i]:
            r |= reach[p] | (1 << p)
        reach[i] = r
    return reach


def check_hazards(g: Graph, limit: int = 10) -> list[str]:
    """Pairs of tasks whose accesses conflict (same buffer copy, overlapping rectangles, at least one write; two
    accumulations commute) and that the counters do not order as the sequential model does. [] when the graph
    computes what the model computes. Reports at most ``limit`` pairs."""
    reach = reachability(g)
    pos = {id(t): i for i, t in enumerate(g.tasks)}
    # index the accesses by (buffer, copy, row block of the graph) so only nearby pairs are compared
    BM = g.tiling.block_m_ln
    index: dict = {}
    for t in g.tasks:
        for a in t.access:
            for rb in range(a.r0 // BM, _ceil(a.r1, BM)):
                index.setdefault((a.buf, a.slot, rb), []).append((t, a))
    bad, seen = [], set()
    for key, items in index.items():
        for x in range(len(items)):
            t1, a1 = items[x]
            for y in range(x + 1, len(items)):
                t2, a2 = items[y]
                if t1 is t2 or (a1.mode == "r" and a2.mode == "r") or (a1.mode == "a" and a2.mode == "a"):
                    continue
                if a1.r1 <= a2.r0 or a2.r1 <= a1.r0 or a1.c1 <= a2.c0 or a2.c1 <= a1.c0:
                    continue
                first, second = (t1, t2) if t1.seq < t2.seq else (t2, t1)
                i, j = pos[id(first)], pos[id(second)]
                if not (reach[j] >> i) & 1 and (i, j) not in seen:
                    seen.add((i, j))
                    bad.append(f"{second.name} is not ordered after {first.name} ({a1.buf}, {a1.mode}/{a2.mode})")
                    if len(bad) >= limit:
                        return bad
    return bad


def check_coverage(g: Graph) -> list[str]:
    """Problems with the tasks' coverage of the model: every output element of every stage written exactly once
    (accumulating stages: every (row, column, K step) once), no task duplicated. [] when complete."""
    c = g.case
    M, D, F = c.tokens, c.D, 4 * c.D
    out = []
    keys = [(t.kind, t.layer, t.a, t.b, t.c) for t in g.tasks]
    if len(set(keys)) != len(keys):
        out.append(f"{len(keys) - len(set(keys))} duplicated tasks")
    want = {"ln1": M * D, "qkv": M * 3 * D, "attn": M * D, "oproj": M * D * D, "ln2": M * D, "ffn1": M * F,
            "ffn2": M * D * F}
    for l in range(c.L):
        got = {k: 0 for k in want}
        for t in g.tasks:
            if t.layer != l or t.kind == LNF:
                continue
            k = KINDS[t.kind]
            if k in ("oproj", "ffn2"):
                rd = next(a for a in t.access if a.mode == "r")
                ac = next(a for a in t.access if a.mode == "a")
                got[k] += (ac.r1 - ac.r0) * (ac.c1 - ac.c0) * (rd.c1 - rd.c0)
            else:
                wr = next(a for a in t.access if a.mode == "w" and a.buf != "r")
                got[k] += (wr.r1 - wr.r0) * (wr.c1 - wr.c0)
        out += [f"layer {l} {k}: covers {got[k]} of {want[k]} elements" for k in want if got[k] != want[k]]
    lnf = sum((a.r1 - a.r0) * (a.c1 - a.c0) for t in g.tasks if t.kind == LNF for a in t.access if a.buf == "y")
    if lnf != M * D:
        out.append(f"lnf covers {lnf} of {M * D} elements")
    # no overlap inside a written stage: every writer's rectangles are disjoint (the counts above then suffice)
    for (k, l) in {(t.kind, t.layer) for t in g.tasks}:
        rects = [a for t in g.tasks if t.kind == k and t.layer == l for a in t.access
                 if a.mode == "w" and a.buf not in ("r",)]
        cells = set()
        for a in rects:
            for r in range(a.r0, a.r1):
                span = (a.buf, a.slot, r, a.c0, a.c1)
                cells.add(span)
        if len(cells) != sum(a.r1 - a.r0 for a in rects):
            out.append(f"{KINDS[k]} layer {l}: two tasks write the same rows")
    return out


def summary(g: Graph, n_programs: int) -> dict:
    """Task counts, work, critical path and the makespan floor of ``g`` on ``n_programs`` programs (µs)."""
    work = g.work_us()
    cp = g.critical_path_us()
    return dict(tasks=len(g.tasks), counts=g.counts(), counters=g.n_counters, max_waits=g.max_waits,
                max_signals=g.max_signals, work_us=round(work, 1), critical_path_us=round(cp, 1),
                floor_us=round(max(cp, work / n_programs), 1))


__all__ = ["KINDS", "Tiling", "Task", "Graph", "Access", "TilingError", "build", "check_tiling", "check_hazards",
           "check_coverage", "topological", "summary", "k_chunk", "head_group"]
