"""A 2-CTA cluster's TMA feed with the weight boxes multicast or not (lab; docs/dag-results.md "Results" 46).

Does a tile read once from L2 for both CTAs of a cluster (``cp.async.bulk.tensor … .multicast::cluster``) let each
SM take its K steps faster when all SMs stream, as "Results" 46 prices? Triton 3.6's Gluon does not issue a
multicast copy (``bench.dag.feed_rate --compile --cluster 2``) nor hand out a shared buffer's address, so this
probe writes the ring's protocol in PTX itself, against the module's ``global_smem`` symbol: one Gluon allocation
reserves the shared memory (the only one live after a small scratch buffer's store, so at offset 0: ``compile_form``
shows the kernel's shared memory is its size exactly), and every mbarrier operation and TMA copy is inline PTX at
offsets into it. The tensor map is Triton's own encoding, copied to device memory (``tensor_map``).

Each CTA of a cluster of two streams ``--iters`` K steps through a ring of ``--stages`` slots. A step is ``a`` boxes
of its own rows (a row block's A tiles: hi / lo) and ``w`` boxes of the cluster's rows (the W tiles both row blocks
of one column tile read), each box [64, 64] bf16 (8 KB) of an L2-resident [rows, 64] tensor (``--mb``). Form
``copy``: each CTA loads all its ``a + w`` boxes itself (today's kernel: the W lines read from L2 twice). Form
``mcast``: each CTA loads its ``a`` boxes and half the ``w`` boxes, each of those multicast into both CTAs' slots,
so the cluster reads its W boxes from L2 once. Both forms run the same protocol: a slot's ``full`` mbarrier takes
the leader thread's ``arrive.expect_tx`` of the whole step's bytes and the copies' ``complete_tx``; after its wait a
CTA's leader arrives on the slot's ``empty`` mbarrier in both CTAs (count 2: a slot is refilled only when both have
read it, as a multicast into it requires); the prologue issues the first ``stages`` steps. Every wait is bounded
(``SPIN`` polls, then one poll each once a wait has run out); a CTA reports the waits that ran out, which void
the row.

    python -m bench.dag.mcast_feed --out DIR            # GPU: one JSON, a line per form, step and cluster count
    python -m bench.dag.mcast_feed --compile            # CPU: the sm_90a compile's copies, multicasts, mbarriers

Per configuration: the CTAs' median µs a step, bytes a clock an SM into shared memory (``clock64``), GB/s an SM,
and the L2 bytes a step a CTA reads (``mcast``: ``a + w / 2`` boxes).
"""
from __future__ import annotations

import argparse
import json
import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from bench.dag.mma_rate import _CLK, _NOW, _stamp, save, show, third_launch

BOX_BYTES = 8192                 # a [64, 64] bf16 box
BOX = gl.constexpr(BOX_BYTES)
SPIN = gl.constexpr(1 << 22)     # tries of ≤ 1 µs (try_wait's suspend hint) before a wait gives up: ≤ ~4 s

# Inline PTX, one invocation a thread (``pack=1`` over a [32 * num_warps] arange ``tid``, operand $1 where given):
# inits, arrivals and copies predicated on tid 0, the leader; waits and cluster barriers by every thread. Offsets
# are bytes into ``global_smem`` (the dynamic shared memory; the ring, the one allocation live, starts there).
_INIT = gl.constexpr("""{ .reg .pred p; .reg .u32 a; setp.eq.u32 p, $1, 0; mov.u32 a, global_smem;
add.u32 a, a, $2; @p mbarrier.init.shared::cta.b64 [a], $3; mov.u32 $0, 0; }""")
_INIT_FENCE_SYNC = gl.constexpr("""{ fence.mbarrier_init.release.cluster; fence.proxy.async.shared::cta;
barrier.cluster.arrive.release; barrier.cluster.wait.acquire; mov.u32 $0, $1; }""")
_SYNC = gl.constexpr("""{ barrier.cluster.arrive.release; barrier.cluster.wait.acquire;
mov.u32 $0, $1; }""")

def _wait_ptx(hint: bool) -> str:
    """A bounded wait on an mbarrier's phase: $1 its offset, $2 the parity, $3 the polls before it gives up; returns
    the polls made. ``hint``: ``try_wait`` with a 1 µs suspend-time hint at cluster scope (the first runs);
    otherwise no hint, CTA scope (``--wait plain``: a full barrier's copies are this CTA's or a multicast's
    ``complete_tx``; an empty one takes the peer's cluster-scope arrival either way)."""
    op = "try_wait.parity.acquire.cluster.shared::cta.b64 p, [a], $2, 1000" if hint else \
        "try_wait.parity.shared::cta.b64 p, [a], $2"
    return ("{ .reg .pred p; .reg .u32 a, n; mov.u32 a, global_smem; add.u32 a, a, $1; mov.u32 n, 0;\n"
            f"LAB_WAIT: mbarrier.{op}; @p bra LAB_DONE;\n"
            "add.u32 n, n, 1; setp.lt.u32 p, n, $3; @p bra LAB_WAIT;\nLAB_DONE: mov.u32 $0, n; }")


