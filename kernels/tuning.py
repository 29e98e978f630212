"""Tuned parameters as data: ``config/tuned/<gpu>/<case>.yaml``, one block per kernel family.

A family that tunes (``seqres``, ``hybrid``) takes ``tune`` among its parameters:

  committed  (default) the parameters in the tuned file for this GPU type and case, on top of the family's
             defaults; a parameter given explicitly (different from the family default) wins over the file.
             No file, or no block for the family: the defaults, and one log line that says how to tune.
  search     time every candidate of the family's search space (``config/search/<family>.yaml``) on top of the
             parameters given and keep the fastest (``search``); minutes on a cold compile cache.
  off        exactly the parameters given.

A tuned file::

    seqres:
      params: {barrier: counter_t0, attn_oproj: true}     # overrides on top of config/variant/seqres.yaml
      measured: {commit: abc1234, date: 2026-12-01, gpu: NVIDIA H200, median_ms: 0.39}
      candidates: [{params: {}, median_ms: 0.41}, ...]    # what the search timed (optional)

The workflow's ``tune`` stage writes the same format (``outputs/tuned/<gpu>/<case>/<variant>.yaml``), so a
re-tune on another GPU can be diffed against the committed file and copied over it.
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml

from .cases import Case, config_dir

TUNE_MODES = ("committed", "search", "off")
TUNING_KEYS = ("tune", "tuned_file", "search_space", "tune_margin")  # parameters of every tuned family, read here


def tuned_root() -> Path:
    return config_dir() / "tuned"


def matches_device(patterns, name: str) -> bool:
    """Does a CUDA device's name match one of a GPU type's ``device_names`` patterns (regex)?"""
    return any(re.search(str(p), name) for p in patterns or [])


def gpu_type_of_device(device) -> str | None:
    """The GPU type (``config/gpu/<type>.yaml``) whose ``device_names`` patterns match this CUDA device's name
    (e.g. "NVIDIA H200" -> h200), or None."""
    import torch
    if getattr(device, "type", str(device)) != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    for path in sorted((config_dir() / "gpu").glob("*.yaml")):
        if matches_device(device_patterns(path), name):
            return path.stem
    return None


def device_patterns(path: Path) -> list:
    """The ``device_names`` patterns of a GPU type's config (``config/gpu/<type>.yaml``): which device names it is."""
    with open(path) as f:
        return list((yaml.safe_load(f) or {}).get("device_names") or [])


def tuned_file(case: Case, gpu: str) -> Path:
    return tuned_root() / gpu / f"{case.name}.yaml"


def read_block(path: Path, family: str, known: set[str] | None = None) -> dict | None:
    """The ``family`` block of a tuned file (None when the file or the block is missing). Unknown parameter
    names (another commit's vocabulary, a typo) are an error naming the file and the keys."""
    path = Path(path)
    if not path.exists():
        return None
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"tuned file {path}: expected a mapping of family -> block, got {type(doc).__name__}")
    block = doc.get(family)
    if block is None:
        return None
    params = block.get("params") if isinstance(block, dict) else None
    if not isinstance(params, dict):
        raise ValueError(f"tuned file {path}: {family}.params must be a mapping of parameter overrides")
    if known is not None:
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ValueError(f"tuned file {path}: {family}.params has unknown parameters {unknown} (written for "
                             f"another commit's parameter names?); valid: config/variant/{family}.yaml. Re-tune: "
                             f"snakemake --config tune=search ... (docs/pipeline.md, Tuning)")
    return block


