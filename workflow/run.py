"""The one job entry: ``python -m workflow.run stage=<tune|correctness|timing|ncu> case=<name> variant=<name>
gpu=<type> [out=<path>] [tag=<name>] [any Hydra override]``.

Composes the config, runs one stage for one case x variant in this process, and writes the stage's
JSON atomically, validated against its schema (``workflow/schemas.py``). A variant that cannot run (unsupported
case, out of memory, an exception in its code) still writes a result saying so (``status`` != "ok", ``passed``
false); a bad config (an unknown or ill-typed parameter, a bad tag, ``out=`` a directory) fails before any work
with a message naming the key and what it accepts, exits 1 and writes nothing.

Where the result goes: ``out=`` when given (what Snakemake passes); else ``<output_root>/<stage>/<gpu>/<case>/
<variant>.json``, or, for an override run, ``<output_root>/tag/<tag>/...`` with ``tag=`` or a tag derived from
the overrides (``workflow/tags.py`` says which overrides count), so a run by hand with an override never
overwrites a default result.
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

from .schemas import SCHEMA
from .tags import NAME_RE, changes_config, check_tag, derive_tag, tagged_overrides

STAGES = ("tune", "correctness", "timing", "ncu")
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
    out_path: Any = None  # the job's result file (the correctness stage keeps its margin progress beside it)


def task_overrides() -> list[str]:
    """The command line's Hydra overrides of this job (none when the config was composed in-process)."""
    from hydra.core.hydra_config import HydraConfig
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"


def compose(overrides: list[str]) -> DictConfig:
    """config/config.yaml composed with ``overrides`` (inside ``@hydra.main`` or not)."""
    from hydra import compose as _compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    if GlobalHydra.instance().is_initialized():
        return _compose(config_name="config", overrides=list(overrides))
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return _compose(config_name="config", overrides=list(overrides))


def job_tag(cfg: DictConfig, overrides: list[str]) -> tuple[str, list[str]]:
    """(tag, the overrides that make this an override run; ``workflow/tags.py``): ``tag=`` when given, else derived
    from those overrides ("" when there are none, or when they only restate defaults). ``+matrix=<name>`` names the
    matrix whose job_overrides are not tagged."""
    matrix = (cfg.get("matrix") or {}).get("job_overrides") or []
    tagged = tagged_overrides(overrides, list(matrix), str(cfg.output_root))
    if cfg.tag:
        return check_tag(cfg.tag), tagged
    if tagged and not changes_config(compose, [o for o in overrides if o not in tagged], tagged):
        tagged = []
    return derive_tag(tagged), tagged


def result_path(cfg: DictConfig, tag: str | None = None) -> Path:
    """Where this job's result goes: ``out=`` or <output_root>/[tag/<tag>/]<stage>/<gpu>/<case>/<variant>.json
    (``tag`` default: ``cfg.tag``); never outside <output_root> without ``out=``."""
    if cfg.out:
        return Path(cfg.out)
    tag = cfg.tag if tag is None else tag
    root = Path(cfg.output_root)
    base = root / "tag" / check_tag(tag) if tag else root
    ext = "yaml" if cfg.stage == "tune" else "json"
    stage = "tuned" if cfg.stage == "tune" else cfg.stage
    parts = (cfg.gpu.name, cfg.case.name, cfg.variant.name)
    bad = [str(p) for p in parts if not NAME_RE.match(str(p)) or ".." in str(p)]
    if bad:
        raise SystemExit(f"error: {bad} cannot be part of a result path (a plain name: letters, digits, '.', '_', "
                         "'-', '+'); give out=<file> to write elsewhere")
    return base / stage / parts[0] / parts[1] / f"{parts[2]}.{ext}"


