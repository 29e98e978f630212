"""Correctness stage: every scale x seed against the fp32 reference, with the guards of SPEC §4.

Margin (SPEC §4, our variants by default: ``gate.margin``): where the gate passes, the worst error over hundreds of
unseen inputs at the case's worst scale, and over inputs with other weight seeds, must stay at or below
``gate.margin.bound`` x the tolerance; ``passed`` includes it (``gate_passed`` is the 7 scales x seeds alone).

Guards (each is a field of the result, and any failure fails the variant):
  poisoned output   the allocator's free blocks are filled with NaN before each call, so an output the
                    variant forgot to write shows up as NaN
  input unchanged   x is compared bit for bit with a copy taken before the call
  no aliasing       the output may not share storage with x or the reference (kept alive throughout)
  distinct outputs  two different inputs must give different outputs (no result reuse)
  device-wide sync  torch.cuda.synchronize() before every check, so work on a side stream is waited for
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
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


def reference_batch(case, device, cap: int) -> int:
    """How many inputs one reference call may stack along the batch (each sequence is independent, so the
    stacked naive model is the same math): at most ``cap``, and 1 where the stacked scores would not fit."""
    from dataclasses import replace

    from kernels.reference import naive_fits
    k = max(1, int(cap))
    while k > 1 and not naive_fits(replace(case, B=case.B * k), device):
        k //= 2
    return k


def _draw_inputs(case, scale: float, seeds: list[int]) -> list[torch.Tensor]:
    from kernels import make_input
    return [make_input(case, scale, s) for s in seeds]  # on the CPU: make_input draws there, then moves


def _inputs_over_tol(case, weights, run, scale: float, input_seeds: list[int], atol, rtol, device,
                     ref_batch: int, reference=None, on_result=None) -> list[tuple[int, dict]]:
    """(input seed, gate dict) per input: ``run(x)`` against the fp32 reference, references stacked
    ``ref_batch`` inputs at a time (the reference runs once per input). The next batch's inputs are drawn on a CPU
    thread while the device works on this one (``make_input`` draws on the CPU: ~0.7 s for case 14's 64 M values).
    ``on_result(seed, gate dict)`` is called as each input is checked."""
    from concurrent.futures import ThreadPoolExecutor

    from kernels import gate, reference_forward
    reference = reference or reference_forward
    out = []
    batches = [input_seeds[i:i + ref_batch] for i in range(0, len(input_seeds), ref_batch)]
    if not batches:
        return out
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_draw_inputs, case, scale, batches[0])
        for j, seeds in enumerate(batches):
            xs = [x.to(device) for x in pending.result()]
            if j + 1 < len(batches):
                pending = pool.submit(_draw_inputs, case, scale, batches[j + 1])
            refs = reference(case, weights, torch.cat(xs)).split(case.B) if len(xs) > 1 else \
                [reference(case, weights, xs[0])]
            for s, x, ref in zip(seeds, xs, refs):
                y = run(x)
                sync(device)
                r = gate(y, ref, atol=atol, rtol=rtol).to_dict()
                out.append((s, r))
                if on_result is not None:
                    on_result(s, r)
                del y
            del xs, refs
    return out


def _source_digest() -> str:
    """sha256 of the Python sources under kernels/ and workflow/ and the yaml under config/: a margin progress file
    from other code is never resumed, even at the same commit (a dirty tree, a stale $MKH_GIT_COMMIT)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for pattern in ("kernels/**/*.py", "workflow/**/*.py", "config/**/*.yaml"):
        for f in sorted(root.glob(pattern)):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _job_key(case, variant, params, device, **more) -> str:
    """The key of a correctness job's hidden progress files: commit, source digest, case, variant, parameters and
    device (with ``more``), hashed; a file under another key is never resumed."""
    from .common import git_commit
    key = {"commit": git_commit(), "sources": _source_digest(), "case": case.name, "variant": variant.name,
           "params": params, "device": str(device),
           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", **more}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _beside(out_path, suffix: str) -> Path:
    """A hidden file beside the result ``out_path`` (``.<stem><suffix>``, never a ``*.json`` result of the stage)."""
    out_path = Path(out_path)
    return out_path.with_name(f".{out_path.stem}{suffix}")


class MarginProgress:
    """The finished margin inputs of one correctness job, one JSON line each, beside its result (a hidden
    ``.<variant>.margin-progress.jsonl``, never a result file): a job stopped by a time limit resumes on its re-run
    instead of starting over (case 14's 448 inputs take ~15 minutes on one H200). The first line is the job's key —
    commit, source digest, case, variant, parameters, scale, tolerance, margin settings, gate seeds, device; lines
    under another key are ignored and the file is started again. A torn last line (a job killed mid-write) is
    ignored. ``done()`` removes the file once the check is complete."""

    def __init__(self, path, key: str):
        self.path = Path(path)
        self.key = key
        self.rows: dict[tuple[int, int], dict] = {}
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            lines = []
        if lines and self._load(lines[0]).get("key") == self.key:
            for line in lines[1:]:
                row = self._load(line)
                if not {"weight_seed", "input_seed", "result"} <= set(row):
                    break
                self.rows[(int(row["weight_seed"]), int(row["input_seed"]))] = row["result"]
        self.resumed = len(self.rows)
        # start the file again with the rows kept (a torn line dropped, so the rows appended next stay readable)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in [{"key": self.key}] + [
            {"weight_seed": w, "input_seed": i, "result": res} for (w, i), res in self.rows.items()]))
        tmp.replace(self.path)

    @staticmethod
    def _load(line: str) -> dict:
        try:
            row = json.loads(line)
        except ValueError:
            return {}
        return row if isinstance(row, dict) else {}

    def add(self, weight_seed: int, input_seed: int, result: dict) -> None:
        """Keep one finished input (appended and synced: a kill loses at most the line being written)."""
        self.rows[(weight_seed, input_seed)] = result
        with open(self.path, "a") as f:
            f.write(json.dumps({"weight_seed": weight_seed, "input_seed": input_seed, "result": result}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def done(self) -> None:
        self.path.unlink(missing_ok=True)


class GateRecord:
    """The gate's verdict of one correctness job whose margin check is under way, beside its result (a hidden
    ``.<variant>.gate-progress.json``, never a result file): the re-run of a job stopped in its margin check takes the
    gate's record from here instead of running the 7 scales x seeds again (case 14: ~80 s of every resumed call).
    Kept only under the job's key — commit, source digest, case, variant, parameters, gate settings, device — and
    removed with the margin progress once the job is complete."""

    def __init__(self, path, key: str):
        self.path = Path(path)
        self.key = key

    def load(self) -> dict | None:
        try:
            rec = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return rec.get("body") if isinstance(rec, dict) and rec.get("key") == self.key else None

    def save(self, body: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"key": self.key, "body": body}, default=str))
        tmp.replace(self.path)

    def done(self) -> None:
        self.path.unlink(missing_ok=True)


