"""Scheduler simulator for the ``dag`` task graph (``graph.py``), on the CPU.

Two models of N persistent programs running a graph:

* ``interleave``: no clock. At every step one program, picked at random among those that can act, takes one
  action (take a task, finish the task it runs; a program waiting for counters can only start once they are
  complete). It checks the protocol: a task never starts before every task it waits for has finished, and the
  run never deadlocks (some program can always act until every task is done), for any N >= 1.
* ``timed``: task durations from the graph's cost model (µs) times a random factor (log-normal, ``jitter``), a
  cost per ticket (``pop_us``: one atomic on the queue head) and a delay from a producer's signal to its
  consumer's start (``signal_us``). Reports the makespan, the critical path and the idle fraction.

Both run either task-assignment policy of the kernel: ``queue`` (one global atomic ticket over the queue order:
the next free program takes the next task) or ``static`` (per-program lists fixed by prepare from a list schedule
of the cost model; program k runs its list in order). ``timed`` also runs ``window``, a policy the kernel does not
have (a program whose tickets are not ready takes another, up to ``window``, and runs whichever is ready first),
and ``ready`` (event-driven: the producer that completes a task's last counter pushes the task on a ready queue,
``signal_us`` later it can be popped, and a free program pops the earliest-queued ready task, paying ``pop_us``; no
program ever holds a task that is not ready), to price them before they are built (docs/dag.md, "Open").

    python -m bench.dag.simulate 2 3 4 12 [--param split_k_o=4 ...] [--programs 132] [--seeds 8]
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from .graph import Graph

POLICIES = ("queue", "static")   # the kernel's (``queue`` in config/variant/dag.yaml); ``timed`` also models
TIMED_POLICIES = POLICIES + ("window", "ready")  # not in the kernel: ``window`` (a program holds up to ``window``
# tickets) and ``ready`` (the last producer of a task pushes it on a ready queue; programs pop ready tasks only)


class Deadlock(RuntimeError):
    pass


def static_lists(g: Graph, n: int) -> list[list[int]]:
    """Per-program task lists (queue indices, each list in queue order): task i goes to the program that is
    free first in a list schedule of the cost model that takes the tasks in queue order (the kernel's
    ``queue: static``). Every list is a subsequence of the queue order, so the earliest unfinished task of the
    whole run is always at the head of its program's list: no deadlock."""
    free = [(0.0, k) for k in range(n)]
    heapq.heapify(free)
    finish = [0.0] * len(g.tasks)
    lists: list[list[int]] = [[] for _ in range(n)]
    for i, t in enumerate(g.tasks):
        t_free, k = heapq.heappop(free)
        start = max([t_free] + [finish[p] for p in g.producers[i]])
        finish[i] = start + t.cost
        lists[k].append(i)
        heapq.heappush(free, (finish[i], k))
    return lists


def interleave(g: Graph, n: int, policy: str = "queue", seed: int = 0) -> int:
    """Run ``g`` on ``n`` programs, one random action at a time (see the module docstring). Returns the number
    of steps; raises ``Deadlock`` or ``AssertionError`` (a task started before a producer finished)."""
    rng = random.Random(seed)
    T = len(g.tasks)
    done = [False] * T
    lists = static_lists(g, n) if policy == "static" else None
    pos = [0] * n                  # static: next index into lists[k]
    head = 0                       # queue: next ticket
    state: list = [None] * n       # None: idle; ("wait", i); ("run", i)
    finished_programs = [False] * n
    n_done = steps = 0
    while n_done < T:
        actions = []
        for k in range(n):
            s = state[k]
            if finished_programs[k]:
                continue
            if s is None:
                actions.append(k)  # take a ticket / the next list entry
            elif s[0] == "wait" and all(done[p] for p in g.producers[s[1]]):
                actions.append(k)
            elif s[0] == "run":
                actions.append(k)
        if not actions:
            waiting = [(k, g.tasks[s[1]].name) for k, s in enumerate(state) if s]
            raise Deadlock(f"{policy} on {n} programs: no program can act, {T - n_done} tasks left; "
                           f"waiting: {waiting[:4]}")
        k = rng.choice(actions)
        s = state[k]
        if s is None:
            if policy == "queue":
                i, head = head, head + 1
            else:
                i = lists[k][pos[k]] if pos[k] < len(lists[k]) else T
                pos[k] += 1
            if i >= T:
                finished_programs[k] = True
            else:
                state[k] = ("wait", i)
        elif s[0] == "wait":
            i = s[1]
            assert all(done[p] for p in g.producers[i]), f"{g.tasks[i].name} started early"
            state[k] = ("run", i)
        else:
            done[s[1]] = True
            n_done += 1
            state[k] = None
        steps += 1
    return steps


