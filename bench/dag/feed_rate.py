"""How fast TMA brings a K step's operand tiles from L2 into one SM's shared memory, with nothing else running (lab;
docs/dag-results.md "Results" 42). Each CTA (one an SM, ``--programs`` of them) streams ``--iters`` steps of ``--boxes``
[64, 64] bf16 boxes (8 KB each: 4 a step = 32 KB, form ws's f16_w1 step at block_n 128; 6 = 48 KB, its bf16x3 step)
through a ring of ``--stages`` slots, one mbarrier a slot, the loads of step i + stages − 1 issued before the wait for
step i, as form ws's loader runs ahead of its consumer. The source is an L2-resident [rows, 64] bf16 tensor
(``--mb``, default 8 MB), CTA p starting at a different row, so the SMs read the same lines at different times, as the
row blocks of a GEMM read its weight tiles.

    python -m bench.dag.feed_rate --out DIR            # GPU: one JSON, a line per configuration
    python -m bench.dag.feed_rate --compile            # CPU: the sm_90a compile's TMA copies and waits (tested)
    python -m bench.dag.feed_rate --compile --cluster 2   # CPU: the same ring in a 2-CTA cluster, each box one
                                                          # tile for both CTAs: multicast or not (tested)

Per configuration: the CTAs' median µs a step, bytes a clock an SM (``clock64``) and GB/s an SM and in all.
"""
from __future__ import annotations

import argparse
import json
import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from bench.dag.mma_rate import _CLK, _NOW, _stamp, save, show, third_launch

T64 = gl.constexpr(64)


@gluon.jit
def _feed(src_d, out_ptr, rows, ITERS: gl.constexpr, BOXES: gl.constexpr, STAGES: gl.constexpr,
          num_warps: gl.constexpr, LAY: gl.constexpr = None):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0]) if LAY is None else LAY
    NT: gl.constexpr = 32 * num_warps
    ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES * BOXES, T64, T64], src_d.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    pid = gl.program_id(0)
    base = (pid * 977 * T64) % rows
    t0 = _stamp(_NOW, lay, NT)
    c0 = _stamp(_CLK, lay, NT)
    for i in gl.static_range(STAGES - 1):   # the ring's first steps
        mbarrier.expect(bars.index(i), BOXES * T64 * T64 * 2)
        for b in gl.static_range(BOXES):
            tma.async_copy_global_to_shared(src_d, [(base + (i * BOXES + b) * T64) % rows, 0], bars.index(i),
                                            ring.index(i * BOXES + b))
    for i in range(ITERS):
        j = i + STAGES - 1           # step j into the slot step i - 1 left (waited for last iteration)
        if j < ITERS:
            sj = j % STAGES
            mbarrier.expect(bars.index(sj), BOXES * T64 * T64 * 2)
            for b in gl.static_range(BOXES):
                tma.async_copy_global_to_shared(src_d, [(base + (j * BOXES + b) * T64) % rows, 0], bars.index(sj),
                                                ring.index(sj * BOXES + b))
        mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
    t1 = _stamp(_NOW, lay, NT)
    c1 = _stamp(_CLK, lay, NT)
    first = gl.arange(0, NT, layout=lay) == 0
    gl.store(out_ptr + pid * 4 + 0 + t1 * 0, t1 - t0, mask=first)
    gl.store(out_ptr + pid * 4 + 1 + t1 * 0, c1 - c0, mask=first)


def l2_source(mb: int):
    """(rows, an L2-resident [rows, 64] bf16 tensor of ``mb`` MB on the GPU): the boxes the feed probes stream."""
    import torch
    rows = mb * 2**20 // (64 * 2)
    return rows, torch.randn(rows, 64, device="cuda").to(torch.bfloat16)


