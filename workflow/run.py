"""The one job entry: ``python -m workflow.run stage=<tune|correctness|timing|ncu> case=<name> variant=<name>
gpu=<type> [out=<path>] [any Hydra override]``.

Composes the config, runs one stage for one case x variant in this process, and writes the stage's
JSON atomically. A variant that cannot run (unsupported case, out of memory, an exception in its code)
still writes a result saying so (``status`` != "ok", ``passed`` false); a bad config fails before any
work with a message naming the valid choices, and writes nothing.
"""
from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

STAGES = ("tune", "correctness", "timing", "ncu")
SCHEMA = {"correctness": "mkh.correctness/1", "timing": "mkh.timing/1", "ncu": "mkh.ncu/1"}
TUNED_FAMILIES = ("auto", "seqres", "hybrid", "dag")  # variants that take tune / tuned_file


@dataclass
class JobContext:
    cfg: DictConfig
    case: Any
    weights: Any
    variant: Any
    variant_impl: str
    prepared: Any
    device: Any


def result_path(cfg: DictConfig) -> Path:
    """Where this job's JSON goes: ``out=`` or outputs/[tag/<tag>/]<stage>/<gpu>/<case>/<variant>.json."""
    if cfg.out:
        return Path(cfg.out)
    root = Path(cfg.output_root)
    if cfg.tag:
        root = root / "tag" / str(cfg.tag)
    ext = "yaml" if cfg.stage == "tune" else "json"
    stage = "tuned" if cfg.stage == "tune" else cfg.stage
    return root / stage / cfg.gpu.name / cfg.case.name / f"{cfg.variant.name}.{ext}"


def validate(cfg: DictConfig) -> None:
    if cfg.stage not in STAGES:
        raise SystemExit(f"error: unknown stage {cfg.stage!r}; valid: {', '.join(STAGES)}")
    if cfg.gpu.device == "cpu" and not cfg.case.get("smoke", False) and not cfg.get("allow_cpu_full", False):
        raise SystemExit(f"error: case {cfg.case.name} is a full-size case; gpu=cpu runs smoke cases only "
                         "(case=smoke1|smoke2|smoke3). Use a GPU type (gpu=local|h200|...) for it.")
    if cfg.stage == "ncu" and cfg.gpu.device != "cuda":
        raise SystemExit("error: the ncu stage needs a CUDA GPU (gpu=local|h200|h100_96|...), not gpu=cpu")
    if cfg.stage == "tune" and cfg.variant.impl not in TUNED_FAMILIES:
        raise SystemExit(f"error: the tune stage is for our kernel families ({', '.join(TUNED_FAMILIES)}), not "
                         f"variant {cfg.variant.name!r}")


def header(cfg: DictConfig) -> dict:
    return {"schema": SCHEMA[cfg.stage], "stage": cfg.stage, "case": cfg.case.name,
            "variant": cfg.variant.name, "impl": cfg.variant.impl, "gpu": cfg.gpu.name,
            "tag": cfg.tag or "", "params": OmegaConf.to_container(cfg.variant.params, resolve=True)}


def gpu_environment(cfg: DictConfig) -> None:
    """What the GPU type sets before the first import of Triton: the interpreter on ``gpu=cpu``, and the compile
    cache directory ``gpu.triton_cache_dir`` (one cache for the jobs of a node or of a shared filesystem; a variable
    already set in the job's environment wins)."""
    if cfg.gpu.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    cache = cfg.gpu.get("triton_cache_dir")
    if cache:
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.expandvars(os.path.expanduser(str(cache))))


