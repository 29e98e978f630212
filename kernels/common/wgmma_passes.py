"""Compile-time edits of Triton 3.6's Hopper (sm_90) pipeline for kernels whose GEMM loops chain several ``tl.dot``
on one accumulator (bf16x3: three dots per K step). Used by ``kernels/seqres`` (every sm_90 compile gets edit 1;
``wgmma_chain: async`` adds edit 2; docs/seqres.md) and ``kernels/dag`` (edit 2; ``wgmma_chain: async_inflight``
adds its pipelined-loop form; docs/dag.md). They keep the kernel's results; they change what waits.

1. ``acc_init``: Triton's ``OptimizeAccumulatorInit`` pass, which Triton 3.6 runs only for sm_100+, also runs
   for sm_90, just before the software pipeliner (it is inserted in front of ``add_assign_latencies``). A loop
   whose accumulator is reset to zeros (``if last: ...; acc = zeros``) then passes wgmma's zero-accumulator
   predicate (``scale-d``) to the first dot of the next tile instead of writing zeros into the accumulator
   registers; with no register writes to an accumulator in flight, ptxas stops serializing every wgmma of the
   kernel (its note C7514), and the reset's moves are gone.
2. ``relax_chains``: Triton waits for each dot of a chain before issuing the next (``warp_group_dot_wait``
   with ``pendings = 0`` after every dot) although wgmma instructions of one shape that accumulate into the
   same registers are ordered by the hardware (PTX ISA, wgmma.mma_async: "accessing the accumulator registers
   ... across multiple wgmma.mma_async instructions of the same shape ... is ordered"). Each such wait whose
   results feed only the next dot's accumulator is relaxed to ``pendings = n`` (the n dots of the chain issued
   so far: no wait), provided the chain ends, in the same block, in a ``pendings = 0`` wait with nothing
   between that writes memory or branches. The chain's three dots are then in the tensor pipe together, and
   the final wait still orders their shared-memory operands before anything reuses them.

Triton's compile cache key does not see these edits: a kernel compiled under ``hopper_wgmma_passes`` must
differ from the unedited one in its source or a constexpr (seqres: ``WGMMA_CHAIN``), so that no binary is
served for another.
"""
from __future__ import annotations

import contextlib
import re

# ops that may sit between the dots of a chain whose waits are relaxed (no memory writes, no regions)
_CHAIN_OK_PREFIX = ("arith.", "math.")
_CHAIN_OK = {"ttng.warp_group_dot", "ttng.warp_group_dot_wait", "ttg.memdesc_index", "ttg.memdesc_trans",
             "ttg.memdesc_subslice", "ttg.memdesc_reshape", "ttg.local_load", "ttg.convert_layout", "tt.splat",
             "tt.broadcast", "tt.expand_dims", "tt.addptr", "tt.bitcast", "tt.fp_to_fp", "ttg.async_wait",
             "ttg.async_commit_group", "ttng.fence_async_shared"}


