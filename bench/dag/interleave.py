"""Does a `dag` forward take longer right after other work? A lab probe for the alternation of docs/dag-results.md
"Results" 14: in the pipeline's timing jobs (SPEC §6: the variant and the `eager_sdpa` anchor interleaved, the order
reversed every other round, L2 flushed before each call) case 4's `dag` calls at `f7ebadc` alternated 0.437 / 0.557 ms
and case 3's at `04c117c` 0.325 / 0.430 ms: the slow calls were those that followed the anchor's call.

For each case this times `dag` (the committed tuned file applied, as the pipeline runs it), every call after the same
256 MB flush (``kernels.timing.Timer``), in sequences that separate the candidate causes:

  alone        dag after dag (the flush between)
  protocol     the timing stage's interleave with the anchor (``time_calls``): the dag calls by round parity
               (``protocol_odd``: the calls right after an anchor call; ``protocol_even``: right after a dag call)
  after_anchor anchor, synchronize, dag
  after_sweep  a write over ``--sweep-mb`` of memory (more pages than the flush touches), synchronize, dag
  after_idle   synchronize, ``--idle-ms`` of host sleep (clocks and power may drop), dag
  after_alloc  a fresh ``--sweep-mb`` allocation written once, dag (the allocator's address space moves)

and, with ``--trace``, one traced launch alone and one after the anchor: ``host.task_profile``'s kernel time, busy
fraction and per task kind mean work and wait, so the extra time can be put on a task kind or on the waits; then
(``split``) the traced kernel under the timed calls' events in the sequences alone, after idle, after the anchor and
after idle with a spin kernel keeping the GPU busy: the event time against the task loop's own span, so the extra time
is placed inside the loop (slower tasks) or outside it (launch, start, tail), with ``run``'s host time per call; and
(``clock_mhz``) the SM clock right after a dag call, a synchronize, an idle period and the anchor.

    python -m bench.dag.interleave --out $OUT --cases 4 3 2 12 [--reps 40] [--trace]

One JSON per case under ``--out`` and a table printed last (medians in ms). On the CPU (``--cpu``, under
``TRITON_INTERPRET=1``, e.g. ``--cases smoke2 --reps 2``) it runs the same sequences with wall-clock times: a test of the
probe, not a measurement.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels import get_variant, load_case, make_input, make_weights, tuning
from kernels.common.tl_helpers import globaltimer
from kernels.dag import host
from kernels.timing import Timer, summarize, time_calls
from workflow.stages.common import sync as _sync

SEQUENCES = ("alone", "protocol_even", "protocol_odd", "after_anchor", "after_sweep", "after_idle", "after_alloc")


def _timed(timer: Timer, before, fn, x, reps: int) -> list[float]:
    """``reps`` times: ``before()`` (untimed, synchronized), then ``fn(x)`` timed by ``timer``."""
    toks = []
    for _ in range(reps):
        if before is not None:
            before()
            _sync(timer.device)
        tok, _ = timer(fn, x)
        toks.append(tok)
    _sync(timer.device)
    return [Timer.elapsed(t) for t in toks]


def probe_case(case, args) -> dict:
    dev = torch.device("cpu" if args.cpu else "cuda")
    w = make_weights(case, device=dev)
    xs = [make_input(case, 1.0, 1000 + i, device=dev) for i in range(3)]
    dag, anchor = get_variant("dag"), get_variant("eager_sdpa")
    p, ap = dag.prepare(case, w), anchor.prepare(case, w)
    f = lambda x: dag.run(p, x)           # noqa: E731
    a = lambda x: anchor.run(ap, x)       # noqa: E731
    for _ in range(args.warmup):
        f(xs[0]), a(xs[0])
    _sync(dev)
    timer = Timer(dev, args.flush_mb << 20)
    out = {"case": case.name, "params": {k: v for k, v in p.params.items() if isinstance(v, (int, float, str))},
           "reps": args.reps, "times_ms": {}}
    t = out["times_ms"]
    t["alone"] = _timed(timer, None, f, xs[0], args.reps)
    drained = {}
    prot = time_calls({"dag": f, "anchor": a}, xs, 2 * args.reps, args.flush_mb << 20, dev, drained=drained)
    t["protocol_even"], t["protocol_odd"] = prot["dag"][0::2], prot["dag"][1::2]
    # calls that found the GPU's queue drained (kernels.timing.queue_was_empty), by parity
    out["protocol_drained"] = {"even": drained["dag"][0::2].count(True), "odd": drained["dag"][1::2].count(True)}
    # the anchor's own calls by parity too: even rounds run it right after a dag call, odd ones after its own
    out["anchor_ms"] = {"after_dag": prot["anchor"][0::2], "after_anchor": prot["anchor"][1::2]}
    t["after_anchor"] = _timed(timer, lambda: a(xs[1]), f, xs[0], args.reps)
    sweep = torch.empty(args.sweep_mb << 20, dtype=torch.int8, device=dev)
    t["after_sweep"] = _timed(timer, lambda: sweep.fill_(1), f, xs[0], args.reps)
    del sweep
    t["after_idle"] = _timed(timer, lambda: time.sleep(args.idle_ms / 1e3), f, xs[0], args.reps)
    keep = []

    def alloc():
        keep.append(torch.ones(args.sweep_mb << 20, dtype=torch.int8, device=dev))
        if len(keep) > 2:
            keep.pop(0)
    t["after_alloc"] = _timed(timer, alloc, f, xs[0], args.reps)
    keep.clear()
    out["summary"] = {k: summarize(v) for k, v in t.items()}
    if args.trace and dev.type == "cuda":
        params = {k: v for k, v in p.params.items() if k not in tuning.TUNING_KEYS}
        pt = dag.prepare(case, w, **dict(params, trace=True, tune="off"))
        prof = {}
        for name, before in (("alone", lambda: dag.run(pt, xs[0])), ("after_anchor", lambda: a(xs[1]))):
            for _ in range(3):
                before()
                _sync(dev)
                dag.run(pt, xs[0])
                _sync(dev)
            host.check(pt)
            pr = host.task_profile(pt)
            prof[name] = {"kernel_us": pr["kernel_us"], "busy": pr["busy"],
                          "kinds": {k: {m: d[m] for m in ("n", "work_mean", "wait_mean", "signal_mean")}
                                    for k, d in pr["kinds"].items()}}
        out["trace"] = prof
        out["split"] = split_launch(pt, dag, a, xs, timer, args)
        out["clock_mhz"] = clock_states(f, a, xs, dev, args)
        out["drained"] = drained_launch(case, w, p, f, xs, timer, args)
    return out


def _spin_cycles(args) -> int:
    """Cycles of ``torch.cuda._sleep`` for ``--spin-us`` at the H200's top SM clock (1980 MHz)."""
    return int(args.spin_us * 1980)


