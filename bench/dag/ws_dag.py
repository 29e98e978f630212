"""The lab harness of the dag variant's ``form: ws`` (``kernels/dag/ws_kernel.py``: the forward pass as ONE
warp-specialized Gluon persistent kernel, docs/dag-results.md "Results" 19; its module docstring describes the
partitions, the memory ordering and the launch): run it beside today's ``@triton.jit`` megakernel (``form: tl``) on the
same input and buffers, compare every buffer, check each task kind, gate and time both. Lab code; GPU only to run (Gluon
has no interpreter), compiled for sm_90a by the CPU tests.

``WsDag`` is the product's ``WsRunner`` on a ``DagPrepared`` of ``form: tl`` (``kernels.dag.host.prepare``) with its
own queue head, counters, error word, trace and epoch (its grid, one CTA per SM, differs from today's two per SM, and
the epoch arithmetic depends on the grid), so both kernels run one graph on one set of buffers. The product path
(``host.prepare(..., form="ws")``: the runner on the prepared counters, compiled at prepare) is timed beside them
(the ``ws_host`` record).

GPU harness (one process per case, so a hung or faulted kernel takes only its own case down):

    python -m bench.dag.ws_dag --cases 2 3 4 12 --out DIR [--trace] [--stages 4] [--jit-launch] [--param name=value ...]

(``--stages``: the ring slots of the lab instance and ``ws_stages`` of the product path; ``--param`` is repeatable and
reaches both kernels' ``prepare``: e.g. the four ``block_n_*=128`` with ``--stages 3`` run the WS kernel's 64 × 128
GEMM tiles beside today's kernel at the same tiling)

per case: ``prepare`` today's dag variant (``tune: off``: the defaults, so both kernels run one graph and one tiling;
``--param`` adds parameters for both), run today's kernel and the WS kernel on the same input after zeroing every
intermediate buffer, compare y and every buffer (r, ln1, att, ln2, f, q / k / v of every layer; ``buffers_vs_tl``),
check each kind of the last layer in isolation against float64 products of the launch's own operands (``kind_checks``:
qkv, attn, ffn1, lnf, ffn2+ln2, oproj+ln1 — which kind is wrong), the gate at the SPEC scales and seeds for both
forms, then time both (CUDA events around back-to-back launches, median of rounds); one JSON line per (case, form)
and DIR/ws_dag.json written atomically after each case. The WS kernel's first launch runs with a short
``--check-spin``: a dependency wait that times out is reported (``wait_timeout``: the count and the last task, and
the incomplete counters by stage); a launch that does not finish within ``--hang-s`` (an mbarrier deadlock cannot time
out) is reported with the queue head and the incomplete counters, read on a side stream while it runs, and its
process exits. Without a GPU:

    python -m bench.dag.ws_dag --compile [--cases 2 12] [--stages 4] [--trace] [--param name=value ...]

compiles for sm_90a (``GluonASTSource``, ``GPUTarget("cuda", 90, 32)``) on each case's meta and prints warps, shared
memory, registers / spills and whether ptxas serialized the wgmma (``wgmma_serialized``, notes C7514 / C7515: the
bundled ptxas) and the counts of wgmma (``wgmma_shapes``: per instruction shape, m64n128k16 for block_n 128), TMA,
``red.release``, ``ld.acquire``, ``fence.proxy.async`` and the mbarrier operations (``tests/test_dag_ws_kernel.py``).
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import subprocess
import sys
import time

from kernels.dag.host import TRACE_COLS, epoch_limit
from kernels.dag.ws_kernel import (  # noqa: F401  (re-exported: the lab's tests and scripts name them here)
    A_BUFS, CONSTEXPRS, CONTROL, POINTERS, SCALARS, STAGES_DEFAULT, TILE, W_BUFS, DirectLaunch, WsRunner,
    WsUnsupported, _no_launch_hooks, check_supported, compile_for_sm90, dag_ws_fwd, descriptors, unwrap_launcher,
    ws_meta)


class WsDag(WsRunner):
    """The WS kernel on a ``DagPrepared`` of ``form: tl`` (today's graph, task table, buffers and weight slabs; its
    own queue head, counters, error word, trace and epoch). ``launch(x, y)`` runs one forward (the first compiles
    through Gluon's JIT path, later ones go through ``DirectLaunch``); ``check()`` raises for a timed-out dependency
    wait."""

    def __init__(self, p, stages: int = STAGES_DEFAULT, grid: int = 0, trace: bool = False,
                 spin_limit: int | None = None, direct: bool = True, share: "WsDag | None" = None):
        """``share``: another instance on the same ``p`` whose counters, queue head and epochs this one continues
        (the harness's traced instance after the timed one)."""
        import torch
        dev = p.ctr.device
        if dev.type != "cuda":
            raise WsUnsupported("ws_dag: the WS kernel runs on CUDA only (Gluon has no interpreter)")
        n_sm = torch.cuda.get_device_properties(dev).multi_processor_count
        grid = grid or n_sm
        check_supported(p.meta, grid, n_sm)
        n_tasks = len(p.graph.tasks)
        ctr, head = (share.ctr, share.head) if share else (torch.zeros_like(p.ctr), torch.zeros_like(p.head))
        super().__init__(p, ws_meta(p.meta, stages=stages, trace=trace), grid, ctr, head, torch.zeros_like(p.err),
                         torch.zeros(*((n_tasks, TRACE_COLS.value) if trace else (1,)), dtype=torch.int64,
                                     device=dev), direct)
        self.spin_limit = p.spin_limit if spin_limit is None else spin_limit
        self.epoch = share.epoch if share else 0
        self.epoch_limit = epoch_limit(p.graph.goals, self.n_tasks, self.grid)
        self.err_seen = 0

    def launch(self, x, y, spin_limit: int | None = None):
        """One forward y = f(x) (the counters zeroed first only at the int32 wrap limit, as host.launch)."""
        if self.epoch + 1 > self.epoch_limit:
            self.ctr.zero_()
            self.head.zero_()
            self.epoch = 0
        self.epoch += 1
        return self.run(x, y, self.epoch, self.spin_limit if spin_limit is None else spin_limit)

    def check(self) -> None:
        """Raise if a dependency wait gave up since the last check (synchronises)."""
        bad, task = self.err.tolist()
        if bad > self.err_seen:
            new, self.err_seen = bad - self.err_seen, bad
            name = self.p.graph.tasks[task].name if 0 <= task < self.n_tasks else f"#{task}"
            raise WaitTimeout(f"ws_dag: {new} dependency wait(s) TIMED OUT after spin_limit polls (last: task {task}, "
                              f"{name}); the output is wrong")


class WaitTimeout(RuntimeError):
    pass


def stall_report(ws: WsDag, ctr, head: int, err) -> dict:
    """What a launch that did not finish had done: tickets taken, the waits that gave up, and the counters below
    epoch x goal grouped by stage (the first stage with incomplete counters is where the chain stopped)."""
    g = ws.p.graph
    goals = g.goals
    e = ws.epoch
    base = (e - 1) * (ws.n_tasks + ws.grid)
    short = [(c, int(ctr[c]), goals[c] * e) for c in range(1, len(goals)) if int(ctr[c]) < goals[c] * e]
    by_stage: dict = {}
    for c, have, want in short:
        name = g.counter_names[c]
        by_stage.setdefault(f"{name[0]}[l{name[1]}]", []).append((name, have, want))
    # the first incomplete counters in queue order of their first waiter
    first_waiter = {}
    for i, tk in enumerate(g.tasks):
        for c in tk.waits:
            first_waiter.setdefault(c, i)
    short.sort(key=lambda s: first_waiter.get(s[0], 1 << 30))
    return dict(epoch=e, tickets_taken=head - base, tickets_per_launch=ws.n_tasks + ws.grid,
                waits_timed_out=int(err[0]), last_timeout_task=int(err[1]),
                incomplete_counters=len(short),
                incomplete_by_stage={k: len(v) for k, v in sorted(by_stage.items())},
                first_incomplete=[dict(counter=list(g.counter_names[c]), have=have, want=want,
                                       first_waiter=g.tasks[first_waiter[c]].name if c in first_waiter else None)
                                  for c, have, want in short[:12]])


def finish_or_report(ws: WsDag, timeout_s: float) -> dict | None:
    """Wait for the launches queued so far; None when they finished within ``timeout_s``, else the stall report
    (the counters, head and err read on a side stream while the launch is still running)."""
    import torch
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > timeout_s:
            side = torch.cuda.Stream()
            ctr = torch.empty(ws.ctr.shape, dtype=ws.ctr.dtype, pin_memory=True)
            head = torch.empty(1, dtype=torch.int32, pin_memory=True)
            err = torch.empty(2, dtype=torch.int32, pin_memory=True)
            with torch.cuda.stream(side):
                ctr.copy_(ws.ctr, non_blocking=True)
                head.copy_(ws.head, non_blocking=True)
                err.copy_(ws.err, non_blocking=True)
                done = torch.cuda.Event()
                done.record(side)
            t1 = time.time()
            while not done.query() and time.time() - t1 < 10:
                time.sleep(0.01)
            if not done.query():
                return dict(hang=True, note="the side-stream copy of the counters did not finish either")
            return dict(hang=True, after_s=round(time.time() - t0, 1), **stall_report(ws, ctr, int(head[0]), err))
        time.sleep(0.002)
    return None


# ----------------------------------------------------------------------------------------------------------------
# checks: buffers against today's kernel, each kind against float64 products of the WS kernel's own inputs

SPLIT = ("ln1", "att", "ln2", "f")


def buffer_values(p) -> dict:
    """The intermediate buffers' values as float64 (split buffers: hi + lo), by name; q|k|v per layer and part."""
    T = p.tensors
    out = {"r": T["r_ptr"].double()}
    for n in SPLIT:
        out[n] = T[f"{n}_hi_ptr"].double() + T[f"{n}_lo_ptr"].double()
    qkv = T["qkv_hi_ptr"].double() + T["qkv_lo_ptr"].double()
    for l in range(qkv.shape[0]):
        for j, part in enumerate("qkv"):
            out[f"{part}[l{l}]"] = qkv[l, j]
    return out


def snapshot(p) -> dict:
    return {k: v.clone() for k, v in buffer_values(p).items()}


def zero_buffers(p) -> None:
    """Zero every intermediate buffer (a task that reads before its producer wrote would read zeros)."""
    for k, t in p.tensors.items():
        if k == "r_ptr" or any(k.startswith(f"{n}_") for n in ("ln1", "qkv", "att", "ln2", "f")):
            if not k.startswith(("ln1w", "ln1b", "ln2w", "ln2b")):
                t.zero_()


def _diff(a, b) -> dict:
    d = (a - b).abs()
    scale = float(b.abs().max())
    return dict(max_abs=float(d.max()), rel_to_max=float(d.max()) / max(scale, 1e-30),
                bitwise_equal=float((a == b).double().mean()))


def compare(ws_vals: dict, tl_vals: dict, tol: float = 1e-3) -> dict:
    """Per buffer: max |ws − today| and that over max |today|; ``ok`` when below ``tol`` (the two kernels run the same
    products in the same order, so differences are the LayerNorm reductions' and the atomics' order, ~1e-6)."""
    out = {}
    for k in tl_vals:
        r = _diff(ws_vals[k], tl_vals[k])
        r["ok"] = r["rel_to_max"] <= tol
        out[k] = r
    return out


def _weight(p, name: str, n_cols: int):
    """W^T [L, K, N] float64 from the prepared slabs [L, N/64, K, 64] (hi + lo for bf16x3, the fp16 part once for
    f16_w1): exactly the operands the kernels multiply."""
    T = p.tensors
    hi = T[f"{name}_hi_ptr"].double()
    scheme = p.meta[{"wqkv": "SCHEME_QKV", "wo": "SCHEME_O", "w1": "SCHEME_FFN1", "w2": "SCHEME_FFN2"}[name]]
    w = hi if scheme == "f16_w1" else hi + T[f"{name}_lo_ptr"].double()
    L, NT, K, BN = w.shape
    return w.permute(0, 2, 1, 3).reshape(L, K, NT * BN)[:, :, :n_cols]


def _ln64(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / (var + eps).sqrt() * w + b


def kind_checks(p, x, y, tol: float = 1e-3) -> dict:
    """Each task kind of the last layer checked in isolation on the buffers of one launch (float64 products of the
    launch's own operands; ``rel`` = max |error| / max |expected|, ``ok`` below ``tol``):
    qkv (q|k|v of the last layer from its ln1), attn (att from q|k|v), ffn1 (f from ln2), lnf (y from r), ffn2+ln2
    (ln2 from r less the FFN2 product of f), oproj+ln1 (ln1 from r less both residual products of the last layer:
    the residual before it; x itself when L = 1)."""
    import torch
    c = p.case
    B, S, D, H, L, dh = c.B, c.S, c.D, c.H, c.L, c.dh
    M = B * S
    T = p.tensors
    v = buffer_values(p)
    l = L - 1
    out = {}

    def rec(name, got, want):
        d = (got - want).abs()
        out[name] = dict(rel=float(d.max()) / max(float(want.abs().max()), 1e-30), max_abs=float(d.max()))
        out[name]["ok"] = out[name]["rel"] <= tol

    wqkv, wo = _weight(p, "wqkv", 3 * D)[l], _weight(p, "wo", D)[l]
    w1, w2 = _weight(p, "w1", 4 * D)[l], _weight(p, "w2", D)[l]
    bq, bo, b1, b2 = (T[k][l].double() for k in ("bqkv_ptr", "bo_ptr", "b1_ptr", "b2_ptr"))
    # QKV: [M, 3D] -> head-major [3, B, H, S, dh]
    qkv = (v["ln1"] @ wqkv + bq).reshape(B, S, 3, H, dh).permute(2, 0, 3, 1, 4)
    got = torch.stack([v[f"{part}[l{l}]"] for part in "qkv"])
    rec("qkv", got, qkv)
    # attention from the kernel's own q|k|v
    q, k, vv = got[0], got[1], got[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if c.causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ vv                                   # [B, H, S, dh]
    rec("attn", v["att"], o.permute(0, 2, 1, 3).reshape(M, D))
    # FFN1 (+ GELU, exact erf) from ln2; f is [4, M, D] (column c of 4D in block c // D)
    h1 = v["ln2"] @ w1 + b1
    h1 = 0.5 * h1 * (1.0 + torch.erf(h1 / math.sqrt(2.0)))
    f = v["f"].permute(1, 0, 2).reshape(M, 4 * D)
    rec("ffn1", f, h1)
    # final LayerNorm from r
    rec("lnf", y.double().reshape(M, D), _ln64(v["r"], T["lnfw_ptr"].double(), T["lnfb_ptr"].double()))
    # the residual before FFN2, and before the output projection, from r less the products of f and att
    r_mid = v["r"] - (f @ w2 + b2)
    rec("ffn2+ln2", v["ln2"], _ln64(r_mid, T["ln2w_ptr"][l].double(), T["ln2b_ptr"][l].double()))
    r_pre = r_mid - (v["att"] @ wo + bo)
    rec("oproj+ln1", v["ln1"], _ln64(r_pre, T["ln1w_ptr"][l].double(), T["ln1b_ptr"][l].double()))
    if L == 1:
        rec("oproj(r=x)", r_pre, x.double().reshape(M, D))
    return out


# ----------------------------------------------------------------------------------------------------------------
# the harness

def _time_us(fn, reps: int, rounds: int = 5) -> dict:
    """CUDA events around ``reps`` back-to-back launches, ``rounds`` times: the median µs per launch (and the range)."""
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per, host = [], []
    for _ in range(rounds):
        e0.record()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        host.append((time.perf_counter() - t0) * 1e6 / reps)
        e1.record()
        torch.cuda.synchronize()
        per.append(e0.elapsed_time(e1) * 1000 / reps)
    per.sort()
    host.sort()
    med = per[len(per) // 2]
    # the launches' host time: when it reaches the GPU time the queue drains and the median times the host
    return dict(median_us=med, min_us=per[0], max_us=per[-1], reps=reps, rounds=rounds,
                host_us_per_launch=host[len(host) // 2], host_bound=host[len(host) // 2] > 0.8 * med)


def _gate_all(case, w, run, refs: dict) -> dict:
    """The gate (kernels.gate, config/gate/default.yaml's atol / rtol) at the SPEC scales x seeds of the default gate
    config, as check_gpu runs it (the fp32 references cached in ``refs`` for the other form)."""
    from kernels import default_gate_config, gate, make_input, reference_forward
    cfg = default_gate_config()
    rows, worst, passed = [], 0.0, True
    for scale in cfg.scales:
        for seed in cfg.seeds:
            x = make_input(case, scale, seed, device=w.device)
            if (scale, seed) not in refs:
                refs[(scale, seed)] = reference_forward(case, w, x)
            r = gate(run(x), refs[(scale, seed)])
            rows.append(dict(scale=scale, seed=seed, passed=r.passed, max_over_tol=r.max_over_tol))
            worst = max(worst, r.max_over_tol)
            passed = passed and r.passed
    return dict(passed=passed, worst_over_tol=worst, runs=rows)


def run_case(case_id: str, args, recs: list) -> None:
    """Both forms on one case; their records (today's ``tl``, then ``ws``) are appended to ``recs`` as soon as they
    exist and filled in step by step, so a failure later in the case keeps what was measured before it."""
    import torch
    from kernels import load_case, make_input, make_weights
    from kernels.dag import host
    case = load_case(case_id)
    w = make_weights(case, device="cuda")
    params = dict(tune="off")   # the defaults: both kernels on one graph and one tiling (no tuned file)
    for kv in args.param:
        k, _, v = kv.partition("=")
        params[k] = host.parse_value(v)
    t0 = time.time()
    p = host.prepare(case, w, **params)
    tl = dict(case=case.name, form="tl", tasks=len(p.graph.tasks), counters=p.graph.n_counters, grid=p.grid,
              prepare_s=round(time.time() - t0, 1), registers=p.info.get("registers"), shared=p.info.get("shared"))
    recs.append(tl)
    ws = WsDag(p, stages=args.stages, grid=args.grid, direct=not args.jit_launch)
    rec = dict(case=case.name, form="ws", tasks=len(p.graph.tasks), grid=ws.grid, stages=args.stages)
    recs.append(rec)
    x = make_input(case, 1.0, 0, device="cuda")

    # today's kernel, from zeroed buffers
    zero_buffers(p)
    y_tl = host.run(p, x)
    torch.cuda.synchronize()
    host.check(p)
    tl_vals = snapshot(p)
    tl["kind_checks"] = kind_checks(p, x, y_tl)

    # the WS kernel, from zeroed buffers (the first launch compiles; a short spin limit surfaces missing signals)
    zero_buffers(p)
    y_ws = torch.empty_like(x)
    t0 = time.time()
    ws.launch(x, y_ws, spin_limit=args.check_spin)
    stall = finish_or_report(ws, args.hang_s)
    rec["first_launch_s"] = round(time.time() - t0, 1)
    if stall is not None:
        rec.update(error="HANG: the first WS launch did not finish (stall: the queue head and the incomplete "
                         "counters, read while it ran)", stall=stall)
        return
    rec.update(ws.check_shared())
    rec["launch_path"] = "direct" if ws.direct_launch is not None else f"jit ({ws.direct_error or 'not built'})"
    try:
        ws.check()
    except WaitTimeout as e:
        rec["wait_timeout"] = str(e)
        rec["stall"] = stall_report(ws, ws.ctr.cpu(), int(ws.head.item()), ws.err.cpu())
    ws_vals = snapshot(p)
    rec["y_vs_tl"] = _diff(y_ws.double(), y_tl.double())
    rec["buffers_vs_tl"] = compare(ws_vals, tl_vals)
    rec["kind_checks"] = kind_checks(p, x, y_ws)
    rec["mismatch"] = dict(buffers=[k for k, r in rec["buffers_vs_tl"].items() if not r["ok"]],
                           kinds=[k for k, r in rec["kind_checks"].items() if not r["ok"]])
    del ws_vals, tl_vals
    if ws.direct_launch is not None:  # the direct launch on the same input (a wrong argument faults or hangs here)
        y_d = torch.empty_like(x)
        ws.launch(x, y_d, spin_limit=args.check_spin)
        if finish_or_report(ws, args.hang_s) is not None:
            raise RuntimeError("ws_dag: the first direct launch hung")
        ws.check()
        rec["direct_vs_jit"] = _diff(y_d.double(), y_ws.double())   # r's atomics: rounding order only

    # the gate, both forms
    refs: dict = {}
    tl["gate"] = _gate_all(case, w, lambda xx: host.run(p, xx), refs)

    def run_ws(xx):
        yy = torch.empty_like(xx)
        ws.launch(xx, yy)
        if finish_or_report(ws, args.hang_s) is not None:
            raise RuntimeError("ws_dag: a gate launch hung")
        return yy
    rec["gate"] = _gate_all(case, w, run_ws, refs)
    del refs
    ws.check()

    # timing: back-to-back launches
    y1 = torch.empty_like(x)
    tl.update(_time_us(lambda: host.launch(p, x, y1), args.reps))
    host.check(p)
    rec.update(_time_us(lambda: ws.launch(x, y1), args.reps))
    if finish_or_report(ws, args.hang_s) is not None:
        raise RuntimeError("ws_dag: a timed launch hung")
    ws.check()
    rec["speedup_vs_tl"] = tl["median_us"] / rec["median_us"]
    # the same launches through Gluon's JIT path (what the direct launch saves the host)
    ws.direct = False
    jit = _time_us(lambda: ws.launch(x, y1), args.reps)
    ws.direct = not args.jit_launch
    if finish_or_report(ws, args.hang_s) is not None:
        raise RuntimeError("ws_dag: a timed launch hung")
    ws.check()
    rec["jit_path"] = {k: jit[k] for k in ("median_us", "host_us_per_launch", "host_bound")}

    if args.trace:  # traced launches of each (host.task_profile's per-kind split of the last one)
        tr = WsDag(p, stages=args.stages, grid=args.grid, trace=True, direct=not args.jit_launch,
                   share=ws)   # continue the counters and epochs of the timed kernel
        for _ in range(2):
            tr.launch(x, y1)
        if finish_or_report(tr, args.hang_s) is not None:
            raise RuntimeError("ws_dag: the traced launch hung")
        tr.check()
        ws.epoch = tr.epoch
        rec["profile"] = _profile(p, tr.trace, tr.grid)
        from kernels.dag import graph as G
        trace, kinds = tr.trace.cpu(), [G.KINDS[task.kind] for task in p.graph.tasks]
        rec["consumer"] = consumer_profile(trace, kinds)
        rec["links"] = link_profile(trace, p.graph.producers, kinds)
        rec["phases"] = phase_profile(trace, p.graph.producers, kinds)
        rec["idle"] = idle_profile(trace, p.graph.producers)
        pt = host.prepare(case, w, **dict(params, trace=True))
        for _ in range(2):
            host.run(pt, x)
        torch.cuda.synchronize()
        host.check(pt)
        tl["profile"] = _profile(pt, pt.trace, pt.grid)
        del pt

    # the product path: ``prepare(form=ws)`` (the runner on the prepared counters, compiled at prepare) through
    # host.run / host.launch, against the lab instance's output, gated and timed
    hrec = dict(case=case.name, form="ws_host")
    recs.append(hrec)
    t0 = time.time()
    ph = host.prepare(case, w, **dict(params, form="ws", ws_stages=args.stages, grid=args.grid))
    hrec.update(prepare_s=round(time.time() - t0, 1), tasks=len(ph.graph.tasks), grid=ph.grid,
                **{k: ph.info.get(k) for k in ("graph_programs", "registers", "spills", "shared", "launch_path")})
    y_h = host.run(ph, x)
    if finish_or_report(_host_view(ph), args.hang_s) is not None:
        raise RuntimeError("ws_dag: the first host.run of form ws hung")
    host.check(ph)
    hrec["y_vs_ws"] = _diff(y_h.double(), y_ws.double())   # r's atomics: rounding order only
    hrec["gate"] = _gate_all(case, w, lambda xx: host.run(ph, xx), {})
    hrec.update(_time_us(lambda: host.launch(ph, x, y1), args.reps))
    if finish_or_report(_host_view(ph), args.hang_s) is not None:
        raise RuntimeError("ws_dag: a timed host.launch of form ws hung")
    host.check(ph)
    hrec["speedup_vs_tl"] = tl["median_us"] / hrec["median_us"]


def _host_view(p):
    """What ``finish_or_report`` / ``stall_report`` read of a ``WsDag``, for a ``DagPrepared`` of form ws (its own
    counters, queue head, error word and epoch: ``host.launch``'s bookkeeping)."""
    from types import SimpleNamespace
    return SimpleNamespace(p=p, ctr=p.ctr, head=p.head, err=p.err, epoch=p.epoch, n_tasks=len(p.graph.tasks),
                           grid=p.grid)


def _profile(p, trace, grid) -> dict:
    """``host.task_profile`` of a trace tensor ([tasks, 8] int64, the same columns as today's kernel's)."""
    from types import SimpleNamespace
    from kernels.dag import host
    prof = host.task_profile(SimpleNamespace(meta=dict(TRACE=True), trace=trace, graph=p.graph, grid=grid))
    prof["kinds"] = {k: {kk: round(vv, 3) for kk, vv in d.items()} for k, d in prof["kinds"].items()}
    return prof


def _float_trace(trace):
    """A trace (tensor or nested list of ns stamps) as a float64 tensor."""
    import torch
    return trace.double() if isinstance(trace, torch.Tensor) else torch.as_tensor(trace, dtype=torch.float64)


def _last_producers(rows: list, producers: list) -> list:
    """(task, its producer with the latest release, column 2) for every task with producers."""
    return [(i, max(ps, key=lambda q: rows[q][2])) for i, ps in enumerate(producers) if ps]


def consumer_profile(trace, kinds: list, kernel_t0: float | None = None) -> dict:
    """How busy form ws's consumer warpgroup is, from the trace's stamps (``task_profile``'s columns: 1 the loader's
    counters complete, 3 program << 16 | SM, 4 the consumer's work done). Per program the tasks in the order the
    consumer finished them; task k's consumer time starts at max(done of task k − 1, counters complete of task k) —
    before that the consumer was busy with the task before, or waited for the loader to see the task's dependencies
    met (a GEMM's operands load only after that) — and ends at its done stamp. ``busy`` = consumer time / (programs x
    kernel); ``idle_dep_us`` the mean per program of the gaps where the consumer waited for a dependency; per kind the
    mean consumer time of a task (µs), ``kinds`` giving each task's kind name. One consumer per program (with two, a
    program's tasks interleave and the split does not apply)."""
    t = _float_trace(trace).tolist()
    t0 = min(r[0] for r in t) if kernel_t0 is None else kernel_t0
    end = max(r[4] for r in t)
    start, idle, n = _consumer_starts(t)
    busy = 0.0
    per: dict = {}
    for i, r in enumerate(t):
        d = r[4] - start[i]
        busy += d
        per.setdefault(kinds[i], []).append(d)
    kernel = end - t0
    return dict(programs=n, kernel_us=kernel / 1e3, busy=busy / (n * kernel) if kernel > 0 else 0.0,
                idle_dep_us=idle / n / 1e3,
                kinds={k: dict(n=len(v), consumer_mean_us=round(sum(v) / len(v) / 1e3, 3),
                               consumer_total_us=round(sum(v) / 1e3, 1)) for k, v in per.items()})


def _consumer_starts(t: list) -> tuple[list, float, int]:
    """Per task of the trace rows ``t`` (ns), the start of its consumer time: each program's tasks in the order the
    consumer finished them (column 4), task k from max(done of task k − 1, its counters complete, column 1).
    Returns (starts, the summed gaps where a consumer waited for a dependency, programs)."""
    by: dict = {}
    for i, r in enumerate(t):
        by.setdefault(int(r[3]) >> 16, []).append(i)
    start = [0.0] * len(t)
    idle = 0.0
    for idx in by.values():
        idx.sort(key=lambda i: t[i][4])
        prev = None
        for i in idx:
            start[i] = t[i][1] if prev is None else max(prev, t[i][1])
            if prev is not None and t[i][1] > prev:
                idle += t[i][1] - prev
            prev = t[i][4]
    return start, idle, len(by)


def idle_profile(trace, producers: list, lag_us: float = 1.0, bin_us: float = 0.25) -> dict:
    """Whether form ws's idle consumers had work they could have run, from the trace's stamps (ns; 0 the loader's
    ticket, 1 its counters complete, 2 the signaller's release issued, 3 program << 16 | SM, 4 the consumer's work
    done). A consumer is busy over its tasks' consumer time (``consumer_profile``: from max(its previous task's done,
    the task's counters complete) to the task's done). A task is *ready* from ``lag_us`` after its last producer's
    release (the kernel's start when it has none; the lag stands for the poll and the first data, which no schedule
    avoids) until its consumer time starts. At each ``bin_us`` step of the launch: idle consumers I, ready tasks R,
    and min(I, R) — the idle consumers a schedule could have given ready work at that moment. Returns, as shares of
    the launch's consumer time (programs x kernel): ``busy``, ``idle``, ``idle_with_ready`` (the schedule's share of
    the idle time: min(I, R) summed), split by whether those ready tasks' tickets were not yet taken
    (``..._unticketed``: the queue had not reached them) or taken by a program still busy with an earlier task
    (``..._ticketed``); ``idle_nothing_ready`` the rest (the dependency chain's share); and ``ready_mean`` the mean
    number of ready tasks. An upper bound on what reordering could recover: a ready task needs a whole idle consumer
    for its duration, which one bin does not check."""
    import bisect
    t = _float_trace(trace).tolist()
    n = len(t)
    t0 = min(r[0] for r in t)
    end = max(r[4] for r in t)
    start, _, progs = _consumer_starts(t)
    lag = lag_us * 1e3
    ready = [(max(t[j][2] for j in producers[i]) if producers[i] else t0) + lag for i in range(n)]

    def counter(iv):
        s0 = sorted(a for a, b in iv if b > a)
        s1 = sorted(b for a, b in iv if b > a)
        return lambda x: bisect.bisect_right(s0, x) - bisect.bisect_right(s1, x)
    busy = counter([(start[i], t[i][4]) for i in range(n)])
    rdy = counter([(ready[i], start[i]) for i in range(n)])
    unt = counter([(ready[i], min(start[i], t[i][0])) for i in range(n)])
    step = bin_us * 1e3
    steps = max(1, int((end - t0) // step))
    acc = dict(busy=0.0, idle=0.0, ready=0.0, with_ready=0.0, unticketed=0.0)
    for k in range(steps):
        x = t0 + (k + 0.5) * step
        b, r, u = busy(x), rdy(x), unt(x)
        idle = max(0, progs - b)
        use = min(idle, r)
        acc["busy"] += b
        acc["idle"] += idle
        acc["ready"] += r
        acc["with_ready"] += use
        acc["unticketed"] += min(use, u)
    cap = progs * steps
    return dict(lag_us=lag_us, busy=round(acc["busy"] / cap, 3), idle=round(acc["idle"] / cap, 3),
                idle_with_ready=round(acc["with_ready"] / cap, 3),
                idle_with_ready_unticketed=round(acc["unticketed"] / cap, 3),
                idle_with_ready_ticketed=round((acc["with_ready"] - acc["unticketed"]) / cap, 3),
                idle_nothing_ready=round((acc["idle"] - acc["with_ready"]) / cap, 3),
                ready_mean=round(acc["ready"] / steps, 1))


def link_profile(trace, producers: list, kinds: list) -> dict:
    """Where a link's time goes in form ws, from the trace's stamps (ns; columns 0 the loader's ticket, 1 its counters
    complete, 2 the signaller's release issued, 4 the consumer's work done). For each task with producers, its last
    producer L (the latest release): *release* = L's release − L's done (the consumer's fence and hand-over, the
    signaller's table loads and ``red.release``); *poll* = the task's counters complete − L's release, counted only
    where the task's loader already held the ticket at L's release (it was polling: otherwise the gap is the loader
    busy elsewhere). Per kind of L, and over all: n, mean and median µs of each (the timer ticks at ~32 ns or coarser:
    means over many links, not single values)."""
    import statistics
    t = _float_trace(trace).tolist()
    rel: dict = {}
    poll: dict = {}
    for i, last in _last_producers(t, producers):
        k = kinds[last]
        rel.setdefault(k, []).append(t[last][2] - t[last][4])
        if t[i][0] <= t[last][2]:
            poll.setdefault(k, []).append(t[i][1] - t[last][2])

    def stats(v):
        return dict(n=len(v), mean_us=round(statistics.fmean(v) / 1e3, 3) if v else None,
                    median_us=round(statistics.median(v) / 1e3, 3) if v else None)
    every_rel = [x for v in rel.values() for x in v]
    every_poll = [x for v in poll.values() for x in v]
    return dict(release=stats(every_rel), poll=stats(every_poll),
                kinds={k: dict(release=stats(rel[k]), poll=stats(poll.get(k, []))) for k in rel})


def phase_profile(trace, producers: list, kinds: list) -> dict:
    """Where a task's time goes in form ws, from the 8-column trace (ns; 0 the loader's ticket, 1 its counters
    complete, 2 the signaller's release issued, 4 the consumer's work done, 5 the consumer took the task, 6 a GEMM's
    K loop done, 7 the signaller took the task). Per kind, mean µs of: *start* = max(5, 1) − 5 when the consumer
    took the task before its counters completed (it waited for the dependency; else 0); *body* = 4 − max(5, 1) (the
    task from its operands' earliest start: a GEMM's first data and K loop and epilogue, the LayerNorm rows, the
    attention); for GEMMs *loop* = 6 − max(5, 1) and *epilogue* = 4 − 6; *handoff* = 7 − 4 (the consumer's done to
    the signaller taking it); *fence* = 2 − 7 (the proxy fence and the release). ``late_loader``: of the tasks with
    producers, the share whose loader took the ticket only after the last producer's release (that link waited for the
    loader, not the counter) and the mean µs from that release to the ticket. Tasks with a zero stamp (the kernel did
    not write it) are left out of that phase."""
    import statistics
    t = _float_trace(trace)
    if t.shape[1] < TRACE_COLS.value:
        raise ValueError(f"phase_profile: a {TRACE_COLS.value}-column trace (kernel.py's TRACE_COLS), not {t.shape[1]}")
    t = t.tolist()
    acc: dict = {}

    def add(k, phase, v):
        acc.setdefault(k, {}).setdefault(phase, []).append(v)
    for i, r in enumerate(t):
        k = kinds[i]
        if r[5] and r[1]:
            s0 = max(r[5], r[1])
            add(k, "start", s0 - r[5])
            add(k, "body", r[4] - s0)
            if r[6]:
                add(k, "loop", r[6] - s0)
                add(k, "epilogue", r[4] - r[6])
        if r[7]:
            add(k, "handoff", r[7] - r[4])
            add(k, "fence", r[2] - r[7])
    links = _last_producers(t, producers)
    n_links = len(links)
    late = [t[i][0] - t[last][2] for i, last in links if t[i][0] > t[last][2]]
    out = {k: {ph: round(statistics.fmean(v) / 1e3, 3) for ph, v in d.items()} | {"n": len(d.get("body", []))}
           for k, d in acc.items()}
    return dict(kinds=out, late_loader=dict(share=round(len(late) / n_links, 3) if n_links else None,
                                             mean_us=round(statistics.fmean(late) / 1e3, 3) if late else None))


def _summary(r: dict) -> dict:
    """The one-line JSON of a record (the big nested parts summarised)."""
    keep = {k: v for k, v in r.items() if k not in ("buffers_vs_tl", "kind_checks", "gate", "profile", "stall")}
    if "gate" in r:
        keep["gate_passed"] = r["gate"]["passed"]
        keep["gate_worst_over_tol"] = round(r["gate"]["worst_over_tol"], 4)
    if "kind_checks" in r:
        keep["kind_rel"] = {k: float(f"{v['rel']:.3g}") for k, v in r["kind_checks"].items()}
    if "buffers_vs_tl" in r:
        keep["worst_buffer"] = max(r["buffers_vs_tl"].items(), key=lambda kv: kv[1]["rel_to_max"])[0]
        keep["worst_buffer_rel"] = float(f"{max(v['rel_to_max'] for v in r['buffers_vs_tl'].values()):.3g}")
    if "stall" in r:
        keep["stall"] = {k: r["stall"][k] for k in ("tickets_taken", "tickets_per_launch", "waits_timed_out",
                                                    "incomplete_by_stage") if k in r["stall"]}
    if "profile" in r:
        keep["kernel_us_traced"] = round(r["profile"]["kernel_us"], 1)
        keep["busy"] = round(r["profile"]["busy"], 3)
    if "consumer" in r:
        keep["consumer_busy"] = round(r["consumer"]["busy"], 3)
        keep["consumer_idle_dep_us"] = round(r["consumer"]["idle_dep_us"], 1)
    if "links" in r:
        keep["link_release_us"] = r["links"]["release"]["mean_us"]
        keep["link_poll_us"] = r["links"]["poll"]["mean_us"]
    return keep


def _write(out_dir: str, rows: list, extra: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, ".ws_dag.json.tmp")
    with open(tmp, "w") as f:
        json.dump(dict(rows=rows, **extra), f, indent=1, default=str)
    os.replace(tmp, os.path.join(out_dir, "ws_dag.json"))


def _child(args) -> int:
    """One case in this process (``--one-case``): its records as JSON lines prefixed ``@@REC `` for the parent (and a
    one-line summary each)."""
    recs: list = []
    try:
        run_case(args.one_case, args, recs)
    except Exception as e:  # report, never hang the parent
        import traceback
        err = dict(error=f"{type(e).__name__}: {e}"[:2000], traceback=traceback.format_exc()[-3000:])
        if recs and str(recs[-1].get("form")).startswith("ws"):
            recs[-1].update(err)
        else:
            recs.append(dict(case=args.one_case, form="ws" if recs else "setup", **err))
    for r in recs:
        print("@@REC " + json.dumps(r, default=str), flush=True)
        print(json.dumps(_summary(r), default=str), flush=True)
    if any("HANG" in str(r.get("error", "")) for r in recs):
        os._exit(3)  # a hung kernel holds the context: leave at once (the driver tears it down)
    return 0


def _run_child(cmd: list, timeout_s: float) -> tuple[list, object]:
    """Run one case's process, echo its output as it comes, collect its records; kill it after ``timeout_s``."""
    import queue
    import threading
    got, lines = [], queue.Queue()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=root)

    def pump():
        for ln in proc.stdout:
            lines.put(ln)
        lines.put(None)
    threading.Thread(target=pump, daemon=True).start()
    t_end = time.time() + timeout_s
    while True:
        try:
            ln = lines.get(timeout=max(0.1, t_end - time.time()))
        except queue.Empty:
            proc.kill()
            return got, f"killed after {timeout_s:.0f} s (--case-timeout)"
        if ln is None:
            break
        if ln.startswith("@@REC "):
            got.append(json.loads(ln[6:]))
        else:
            print(ln, end="", flush=True)
        if time.time() > t_end:
            proc.kill()
            return got, f"killed after {timeout_s:.0f} s (--case-timeout)"
    return got, proc.wait(timeout=60)


def compile_case(cid, stages: int = STAGES_DEFAULT, params: dict | None = None, trace: bool = False):
    """``dag_ws_fwd`` compiled for sm_90a without a GPU on case ``cid``'s meta (the graph ``prepare`` would build for
    264 programs on an H200: today's defaults, tune off). Returns (kernel, case, graph, tiling, ws meta, buffer
    dtypes, buffer shapes) — ``compile_for_sm90``'s ``dtypes`` / ``shapes``."""
    import torch
    from kernels import load_case
    from kernels.dag import graph as G
    from kernels.dag import host
    case = load_case(cid)
    o = host.check_params(dict(params or {}))
    t = host.tiling_for(case, o, 264)
    g = G.build(case, t, o["order"], 264)
    _, width = host.task_table(g, goals=o["wait"] == "parallel")
    meta = host.kernel_meta(case, t, g, o, 264, True, width)
    mw = ws_meta(meta, stages=stages, trace=trace, consumers=o["ws_consumers"], pre=o["ws_pre"])
    M, D, L = case.tokens, case.D, case.L
    dtypes, shapes = {}, {}
    for n, sch, shp in (("ln1", t.scheme_qkv, (M, D)), ("att", t.scheme_o, (M, D)),
                        ("ln2", t.scheme_ffn1, (M, D)), ("f", t.scheme_ffn2, (4, M, D)),
                        ("qkv", "bf16x3", (L, 3, case.B, case.H, case.S, case.dh))):
        for part in ("hi", "lo"):   # host._buffers
            dtypes[f"{n}_{part}"] = host._part_dtype(sch, True, part)
            shapes[f"{n}_{part}"] = host._part_shape(shp, sch, True, part)
    for n, sch, N, K, bn in (("wqkv", t.scheme_qkv, 3 * D, D, t.block_n_qkv), ("wo", t.scheme_o, D, D, t.block_n_o),
                             ("w1", t.scheme_ffn1, 4 * D, D, t.block_n_ffn1),
                             ("w2", t.scheme_ffn2, D, 4 * D, t.block_n_ffn2)):
        for part in ("hi", "lo"):   # host._slabs: [L, N / block_n, K, block_n] (host._weight_parts)
            dtypes[f"{n}_{part}"] = host._part_dtype(sch, True, part, slab=True)
            shapes[f"{n}_{part}"] = host._part_shape((L, -(-N // bn), K, bn), sch, True, part, slab=True)
    return compile_for_sm90(mw, dtypes, shapes), case, g, t, mw, dtypes, shapes


def compile_report(cases=("2", "12"), stages: int = STAGES_DEFAULT, params: dict | None = None,
                   trace: bool = False) -> dict:
    """Compile the WS kernel for sm_90a without a GPU for each case's meta (``compile_case``) and count the
    protocol's instructions in the PTX; ptxas -v for registers, spills and whether it serialized the wgmma."""
    out = {}
    for cid in cases:
        t0 = time.time()
        k, case, g, t, mw, dtypes, shapes = compile_case(cid, stages, params, trace)
        ptx = k.asm["ptx"]
        rec = dict(case=case.name, compile_s=round(time.time() - t0, 1), warps=k.metadata.num_warps,
                   shared=k.metadata.shared, tasks=len(g.tasks), max_waits=g.max_waits, max_signals=g.max_signals,
                   schemes=[t.scheme_qkv, t.scheme_o, t.scheme_ffn1, t.scheme_ffn2],
                   wgmma=ptx.count("wgmma.mma_async"), tma=ptx.count("cp.async.bulk.tensor"),
                   i8_wgmma=len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.s32\.s8\.s8", ptx)),
                   wgmma_shapes=dict(sorted(collections.Counter(re.findall(
                       r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)).items())),
                   red_release=ptx.count("red.release.gpu"), ld_acquire=ptx.count("ld.acquire.gpu"),
                   fence_proxy=ptx.count("fence.proxy.async"), mbarrier_wait=ptx.count("mbarrier.try_wait"),
                   mbarrier_arrive=ptx.count("mbarrier.arrive"), setmaxnreg=ptx.count("setmaxnreg"),
                   f32_atomics=sum(1 for ln in ptx.splitlines() if ".global" in ln and ".add" in ln and "f32" in ln
                                   and ("red." in ln or "atom." in ln)),
                   ex2=ptx.count("ex2.approx"), cvt_bf16=ptx.count("cvt.rn.bf16.f32"),
                   cvt_bf16x2=ptx.count("cvt.rn.bf16x2.f32"))
        rec.update(_ptxas(ptx))
        rec["mbarriers_in_scratch"] = mbarriers_in_scratch(k.asm["ttgir"])
        out[case.name] = rec
    return out


def mbarriers_in_scratch(ttgir: str) -> list[int]:
    """The shared-memory offsets of mbarriers that Triton's allocator placed inside an operation's scratch (a layout
    conversion's, a reduction's): Triton's allocation passes (as ``make_llir`` runs them for sm_90) over the
    kernel's TTGIR; a scratch region runs from its offset to the next allocation above it. An mbarrier the kernel
    initializes and never uses again is dead to the allocator, which may hand its bytes to a scratch; ordinary
    stores to a valid mbarrier's memory are undefined, and the cooperative form's unused q mbarriers read back wrong
    values that way (docs/dag-results.md "Results" 50). [] when none is."""
    import tempfile
    from triton._C.libtriton import ir, nvidia, passes
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend, get_ptxas, ptx_get_version
    ctx = ir.context()
    ir.load_dialects(ctx)
    CUDABackend(GPUTarget("cuda", 90, 32)).load_dialects(ctx)
    with tempfile.NamedTemporaryFile("w", suffix=".ttgir") as f:
        f.write(ttgir)
        f.flush()
        mod = ir.parse_mlir_module(f.name, ctx)
    mod.context = ctx
    pm = ir.pass_manager(ctx)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, 90, ptx_get_version(get_ptxas(90).version))
    pm.run(mod, "allocate")
    txt = str(mod)
    total = int(re.search(r"ttg.shared = (\d+)", txt).group(1))
    allocs = []   # (mbarrier | buffer | scratch, offset)
    for line in txt.splitlines():
        m = re.search(r"allocation.offset = (\d+)", line)
        if m is None or "tt.func" in line:
            continue
        off = int(m.group(1))
        if "ttg.local_alloc" in line:
            mem = re.search(r"!ttg.memdesc<([^,>]*)", line.split("->")[-1])
            allocs.append(("mbarrier" if mem and mem.group(1).endswith("xi64") else "buffer", off))
        elif "ttg.warp_specialize" not in line:   # (its captures: none in shared memory in these kernels)
            allocs.append(("scratch", off))
    bounds = sorted({off for _, off in allocs} | {total})
    scratch = [(s, min(b for b in bounds if b > s)) for kind, s in allocs if kind == "scratch"]
    return sorted({off for kind, off in allocs if kind == "mbarrier" and any(s <= off < e for s, e in scratch)})


def _ptxas(ptx: str) -> dict:
    """Registers and spills of the PTX for sm_90a by the bundled ptxas (``bench.common.sm90_report.ptxas_verbose``),
    and whether ptxas serialized the wgmma (its performance notes C7514 / C7515, which serialize every wgmma of the
    function; ``wgmma_notes`` the codes it gave); {} when it cannot run."""
    from bench.common.sm90_report import ptxas_verbose
    try:
        txt = ptxas_verbose(ptx)
    except (OSError, subprocess.SubprocessError):
        return {}
    regs = re.search(r"Used (\d+) registers", txt)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", txt)
    notes = sorted(set(re.findall(r"\((C751[45])\)", txt)))
    return dict(registers=int(regs.group(1)) if regs else None,
                spill_stores=int(spill.group(1)) if spill else None, spill_loads=int(spill.group(2)) if spill else None,
                wgmma_serialized=bool(notes) if regs else None, wgmma_notes=notes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for ws_dag.json (GPU)")
    ap.add_argument("--cases", nargs="+", default=["2", "3", "4", "12"])
    ap.add_argument("--compile", action="store_true", help="compile for sm_90a without a GPU; print the counts")
    ap.add_argument("--trace", action="store_true", help="also one traced launch of each form (task_profile)")
    ap.add_argument("--stages", type=int, default=STAGES_DEFAULT, help="ring slots (2-6, shared memory permitting)")
    ap.add_argument("--grid", type=int, default=0, help="WS programs (default: one per SM; at most the SM count)")
    ap.add_argument("--jit-launch", action="store_true",
                    help="every WS launch through Gluon's JIT path (default: the first; then DirectLaunch)")
    ap.add_argument("--param", nargs="*", action="extend", default=[],
                    help="name=value for prepare (both kernels), e.g. ctas_per_sm=1; repeatable (--param a=1 --param "
                         "b=2 or --param a=1 b=2)")
    ap.add_argument("--reps", type=int, default=20, help="back-to-back launches per timing round")
    ap.add_argument("--check-spin", type=int, default=200_000,
                    help="spin_limit of the WS kernel's first (checked) launch: a missing signal surfaces in ~0.1 s")
    ap.add_argument("--hang-s", type=float, default=20.0, help="s before a launch counts as hung (then reported)")
    ap.add_argument("--case-timeout", type=float, default=400.0, help="s per case (its process) before it is killed")
    ap.add_argument("--one-case", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.compile:
        params = {}
        for kv in a.param:
            k, _, v = kv.partition("=")
            params[k] = v if not v.lstrip("-").isdigit() else int(v)
        for name, rec in compile_report(a.cases if a.cases != ["2", "3", "4", "12"] else ("2", "12"), a.stages,
                                        params, a.trace).items():
            print(json.dumps(rec), flush=True)
        return
    if a.one_case:
        sys.exit(_child(a))
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("ws_dag: no CUDA device; without a GPU run `python -m bench.dag.ws_dag --compile`")
    if not a.out:
        raise SystemExit("ws_dag: --out DIR is required")
    rows = []
    extra = dict(device=torch.cuda.get_device_name(), argv=sys.argv[1:])
    for c in a.cases:  # one process per case: a hung or faulted kernel takes only its own case down
        cmd = [sys.executable, "-m", "bench.dag.ws_dag", "--one-case", c, "--stages", str(a.stages), "--grid",
               str(a.grid), "--reps", str(a.reps), "--check-spin", str(a.check_spin), "--hang-s", str(a.hang_s)]
        if a.trace:
            cmd.append("--trace")
        if a.jit_launch:
            cmd.append("--jit-launch")
        if a.param:
            cmd += ["--param", *a.param]
        got, rc = _run_child(cmd, a.case_timeout)
        if rc != 0:
            note = dict(case=c, form="process", error=f"the case's process: {rc}")
            print(json.dumps(note), flush=True)
            got.append(note)
        rows += got
        _write(a.out, rows, extra)
    bad = [r for r in rows if r.get("form") in ("ws", "ws_host") and (r.get("error") or r.get("wait_timeout")
                                                          or (r.get("mismatch") or {}).get("kinds")
                                                          or not (r.get("gate") or {}).get("passed", False))]
    print(f"ws_dag: {len(rows)} records in {os.path.join(a.out, 'ws_dag.json')}; "
          f"{'all WS rows pass' if not bad else f'{len(bad)} WS row(s) with an error, a mismatch or a failed gate'}",
          flush=True)


if __name__ == "__main__":
    main()
