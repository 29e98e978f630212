"""The 14 fixed shapes (and 3 smoke shapes) of SPEC §3, read from ``config/case/*.yaml``.

The YAML files are the single source of truth: Hydra composes them for the workflow, and this module
reads the same files with plain PyYAML so ``kernels`` never imports Hydra.
"""
from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

FAMILIES = ("seqres", "dag", "hybrid")
SCHEME_GEMMS = ("qkv", "o", "ffn1", "ffn2")


def config_dir() -> Path:
    """The Hydra config tree (``$KERNELS_CONFIG_DIR`` or ``<repo>/config``)."""
    env = os.environ.get("KERNELS_CONFIG_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "config"


def variant_params(name: str) -> dict:
    """The ``params`` of ``config/variant/<name>.yaml``: the one place a variant's defaults live (each family's
    ``prepare`` reads its own, ``auto`` its route)."""
    with open(config_dir() / "variant" / f"{name}.yaml") as f:
        return dict(yaml.safe_load(f)["params"])


@dataclass(frozen=True)
class Case:
    name: str
    number: int
    family: str
    B: int
    S: int
    D: int
    H: int
    L: int
    causal: bool
    weight_seed: int
    smoke: bool = False
    # the case's precision choices (SPEC §4: the fastest scheme that passes, per case): (GEMM, scheme) pairs from
    # the yaml's ``schemes`` mapping, read by a kernel parameter set to ``case`` (seqres: ``ffn1_scheme``)
    schemes: tuple = ()

    def __post_init__(self):
        bad = [k for k, _ in self.schemes if k not in SCHEME_GEMMS]
        if bad:
            raise ValueError(f"case {self.name}: schemes names {bad}; the GEMMs are {SCHEME_GEMMS}")
        if self.D % self.H:
            raise ValueError(f"case {self.name}: D={self.D} is not divisible by H={self.H}")
        if self.family not in FAMILIES:
            raise ValueError(f"case {self.name}: family {self.family!r} not in {FAMILIES}")

    def scheme(self, gemm: str, default: str) -> str:
        """This case's scheme for ``gemm`` (one of ``SCHEME_GEMMS``), ``default`` where its config names none."""
        return dict(self.schemes).get(gemm, default)

    @property
    def dh(self) -> int:
        return self.D // self.H

    @property
    def tokens(self) -> int:
        return self.B * self.S

    @property
    def flops(self) -> float:
        """Forward FLOPs (2 per multiply-add); causal attention counts half of the score/PV work."""
        B, S, D, L = self.B, self.S, self.D, self.L
        linear = 2 * B * S * D * (3 * D + D + 4 * D + 4 * D)  # qkv, out-proj, fc1, fc2
        attn = 2 * 2 * B * S * S * D  # q k^T and p v over all heads
        if self.causal:
            attn /= 2
        return float(L * (linear + attn))

    @property
    def min_bytes(self) -> int:
        """Fewest HBM bytes: the fp32 input and output once, every fp32 weight once."""
        D, L = self.D, self.L
        per_layer = 4 * D + (3 * D * D + 3 * D) + (D * D + D) + (4 * D * D + 4 * D) + (4 * D * D + D)
        params = L * per_layer + 2 * D
        return 4 * (2 * self.B * self.S * D + params)

    def attention_score_bytes(self) -> int:
        """Bytes of one layer's materialised fp32 score matrix (B, H, S, S)."""
        return 4 * self.B * self.H * self.S * self.S


@lru_cache(maxsize=None)
def _load_all() -> dict[str, Case]:
    cases = {}
    for path in sorted((config_dir() / "case").glob("*.yaml")):
        with open(path) as f:
            d = yaml.safe_load(f)
        sch = d.pop("schemes", None) or {}
        if not isinstance(sch, dict) or not all(isinstance(v, str) for v in sch.values()):
            raise ValueError(f"{path}: schemes must map a GEMM name to a scheme name, e.g. {{ffn1: f16_w1}}")
        c = Case(**{k: d[k] for k in Case.__dataclass_fields__ if k in d}, schemes=tuple(sorted(sch.items())))
        if c.name != path.stem:
            raise ValueError(f"{path}: name {c.name!r} must equal the file name {path.stem!r}")
        cases[c.name] = c
    if not cases:
        raise FileNotFoundError(f"no case configs under {config_dir() / 'case'}")
    return cases


def list_cases(smoke: bool | None = None, family: str | None = None) -> list[str]:
    """Case names, in file order; ``smoke=True/False`` and ``family`` (SPEC §3's column) filter."""
    return [n for n, c in _load_all().items()
            if (smoke is None or c.smoke == smoke) and (family is None or c.family == family)]


def load_case(name_or_number: str | int) -> Case:
    """``load_case(7)``, ``load_case("7")``, ``load_case("case07")`` and ``load_case("smoke1")`` all work; anything
    but a name or an integer (``1.5``, ``True``) is refused rather than rounded."""
    cases = _load_all()
    if isinstance(name_or_number, bool) or not isinstance(name_or_number, (str, numbers.Integral)):
        raise TypeError(f"load_case takes a case name or number, got {type(name_or_number).__name__} "
                        f"{name_or_number!r}; valid: {', '.join(cases)} (or a case number)")
    key = name_or_number
    if isinstance(key, str) and key in cases:
        return cases[key]
    try:
        num = int(key)
    except (TypeError, ValueError):
        num = None
    for c in cases.values():
        if num is not None and c.number == num:
            return c
    raise KeyError(f"unknown case {name_or_number!r}; valid: {', '.join(cases)} (or a case number)")
