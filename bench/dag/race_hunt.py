"""Hunt the race that gave case 12's cooperative form non-finite outputs (lab; docs/dag-results.md "Results" 49, 50).

The margin check at `bfeb2bd` found 2 of 448 inputs whose output held a whole sequence of non-finite values, where
the same inputs were finite in two earlier runs of the same kernel. This runs the withdrawn form (``withdrawn_form``,
`72ddb83`'s tuned choice; ``--tuned GPU`` a case's committed form) over the margin check's inputs again and again,
optionally beside other processes loading the GPU, and for each launch whose output is not finite records where:
the sequences and rows of the output, and the non-finite elements left in every scratch buffer of the launch (the
per-layer q / k / v copies by layer, part and sequence; the residual and the split A operands, whose last writer is
the last layer, with their first positions), which says the first stage the non-finite values reach; then it runs
the input again. GPU only to run; ``summarize`` is plain torch. It found the fault ("Results" 50) with four hunts at
once on one GPU and ``--ref-batch 32`` (alone it never failed): the form's unused q mbarriers lay in a consumer's
layout-conversion scratch, fixed in `b204ec6`; on the fix the same hunt ran clean ("Results" 51: 284 646 launches).

Two poisons make a missed write visible where a re-run would hide it (a stale value from the previous launch is
finite, and with the same input it is even right): ``--poison-output`` fills output-sized free blocks of the caching
allocator with NaN before each launch (as the correctness stage's gate does; the margin check does not), so a
sequence the kernel did not write comes back NaN; ``--poison-scratch`` fills every scratch buffer with NaN before each
launch, so a read of a scratch value before this launch wrote it gives NaN where it is read.

    python -m bench.dag.race_hunt --out DIR --reps 20 --load 3        # ~448 launches a rep, ~0.25 ms each
    python -m bench.dag.race_hunt --out DIR --param ws_consumers=1 --param block_m=64   # a control
    python -m bench.dag.race_hunt --out DIR --poison-output --poison-scratch --seconds 60
    python -m bench.dag.race_hunt --out DIR --ref-batch 32 --load 3   # the margin check's pattern: reference, launches
    for k in 1 2 3 4; do python -m bench.dag.race_hunt --out DIR$k --reps 400 --poison-output --ref-batch 32 \
        --compare 1e-3 --seconds 160 & done; wait                       # four at once: how "Results" 50 found it
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

SCRATCH = ("r_ptr", "ln1_hi_ptr", "ln1_lo_ptr", "qkv_hi_ptr", "qkv_lo_ptr", "att_hi_ptr", "att_lo_ptr", "ln2_hi_ptr",
           "ln2_lo_ptr", "f_hi_ptr", "f_lo_ptr")
# a GEMM loop for the background processes (the other correctness jobs of the failing run)
LOAD = ("import torch, time\na = torch.randn(8192, 8192, device='cuda')\nt = time.time()\n"
        "while time.time() - t < {s}:\n    a = (a @ a).clamp_(-1, 1)\n    torch.cuda.synchronize()\n")


def _bad(t: torch.Tensor) -> torch.Tensor:
    return ~torch.isfinite(t.float())


POSITIONS = 32


def _first(m: torch.Tensor) -> list:
    """The indices of the first ``POSITIONS`` true elements of ``m`` (flat for a vector)."""
    idx = torch.nonzero(m)[:POSITIONS]
    return idx.flatten().tolist() if m.dim() == 1 else idx.tolist()


def differ(y: torch.Tensor, ref: torch.Tensor, limit: float) -> dict:
    """Where ``y`` and ``ref`` ([.., D]) differ by more than ``limit`` over the elements finite in both: how many, the
    largest difference, the first rows (of the flattened [.., D]) and columns."""
    ok = torch.isfinite(y) & torch.isfinite(ref)
    d = (y - ref).abs().where(ok, torch.zeros_like(y)).reshape(-1, y.shape[-1])
    over = d > limit
    return {"elements": int(over.sum()), "max_abs": float(d.max()), "rows": _first(over.any(1)),
            "columns": _first(over.any(0))}


def summarize(y: torch.Tensor, tensors: dict, B: int) -> dict:
    """Where a launch's non-finite values are: the output's count and sequences (``y`` [B, S, D]); per scratch
    buffer of ``tensors`` (``SCRATCH`` names) its count, and for the q / k / v copies ([L, 3, B, H, S, dh]) the
    counts by (layer, part, sequence), for the row-major [M, ...] buffers by sequence (M = B·S rows); the first
    ``POSITIONS`` non-finite elements' indices of every buffer and the output's non-finite rows (of B·S)."""
    bad_y = _bad(y)
    out = {"y": int(bad_y.sum()), "y_sequences": [b for b in range(B) if bool(bad_y[b].any())],
           "y_rows": _first(bad_y.reshape(-1, bad_y.shape[-1]).any(1)), "buffers": {}}
    for name in SCRATCH:
        t = tensors.get(name)
        if t is None or t.numel() == 0:
            continue
        m = _bad(t)
        rec = {"count": int(m.sum())}
        if rec["count"]:
            if name.startswith("qkv") and t.dim() == 6:
                rec["by_layer_part_sequence"] = {f"{l}/{'qkv'[p]}/{b}": int(m[l, p, b].sum())
                                                 for l in range(t.shape[0]) for p in range(3) for b in range(t.shape[2])
                                                 if bool(m[l, p, b].any())}
            else:
                rows = m.reshape(-1, m.shape[-1]) if m.dim() == 2 else m.reshape(m.shape[0], -1, m.shape[-1])
                seq = rows.shape[-2] // B
                lead = rows if rows.dim() == 2 else rows.any(0)
                rec["sequences"] = [b for b in range(B) if bool(lead[b * seq:(b + 1) * seq].any())]
            rec["positions"] = _first(m)
        out["buffers"][name] = rec
    return out


def poison_scratch(tensors: dict) -> None:
    """Fill every scratch buffer of a prepared launch (``SCRATCH`` names in ``tensors``) with NaN (the fp8 parts with
    their NaN code)."""
    for name in SCRATCH:
        t = tensors.get(name)
        if t is not None and t.numel():
            t.fill_(float("nan"))


def withdrawn_form() -> dict:
    """Case 12's tuned choice at `72ddb83`, withdrawn at `bfeb2bd`: the first cooperative candidate of
    ``config/search/dag-ws-coop.yaml`` (two consumers), the one the tune stage chose there."""
    from kernels.tuning import search_space
    return next(c for c in search_space("dag", "dag-ws-coop") if c.get("ws_consumers") == 2)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--case", default="12")
    ap.add_argument("--param", action="append", default=[], help="name=value over the withdrawn form (withdrawn_form)")
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--weight-seeds", type=int, nargs="+", default=[12, 3012])
    ap.add_argument("--inputs", type=int, nargs=2, default=[100, 356], metavar=("FIRST", "END"),
                    help="input seeds FIRST .. END-1 (the margin check's: 100 .. 355)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--load", type=int, default=0, help="background processes running a GEMM loop")
    ap.add_argument("--seconds", type=float, default=240,
                    help="stop this long after the first prepare (and the load with it)")
    ap.add_argument("--max-records", type=int, default=20, help="non-finite launches summarized (the rest counted)")
    ap.add_argument("--poison-output", action="store_true", help="NaN in output-sized free blocks before each launch")
    ap.add_argument("--poison-scratch", action="store_true", help="NaN in every scratch buffer before each launch")
    ap.add_argument("--tuned", metavar="GPU", help="hunt the case's committed tuned form for GPU "
                    "(config/tuned/GPU/caseNN.yaml) in place of the withdrawn form (--param over it)")
    ap.add_argument("--compare", type=float, default=0.0, metavar="ABS",
                    help="keep each input's first finite output and record every later launch of it that differs by "
                         "more than ABS (wrong but finite values, which the non-finite check misses); 0: off")
    ap.add_argument("--ref-batch", type=int, default=0,
                    help="before every K-th input, the fp32 reference on the next K inputs stacked, as the margin "
                         "check runs it (the failing input, seed 196, was the first after such a batch); 0: none")
    a = ap.parse_args(argv)
    from bench.seqres.aot_check import parse_params
    from workflow.stages.common import write_json_atomic
    from workflow.stages.correctness import _poison_allocator
    from kernels import get_variant, load_case, make_input, make_weights, reference_forward
    case, dev = load_case(a.case), torch.device("cuda")
    if a.tuned:
        from bench.dag.ws_ab import require_committed
        form = require_committed(case, a.tuned, "race_hunt")
    else:
        form = withdrawn_form()
    params = {**form, **parse_params(a.param)}
    var = get_variant("dag")
    loads, t_end = [], None
    found, launches, baseline, n_bad = [], 0, None, 0
    seen, differing, n_differ = {}, [], 0   # --compare: each input's first finite output; the launches that differ
    try:
        first = None
        for ws in a.weight_seeds:   # the first weight seed prepared, the others rebound to it (as the margin check)
            w = make_weights(case, seed=ws, device=dev)
            # tune off: exactly this form (on a GPU with a tuned file, `committed` would merge that file's choice in)
            p = var.prepare(case, w, **params, tune="off") if first is None else var.rebind(first, w)
            first = first or p
            if t_end is None:   # the clock (and the load) from the first prepare on: its compile is not hunting time
                loads = [subprocess.Popen([sys.executable, "-c", LOAD.format(s=a.seconds + 60)])
                         for _ in range(a.load)]
                t_end = time.time() + a.seconds
            inner = getattr(p, "inner", p)
            xs = {s: make_input(case, a.scale, s, device=dev) for s in range(*a.inputs)}
            stacked = list(xs.values())
            for rep in range(a.reps):
                for i, (s, x) in enumerate(xs.items()):
                    if a.ref_batch and i % a.ref_batch == 0:   # result dropped: its memory free for y, as there
                        reference_forward(case, w, torch.cat(stacked[i:i + a.ref_batch]))
                    if a.poison_scratch:
                        poison_scratch(inner.tensors)
                    if a.poison_output:
                        _poison_allocator(x.numel(), dev)
                    y = var.run(p, x)
                    torch.cuda.synchronize()
                    launches += 1
                    if launches == 1:   # what a launch leaves NaN by design (scratch it never writes) under poison
                        baseline = summarize(y, inner.tensors, case.B)
                        print("first launch:", json.dumps(baseline), flush=True)
                    finite = bool(torch.isfinite(y).all())
                    where = dict(weight_seed=ws, input_seed=s, rep=rep, launch=launches)
                    if a.compare and finite:
                        ref = seen.get((ws, s))
                        if ref is None:
                            seen[(ws, s)] = y.clone()
                        elif (rec := differ(y, ref, a.compare))["elements"]:
                            n_differ += 1
                            if len(differing) < a.max_records:
                                rec = {**where, **rec}
                                differing.append(rec)
                                print("differs:", json.dumps(rec), flush=True)
                    if not finite:
                        n_bad += 1
                        if len(found) < a.max_records:
                            rec = {**where, **summarize(y, inner.tensors, case.B)}
                            y2 = var.run(p, x)   # the same input again: is the rest of y right, and is it repeatable
                            torch.cuda.synchronize()
                            rec["rerun"] = {"non_finite": int(_bad(y2).sum()), **differ(y, y2, 0.002)}
                            found.append(rec)
                            print(json.dumps(rec), flush=True)
                    if time.time() > t_end:
                        break
                print(f"weight seed {ws} rep {rep}: {launches} launches, {n_bad} non-finite", flush=True)
                if time.time() > t_end:
                    break
    finally:
        for q in loads:
            q.kill()
    res = dict(case=case.name, params=params, tuned=a.tuned, scale=a.scale, load=a.load,
               poison_output=a.poison_output, poison_scratch=a.poison_scratch, ref_batch=a.ref_batch,
               first_launch=baseline, launches=launches, non_finite_launches=n_bad, non_finite=found,
               compare=a.compare, differing_launches=n_differ, differing=differing,
               device=torch.cuda.get_device_name(dev))
    path = write_json_atomic(os.path.join(a.out, "race_hunt.json"), res)
    print(f"{launches} launches, {n_bad} with non-finite outputs ({len(found)} recorded)"
          f"{f', {n_differ} differing from the first output by > {a.compare:g}' if a.compare else ''} -> {path}")


if __name__ == "__main__":
    main()