def relax_chains(mod, int_attr=None, inflight_end: bool = False) -> int:
    """Relax the intermediate waits of wgmma chains in a TTGIR module (see the module docstring, item 2).
    Returns the number of waits relaxed. ``int_attr(n)`` makes the i32 attribute (default: Triton's builder).

    ``inflight_end`` also relaxes the chains of a software-pipelined K loop, which end in no wait at all: the last
    dot's result goes straight to ``scf.yield`` (it runs on into the next iteration, whose first wait, or the wait
    after the loop, completes it), and the first dot accumulates into the loop-carried value. Relaxed, the first
    wait is ``pendings = 1``: every wgmma group issued before this iteration's first dot is complete there (groups
    complete in order), so the stage buffers of earlier iterations, which this iteration's copies overwrite, are
    free as before; only this iteration's own dots stay in flight. Required: no op of the loop body before the
    chain writes shared memory or opens a region, and nothing between the dots does (``_CHAIN_OK``)."""
    if int_attr is None:
        from triton._C.libtriton import ir
        int_attr = ir.builder(mod.context).get_int32_attr
    ops = []
    mod.walk(lambda op: ops.append(op))  # post-order: a block's ops in program order, regions before their op
    uses: dict[int, list] = {}
    for i, op in enumerate(ops):
        for j in range(op.get_num_operands()):
            uses.setdefault(op.get_operand(j).id(), []).append((i, j))
    # the pendings of every wait, in program order (the Python binding cannot read an op's integer attribute;
    # waits have no regions, so their order in the text is their order in the post-order walk)
    pend = [int(m) for m in re.findall(r"ttng\.warp_group_dot_wait [^\n]*?\{pendings = (\d+) : i32\}",
                                        mod.str_nodebug())]
    waits = [i for i, op in enumerate(ops) if op.get_name() == "ttng.warp_group_dot_wait"]
    if len(waits) != len(pend):  # the text is not what this reader expects: change nothing
        return 0
    pos = dict(zip(waits, pend))

    def next_in_chain(i):
        """Index of the dot that wait ``ops[i]`` feeds (its accumulator, and nothing else uses the wait), or None."""
        op = ops[i]
        acc_uses = uses.get(op.get_result(0).id(), [])
        if len(acc_uses) != 1 or any(uses.get(op.get_result(r).id()) for r in range(1, op.get_num_results())):
            return None
        k, slot = acc_uses[0]
        if ops[k].get_name() != "ttng.warp_group_dot" or slot != 2 or k < i:
            return None
        return k

    producer = {op.get_result(r).id(): i for i, op in enumerate(ops) for r in range(op.get_num_results())}
    chain_ok = lambda o: o.get_name() in _CHAIN_OK or o.get_name().startswith(_CHAIN_OK_PREFIX)

    def loop_carried(first_wait, last_dot):
        """The pipelined shape (see ``inflight_end``) around the waits from ``first_wait`` to the dot ``last_dot``."""
        blk = ops[first_wait].get_block().id()
        d0 = producer.get(ops[first_wait].get_operand(0).id())
        out = uses.get(ops[last_dot].get_result(0).id(), [])
        return (d0 is not None and ops[d0].get_name() == "ttng.warp_group_dot"
                and ops[d0].get_operand(2).id() not in producer                      # a block argument
                and len(out) == 1 and ops[out[0][0]].get_name() == "scf.yield"
                and ops[out[0][0]].get_block().id() == blk == ops[last_dot].get_block().id()
                and all(chain_ok(o) for o in ops[d0:last_dot + 1])
                and all(chain_ok(o) for o in ops[:d0] if o.get_block().id() == blk))

    relaxed = 0
    done = set()
    for i, op in enumerate(ops):
        if i in done or op.get_name() != "ttng.warp_group_dot_wait" or op.get_num_results() < 1:
            continue
        # follow the chain from this wait: wait -> dot -> wait -> dot ... -> a wait whose result leaves the chain
        chain, tail = [i], None
        while (k := next_in_chain(chain[-1])) is not None:
            w = k + 1
            if w >= len(ops) or ops[w].get_name() != "ttng.warp_group_dot_wait" or \
                    ops[w].get_operand(0).id() != ops[k].get_result(0).id():
                tail = k  # a dot with no wait after it
                break
            chain.append(w)
        done.update(chain)
        if tail is not None:  # pipelined: every wait of the chain is intermediate
            if not (inflight_end and loop_carried(chain[0], tail)):
                continue
            relax = chain
        else:
            if len(chain) < 2 or pos[chain[-1]] != 0:
                continue
            blk = op.get_block().id()
            if any(o.get_block().id() != blk for o in (ops[c] for c in chain)) or not all(
                    chain_ok(o) for o in ops[chain[0]:chain[-1] + 1]):
                continue
            relax = chain[:-1]
        for n, c in enumerate(relax, start=1):
            ops[c].get_result(0).set_attr("pendings", int_attr(n))
            relaxed += 1
    return relaxed


@contextlib.contextmanager
def hopper_wgmma_passes(acc_init: bool = True, relax: bool = False, inflight_end: bool = False):
    """While active, kernels that Triton compiles for sm_90 get edit 1 (``acc_init``) and/or edit 2 (``relax``;
    ``inflight_end``: ``relax_chains``'s, for chains whose last dot the pipeliner keeps in flight)."""
    from triton import knobs
    from triton._C.libtriton import passes
    missing = [n for n, ok in (("passes.ttgpuir.add_optimize_accumulator_init",
                                hasattr(passes.ttgpuir, "add_optimize_accumulator_init")),
                               ("passes.ttgpuir.add_assign_latencies", hasattr(passes.ttgpuir, "add_assign_latencies")),
                               ("knobs.runtime.add_stages_inspection_hook",
                                hasattr(knobs.runtime, "add_stages_inspection_hook"))) if not ok]
    if missing:
        raise RuntimeError(f"wgmma_passes: this Triton ({__import__('triton').__version__}) lacks {', '.join(missing)} "
                           "(written for Triton 3.6; pyproject.toml pins it)")
    orig = passes.ttgpuir.add_assign_latencies
    old_hook = knobs.runtime.add_stages_inspection_hook

    def assign_latencies(pm, *args):
        passes.ttgpuir.add_optimize_accumulator_init(pm)
        return orig(pm, *args)

    def hook(backend, stages, options, language, capability):
        if old_hook is not None:
            old_hook(backend, stages, options, language, capability)
        if not relax or capability // 10 != 9 or "ttgir" not in stages:
            return
        make = stages["ttgir"]

        def ttgir(src, metadata):
            mod = make(src, metadata)
            relax_chains(mod, inflight_end=inflight_end)
            return mod
        stages["ttgir"] = ttgir

    if acc_init:
        passes.ttgpuir.add_assign_latencies = assign_latencies
    knobs.runtime.add_stages_inspection_hook = hook
    try:
        yield
    finally:
        passes.ttgpuir.add_assign_latencies = orig
        knobs.runtime.add_stages_inspection_hook = old_hook