def measure(boxes: int, stages: int, programs: int, iters: int, mb: int) -> dict:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    rows, src = l2_source(mb)
    d = TensorDescriptor(src, [rows, 64], [64, 1], [64, 64],
                         gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16))
    _, ns, cyc = third_launch(
        lambda out: _feed[(programs, )](d, out, rows, ITERS=iters, BOXES=boxes, STAGES=stages, num_warps=4), programs)
    step = boxes * 64 * 64 * 2
    return dict(boxes=boxes, step_kb=step // 1024, stages=stages, programs=programs, iters=iters,
                us_per_step=ns / iters / 1e3, bytes_per_clk_sm=step * iters / cyc, ghz=cyc / ns,
                gbs_per_sm=step * iters / ns, gbs_all=step * iters / ns * programs)


def compile_form(boxes: int = 6, stages: int = 4, iters: int = 64, cluster: int = 1) -> dict:
    """``_feed`` compiled for sm_90a without a GPU: its TMA copies (the first stages − 1 steps unrolled, then one
    step's in the loop), mbarrier waits and shared memory. ``cluster`` > 1: launched as clusters of that many CTAs
    (``num_ctas``) with the ring's layout one tile for all of them (``cga_layout`` [[0, 0]] a doubling), the shape a
    weight tile shared by a cluster's row blocks would take: ``multicast`` counts the copies Triton issues with
    ``.multicast::cluster`` (one L2 read for every CTA), ``cluster_ctas`` the PTX's ``.reqnctapercluster``."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from bench.common.sm90_report import compile_gluon
    rows = 65536
    cga = [[0, 0]] * (cluster.bit_length() - 1) if cluster > 1 else None
    d = TensorDescriptor(torch.empty(rows, 64, dtype=torch.bfloat16), [rows, 64], [64, 1], [64, 64],
                         gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16, cga_layout=cga))
    cst = dict(ITERS=iters, BOXES=boxes, STAGES=stages, num_warps=4)
    if cga:   # the stamps' layout over the cluster's CTAs too (each CTA its own copy)
        cst["LAY"] = gl.BlockedLayout([1], [32], [4], [0], cga_layout=[[0]] * len(cga))
    k = compile_gluon(_feed, {"src_d": mangle_type(d), "out_ptr": "*i64", "rows": "i32"}, cst, num_warps=4,
                      num_ctas=cluster)
    ptx = k.asm["ptx"]
    return dict(tma=ptx.count("cp.async.bulk.tensor"), waits=ptx.count("mbarrier.try_wait"), shared=k.metadata.shared,
                **cluster_copies(ptx))


def cluster_copies(ptx: str) -> dict:
    """A compiled kernel's cluster size (``.reqnctapercluster``, 1 without) and its TMA copies issued with
    ``.multicast::cluster`` (one L2 read for every CTA of the mask)."""
    import re
    ctas = re.search(r"\.reqnctapercluster (\d+)", ptx)
    return dict(multicast=len(re.findall(r"cp\.async\.bulk\.tensor\S*multicast::cluster", ptx)),
                cluster_ctas=int(ctas.group(1)) if ctas else 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for feed_rate.json (GPU)")
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a (no GPU), print JSON")
    ap.add_argument("--boxes", nargs="+", type=int, default=[4, 6])
    ap.add_argument("--stages", nargs="+", type=int, default=[4])
    ap.add_argument("--programs", nargs="+", type=int, default=[0, 8], help="0: one an SM")
    ap.add_argument("--iters", type=int, default=2048)
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--cluster", type=int, default=1, choices=[1, 2, 4], help="--compile only: CTAs a cluster")
    a = ap.parse_args(argv)
    if a.compile:
        print(json.dumps({f"{b}x{s}": compile_form(b, s, cluster=a.cluster) for b in a.boxes for s in a.stages}))
        return 0
    if a.cluster != 1:
        raise SystemExit("feed_rate: --cluster is a compile check (--compile); the GPU run has no cluster form")
    if not a.out:
        raise SystemExit("feed_rate: --out DIR (GPU) or --compile (CPU)")
    import torch
    os.makedirs(a.out, exist_ok=True)
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    save(a.out, "feed_rate.json", [show(measure(b, s, p or n_sm, a.iters, a.mb))
                                   for p in a.programs for s in a.stages for b in a.boxes])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
