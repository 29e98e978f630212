"""Peers (SPEC §5): what a user would pick instead of our kernels, all fp32 unless named tf32."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .cases import Case
from .reference import fp32_matmul, model_forward, naive_fits, nn_encoder, nn_forward
from .registry import Variant, register
from .weights import Weights

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PRECISIONS = ("fp32", "tf32")


@dataclass
class Prepared:
    fn: Callable[[torch.Tensor], torch.Tensor]
    tf32: bool = False
    info: dict | None = None


def _run(p: Prepared, x: torch.Tensor) -> torch.Tensor:
    with fp32_matmul(p.tf32), torch.inference_mode():
        return p.fn(x)


def _model_fn(case: Case, weights: Weights, attn: str):
    flat = weights.flat()
    return lambda x: model_forward(x, flat, case.H, case.causal, attn=attn)


def _prepare_eager(case: Case, weights: Weights, **params) -> Prepared:
    if not naive_fits(case, weights.device):
        raise torch.cuda.OutOfMemoryError(
            f"eager materialises {case.attention_score_bytes() / 2**30:.0f} GiB of fp32 scores per layer "
            f"for {case.name}: out of memory")
    return Prepared(_model_fn(case, weights, "naive"))


def _prepare_sdpa(case: Case, weights: Weights, **params) -> Prepared:
    return Prepared(_model_fn(case, weights, "sdpa"))


def _prepare_nn(case: Case, weights: Weights, **params) -> Prepared:
    enc = nn_encoder(case, weights)
    return Prepared(lambda x: nn_forward(enc, x, case.causal))


def _compile_preparer(mode: str, prec: str):
    def prepare(case: Case, weights: Weights, dynamic: bool = False, **params) -> Prepared:
        attn = "naive" if naive_fits(case, weights.device) else "sdpa"
        fn = torch.compile(_model_fn(case, weights, attn), mode=mode, dynamic=dynamic)
        return Prepared(fn, tf32=(prec == "tf32"), info={"compiled_from": "eager" if attn == "naive" else "eager_sdpa"})
    return prepare


register(Variant("eager", _prepare_eager, _run, kind="peer",
                 description="naive fp32 model, materialised scores, TF32 off"))
register(Variant("eager_sdpa", _prepare_sdpa, _run, kind="peer",
                 description="fp32 model with F.scaled_dot_product_attention"))
register(Variant("nn", _prepare_nn, _run, kind="peer",
                 description="torch.nn.TransformerEncoder (eval fast path), same weights"))
for _mode in COMPILE_MODES:
    for _prec in PRECISIONS:
        register(Variant(f"compile_{_mode}_{_prec}", _compile_preparer(_mode, _prec), _run, kind="peer",
                         gated_peer=(_prec == "fp32"),
                         description=f"torch.compile(eager, mode={_mode!r}), {_prec}"))
