"""Registers the kernel families that are present (``kernels/<family>/``) and the ``auto`` dispatcher."""
from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from .cases import FAMILIES, Case, list_cases, variant_params
from .registry import IMPORT_ERRORS, Unsupported, Variant, get_variant, list_variants, register
from .validate import ParameterError, check_names
from .weights import Weights


def _import_family(name: str) -> None:
    """Import ``kernels.<name>`` (it registers its variants). A family folder that is absent is skipped; one that
    fails to import (a missing dependency, e.g. a Triton without some language feature) is recorded in
    ``IMPORT_ERRORS`` and reported by name, so the peers and the other families stay usable. Any other exception
    is a bug in the family and propagates."""
    try:
        importlib.import_module(f"{__package__}.{name}")
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == f"{__package__}.{name}":
            return  # no such family (yet)
        IMPORT_ERRORS[name] = f"{type(e).__name__}: {e}"
        warnings.warn(f"kernel family {name!r} failed to import: {IMPORT_ERRORS[name]}", stacklevel=2)


for _fam in FAMILIES:
    _import_family(_fam)


AUTO_PARAMS = variant_params("auto")  # the one source of auto's route (family or case -> variant)
DEFAULT_ROUTE = dict(AUTO_PARAMS["route"])


def route_for(case: Case, route: dict | None = None) -> str:
    """The variant ``auto`` runs ``case`` on: ``route`` (over auto.yaml's) maps a family, or a case by name (which
    wins over its family: a case its family does not win on the GPU), to a variant name."""
    r = dict(DEFAULT_ROUTE, **(route or {}))
    return r.get(case.name, r[case.family])


@dataclass
class AutoPrepared:
    variant: Variant
    inner: Any
    case: Case = None
    params: dict = None   # the routed variant's parameters


def _prepare_auto(case: Case, weights: Weights, route: dict | None = None, tune: str | None = None,
                  tuned_file: str | None = None, search_space: str | None = None, **per_variant) -> AutoPrepared:
    """Route ``case.family`` to a variant (``route`` maps family -> variant name; default: auto.yaml's);
    ``per_variant[name]`` holds that variant's parameters (``variant.params.seqres.num_warps=4`` in Hydra).
    ``tune``, ``tuned_file`` and ``search_space`` (``kernels/tuning.py``), where given, reach the routed family."""
    check_auto_params(route, per_variant)
    name = route_for(case, route)
    if name not in list_variants():
        why = IMPORT_ERRORS.get(name, "not registered")
        raise Unsupported(f"auto routes {case.name} (family {case.family!r}) to {name!r}: {why}")
    v = get_variant(name)
    params = dict(per_variant.get(name) or {})
    given = (("tune", tune), ("tuned_file", tuned_file), ("search_space", search_space))
    params.update({k: val for k, val in given if val is not None})
    return AutoPrepared(v, v.prepare(case, weights, **params), case, params)


def check_auto_params(route, per_variant: dict) -> None:
    """``route`` maps families to variant names; every other parameter is a variant's block (a mapping of its
    parameters, which that variant checks when ``auto`` routes a case to it)."""
    if route is not None and not isinstance(route, dict):
        raise ParameterError(f"auto: route={route!r} must map a family ({', '.join(FAMILIES)}) or a case name to a "
                             "variant name")
    for key, name in (route or {}).items():
        if (key not in FAMILIES and key not in list_cases()) or not isinstance(name, str):
            raise ParameterError(f"auto: route.{key}={name!r}: route maps a family ({', '.join(FAMILIES)}) or a case "
                                 "name (python -m workflow.run --list) to a variant name")
    check_names("auto", per_variant, set(AUTO_PARAMS) | set(list_variants(kind="ours")))
    for name, block in per_variant.items():
        if block is not None and not isinstance(block, dict):
            raise ParameterError(f"auto: {name}={block!r} must be a mapping of {name}'s parameters, e.g. "
                                 f"variant.params.{name}.num_warps=4")


def _rebind_auto(p: AutoPrepared, weights: Weights) -> AutoPrepared:
    """The routed variant's configuration with other weights (``Variant.rebind``)."""
    v = p.variant
    inner = v.rebind(p.inner, weights) if v.rebind is not None else v.prepare(p.case, weights, **p.params)
    return AutoPrepared(v, inner, p.case, p.params)


def _run_auto(p: AutoPrepared, x: torch.Tensor) -> torch.Tensor:
    return p.variant.run(p.inner, x)


def _alternates_auto(p: AutoPrepared, weights: Weights) -> list:
    """The routed variant's alternates (``Variant.alternates``), each wrapped for ``_run_auto``."""
    if p.variant.alternates is None:
        return []
    return [(label, lambda make=make: AutoPrepared(p.variant, make(), p.case, p.params))
            for label, make in p.variant.alternates(p.inner, weights)]


register(Variant("auto", _prepare_auto, _run_auto, kind="ours", alternates=_alternates_auto, rebind=_rebind_auto,
                 description="per-case dispatch to the family that SPEC §3 names", families=FAMILIES))
