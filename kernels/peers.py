"""Peers (SPEC §5): what a user would pick instead of our kernels, all fp32 unless named tf32."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .cases import Case
from .reference import fp32_matmul, model_forward, naive_fits, nn_encoder, nn_forward
from .registry import Variant, register
from .validate import BOOL, check_input, check_params, check_weights
from .weights import Weights

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PRECISIONS = ("fp32", "tf32")


@dataclass
class Prepared:
    fn: Callable[[torch.Tensor], torch.Tensor]
    case: Case
    device: torch.device                 # the weights' device: inputs must be on it
    name: str
    tf32: bool = False
    info: dict | None = None


def _run(p: Prepared, x: torch.Tensor) -> torch.Tensor:
    check_input(p.name, p.case, x, p.device)
    with fp32_matmul(p.tf32), torch.inference_mode():
        return p.fn(x)


def _checked(name: str, specs: dict):
    """``prepare`` of peer ``name``: its parameters (``specs``: config/variant/<name>.yaml) and the weights are
    checked before the peer's own preparation (the same checks as our families')."""
    def wrap(prepare):
        def checked(case: Case, weights: Weights, **params) -> Prepared:
            check_params(name, params, specs)
            check_weights(name, case, weights)
            return prepare(case, weights, **params)
        checked.__doc__ = prepare.__doc__
        return checked
    return wrap


def _model_fn(case: Case, weights: Weights, attn: str):
    flat = weights.flat()
    return lambda x: model_forward(x, flat, case.H, case.causal, attn=attn)


@_checked("eager", {})
def _prepare_eager(case: Case, weights: Weights) -> Prepared:
    if not naive_fits(case, weights.device):
        raise torch.cuda.OutOfMemoryError(
            f"eager materialises {case.attention_score_bytes() / 2**30:.0f} GiB of fp32 scores per layer "
            f"for {case.name}: out of memory")
    return Prepared(_model_fn(case, weights, "naive"), case, weights.device, "eager")


@_checked("eager_sdpa", {})
def _prepare_sdpa(case: Case, weights: Weights) -> Prepared:
    return Prepared(_model_fn(case, weights, "sdpa"), case, weights.device, "eager_sdpa")


@_checked("nn", {})
def _prepare_nn(case: Case, weights: Weights) -> Prepared:
    enc = nn_encoder(case, weights)
    return Prepared(lambda x: nn_forward(enc, x, case.causal), case, weights.device, "nn")


def _compile_preparer(name: str, mode: str, prec: str):
    @_checked(name, {"dynamic": BOOL})
    def prepare(case: Case, weights: Weights, dynamic: bool = False) -> Prepared:
        attn = "naive" if naive_fits(case, weights.device) else "sdpa"
        fn = torch.compile(_model_fn(case, weights, attn), mode=mode, dynamic=dynamic)
        return Prepared(fn, case, weights.device, name, tf32=(prec == "tf32"),
                        info={"compiled_from": "eager" if attn == "naive" else "eager_sdpa"})
    return prepare


register(Variant("eager", _prepare_eager, _run, kind="peer",
                 description="naive fp32 model, materialised scores, TF32 off"))
register(Variant("eager_sdpa", _prepare_sdpa, _run, kind="peer",
                 description="fp32 model with F.scaled_dot_product_attention"))
register(Variant("nn", _prepare_nn, _run, kind="peer",
                 description="torch.nn.TransformerEncoder (eval fast path), same weights"))
for _mode in COMPILE_MODES:
    for _prec in PRECISIONS:
        _name = f"compile_{_mode}_{_prec}"
        register(Variant(_name, _compile_preparer(_name, _mode, _prec), _run, kind="peer",
                         gated_peer=(_prec == "fp32"),
                         description=f"torch.compile(eager, mode={_mode!r}), {_prec}"))
