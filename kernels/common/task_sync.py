"""Dependency counters of persistent task-graph kernels (``kernels/dag``): a CTA waits until a counter in global
memory reached a goal, and publishes "done" by adding 1 to a counter.

Memory ordering (PTX memory model; triton PR #6307, issue #7125): every thread's writes of a task, then a CTA barrier,
then ONE thread's release reduction (``red.release.gpu``); the consumer's one thread spins on ``ld.acquire.gpu`` and
a CTA barrier orders the other threads behind it. Data another CTA wrote is then read through L2 (``.cg`` loads),
never from a stale L1 line. ``GPU=False`` (the Triton interpreter, which runs no inline PTX) uses atomics with the
same semantics: ``atomic_add(ptr, 0, sem="acquire")`` polls and ``atomic_add(ptr, 1, sem="release")`` publishes.
"""
import triton
import triton.language as tl

# the poll loop: ``ld.acquire.gpu`` of the counter ($1) until it is >= the goal ($2), at most $3 polls; $0 = 1 on
# timeout (registers n, v and predicate q declared by the caller's block, which the loop closes)
_POLL_LOOP = ("mov.u32 n, 0;\n"
              "LOOP:\n\t"
              "ld.acquire.gpu.global.b32 v, [$1];\n\t"
              "setp.ge.s32 q, v, $2;\n\t"
              "@q bra DONE;\n\t"
              "add.u32 n, n, 1; setp.lt.u32 q, n, $3;\n\t"
              "@q bra LOOP;\n\t"
              "mov.b32 $0, 1;\n"
              "DONE:\n\t}")

# thread 0 polls (the others return 0 at once); $0 = 1 on timeout in thread 0, else 0
WAIT_T0_PTX = tl.constexpr(
    "{ .reg .pred p, q; .reg .b32 t, v, n;\n\t"
    "mov.u32 t, %tid.x; setp.ne.u32 p, t, 0; mov.b32 $0, 0;\n\t"
    "@p bra DONE;\n\t" + _POLL_LOOP)

# every thread polls its own counter ($0 = 1 on timeout, else 0): ``wait_counters``, one element per counter, so a
# task's counters are polled at the same time
WAIT_EACH_PTX = tl.constexpr("{ .reg .pred q; .reg .b32 v, n;\n\tmov.b32 $0, 0;\n\t" + _POLL_LOOP)

# thread 0 adds 1 to the counter ($1) with a release reduction (no reply awaited); $0 = 0
SIGNAL_T0_PTX = tl.constexpr(
    "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0;\n\t"
    "@p red.release.gpu.global.add.s32 [$1], 1; }\n\tmov.b32 $0, 0;")


@triton.jit
def wait_counter(ctr_ptr, goal, spin_limit, GPU: tl.constexpr):
    """Spin until the int32 counter at ``ctr_ptr`` is >= ``goal`` (acquire, gpu scope), at most ``spin_limit``
    polls. Returns 1 when it gave up (GPU: in thread 0 only), else 0. The caller puts a CTA barrier after it (GPU:
    the other threads wait there for thread 0's acquire)."""
    if GPU:
        one = tl.arange(0, 1)
        bad = tl.inline_asm_elementwise(WAIT_T0_PTX, "=r,l,r,r", [ctr_ptr + one, goal + one * 0,
                                                                   spin_limit + one * 0],
                                        dtype=tl.int32, is_pure=False, pack=1)
        out = tl.max(bad, axis=0)
    else:
        seen = tl.atomic_add(ctr_ptr, 0, sem="acquire", scope="gpu")
        tries = 0
        while (seen < goal) & (tries < spin_limit):
            seen = tl.atomic_add(ctr_ptr, 0, sem="acquire", scope="gpu")
            tries += 1
        out = (seen < goal).to(tl.int32)
    return out


@triton.jit
def wait_counters(ctr_ptrs, goals, spin_limit, GPU: tl.constexpr):
    """Spin until every int32 counter of the vector ``ctr_ptrs`` is >= its ``goals`` element (acquire, gpu scope),
    all at once: each thread polls the elements it holds (GPU; a counter held by several threads is polled by each).
    At most ``spin_limit`` polls per element. Returns the number of counters that gave up (0 = all reached). The
    caller puts a CTA barrier after it."""
    if GPU:
        bad = tl.inline_asm_elementwise(WAIT_EACH_PTX, "=r,l,r,r", [ctr_ptrs, goals, spin_limit + goals * 0],
                                        dtype=tl.int32, is_pure=False, pack=1)
    else:
        seen = tl.atomic_add(ctr_ptrs, 0, sem="acquire", scope="gpu")
        tries = 0
        while (tl.max((seen < goals).to(tl.int32), axis=0) > 0) & (tries < spin_limit):
            seen = tl.atomic_add(ctr_ptrs, 0, sem="acquire", scope="gpu")
            tries += 1
        bad = (seen < goals).to(tl.int32)
    return tl.sum(bad, axis=0)


@triton.jit
def signal_counter(ctr_ptr, GPU: tl.constexpr):
    """Add 1 to the int32 counter at ``ctr_ptr`` (release, gpu scope), once per CTA. The caller puts a CTA barrier
    before it, so every thread's writes of the task are ordered before the release."""
    if GPU:
        one = tl.arange(0, 1)
        tl.inline_asm_elementwise(SIGNAL_T0_PTX, "=r,l", [ctr_ptr + one], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.atomic_add(ctr_ptr, 1, sem="release", scope="gpu")

