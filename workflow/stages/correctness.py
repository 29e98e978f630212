"""Correctness stage: every scale x seed against the fp32 reference, with the guards of SPEC §4.

Guards (each is a field of the result, and any failure fails the variant):
  poisoned output   the allocator's free blocks are filled with NaN before each call, so an output the
                    variant forgot to write shows up as NaN
  input unchanged   x is compared bit for bit with a copy taken before the call
  no aliasing       the output may not share storage with x or the reference (kept alive throughout)
  distinct outputs  two different inputs must give different outputs (no result reuse)
  device-wide sync  torch.cuda.synchronize() before every check, so work on a side stream is waited for
"""
from __future__ import annotations

import time
from typing import Any

import torch

from .common import log, sync


def _poison_allocator(numel: int, device, copies: int = 4) -> None:
    """Fill ``copies`` output-sized blocks with NaN and free them: the caching allocator hands them out next."""
    if device.type != "cuda":
        return
    blocks = [torch.full((numel,), float("nan"), device=device) for _ in range(copies)]
    del blocks


def _storage_overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, a1 = sa.data_ptr(), sa.data_ptr() + sa.nbytes()
    b0, b1 = sb.data_ptr(), sb.data_ptr() + sb.nbytes()
    return a0 < b1 and b0 < a1


def check_variant(case, weights, variant, prepared, scales, seeds, atol, rtol, device,
                  reference=None) -> dict[str, Any]:
    """Run ``variant`` at every scale x seed; returns {'passed', 'results', 'guards', 'worst', 'reason'}.

    ``reference(case, weights, x) -> ref`` defaults to kernels.reference_forward.
    """
    from kernels import gate, make_input, reference_forward
    reference = reference or reference_forward
    results, problems = [], []
    guards = {"input_unchanged": True, "no_alias": True, "distinct_outputs": True, "finite": True,
              "poisoned_allocator": device.type == "cuda"}
    n = len(scales) * len(seeds)
    t0 = time.time()
    for i_scale, scale in enumerate(scales):
        prev_out = None
        for seed in seeds:
            x = make_input(case, scale, seed, device=device)
            ref = reference(case, weights, x)                  # kept alive while the variant runs
            x_before = x.clone()
            _poison_allocator(ref.numel(), device)
            out = variant.run(prepared, x)
            sync(device)
            r = gate(out, ref, atol=atol, rtol=rtol).to_dict()
            r.update(scale=scale, seed=seed)
            if not torch.equal(x, x_before):
                guards["input_unchanged"] = False
                r["passed"] = False
                r["reason"] = (r["reason"] + "; " if r["reason"] else "") + "variant modified its input"
            if isinstance(out, torch.Tensor) and (_storage_overlaps(out, x) or _storage_overlaps(out, ref)):
                guards["no_alias"] = False
                r["passed"] = False
                r["reason"] = (r["reason"] + "; " if r["reason"] else "") + "output aliases input/reference memory"
            if r["max_abs"] == float("inf"):
                guards["finite"] = False
            if isinstance(out, torch.Tensor) and out.shape == ref.shape:
                out_copy = out.detach().clone()  # cudagraph outputs are overwritten by the next replay
                if prev_out is not None and torch.equal(prev_out, out_copy):
                    guards["distinct_outputs"] = False
                    r["passed"] = False
                    r["reason"] = (r["reason"] + "; " if r["reason"] else "") + \
                        "same output for a different input (result reuse)"
                prev_out = out_copy
            results.append(r)
            del out, ref, x, x_before
            k = len(results)
            log(f"  {case.name} {variant.name} scale={scale:g} seed={seed}: "
                f"{'pass' if r['passed'] else 'FAIL'} max_abs={r['max_abs']:.3g} "
                f"over_tol={r['max_over_tol']:.3g} [{k}/{n}, {time.time() - t0:.0f}s]")
    worst = max(results, key=lambda r: (r["max_over_tol"], r["max_abs"]))
    passed = all(r["passed"] for r in results)
    if not passed:
        bad = [r for r in results if not r["passed"]]
        problems.append(f"{len(bad)}/{len(results)} scale x seed checks failed; worst at scale "
                        f"{worst['scale']:g} seed {worst['seed']}: {worst['reason'] or 'out of tolerance'}")
    return {"passed": passed, "results": results, "guards": guards,
            "worst": {k: worst[k] for k in ("scale", "seed", "max_abs", "max_rel", "max_over_tol",
                                            "frac_failing", "reason")},
            "reason": "; ".join(problems)}


def job(ctx) -> dict:
    """The correctness job for one case x variant (``ctx``: workflow.run.JobContext). A variant that autotuned
    in ``prepare`` (``Variant.alternates``) has every candidate it chose among gated too, and passes only if all
    pass: the timing and profiling jobs autotune on their own and may pick another one."""
    cfg = ctx.cfg
    args = (list(cfg.gate.scales), list(cfg.gate.seeds), float(cfg.gate.atol), float(cfg.gate.rtol), ctx.device)
    body = check_variant(ctx.case, ctx.weights, ctx.variant, ctx.prepared, *args)
    if ctx.variant.alternates is not None:
        alts = ctx.variant.alternates(ctx.prepared, ctx.weights)
        if alts:
            log(f"  gating the {len(alts)} other autotuning candidates")
        body["alternates"] = []
        for label, make in alts:
            prepared = make()
            r = check_variant(ctx.case, ctx.weights, ctx.variant, prepared, *args)
            body["alternates"].append({"params": label, "passed": r["passed"], "worst": r["worst"],
                                       "reason": r["reason"]})
            del prepared
            if not r["passed"]:
                body["passed"] = False
                body["reason"] = "; ".join(x for x in (body["reason"], f"autotuning candidate {label} failed the "
                                                       f"gate ({r['reason']}): fix it or drop it from tune") if x)
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
    from kernels.reference import naive_fits
    body["reference"] = "naive" if naive_fits(ctx.case, ctx.device) else "chunked"
    body["tolerance"] = {"atol": float(cfg.gate.atol), "rtol": float(cfg.gate.rtol)}
    return body
