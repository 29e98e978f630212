"""Where form ws's consumer spends a launch, per program, from a traced launch (lab; docs/dag-results.md "Results" 41).

The trace's stamps (``host.task_profile``'s columns: 5 the consumer took the task, 1 the loader's wait done, 6 a
GEMM's K loop done, 4 the work done, 3 program << 16 | SM) split each program's time into: GEMM K loops (from the
later of the take and the wait done to the K loop's end), GEMM epilogues, attention and LayerNorm tasks (from the
later of take and wait to done), a task taken with its dependencies not yet met (take to wait done), and the time
between tasks (with the time before a program's first and after its last). Per GEMM kind also the median time a
K step (a task's K loop over its 64-wide steps) and how it moves with the number of programs in a K loop at once.

    python -m bench.dag.time_split --cases 12 4 --out DIR      # GPU: prepare each case at its committed
                                                               # parameters with trace, three calls, the third's
    python -m bench.dag.time_split --cases 12 --out DIR --set scheme_ffn2=f16_w1   # parameters over the committed
                                                               # ones (saved as trace_caseNN_set.pt)
    python -m bench.dag.time_split --cases 12 --out DIR --set @PACK_HI=0   # a WS kernel constexpr (bench.dag.ws_ab)
    python -m bench.dag.time_split --from DIR                  # the saved traces again, no GPU

Also the launch's critical path (``critical_path``: from the task that finished last back to the launch's start,
each step to the later of the task's last producer's release and its program's task before it), split into the
tasks' bodies by kind, the releases (a producer's done to its signaller's release), the links (that release to the
dependant's start) and the same-program gaps (docs/dag-results.md "Results" 45).

Writes ``DIR/trace_caseNN.pt`` (the trace, the tasks' kinds, producers and K steps) and ``DIR/time_split.json``.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
from collections import defaultdict

KIND = {0: "ln1", 1: "qkv", 2: "attn", 3: "oproj", 4: "ln2", 5: "ffn1", 6: "ffn2", 7: "lnf"}
GEMM = {k: KIND[k] for k in (1, 3, 5, 6)}
ATTN = 2   # the other kinds (0, 4, 7) are LayerNorm tasks
HANDOFF_NS = 150   # a task's done (column 4) to its signaller taking it (column 7): 0.13-0.22 µs a kind, one consumer


def work_done(row) -> float:
    """When a traced task's work was done (ns): column 4, or, where the signaller took it more than a hand-over later,
    that less a hand-over — the cooperative consumers stamp consumer 0's done only, so a task consumer 1 runs (an
    attention task, or a LayerNorm task run in turn) shows its end only where both have handed it over."""
    return max(row[4], row[7] - HANDOFF_NS) if row[7] else row[4]


def gemm_steps(meta: dict) -> dict:
    """K steps (64 wide) of one task of each GEMM kind, from the prepared kernel's meta (its K chunks)."""
    D = meta["D"]
    return {1: D // 64, 3: -(-meta["K_CHUNK_O"] // 64), 5: D // 64, 6: -(-meta["K_CHUNK_FFN2"] // 64)}


def step_bytes(t) -> dict:
    """Bytes one 64-deep K step of each GEMM kind brings into shared memory (graph.Tiling ``t``): A's block_m rows
    and W's block_n columns in the kind's scheme's operand parts (bf16x3: A and W hi / lo bf16; f16_w1: A hi / lo
    fp16, W one fp16 part; f16f8: A and W fp16 plus their fp8 [.., 128] pairs, as many bytes as bf16x3's)."""
    w_parts = {"bf16x3": 4, "f16f8": 4, "f16_w1": 2}   # bytes a W element, all its parts
    out = {}
    for name in GEMM.values():
        tag = "o" if name == "oproj" else name          # the Tiling fields' names
        scheme, bn = getattr(t, f"scheme_{tag}"), getattr(t, f"block_n_{tag}")
        if scheme not in w_parts:
            raise ValueError(f"time_split: no operand bytes known for scheme {scheme!r}")
        out[name] = t.block_m * 64 * 4 + bn * 64 * w_parts[scheme]
    return out


def by_program(rows) -> list:
    """A trace's rows ([tasks, 8] stamps) by program (column 3's high half): each program's task indices in the
    order it took them (column 5)."""
    by = defaultdict(list)
    for i, r in enumerate(rows):
        by[int(r[3]) >> 16].append(i)
    return [sorted(idx, key=lambda i: rows[i][5]) for idx in by.values()]


def split(trace, kinds: list, steps: dict) -> dict:
    """The per-program split of a trace ([tasks, 8] ns stamps, form ws) and the GEMM kinds' time a K step. A task's
    phases start where ``bench.dag.ws_dag.phase_profile``'s do: at the later of the take and the wait done."""
    from bench.dag.ws_dag import _float_trace
    t = _float_trace(trace).tolist()
    t0 = min(r[0] for r in t)
    us = [[(v - t0) / 1e3 for v in r] for r in t]
    kernel = max(r[2] for r in us)
    by = by_program(t)
    acc = defaultdict(float)
    loops = []
    for idx in by:
        prev = None
        for i in idx:
            took, dep, done, kd = us[i][5], us[i][1], us[i][4], us[i][6]
            acc["between tasks"] += max(0.0, took - prev) if prev is not None else took
            acc["dependencies not met"] += max(0.0, dep - took)
            start = max(took, dep)
            if kinds[i] in GEMM:
                acc["GEMM K loops"] += kd - start
                acc["GEMM epilogues"] += done - kd
                loops.append((start, kd, kinds[i]))
            elif kinds[i] == ATTN:
                acc["attention"] += done - start
            else:
                acc["LayerNorm"] += done - start
            prev = done
        acc["between tasks"] += kernel - prev
    n = len(by)
    starts, ends = sorted(x[0] for x in loops), sorted(x[1] for x in loops)
    per = defaultdict(list)
    for s, e, k in loops:
        mid = (s + e) / 2
        per[k].append((bisect.bisect_right(starts, mid) - bisect.bisect_right(ends, mid), (e - s) / steps[k]))
    step = {}
    for k, v in per.items():
        v.sort()
        q = max(1, len(v) // 4)
        step[GEMM[k]] = dict(tasks=len(v), steps=steps[k], step_us=statistics.median(x[1] for x in v),
                             step_us_fewest=statistics.median(x[1] for x in v[:q]),
                             step_us_most=statistics.median(x[1] for x in v[-q:]),
                             concurrency=[v[0][0], statistics.median(x[0] for x in v), v[-1][0]])
    return dict(kernel_us=kernel, programs=n, per_program_us={k: a / n for k, a in acc.items()},
                share={k: a / (n * kernel) for k, a in acc.items()}, k_step=step)


def critical_path(trace, kinds: list, producers: list) -> dict:
    """The launch's critical path from a trace ([tasks, 8] ns stamps, form ws; ``producers[i]`` the queue indices
    of the tasks task i waits for, ``Graph.producers``). From the task that finished last (column 4), each step goes
    back to what started the task later: its producer with the latest release (column 2) when that release is not
    before the program's previous task's done (a *dependency* edge: the producer's release, done to column 2, and the
    link, that release to the task's start), else that previous task (a *same-program* edge: its done to the task's
    start). A task's start is the later of the consumer's take (5) and the loader's wait done (1), as ``split``'s.
    The segments add up to the last task's done. A task's done is ``work_done``'s (the cooperative consumers' tasks
    run by consumer 1 included). Returns kernel_us, tasks (on the path), segments {name: {us, n}} and the path, first
    task first: one dict a task (kind, start_us, body_us; the edge to the task before it on the path: "dependency"
    with release_us and link_us, or "program" with gap_us)."""
    from bench.dag.ws_dag import _float_trace
    t = _float_trace(trace).tolist()
    t0 = min(r[0] for r in t)
    us = [[(v - t0) / 1e3 for v in r[:4]] + [(work_done(r) - t0) / 1e3] + [(v - t0) / 1e3 for v in r[5:]] for r in t]
    prev = {}
    for idx in by_program(t):
        prev.update(zip(idx[1:], idx[:-1]))
    seg = defaultdict(lambda: [0.0, 0])

    def add(name, v):
        seg[name][0] += v
        seg[name][1] += 1
    i = max(range(len(us)), key=lambda i: us[i][4])
    end = us[i][4]
    path = []
    while True:
        start = max(us[i][5], us[i][1])
        k = KIND.get(kinds[i], str(kinds[i]))
        add("body " + k, us[i][4] - start)
        step = dict(kind=k, start_us=round(start, 3), body_us=round(us[i][4] - start, 3))
        jd = max(producers[i], key=lambda j: us[j][2]) if producers[i] else None
        jp = prev.get(i)
        if jd is not None and (jp is None or us[jd][2] >= us[jp][4]):
            add("release (done to released)", us[jd][2] - us[jd][4])
            add("link (released to start)", start - us[jd][2])
            step.update(edge="dependency", release_us=round(us[jd][2] - us[jd][4], 3),
                        link_us=round(start - us[jd][2], 3))
            i = jd
        elif jp is not None:
            add("same program (done to start)", start - us[jp][4])
            step.update(edge="program", gap_us=round(start - us[jp][4], 3))
            i = jp
        else:
            add("launch start", start)
            path.append(step)
            break
        path.append(step)
    return dict(kernel_us=end, tasks=len(path), segments={k: dict(us=v[0], n=v[1]) for k, v in seg.items()},
                path=path[::-1])


def trace_graph(rec: dict):
    """The graph a saved trace ran, rebuilt from its parameters as ``prepare`` builds it for form ws (SMs x
    ``ctas_per_sm`` programs; the SMs: the trace's programs, one an SM), its kinds checked against the trace's."""
    from kernels.dag import graph as G
    from kernels.dag import host
    case, o, programs = _trace_run(rec)
    g = G.build(case, host.tiling_for(case, o, programs), o["order"], programs)
    if [x.kind for x in g.tasks] != list(rec["kinds"]):
        raise SystemExit(f"time_split: {rec['case']}'s graph rebuilt from its parameters differs from the trace's")
    return g


def trace_tiling(rec: dict):
    """The graph.Tiling a saved trace ran, from its parameters as ``prepare`` derives it."""
    from kernels.dag import host
    return host.tiling_for(*_trace_run(rec))


def _trace_run(rec: dict) -> tuple:
    """(case, checked parameters, programs) of a saved trace."""
    from kernels import load_case
    from kernels.dag import host
    o = host.check_params(dict(rec["params"]))
    return load_case(rec["case"].removesuffix("_set")), o, trace_programs(rec, o)


def trace_sms(rec: dict) -> int:
    """The SMs a saved trace ran on: its programs (form ws: one an SM)."""
    return max(int(r[3]) >> 16 for r in rec["trace"]) + 1


def trace_programs(rec: dict, o: dict) -> int:
    """The programs a saved trace's graph was split and ordered for: ``trace_sms`` x ``ctas_per_sm`` (parameters
    ``o``)."""
    return trace_sms(rec) * o["ctas_per_sm"]


def _producers(rec: dict) -> list:
    """A saved trace's ``Graph.producers``: saved with it, or (traces saved before they were) ``trace_graph``'s."""
    return rec["producers"] if "producers" in rec else trace_graph(rec).producers


def capture(case_id, out: str, extra: dict | None = None, tag: str = "") -> str:
    """Prepare case ``case_id`` at its committed parameters (``extra`` over them) with ``trace``, run it three times,
    save the third (``trace_<case><tag>.pt``)."""
    import torch

    from bench.dag.ws_ab import require_committed
    from kernels import load_case, make_input, make_weights
    from kernels.dag import host
    case = load_case(case_id)
    params = require_committed(case, "h200", "time_split")
    w = make_weights(case, device=torch.device("cuda"))
    extra = extra or {}
    over = {k[1:]: v for k, v in extra.items() if k.startswith("@")}
    params = dict(params, **{k: v for k, v in extra.items() if not k.startswith("@")})
    if over:   # the WS kernel's constexprs (``@NAME=VALUE``), as bench.dag.ws_ab's variants
        from bench.dag.ws_ab import prepare_variant
        p = prepare_variant(case, w, dict(params, trace=True), over)
    else:
        p = host.prepare(case, w, **dict(params, tune="off", trace=True))
    x = make_input(case, 0.1, 0, device=torch.device("cuda"))
    for _ in range(3):
        host.run(p, x)
    torch.cuda.synchronize()
    rec = dict(case=case.name + tag, params=params, constexprs=over, kinds=[x.kind for x in p.graph.tasks],
               producers=[list(x) for x in p.graph.producers], steps=gemm_steps(p.meta), trace=p.trace.cpu().tolist())
    f = os.path.join(out, f"trace_{case.name}{tag}.pt")
    torch.save(rec, f + ".tmp")
    os.replace(f + ".tmp", f)
    return f


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=["12", "4"])
    ap.add_argument("--out", help="folder for the traces and time_split.json (GPU)")
    ap.add_argument("--from", dest="src", help="a folder of saved traces to split again (no GPU)")
    ap.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE",
                    help="parameters over the committed ones, @NAME=VALUE for a WS kernel constexpr (the traces "
                         "are saved as trace_<case>_set.pt)")
    a = ap.parse_args(argv)
    import torch
    if a.src is None:
        if not a.out:
            raise SystemExit("time_split: --out DIR (GPU) or --from DIR (saved traces)")
        if not torch.cuda.is_available():
            raise SystemExit("time_split: no CUDA device; pass --from DIR to split saved traces")
        os.makedirs(a.out, exist_ok=True)
        from kernels.dag.host import parse_value
        bad = [kv for kv in a.set if "=" not in kv or kv.startswith("=")]
        if bad:
            raise SystemExit(f"time_split: --set takes NAME=VALUE pairs (got {bad[0]!r})")
        extra = {k: parse_value(v) for k, _, v in (kv.partition("=") for kv in a.set)}
        files = [capture(c, a.out, extra, "_set" if extra else "") for c in a.cases]
    else:
        files = sorted(os.path.join(a.src, f) for f in os.listdir(a.src) if f.startswith("trace_") and
                       f.endswith(".pt"))
    res = {}
    for f in files:
        rec = torch.load(f)
        res[rec["case"]] = r = split(rec["trace"], rec["kinds"], {int(k): v for k, v in rec["steps"].items()})
        print(f"{rec['case']}: {r['kernel_us']:.1f} us traced, {r['programs']} programs", flush=True)
        for k, v in r["per_program_us"].items():
            print(f"  {k:22} {v:7.1f} us  {100 * r['share'][k]:5.1f}%")
        nb = step_bytes(trace_tiling(rec))
        for k, v in r["k_step"].items():
            v.update(bytes=nb[k], gbs_sm=nb[k] / v["step_us"] / 1e3,
                     gbs_all=nb[k] / v["step_us"] / 1e3 * v["concurrency"][1])
            print(f"  {k:6} K step {v['step_us']:.3f} us ({v['steps']} a task; {v['step_us_fewest']:.3f} with the "
                  f"fewest programs in a K loop, {v['step_us_most']:.3f} with the most): {nb[k] // 1024} KB, "
                  f"{v['gbs_sm']:.0f} GB/s an SM, {v['gbs_all'] / 1e3:.1f} TB/s at the median "
                  f"{v['concurrency'][1]:.0f} programs in a K loop")
        r["critical_path"] = cp = critical_path(rec["trace"], rec["kinds"], _producers(rec))
        print(f"  critical path: {cp['tasks']} tasks")
        for k, v in sorted(cp["segments"].items(), key=lambda kv: -kv[1]["us"]):
            print(f"    {k:30} {v['us']:7.1f} us  {100 * v['us'] / cp['kernel_us']:5.1f}%  ({v['n']})")
    out = a.out or a.src
    tmp = os.path.join(out, ".time_split.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(res, fh, indent=1)
    os.replace(tmp, os.path.join(out, "time_split.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
