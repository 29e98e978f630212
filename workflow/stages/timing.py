"""Timing stage: SPEC §6 protocol, the same for every variant.

Inputs and prepared weights resident on the device; warm-up of at least ``warmup_calls`` calls and
``warmup_ms``; L2 flushed before each timed call; CUDA events around the call only; ``reps`` timed
calls; median with p20/p80 (``kernels.timing``). The anchor peer is timed in the same process, interleaved
call by call, so a report can quote same-process ratios. Inputs rotate so no call can reuse an earlier result.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from kernels.timing import summarize, time_calls

from .common import log, sync


def warm_up(fn: Callable, xs: list, device, min_calls: int, min_ms: float) -> dict:
    """Call until at least ``min_calls`` calls and ``min_ms`` of wall time have passed."""
    calls, t0 = 0, time.perf_counter()
    while calls < min_calls or (time.perf_counter() - t0) * 1e3 < min_ms:
        fn(xs[calls % len(xs)])
        calls += 1
        if calls % 10 == 0:
            sync(device)
    sync(device)
    return {"calls": calls, "ms": (time.perf_counter() - t0) * 1e3}


def host_wall_ms(fn: Callable, xs: list, device, reps: int) -> float:
    """Median host time per call with a device-wide sync after each: sees work hidden on side streams."""
    ts = []
    for i in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn(xs[i % len(xs)])
        sync(device)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def queue_split(times_ms: list[float], drained: list, bound: float = 0.10) -> tuple[dict, str | None]:
    """The variant's calls split by the state of the GPU's queue when each was issued
    (``kernels.timing.queue_was_empty``): how many found it drained, the median of each group, and a flag when both
    groups have calls and their medians differ by more than ``bound`` (the host's launch path is timed when the queue
    has drained: a short launch after the anchor's host-bound eager calls pays it, one right after its own does not;
    docs/dag-results.md, "Results" 15)."""
    known = [(t, d) for t, d in zip(times_ms, drained) if d is not None]
    if not known:
        return {"drained_calls": None}, None
    dr = [t for t, d in known if d]
    qd = [t for t, d in known if not d]
    out = {"drained_calls": len(dr), "median_ms_drained": summarize(dr)["median_ms"] if dr else None,
           "median_ms_queued": summarize(qd)["median_ms"] if qd else None}
    flag = None
    if dr and qd and abs(out["median_ms_drained"] / out["median_ms_queued"] - 1) > bound:
        flag = (f"{len(dr)} of {len(known)} calls found the GPU's queue drained: median {out['median_ms_drained']:.3f} "
                f"ms against {out['median_ms_queued']:.3f} ms queued (a drained queue times the launch path too)")
    return out, flag


def job(ctx) -> dict:
    """The timing job for one case x variant (``ctx``: workflow.run.JobContext)."""
    from kernels import gate, get_variant, make_input, reference_forward
    from .common import read_clocks
    cfg, tc, device, case = ctx.cfg, ctx.cfg.timing, ctx.device, ctx.case
    xs = [make_input(case, float(tc.input_scale), int(tc.input_seed) + i, device=device)
          for i in range(int(tc.rotate_inputs))]
    fns = {"variant": lambda x: ctx.variant.run(ctx.prepared, x)}
    reps = {"variant": int(tc.reps)}
    anchor_name = tc.anchor
    anchor_result = None
    if anchor_name and anchor_name != ctx.variant_impl:
        av = get_variant(anchor_name)
        try:
            ap = av.prepare(case, ctx.weights)
            fns["anchor"] = lambda x: av.run(ap, x)
            reps["anchor"] = int(tc.anchor_reps)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:  # the anchor cannot run here
            anchor_result = {"name": anchor_name, "status": "error", "reason": str(e)[:500]}
    clocks_before = read_clocks()
    warm = {}
    for name, fn in fns.items():
        log(f"warm-up {name} ({'anchor ' + anchor_name if name == 'anchor' else ctx.variant.name})")
        warm[name] = warm_up(fn, xs, device, int(tc.warmup_calls), float(tc.warmup_ms))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    log(f"timing {reps} calls, interleaved, L2 flush {tc.flush_l2_mb} MB")
    t0, last = time.time(), {}

    def progress(i, n):
        if (i + 1) % max(1, n // 5) == 0:
            log(f"  timed {i + 1}/{n} calls [{time.time() - t0:.1f}s]")
    drained = {}
    times = time_calls(fns, xs, reps, int(tc.flush_l2_mb) << 20, device, outputs=last, progress=progress,
                       drained=drained)
    sync(device)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    clocks_after = read_clocks()
    stats = summarize(times["variant"])
    # a variant that hides work on a side stream looks fast to events on the current stream
    wall = host_wall_ms(fns["variant"], xs, device, int(tc.wall_reps))
    flags = []
    if device.type == "cuda" and stats["median_ms"] < float(tc.wall_ratio_bound) * wall - 0.05:
        flags.append(f"event median {stats['median_ms']:.3f} ms << host wall {wall:.3f} ms per call: "
                     "work outside the current stream?")
    queue, qflag = queue_split(times["variant"], drained["variant"])
    if qflag:
        flags.append(qflag)
    drift = None
    if clocks_before and clocks_after and clocks_before.get("sm_mhz") and clocks_after.get("sm_mhz"):
        drift = abs(clocks_after["sm_mhz"] - clocks_before["sm_mhz"])
        if drift > float(tc.clock_drift_mhz):
            flags.append(f"SM clock moved {drift:.0f} MHz during the run (bound {tc.clock_drift_mhz})")
    # the timed output, checked once more against the reference of its own input
    last_i, last_y = last["variant"]
    ref = reference_forward(case, ctx.weights, xs[last_i])
    post = gate(last_y, ref, float(cfg.gate.atol), float(cfg.gate.rtol)).to_dict()
    if "anchor" in times:
        a = summarize(times["anchor"])
        anchor_result = {"name": anchor_name, "status": "ok", **a, "warmup": warm["anchor"]}
    elif anchor_name == ctx.variant_impl:
        anchor_result = {"name": anchor_name, "status": "self", **stats}
    ratio = stats["median_ms"] / anchor_result["median_ms"] if anchor_result and "median_ms" in anchor_result else None
    sec = stats["median_ms"] / 1e3
    return {
        **stats,
        "times_ms": times["variant"],
        "queue_drained": drained["variant"],
        **queue,
        "warmup": warm["variant"],
        "anchor": anchor_result,
        "anchor_ratio": ratio,
        "host_wall_ms": wall,
        "post_check": post,
        "passed_post_check": post["passed"],
        "peak_bytes": peak,
        "tflops": case.flops / sec / 1e12,
        "gbps": case.min_bytes / sec / 1e9,
        "clocks_before": clocks_before,
        "clocks_after": clocks_after,
        "clock_drift_mhz": drift,
        "flags": flags,
        "protocol": {k: tc[k] for k in tc},
    }
