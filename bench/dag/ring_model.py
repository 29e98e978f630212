"""A model of form ws's ring protocol with the cooperative consumers (block_m 128, two consumer warpgroups), run
under random schedules (lab; docs/dag-results.md "Results" 49). CPU only, no Triton.

The kernel's pieces, each as ``kernels/dag/ws_kernel.py`` has them: ``STAGES`` ring slots, each with a ``ready``
mbarrier (count 1 plus the TMA's bytes) and an ``empty`` one (count 2: both consumers free a slot); the loader
claims step g's slot once ``empty`` completed the phase of step g − STAGES, issues its TMA and, for a GEMM, claims
``pre`` steps before the task's dependency wait; both consumers take every task (a GEMM tile's 64-row halves), and
attention tasks in turn, the runner freeing each of the task's slots for both (count 2). An mbarrier is a phase
number and a pending count; ``try_wait.parity(P)`` passes when the phase's parity is not P, which names the current
phase or the one before it and cannot tell a phase two behind. TMA transfers land at random times, in any order.

A run fails (``Violation``) when a consumer passes ``ready`` for a step whose data is not the slot's, when the loader
refills a slot a consumer still reads, or when an arrival over-completes a phase. ``scan`` counts failing schedules.

    python -m bench.dag.ring_model --stages 3 --nkv 1 2 3 4 5 6 --schedules 150   # [--causal] [--pre 2]
    python -m bench.dag.ring_model ... --skipper-waits   # the candidate fix
"""
from __future__ import annotations

import argparse
import random


class Violation(Exception):
    pass


class _Barrier:
    def __init__(self, count: int):
        self.count, self.pending, self.phase, self.tx = count, count, 0, 0

    def arrive(self, n: int = 1) -> None:
        self.pending -= n
        if self.pending < 0:
            raise Violation(f"an arrival of {n} over-completes a phase (count {self.count})")
        self.complete()

    def complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def passes(self, parity: int) -> bool:
        return (self.phase & 1) != parity


