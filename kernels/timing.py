"""Timing calls on a device, the one way the project times anything (SPEC §6): the L2 cache flushed before each
timed call, CUDA events around the call only, the calls of several functions interleaved round by round (the
order reversed every other round), median with p20/p80. Without CUDA, ``time.perf_counter`` around the call.

    times = time_calls({"a": fa, "b": fb}, inputs=[x0, x1], reps=50, device=x0.device)
    summarize(times["a"])   # {"median_ms", "p20_ms", "p80_ms", "min_ms", "n"}

Used by the timing stage (``workflow/stages/timing.py``), by the autotuning in ``prepare`` and by ``bench/``.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

FLUSH_BYTES = 256 << 20  # more than the L2 of any Hopper part (H100/H200: 50 MB)


def quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` with linear interpolation between order statistics."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(times_ms: list[float]) -> dict:
    """Median, p20, p80, min and count of ``times_ms``."""
    return {"median_ms": statistics.median(times_ms), "p20_ms": quantile(times_ms, 0.2),
            "p80_ms": quantile(times_ms, 0.8), "min_ms": min(times_ms), "n": len(times_ms)}


class Timer:
    """One timed call: flush L2 (``flush_bytes`` > 0, CUDA), record events around the call only; CPU:
    perf_counter. ``Timer.elapsed`` turns what a call returned into milliseconds (after a synchronize)."""

    def __init__(self, device, flush_bytes: int = FLUSH_BYTES):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.flush = torch.empty(flush_bytes, dtype=torch.int8, device=self.device) \
            if self.cuda and flush_bytes > 0 else None

    def __call__(self, fn: Callable, *args):
        """(a token for ``elapsed``, fn's output)."""
        if self.flush is not None:
            self.flush.zero_()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args)
            end.record()
            return (start, end), out
        t0 = time.perf_counter()
        out = fn(*args)
        return (time.perf_counter() - t0) * 1e3, out

    @staticmethod
    def elapsed(token) -> float:
        return token[0].elapsed_time(token[1]) if isinstance(token, tuple) else token


def queue_was_empty(prev_token) -> bool | None:
    """Had the GPU finished everything issued so far (the previous timed call's end event complete) when the next
    call is issued? Then the flush, the start event and the call's own launch reach an idle GPU as the host issues
    them, and the host's time to the call's first kernel is timed too (docs/dag-results.md, "Results" 15). None on the
    CPU (``prev_token`` a float) and for the first call."""
    if isinstance(prev_token, tuple):
        return bool(prev_token[1].query())
    return None


def time_calls(fns: dict[str, Callable], inputs: list | None = None, reps: int | dict[str, int] = 50,
               flush_bytes: int = FLUSH_BYTES, device=None, outputs: dict | None = None,
               progress: Callable[[int, int], None] | None = None, warmup: int = 0,
               drained: dict | None = None) -> dict[str, list[float]]:
    """Time each callable of ``fns`` (name -> fn(input)) ``reps`` times (an int, or per name), interleaved: round i
    calls every function once, in the order of ``fns`` on even rounds and reversed on odd ones, the k-th function
    on ``inputs[(i + k) % len(inputs)]`` (inputs rotate, so no call can return an earlier call's result; ``None``:
    each fn is called with no argument). Returns {name: [ms per call]}. ``outputs``, when given, receives
    {name: (input index, output)} of each function's last call; ``drained``, when given, {name: [``queue_was_empty``
    before each call]}; ``progress(i, n)`` is called after each round.
    ``device`` defaults to the first input's device (else CUDA when available). ``warmup``: untimed calls of each
    function first (the timing stage warms up by time as well, ``workflow/stages/timing.py``)."""
    names = list(fns)
    want = {k: int(reps[k] if isinstance(reps, dict) else reps) for k in names}
    if device is None:
        first = inputs[0] if inputs else None
        device = first.device if isinstance(first, torch.Tensor) else ("cuda" if torch.cuda.is_available() else "cpu")
    timer = Timer(device, flush_bytes)
    for _ in range(warmup):
        for name in names:
            fns[name]() if inputs is None else fns[name](inputs[0])
    tokens = {k: [] for k in names}
    if drained is not None:
        drained.update({k: [] for k in names})
    prev = None
    n = max(want.values(), default=0)
    for i in range(n):
        for name in (names if i % 2 == 0 else names[::-1]):
            if i >= want[name]:
                continue
            if drained is not None:
                drained[name].append(queue_was_empty(prev))
            if inputs is None:
                tok, out = timer(fns[name])
                xi = None
            else:
                xi = (i + names.index(name)) % len(inputs)
                tok, out = timer(fns[name], inputs[xi])
            tokens[name].append(tok)
            prev = tok
            if outputs is not None:
                outputs[name] = (xi, out)
        if progress is not None:
            progress(i, n)
    if timer.cuda:
        torch.cuda.synchronize(timer.device)
    return {k: [Timer.elapsed(t) for t in v] for k, v in tokens.items()}


def median_ms(fn: Callable, reps: int = 100, warmup: int = 10, flush_bytes: int = FLUSH_BYTES, device=None) -> float:
    """Median milliseconds of ``fn()`` (``time_calls`` with one function and no inputs)."""
    return statistics.median(time_calls({"fn": fn}, None, reps, flush_bytes, device, warmup=warmup)["fn"])
