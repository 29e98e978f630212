"""The variant registry: every implementation (peers and our kernel families) behind one interface.

A variant has two steps:
  prepare(case, weights, **params) -> prepared   one-time, untimed (layouts, precision splits, autotune)
  run(prepared, x) -> y                          timed; everything that depends on the input
``prepare`` raises ``Unsupported`` when the variant cannot handle a case (the stages record that).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .cases import Case
from .weights import Weights


class Unsupported(Exception):
    """The variant cannot run this case (shape outside its envelope, missing library, ...)."""


@dataclass(frozen=True)
class Variant:
    name: str
    prepare: Callable[..., Any]          # (case, weights, **params) -> prepared
    run: Callable[[Any, torch.Tensor], torch.Tensor]
    kind: str = "ours"                   # "peer" or "ours"
    gated_peer: bool = True              # may count as a "fastest gated" peer (False for TF32 presets)
    description: str = ""
    families: tuple[str, ...] = field(default_factory=tuple)  # the case families it is meant for
    # (prepared, weights) -> [(label, make)]: the other configurations ``prepare`` chose among when it
    # autotuned; ``make()`` prepares one on its own. The correctness stage gates every one, so whichever one
    # another job's autotuning picks (timing, Nsight Compute, another GPU type) has passed the gate in the run.
    alternates: Callable[[Any, Weights], list] | None = None
    # (prepared, weights) -> prepared: the same configuration ``prepare`` chose, with other weights (the margin
    # check's other weight seeds must test the configuration that was gated and timed, not a new autotuning
    # choice). None: ``prepare(case, weights, **params)`` again.
    rebind: Callable[[Any, Weights], Any] | None = None


_REGISTRY: dict[str, Variant] = {}
# family -> why it failed to import (``kernels.families`` fills it; tests assert it stays empty)
IMPORT_ERRORS: dict[str, str] = {}


def register(variant: Variant) -> Variant:
    if variant.name in _REGISTRY:
        raise ValueError(f"variant {variant.name!r} registered twice")
    _REGISTRY[variant.name] = variant
    return variant


def get_variant(name: str) -> Variant:
    try:
        return _REGISTRY[name]
    except KeyError:
        hint = f" (family {name!r} failed to import: {IMPORT_ERRORS[name]})" if name in IMPORT_ERRORS else ""
        raise KeyError(f"unknown variant {name!r}{hint}; valid: {', '.join(list_variants())}") from None


def list_variants(kind: str | None = None) -> list[str]:
    return [n for n, v in _REGISTRY.items() if kind is None or v.kind == kind]


def prepare_and_run(name: str, case: Case, weights: Weights, x: torch.Tensor, **params) -> torch.Tensor:
    """Convenience for scripts: prepare then run once."""
    v = get_variant(name)
    return v.run(v.prepare(case, weights, **params), x)
