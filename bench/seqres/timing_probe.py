"""Why some timing jobs read slow on every other call (GPU only): time one seqres configuration in the timing
stage's pattern (``kernels.timing``: L2 flush, CUDA events around the call) under four conditions, interleaved round
by round (its own loop: two conditions run work between the flush and the start event):

- ``alone``: flush, call (the call before it on the stream is the same kernel);
- ``after_anchor``: an ``eager_sdpa`` call, flush, call (the odd positions of the timing stage's interleaving);
- ``after_anchor_fixed_y``: as ``after_anchor``, but the kernel writes a preallocated y (same address each call);
- ``after_anchor_sleep``: as ``after_anchor``, with a 200 µs GPU spin between the flush and the start event, so
  the host's launch latency cannot show in the measured interval.

    python -m bench.seqres.timing_probe 10 [--param k=v ...] [--rounds 60] [--no-gc] [--out DIR]

``--no-gc`` runs the rounds with Python's garbage collector disabled (a collection triggered by the anchor's
objects would otherwise land in whichever call allocates next).

Prints the median and p20/p80 per condition, summarised as the timing stage does (and writes them as JSON with
--out)."""
from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

import torch

from .aot_check import parse_params
from kernels import get_variant, load_case, make_input, make_weights
from kernels.seqres.host import launch
from kernels.timing import summarize


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--param", action="append", default=[], help="name=value (int/bool/str)")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--flush-mb", type=int, default=256)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-gc", action="store_true", help="disable Python's garbage collector while timing")
    a = ap.parse_args(argv)
    case = load_case(a.case)
    dev = torch.device("cuda")
    w = make_weights(case, device=dev)
    params = parse_params(a.param)
    params.setdefault("tune", [])
    v = get_variant("seqres")
    p = v.prepare(case, w, **params)
    anchor = get_variant("eager_sdpa")
    pa = anchor.prepare(case, w)
    x = make_input(case, 1.0, 0, device=dev)
    y_fixed = torch.empty_like(x)
    flush = torch.empty(a.flush_mb << 20, dtype=torch.int8, device=dev)
    cycles = int(200e-6 * torch.cuda.get_device_properties(dev).clock_rate * 1e3)  # clock_rate in kHz

    def timed(fn, pre=None, sleep=False):
        if pre is not None:
            pre()
        flush.zero_()
        if sleep:
            torch.cuda._sleep(cycles)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        return s, e

    run = lambda: v.run(p, x)                      # noqa: E731  (a fresh y per call, as the timing stage)
    run_fixed = lambda: launch(p, x, y_fixed)      # noqa: E731
    pre = lambda: anchor.run(pa, x)                # noqa: E731
    conds = {"alone": (run, None, False), "after_anchor": (run, pre, False),
             "after_anchor_fixed_y": (run_fixed, pre, False), "after_anchor_sleep": (run, pre, True)}
    for _ in range(10):  # warm-up
        for fn, pr, sl in conds.values():
            timed(fn, pr, sl)
    torch.cuda.synchronize()
    ev = {k: [] for k in conds}
    if a.no_gc:
        gc.collect()
        gc.disable()
    try:
        for r in range(a.rounds):
            for k in (list(conds) if r % 2 == 0 else list(conds)[::-1]):
                ev[k].append(timed(*conds[k]))
        torch.cuda.synchronize()
    finally:
        gc.enable()
    res = {k: summarize([s.elapsed_time(e) for s, e in es]) for k, es in ev.items()}
    for k, r in res.items():
        print(f"{case.name}{' no-gc' if a.no_gc else ''} {k:22s} median {r['median_ms']:.4f} ms  "
              f"p20 {r['p20_ms']:.4f}  p80 {r['p80_ms']:.4f}")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        tag = "_nogc" if a.no_gc else ""
        (Path(a.out) / f"timing_probe_{case.name}{tag}.json").write_text(json.dumps(
            {"case": case.name, "params": params, "no_gc": a.no_gc, "info": p.info, "results": res}, indent=1,
            default=str))


if __name__ == "__main__":
    main()
