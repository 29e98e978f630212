"""What a hand-over between two SMs costs inside a thread-block cluster, against today's link (lab; docs/dag.md,
"What bounds it": the links of cases 2–4).

Today a dependant waits for its producer through global memory: the producer's stores, a CTA barrier, one thread's
``red.release.gpu`` on a counter; the dependant's thread polls it with ``ld.acquire.gpu``, then reads the data from
L2 (~1.2–1.4 µs a link in the kernel, ~0.9 µs with nothing stored in seqres's barrier probe). A design that kept a
row block's stages inside one cluster could hand over through the cluster instead. This probe prices that before
anything is built: a token passed around the ``C`` CTAs of each cluster (rank r hands to rank r + 1 mod C), each
hop carrying ``P`` bytes that the holder writes and the next CTA reads and checks, in four forms —

* ``global``: today's protocol, P bytes to the next CTA's inbox in global memory (16-byte stores, every thread), a
  CTA barrier, thread 0's ``red.release.gpu`` on the next CTA's flag; the next CTA's thread 0 polls its flag with
  ``ld.acquire.gpu``, a CTA barrier, its threads read the inbox from L2 (``ld.global.cg``);
* ``cbar``: the same stores and reads, the hand-over a cluster barrier (``barrier.cluster.arrive.release`` /
  ``wait.acquire``, every CTA of the cluster, every hop): the stage barrier of a cluster-resident row block;
* ``dsmem``: the holder's threads store the P bytes straight into the next CTA's shared memory
  (``st.shared::cluster`` at a ``mapa`` address) and each arrives on the next CTA's mbarrier
  (``mbarrier.arrive.release.cluster``, count: every thread); the next CTA waits on its own mbarrier
  (``try_wait.parity.acquire.cluster``) and reads its shared memory;
* ``bulk``: the holder's threads write the P bytes into their own shared memory, a proxy fence and a CTA barrier,
  then thread 0 copies them into the next CTA's shared memory with one ``cp.async.bulk.shared::cluster.shared::cta``
  that completes the next CTA's mbarrier's transaction count (armed there with ``expect_tx``): as a TMA hand-over.

Every wait is bounded (``SPIN`` polls; once one runs out the rest give up at once) and every payload word is
checked (the value of its hop, salted per launch): a row with a timed-out wait or a wrong word is void. The token
serialises the cluster, so a hop's time is one link's latency with its payload: rank 0's time from the start to the
token's return after ``--iters`` hops, over ``--iters``. All shared memory is one Gluon allocation at offset 0 of
``global_smem`` (the inbox, the bulk form's staging copy, the mbarrier), addressed by inline PTX.

    python -m bench.dag.cluster_link --out DIR          # GPU: one JSON, a line per form, size, payload, clusters
    python -m bench.dag.cluster_link --occupancy --out DIR   # GPU: the clusters of 2–16 CTAs resident at once
    python -m bench.dag.cluster_link --compile          # CPU: each form's sm_90a compile (ptxas) and its PTX counts

Per configuration: µs a hop (rank 0's median over the clusters), clocks a hop, the GB/s a hop's payload makes.
"""
from __future__ import annotations

import argparse
import json
import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from bench.dag.mcast_feed import _CLUSTER_ID, _CTA_RANK, _INIT, _INIT_FENCE_SYNC, _STORE, _SYNC, _asm
from bench.dag.mma_rate import _CLK, _NOW, _stamp, save, show

FORMS = ("global", "cbar", "dsmem", "bulk")
NT_CTA = 128                      # threads a CTA (num_warps 4)
VEC = 16                          # bytes a thread stores or loads at once (a v4.b32)
SPIN = gl.constexpr(1 << 22)      # polls before a wait gives up (≤ ~1 µs each: ≤ ~4 s)
SMEM_LIMIT = 232448               # an H200 CTA's shared memory
ONE_PER_SM = 120 * 1024           # more than half an SM's shared memory: one CTA an SM


def vectors(payload: int) -> int:
    """16-byte vectors a thread moves for ``payload`` bytes (every thread of the CTA its share)."""
    return payload // (VEC * NT_CTA)


def _for_vectors(nv: int, line: str) -> str:
    """``line`` once per vector k, ``{off}`` its byte offset past the thread's first (k · 16 · threads)."""
    return "".join(line.format(off=k * VEC * NT_CTA) for k in range(nv))