def gate_record_path(out_path):
    """Where the correctness job for ``out_path`` keeps its gate record while its margin check runs."""
    return _beside(out_path, ".gate-progress.json")


def margin_progress_path(out_path):
    """Where the correctness job for ``out_path`` keeps its margin progress."""
    return _beside(out_path, ".margin-progress.jsonl")


def margin_check(case, weights, variant, prepared, params: dict, scale: float, mcfg, gate_seeds, atol, rtol,
                 device, reference=None, progress_path=None) -> dict:
    """SPEC §4's margin rule: the worst error over ``mcfg.inputs`` unseen inputs at ``scale`` (the case's
    weights) and ``mcfg.inputs_per_weight_seed`` inputs with each other weight seed (``case.weight_seed`` +
    each of ``mcfg.weight_seed_offsets``) must stay at or below ``mcfg.bound`` x the tolerance. The other
    weights run the same configuration (``Variant.rebind``). Records the max and p99 of error / tolerance
    and the worst input (scale, input seed, weight seed). With ``progress_path`` (and ``mcfg.resume``) each
    finished input is kept there, and the inputs an interrupted run of the same job finished are not run again
    (``MarginProgress``; the record's ``resumed_inputs`` says how many)."""
    from omegaconf import OmegaConf

    from kernels import make_weights
    from kernels.timing import quantile
    seed0, n_in, n_w = int(mcfg.input_seed), int(mcfg.inputs), int(mcfg.inputs_per_weight_seed)
    input_seeds = list(range(seed0, seed0 + max(n_in, n_w)))
    clash = sorted(set(input_seeds) & {int(s) for s in gate_seeds})
    if clash:
        raise ValueError(f"gate.margin.input_seed={seed0}: margin inputs {clash} are the gate's own seeds; "
                         "the margin check needs unseen inputs (start above the gate's seeds)")
    k = reference_batch(case, device, int(mcfg.ref_batch))
    progress = None
    if progress_path is not None and bool(getattr(mcfg, "resume", True)):
        mc = OmegaConf.to_container(mcfg, resolve=True) if OmegaConf.is_config(mcfg) else dict(mcfg)
        progress = MarginProgress(progress_path, _job_key(
            case, variant, params, device, scale=scale, atol=atol, rtol=rtol, margin=mc,
            gate_seeds=[int(s) for s in gate_seeds]))
        if progress.resumed:
            log(f"  margin {case.name} {variant.name}: resuming, {progress.resumed} inputs finished by an interrupted "
                f"run of this job ({progress.path})")
    t0 = time.time()
    rows = []  # (weight seed, input seed, gate dict)
    plan = [(case.weight_seed, weights, prepared, n_in)]
    plan += [(case.weight_seed + int(off), None, None, n_w) for off in mcfg.weight_seed_offsets]
    for wseed, w, p, n in plan:
        if n <= 0:
            continue
        seeds = input_seeds[:n]
        got = {s: progress.rows[(wseed, s)] for s in seeds if (wseed, s) in progress.rows} if progress else {}
        resumed = len(got)
        if len(got) < n:
            if w is None:
                w = make_weights(case, seed=wseed, device=device)
                p = variant.rebind(prepared, w) if variant.rebind is not None else variant.prepare(case, w, **params)
            add = (lambda s, r, ws=wseed: progress.add(ws, s, r)) if progress else None
            got.update(_inputs_over_tol(case, w, lambda x: variant.run(p, x), scale,
                                        [s for s in seeds if s not in got], atol, rtol, device, k, reference,
                                        on_result=add))
        res = [(s, got[s]) for s in seeds]
        rows += [(wseed, s, r) for s, r in res]
        worst_w = max(r["max_over_tol"] for _, r in res)
        log(f"  margin {case.name} {variant.name} weight seed {wseed}: {n} inputs at scale {scale:g}"
            f"{f' ({resumed} resumed)' if resumed else ''}, worst {worst_w:.3f} x tolerance [{time.time() - t0:.0f}s]")
        del p, w
    if not rows:
        raise ValueError("gate.margin: no inputs to check (inputs and inputs_per_weight_seed are 0); set "
                         "gate.margin.enabled=false to skip the margin check")
    over = [r["max_over_tol"] for _, _, r in rows]
    wseed, iseed, wr = max(rows, key=lambda t: t[2]["max_over_tol"])
    bound = float(mcfg.bound)
    per_w = {}
    for ws, _, r in rows:
        per_w[str(ws)] = max(per_w.get(str(ws), 0.0), r["max_over_tol"])
    passed = max(over) <= bound
    out = {"passed": passed, "bound": bound, "scale": scale, "n_inputs": len(rows), "ref_batch": k,
           "max_over_tol": max(over), "p99_over_tol": quantile(over, 0.99), "median_over_tol": quantile(over, 0.5),
           "gate_failures": sum(1 for _, _, r in rows if not r["passed"]),
           "worst": {"scale": scale, "input_seed": iseed, "weight_seed": wseed, "max_over_tol": wr["max_over_tol"],
                     "max_abs": wr["max_abs"], "reason": wr["reason"]},
           "max_over_tol_per_weight_seed": per_w, "seconds": time.time() - t0,
           "resumed_inputs": progress.resumed if progress else 0,
           "reason": "" if passed else (f"margin check failed: worst error {max(over):.3f} x tolerance > {bound:g} "
                                        f"(scale {scale:g}, input seed {iseed}, weight seed {wseed})")}
    if progress:
        progress.done()
    return out