def _arrive_ptx(kind: str) -> str:
    """The leader's release of the slot whose empty mbarrier is at offset $2 ($1: 0 on the releasing thread).
    ``release``: an arrival in both CTAs with cluster-scope release semantics, as a slot a multicast fills needs (the
    first runs); ``relaxed``: the same two without them (PTX 8.6 ``.relaxed.cluster``: the slot's reads are the CTA's
    own waits, nothing it wrote needs to be seen by the peer); ``local``: one arrival in this CTA alone (form
    ``local``, count-1 empty mbarriers)."""
    head = "{ .reg .pred p; .reg .u32 a, r0, r1; setp.eq.u32 p, $1, 0; mov.u32 a, global_smem; add.u32 a, a, $2;\n"
    if kind == "local":
        return head + "@p mbarrier.arrive.shared::cta.b64 _, [a]; mov.u32 $0, 0; }"
    return (head + "mapa.shared::cluster.u32 r0, a, 0; mapa.shared::cluster.u32 r1, a, 1;\n"
            f"@p mbarrier.arrive.{kind}.cluster.shared::cluster.b64 _, [r0];\n"
            f"@p mbarrier.arrive.{kind}.cluster.shared::cluster.b64 _, [r1]; mov.u32 $0, 0; }}")


_EXPECT = gl.constexpr("""{ .reg .pred p; .reg .u32 a; .reg .b64 st; setp.eq.u32 p, $1, 0; mov.u32 a, global_smem;
add.u32 a, a, $2; @p mbarrier.arrive.expect_tx.shared::cta.b64 st, [a], $3; mov.u32 $0, 0; }""")
# a copy into this CTA's slot; ``$7``: issue it (a CTA's share of the multicast boxes is chosen by the caller)
_COPY = gl.constexpr("""{ .reg .pred p, q; .reg .u32 d, b; setp.eq.u32 p, $1, 0; setp.ne.u32 q, $7, 0; and.pred p, p, q;
mov.u32 d, global_smem; add.u32 b, d, $3; add.u32 d, d, $2;
@p cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [d], [$4, {$5, $6}], [b];
mov.u32 $0, 0; }""")
_MCAST = gl.constexpr("""{ .reg .pred p, q; .reg .u32 d, b; .reg .b16 m; setp.eq.u32 p, $1, 0; setp.ne.u32 q, $7, 0;
and.pred p, p, q; mov.b16 m, 3; mov.u32 d, global_smem; add.u32 b, d, $3; add.u32 d, d, $2;
@p cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
[d], [$4, {$5, $6}], [b], m;
mov.u32 $0, 0; }""")
# the leader's store of one int64 of this CTA's row: a Triton store of a tensor laid out alike in both CTAs is one
# datum to the compiler, stored by rank 0 alone (on the first GPU run the rank-1 rows stayed 0)
_STORE = gl.constexpr("""{ .reg .pred p; setp.eq.u32 p, $1, 0; @p st.global.b64 [$2], $3; mov.u32 $0, 0; }""")
_CLUSTER_ID = gl.constexpr("mov.u32 $0, %clusterid.x;")
_CTA_RANK = gl.constexpr("mov.u32 $0, %cluster_ctarank;")