def _check_vectors(nv: int, load: str) -> str:
    """Load every vector (``load`` with ``{off}``) into x0–x3 and count the words unequal to $3 into n."""
    body = "".join(f"setp.ne.u32 q, x{w}, $3; @q add.u32 n, n, 1;\n" for w in range(4))
    return "".join(load.format(off=k * VEC * NT_CTA) + body for k in range(nv))


# --- the four forms' PTX, one inline-asm invocation a thread ($1: the thread's index; a returned count per thread) --

def write_ptx(form: str, nv: int) -> str:
    """The holder's hand-over of hop ``$3``'s payload to the next CTA (``$4``: its rank in the cluster; ``$2``: the
    next CTA's inbox in global memory, ``global`` / ``cbar``; ``$5``: the next CTA's flag, ``global``). ``$6``: 0 on
    CTAs that do not hold the token this hop (nothing written or signalled)."""
    head = ("{ .reg .pred p, e; .reg .u32 a, r, b, s; .reg .u64 g; setp.eq.u32 p, $1, 0; setp.ne.u32 e, $6, 0;\n"
            "@!e bra LAB_SKIP;\n")
    tail = "LAB_SKIP: mov.u32 $0, 0; }"
    if form in ("global", "cbar"):
        body = "mul.wide.u32 g, $1, 16; add.u64 g, g, $2;\n" + _for_vectors(
            nv, "st.global.v4.b32 [g+{off}], {{$3, $3, $3, $3}};\n")
        if form == "global":
            body += "barrier.sync 0;\n@p red.release.gpu.global.add.u32 [$5], 1;\n"
        return head + body + tail
    if form == "dsmem":
        body = ("mov.u32 a, global_smem; mad.lo.u32 a, $1, 16, a; mapa.shared::cluster.u32 r, a, $4;\n"
                + _for_vectors(nv, "st.shared::cluster.v4.b32 [r+{off}], {{$3, $3, $3, $3}};\n")
                + f"mov.u32 b, global_smem; add.u32 b, b, {BAR_OFF}; mapa.shared::cluster.u32 b, b, $4;\n"
                "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [b];\n")
        return head + body + tail
    if form == "bulk":
        body = ("mov.u32 a, global_smem; add.u32 s, a, PAYLOAD; mad.lo.u32 a, $1, 16, s;\n"
                + _for_vectors(nv, "st.shared.v4.b32 [a+{off}], {{$3, $3, $3, $3}};\n")
                + "fence.proxy.async.shared::cta; barrier.sync 0;\n"
                "mov.u32 a, global_smem; mapa.shared::cluster.u32 r, a, $4;\n"
                f"add.u32 b, a, {BAR_OFF}; mapa.shared::cluster.u32 b, b, $4;\n"
                "@p cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [r], [s], PAYLOAD, [b];\n")
        return head + body + tail
    raise ValueError(form)


def wait_ptx(form: str) -> str:
    """The next CTA's wait for its hand-over: ``global`` thread 0 polls ``$2`` (its flag) until it reaches ``$3``,
    then a CTA barrier; ``dsmem`` / ``bulk`` every thread waits on the mbarrier for parity ``$3`` (``bulk``: thread 0
    first arms it with the payload's bytes). ``$4``: polls before giving up; ``$5``: 0 where this CTA receives
    nothing this hop. Returns the polls made (``$4`` or more: the wait ran out)."""
    if form == "global":
        return ("{ .reg .pred p, e, q; .reg .u32 v, n; setp.eq.u32 p, $1, 0; setp.ne.u32 e, $5, 0; and.pred p, p, e;\n"
                "mov.u32 n, 0; @!p bra LAB_DONE;\n"
                "LAB_POLL: ld.acquire.gpu.global.u32 v, [$2]; setp.ge.u32 q, v, $3; @q bra LAB_DONE;\n"
                "add.u32 n, n, 1; setp.lt.u32 q, n, $4; @q bra LAB_POLL;\n"
                "LAB_DONE: barrier.sync 0; mov.u32 $0, n; }")
    arm = ("@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [a], PAYLOAD;\n" if form == "bulk" else "")
    scope = ".acquire.cluster" if form == "dsmem" else ""
    return ("{ .reg .pred p, e, q; .reg .u32 a, n; setp.eq.u32 p, $1, 0; setp.ne.u32 e, $5, 0; and.pred p, p, e;\n"
            f"mov.u32 a, global_smem; add.u32 a, a, {BAR_OFF}; mov.u32 n, 0;\n" + arm
            + "@!e bra LAB_DONE;\n"
            f"LAB_WAIT: mbarrier.try_wait.parity{scope}.shared::cta.b64 q, [a], $3; @q bra LAB_DONE;\n"
            "add.u32 n, n, 1; setp.lt.u32 q, n, $4; @q bra LAB_WAIT;\n"
            "LAB_DONE: mov.u32 $0, n; }")