def check_case_unchanged(cfg: DictConfig) -> None:
    """A case is SPEC data (config/case/<name>.yaml) that every stage loads by name: an override of one of its
    fields (``case.B=8``) would be ignored, so it is refused with the fields named."""
    import yaml
    path = CONFIG_DIR / "case" / f"{cfg.case.name}.yaml"
    if not path.is_file():
        return
    want = yaml.safe_load(path.read_text()) or {}
    got = OmegaConf.to_container(cfg.case, resolve=True)
    changed = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    if changed:
        shown = ", ".join(f"case.{k}={got.get(k)!r}" for k in changed)
        raise SystemExit(f"error: case fields cannot be overridden ({shown}; {path.name} says "
                         f"{', '.join(f'{k}={want.get(k)!r}' for k in changed)}): every stage loads the case by name. "
                         "Add a case config under config/case/ and pass case=<its name>")


def validate(cfg: DictConfig) -> None:
    """Everything checked before any work: the stage, the config's types, the tag, ``out=``, the GPU type."""
    from .schemas import check_job_config
    if cfg.stage not in STAGES:
        raise SystemExit(f"error: unknown stage {cfg.stage!r}; valid: {', '.join(STAGES)}")
    try:
        check_job_config(OmegaConf.to_container(cfg, resolve=True))
        if cfg.tag:
            check_tag(cfg.tag)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    check_case_unchanged(cfg)
    if cfg.out and Path(cfg.out).is_dir():
        raise SystemExit(f"error: out={cfg.out} is a directory; out= names the result file, e.g. "
                         f"out={Path(cfg.out) / 'result.json'}")
    if cfg.gpu.device == "cpu" and not cfg.case.get("smoke", False) and not cfg.get("allow_cpu_full", False):
        raise SystemExit(f"error: case {cfg.case.name} is a full-size case; gpu=cpu runs smoke cases only "
                         "(case=smoke1|smoke2|smoke3). Use a GPU type (gpu=local|h200|...) for it.")
    if cfg.stage == "ncu" and cfg.gpu.device != "cuda":
        raise SystemExit("error: the ncu stage needs a CUDA GPU (gpu=local|h200|h100_96|...), not gpu=cpu")
    if cfg.stage == "tune" and cfg.variant.impl not in TUNED_FAMILIES:
        raise SystemExit(f"error: the tune stage is for our kernel families ({', '.join(TUNED_FAMILIES)}), not "
                         f"variant {cfg.variant.name!r}")


def header(cfg: DictConfig, tag: str = "", overrides: list[str] | None = None) -> dict:
    return {"schema": SCHEMA[cfg.stage], "stage": cfg.stage, "case": cfg.case.name,
            "variant": cfg.variant.name, "impl": cfg.variant.impl, "gpu": cfg.gpu.name,
            "tag": tag, "overrides": list(overrides or []),
            "params": OmegaConf.to_container(cfg.variant.params, resolve=True)}


def gpu_environment(cfg: DictConfig) -> None:
    """What the GPU type sets before the first import of Triton: the interpreter on ``gpu=cpu``, and the compile
    cache directory ``gpu.triton_cache_dir`` (one cache for the jobs of a node or of a shared filesystem; a variable
    already set in the job's environment wins)."""
    if cfg.gpu.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    cache = cfg.gpu.get("triton_cache_dir")
    if cache:
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.expandvars(os.path.expanduser(str(cache))))


def parameter_error(cfg: DictConfig, e: Exception) -> SystemExit:
    """A variant refused its parameters: the same exit (1) and message shape for every variant."""
    return SystemExit(f"error: {e}" + ("" if str(e).startswith(f"{cfg.variant.impl}:") else
                                       f" (variant {cfg.variant.name}, config/variant/{cfg.variant.name}.yaml)"))