def drained_launch(case, w, p, f, xs, timer: Timer, args) -> dict:
    """Event time (µs, median of ``--split-reps``) of one call with the GPU's queue full (``busy``: a spin kernel
    ahead of it) and drained (``drained``: synchronize, ``--idle-ms`` of host sleep), for: ``dag.run``; the compiled
    binary launched bare (arguments resolved beforehand, no input check, no error bookkeeping); ``hybrid`` (a CUDA
    graph replay); one tiny kernel (``x * 1``). With the host time (µs, perf_counter around the timer: the flush, the
    events and the call) in both states: what of a drained call's extra time is the host's launch path, and what every
    launch pays."""
    dev = timer.device
    hyb = get_variant("hybrid")
    hp = hyb.prepare(case, w)
    y = torch.empty_like(xs[0])
    args_bare = list(host.direct_args(p, xs[0], y))

    def bare(x):
        p.epoch += 1
        args_bare[host._EPOCH] = p.epoch
        p.runner(*args_bare)
        return y
    calls = {"dag.run": f, "dag_bare": bare,
             "hybrid": lambda x: hyb.run(hp, x), "tiny": lambda x: x * 1}
    cycles = _spin_cycles(args)
    out = {}
    for name, fn in calls.items():
        for _ in range(3):
            fn(xs[0])
        rec = {}
        for state in ("busy", "drained"):
            ev, hst = [], []
            for _ in range(args.split_reps):
                _sync(dev)
                if state == "drained":
                    time.sleep(args.idle_ms / 1e3)
                else:
                    torch.cuda._sleep(cycles)
                h0 = time.perf_counter()
                tok, _ = timer(fn, xs[0])
                hst.append((time.perf_counter() - h0) * 1e6)
                _sync(dev)
                ev.append(Timer.elapsed(tok) * 1e3)
            rec[state + "_event_us"] = summarize(ev)["median_ms"]
            rec[state + "_host_us"] = summarize(hst)["median_ms"]
        out[name] = rec
    host.check(p)
    return out


