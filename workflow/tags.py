"""Override runs and their tag (SPEC §8, issue 32): which overrides make a result an override run, the tag that
keeps it apart from the default results, and what a tag may be. The job entry (``workflow/run.py``) and the
Snakemake workflow (``workflow/rules/common.smk``) both decide with these functions, so a job run by hand and the
same job run by Snakemake land in the same place.

The rule: every override is tagged except
  - the job's selection: stage, case, variant, gpu, out, tag, output_root, matrix (and hydra.*)
  - the workflow's plumbing: ``variant.params.tune=<mode>`` and ``variant.params.tuned_file=<a tune-stage output,
    <output_root>/[tag/<tag>/]tuned/<gpu>/<case>/<variant>.yaml>`` (where the parameters come from, the tune stage)
  - the overrides of the matrix the job belongs to (``+matrix=<name>``: its ``job_overrides``, part of the matrix's
    definition; Snakemake passes ``+matrix=`` to every job)
and overrides that change nothing (they restate the defaults: ``changes_config``) make no override run.
"""
from __future__ import annotations

import hashlib
import json
import re

# chosen by the workflow for every job (an override may not select them); they say which result, not how it is made
RESERVED_KEYS = {"stage", "case", "variant", "gpu", "out", "tag", "output_root", "matrix"}
PLUMBING_KEYS = {"variant.params.tune", "variant.params.tuned_file"}
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")  # a config name used as a path component
_TUNED_PATH = re.compile(r"^(?:tag/[^/]+/)?tuned/[^/]+/[^/]+/[^/]+\.yaml$")


def override_key(ov: str) -> str:
    """``+a.b=1`` / ``++a.b=1`` / ``~a.b`` / ``a.b=1`` -> ``a.b``."""
    return str(ov).split("=", 1)[0].lstrip("+~").strip()


def _value(ov: str) -> str:
    return str(ov).partition("=")[2].strip().strip("'\"")


def is_plumbing(ov: str, output_root: str = "outputs") -> bool:
    """An override the workflow passes to say where a job's parameters come from (the tune stage), not what they
    are: ``variant.params.tune=<mode>``, or ``variant.params.tuned_file=`` a tune-stage output under
    ``output_root``."""
    key = override_key(ov)
    if key == "variant.params.tune":
        return True
    if key != "variant.params.tuned_file":
        return False
    value, root = _value(ov), str(output_root).rstrip("/") + "/"
    return value.startswith(root) and bool(_TUNED_PATH.match(value[len(root):]))


def tagged_overrides(overrides, matrix_overrides=(), output_root: str = "outputs") -> list[str]:
    """The overrides that make a run an override run (the module's rule), in their order."""
    mine = {str(o) for o in matrix_overrides or ()}
    out = []
    for ov in overrides or ():
        key = override_key(ov)
        if key in RESERVED_KEYS or key.startswith("hydra") or str(ov) in mine or is_plumbing(ov, output_root):
            continue
        out.append(str(ov))
    return out


def changes_config(compose, selection: list[str], overrides: list[str]) -> bool:
    """Whether ``overrides`` change the config ``compose(selection)`` (``compose``: Hydra's, overrides -> config);
    an override that restates a default (``gate.seeds=[0,1]``) does not."""
    from omegaconf import OmegaConf
    if not overrides:
        return False
    try:
        before = OmegaConf.to_container(compose(list(selection)), resolve=True)
        return before != OmegaConf.to_container(compose([*selection, *overrides]), resolve=True)
    except Exception:  # noqa: BLE001 - what does not compose is not a restated default: tagged
        return True


def derive_tag(overrides: list[str]) -> str:
    """A deterministic, path-safe tag for an override list: a readable slug + 8 hex of its hash."""
    if not overrides:
        return ""
    digest = hashlib.sha1(json.dumps(list(overrides)).encode()).hexdigest()[:8]
    parts = []
    for o in overrides:
        key, _, value = o.partition("=")
        parts.append(f"{key.split('.')[-1]}-{value}")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(parts)).strip("-._")[:40]
    return f"{slug}-{digest}" if slug else digest


def check_tag(tag: str) -> str:
    """A tag is one plain path component: letters, digits, '.', '_' and '-', at most 64, starting with a letter or
    digit, no '..' (so outputs/tag/<tag>/ stays inside outputs/tag/). Raises ValueError naming the rule."""
    tag = str(tag)
    if not TAG_RE.match(tag) or ".." in tag:
        raise ValueError(f"tag {tag!r}: a tag is one plain name (letters, digits, '.', '_', '-'; at most 64; starting "
                         "with a letter or digit; no '/' and no '..'), e.g. tag=w4")
    return tag