@gluon.jit
def _asm(code: gl.constexpr, cons: gl.constexpr, args):
    return gl.inline_asm_elementwise(code, cons, args, dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _issue(tmap, tid, j, slot, rank, base_a, base_w, rows, A: gl.constexpr, W: gl.constexpr, SLOT: gl.constexpr,
           FULL: gl.constexpr, MCAST: gl.constexpr):
    """Step j into ``slot``: the leader's expect_tx of the step's bytes, its A boxes, its W boxes (``MCAST``: the
    boxes b with b % 2 == rank, each into both CTAs)."""
    zero = tid * 0
    bar = zero + FULL + 8 * slot
    x0 = zero
    _asm(_EXPECT, "=r,r,r,r", [tid, bar, zero + (A + W) * BOX])
    for b in gl.static_range(A):
        y = (base_a + (j * A + b) * 64) % rows
        _asm(_COPY, "=r,r,r,r,l,r,r,r", [tid, zero + slot * SLOT + b * BOX, bar, tmap, x0, y, zero + 1])
    for b in gl.static_range(W):
        y = (base_w + (j * W + b) * 64) % rows
        dst = zero + slot * SLOT + (A + b) * BOX
        if MCAST:
            _asm(_MCAST, "=r,r,r,r,l,r,r,r", [tid, dst, bar, tmap, x0, y, (rank == b % 2).to(gl.int32)])
        else:
            _asm(_COPY, "=r,r,r,r,l,r,r,r", [tid, dst, bar, tmap, x0, y, zero + 1])


@gluon.jit
def _mc_feed(tmap_addr, out_addr, rows, ITERS: gl.constexpr, A: gl.constexpr, W: gl.constexpr, STAGES: gl.constexpr,
             MCAST: gl.constexpr, LAG: gl.constexpr, ARRIVALS: gl.constexpr, WAIT: gl.constexpr,
             ARRIVE: gl.constexpr, ARRIVER: gl.constexpr, num_warps: gl.constexpr):
    NT: gl.constexpr = 32 * num_warps
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0], cga_layout=[[0]])
    SLOT: gl.constexpr = (A + W) * BOX
    FULL: gl.constexpr = STAGES * SLOT
    EMPTY: gl.constexpr = FULL + 8 * STAGES
    shared: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0], cga_layout=[[0]])
    tid = gl.arange(0, NT, layout=lay)
    zero = tid * 0
    # A generic store into a small buffer freed before the ring is allocated: Triton then declares global_smem,
    # which the PTX addresses, and the ring, the one buffer live after it, starts at offset 0 (compile_form checks
    # the kernel's shared memory is the ring's size exactly).
    scratch = gl.allocate_shared_memory(gl.int8, [NT], shared)
    scratch.store(zero.to(gl.int8))
    scratch._keep_alive()
    smem = gl.allocate_shared_memory(gl.int8, [EMPTY + 8 * STAGES], shared)
    tmap = zero.to(gl.int64) + tmap_addr
    cid = _asm(_CLUSTER_ID, "=r", [])
    rank = _asm(_CTA_RANK, "=r", [])
    cid = zero + cid
    rank = zero + rank
    for k in gl.static_range(STAGES):
        _asm(_INIT, "=r,r,r,r", [tid, zero + FULL + 8 * k, zero + 1])
        _asm(_INIT, "=r,r,r,r", [tid, zero + EMPTY + 8 * k, zero + ARRIVALS])
    _asm(_INIT_FENCE_SYNC, "=r,r", [tid])
    base_a = ((cid * 2 + rank) * 977 * 64) % rows          # this CTA's rows (its A tiles)
    base_w = (cid * 613 * 64 + rows // 2) % rows             # the cluster's rows (the W tiles both CTAs read)
    t0 = _stamp(_NOW, lay, NT)
    c0 = _stamp(_CLK, lay, NT)
    for p in gl.static_range(STAGES):
        _issue(tmap, tid, p, p, rank, base_a, base_w, rows, A, W, SLOT, FULL, MCAST)
    late = zero
    for i in range(ITERS):
        s = i % STAGES
        spin = gl.where(late == 0, SPIN, 1)   # after one wait ran out, the rest give up at once
        n = _asm(WAIT, "=r,r,r,r", [zero + FULL + 8 * s, zero + ((i // STAGES) & 1), spin])
        late += (n >= spin).to(gl.int32)
        _asm(ARRIVE, "=r,r,r", [tid - ARRIVER, zero + EMPTY + 8 * s])
        # refill the slot of step r = i - LAG (LAG 0: the slot just read, so the leader waits for the peer's arrival
        # there and then; LAG k: the slot read k steps ago, whose arrivals have had k steps to land)
        r = i - LAG
        if (r >= 0) & (r + STAGES < ITERS):
            sr = r % STAGES
            spin = gl.where(late == 0, SPIN, 1)
            n = _asm(WAIT, "=r,r,r,r", [zero + EMPTY + 8 * sr, zero + ((r // STAGES) & 1), spin])
            late += (n >= spin).to(gl.int32)
            _issue(tmap, tid, r + STAGES, sr, rank, base_a, base_w, rows, A, W, SLOT, FULL, MCAST)
    t1 = _stamp(_NOW, lay, NT)
    c1 = _stamp(_CLK, lay, NT)
    _asm(_SYNC, "=r,r", [tid])   # no CTA leaves while its peer may still arrive on its mbarriers
    smem._keep_alive()
    row = zero.to(gl.int64) + out_addr + (cid * 2 + rank).to(gl.int64) * 32     # [ctas, 4] int64
    _asm(_STORE, "=r,r,l,l", [tid, row, t1 - t0])
    _asm(_STORE, "=r,r,l,l", [tid, row + 8, c1 - c0])
    _asm(_STORE, "=r,r,l,l", [tid, row + 16, late.to(gl.int64)])


FORMS = ("copy", "mcast", "local")


def tensor_map(src):
    """The 128-byte CUtensorMap of ``src`` ([rows, 64] bf16, [64, 64] boxes, 128-byte swizzle) in device memory,
    encoded by Triton's own ``fill_tma_descriptor`` (its TMA arguments' parameters); its bytes sit at offset 128 of
    Triton 3.6's PyCUtensorMap object (a 128-aligned field after the object header), which is checked."""
    import ctypes

    import torch
    import triton
    fill = triton.runtime.driver.active.utils.fill_tma_descriptor
    desc = fill(src.data_ptr(), 3, 2, 9, [64, 64], list(src.shape), list(src.stride()), 0)   # 128B swizzle, bf16
    if type(desc).__basicsize__ != 256:
        raise SystemExit(f"mcast_feed: PyCUtensorMap is {type(desc).__basicsize__} bytes, not Triton 3.6's 256: "
                         "the map's offset in it is unknown")
    raw = ctypes.string_at(id(desc) + 128, 128)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(src.device)


def release(form: str, arrive: str) -> str:
    """How a slot is released: form ``local`` in its own CTA whatever ``--arrive`` says, the others by ``arrive``."""
    return "local" if form == "local" else arrive


def constexprs(form: str, a: int, w: int, stages: int, iters: int, lag: int, wait: str, arrive: str,
               arriver: int) -> dict:
    """``_mc_feed``'s constexprs for a configuration (one place for the run and the CPU compile): the wait's and the
    slot release's PTX, and the empty mbarriers' count (the arrivals a release makes in each CTA)."""
    kind = release(form, arrive)
    return dict(ITERS=iters, A=a, W=w, STAGES=stages, MCAST=form == "mcast", LAG=lag,
                ARRIVALS=1 if kind == "local" else 2, WAIT=_wait_ptx(wait == "hint"), ARRIVE=_arrive_ptx(kind),
                ARRIVER=arriver)


def measure(form: str, a: int, w: int, stages: int, clusters: int, iters: int, mb: int, lag: int = 0,
            wait: str = "hint", arrive: str = "release", arriver: int = 0) -> dict:
    from bench.dag.feed_rate import l2_source
    rows, src = l2_source(mb)
    tmap = tensor_map(src)
    cst = constexprs(form, a, w, stages, iters, lag, wait, arrive, arriver)
    launch = lambda out: _mc_feed[(clusters, )](tmap.data_ptr(), out.data_ptr(), rows, **cst,   # noqa: E731
                                                num_warps=4, num_ctas=2)
    out, ns, cyc = third_launch(launch, clusters * 2)
    if bool((out[:, 1] <= 0).any()):
        raise SystemExit(f"mcast_feed: {int((out[:, 1] <= 0).sum())} of {clusters * 2} CTAs wrote no clocks ({form} "
                         f"{a}x{w}): their rows are not stored")
    late = int(out[:, 2].sum())
    step = (a + w) * BOX_BYTES
    l2 = (a + (w / 2 if form == "mcast" else w)) * BOX_BYTES
    return dict(form=form, a=a, w=w, step_kb=step // 1024, l2_kb_per_cta=l2 / 1024, stages=stages, lag=lag,
                wait=wait, arrive=release(form, arrive), arriver=arriver, ctas=clusters * 2, iters=iters,
                waits_timed_out=late, void=late > 0, us_per_step=ns / iters / 1e3,
                bytes_per_clk_sm=step * iters / cyc, ghz=cyc / ns, gbs_per_sm=step * iters / ns,
                gbs_all=step * iters / ns * clusters * 2)


def compile_form(form: str = "mcast", a: int = 2, w: int = 2, stages: int = 4, iters: int = 64, lag: int = 0,
                 wait: str = "hint", arrive: str = "release", arriver: int = 0) -> dict:
    """``_mc_feed`` compiled for sm_90a without a GPU (ptxas included): its copies (plain, multicast), mbarrier
    waits, inits, remote arrivals, cluster size, shared memory and what the ring needs (equal: the ring is at
    offset 0, where the PTX addresses it)."""
    import re

    from bench.common.sm90_report import compile_gluon
    from bench.dag.feed_rate import cluster_copies
    cst = dict(constexprs(form, a, w, stages, iters, lag, wait, arrive, arriver), num_warps=4)
    k = compile_gluon(_mc_feed, {"tmap_addr": "i64", "out_addr": "i64", "rows": "i32"}, cst, num_warps=4,
                      num_ctas=2)
    ptx = k.asm["ptx"]
    return dict(copies=len(re.findall(r"cp\.async\.bulk\.tensor\.2d\S*bytes \[", ptx)), **cluster_copies(ptx),
                waits=ptx.count("mbarrier.try_wait"), inits=ptx.count("mbarrier.init"),
                remote_arrives=len(re.findall(r"mbarrier\.arrive\.(release|relaxed)\.cluster\.shared::cluster", ptx)),
                local_arrives=ptx.count("mbarrier.arrive.shared::cta.b64 _"),
                shared=k.metadata.shared,
                rank_reads=ptx.count("%cluster_ctarank"), stores=len(re.findall(r"st\.global", ptx)),
                need=stages * ((a + w) * BOX_BYTES + 16))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for mcast_feed.json (GPU)")
    ap.add_argument("--compile", action="store_true", help="compile each form for sm_90a (no GPU), print JSON")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    ap.add_argument("--steps", nargs="+", default=["2x2", "2x4"], metavar="AxW",
                    help="A boxes x W boxes a step (W even): 2x2 a 64 x 64 bf16x3 step (32 KB), 2x4 a 64 x 128 (48 KB)")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--clusters", nargs="+", type=int, default=[0, 48, 4],
                    help="clusters of two CTAs, one CTA an SM; 0: all SMs (SMs / 2); 48: the ~96 programs the kernel "
                         "has in K loops at once")
    ap.add_argument("--lags", nargs="+", type=int, default=[0],
                    help="steps between reading a slot and refilling it (0: at once, waiting for the peer's arrival "
                         "there; k: k steps later, STAGES - k steps in flight)")
    ap.add_argument("--wait", choices=["hint", "plain"], default="hint",
                    help="hint: try_wait with a 1 µs suspend-time hint, cluster-scope acquire (the first runs); "
                         "plain: no hint, CTA scope")
    ap.add_argument("--arrive", choices=["release", "relaxed"], default="release",
                    help="the remote slot releases (forms copy, mcast): release.cluster (the first runs) or relaxed")
    ap.add_argument("--arrivers", nargs="+", type=int, default=[0], choices=[0, 32],
                    help="the thread that releases a slot: 0 the copies' issuer, 32 a thread of the next warp")
    ap.add_argument("--iters", type=int, default=2048)
    ap.add_argument("--mb", type=int, default=8)
    a = ap.parse_args(argv)
    steps = []
    for s in a.steps:
        try:
            na, nw = (int(v) for v in s.split("x"))
        except ValueError:
            raise SystemExit(f"mcast_feed: --steps {s!r}: AxW, e.g. 2x2") from None
        if na < 1 or nw < 2 or nw % 2:
            raise SystemExit(f"mcast_feed: --steps {s!r}: at least one A box and an even number of W boxes")
        steps.append((na, nw))
    if not 2 <= a.stages <= a.iters:
        raise SystemExit("mcast_feed: --stages from 2 to --iters (the prologue issues the first stages steps)")
    if not all(0 <= g < a.stages for g in a.lags):
        raise SystemExit("mcast_feed: --lags from 0 to --stages - 1 (a refill must be issued before its step is read)")
    if a.stages * max(na + nw for na, nw in steps) * BOX_BYTES > 227 * 1024:
        raise SystemExit("mcast_feed: the ring does not fit one SM's shared memory: fewer --stages or boxes")
    if a.compile:
        print(json.dumps({f"{f}_{na}x{nw}_lag{g}": compile_form(f, na, nw, a.stages, lag=g, wait=a.wait,
                                                                      arrive=a.arrive, arriver=a.arrivers[0])
                          for f in a.forms for na, nw in steps for g in a.lags}))
        return 0
    if not a.out:
        raise SystemExit("mcast_feed: --out DIR (GPU) or --compile (CPU)")
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("mcast_feed: no CUDA device; --compile checks the kernel on the CPU")
    os.makedirs(a.out, exist_ok=True)
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [show(measure(f, na, nw, a.stages, c or n_sm // 2, a.iters, a.mb, g, a.wait, a.arrive, t))
            for t in a.arrivers for g in a.lags for c in a.clusters for na, nw in steps for f in a.forms]
    save(a.out, "mcast_feed.json", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