@dataclass
class TimedResult:
    makespan_us: float
    critical_path_us: float
    work_us: float
    idle_fraction: float       # 1 - work / (programs x makespan)
    programs: int
    policy: str


def _consumers(g: Graph) -> list[list[int]]:
    """Per task, the tasks that wait for it (``g.producers`` inverted)."""
    cons: list[list[int]] = [[] for _ in g.tasks]
    for i, ps in enumerate(g.producers):
        for p in ps:
            cons[p].append(i)
    return cons


def _window_schedule(g: Graph, n: int, window: int, dur: list, pop_us: float, signal_us: float):
    """``window`` policy: a free program with no ready ticket in hand takes the next ticket of the queue, up to
    ``window`` held at once, and runs whichever of its tickets is ready first (the lowest on a tie). The lowest
    unfinished ticket can always run once its producers, all lower tickets, are done: no deadlock. Event-driven:
    a program with nothing ready sleeps until the earliest known ready time of a task it holds."""
    T = len(g.tasks)
    prods = g.producers
    cons = _consumers(g)
    finish: list = [None] * T
    start_at = [0.0] * T
    unstarted = [len(ps) for ps in prods]   # producers not started yet (their finish unknown)
    held: list[list[int]] = [[] for _ in range(n)]
    holder = [-1] * T
    busy_until = [0.0] * n
    wake = [0.0] * n                        # the one valid pending event of each program (None: none)
    head = 0
    ev = [(0.0, k) for k in range(n)]
    heapq.heapify(ev)

    def ready_at(i):
        return max((finish[p] + signal_us for p in prods[i]), default=0.0) if unstarted[i] == 0 else None

    def schedule(k, at):
        if wake[k] is None or at < wake[k]:
            wake[k] = at
            heapq.heappush(ev, (at, k))

    while ev:
        t, k = heapq.heappop(ev)
        if wake[k] != t:
            continue  # superseded by an earlier wake-up
        wake[k] = None
        while True:
            known = [(r, i) for i in held[k] for r in (ready_at(i),) if r is not None]
            now = [i for r, i in known if r <= t]
            if now or len(held[k]) >= window or head >= T:
                break
            held[k].append(head)
            holder[head] = k
            head += 1
            t += pop_us
        if now:
            i = min(now)
            held[k].remove(i)
            start_at[i], finish[i] = t, t + dur[i]
            busy_until[k] = finish[i]
            schedule(k, finish[i])
            for c in cons[i]:
                unstarted[c] -= 1
                h = holder[c]
                if unstarted[c] == 0 and h >= 0 and h != k and c in held[h]:
                    schedule(h, max(busy_until[h], t, ready_at(c)))
        elif known:
            schedule(k, min(r for r, _ in known))
        # else: nothing known yet; a producer's start schedules this program
    if any(f is None for f in finish):
        raise Deadlock(f"window {window} on {n} programs: {sum(f is None for f in finish)} tasks never ran")
    return start_at, finish