def read_ptx(form: str, nv: int) -> str:
    """The next CTA's read of its inbox (``$2`` in global memory, or its shared memory at offset 0), every word
    checked against ``$3``; ``$4``: 0 where this CTA receives nothing this hop. Returns the thread's wrong words."""
    head = ("{ .reg .pred q, e; .reg .u32 x0, x1, x2, x3, n, a; .reg .u64 g; mov.u32 n, 0; setp.ne.u32 e, $4, 0;\n"
            "@!e bra LAB_SKIP;\n")
    if form in ("global", "cbar"):
        body = "mul.wide.u32 g, $1, 16; add.u64 g, g, $2;\n" + _check_vectors(
            nv, "ld.global.cg.v4.b32 {{x0, x1, x2, x3}}, [g+{off}];\n")
    else:
        body = "mov.u32 a, global_smem; mad.lo.u32 a, $1, 16, a;\n" + _check_vectors(
            nv, "ld.shared.v4.b32 {{x0, x1, x2, x3}}, [a+{off}];\n")
    return head + body + "LAB_SKIP: mov.u32 $0, n; }"


BAR_OFF = "BAROFF"                # placeholders the constexprs fill in with the configuration's byte offsets


def _fill(ptx: str, payload: int) -> str:
    return ptx.replace(BAR_OFF, str(bar_offset(payload))).replace("PAYLOAD", str(payload))


def bar_offset(payload: int) -> int:
    """The mbarrier's byte offset: after the inbox and the bulk form's staging copy (both ``payload`` bytes)."""
    return 2 * payload


def smem_bytes(payload: int) -> int:
    """The one allocation's bytes: the inbox, the staging copy and the mbarrier, and at least ``ONE_PER_SM``, so
    that no two CTAs share an SM (each stands for a program of the kernel, one an SM)."""
    return max(bar_offset(payload) + 8, ONE_PER_SM)


@gluon.jit
def _wait_arg(goal, FORM: gl.constexpr):
    """What a wait compares: the flag's count (``global``), else the mbarrier phase's parity (the k-th receive
    completes phase k − 1)."""
    if FORM == "global":
        return goal
    else:
        return (goal - 1) & 1