def tune_job(cfg: DictConfig, tag: str = "") -> dict:
    """The tune stage (``workflow/stages/tune.py``): committed -> copy the GPU type's tuned file; search -> search
    on this GPU. Writes ``result_path(cfg, tag)`` (YAML) atomically; a failure writes nothing and exits non-zero."""
    from kernels import Unsupported, get_variant, load_case, make_weights
    from kernels.validate import ParameterError
    from .stages import tune
    from .stages.common import log, resolve_device
    mode = cfg.variant.params.get("tune", "committed")
    case = load_case(cfg.case.name)
    out_path = result_path(cfg, tag)
    log(f"tune ({mode}): {case.name} x {cfg.variant.name} on {cfg.gpu.name} -> {out_path}")
    if mode == "search":
        device = resolve_device(cfg.gpu.device, cfg.gpu.name, cfg.gpu.get("device_names"))
        weights = make_weights(case, device=device)
        params = OmegaConf.to_container(cfg.variant.params, resolve=True) or {}
        try:
            prepared = get_variant(cfg.variant.impl).prepare(case, weights, **params)
        except Unsupported as e:
            blocks, header = {}, f"{case.name}: {cfg.variant.name} does not run this case ({e})"
        except ParameterError as e:
            raise parameter_error(cfg, e) from None
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


def failure(e: Exception) -> tuple[str, str]:
    """(status, reason) of a job's exception: ``oom`` where the GPU ran out of memory — the caching allocator's
    ``OutOfMemoryError``, or the driver's ``CUDA error: out of memory`` from a launch or a library call (torch's
    ``AcceleratorError``: case 13 beside cases 8 and 14 at 0be4fd3, which a bare ``error`` kept from being run again
    alone) — else ``error``."""
    import torch
    text = str(e)
    if isinstance(e, torch.cuda.OutOfMemoryError) or (isinstance(e, RuntimeError) and (
            "CUDA error: out of memory" in text or "cudaErrorMemoryAllocation" in text)):
        return "oom", text.splitlines()[0][:500] if text else "out of memory"
    return "error", f"{type(e).__name__}: {text[:1000]}"


def run_job(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """Run the configured stage; returns the result record (also written to ``result_path(cfg, tag)``).
    ``overrides``: the job's Hydra overrides (default: the command line's), which decide the tag."""
    validate(cfg)
    try:
        tag, tagged = job_tag(cfg, task_overrides() if overrides is None else overrides)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    gpu_environment(cfg)  # before the first import of Triton
    if cfg.stage == "tune":
        return tune_job(cfg, tag)
    import torch
    from kernels import Unsupported, get_variant, load_case, make_weights
    from kernels.validate import ParameterError
    from .schemas import InvalidResult, validate_record
    from .stages import correctness, timing
    from .stages.common import _json_default, environment, log, resolve_device, write_json_atomic

    t0 = time.time()
    device = resolve_device(cfg.gpu.device, cfg.gpu.name, cfg.gpu.get("device_names"))
    case = load_case(cfg.case.name)
    variant = get_variant(cfg.variant.impl)
    params = OmegaConf.to_container(cfg.variant.params, resolve=True) or {}
    out_path = result_path(cfg, tag)
    rec = header(cfg, tag, tagged)
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
        ctx = JobContext(cfg, case, weights, variant, cfg.variant.impl, prepared, device, out_path)
        if cfg.stage == "correctness":
            body = correctness.job(ctx)
        elif cfg.stage == "timing":
            body = timing.job(ctx)
        else:
            from .stages import ncu
            body = ncu.job(ctx, out_path)
    except ParameterError as e:  # the configuration, not the variant: exit 1 before any result is written
        raise parameter_error(cfg, e) from None
    except Unsupported as e:
        status, reason = "unsupported", str(e)
    except Exception as e:  # out of GPU memory, or a bug or a kernel fault in the variant: a failing result
        status, reason = failure(e)
        if status == "error":
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
    rec = json.loads(json.dumps(rec, default=_json_default))
    try:
        validate_record(cfg.stage, rec)
    except InvalidResult as e:  # a bug in a stage: recorded as a failing result, never as a pass
        status = rec["status"] = "error"
        rec.update(passed=False, reason=f"the job's own record {e}")
        validate_record(cfg.stage, rec)
    write_json_atomic(out_path, rec)
    log(f"wrote {out_path} (status={status}, passed={rec['passed']}, {rec['wall_s']:.1f}s)")
    return rec


@hydra.main(version_base="1.3", config_path="../config", config_name="config")
def main(cfg: DictConfig) -> None:
    run_job(cfg)


if __name__ == "__main__":
    main()