def wants_margin(mcfg, kind: str) -> bool:
    """Does the margin check run for a variant of ``kind`` (``gate.margin``: enabled, kinds)?"""
    return mcfg is not None and bool(getattr(mcfg, "enabled", True)) and kind in list(getattr(mcfg, "kinds", []) or [])


def job(ctx) -> dict:
    """The correctness job for one case x variant (``ctx``: workflow.run.JobContext): the gate, then the margin check
    (our variants, where the gate passes). A variant that searched in ``prepare`` (``tune=search``:
    ``Variant.alternates``) has every candidate it chose among gated too, and passes only if all pass."""
    cfg = ctx.cfg
    args = (list(cfg.gate.scales), list(cfg.gate.seeds), float(cfg.gate.atol), float(cfg.gate.rtol), ctx.device)
    mcfg = getattr(cfg.gate, "margin", None)
    margin = wants_margin(mcfg, ctx.variant.kind)
    record = None
    if margin and ctx.out_path is not None and bool(getattr(mcfg, "resume", True)):
        from omegaconf import OmegaConf
        record = GateRecord(gate_record_path(ctx.out_path), _job_key(
            ctx.case, ctx.variant, OmegaConf.to_container(cfg.variant.params, resolve=True), ctx.device,
            gate=[list(cfg.gate.scales), list(cfg.gate.seeds), float(cfg.gate.atol), float(cfg.gate.rtol)]))
    body = record.load() if record is not None else None
    if body is not None:
        log(f"  {ctx.case.name} {ctx.variant.name}: the gate's record from an interrupted run of this job "
            f"({record.path}; {'pass' if body['passed'] else 'FAIL'}), on to the margin check")
        body["gate_resumed"] = True
    else:
        body = _gate(ctx, args)
        if record is not None and body["passed"]:
            record.save(body)
    if margin:
        if body["passed"]:
            from omegaconf import OmegaConf
            params = OmegaConf.to_container(cfg.variant.params, resolve=True) or {}
            out_path = ctx.out_path
            m = margin_check(ctx.case, ctx.weights, ctx.variant, ctx.prepared, params, float(body["worst"]["scale"]),
                             mcfg, list(cfg.gate.seeds), float(cfg.gate.atol), float(cfg.gate.rtol), ctx.device,
                             progress_path=margin_progress_path(out_path) if out_path is not None else None)
            body["margin"] = m
            if not m["passed"]:
                body["passed"] = False
                body["reason"] = "; ".join(x for x in (body["reason"], m["reason"]) if x)
        else:
            body["margin"] = {"passed": None, "reason": "not run: the gate failed"}
    if record is not None:
        record.done()
    body["gate_passed"] = all(r["passed"] for r in body["results"])
    from kernels.reference import naive_fits
    body["reference"] = "naive" if naive_fits(ctx.case, ctx.device) else "chunked"
    body["tolerance"] = {"atol": float(cfg.gate.atol), "rtol": float(cfg.gate.rtol)}
    return body


def _gate(ctx, args) -> dict:
    """The gate of ``job``: every scale x seed, and every autotuning candidate the variant chose among."""
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
    return body
