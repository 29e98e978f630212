"""A presplit bf16x3 GEMM phase written in Gluon (Triton 3.6's explicit-layout dialect), for the GEMM probe.

c = a_lo·w_hi + a_hi·w_lo + a_hi·w_hi (fp32 accumulation), the megakernel's operand format: A as bf16 hi/lo
[M, K], W as bf16 hi/lo [K, N]. Persistent: a program takes tiles pid, pid + P, … and runs ONE software
pipeline over its (tile, K step) pairs, as the megakernel's flat loop does, but with what `tl` cannot express
on sm_90 in Triton 3.6:

- TMA loads into a ring of STAGES shared-memory slots, each with an mbarrier that the copies complete
  (no cp.async, no CTA-wide ``bar.sync`` per K step);
- the three wgmma of a step issued asynchronously on one accumulator, and only the previous step's waited for
  (``warpgroup_mma_wait(3)``), so the tensor core always has the next group queued;
- the slot the previous step read is refilled right after that wait, STAGES - 1 steps ahead.

``mm3_gluon_ws`` is the same loop warp-specialized (a 1-warp TMA producer, the MMA warps as consumers).

GPU only (Gluon does not run under TRITON_INTERPRET); measured by ``bench.seqres.gemm_probe``. Without a GPU,
``python -m bench.seqres.gluon_gemm`` compiles both kernels for sm_90a and prints warps, shared memory and the
wgmma / TMA instruction counts (a CI test runs it).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait


@gluon.jit
def _issue_loads(step, pid, nprog, KT, ahi_d, alo_d, whi_d, wlo_d, a_hi, a_lo, w_hi, w_lo, bars,
                 NTN, total, STAGES: gl.constexpr):
    """TMA-load the four operand tiles of the program's ``step``-th (tile, K step) pair into its slot."""
    BM: gl.constexpr = ahi_d.block_type.shape[0]
    BK: gl.constexpr = ahi_d.block_type.shape[1]
    BN: gl.constexpr = whi_d.block_type.shape[1]
    ok = step < total
    slot = step % STAGES
    t = pid + (step // KT) * nprog
    k = (step % KT) * BK
    row = (t // NTN) * BM
    col = (t % NTN) * BN
    bar = bars.index(slot)
    mbarrier.expect(bar, 2 * ahi_d.block_type.nbytes + 2 * whi_d.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(ahi_d, [row, k], bar, a_hi.index(slot), ok)
    tma.async_copy_global_to_shared(alo_d, [row, k], bar, a_lo.index(slot), ok)
    tma.async_copy_global_to_shared(whi_d, [k, col], bar, w_hi.index(slot), ok)
    tma.async_copy_global_to_shared(wlo_d, [k, col], bar, w_lo.index(slot), ok)


@gluon.jit
def operand_ring(ahi_d, alo_d, whi_d, wlo_d, STAGES: gl.constexpr):
    """STAGES shared-memory slots for the four bf16x3 operand tiles (A hi/lo [BM, BK], W hi/lo [BK, BN]), laid out
    as their TMA descriptors' blocks."""
    BM: gl.constexpr = ahi_d.block_type.shape[0]
    BK: gl.constexpr = ahi_d.block_type.shape[1]
    BN: gl.constexpr = whi_d.block_type.shape[1]
    dt: gl.constexpr = ahi_d.dtype
    a_hi = gl.allocate_shared_memory(dt, [STAGES, BM, BK], ahi_d.layout)
    a_lo = gl.allocate_shared_memory(dt, [STAGES, BM, BK], alo_d.layout)
    w_hi = gl.allocate_shared_memory(dt, [STAGES, BK, BN], whi_d.layout)
    w_lo = gl.allocate_shared_memory(dt, [STAGES, BK, BN], wlo_d.layout)
    return a_hi, a_lo, w_hi, w_lo


@gluon.jit
def _ring(ahi_d, alo_d, whi_d, wlo_d, N, K, NT, STAGES: gl.constexpr):
    """The program's TMA ring: STAGES shared-memory slots for the four operand tiles, one mbarrier each, and the
    first STAGES - 1 steps' loads issued; returns the slots, the barriers and the program's step count."""
    BK: gl.constexpr = ahi_d.block_type.shape[1]
    BN: gl.constexpr = whi_d.block_type.shape[1]
    a_hi, a_lo, w_hi, w_lo = operand_ring(ahi_d, alo_d, whi_d, wlo_d, STAGES)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)

    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    NTN = N // BN
    KT = K // BK
    n_tiles = (NT - pid + nprog - 1) // nprog
    total = n_tiles * KT

    for s in gl.static_range(STAGES - 1):
        _issue_loads(s, pid, nprog, KT, ahi_d, alo_d, whi_d, wlo_d, a_hi, a_lo, w_hi, w_lo, bars, NTN, total,
                     STAGES)
    return a_hi, a_lo, w_hi, w_lo, bars, pid, nprog, NTN, KT, n_tiles, total


@gluon.jit
def _mma3(a_hi, a_lo, w_hi, w_lo, slot, kk, acc):
    """The three bf16x3 products of one K step on ring slot ``slot``, issued asynchronously; K step ``kk`` == 0 of a
    tile starts from zeros (the wgmma zero-accumulator flag)."""
    acc = warpgroup_mma(a_lo.index(slot), w_hi.index(slot), acc, use_acc=kk != 0, is_async=True)
    acc = warpgroup_mma(a_hi.index(slot), w_lo.index(slot), acc, is_async=True)
    return warpgroup_mma(a_hi.index(slot), w_hi.index(slot), acc, is_async=True)


@gluon.jit
def mm3_gluon(ahi_d, alo_d, whi_d, wlo_d, c_ptr, N, K, NT,
              STAGES: gl.constexpr, INSTR_N: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = ahi_d.block_type.shape[0]
    BN: gl.constexpr = whi_d.block_type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, INSTR_N, 16])
    a_hi, a_lo, w_hi, w_lo, bars, pid, nprog, NTN, KT, n_tiles, total = _ring(ahi_d, alo_d, whi_d, wlo_d, N, K, NT,
                                                                               STAGES)

    rm = gl.arange(0, BM, layout=gl.SliceLayout(1, mma))
    rn = gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    acc = gl.zeros([BM, BN], gl.float32, layout=mma)
    for step in range(total):
        slot = step % STAGES
        kk = step % KT
        mbarrier.wait(bars.index(slot), (step // STAGES) & 1)
        acc = _mma3(a_hi, a_lo, w_hi, w_lo, slot, kk, acc)
        # the previous step's three MMAs are done: its slot may be refilled
        acc = warpgroup_mma_wait(3, deps=(acc, ))
        _issue_loads(step + STAGES - 1, pid, nprog, KT, ahi_d, alo_d, whi_d, wlo_d, a_hi, a_lo, w_hi, w_lo,
                     bars, NTN, total, STAGES)
        if kk == KT - 1:
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            t = pid + (step // KT) * nprog
            row = (t // NTN) * BM
            col = (t % NTN) * BN
            gl.store(c_ptr + (row + rm)[:, None] * N + (col + rn)[None, :], acc)

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def _gelu_poly(x):
    """GELU with the erf of Abramowitz & Stegun 7.1.26, as ``bench.seqres.gemm_probe.gelu_erf_poly`` (PTX rcp / ex2)."""
    d = 1.0 + 0.23164189906752 * gl.abs(x)
    e = x * (x * -0.7213475204444817)
    t = gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [d], dtype=gl.float32, is_pure=True, pack=1)
    g = gl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [e], dtype=gl.float32, is_pure=True, pack=1)
    p = t * (0.127414796 + t * (-0.142248368 + t * (0.7107068705 + t * (-0.7265760135 + t * 0.5307027145))))
    c = p * g
    return x * gl.where(x < 0, c, 1.0 - c)


@gluon.jit
def _epilogue(acc, t, bias_ptr, chi_ptr, clo_ptr, N, NTN, BM: gl.constexpr, BN: gl.constexpr,
              EPI: gl.constexpr, mma: gl.constexpr, num_warps: gl.constexpr):
    """Tile t's split-output epilogue: acc + bias (GELU of it when EPI == 2), split into bf16 hi + lo, stored through
    a coalesced layout (16-byte stores), as the megakernel's QKV / FFN1 epilogues."""
    row = (t // NTN) * BM
    col = (t % NTN) * BN
    rn = gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    x = acc + gl.load(bias_ptr + col + rn)[None, :]
    if EPI == 2:
        x = _gelu_poly(x)
    hi = x.to(gl.bfloat16)
    lo = (x - hi.to(gl.float32)).to(gl.bfloat16)
    out: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // BN, BN // 8], [num_warps, 1], [1, 0])
    hi = gl.convert_layout(hi, out)
    lo = gl.convert_layout(lo, out)
    om = gl.arange(0, BM, layout=gl.SliceLayout(1, out))
    on = gl.arange(0, BN, layout=gl.SliceLayout(0, out))
    offs = (row + om)[:, None] * N + (col + on)[None, :]
    gl.store(chi_ptr + offs, hi)
    gl.store(clo_ptr + offs, lo)


@gluon.jit
def mm3_gluon_epi(ahi_d, alo_d, whi_d, wlo_d, bias_ptr, chi_ptr, clo_ptr, N, K, NT,
                  STAGES: gl.constexpr, INSTR_N: gl.constexpr, EPI: gl.constexpr, OVERLAP: gl.constexpr,
                  num_warps: gl.constexpr):
    """``mm3_gluon`` with the split-output epilogue (``_epilogue``). OVERLAP: a finished tile's epilogue is deferred
    to the next step, after that step's three wgmma are issued, so it runs while the tensor core works on the next
    tile (its accumulator is a copy; the loop carries it with the tile index); else it runs after the tile's last
    wait, with the tensor core idle."""
    BM: gl.constexpr = ahi_d.block_type.shape[0]
    BN: gl.constexpr = whi_d.block_type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, INSTR_N, 16])
    a_hi, a_lo, w_hi, w_lo, bars, pid, nprog, NTN, KT, n_tiles, total = _ring(ahi_d, alo_d, whi_d, wlo_d, N, K, NT,
                                                                               STAGES)

    acc = gl.zeros([BM, BN], gl.float32, layout=mma)
    done = gl.zeros([BM, BN], gl.float32, layout=mma)
    for step in range(total):
        slot = step % STAGES
        kk = step % KT
        mbarrier.wait(bars.index(slot), (step // STAGES) & 1)
        acc = _mma3(a_hi, a_lo, w_hi, w_lo, slot, kk, acc)
        if OVERLAP:
            if (kk == 0) & (step > 0):  # the previous tile's epilogue, while this step's wgmma run
                _epilogue(done, pid + (step // KT - 1) * nprog, bias_ptr, chi_ptr, clo_ptr, N, NTN, BM, BN, EPI,
                          mma, num_warps)
        acc = warpgroup_mma_wait(3, deps=(acc, ))
        _issue_loads(step + STAGES - 1, pid, nprog, KT, ahi_d, alo_d, whi_d, wlo_d, a_hi, a_lo, w_hi, w_lo,
                     bars, NTN, total, STAGES)
        if kk == KT - 1:
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            if OVERLAP:
                done = acc + 0.0
            else:
                _epilogue(acc, pid + (step // KT) * nprog, bias_ptr, chi_ptr, clo_ptr, N, NTN, BM, BN, EPI, mma,
                          num_warps)
    if OVERLAP:
        if total > 0:
            _epilogue(done, pid + (n_tiles - 1) * nprog, bias_ptr, chi_ptr, clo_ptr, N, NTN, BM, BN, EPI, mma,
                      num_warps)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def _ws_loader(descs, bars, bufs, pid, nprog, NTN, KT, total, STAGES: gl.constexpr):
    """Producer partition (1 warp): refill a slot as soon as the MMA partition has released it."""
    ahi_d, alo_d, whi_d, wlo_d = descs
    ready, empty = bars
    a_hi, a_lo, w_hi, w_lo = bufs
    BM: gl.constexpr = ahi_d.block_type.shape[0]
    BK: gl.constexpr = ahi_d.block_type.shape[1]
    BN: gl.constexpr = whi_d.block_type.shape[1]
    for step in range(total):
        slot = step % STAGES
        # an mbarrier starts with phase 1 complete: the first pass over the ring does not wait
        mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
        t = pid + (step // KT) * nprog
        k = (step % KT) * BK
        row = (t // NTN) * BM
        col = (t % NTN) * BN
        bar = ready.index(slot)
        mbarrier.expect(bar, 2 * ahi_d.block_type.nbytes + 2 * whi_d.block_type.nbytes)
        tma.async_copy_global_to_shared(ahi_d, [row, k], bar, a_hi.index(slot))
        tma.async_copy_global_to_shared(alo_d, [row, k], bar, a_lo.index(slot))
        tma.async_copy_global_to_shared(whi_d, [k, col], bar, w_hi.index(slot))
        tma.async_copy_global_to_shared(wlo_d, [k, col], bar, w_lo.index(slot))


@gluon.jit
def _ws_mma(bars, bufs, c_ptr, N, pid, nprog, NTN, KT, total, STAGES: gl.constexpr, mma: gl.constexpr):
    """Default partition (the MMA warps): three async wgmma per step, the previous step's slot released
    once its MMAs are done, the epilogue on a tile's last step."""
    ready, empty = bars
    a_hi, a_lo, w_hi, w_lo = bufs
    BM: gl.constexpr = a_hi.type.shape[1]
    BN: gl.constexpr = w_hi.type.shape[2]
    rm = gl.arange(0, BM, layout=gl.SliceLayout(1, mma))
    rn = gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    acc = gl.zeros([BM, BN], gl.float32, layout=mma)
    for step in range(total):
        slot = step % STAGES
        kk = step % KT
        mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
        acc = _mma3(a_hi, a_lo, w_hi, w_lo, slot, kk, acc)
        acc = warpgroup_mma_wait(3, deps=(acc, ))
        mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES), pred=step > 0)
        if kk == KT - 1:
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            t = pid + (step // KT) * nprog
            row = (t // NTN) * BM
            col = (t % NTN) * BN
            gl.store(c_ptr + (row + rm)[:, None] * N + (col + rn)[None, :], acc)


@gluon.jit
def mm3_gluon_ws(ahi_d, alo_d, whi_d, wlo_d, c_ptr, N, K, NT,
                 STAGES: gl.constexpr, INSTR_N: gl.constexpr, num_warps: gl.constexpr):
    """``mm3_gluon`` warp-specialized: a 1-warp TMA producer partition and the MMA warps (``num_warps``,
    4 = one warpgroup on 64-row tiles, 8 = two on 128-row tiles) as the default partition, handing the
    ring's slots over with ready/empty mbarriers."""
    BK: gl.constexpr = ahi_d.block_type.shape[1]
    BN: gl.constexpr = whi_d.block_type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, INSTR_N, 16])
    a_hi, a_lo, w_hi, w_lo = operand_ring(ahi_d, alo_d, whi_d, wlo_d, STAGES)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    NTN = N // BN
    KT = K // BK
    total = ((NT - pid + nprog - 1) // nprog) * KT
    bars = (ready, empty)
    bufs = (a_hi, a_lo, w_hi, w_lo)
    gl.warp_specialize([
        (_ws_mma, (bars, bufs, c_ptr, N, pid, nprog, NTN, KT, total, STAGES, mma)),
        (_ws_loader, ((ahi_d, alo_d, whi_d, wlo_d), bars, bufs, pid, nprog, NTN, KT, total, STAGES)),
    ], [1], [40])


def descriptors(ahi, alo, whi, wlo, bm: int, bn: int, bk: int):
    """Host TMA descriptors for the four bf16 operands (A [M, K] blocks [bm, bk]; W [K, N] blocks [bk, bn])."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    la = gl.NVMMASharedLayout.get_default_for([bm, bk], gl.bfloat16)
    lw = gl.NVMMASharedLayout.get_default_for([bk, bn], gl.bfloat16)
    return (TensorDescriptor(ahi, list(ahi.shape), list(ahi.stride()), [bm, bk], la),
            TensorDescriptor(alo, list(alo.shape), list(alo.stride()), [bm, bk], la),
            TensorDescriptor(whi, list(whi.shape), list(whi.stride()), [bk, bn], lw),
            TensorDescriptor(wlo, list(wlo.shape), list(wlo.stride()), [bk, bn], lw))


def ws_maxnreg(num_warps: int, ctas: int = 1) -> int:
    """Register cap for ``mm3_gluon_ws``: its num_warps + 4 warps (the 1-warp producer takes a warpgroup's
    registers) times ``ctas`` CTAs must fit the SM's 65536 registers."""
    return min(256, 65536 // (32 * (num_warps + 4) * ctas)) // 8 * 8


def aot_compile(ws: bool, bm: int, bn: int, bk: int, num_warps: int, stages: int, ctas: int = 1, epi: int = 0,
                overlap: bool = False):
    """Compile ``mm3_gluon`` (``ws``: ``mm3_gluon_ws``; ``epi`` 1/2: ``mm3_gluon_epi`` with that epilogue) for
    sm_90a without a GPU."""
    import torch
    from triton.runtime.jit import mangle_type

    from bench.common.sm90_report import compile_gluon
    fn = mm3_gluon_epi if epi else mm3_gluon_ws if ws else mm3_gluon
    a = torch.empty(1024, 1024, dtype=torch.bfloat16)
    names = list(fn.arg_names)
    sig = {n: mangle_type(d) for n, d in zip(names[:4], descriptors(a, a, a, a, bm, bn, bk))}
    sig.update(N="i32", K="i32", NT="i32")
    cex = dict(STAGES=stages, INSTR_N=instr_n(bm, bn, num_warps), num_warps=num_warps)
    if epi:
        sig.update(bias_ptr="*fp32", chi_ptr="*bf16", clo_ptr="*bf16")
        cex.update(EPI=epi, OVERLAP=overlap)
        ptrs = ("bias_ptr", "chi_ptr", "clo_ptr")
    else:
        sig.update(c_ptr="*fp32")
        ptrs = ("c_ptr",)
    opts = dict(num_warps=num_warps)
    if ws:
        opts["maxnreg"] = ws_maxnreg(num_warps, ctas)
    return compile_gluon(fn, sig, cex, (*ptrs, "N", "K"), **opts)


def main():
    for ws, bm, bn, bk, nw, ns, epi, ov in ((False, 64, 128, 32, 4, 4, 0, False), (False, 128, 128, 64, 8, 3, 0, False),
                                            (True, 64, 128, 64, 4, 4, 0, False), (True, 128, 128, 64, 8, 3, 0, False),
                                            (False, 64, 128, 32, 4, 4, 2, False), (False, 64, 128, 32, 4, 4, 2, True)):
        k = aot_compile(ws, bm, bn, bk, nw, ns, epi=epi, overlap=ov)
        ptx = k.asm["ptx"]
        name = f"mm3_gluon_epi{epi}{'_ov' if ov else ''}" if epi else "mm3_gluon_ws" if ws else "mm3_gluon"
        if epi:  # where the epilogue sits: between the loop's first wgmma and its first wait (overlapped) or after
            first_mma = ptx.index("wgmma.mma_async")
            name += f" epi_before_wait={'ex2.approx' in ptx[first_mma:ptx.index('wgmma.wait_group', first_mma)]}"
        print(f"{name} {bm}x{bn}x{bk} w{nw} s{ns}: warps={k.metadata.num_warps} "
              f"shared={k.metadata.shared} wgmma={ptx.count('wgmma.mma_async')} "
              f"tma={ptx.count('cp.async.bulk.tensor')} setmaxnreg={ptx.count('setmaxnreg')}", flush=True)


def instr_n(bm: int, bn: int, num_warps: int) -> int:
    """The widest wgmma N that tiles BN with ``num_warps`` warps along M (the tutorial's rule)."""
    m_reps = -(-bm // 16)
    n_reps = -(-num_warps // m_reps)
    max_n = max(bn // n_reps, 8)
    n = 256
    while n > max_n or bn % n:
        n -= 8
    return n


if __name__ == "__main__":
    main()