@gluon.jit
def _link(inbox_addr, flag_addr, out_addr, salt, C: gl.constexpr, ITERS: gl.constexpr, FORM: gl.constexpr,
          LAY: gl.constexpr, SHARED: gl.constexpr, SMEM: gl.constexpr, WRITE: gl.constexpr, WAIT: gl.constexpr,
          READ: gl.constexpr, PAYLOAD: gl.constexpr, num_warps: gl.constexpr):
    NT: gl.constexpr = 32 * num_warps
    lay: gl.constexpr = LAY
    shared: gl.constexpr = SHARED
    tid = gl.arange(0, NT, layout=lay)
    zero = tid * 0
    # as in mcast_feed: a store into a small buffer freed first makes Triton declare global_smem, and the one
    # allocation live after it starts at offset 0, where the PTX addresses it (compile_form checks the size)
    scratch = gl.allocate_shared_memory(gl.int8, [NT], shared)
    scratch.store(zero.to(gl.int8))
    scratch._keep_alive()
    smem = gl.allocate_shared_memory(gl.int8, [SMEM], shared)
    cid = zero + _asm(_CLUSTER_ID, "=r", [])
    rank = zero + _asm(_CTA_RANK, "=r", [])
    nxt = (rank + 1) % C
    me = cid * C + rank                                   # this CTA's index over the grid
    to = cid * C + nxt
    my_inbox = zero.to(gl.int64) + inbox_addr + me.to(gl.int64) * PAYLOAD
    next_inbox = zero.to(gl.int64) + inbox_addr + to.to(gl.int64) * PAYLOAD
    my_flag = zero.to(gl.int64) + flag_addr + me.to(gl.int64) * 4
    next_flag = zero.to(gl.int64) + flag_addr + to.to(gl.int64) * 4
    count = NT if FORM == "dsmem" else 1
    _asm(_INIT, "=r,r,r,r", [tid, zero + 2 * PAYLOAD, zero + count])
    _asm(_INIT_FENCE_SYNC, "=r,r", [tid])
    t0 = _stamp(_NOW, lay, NT)
    c0 = _stamp(_CLK, lay, NT)
    late = zero
    bad = zero
    if FORM == "cbar":
        # every CTA takes every hop's cluster barrier; the holder writes before it, the next CTA reads after it
        for h in range(ITERS):
            holder = h % C
            _asm(WRITE, "=r,r,l,r,r,l,r", [tid, next_inbox, zero + salt + h, nxt, next_flag,
                                            (rank == holder).to(gl.int32)])
            _asm(_SYNC, "=r,r", [tid])
            bad += _asm(READ, "=r,r,l,r,r", [tid, my_inbox, zero + salt + h, (rank == (holder + 1) % C).to(gl.int32)])
    else:
        # rank r holds the token at hops j·C + r; it first receives hop j·C + r − 1's payload (rank 0 from j = 1)
        for j in range(ITERS // C):
            h = j * C + rank
            recv = (h > 0).to(gl.int32)
            goal = gl.where(rank == 0, zero + j, zero + j + 1)          # the receives so far, this one included
            spin = gl.where(late == 0, SPIN, 1)
            n = _asm(WAIT, "=r,r,l,r,r,r", [tid, my_flag, _wait_arg(goal, FORM), spin, recv])
            late += (n >= spin).to(gl.int32)
            bad += _asm(READ, "=r,r,l,r,r", [tid, my_inbox, salt + h - 1, recv])
            _asm(WRITE, "=r,r,l,r,r,l,r", [tid, next_inbox, zero + salt + h, nxt, next_flag, zero + 1])
        # the token's return to rank 0 closes the chain
        last = (rank == 0).to(gl.int32)
        spin = gl.where(late == 0, SPIN, 1)
        n = _asm(WAIT, "=r,r,l,r,r,r", [tid, my_flag, _wait_arg(zero + ITERS // C, FORM), spin, last])
        late += (n >= spin).to(gl.int32) * last
        bad += _asm(READ, "=r,r,l,r,r", [tid, my_inbox, zero + salt + ITERS - 1, last])
    t1 = _stamp(_NOW, lay, NT)
    c1 = _stamp(_CLK, lay, NT)
    _asm(_SYNC, "=r,r", [tid])   # no CTA leaves while a peer may still write into its shared memory
    smem._keep_alive()
    row = zero.to(gl.int64) + out_addr + me.to(gl.int64) * 32     # [ctas, 4] int64
    _asm(_STORE, "=r,r,l,l", [tid, row, t1 - t0])
    _asm(_STORE, "=r,r,l,l", [tid, row + 8, c1 - c0])
    _asm(_STORE, "=r,r,l,l", [tid, row + 16, gl.max(late, axis=0).to(gl.int64) + zero.to(gl.int64)])
    _asm(_STORE, "=r,r,l,l", [tid, row + 24, gl.sum(bad, axis=0).to(gl.int64) + zero.to(gl.int64)])


def layouts(c: int) -> dict:
    """``_link``'s register and shared layouts for a cluster of ``c`` CTAs (a power of two), replicated: every CTA
    holds all of a tensor (its CTA bases all 0)."""
    cga = [[0]] * (c.bit_length() - 1)
    return dict(LAY=gl.BlockedLayout([1], [32], [NT_CTA // 32], [0], cga_layout=cga),
                SHARED=gl.SwizzledSharedLayout(1, 1, 1, [0], cga_layout=cga))


def check(form: str, c: int, payload: int) -> None:
    """Refuse a configuration the probe cannot run, naming the fix."""
    if form not in FORMS:
        raise SystemExit(f"cluster_link: form {form!r}: one of {', '.join(FORMS)}")
    if c not in (2, 4, 8, 16):
        raise SystemExit(f"cluster_link: cluster size {c}: 2, 4, 8 or 16 (a hand-over needs two CTAs; 16 is the "
                         "most a cluster may hold, non-portably)")
    if payload < 0 or payload % (VEC * NT_CTA):
        raise SystemExit(f"cluster_link: payload {payload}: a multiple of {VEC * NT_CTA} bytes (16 a thread)")
    if form == "bulk" and payload == 0:
        raise SystemExit("cluster_link: form bulk needs a payload (a bulk copy moves at least 16 bytes)")
    if smem_bytes(payload) > SMEM_LIMIT:
        raise SystemExit(f"cluster_link: payload {payload}: the inbox and staging copy need {smem_bytes(payload)} "
                         f"bytes of shared memory, a CTA has {SMEM_LIMIT}; a smaller payload")


def constexprs(form: str, c: int, payload: int, iters: int) -> dict:
    """``_link``'s constexprs for a configuration (one place for the run and the CPU compile)."""
    check(form, c, payload)
    nv = vectors(payload)
    return dict(C=c, ITERS=iters, FORM=form, **layouts(c), SMEM=smem_bytes(payload), PAYLOAD=payload,
                WRITE=_fill(write_ptx(form, nv), payload),
                WAIT=_fill(wait_ptx("global" if form == "cbar" else form), payload),
                READ=_fill(read_ptx(form, nv), payload))


def measure(form: str, c: int, payload: int, clusters: int, iters: int) -> dict:
    import random

    import torch
    ctas = clusters * c
    inbox = torch.zeros(max(1, ctas * payload // 4), dtype=torch.int32, device="cuda")
    flags = torch.zeros(ctas, dtype=torch.int32, device="cuda")
    out = torch.zeros(ctas, 4, dtype=torch.int64, device="cuda")
    cst = constexprs(form, c, payload, iters)
    for _ in range(3):               # compile, warm; the third is kept
        flags.zero_()
        out.zero_()
        salt = random.randrange(1, 1 << 30)
        _link[(clusters, )](inbox.data_ptr(), flags.data_ptr(), out.data_ptr(), salt, **cst, num_warps=4,
                            num_ctas=c)
        torch.cuda.synchronize()
    lead = out[::c]                  # rank 0 of each cluster: the start to the token's return
    if bool((out[:, 1] <= 0).any()):
        raise SystemExit(f"cluster_link: {int((out[:, 1] <= 0).sum())} of {ctas} CTAs wrote no clocks ({form}, "
                         f"C {c}, {payload} B): their rows are not stored")
    ns, cyc = lead[:, 0].double().median().item(), lead[:, 1].double().median().item()
    late, bad = int(out[:, 2].sum()), int(out[:, 3].sum())
    return dict(form=form, cluster=c, payload=payload, clusters=clusters, iters=iters, waits_timed_out=late,
                wrong_words=bad, void=late > 0 or bad > 0, us_per_hop=ns / iters / 1e3, clk_per_hop=cyc / iters,
                ghz=cyc / ns, gbs_per_hop=payload * iters / ns)


def occupancy(sizes: list, smem: list) -> list:
    """How many clusters of each size the GPU keeps resident at each dynamic shared memory size
    (``cuOccupancyMaxActiveClusters`` through Triton's driver, on ``_link`` compiled for that size)."""
    import torch
    import triton
    util = triton.runtime.driver.active.utils
    rows = []
    for c in sizes:
        cst = constexprs("dsmem", c, 0, c)
        x = torch.zeros(c * 4, dtype=torch.int64, device="cuda")
        k = _link.warmup(x.data_ptr(), x.data_ptr(), x.data_ptr(), 1, **cst, num_warps=4, num_ctas=c, grid=(1, ))
        k._init_handles()
        for s in smem:
            n = util.cuOccupancyMaxActiveClusters(k.function, s, c)
            rows.append(show(dict(cluster=c, smem=s, max_active_clusters=n, ctas=n * c)))
    return rows


# what ``compile_form`` counts in the PTX (the sites, after the compiler's unrolling)
PTX_COUNTS = dict(global_stores=r"st\.global\.v4", global_loads=r"ld\.global\.cg",
                  remote_stores=r"st\.shared::cluster\.v4",
                  local_stores=r"st\.shared\.v4", local_loads=r"ld\.shared\.v4",
                  bulk=r"cp\.async\.bulk\.shared::cluster\.shared::cta", releases=r"red\.release\.gpu",
                  polls=r"ld\.acquire\.gpu", remote_arrives=r"mbarrier\.arrive\.release\.cluster\.shared::cluster",
                  expect_tx=r"mbarrier\.arrive\.expect_tx", mbar_waits=r"mbarrier\.try_wait",
                  cluster_barriers=r"barrier\.cluster\.arrive")


def compile_form(form: str, c: int = 2, payload: int = 8192, iters: int = 64) -> dict:
    """``_link`` compiled for sm_90a without a GPU (ptxas included): its cluster size, shared memory against what
    the PTX addresses, and the counts of each form's instructions."""
    import re

    from bench.common.sm90_report import compile_gluon
    from bench.dag.feed_rate import cluster_copies
    cst = dict(constexprs(form, c, payload, iters), num_warps=4)
    k = compile_gluon(_link, {"inbox_addr": "i64", "flag_addr": "i64", "out_addr": "i64", "salt": "i32"}, cst,
                      num_warps=4, num_ctas=c)
    ptx = k.asm["ptx"]
    return dict(cluster_ctas=cluster_copies(ptx)["cluster_ctas"], shared=k.metadata.shared, need=smem_bytes(payload),
                **{name: len(re.findall(pat, ptx)) for name, pat in PTX_COUNTS.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for cluster_link.json (GPU)")
    ap.add_argument("--compile", action="store_true", help="compile each form for sm_90a (no GPU), print JSON")
    ap.add_argument("--occupancy", action="store_true",
                    help="GPU: only the resident clusters of each --sizes at each --smem (cluster_occupancy.json)")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    ap.add_argument("--sizes", nargs="+", type=int, default=[2, 8, 16], help="CTAs a cluster (2, 4, 8, 16)")
    ap.add_argument("--payloads", nargs="+", type=int, default=[0, 8192, 32768],
                    help="bytes a hop carries (a multiple of 2048; 16 KB: a 64 x 64 fp32 tile or bf16 hi / lo pair)")
    ap.add_argument("--clusters", nargs="+", type=int, default=[1, 0],
                    help="clusters at once (0: as many as --occupancy finds resident for the size)")
    ap.add_argument("--smem", nargs="+", type=int, default=[ONE_PER_SM, 200 * 1024, SMEM_LIMIT],
                    help=f"--occupancy: dynamic shared memory a CTA (bytes, {ONE_PER_SM} to {SMEM_LIMIT})")
    ap.add_argument("--iters", type=int, default=2048, help="hops a launch (a multiple of every size)")
    a = ap.parse_args(argv)
    if not all(ONE_PER_SM <= m <= SMEM_LIMIT for m in a.smem):
        raise SystemExit(f"cluster_link: --smem from {ONE_PER_SM} (the probe's own, one CTA an SM) to {SMEM_LIMIT}")
    if a.iters < 16 or a.iters % 16:
        raise SystemExit("cluster_link: --iters a multiple of 16 (every cluster size's token goes round whole)")
    # every form at every size and payload, but bulk without a payload (a bulk copy moves at least 16 bytes)
    configs = [(f, c, p) for c in a.sizes for p in a.payloads for f in a.forms if not (f == "bulk" and p == 0)]
    if not configs:
        raise SystemExit("cluster_link: nothing to run: form bulk needs a payload above 0")
    for f, c, p in configs:
        check(f, c, p)
    if a.compile:
        print(json.dumps({f"{f}_c{c}_{p}": compile_form(f, c, p) for f, c, p in configs}))
        return 0
    if not a.out:
        raise SystemExit("cluster_link: --out DIR (GPU; with --occupancy the resident clusters' table alone), or "
                         "--compile (CPU)")
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("cluster_link: no CUDA device; --compile checks the kernel on the CPU")
    if a.occupancy:
        rows = occupancy(a.sizes, a.smem)
        os.makedirs(a.out, exist_ok=True)
        save(a.out, "cluster_occupancy.json", rows)
        return 0
    # clusters at once: as given, or 0 for as many as stay resident at one CTA an SM (the token never leaves a
    # cluster, whose CTAs the GPU starts together, so more clusters than fit would only run in waves)
    resident = {r["cluster"]: r["max_active_clusters"] for r in occupancy(a.sizes, [smem_bytes(max(a.payloads))])}
    for c, n in resident.items():
        if n < 1 and 0 in a.clusters:
            raise SystemExit(f"cluster_link: no cluster of {c} CTAs fits the GPU at once; drop {c} from --sizes")
    os.makedirs(a.out, exist_ok=True)
    rows = [show(measure(f, c, p, n or resident[c], a.iters)) for n in a.clusters for f, c, p in configs]
    save(a.out, "cluster_link.json", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
