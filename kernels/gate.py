"""The numerical gate of SPEC §4: one function, used by pytest and by the correctness stage alike. Its
tolerances, scales and seeds live in ``config/gate/default.yaml`` (``default_gate_config``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import torch
import yaml

from .cases import config_dir


@dataclass(frozen=True)
class GateConfig:
    atol: float
    rtol: float
    scales: tuple[float, ...]  # input scales every output must pass at
    seeds: tuple[int, ...]     # input seeds per scale


@lru_cache(maxsize=None)
def default_gate_config() -> GateConfig:
    """``config/gate/default.yaml`` read with PyYAML (the file Hydra composes as ``gate``)."""
    with open(config_dir() / "gate" / "default.yaml") as f:
        d = yaml.safe_load(f)
    return GateConfig(float(d["atol"]), float(d["rtol"]), tuple(float(s) for s in d["scales"]),
                      tuple(int(s) for s in d["seeds"]))


@dataclass(frozen=True)
class GateResult:
    passed: bool
    max_abs: float        # max |out - ref| (inf when shapes differ or out has NaN/Inf)
    max_rel: float        # max |out - ref| / |ref| over elements with |ref| > atol
    frac_failing: float   # fraction of elements outside both tolerances
    worst_index: list[int] | None  # index of the element furthest outside its tolerance
    max_over_tol: float   # max |out - ref| / max(atol, rtol * |ref|); <= 1 passes
    reason: str = ""      # why it failed, in words ("" when passed)

    def to_dict(self) -> dict:
        return asdict(self)


def _fail(reason: str) -> GateResult:
    inf = float("inf")
    return GateResult(False, inf, inf, 1.0, None, inf, reason)


def gate(out: torch.Tensor, ref: torch.Tensor, atol: float | None = None, rtol: float | None = None) -> GateResult:
    """Pass iff same shape and dtype, all finite, and every element has |d| <= atol OR |d| <= rtol*|ref|
    (``atol``/``rtol`` default to ``default_gate_config()``). A reference with a NaN/Inf fails whatever the output
    (the reason says the reference is broken); empty tensors of the same shape pass."""
    cfg = default_gate_config()
    atol = cfg.atol if atol is None else atol
    rtol = cfg.rtol if rtol is None else rtol
    if not isinstance(out, torch.Tensor):
        return _fail(f"output is {type(out).__name__}, not a tensor")
    if not isinstance(ref, torch.Tensor):
        return _fail(f"the reference is broken: {type(ref).__name__}, not a tensor")
    if out.shape != ref.shape:
        return _fail(f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return _fail(f"dtype {out.dtype} != reference {ref.dtype}")
    r = ref.detach().to(torch.float64)
    bad_ref = ~torch.isfinite(r)
    if bool(bad_ref.any()):  # no output can be judged against it: the reference (or its input) is broken
        n = int(bad_ref.sum())
        return GateResult(False, float("inf"), float("inf"), 1.0, torch.nonzero(bad_ref)[0].tolist(), float("inf"),
                          f"the reference is broken: {n} non-finite reference elements (NaN/Inf); check the input "
                          "scale and the reference, not the output")
    if out.numel() == 0:  # nothing to compare (same shape and dtype as the reference): vacuously within tolerance
        return GateResult(True, 0.0, 0.0, 0.0, None, 0.0)
    o = out.detach().to(ref.device, torch.float64)
    finite = torch.isfinite(o)
    n_bad = int((~finite).sum())
    if n_bad:
        idx = torch.nonzero(~finite)[0].tolist()
        return GateResult(False, float("inf"), float("inf"), n_bad / o.numel(), idx, float("inf"),
                          f"{n_bad} non-finite output elements")
    d = (o - r).abs()
    tol = torch.clamp(rtol * r.abs(), min=atol)
    over = d / tol
    ok = (d <= atol) | (d <= rtol * r.abs())
    n_fail = int((~ok).sum())
    flat_worst = int(torch.argmax(over))
    worst = list(torch.unravel_index(torch.tensor(flat_worst), o.shape))
    big = r.abs() > atol
    max_rel = float((d[big] / r.abs()[big]).max()) if bool(big.any()) else 0.0
    res = GateResult(
        passed=n_fail == 0, max_abs=float(d.max()) if d.numel() else 0.0, max_rel=max_rel,
        frac_failing=n_fail / max(1, o.numel()), worst_index=[int(i) for i in worst],
        max_over_tol=float(over.max()) if over.numel() else 0.0,
        reason="" if n_fail == 0 else f"{n_fail} elements outside tolerance")
    return res