def tune_job(cfg: DictConfig) -> dict:
    """The tune stage (``workflow/stages/tune.py``): committed -> copy the GPU type's tuned file; search -> search
    on this GPU. Writes ``result_path(cfg)`` (YAML) atomically; a failure writes nothing and exits non-zero."""
    from kernels import Unsupported, get_variant, load_case, make_weights
    from .stages import tune
    from .stages.common import log, resolve_device
    mode = cfg.variant.params.get("tune", "committed")
    case = load_case(cfg.case.name)
    out_path = result_path(cfg)
    log(f"tune ({mode}): {case.name} x {cfg.variant.name} on {cfg.gpu.name} -> {out_path}")
    if mode == "search":
        device = resolve_device(cfg.gpu.device)
        weights = make_weights(case, device=device)
        params = OmegaConf.to_container(cfg.variant.params, resolve=True) or {}
        try:
            prepared = get_variant(cfg.variant.impl).prepare(case, weights, **params)
        except Unsupported as e:
            blocks, header = {}, f"{case.name}: {cfg.variant.name} does not run this case ({e})"
        else:
            blocks, header = tune.search(JobContext(cfg, case, weights, None, cfg.variant.impl, prepared, device))
    elif mode == "committed":
        device = resolve_device(cfg.gpu.device) if cfg.gpu.name == "local" else None
        try:
            blocks, header = tune.committed(cfg, case, device)
        except ValueError as e:
            raise SystemExit(f"error: {e}") from None
    else:
        blocks, header = {}, f"{case.name}: tune=off: the parameters as given"
    tune.write(out_path, blocks, header)
    log(f"wrote {out_path}")
    return {"blocks": blocks, "header": header}


def run_job(cfg: DictConfig) -> dict:
    """Run the configured stage; returns the result record (also written to ``result_path(cfg)``)."""
    validate(cfg)
    gpu_environment(cfg)
    if cfg.stage == "tune":
        return tune_job(cfg)
    import torch
    from kernels import Unsupported, get_variant, load_case, make_weights
    from .stages import correctness, timing
    from .stages.common import environment, log, resolve_device, write_json_atomic

    t0 = time.time()
    device = resolve_device(cfg.gpu.device)
    case = load_case(cfg.case.name)
    variant = get_variant(cfg.variant.impl)
    params = OmegaConf.to_container(cfg.variant.params, resolve=True) or {}
    out_path = result_path(cfg)
    rec = header(cfg)
    rec["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    log(f"{cfg.stage}: {case.name} x {cfg.variant.name} on {cfg.gpu.name} ({device}) -> {out_path}")
    weights = make_weights(case, device=device)
    status, reason, body = "ok", "", {}
    try:
        t_prep = time.time()
        prepared = variant.prepare(case, weights, **params)
        rec["prepare_s"] = time.time() - t_prep
        info = getattr(getattr(prepared, "inner", prepared), "info", None)
        if isinstance(info, dict):  # e.g. the autotuned choice of seqres (its candidates, times, pick)
            rec["prepare_info"] = json.loads(json.dumps(info, default=str))
        ctx = JobContext(cfg, case, weights, variant, cfg.variant.impl, prepared, device)
        if cfg.stage == "correctness":
            body = correctness.job(ctx)
        elif cfg.stage == "timing":
            body = timing.job(ctx)
        else:
            from .stages import ncu
            body = ncu.job(ctx, out_path)
    except Unsupported as e:
        status, reason = "unsupported", str(e)
    except torch.cuda.OutOfMemoryError as e:
        status, reason = "oom", str(e).splitlines()[0][:500] if str(e) else "out of memory"
    except TypeError as e:
        if "unexpected keyword" in str(e) or "got an unexpected" in str(e):
            raise SystemExit(f"error: variant {cfg.variant.impl!r} rejects a parameter: {e}. "
                             f"Its parameters are the fields of config/variant/{cfg.variant.impl}.yaml.")
        status, reason = "error", f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()[-4000:]
    except Exception as e:  # a bug or a kernel fault in the variant: recorded as a failing result
        status, reason = "error", f"{type(e).__name__}: {str(e)[:1000]}"
        rec["traceback"] = traceback.format_exc()[-4000:]
    rec["status"] = status
    if status != "ok":
        log(f"{cfg.variant.name} on {case.name}: {status}: {reason}")
    rec.update(body)
    rec["passed"] = bool(status == "ok" and body.get("passed", body.get("passed_post_check", True)))
    rec["reason"] = reason or body.get("reason", "")
    rec["env"] = environment()
    rec["config"] = OmegaConf.to_container(cfg, resolve=True)
    rec["wall_s"] = time.time() - t0
    write_json_atomic(out_path, rec)
    log(f"wrote {out_path} (status={status}, passed={rec['passed']}, {rec['wall_s']:.1f}s)")
    return rec


@hydra.main(version_base="1.3", config_path="../config", config_name="config")
def main(cfg: DictConfig) -> None:
    run_job(cfg)


if __name__ == "__main__":
    main()