def split_launch(pt, dag, a, xs, timer: Timer, args) -> dict:
    """Where a slow call's extra time lies: the traced kernel under the same events as the timed calls, per sequence
    (``--split-reps`` calls each): the event time, the task loop's own span (first ticket to last task done,
    ``kernel_us``) and their difference (launch, the programs' start and the tail: outside the task loop). ``spin``:
    the idle sequence with the GPU kept busy by a spin kernel (``torch.cuda._sleep``) of ``--spin-us`` before the
    flush, so a drained queue alone (host time exposed) and a clock drop can be told apart."""
    dev = timer.device
    cycles = _spin_cycles(args)
    befores = {"alone": None, "after_idle": lambda: time.sleep(args.idle_ms / 1e3),
               "after_anchor": lambda: a(xs[1]),
               "after_idle_spin": lambda: (time.sleep(args.idle_ms / 1e3), torch.cuda._sleep(cycles))}
    out = {}
    for name, before in befores.items():
        ev, loop = [], []
        for _ in range(args.split_reps):
            if before is not None:
                before()
                if name != "after_idle_spin":
                    _sync(dev)
            tok, _ = timer(lambda x: dag.run(pt, x), xs[0])
            _sync(dev)
            ev.append(Timer.elapsed(tok) * 1e3)
            loop.append(host.task_profile(pt)["kernel_us"])
        host.check(pt)
        out[name] = {"event_us": summarize(ev)["median_ms"], "loop_us": summarize(loop)["median_ms"],
                     "outside_us": summarize([e - k for e, k in zip(ev, loop)])["median_ms"]}
    # host time of one run() call while the GPU is busy (no sync in between)
    run = lambda: dag.run(pt, xs[0])  # noqa: E731
    for _ in range(5):
        run()
    t0 = time.perf_counter()
    for _ in range(50):
        run()
    out["host_us_per_run"] = (time.perf_counter() - t0) / 50 * 1e6
    _sync(dev)
    return out


@triton.jit
def _clock_probe(out_ptr, n):
    """One program: %clock64 and %globaltimer before and after ``n`` dependent FMAs (the SM clock in between)."""
    z = tl.program_id(0)
    c0 = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [z], dtype=tl.int64, is_pure=False, pack=1)
    g0 = globaltimer(z)
    acc = z.to(tl.float32)
    for _ in range(n):
        acc = acc * 0.999 + 1.0
    c1 = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [z], dtype=tl.int64, is_pure=False, pack=1)
    g1 = globaltimer(z)
    tl.store(out_ptr, c1 - c0)
    tl.store(out_ptr + 1, g1 - g0)
    tl.store(out_ptr + 2, acc.to(tl.int64))


def clock_states(f, a, xs, dev, args) -> dict:
    """The SM clock (MHz: clock64 ticks over globaltimer ns across ~20 µs of FMAs) right after: a dag call (the GPU
    busy), a synchronize, ``--idle-ms`` of host sleep, the anchor and a synchronize; five reads each."""
    buf = torch.zeros(3, dtype=torch.int64, device=dev)
    n = 20000
    probe = lambda: _clock_probe[(1,)](buf, n)  # noqa: E731
    probe()
    _sync(dev)
    states = {"busy": lambda: f(xs[0]), "after_sync": lambda: (f(xs[0]), _sync(dev)),
              "after_idle": lambda: (_sync(dev), time.sleep(args.idle_ms / 1e3)),
              "after_anchor": lambda: (a(xs[1]), _sync(dev))}
    out = {}
    for name, before in states.items():
        mhz = []
        for _ in range(5):
            before()
            probe()
            _sync(dev)
            clk, ns, _ = buf.tolist()
            mhz.append(round(1e3 * clk / max(ns, 1), 1))
        out[name] = mhz
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", nargs="+", default=["4", "3", "2", "12"])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--sweep-mb", type=int, default=2048)
    ap.add_argument("--idle-ms", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--flush-mb", type=int, default=256)
    ap.add_argument("--trace", action="store_true",
                    help="also: one traced launch alone and after the anchor, the traced kernel under the timed "
                         "calls' events per sequence (--split-reps) and the SM clock after each state (GPU)")
    ap.add_argument("--split-reps", type=int, default=15)
    ap.add_argument("--spin-us", type=float, default=2000.0)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (a test of the probe: TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print("bench.dag.interleave: no CUDA GPU here; it times the dag kernel on the GPU (--cpu runs the sequences on "
              "the CPU under TRITON_INTERPRET=1, as a test)", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = []
    for c in args.cases:
        case = load_case(c)
        t0 = time.time()
        rec = probe_case(case, args)
        rec["wall_s"] = round(time.time() - t0, 1)
        tmp = Path(args.out) / f".{case.name}.json.tmp"
        tmp.write_text(json.dumps(rec, indent=1))
        tmp.replace(Path(args.out) / f"{case.name}.json")
        rows.append((case.name, {k: rec["summary"][k]["median_ms"] for k in SEQUENCES}))
        print(f"{case.name}: " + " ".join(f"{k}={v:.4f}" for k, v in rows[-1][1].items()) + f" [{rec['wall_s']}s]",
              flush=True)
        for key in ("split", "clock_mhz", "drained"):
            if key in rec:
                print(f"  {key}: {json.dumps(rec[key])}", flush=True)
    print("| case | " + " | ".join(SEQUENCES) + " |\n|---|" + "---:|" * len(SEQUENCES))
    for name, med in rows:
        print(f"| {name} | " + " | ".join(f"{med[k]:.4f}" for k in SEQUENCES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
