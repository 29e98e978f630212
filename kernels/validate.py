"""The checks every variant applies (issue 32): parameters up front in ``prepare``, the weights against the case
in ``prepare``, the input in ``run``. Each error names what is wrong and what is accepted.

    check_params("seqres", params, SPEC)     # unknown names, then each value against its Spec
    check_weights("seqres", case, weights)   # layer count, every tensor's shape, dtype, device
    check_input("seqres", case, x, device)   # shape, dtype, device, contiguity (cheap when all is well)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cases import Case
from .weights import LAYER_FIELDS, Weights


class ParameterError(TypeError, ValueError):
    """A parameter is unknown, of the wrong type or out of range: a configuration error, not a kernel fault.
    (A TypeError and a ValueError, so callers that caught either keep working.)"""


class WeightsError(ValueError):
    """The weights do not belong to the case: layer count, a tensor's shape, dtype or device."""


# ---------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Spec:
    """What one parameter accepts: ``kind`` int | float | choice | text | any; ints and floats within [lo, hi]
    (None: unbounded), ints a power of two with ``pow2``; ``choices`` for a choice; ``also``: literal values
    accepted besides (e.g. "auto", None, 0)."""
    kind: str
    lo: float | None = None
    hi: float | None = None
    pow2: bool = False
    choices: tuple = ()
    also: tuple = ()

    def accepts(self, v) -> bool:
        if _among(v, self.also):
            return True
        if self.kind == "any":
            return True
        if self.kind == "choice":
            return _among(v, self.choices)
        if self.kind == "text":
            return isinstance(v, str)
        if isinstance(v, bool) or not isinstance(v, (int, float) if self.kind == "float" else int):
            return False
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            return False
        return not self.pow2 or (v > 0 and v & (v - 1) == 0)

    def describe(self) -> str:
        extra = f" (or {', '.join(map(repr, self.also))})" if self.also else ""
        if self.kind == "choice":
            return f"not in {list(self.choices) + list(self.also)}"
        if self.kind == "text":
            return f"must be a string{extra}"
        what = "a power-of-two integer" if self.pow2 else "an integer" if self.kind == "int" else "a number"
        bounds = (f" in [{_num(self.lo)}, {_num(self.hi)}]" if self.lo is not None and self.hi is not None else
                  f" >= {_num(self.lo)}" if self.lo is not None else f" <= {_num(self.hi)}" if self.hi is not None
                  else "")
        return f"must be {what}{bounds}{extra}"


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _among(v, values) -> bool:
    """``v`` is one of ``values`` with its type: 1 is not True, 1.0 is not 1 (``in`` would say they are)."""
    return any(v is c or (type(v) is type(c) and v == c) for c in values)


def integer(lo=None, hi=None, pow2: bool = False, also: tuple = ()) -> Spec:
    return Spec("int", lo, hi, pow2, also=also)


def number(lo=None, hi=None, also: tuple = ()) -> Spec:
    return Spec("float", lo, hi, also=also)


def one_of(*choices) -> Spec:
    return Spec("choice", choices=tuple(choices))


def text(also: tuple = ()) -> Spec:
    return Spec("text", also=also)


BOOL = one_of(True, False)
ANY = Spec("any")


def check_names(family: str, params: dict, known) -> None:
    """Unknown parameter names: one message shape for every variant."""
    unknown = sorted(set(params) - set(known), key=str)
    if unknown:
        raise ParameterError(f"{family}: unknown parameters {unknown}; valid: {sorted(known)} "
                             f"(config/variant/{family}.yaml)")


def check_value(family: str, name: str, value, spec: Spec) -> None:
    if not spec.accepts(value):
        raise ParameterError(f"{family}: {name}={value!r} {spec.describe()}")


def check_params(family: str, params: dict, specs: dict[str, Spec], known=None) -> None:
    """Every name known (``known``, default the keys of ``specs``) and every value one its Spec accepts."""
    check_names(family, params, specs if known is None else known)
    for k, v in params.items():
        if k in specs:
            check_value(family, k, v, specs[k])


# ---------------------------------------------------------------- weights


def layer_shapes(D: int) -> dict[str, tuple[int, ...]]:
    """SPEC §2's shape of each per-layer tensor for model width D."""
    return {"ln1_w": (D,), "ln1_b": (D,), "w_qkv": (3 * D, D), "b_qkv": (3 * D,), "w_o": (D, D), "b_o": (D,),
            "ln2_w": (D,), "ln2_b": (D,), "w_1": (4 * D, D), "b_1": (4 * D,), "w_2": (D, 4 * D), "b_2": (D,)}


def check_weights(family: str, case: Case, weights: Weights) -> None:
    """The weights are the case's: ``case.L`` layers, every tensor of SPEC §2's shape for ``case.D``, float32, all
    on one device. Raises ``WeightsError`` naming the tensor (``make_weights(case)`` builds matching ones)."""
    fix = f"(make_weights(load_case({case.name!r})) builds matching weights)"
    if not isinstance(weights, Weights):
        raise WeightsError(f"{family}: weights must be a kernels.Weights, got {type(weights).__name__} {fix}")
    if len(weights.layers) != case.L:
        raise WeightsError(f"{family}: {len(weights.layers)} weight layers for {case.name}, which has L={case.L} "
                           f"{fix}")
    shapes = layer_shapes(case.D)
    named = [(f"layer {i} {f}", getattr(lw, f), shapes[f]) for i, lw in enumerate(weights.layers) for f in LAYER_FIELDS]
    named += [("lnf_w", weights.lnf_w, (case.D,)), ("lnf_b", weights.lnf_b, (case.D,))]
    device = weights.lnf_w.device if isinstance(weights.lnf_w, torch.Tensor) else None
    for name, t, shape in named:
        if not isinstance(t, torch.Tensor):
            raise WeightsError(f"{family}: weight {name} is a {type(t).__name__}, not a tensor {fix}")
        if tuple(t.shape) != shape:
            raise WeightsError(f"{family}: weight {name} has shape {tuple(t.shape)}; {case.name} (D={case.D}) needs "
                               f"{shape} {fix}")
        if t.dtype != torch.float32:
            raise WeightsError(f"{family}: weight {name} has dtype {t.dtype}; the model's weights are torch.float32")
        if t.device != device:
            raise WeightsError(f"{family}: weight {name} is on {t.device}, lnf_w on {device}: move all weights to "
                               "one device (weights.to(device))")


# ---------------------------------------------------------------- inputs


def check_input(family: str, case: Case, x, device) -> None:
    """x: [B, S, D] float32, contiguous, on ``device`` (the prepared weights'); else a message saying which."""
    if (isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.device == device and x.is_contiguous()
            and x.shape == (case.B, case.S, case.D)):
        return
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{family}: x must be a torch.Tensor, got {type(x).__name__}")
    if tuple(x.shape) != (case.B, case.S, case.D):
        raise ValueError(f"{family}: x has shape {tuple(x.shape)}; {case.name} needs (B, S, D) = "
                         f"{(case.B, case.S, case.D)}")
    if x.dtype != torch.float32:
        raise TypeError(f"{family}: x has dtype {x.dtype}; the model takes torch.float32 (x.float())")
    if x.device != device:
        raise ValueError(f"{family}: x is on {x.device}, the prepared model on {device} (x.to({str(device)!r}))")
    raise ValueError(f"{family}: x is not contiguous (strides {tuple(x.stride())}); pass x.contiguous()")