def write_tuned(path: Path, blocks: dict[str, dict], header: str = "") -> Path:
    """Write ``{family: block}`` as a tuned file, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"# {line}\n" for line in header.splitlines()) + yaml.safe_dump(
        blocks, sort_keys=False, default_flow_style=None, width=120)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def search_space(family: str, path: str | os.PathLike | None = None) -> list[dict]:
    """The candidates ``tune=search`` times for ``family``: ``candidates`` of ``path`` (default
    ``config/search/<family>.yaml``; a bare name is ``config/search/<name>.yaml``)."""
    if path is None:
        path = config_dir() / "search" / f"{family}.yaml"
        if not path.exists():
            return []
    elif os.sep not in str(path) and not str(path).endswith(".yaml"):
        path = config_dir() / "search" / f"{path}.yaml"
    with open(path) as f:
        return [dict(c) for c in (yaml.safe_load(f) or {}).get("candidates") or []]


_SAID: set = set()  # (family, tuned file) pairs whose "no tuned parameters" line was printed


def resolve(family: str, case: Case, device, params: dict, defaults: dict) -> tuple[str, dict, dict]:
    """(mode, parameters to use, info) for ``prepare``. ``params`` may hold ``tune`` (a mode) and
    ``tuned_file`` (a path; default ``config/tuned/<gpu>/<case>.yaml`` for this device's GPU type) and
    ``search_space`` (for ``search``: a file or a name under ``config/search/``; default ``<family>``)."""
    params = dict(params)
    mode = params.pop("tune", defaults.get("tune", "committed"))
    path = params.pop("tuned_file", None) or defaults.get("tuned_file")
    space = params.pop("search_space", None) or defaults.get("search_space")
    if isinstance(mode, (list, tuple)) and not mode:  # the former spelling of "off"
        mode = "off"
    if mode not in TUNE_MODES:
        raise ValueError(f"{family}: tune={mode!r}: valid {', '.join(TUNE_MODES)} (the search space lives in "
                         f"config/search/{family}.yaml)")
    info: dict[str, Any] = {"mode": mode}
    if mode == "search":
        info["search_space"] = space
    if mode != "committed":
        return mode, params, info
    if path is None:
        gpu = gpu_type_of_device(device)
        if gpu is None:
            info["file"] = None
            return mode, params, info
        path = tuned_file(case, gpu)
    info["file"] = str(path)
    block = read_block(Path(path), family, set(defaults))
    if block is None:
        if (family, str(path)) not in _SAID:  # once per process (the margin check prepares again per weight seed)
            _SAID.add((family, str(path)))
            print(f"[{family}] no tuned parameters for {case.name} in {path}: the family defaults. Tune it for "
                  f"this GPU: snakemake --config tune=search gpu=<type> outputs/tuned/<type>/{case.name}/{family}.yaml",
                  file=sys.stderr, flush=True)
        return mode, params, info
    explicit = {k: v for k, v in params.items() if k in defaults and v != defaults[k]}
    tuned = dict(block["params"])
    info["params"] = tuned
    info["measured"] = block.get("measured")
    kept = {k: v for k, v in explicit.items() if k in tuned and tuned[k] != v}
    if kept:
        info["explicit_wins"] = kept
    return mode, {**params, **tuned, **explicit}, info


def pick(median_ms: list, margin: float) -> int:
    """Index of the candidate to keep: the fastest, unless it beats candidate 0 (the parameters as given) by
    less than ``margin`` (a fraction) — then 0, so a near tie does not flip the choice from run to run."""
    best = min(range(len(median_ms)), key=median_ms.__getitem__)
    return 0 if best != 0 and median_ms[best] > median_ms[0] * (1.0 - margin) else best


def search(prepare_one: Callable[..., Any], call: Callable[[Any, Any], Any], params: dict, candidates: list[dict],
           margin: float, known: set[str], x, rounds: int = 7,
           skip: tuple = ()) -> tuple[Any, dict, list[tuple[dict, dict]]]:
    """Prepare the parameters given and each candidate on top of them, time each ``rounds`` times on input ``x``
    (``kernels.timing.time_calls``: L2 flushed, events around ``call(prepared, x)``, rounds interleaved; one
    untimed call each first) and keep the fastest unless it beats the parameters as given by less than ``margin``
    (a fraction). Candidates that raise one of ``skip`` are left out and recorded; the parameters as given must
    work. Returns (chosen, info, [(override, full params)])."""
    from .timing import time_calls
    sets, preps, skipped = [], [], []
    for i, over in enumerate([{}] + list(candidates)):
        unknown = sorted(set(over) - set(known))
        if unknown:
            raise ValueError(f"search candidate {over} has unknown parameters {unknown}")
        full = dict(params, **over)
        try:
            p = prepare_one(**full)
        except skip as e:
            if i == 0:
                raise
            skipped.append({"params": over, "reason": str(e)[:300]})
            continue
        sets.append((over, full))
        preps.append(p)
    times = time_calls({str(j): (lambda x, p=p: call(p, x)) for j, p in enumerate(preps)}, [x], rounds, warmup=1)
    med = [statistics.median(times[str(j)]) for j in range(len(preps))]
    k = pick(med, margin)
    overs = [o for o, _ in sets]
    info = {"mode": "search", "candidates": overs, "median_ms": [round(m, 5) for m in med], "chosen": k,
            "chosen_params": overs[k], "margin": margin, "skipped": skipped}
    return preps[k], info, sets


def prepare(family: str, case: Case, weights, params: dict, defaults: dict, prepare_one: Callable[..., Any],
            call: Callable[[Any, Any], Any], search_on: bool, skip: tuple = ()) -> tuple[Any, list | None]:
    """A family's ``prepare``: ``resolve`` the parameters, then ``prepare_one(case, weights, **params)`` once, or
    with ``tune=search`` (and ``search_on``: a CUDA device) ``search`` over the family's space, timing
    ``call(prepared, x)``. Records ``info["tune"]`` (search) or ``info["tuned"]`` (committed). Returns (prepared,
    the searched [(override, full params)] or None). A new family adds its search space
    (``config/search/<family>.yaml``) and calls this."""
    mode, params, tinfo = resolve(family, case, weights.device, params, defaults)
    full = {k: v for k, v in params.items() if k not in TUNING_KEYS}
    sets = None
    if mode == "search" and search_on:
        import torch
        x = torch.randn(case.B, case.S, case.D, device=weights.device, dtype=torch.float32)
        p, info, sets = search(lambda **f: prepare_one(case, weights, **f), call, full,
                               search_space(family, tinfo.get("search_space")),
                               float(params.get("tune_margin", defaults.get("tune_margin", 0.03))),
                               set(defaults) - set(TUNING_KEYS), x, skip=skip)
        p.info["tune"] = info
        torch.cuda.empty_cache()
    else:
        p = prepare_one(case, weights, **full)
    if mode == "committed":
        p.info["tuned"] = tinfo
    return p, sets


def block_from_search(info: dict, commit: str, date: str, gpu_name: str) -> dict:
    """A tuned-file block from ``search``'s info."""
    k = info["chosen"]
    return {"params": dict(info["chosen_params"]),
            "measured": {"commit": commit, "date": date, "gpu": gpu_name, "median_ms": info["median_ms"][k]},
            "candidates": [{"params": dict(o), "median_ms": m} for o, m in zip(info["candidates"], info["median_ms"])]}