def _ready_schedule(g: Graph, n: int, dur: list, pop_us: float, signal_us: float):
    """``ready`` policy (see the module docstring): greedy list scheduling at run time, priority = queue position."""
    T = len(g.tasks)
    cons = _consumers(g)
    missing = [len(ps) for ps in g.producers]
    start_at, finish = [0.0] * T, [None] * T
    ev = [(0.0, 0, i) for i in range(T) if missing[i] == 0]   # (time, 0: ready, task) / (time, 1: free, program)
    ev += [(0.0, 1, k) for k in range(n)]
    heapq.heapify(ev)
    avail: list[int] = []    # ready tasks (queue positions)
    idle: list[int] = []     # free programs
    while ev:
        t, kind, x = heapq.heappop(ev)
        if kind == 0:
            heapq.heappush(avail, x)
        else:
            idle.append(x)
        while avail and idle:
            i, k = heapq.heappop(avail), idle.pop()
            start_at[i] = t + pop_us
            finish[i] = start_at[i] + dur[i]
            heapq.heappush(ev, (finish[i], 1, k))
            for c in cons[i]:
                missing[c] -= 1
                if missing[c] == 0:  # every producer started: its finish is known
                    heapq.heappush(ev, (max(finish[p] for p in g.producers[c]) + signal_us, 0, c))
    if any(f is None for f in finish):
        raise Deadlock(f"ready on {n} programs: {sum(f is None for f in finish)} tasks never ran")
    return start_at, finish


def timed(g: Graph, n: int, policy: str = "queue", jitter: float = 0.0, pop_us: float = 0.7,
          signal_us: float = 0.7, seed: int = 0, window: int = 2) -> TimedResult:
    """Makespan of ``g`` on ``n`` programs with the cost model (see the module docstring)."""
    rng = random.Random(seed)
    T = len(g.tasks)
    dur = [t.cost * (rng.lognormvariate(0.0, jitter) if jitter > 0 else 1.0) for t in g.tasks]
    finish = [None] * T
    start_at = [0.0] * T
    if policy == "queue":
        free = [(0.0, k) for k in range(n)]
        heapq.heapify(free)
        for i in range(T):  # the ticket order is the queue order; the first free program takes the next one
            t_free, k = heapq.heappop(free)
            start = max([t_free + pop_us] + [finish[p] + signal_us for p in g.producers[i]])
            start_at[i], finish[i] = start, start + dur[i]
            heapq.heappush(free, (finish[i], k))
    elif policy == "window":
        start_at, finish = _window_schedule(g, n, window, dur, pop_us, signal_us)
    elif policy == "ready":
        start_at, finish = _ready_schedule(g, n, dur, pop_us, signal_us)
    elif policy == "static":
        lists = static_lists(g, n)
        pos = [0] * n
        t_free = [0.0] * n
        left = T
        while left:
            progressed = False
            for k in range(n):
                while pos[k] < len(lists[k]):
                    i = lists[k][pos[k]]
                    if any(finish[p] is None for p in g.producers[i]):
                        break
                    start = max([t_free[k] + pop_us / 4] + [finish[p] + signal_us for p in g.producers[i]])
                    start_at[i], finish[i] = start, start + dur[i]
                    t_free[k] = finish[i]
                    pos[k] += 1
                    left -= 1
                    progressed = True
            if not progressed:
                raise Deadlock(f"static lists on {n} programs deadlock with {left} tasks left")
    else:
        raise ValueError(f"policy {policy!r}: one of {TIMED_POLICIES}")
    for i in range(T):
        assert all(finish[p] <= start_at[i] for p in g.producers[i]), f"{g.tasks[i].name} started early"
    makespan = max(finish, default=0.0)
    work = sum(dur)
    return TimedResult(makespan, g.critical_path_us(), work, 1.0 - work / max(1e-9, n * makespan), n, policy)


def report(g: Graph, n: int, seeds: int = 8, jitter: float = 0.25, pop_us: float = 0.7,
           signal_us: float = 0.7) -> dict:
    """Makespan (mean over ``seeds`` jittered runs) and idle fraction per policy, plus the graph's figures."""
    from .graph import summary
    out = dict(summary(g, n))
    for policy in POLICIES:
        runs = [timed(g, n, policy, jitter if s else 0.0, pop_us, signal_us, seed=s) for s in range(seeds)]
        out[policy] = dict(makespan_us=round(runs[0].makespan_us, 1),
                           jittered_us=round(sum(r.makespan_us for r in runs[1:]) / max(1, seeds - 1), 1),
                           idle=round(runs[0].idle_fraction, 3))
    return out
