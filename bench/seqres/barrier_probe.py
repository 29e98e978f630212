"""What does one group barrier cost by itself? A GPU probe for docs/seqres.md.

A kernel of ``2 x SMs`` programs in groups of R (the megakernel's co-residency: two programs per SM) runs NB
flag barriers in a row (``tl_helpers.group_barrier``, the megakernel's ``_sync``), optionally after storing a
[64, STORE_N] fp32 tile per program before each barrier (so the release has stores to publish, as after a
GEMM phase's epilogue). Time per barrier = (kernel time with NB barriers - with 0) / NB, from CUDA events
around a CUDA-graph replay. No work between barriers: the floor a phase boundary costs when every program of
the group arrives at once, to compare with the waits of the phase profiles.

    python -m bench.seqres.barrier_probe [--out DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels.common.tl_helpers import counter_t0_ptx, group_barrier
from .gemm_probe import _time_ms


_T0_PUB = {0: "relaxed", 1: "release"}
_T0_POLL = {0: "ld.relaxed", 1: "ld.acquire", 2: "ld.relaxed + fence.acq_rel"}


@triton.jit
def _t0_barrier(ctr_ptr, goal, limit, ASM: tl.constexpr):
    """Thread 0 publishes and spins (``mode_asm``) between two CTA barriers; the other threads wait at the second
    one. Returns 1 where thread 0 timed out."""
    tl.debug_barrier()
    one = tl.arange(0, 1)
    bad = tl.inline_asm_elementwise(ASM, "=r,l,r,r", [ctr_ptr + one, goal + one * 0, limit + one * 0],
                                    dtype=tl.int32, is_pure=False, pack=1)
    tl.debug_barrier()
    return tl.max(bad, axis=0)


@triton.jit
def _barrier_loop(flags_ptr, err_ptr, out_ptr, epoch, NB: tl.constexpr, R: tl.constexpr, BLOCK_R: tl.constexpr,
                  MODE: tl.constexpr, STORE_N: tl.constexpr, ASM: tl.constexpr = ""):
    pid = tl.program_id(0)
    group = pid // R
    rank = pid % R
    flags = flags_ptr + group * BLOCK_R
    for i in range(0, NB):
        if STORE_N > 0:
            offs = tl.arange(0, 64)[:, None] * STORE_N + tl.arange(0, STORE_N)[None, :]
            tl.store(out_ptr + pid.to(tl.int64) * (64 * STORE_N) + offs, (i + offs).to(tl.float32))
        if MODE >= 10:
            bad = _t0_barrier(flags, (epoch + 1 + i) * R, 2**31 - 1, ASM)
            if bad != 0:
                tl.atomic_xchg(err_ptr, epoch + 1 + i)
        elif MODE > 0:
            group_barrier(flags, rank, epoch + 1 + i, err_ptr, 2**31 - 1, R, BLOCK_R, MODE)
        else:
            tl.debug_barrier()


def aot_barrier(mode: int, R: int = 4):
    """Compile ``_barrier_loop`` for sm_90a without a GPU (tests: the inline-PTX barrier forms assemble with the
    installed Triton). Returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = list(_barrier_loop.arg_names)
    sig = dict(flags_ptr="*i32", err_ptr="*i32", out_ptr="*fp32", epoch="i32", NB="constexpr", R="constexpr",
               BLOCK_R="constexpr", MODE="constexpr", STORE_N="constexpr", ASM="constexpr")
    cex = dict(NB=4, R=R, BLOCK_R=triton.next_power_of_2(R), MODE=mode, STORE_N=0, ASM=mode_asm(mode))
    src = ASTSource(_barrier_loop, sig, constexprs={(names.index(k),): v for k, v in cex.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


MODES = {0: "cta only", 2: "flags ld.acquire", 1: "flags atomic", 3: "counter", 4: "counter atomic polls",
         5: "flags st.release + ld.acquire", 6: "flags st.release + ld.relaxed + fence",
         7: "counter by thread 0 (counter_t0)"}
# modes 10-15: the counter barrier run by thread 0 alone (_t0_barrier): publish (relaxed | release) x poll (ld.relaxed |
# ld.acquire | ld.relaxed + fence.acq_rel). Only 14 (release / ld.acquire) and 15 (release / relaxed + fence) order the
# data; 10-13 lack a release or an acquire and show what each part costs.
MODES.update({10 + 3 * pub + poll: f"counter by thread 0: red.{_T0_PUB[pub]} / {_T0_POLL[poll]}"
              for pub in (0, 1) for poll in (0, 1, 2)})


def mode_asm(mode: int) -> str:
    """The PTX a thread-0 mode (10-15) runs (``tl_helpers.counter_t0_ptx``; mode 14 is MODE 7's); "" for the others."""
    if mode < 10:
        return ""
    pub, poll = divmod(mode - 10, 3)
    return counter_t0_ptx(_T0_PUB[pub], "acquire" if poll == 1 else "relaxed", fence=poll == 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--nb", type=int, default=2000)
    ap.add_argument("--modes", type=int, nargs="+", default=sorted(MODES),
                    help="group_barrier MODEs to time (0: CTA barrier only)")
    args = ap.parse_args()
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    grid = 2 * n_sm
    rows = []
    for mode in args.modes:
        name = MODES[mode]
        for R in ((1,) if mode == 0 else (2, 4, 8, 16)):
            for store_n in (0, 128):
                block_r = triton.next_power_of_2(R)
                out = torch.empty(grid * 64 * max(store_n, 1), device="cuda")
                err = torch.zeros(1, dtype=torch.int32, device="cuda")
                state = {"epoch": 0}

                def launch(nb):
                    flags = torch.zeros(grid // R, block_r, dtype=torch.int32, device="cuda")
                    _barrier_loop[(grid // R * R,)](flags, err, out, state["epoch"], nb, R=R, BLOCK_R=block_r,
                                                    MODE=mode, STORE_N=store_n, ASM=mode_asm(mode), num_warps=4)

                t0 = 1e3 * _time_ms(lambda: launch(0), n=1)
                t1 = 1e3 * _time_ms(lambda: launch(args.nb), n=1)
                assert int(err.item()) == 0, "a barrier timed out"
                r = dict(barrier=name, R=R, store_n=store_n, us_per_barrier=(t1 - t0) / args.nb, grid=grid)
                rows.append(r)
                print(json.dumps(r), flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "barrier_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
