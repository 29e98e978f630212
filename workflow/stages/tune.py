"""Tune stage: the parameters the correctness, timing and ncu jobs of a case run with (issue 30).

Writes ``outputs/tuned/<gpu>/<case>/<variant>.yaml`` in the format of ``config/tuned/<gpu>/<case>.yaml``
(``kernels/tuning.py``), so a fresh search can be diffed against the committed file and copied over it.

  variant.params.tune=committed  (default) no kernel runs: the committed file of the GPU type is validated
                                 (unknown parameter names are an error naming the file) and copied
  variant.params.tune=search     the family searches its space on this GPU and the choice is written, with
                                 every candidate's time, the commit and the date
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .common import environment, log


def _family(cfg, case) -> str:
    """The kernel family whose block the job writes: the variant's impl, or auto's route for the case."""
    from kernels.families import route_for
    impl = cfg.variant.impl
    if impl != "auto":
        return impl
    return route_for(case, dict(cfg.variant.params.get("route") or {}))


def committed(cfg, case, device) -> tuple[dict, str]:
    """(blocks, header) copied from the committed tuned file of ``cfg.gpu.name`` (or of the GPU type this device
    is, for ``gpu=local``); no file or no block: no blocks (the family defaults)."""
    from kernels import tuning
    from kernels.registry import get_variant
    family = _family(cfg, case)
    gpu = cfg.gpu.name
    if not (tuning.tuned_root() / gpu).is_dir():
        gpu = tuning.gpu_type_of_device(device) or gpu
    path = tuning.tuned_file(case, gpu)
    shown = os.path.relpath(path, tuning.tuned_root().parent.parent)
    known = _known_params(family)
    get_variant(family)  # an unregistered family is an error before anything is written
    block = tuning.read_block(path, family, known)
    if block is None:
        log(f"tune: no {family} block in {shown}: the family defaults")
        return {}, f"{case.name} on {cfg.gpu.name}: no committed {family} parameters ({shown}): the family defaults"
    log(f"tune: {shown} [{family}] -> {block['params']}")
    return {family: block}, f"{case.name} on {cfg.gpu.name}: copied from {shown}"


def _known_params(family: str) -> set[str]:
    import yaml

    from kernels.cases import config_dir
    p = config_dir() / "variant" / f"{family}.yaml"
    return set((yaml.safe_load(p.read_text()) or {}).get("params") or {}) if p.exists() else set()


def search(ctx) -> tuple[dict, str]:
    """Prepare with ``tune=search`` on this GPU; the chosen block, with every candidate's time."""
    from kernels import tuning
    family = _family(ctx.cfg, ctx.case)
    inner = getattr(ctx.prepared, "inner", ctx.prepared)
    info = (getattr(inner, "info", None) or {}).get("tune")
    if not info:
        return {}, f"{ctx.case.name}: {family} has no search space on this device: the family defaults"
    env = environment()
    block = tuning.block_from_search(info, env["git_commit"], time.strftime("%Y-%m-%d"),
                                     str(env.get("gpu_name")))
    log(f"tune: searched {len(info['candidates'])} candidates, chose {info['chosen_params']} "
        f"({info['median_ms'][info['chosen']]:.4f} ms)")
    return {family: block}, f"{ctx.case.name} on {ctx.cfg.gpu.name}: searched by workflow.run stage=tune"


def write(path: Path, blocks: dict, header: str) -> None:
    from kernels import tuning
    tuning.write_tuned(path, blocks, header + "\nWritten by `python -m workflow.run stage=tune`; the correctness, "
                       "timing and ncu jobs of this case read it (variant.params.tuned_file).")