def run(tasks: list[tuple[str, int]], stages: int, pre: int, seed: int, skipper_waits: bool = False) -> int:
    """Run ``tasks`` ((kind, n): ``gemm`` with n K steps, ``attn`` with n key blocks (a q step, then n), ``ln`` with
    no ring step) through the protocol under schedule ``seed``; the number of scheduler steps, or ``Violation``.
    ``skipper_waits``: the candidate fix, where the consumer that skips an attention task waits on each of its steps'
    ``ready`` and frees the slot for itself (count 1), and the runner frees each for itself only."""
    runner_frees = 1 if skipper_waits else 2
    rnd = random.Random(seed)
    ready = [_Barrier(1) for _ in range(stages)]
    empty = [_Barrier(2) for _ in range(stages)]
    landed, writing = [None] * stages, [None] * stages
    readers = [set() for _ in range(stages)]
    inflight = []
    handoff = [[None, None], [None, None]]
    full = [[_Barrier(1), _Barrier(1)], [_Barrier(1), _Barrier(1)]]
    free = [[_Barrier(1), _Barrier(1)], [_Barrier(1), _Barrier(1)]]

    def wait(b, parity):
        while not b.passes(parity):
            yield

    def claim(step):
        slot = step % stages
        yield from wait(empty[slot], ((step // stages) & 1) ^ 1)
        if readers[slot]:
            raise Violation(f"the loader refills slot {slot} with step {step} while {sorted(readers[slot])} read it")
        ready[slot].pending -= 1   # the elected arrive with its byte count
        ready[slot].tx += 1
        writing[slot], landed[slot] = step, None
        inflight.append((slot, step))

    def hand(c, i, task):
        q = i % 2
        yield from wait(free[c][q], ((i // 2) & 1) ^ 1)
        handoff[c][q] = task
        full[c][q].arrive()

    def take(c, i):
        q = i % 2
        yield from wait(full[c][q], (i // 2) & 1)
        t = handoff[c][q]
        free[c][q].arrive()
        return t

    def loader():
        g = 0
        for i, (kind, n) in enumerate(tasks):
            g0, early = g, (min(pre, n) if kind == "gemm" else 0)
            for k in range(early):
                yield from claim(g + k)
            for c in (0, 1):
                yield from hand(c, i, (kind, n, g0))
            for _ in range(rnd.randint(0, 6)):   # the dependency wait
                yield
            steps = n if kind == "gemm" else (1 + n if kind == "attn" else 0)
            for k in range(early, steps):
                yield from claim(g + k)
            g += steps
            yield
        for c in (0, 1):
            yield from hand(c, len(tasks), None)

    def use(c, step):
        slot = step % stages
        yield from wait(ready[slot], (step // stages) & 1)
        if landed[slot] != step:
            raise Violation(f"consumer {c} passes ready for step {step} (slot {slot}) while the slot holds "
                            f"{landed[slot]} (TMA of step {writing[slot]} in flight)")
        readers[slot].add((c, step))

    def release(c, step, n=1):
        slot = step % stages
        readers[slot].discard((c, step))
        empty[slot].arrive(n)

    def consumer(c):
        i = n_attn = 0
        while True:
            t = yield from take(c, i)
            if t is None:
                return
            kind, n, g = t
            if kind == "gemm":
                yield from use(c, g)
                yield
                for k in range(1, n):
                    yield from use(c, g + k)
                    yield
                    release(c, g + k - 1)
                    yield
                release(c, g + n - 1)
            elif kind == "attn":
                if n_attn % 2 == c:   # this consumer runs it; the other skips it
                    yield from use(c, g)
                    yield
                    release(c, g, runner_frees)   # q read, its slot freed for both
                    for j in range(1, n + 1):
                        yield from use(c, g + j)
                        yield
                        if j > 1:
                            release(c, g + j - 1, runner_frees)
                        yield
                    release(c, g + n, runner_frees)
                elif skipper_waits:
                    for j in range(n + 1):
                        yield from use(c, g + j)
                        release(c, g + j)
                n_attn += 1
            for _ in range(rnd.randint(0, 3)):   # the epilogue and the hand-over to the signaller
                yield
            i += 1

    procs = {"loader": loader(), "c0": consumer(0), "c1": consumer(1)}
    n = 0
    while procs:
        n += 1
        if n > 2_000_000:
            raise Violation("no progress (a deadlock)")
        if inflight and rnd.random() < 0.3:   # a TMA transfer lands, any of those in flight
            slot, step = inflight.pop(rnd.randrange(len(inflight)) if rnd.random() < 0.5 else 0)
            landed[slot], writing[slot] = step, None
            ready[slot].tx -= 1
            ready[slot].complete()
            continue
        name = rnd.choice(list(procs))
        try:
            next(procs[name])
        except StopIteration:
            del procs[name]
    return n


def tasks_for(rnd: random.Random, nkv: int, causal: bool = False, n_tasks: int = 40) -> list[tuple[str, int]]:
    """A random task sequence: attention tasks of ``nkv`` key blocks (causal: 1 to ``nkv``), LayerNorm tasks and
    GEMM tiles of 8, 16 or 32 K steps, in the proportions of the dag graphs."""
    out = []
    for _ in range(n_tasks):
        r = rnd.random()
        if r < 0.35:
            out.append(("attn", rnd.randint(1, nkv) if causal else nkv))
        elif r < 0.5:
            out.append(("ln", 0))
        else:
            out.append(("gemm", rnd.choice((8, 16, 32))))
    return out


def scan(stages: int, nkv: int, schedules: int, causal: bool = False, pre: int = 2,
         skipper_waits: bool = False) -> tuple[int, str | None]:
    """How many of ``schedules`` random schedules fail, and the first failure's message."""
    bad, first = 0, None
    for seed in range(schedules):
        try:
            run(tasks_for(random.Random(seed), nkv, causal), stages, min(pre, stages), seed, skipper_waits)
        except Violation as e:
            bad += 1
            first = first or str(e)
    return bad, first


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[3])
    ap.add_argument("--nkv", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    ap.add_argument("--schedules", type=int, default=150)
    ap.add_argument("--pre", type=int, default=2)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--skipper-waits", action="store_true", help="the candidate fix (run's docstring)")
    a = ap.parse_args(argv)
    print(f"failing schedules of {a.schedules} (pre {a.pre}{', causal' if a.causal else ''}"
          f"{', the skipper waits' if a.skipper_waits else ''})")
    for st in a.stages:
        for nkv in a.nkv:
            bad, first = scan(st, nkv, a.schedules, a.causal, a.pre, a.skipper_waits)
            print(f"stages {st} nkv {nkv}: {bad}" + (f"   first: {first}" if first else ""), flush=True)


if __name__ == "__main__":
    main()
