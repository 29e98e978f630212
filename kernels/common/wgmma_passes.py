"""Compile-time edits of Triton 3.6's Hopper (sm_90) pipeline for kernels whose GEMM loops chain several ``tl.dot``
on one accumulator (bf16x3: three dots per K step). Used by ``kernels/seqres`` (``acc_reset: flag``, ``wgmma_chain:
async | overlap``; docs/seqres.md, session 15). They keep the kernel's results; they change what waits.

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
3. ``defer_step_waits`` (optional; measured mixed): a loop step's chain stays in flight into the next step, with the
   complete wait moved into the tile epilogue's branch (a text edit of the TTGIR, parsed back).

Triton's compile cache key does not see these edits: a kernel compiled under ``hopper_wgmma_passes`` must
differ from the unedited one in a constexpr (seqres: ``ARS`` = 2, ``WCH`` = 1 or 2), so that no binary is
served for another.
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile

# ops that may sit between the dots of a chain whose waits are relaxed (no memory writes, no regions)
_CHAIN_OK_PREFIX = ("arith.", "math.")
_CHAIN_OK = {"ttng.warp_group_dot", "ttng.warp_group_dot_wait", "ttg.memdesc_index", "ttg.memdesc_trans",
             "ttg.memdesc_subslice", "ttg.memdesc_reshape", "ttg.local_load", "ttg.convert_layout", "tt.splat",
             "tt.broadcast", "tt.expand_dims", "tt.addptr", "tt.bitcast", "tt.fp_to_fp", "ttg.async_wait",
             "ttg.async_commit_group", "ttng.fence_async_shared"}


def relax_chains(mod, int_attr=None) -> int:
    """Relax the intermediate waits of wgmma chains in a TTGIR module (see the module docstring, item 2).
    Returns the number of waits relaxed. ``int_attr(n)`` makes the i32 attribute (default: Triton's builder)."""
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

    relaxed = 0
    done = set()
    for i, op in enumerate(ops):
        if i in done or op.get_name() != "ttng.warp_group_dot_wait" or op.get_num_results() < 1:
            continue
        # follow the chain from this wait: wait -> dot -> wait -> dot ... -> a wait whose result leaves the chain
        chain = [i]
        while (k := next_in_chain(chain[-1])) is not None:
            w = k + 1
            if w >= len(ops) or ops[w].get_name() != "ttng.warp_group_dot_wait" or \
                    ops[w].get_operand(0).id() != ops[k].get_result(0).id():
                chain = []
                break
            chain.append(w)
        done.update(chain)
        if len(chain) < 2:
            continue
        if pos[chain[-1]] != 0:
            continue
        blk = op.get_block().id()
        span = ops[chain[0]:chain[-1] + 1]
        if any(o.get_block().id() != blk for o in (ops[c] for c in chain)) or not all(
                o.get_name() in _CHAIN_OK or o.get_name().startswith(_CHAIN_OK_PREFIX) for o in span):
            continue
        for n, c in enumerate(chain[:-1], start=1):
            ops[c].get_result(0).set_attr("pendings", int_attr(n))
            relaxed += 1
    return relaxed


@contextlib.contextmanager
def hopper_wgmma_passes(acc_init: bool = True, relax: bool = False, defer: bool = False):
    """While active, kernels that Triton compiles for sm_90 get edit 1 (``acc_init``) and/or edit 2
    (``relax``), and with ``defer`` edits 2 and 3 (``defer_step_waits``)."""
    from triton import knobs
    from triton._C.libtriton import passes
    missing = [n for n, ok in (("passes.ttgpuir.add_optimize_accumulator_init",
                                hasattr(passes.ttgpuir, "add_optimize_accumulator_init")),
                               ("passes.ttgpuir.add_assign_latencies", hasattr(passes.ttgpuir, "add_assign_latencies")),
                               ("knobs.runtime.add_stages_inspection_hook",
                                hasattr(knobs.runtime, "add_stages_inspection_hook"))) if not ok]
    if missing:
        raise RuntimeError(f"wgmma_passes: this Triton ({__import__('triton').__version__}) lacks {', '.join(missing)} "
                           "(written for Triton 3.6); compile without the edits (seqres: acc_reset=branch "
                           "wgmma_chain=wait)")
    orig = passes.ttgpuir.add_assign_latencies
    old_hook = knobs.runtime.add_stages_inspection_hook

    def assign_latencies(pm, *args):
        passes.ttgpuir.add_optimize_accumulator_init(pm)
        return orig(pm, *args)

    def hook(backend, stages, options, language, capability):
        if old_hook is not None:
            old_hook(backend, stages, options, language, capability)
        if not (relax or defer) or capability // 10 != 9 or "ttgir" not in stages:
            return
        make = stages["ttgir"]

        def ttgir(src, metadata):
            mod = make(src, metadata)
            relax_chains(mod)
            if defer:
                text, d = defer_step_waits(mod.str())
                if d:
                    from triton._C.libtriton import ir
                    with tempfile.TemporaryDirectory() as tmp:
                        path = os.path.join(tmp, "k.ttgir")
                        with open(path, "w") as f:
                            f.write(text)
                        ctx = mod.context
                        mod = ir.parse_mlir_module(path, ctx)
                        mod.context = ctx  # the Python attribute Triton's later stages read
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


_WAIT = re.compile(r"^(\s*)(%[\w.]+):(\d+) = ttng\.warp_group_dot_wait (%[\w.#]+)(, [^{]*)? \{pendings = (\d+) : i32\} : "
                   r"(tensor<[^>]*>)")
_DOT = re.compile(r"^\s*(%[\w.]+) = ttng\.warp_group_dot (%[\w.#]+), (%[\w.#]+), (%[\w.#]+)(, %[\w.#]+)? \{")
_SMEM_WRITE = ("ttg.async_copy_global_to_local", "ttg.local_store", "ttg.local_alloc", "ttng.async_tma_copy")


def defer_step_waits(text: str) -> tuple[str, int]:
    """Keep a loop step's chained dots in flight into the next step (TTGIR text in, text out; run after
    ``relax_chains``). For a chain dot, wait(n), dot, wait(n), ..., dot, wait(0) in an ``scf.for`` body whose first
    dot accumulates onto a loop-carried value and whose last wait's result is used only by the loop's ``scf.yield``
    and inside one following ``scf.if`` without ``else`` (the flat loop's tile epilogue): the last wait becomes
    ``pendings = C`` (the chain's C dots may stay in flight), the chain's relaxed waits ``n + C`` (the previous
    step's C dots may stay in flight until the step's last wait), and a ``pendings = 0`` wait on the accumulator is
    put first in the ``scf.if`` (the epilogue reads it complete). Nothing in the loop body before the last wait may
    write shared memory: the pipeliner's copies for a later step then run after the previous step's dots are done,
    as before. Returns the new text and the number of loops changed."""
    lines = text.split("\n")
    changed = 0
    for i, ln in enumerate(lines):
        m = _WAIT.match(ln)
        if not m or m.group(6) != "0":
            continue
        ind, res, acc_in, ttype = m.group(1), m.group(2), m.group(4), m.group(7)
        # the enclosing loop: its header and its body's end (the scf.yield at this indentation); value names are
        # only unique within a region, so every search stays inside (head, end]
        head = next((k for k in range(i - 1, -1, -1) if "scf.for" in lines[k] and not lines[k].startswith(ind)),
                    None)
        end = next((k for k in range(i + 1, len(lines)) if lines[k].startswith(ind + "scf.yield")
                    or not lines[k].startswith(ind)), None)
        if head is None or end is None or not lines[end].startswith(ind + "scf.yield"):
            continue
        # the chain backwards: dot (acc_in) <- wait(n) <- dot ... <- first dot on a loop-carried accumulator
        chain_waits, j, cur, first_c = [], i - 1, acc_in, None
        while j > head:
            d = _DOT.match(lines[j])
            if d and d.group(1) == cur:
                c = d.group(4)
                if c.startswith("%arg"):
                    first_c = c
                    break
                w = next((k for k in range(j - 1, head, -1) if lines[k].lstrip().startswith(c.split("#")[0] + ":")),
                         None)
                wm = _WAIT.match(lines[w]) if w is not None and c.endswith("#0") else None
                if not wm or wm.group(6) == "0":
                    break
                chain_waits.append(w)
                cur = wm.group(4)
                j = w - 1
                continue
            j -= 1
        if first_c is None or any(w in lines[k] for k in range(head + 1, i) for w in _SMEM_WRITE):
            continue
        use = res + "#0"
        pat = re.compile(re.escape(use) + r"(?![\w.])")
        users = [k for k in range(i + 1, end + 1) if pat.search(lines[k])]
        blocks = []
        for k in (k for k in range(i + 1, end) if lines[k].startswith(ind + "scf.if ")):
            close = next((q for q in range(k + 1, end) if lines[q].startswith(ind + "}")), None)
            if close is None:
                break
            blocks.append((k, close))
        inside = [(k, c) for k, c in blocks if any(k < u < c for u in users)]
        outside = [u for u in users if not any(k < u < c for k, c in blocks)]
        if len(inside) != 1 or outside != [end] or "else" in lines[inside[0][1]]:
            continue
        k, close = inside[0]
        n_chain = len(chain_waits) + 1
        for w in chain_waits:
            wm = _WAIT.match(lines[w])
            lines[w] = lines[w].replace(f"{{pendings = {wm.group(6)} : i32}}",
                                        f"{{pendings = {int(wm.group(6)) + n_chain} : i32}}", 1)
        lines[i] = ln.replace("{pendings = 0 : i32}", f"{{pendings = {n_chain} : i32}}", 1)
        new = f"%acc_step_done_{changed}"
        for q in range(k + 1, close):
            lines[q] = pat.sub(new, lines[q])
        lines.insert(k + 1, f"{ind}  {new} = ttng.warp_group_dot_wait {use} {{pendings = 0 : i32}} : {ttype}")
        changed += 1
    return "\n".join(lines), changed
